"""Agent scenario files: strict YAML parsing of request types that are DAGs of tool and LLM
nodes sharing capacity-limited resources (issue 26; limits in docs/limits.md "Agent
scenarios").

Format (units explicit: a resource's capacity is in units per second, a tool's work in
units, so a tool alone on a resource takes work / capacity seconds)::

    resources:                      # name -> capacity, or a mapping
      cpu: 1000                     # units per second
      network: {capacity: 10000, max_consumers: 64, unit: MB/s}
    types:                          # request types
      web-search:
        weight: 1                   # fair-share weight of its tools: an integer >= 1 (default 1)
        nodes:                      # node name -> a tool (work) or an LLM call (llm)
          plan: {llm: {model: m, prompt_tokens: 800, output_tokens: {type: exponential, mean: 100}}}
          fetch: {work: {network: 50, cpu: {type: lognormal, p50: 2, p90: 8}}, after: [plan]}
          answer: {llm: {model: m, prompt_tokens: 300, output_tokens: 200,
                         include_predecessor_outputs: true}, after: [fetch]}
    prefix_groups: {...}            # optional, as in a workload spec (for llm prefix_group)
    arrivals: {web-search: 100}     # type -> Poisson rate, requests per minute
    duration_s: 3600                # arrivals in [0, duration_s)
    seed: 42                        # run k uses seed + k
    runs: 10
    share: dynamic                  # dynamic | static (docs: the fair-share modes)
    cluster: cluster.yaml           # the simulated LLM cluster the llm nodes are sent to: a
                                    # simulator config YAML path or an inline mapping of one

``work`` values and llm token counts are the workload spec's length distributions
(``blis_fast.workload.spec.parse_distribution``: a number or ``{type: ..., ...}``).  A node
starts when every node in its ``after`` list has finished; nodes without ``after`` are the
roots, started at the request's arrival.  Each type's nodes are renumbered in a
topological order (ready nodes in declaration order): ``AgentType.nodes[k].index == k`` and
every predecessor has a smaller index.

Every problem raises ``ConfigError(field, message)`` (spec distributions raise its subclass
``WorkloadError``) whose field is the YAML path (``types.deep-research.nodes.summarize.after``).
The served models are checked by ``check_models`` once the cluster is known.

``cluster:`` is kept as given (an inline mapping) or as a path (resolved against the
scenario file's directory) and only turned into a simulator config by ``cluster_config``
/ ``cluster_setup``, so a tools-only scenario never loads the config machinery.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blis_fast.config.validate import (
    INT32_MAX,
    INT64_MAX,
    MAX_REQUESTS,
    as_bool,
    as_choice,
    as_float,
    as_int,
    as_list,
    as_mapping,
    as_str,
    key_name,
    show_text,
    show,
)
from blis_fast.errors import ConfigError
from blis_fast.workload.spec import (
    DEFAULT_SEED,
    MAX_NAME_LEN,
    MAX_SECONDS,
    TOKEN_CAP,
    Distribution,
    PrefixGroupSpec,
    parse_distribution,
    parse_prefix_group,
)

# ----------------------------------------------------------------------------- limits (docs/limits.md "Agent scenarios")

MAX_RESOURCES = 64
MAX_TYPES = 1000
MAX_NODES_PER_TYPE = 1000
MAX_TEMPLATE_NODES = 100_000  # nodes of all types together
MAX_PREFIX_GROUPS = 1000
MAX_CAPACITY = 1e15  # units per second
MAX_WORK = 1e15  # units, per node and resource
MAX_RATE_PER_MIN = 6e7  # requests per minute of one type (10^6 per second)
MAX_DURATION_S = MAX_SECONDS
MAX_RUNS = 10_000
MAX_WEIGHT = 1_000_000  # an integer weight (the fair share's weight sums stay exact)
MAX_CONSUMERS = INT32_MAX
MAX_AGENT_REQUESTS = MAX_REQUESTS  # expected requests of one run
MAX_AGENT_NODES = MAX_REQUESTS  # expected nodes of one run (all types' requests x their nodes)
MAX_CLUSTER_PATH_LEN = 4096  # characters of the cluster: path (a file name, not a document)

SHARE_MODES = ("dynamic", "static")

_TOP_KEYS = ("name", "description", "resources", "types", "prefix_groups", "arrivals", "duration_s", "seed", "runs",
             "share", "cluster")
_RESOURCE_KEYS = ("capacity", "max_consumers", "unit", "description")
_TYPE_KEYS = ("nodes", "weight", "description")
_NODE_KEYS = ("work", "llm", "after", "description")
_LLM_KEYS = ("model", "prompt_tokens", "output_tokens", "prefix_group", "include_predecessor_outputs")


# ----------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True, eq=False)
class Resource:
    """A shared resource: ``capacity`` units per second split fairly among its consumers;
    with ``max_consumers`` at most that many consume it at once (the rest queue)."""

    name: str
    index: int
    path: str
    capacity: float
    max_consumers: int | None
    unit: str | None


@dataclass(frozen=True, eq=False)
class LlmCall:
    """An LLM node: one request to served model ``model``.  Its prompt is ``prompt_tokens``
    (plus the output tokens of its direct llm predecessors with
    ``include_predecessor_outputs``); ``prefix_group`` names one of the scenario's
    ``prefix_groups`` shared by the prompt."""

    model: str
    path: str
    prompt_tokens: Distribution
    output_tokens: Distribution
    prefix_group: str | None
    include_predecessor_outputs: bool


@dataclass(frozen=True, eq=False)
class AgentNode:
    """One node of a request type: a tool (``work``: resource index -> units) or an LLM
    call (``llm``).  ``index`` is its topological position in the type; ``after`` the
    indices of its predecessors, ``successors`` those of the nodes that wait for it."""

    name: str
    index: int
    path: str
    after: tuple[int, ...]
    successors: tuple[int, ...]
    work: dict[int, Distribution]
    llm: LlmCall | None

    @property
    def is_llm(self) -> bool:
        """True for an LLM call, False for a tool."""
        return self.llm is not None


@dataclass(frozen=True, eq=False)
class AgentType:
    """A request type: its DAG (``nodes`` in topological order), fair-share ``weight`` (an integer) and
    Poisson arrival rate (requests per minute, 0 when ``arrivals`` does not name it)."""

    name: str
    index: int
    path: str
    weight: int
    nodes: tuple[AgentNode, ...]
    rate_per_min: float

    def node(self, name: str) -> AgentNode:
        """The node called ``name`` (KeyError if none)."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)


