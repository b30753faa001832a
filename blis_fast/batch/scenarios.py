"""Scenarios of a batch: where candidates are evaluated.

A scenario is a run config (deployment, engine, workload -- a generator, a workload spec
or a trace --, seed, base policy) plus optional SLO classes and objectives.  In a
scenarios file (``blis-fast evaluate --scenarios FILE``)::
    objectives: "ttft_p99_ms:min:500,slo_attainment:max"   # default of every scenario
    budget: {max_simulated_s: 600, max_wall_s: 60}          # per evaluation
    scenarios:
      - name: chat-4x
        config: {num_instances: 4, workload: chatbot, rate: 120, num_requests: 400}
        seed: 1
        slo_classes: {default: {ttft_ms: 500, tpot_ms: 50}}
      - name: tenants
        config: cluster.yaml                # a run-config file, relative to this file
        workload_spec: ../workloads/multi-tenant.yaml
        objectives: [{metric: "slo_attainment[class=interactive]", direction: max}]

``prepare`` resolves a scenario once -- model, GPU, latency model, the workload's arrays
-- into a ``PreparedScenario``, which every evaluation of every candidate then shares
(threads share it in memory; processes and Dask workers receive it pickled: arrays, not
YAML).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from blis_fast.config.sim import SimConfig, build_config, load_yaml
from blis_fast.config.validate import MAX_STR_LEN, as_float, as_list, as_mapping, as_str, key_name, show, show_text
from blis_fast.config.yamlfile import read_yaml_mapping
from blis_fast.errors import ConfigError
from blis_fast.config import memory
from blis_fast.run.api import RESULT_BYTES_PER_REQUEST, deployment_names, pool_size
from blis_fast.run.resolve import build_workload, check_engine_supports, check_expected_size, resolve
from blis_fast.run.tables import scenario_tables

SCENARIO_KEYS = ("name", "config", "workload_spec", "trace", "seed", "slo_classes", "objectives")
FILE_KEYS = ("scenarios", "objectives", "budget")
SLO_TARGETS = ("ttft_ms", "tpot_ms", "e2e_ms")
MAX_SCENARIOS = 10_000


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: ``config`` (SimConfig) plus SLO classes {name: {ttft_ms,
    tpot_ms, e2e_ms}} replacing the workload's targets, and objectives (None = the
    batch's); ``config_file``: the run-config file it was read from, if any (an input
    that no output may overwrite)."""

    name: str
    config: SimConfig
    slo_classes: dict | None = None
    objectives: Any = None
    config_file: Path | None = None


@dataclass(frozen=True, eq=False)
class PreparedScenario:
    """A scenario resolved once: what an evaluation needs, as arrays and small dataclasses."""

    name: str
    setup: Any  # blis_fast.run.Setup
    workload: Any  # blis_fast.workload.Workload (SLO classes applied)
    objectives: list = field(default_factory=list)  # blis_fast.results.objectives.Objective
    workload_id: str = ""  # blis_fast.results.evaluation.workload_id of the workload
    tables: Any = None  # run.tables.ScenarioTables: what every evaluation's state shares

    @property
    def seed(self) -> int:
        """The workload seed in force, as ``Result.seed`` reports it: explicit, else the
        workload spec's, else the default (42)."""
        sim = self.setup.config.simulation
        if sim.seed is not None:
            return int(sim.seed)
        seed = (self.workload.description or {}).get("seed")
        return int(seed) if isinstance(seed, int) else sim.workload_seed


