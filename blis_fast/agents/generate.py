"""The arrays of one run of an agent scenario: its requests and their nodes, drawn up front.

Two parts: ``build_templates(scenario)`` -- what every run shares (the types' DAGs, the
resources) -- and ``generate_run(scenario, run_index)`` -- one run's draws.  Units: times
are integer µs (the simulator's clock), work is float64 in the scenario's units, a
resource's capacity float64 units per second (a tool alone on a resource of capacity C
with work w there takes w / C seconds).

``AgentTemplates`` (G = template nodes of all types, T types, R resources):
- ``type_node_offset`` int32[T+1]: type t's nodes are templates type_node_offset[t] ..
  type_node_offset[t+1]-1, node k of the type (its topological index, ``AgentNode.index``)
  being template type_node_offset[t] + k;
- ``template_n_pred`` int32[G]: predecessors of each template node (0: a root);
- ``template_is_llm`` bool[G];
- successors as CSR over templates, in *local* node indices: the successors of template g
  are ``template_succ[template_succ_offset[g]:template_succ_offset[g+1]]`` (int32);
- ``type_weight`` int64[T] (fair-share weight, an integer >= 1), ``resource_capacity`` float64[R] (units
  per second), ``resource_max_consumers`` int64[R] (-1: no cap).

``AgentRun`` (Q requests, N nodes):
- ``request_type`` int32[Q], ``request_arrival_us`` int64[Q]: sorted by (arrival µs, type,
  index within the type); each type's arrivals are a Poisson process of its rate over
  [0, duration_s), rounded to the nearest µs;
- ``request_first_node`` int64[Q+1]: request q's nodes are rows request_first_node[q] ..
  request_first_node[q+1]-1, in its type's topological order (row first + k is node k of the
  type): every predecessor of a node is an earlier row of the same request;
- ``node_request`` int64[N], ``node_template`` int32[N] (the node's index in its type),
  ``node_n_pred`` int32[N] (its predecessors: the pending count an event loop copies and
  decrements; roots, 0, start at the request's arrival);
- ``node_work`` float64[N, R]: units of work per resource (0: it does not use it; llm rows
  are all 0) -- dense, since R is small (<= 64, docs/limits.md);
- ``node_prompt_tokens`` / ``node_output_tokens`` int64[N]: an llm node's lengths, -1 for a
  tool; with ``include_predecessor_outputs`` the prompt already holds the output tokens of
  the node's direct llm predecessors (exact: every length is drawn up front);
- ``node_prefix_group`` int32[N] (index into ``Scenario.prefix_groups``, -1: none) and
  ``node_prefix_index`` int32[N] (which of the group's prefixes, by its popularity, -1).

An event loop: at a request's arrival start its roots; when node i finishes, for each
template successor s of (type, node_template[i]) decrement the pending count of row
request_first_node[node_request[i]] + s and start it at 0; the request ends when its last
node finishes.  ``successors_csr`` expands the successors per node where that is simpler.

Randomness: run k draws from seed + k (``Scenario.run_seed``) through named streams
(``blis_fast.workload.generate.Streams``): type T's arrivals from ``agents.type.T.arrivals``,
node N's draws from ``agents.type.T.node.N.<quantity>`` (``work.<resource>``,
``prompt_tokens``, ``output_tokens``, ``prefix``), so adding a type or a node does not change
the others' draws, and a run depends only on the scenario and its index.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from blis_fast.config import memory
from blis_fast.config.validate import MAX_REQUEST_TOKENS, fmt_num, key_name
from blis_fast.errors import ConfigError
from blis_fast.workload import sampling as S
from blis_fast.workload.distribution import round_half_away
from blis_fast.workload.generate import Streams, sample

from blis_fast.agents.scenario import MAX_AGENT_NODES, MAX_AGENT_REQUESTS, AgentType, Scenario

NODE_BYTES_FIXED = 8 * 4 + 4 * 4 + 8 * 2  # a node's fixed columns, its successor entry and temporaries
REQUEST_BYTES = 4 + 8 + 8 + 8 * 3  # a request's columns and the merge's temporaries


@dataclass(frozen=True, eq=False)
class AgentTemplates:
    """What every run of a scenario shares (layout: the module docstring)."""

    type_node_offset: np.ndarray
    template_n_pred: np.ndarray
    template_is_llm: np.ndarray
    template_succ_offset: np.ndarray
    template_succ: np.ndarray
    type_weight: np.ndarray
    resource_capacity: np.ndarray
    resource_max_consumers: np.ndarray


@dataclass(frozen=True, eq=False)
class AgentRun:
    """One run's requests and nodes (layout: the module docstring)."""

    run_index: int
    seed: int
    request_type: np.ndarray
    request_arrival_us: np.ndarray
    request_first_node: np.ndarray
    node_request: np.ndarray
    node_template: np.ndarray
    node_n_pred: np.ndarray
    node_work: np.ndarray
    node_prompt_tokens: np.ndarray
    node_output_tokens: np.ndarray
    node_prefix_group: np.ndarray
    node_prefix_index: np.ndarray

    @property
    def num_requests(self) -> int:
        """Requests of the run."""
        return int(self.request_type.size)

    @property
    def num_nodes(self) -> int:
        """Nodes of all its requests."""
        return int(self.node_request.size)