@dataclass(frozen=True, eq=False)
class Scenario:
    """A validated agent scenario."""

    name: str | None
    resources: tuple[Resource, ...]
    types: tuple[AgentType, ...]
    prefix_groups: dict[str, PrefixGroupSpec]
    duration_s: float
    seed: int
    runs: int
    share: str
    raw: dict = field(repr=False, default_factory=dict)
    source: str | None = None
    # the simulated cluster of the llm nodes: a simulator config YAML path (resolved against
    # the scenario file's directory), an inline mapping of one, or None (``cluster_config``)
    cluster: dict | str | None = None

    def run_seed(self, run_index: int) -> int:
        """The seed of run ``run_index`` (0-based): seed + run_index."""
        return self.seed + run_index

    def models(self) -> list[str]:
        """The served models the llm nodes ask for, in first-use order."""
        out: dict[str, None] = {}
        for t in self.types:
            for n in t.nodes:
                if n.llm is not None:
                    out.setdefault(n.llm.model)
        return list(out)

    def llm_nodes(self) -> list[AgentNode]:
        """The llm nodes of every type, in type then node order."""
        return [n for t in self.types for n in t.nodes if n.llm is not None]

    def expected_size(self) -> tuple[float, float]:
        """(requests, nodes) one run is expected to generate (Poisson means; nothing drawn)."""
        requests = math.fsum(t.rate_per_min / 60.0 * self.duration_s for t in self.types)
        nodes = math.fsum(t.rate_per_min / 60.0 * self.duration_s * len(t.nodes) for t in self.types)
        return requests, nodes