def scenario_from_dict(data: Any, where: str, base_dir: Path | None = None) -> Scenario:
    """A Scenario from a mapping shaped like one entry of a scenarios file (paths relative
    to ``base_dir``); ConfigError naming ``where.<key>`` otherwise."""
    as_mapping(data, where, SCENARIO_KEYS)
    if "name" not in data:
        raise ConfigError(f"{where}.name", "is required (a short name for the scenario's rows)")
    name = as_str(data["name"], f"{where}.name", max_len=MAX_STR_LEN, numbers_ok=True)
    raw = data.get("config") or {}
    config_file = None
    if isinstance(raw, (str, Path)):
        config_file = _rel(raw, base_dir)
        try:
            raw = load_yaml(config_file)
        except ConfigError as exc:  # "--config ..." -> this scenario's key
            raise ConfigError(f"{where}.config", exc.message) from None
    elif not isinstance(raw, dict):
        raise ConfigError(f"{where}.config", f"must be a mapping of run settings or a run-config file, got {show(raw)}")
    raw = dict(raw)
    overrides: dict[str, Any] = {}
    if data.get("workload_spec") is not None:
        overrides["workload_spec"] = str(_rel(as_str(data["workload_spec"], f"{where}.workload_spec"), base_dir))
    if data.get("trace") is not None:
        overrides["workload"] = "traces"
        overrides["workload_traces_filepath"] = str(_rel(as_str(data["trace"], f"{where}.trace"), base_dir))
    if data.get("seed") is not None:
        overrides["seed"] = data["seed"]
    raw = _relative_paths(raw, base_dir)
    try:
        cfg = build_config(raw, overrides)
    except ConfigError as exc:  # name the scenario's own key, not the CLI flag it stands for
        key = _OVERRIDE_KEYS.get(exc.field.split(" ")[0].split(".")[0], None)
        raise ConfigError(f"{where}.{key}" if key else f"{where}.config.{exc.field}", exc.message) from None
    slo = data.get("slo_classes")
    if slo is not None:
        slo = _slo_classes(slo, f"{where}.slo_classes")
    return Scenario(name, cfg, slo, _objectives(data.get("objectives"), f"{where}.objectives"), config_file)


def _objectives(spec, where: str):
    """Parsed ``objectives`` of a scenario or a scenarios file (None when absent); errors
    name ``where``."""
    if spec is None:
        return None
    from blis_fast.results.objectives import parse_objectives  # deferred: blis_fast_kernels.native

    try:
        return parse_objectives(spec)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc.field}", exc.message) from None


def load_scenarios_file(path: str | Path) -> tuple[list[Scenario], Any, Any]:
    """(scenarios, default objectives or None, budget mapping or None) of a scenarios file."""
    p = Path(path)
    data = read_yaml_mapping(p, "--scenarios")
    as_mapping(data, f"--scenarios {p.name}", FILE_KEYS)
    if "scenarios" not in data:
        raise ConfigError(f"--scenarios {p.name}", "needs a 'scenarios:' list")
    entries = as_list(data["scenarios"], "scenarios", min_len=1, max_len=MAX_SCENARIOS, what="a list of scenarios")
    scenarios = [scenario_from_dict(e, f"scenarios[{i}]", p.parent) for i, e in enumerate(entries)]
    check_unique_names(scenarios)
    return scenarios, _objectives(data.get("objectives"), "objectives"), data.get("budget")


def as_scenarios(value: Any) -> list[Scenario]:
    """Scenarios from a scenarios file path, a Scenario, a mapping, or a list of them."""
    if isinstance(value, (str, Path)):
        return load_scenarios_file(value)[0]
    items = value if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise ConfigError("scenarios", "needs at least one scenario")
    items = as_list(items, "scenarios", max_len=MAX_SCENARIOS, what="a list of scenarios")
    out = [s if isinstance(s, Scenario) else scenario_from_dict(s, f"scenarios[{i}]") for i, s in enumerate(items)]
    check_unique_names(out)
    return out


def check_unique_names(scenarios: list[Scenario]) -> None:
    seen = set()
    for s in scenarios:
        if s.name in seen:
            raise ConfigError("scenarios", f"two scenarios are named {show(s.name)}; names must be unique")
        seen.add(s.name)