def build_templates(scenario: Scenario) -> AgentTemplates:
    """The scenario's DAG templates and resources as arrays."""
    sizes = [len(t.nodes) for t in scenario.types]
    offset = np.zeros(len(sizes) + 1, dtype=np.int32)
    offset[1:] = np.cumsum(sizes)
    nodes = [n for t in scenario.types for n in t.nodes]
    degree = np.array([len(n.successors) for n in nodes], dtype=np.int32)
    succ_offset = np.zeros(len(nodes) + 1, dtype=np.int32)
    succ_offset[1:] = np.cumsum(degree)
    succ = np.array([s for n in nodes for s in n.successors], dtype=np.int32)
    return AgentTemplates(
        type_node_offset=offset,
        template_n_pred=np.array([len(n.after) for n in nodes], dtype=np.int32),
        template_is_llm=np.array([n.is_llm for n in nodes], dtype=np.bool_),
        template_succ_offset=succ_offset,
        template_succ=succ,
        type_weight=np.array([t.weight for t in scenario.types], dtype=np.int64),
        resource_capacity=np.array([r.capacity for r in scenario.resources], dtype=np.float64),
        resource_max_consumers=np.array([-1 if r.max_consumers is None else r.max_consumers
                                         for r in scenario.resources], dtype=np.int64),
    )