# ----------------------------------------------------------------------------- helpers


def _join(path: str, key: Any) -> str:
    return f"{path}.{key_name(key)}" if path else key_name(key)


def _name(value: Any, path: str) -> str:
    """A name (a mapping key or a reference): a non-empty string of at most MAX_NAME_LEN."""
    return as_str(value, path, max_len=MAX_NAME_LEN)


def _entries(value: Any, path: str, what: str, max_len: int) -> dict:
    """A non-empty mapping of at most ``max_len`` named entries."""
    d = as_mapping(value, path, what=f"a mapping of {what}")
    if not d:
        raise ConfigError(path, f"must be a non-empty mapping of {what}")
    if len(d) > max_len:
        raise ConfigError(path, f"must hold at most {max_len} {what}, got {len(d)}")
    for k in d:
        _name(k, _join(path, k))
    return d


def _check_description(d: dict, path: str) -> None:
    """A ``description`` (free text, for the reader) must be a string when given."""
    if d.get("description") is not None:
        as_str(d["description"], _join(path, "description"), nonempty=False)


def _refuse_negative(dist: Distribution, path: str, what: str) -> None:
    """Refuse a distribution whose given values are negative (the spec's parser clamps
    them to ``min``; a negative work or count is a mistake, not something to clamp)."""
    if dist.type == "constant" and dist.value < 0:
        raise ConfigError(path, f"must be >= 0 ({what}), got {dist.value:g}")
    if dist.type == "gaussian" and dist.mean < 0:
        raise ConfigError(_join(path, "mean"), f"must be >= 0 ({what}), got {dist.mean:g}")
    if dist.values is not None and dist.values.size and float(dist.values.min()) < 0:
        raise ConfigError(path, f"values must be >= 0 ({what}), got {float(dist.values.min()):g}")


# ----------------------------------------------------------------------------- parts


def _parse_resources(value: Any) -> tuple[Resource, ...]:
    d = _entries(value, "resources", "resources (name: capacity in units per second)", MAX_RESOURCES)
    out = []
    for i, (name, v) in enumerate(d.items()):
        path = _join("resources", name)
        spec = v if isinstance(v, dict) else {"capacity": v}
        spec = as_mapping(spec, path, _RESOURCE_KEYS)
        _check_description(spec, path)
        cap_path = _join(path, "capacity") if isinstance(v, dict) else path
        if spec.get("capacity") is None:
            raise ConfigError(cap_path, "is required: the resource's capacity (units per second, > 0)")
        capacity = as_float(spec["capacity"], cap_path, 0, MAX_CAPACITY, lo_open=True, text=False,
                            unit="units per second")
        cap = spec.get("max_consumers")
        max_consumers = None if cap is None else as_int(cap, _join(path, "max_consumers"), 1, MAX_CONSUMERS,
                                                        text=False, integral_float=False)
        unit = None if spec.get("unit") is None else _name(spec["unit"], _join(path, "unit"))
        out.append(Resource(name, i, path, capacity, max_consumers, unit))
    return tuple(out)