def prepare(scenario: Scenario, default_objectives: Any = None) -> PreparedScenario:
    """Resolve the scenario and build its workload (once, inside its memory budget)."""
    from blis_fast.results.evaluation import workload_id  # deferred: blis_fast_kernels.native
    from blis_fast.results.objectives import parse_objectives  # deferred: blis_fast_kernels.native

    cfg = scenario.config
    try:
        with memory.memory_budget(cfg.simulation.max_memory):
            setup = resolve(cfg)
            check_expected_size(cfg, setup, RESULT_BYTES_PER_REQUEST)
            wl = build_workload(cfg)
            check_engine_supports(setup)
    except ConfigError as exc:
        raise scenario_error(scenario.name, exc) from None
    if scenario.slo_classes:
        wl = with_slo_classes(wl, scenario.slo_classes, f"scenario {show_text(scenario.name, 60)}: slo_classes")
    objectives = scenario.objectives if scenario.objectives is not None else parse_objectives(default_objectives)
    # an objective's [class=...], [tenant=...], [client=...] or [instance=...] must exist in this
    # scenario: refused now, not after every candidate has run
    from blis_fast.results.objectives import check_selectors  # deferred: blis_fast_kernels.native

    check_selectors([(f"scenario {show_text(scenario.name, 60)}: objectives[{k}].metric", o.metric)
                     for k, o in enumerate(objectives)], wl, pool_size(cfg), deployment_names(cfg))
    return PreparedScenario(scenario.name, setup, wl, list(objectives), workload_id(wl),
                            scenario_tables(setup, wl))


def scenario_error(name: str, exc: ConfigError) -> ConfigError:
    """``exc`` (raised while resolving scenario ``name``) naming the scenario, and its own
    key instead of the CLI flag it stands for (``--workload-spec`` -> ``workload_spec``)."""
    head = exc.field.split(" ")[0]
    return ConfigError(f"scenario {show_text(name, 60)}: {_OVERRIDE_KEYS.get(head, head)}{exc.field[len(head):]}",
                       exc.message)


def with_slo_classes(wl, classes: dict, where: str):
    """The workload with SLO targets replaced by ``classes``: for a workload with named
    classes (a spec), each name must be one of them; otherwise exactly one class, which
    every request then belongs to."""
    names = list((wl.names or {}).get("slo_class") or [])
    targets = dict(wl.slo_targets or {})
    if names:
        for name in classes:
            if name not in names:
                raise ConfigError(f"{where}.{key_name(name)}", f"unknown SLO class; the workload defines: "
                                                               f"{', '.join(names)}")
        targets.update(classes)
        return replace(wl, slo_targets=targets)
    if len(classes) != 1:
        raise ConfigError(where, f"this workload has one SLO class (all requests); give exactly one, got "
                                 f"{len(classes)}")
    (name, t), = classes.items()
    return replace(wl, names={**(wl.names or {}), "slo_class": [name]}, slo_targets={name: t})


def _slo_classes(value: Any, where: str) -> dict:
    as_mapping(value, where, what="a mapping {class name: {ttft_ms, tpot_ms, e2e_ms}}")
    out = {}
    for name, t in value.items():
        p = f"{where}.{key_name(name)}"
        as_mapping(t if t is not None else {}, p, SLO_TARGETS)
        out[name] = {k: (as_float(t[k], f"{p}.{k}", 0, 1e12, lo_open=True, text=False, unit="ms")
                         if (t or {}).get(k) is not None else None) for k in SLO_TARGETS}
    return out


_OVERRIDE_KEYS = {"--seed": "seed", "--workload-spec": "workload_spec", "--workload-traces-filepath": "trace",
                  "--workload": "trace"}
_PATH_KEYS = {"workload_spec", "workload_traces_filepath"}
_PATH_FIELDS = {"spec_filepath", "traces_filepath"}


def _rel(path: str | Path, base: Path | None) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() or base is None else base / p


def _relative_paths(raw: dict, base: Path | None) -> dict:
    """File settings inside a scenario's config, taken relative to the scenarios file."""
    if base is None:
        return raw
    out = dict(raw)
    for k, v in raw.items():
        if k in _PATH_KEYS and isinstance(v, str):
            out[k] = str(_rel(v, base))
        elif k == "workload" and isinstance(v, dict):
            out[k] = {sk: str(_rel(sv, base)) if sk in _PATH_FIELDS and isinstance(sv, str) else sv
                      for sk, sv in v.items()}
    return out