def _poisson_arrivals_s(rate_per_s: float, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """A Poisson process's times in (0, duration_s): cumulative exponential gaps drawn in
    chunks (the sum carries over, so the chunking does not change the times)."""
    if rate_per_s <= 0:
        return np.empty(0)
    expected = rate_per_s * duration_s
    size = int(min(max(expected * 1.05 + 10 * math.sqrt(expected) + 64, 64), 1 << 24))
    out, last = [], 0.0
    while last < duration_s:
        t = np.cumsum(np.concatenate(([last], S.poisson_gaps(rng, size, rate_per_s))))[1:]
        last = float(t[-1])
        out.append(t)
    times = np.concatenate(out)
    return times[times < duration_s]


def _type_draws(t: AgentType, n: int, streams: Streams, scenario: Scenario) -> dict:
    """Type ``t``'s node draws for its ``n`` requests: (node, resource) -> work[n];
    node -> (prompt[n], output[n]) for llm nodes; node -> prefix index[n]."""
    work, lengths, prefix = {}, {}, {}
    for node in t.nodes:
        ns = streams.sub(f"node.{node.name}")
        for r, dist in node.work.items():
            work[node.index, r] = sample(dist, n, ns, f"work.{scenario.resources[r].name}", integer=False)
        if node.llm is None:
            continue
        prompt = sample(node.llm.prompt_tokens, n, ns, "prompt_tokens", integer=True)
        output = sample(node.llm.output_tokens, n, ns, "output_tokens", integer=True)
        if node.llm.include_predecessor_outputs:
            for p in node.after:
                if t.nodes[p].llm is not None:
                    prompt = prompt + lengths[p][1]  # predecessors come first: topological order
        if n and int((prompt + output).max()) > MAX_REQUEST_TOKENS:
            raise ConfigError(f"{node.llm.path}.prompt_tokens",
                              f"prompt (with its predecessors' outputs) + output reach "
                              f"{int((prompt + output).max())} tokens, more than {fmt_num(MAX_REQUEST_TOKENS)}")
        lengths[node.index] = (prompt, output)
        if node.llm.prefix_group is not None:
            group = scenario.prefix_groups[node.llm.prefix_group]
            prefix[node.index] = S.sample_discrete(ns("prefix"), n, np.arange(group.count, dtype=np.int32),
                                                   group.popularity)
    return {"work": work, "lengths": lengths, "prefix": prefix}


def generate_run(scenario: Scenario, run_index: int = 0) -> AgentRun:
    """Run ``run_index``'s requests and nodes (deterministic in the scenario and the index)."""
    if not 0 <= run_index < scenario.runs:
        raise ConfigError("runs", f"run index must be in [0, {scenario.runs - 1}], got {run_index}")
    requests, nodes = scenario.expected_size()
    memory.check(requests * REQUEST_BYTES + nodes * (NODE_BYTES_FIXED + 8 * len(scenario.resources)),
                 f"agent scenario: {requests:.3g} expected requests with {nodes:.3g} nodes",
                 "shorten duration_s or lower the arrival rates")
    seed = scenario.run_seed(run_index)
    per_type = []
    for t in scenario.types:
        streams = Streams(seed, f"agents.type.{t.name}")
        times_s = _poisson_arrivals_s(t.rate_per_min / 60.0, scenario.duration_s, streams("arrivals"))
        if times_s.size > MAX_AGENT_REQUESTS:
            raise ConfigError(f"arrivals.{key_name(t.name)}", f"gives more than {MAX_AGENT_REQUESTS} requests in a run")
        per_type.append((round_half_away(times_s * 1e6).astype(np.int64),
                         _type_draws(t, times_s.size, streams, scenario)))
    return _assemble(scenario, run_index, seed, per_type)


def _assemble(scenario: Scenario, run_index: int, seed: int, per_type: list) -> AgentRun:
    """Merge the types' requests by arrival and lay their nodes out (module docstring)."""
    arrivals = np.concatenate([a for a, _ in per_type]) if per_type else np.empty(0, np.int64)
    types = np.concatenate([np.full(a.size, k, dtype=np.int32) for k, (a, _) in enumerate(per_type)])
    within = np.concatenate([np.arange(a.size, dtype=np.int64) for a, _ in per_type])
    order = np.lexsort((within, types, arrivals))
    request_type = types[order]
    request_arrival_us = arrivals[order].astype(np.int64)
    sizes = np.array([len(t.nodes) for t in scenario.types], dtype=np.int64)
    counts = sizes[request_type]
    first = np.zeros(request_type.size + 1, dtype=np.int64)
    first[1:] = np.cumsum(counts)
    n_nodes = int(first[-1])
    if n_nodes > MAX_AGENT_NODES:
        raise ConfigError("arrivals", f"the run has {n_nodes} nodes, more than {MAX_AGENT_NODES}")
    node_request = np.repeat(np.arange(request_type.size, dtype=np.int64), counts)
    node_template = (np.arange(n_nodes, dtype=np.int64) - first[node_request]).astype(np.int32)
    templates = build_templates(scenario)
    node_n_pred = templates.template_n_pred[templates.type_node_offset[request_type[node_request]] + node_template]
    work = np.zeros((n_nodes, len(scenario.resources)), dtype=np.float64)
    prompt = np.full(n_nodes, -1, dtype=np.int64)
    output = np.full(n_nodes, -1, dtype=np.int64)
    group = np.full(n_nodes, -1, dtype=np.int32)
    prefix = np.full(n_nodes, -1, dtype=np.int32)
    group_ids = {name: k for k, name in enumerate(scenario.prefix_groups)}
    for k, (t, (_, draws)) in enumerate(zip(scenario.types, per_type)):
        base = first[:-1][request_type == k]  # this type's requests in their own (arrival) order
        for (j, r), w in draws["work"].items():
            work[base + j, r] = w
        for j, (p, o) in draws["lengths"].items():
            prompt[base + j], output[base + j] = p, o
        for j, idx in draws["prefix"].items():
            group[base + j] = group_ids[t.nodes[j].llm.prefix_group]
            prefix[base + j] = idx
    return AgentRun(run_index=run_index, seed=seed, request_type=request_type, request_arrival_us=request_arrival_us,
                    request_first_node=first, node_request=node_request, node_template=node_template,
                    node_n_pred=node_n_pred.astype(np.int32), node_work=work, node_prompt_tokens=prompt,
                    node_output_tokens=output, node_prefix_group=group, node_prefix_index=prefix)


def successors_csr(run: AgentRun, templates: AgentTemplates) -> tuple[np.ndarray, np.ndarray]:
    """(offset int64[N+1], successor rows int64[E]): node i's successors are the rows
    ``succ[offset[i]:offset[i+1]]`` (the template successors moved to the node's request)."""
    g = templates.type_node_offset[run.request_type[run.node_request]] + run.node_template
    start = templates.template_succ_offset[g].astype(np.int64)
    degree = templates.template_succ_offset[g + 1].astype(np.int64) - start
    offset = np.zeros(run.num_nodes + 1, dtype=np.int64)
    offset[1:] = np.cumsum(degree)
    # entry e of node i reads template_succ[start[i] + (e - offset[i])]
    idx = np.repeat(start - offset[:-1], degree) + np.arange(int(offset[-1]), dtype=np.int64)
    succ = templates.template_succ[idx].astype(np.int64) + np.repeat(run.request_first_node[run.node_request], degree)
    return offset, succ


__all__ = ["AgentTemplates", "AgentRun", "build_templates", "generate_run", "successors_csr"]