def _parse_llm(value: Any, path: str, groups: dict[str, PrefixGroupSpec], base: Path | None) -> LlmCall:
    d = as_mapping(value, path, _LLM_KEYS)
    for k in ("model", "prompt_tokens", "output_tokens"):
        if d.get(k) is None:
            raise ConfigError(_join(path, k), "is required (an llm node: model, prompt_tokens, output_tokens)")
    model = _name(d["model"], _join(path, "model"))
    prompt = parse_distribution(d["prompt_tokens"], _join(path, "prompt_tokens"), floor=1, cap=TOKEN_CAP, base=base)
    output = parse_distribution(d["output_tokens"], _join(path, "output_tokens"), floor=0, cap=TOKEN_CAP, base=base)
    _refuse_negative(prompt, _join(path, "prompt_tokens"), "tokens")
    _refuse_negative(output, _join(path, "output_tokens"), "tokens")
    group = None
    if d.get("prefix_group") is not None:
        group = _name(d["prefix_group"], _join(path, "prefix_group"))
        if group not in groups:
            raise ConfigError(_join(path, "prefix_group"), f"unknown prefix group {show(group)}; defined under "
                                                           f"prefix_groups: {', '.join(groups) or 'none'}")
    include = d.get("include_predecessor_outputs")
    include = False if include is None else as_bool(include, _join(path, "include_predecessor_outputs"), text=False)
    return LlmCall(model, path, prompt, output, group, include)


def _parse_work(value: Any, path: str, resources: dict[str, int], base: Path | None) -> dict[int, Distribution]:
    d = as_mapping(value, path, what="a mapping {resource: work in units}")
    if not d:
        raise ConfigError(path, "must name at least one resource (resource: work in units)")
    out: dict[int, Distribution] = {}
    for res, w in d.items():
        rp = _join(path, res)
        if res not in resources:
            raise ConfigError(rp, f"unknown resource {show(res)}; defined under resources: {', '.join(resources)}")
        dist = parse_distribution(w, rp, floor=0, cap=MAX_WORK, base=base)
        _refuse_negative(dist, rp, "work, units")
        out[resources[res]] = dist
    return out


def _find_cycle(after: dict[str, list[str]], left: set[str]) -> list[str]:
    """A cycle among the nodes ``left`` (each still waits for a predecessor in ``left``),
    as node names in edge order (predecessor first), the first node repeated at the end."""
    start = next(n for n in after if n in left)  # the first left node in declaration order
    seen: dict[str, int] = {}
    walk = []
    node = start
    while node not in seen:  # follow 'after' links: every left node has a left predecessor
        seen[node] = len(walk)
        walk.append(node)
        node = next(p for p in after[node] if p in left)
    loop = walk[seen[node]:] + [node]
    return loop[::-1]  # 'after' links point backwards along the edges


def _topological_order(names: list[str], after: dict[str, list[str]], path: str) -> list[str]:
    """``names`` in a topological order, ready nodes taken in declaration order; a cycle
    raises at the ``after`` of a node on it, naming the cycle."""
    position = {n: k for k, n in enumerate(names)}
    pending = {n: len(after[n]) for n in names}
    successors: dict[str, list[str]] = {n: [] for n in names}
    for n in names:
        for p in after[n]:
            successors[p].append(n)
    ready = [position[n] for n in names if pending[n] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        n = names[heapq.heappop(ready)]
        order.append(n)
        for s in successors[n]:
            pending[s] -= 1
            if pending[s] == 0:
                heapq.heappush(ready, position[s])
    if len(order) < len(names):
        left = {n for n in names if pending[n] > 0}
        cycle = _find_cycle(after, left)
        raise ConfigError(_join(_join(_join(path, "nodes"), cycle[0]), "after"),
                          f"node {show(cycle[0])} is on a cycle: {' -> '.join(key_name(c) for c in cycle)}")
    return order


def _parse_type(name: str, index: int, value: Any, path: str, resources: dict[str, int],
                groups: dict[str, PrefixGroupSpec], base: Path | None) -> AgentType:
    d = as_mapping(value, path, _TYPE_KEYS)
    _check_description(d, path)
    if d.get("nodes") is None:
        raise ConfigError(_join(path, "nodes"), "is required: the type's nodes (name: {work | llm, after})")
    # an integer: the fair share sums the weights of a resource's consumers, exact only in integers
    weight = 1 if d.get("weight") is None else as_int(d["weight"], _join(path, "weight"), 1, MAX_WEIGHT, text=False,
                                                        integral_float=False)
    raw_nodes = _entries(d["nodes"], _join(path, "nodes"), "nodes", MAX_NODES_PER_TYPE)
    names = list(raw_nodes)
    after: dict[str, list[str]] = {}
    parsed: dict[str, tuple[dict, LlmCall | None]] = {}
    for n, v in raw_nodes.items():
        npath = _join(_join(path, "nodes"), n)
        nd = as_mapping(v, npath, _NODE_KEYS)
        _check_description(nd, npath)
        has_work, has_llm = nd.get("work") is not None, nd.get("llm") is not None
        if has_work == has_llm:
            raise ConfigError(npath, "give exactly one of work (a tool: {resource: units}) or llm (a model call)")
        work = _parse_work(nd["work"], _join(npath, "work"), resources, base) if has_work else {}
        llm = _parse_llm(nd["llm"], _join(npath, "llm"), groups, base) if has_llm else None
        apath = _join(npath, "after")
        preds = [] if nd.get("after") is None else as_list(nd["after"], apath, max_len=MAX_NODES_PER_TYPE,
                                                           what="a list of node names")
        preds = [_name(p, f"{apath}[{k}]") for k, p in enumerate(preds)]
        for p in preds:
            if p not in raw_nodes:
                raise ConfigError(apath, f"unknown predecessor {show(p)}; nodes of {key_name(name)}: "
                                         f"{show_text(', '.join(names), 200)}")
        if len(set(preds)) != len(preds):
            raise ConfigError(apath, "names a predecessor twice")
        after[n] = preds
        parsed[n] = (work, llm)
    order = _topological_order(names, after, path)
    topo = {n: k for k, n in enumerate(order)}
    succ: dict[str, list[int]] = {n: [] for n in order}
    for n in order:
        for p in after[n]:
            succ[p].append(topo[n])
    nodes = tuple(
        AgentNode(name=n, index=k, path=_join(_join(path, "nodes"), n),
                  after=tuple(sorted(topo[p] for p in after[n])), successors=tuple(sorted(succ[n])),
                  work=parsed[n][0], llm=parsed[n][1])
        for k, n in enumerate(order))
    return AgentType(name, index, path, weight, nodes, 0.0)


def _parse_prefix_groups(value: Any, base: Path | None) -> dict[str, PrefixGroupSpec]:
    if value is None:
        return {}
    d = _entries(value, "prefix_groups", "prefix groups (name: {count, length, popularity})", MAX_PREFIX_GROUPS)
    return {name: parse_prefix_group(v, _join("prefix_groups", name), name, f"agents.prefix_group.{name}", base)
            for name, v in d.items()}


def _parse_cluster(value: Any, base: Path | None) -> dict | str | None:
    """``cluster:``: a simulator config YAML path (relative paths are relative to ``base``,
    the scenario file's directory) or an inline mapping of one, kept unparsed here (the
    config is built by ``cluster_config``); None when absent."""
    if value is None:
        return None
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):
        raise ConfigError("cluster", f"must be a simulator config YAML path or a mapping of its settings, got "
                                     f"{show(value)}")
    path = Path(as_str(value, "cluster", max_len=MAX_CLUSTER_PATH_LEN))
    if base is not None and not path.is_absolute():
        path = base / path
    return str(path)


def _parse_arrivals(value: Any, types: dict[str, int]) -> dict[str, float]:
    d = as_mapping(value, "arrivals", what="a mapping {type: requests per minute}")
    if not d:
        raise ConfigError("arrivals", "must give at least one type's rate (type: requests per minute)")
    out = {}
    for t, rate in d.items():
        p = _join("arrivals", t)
        if t not in types:
            raise ConfigError(p, f"unknown request type {show(t)}; defined under types: "
                                 f"{show_text(', '.join(types), 200)}")
        out[t] = as_float(rate, p, 0, MAX_RATE_PER_MIN, text=False, unit="requests per minute")
    return out


# ----------------------------------------------------------------------------- entry points


def parse_scenario(data: Any, base_dir: str | Path | None = None, source: str | None = None) -> Scenario:
    """Validate a scenario given as a dict (the parsed YAML).  Files named inside it
    (empirical distributions) are relative to ``base_dir``."""
    base = Path(base_dir) if base_dir is not None else None
    d = as_mapping(data, "", _TOP_KEYS, what="a mapping of scenario settings")
    for k in ("resources", "types", "arrivals", "duration_s"):
        if d.get(k) is None:
            raise ConfigError(k, "is required (a scenario: resources, types, arrivals, duration_s)")
    name = None if d.get("name") is None else as_str(d["name"], "name", max_len=MAX_NAME_LEN)
    _check_description(d, "")
    resources = _parse_resources(d["resources"])
    groups = _parse_prefix_groups(d.get("prefix_groups"), base)
    raw_types = _entries(d["types"], "types", "request types", MAX_TYPES)
    total_nodes = sum(len(v["nodes"]) for v in raw_types.values()
                      if isinstance(v, dict) and isinstance(v.get("nodes"), dict))
    if total_nodes > MAX_TEMPLATE_NODES:
        raise ConfigError("types", f"must hold at most {MAX_TEMPLATE_NODES} nodes in all, got {total_nodes}")
    res_index = {r.name: r.index for r in resources}
    types = [_parse_type(t, k, v, _join("types", t), res_index, groups, base)
             for k, (t, v) in enumerate(raw_types.items())]
    rates = _parse_arrivals(d["arrivals"], {t.name: t.index for t in types})
    types = [AgentType(t.name, t.index, t.path, t.weight, t.nodes, rates.get(t.name, 0.0)) for t in types]
    duration = as_float(d["duration_s"], "duration_s", 0, MAX_DURATION_S, lo_open=True, text=False, unit="s")
    seed = DEFAULT_SEED if d.get("seed") is None else as_int(d["seed"], "seed", 0, INT64_MAX, text=False,
                                                             integral_float=False)
    runs = 1 if d.get("runs") is None else as_int(d["runs"], "runs", 1, MAX_RUNS, text=False, integral_float=False)
    if seed + runs - 1 > INT64_MAX:
        raise ConfigError("seed", f"seed + runs - 1 must be <= 2^63-1 (run k uses seed + k), got {show(seed)}")
    share = "dynamic" if d.get("share") is None else as_choice(d["share"], "share", SHARE_MODES)
    cluster = _parse_cluster(d.get("cluster"), base)
    scenario = Scenario(name=name, resources=resources, types=tuple(types), prefix_groups=groups,
                        duration_s=duration, seed=seed, runs=runs, share=share, raw=data, source=source,
                        cluster=cluster)
    requests, nodes = scenario.expected_size()
    if requests > MAX_AGENT_REQUESTS:
        raise ConfigError("arrivals", f"the rates over duration_s ({duration:g} s) give about {requests:.3g} requests "
                                      f"per run, more than {MAX_AGENT_REQUESTS}")
    if nodes > MAX_AGENT_NODES:
        raise ConfigError("arrivals", f"the rates over duration_s ({duration:g} s) give about {nodes:.3g} nodes "
                                      f"per run, more than {MAX_AGENT_NODES}")
    return scenario


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML file (files it names are relative to it)."""
    from blis_fast.config.yamlfile import read_yaml_mapping  # deferred: yaml

    p = Path(path)
    data = read_yaml_mapping(p, "--scenario", ConfigError)
    return parse_scenario(data, base_dir=p.resolve().parent, source=str(p))


def check_models(scenario: Scenario, served: Iterable[str]) -> None:
    """Refuse an llm node whose model no deployment serves: ``ConfigError`` at
    ``types.T.nodes.N.llm.model`` naming the served models."""
    served = list(served)
    known = set(served)
    for t in scenario.types:
        for n in t.nodes:
            if n.llm is not None and n.llm.model not in known:
                raise ConfigError(_join(n.llm.path, "model"),
                                  f"model {show(n.llm.model)} is not served; served: "
                                  f"{show_text(', '.join(served), 200) if served else 'none'}")


def _cluster_source(scenario: Scenario, override: Any) -> tuple[Any, str | None]:
    """(what the cluster is given as, the field prefix its config's errors get): ``override``
    (``--config``: its errors read as a run's do) when given, else the scenario's ``cluster:``."""
    if override is not None:
        return override, None
    if scenario.cluster is None:
        llm = scenario.llm_nodes()
        if llm:
            raise ConfigError("cluster", f"is required: the llm nodes (first: {llm[0].path}) are sent to it; give a "
                                         "simulator config YAML path or an inline mapping of one (or --config)")
        raise ConfigError("cluster", "is not given (a simulator config YAML path or an inline mapping of one)")
    if isinstance(scenario.cluster, str):
        return scenario.cluster, f"cluster {show(scenario.cluster)}:"
    return scenario.cluster, "cluster."


def cluster_setup(scenario: Scenario, override: Any = None):
    """The resolved cluster (``blis_fast.run.resolve.Setup``; its ``config`` is the
    SimConfig) the scenario's llm nodes are sent to: ``override`` (a config YAML path, a
    mapping or a SimConfig: the CLI's ``--config``) or else the scenario's ``cluster:``.
    Every llm node's model must be served by it (``check_models``).  Errors are
    ``ConfigError``: a config problem names ``cluster.<field>`` (inline) or ``cluster
    '<file>': <field>``."""
    # the simulator config machinery is needed only by scenarios with llm nodes: a tools-only
    # run never loads it
    from blis_fast.config.sim import SimConfig  # deferred: the simulator config machinery
    from blis_fast.config.yamlfile import read_yaml_mapping  # deferred: yaml
    from blis_fast.run.api import as_config  # deferred: the simulator config machinery
    from blis_fast.run.resolve import resolve  # deferred: the shipped model and hardware data

    given, prefix = _cluster_source(scenario, override)
    try:
        if isinstance(given, (str, Path)):
            given = read_yaml_mapping(Path(given), "--config" if prefix is None else "cluster", ConfigError)
        elif not isinstance(given, (dict, SimConfig)):
            raise ConfigError("--config" if prefix is None else "cluster",
                              f"must be a simulator config YAML path or a mapping of its settings, got {show(given)}")
        setup = resolve(as_config(given))
    except ConfigError as e:
        if prefix is None or e.field.startswith("cluster"):
            raise
        raise type(e)(f"{prefix}{e.field}" if prefix.endswith(".") else f"{prefix} {e.field}", e.message) from None
    check_models(scenario, setup.served_models)
    return setup


def cluster_config(scenario: Scenario, override: Any = None):
    """The SimConfig of the cluster the scenario's llm nodes are sent to (``cluster_setup``)."""
    return cluster_setup(scenario, override).config


__all__ = [
    "MAX_RESOURCES", "MAX_TYPES", "MAX_NODES_PER_TYPE", "MAX_TEMPLATE_NODES", "MAX_PREFIX_GROUPS", "MAX_CAPACITY",
    "MAX_WORK", "MAX_RATE_PER_MIN", "MAX_DURATION_S", "MAX_RUNS", "MAX_WEIGHT", "MAX_CONSUMERS",
    "MAX_AGENT_REQUESTS", "MAX_AGENT_NODES", "SHARE_MODES", "Resource", "LlmCall", "AgentNode", "AgentType",
    "MAX_CLUSTER_PATH_LEN", "Scenario", "parse_scenario", "load_scenario", "check_models", "cluster_setup",
    "cluster_config",
]
