"""The whole configuration of one run: YAML file + CLI flags -> validated ``SimConfig``.

A YAML file (``--config``) may use the nested sections (``engine:``, ``deployment:``,
``workload:``, ``simulation:``) or the flat BLIS flag names at top level
(``max_num_running_reqs: 128``); explicitly given CLI flags override both.  Unknown keys
and bad values raise ``ConfigError`` naming the YAML path (or the flag).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from blis_fast.errors import ConfigError
from blis_fast.config.yamlfile import read_yaml_mapping

from .engine import EngineConfig
from blis_fast.config.policy import PolicyConfig, parse_weights

COMPAT_MODES = ("blis-2026.02",)
WORKLOAD_TYPES = ("distribution", "chatbot", "contentgen", "summarization", "multidoc", "traces")
ARRIVAL_PROCESSES = ("poisson", "constant")
LATENCY_MODELS = ("blackbox", "roofline")
INT64_MAX = 2**63 - 1


def _opt(default, help_text: str, **extra):
    """A dataclass field with help text."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help_text, **extra})
    return field(default=default, metadata={"help": help_text, **extra})


@dataclass(frozen=True)
class WorkloadConfig:
    """What requests arrive (docs/semantics.md §7).  Defaults are BLIS's ``distribution`` defaults."""

    type: str = _opt("distribution", "distribution | chatbot | contentgen | summarization | multidoc | traces")
    rate: float = _opt(1.0, "arrival rate, requests per second (> 0)")
    num_requests: int = _opt(100, "number of requests to generate (>= 1)")
    arrival: str | None = _opt(None, "arrival process: poisson | constant (default poisson; constant in compat mode)")
    prefix_tokens: int | None = _opt(None, "shared-prefix tokens prepended to every prompt (preset value, else 0)")
    prompt_tokens: float | None = _opt(None, "mean prompt tokens (preset value, else 512)")
    prompt_tokens_stdev: float | None = _opt(None, "stdev of prompt tokens (preset value, else 256)")
    prompt_tokens_min: int | None = _opt(None, "min prompt tokens (preset value, else 2)")
    prompt_tokens_max: int | None = _opt(None, "max prompt tokens (preset value, else 7000)")
    output_tokens: float | None = _opt(None, "mean output tokens (preset value, else 512)")
    output_tokens_stdev: float | None = _opt(None, "stdev of output tokens (preset value, else 256)")
    output_tokens_min: int | None = _opt(None, "min output tokens (preset value, else 2)")
    output_tokens_max: int | None = _opt(None, "max output tokens (preset value, else 7000)")
    traces_filepath: str | None = _opt(None, "trace to replay (type: traces): a BLIS trace CSV or a blis-fast rich "
                                              "trace (.parquet, or CSV starting with '# blis-fast-trace')")
    spec_filepath: str | None = _opt(None, "workload spec YAML (clients, tenants, SLO classes, prefix groups, sessions, "
                                           "load profile; docs/workloads.md); replaces the workload type and its "
                                           "settings; seed from the file unless --seed is given")


@dataclass(frozen=True)
class DeploymentConfig:
    """The replica pool: N identical instances, with bounds for later autoscaling."""

    num_instances: int = _opt(1, "instances serving at start (>= 1)")
    min_instances: int | None = _opt(None, "pool lower bound (default: num_instances)")
    max_instances: int | None = _opt(None, "pool upper bound (default: num_instances)")

    def bounds(self) -> tuple[int, int]:
        """(min, max) with defaults applied."""
        lo = self.num_instances if self.min_instances is None else self.min_instances
        hi = self.num_instances if self.max_instances is None else self.max_instances
        return lo, hi


DEFAULT_SEED = 42


@dataclass(frozen=True)
class SimulationConfig:
    """The simulation key and run controls."""

    seed: int | None = _opt(None, "workload seed: with the config it fully determines the run (>= 0; default 42, "
                                  "or the workload spec's own seed)")
    simulation_seed: int | None = _opt(None, "seed for stochastic policies (default: seed); the base model draws nothing")
    horizon: int | None = _opt(None, "simulated time limit in µs: events at t > horizon are not executed (default: none)")
    compat: str | None = _opt(None, "reporting conventions of a reference version: blis-2026.02")
    admission_latency: int = _opt(0, "µs from cluster arrival to the admission decision (>= 0)")
    routing_latency: int = _opt(0, "µs from admission to the routing decision (>= 0)")
    check_invariants: bool = _opt(False, "verify KV conservation and batch limits after every step (slow; tests)")
    max_events: int | None = _opt(None, "safety limit on processed events (default: generous bound from the workload)")

    @property
    def workload_seed(self) -> int:
        """The seed in force (explicit, else 42)."""
        return DEFAULT_SEED if self.seed is None else self.seed


@dataclass(frozen=True)
class SimConfig:
    """Everything that determines a run (with the workload's own inputs)."""

    model: str = _opt("meta-llama/llama-3.1-8b-instruct", "model id or path to a HuggingFace config.json")
    hardware: str = _opt("H100", "GPU: H100 | A100")
    vllm_version: str | None = _opt(None, "coefficient-set vLLM version (default: first match)")
    latency_model: str | None = _opt(None, "blackbox | roofline (default: blackbox when coefficients exist)")
    alpha_coeffs: list[float] | None = _opt(None, "α0,α1,α2 (µs): queueing overhead α0+α1·L, output-token overhead α2")
    beta_coeffs: list[float] | None = _opt(None, "β0,β1,β2 (µs): step time β0 + β1·prefill tokens + β2·decode requests")
    engine: EngineConfig = field(default_factory=EngineConfig)
    deployment: DeploymentConfig = field(default_factory=DeploymentConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    simulation: SimulationConfig = field(default_factory=SimulationConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)

    def to_dict(self) -> dict:
        """Plain nested dict (for the results JSON)."""
        return _to_dict(self)


# Flat names (BLIS flags with '_' for '-') -> nested path.  Also the YAML top-level aliases.
FLAG_PATHS: dict[str, str] = {
    "model": "model",
    "hardware": "hardware",
    "vllm_version": "vllm_version",
    "latency_model": "latency_model",
    "alpha_coeffs": "alpha_coeffs",
    "beta_coeffs": "beta_coeffs",
    "tp": "engine.tp",
    "pp": "engine.pp",
    "dp": "engine.dp",
    "total_kv_blocks": "engine.total_kv_blocks",
    "block_size_in_tokens": "engine.block_size",
    "max_num_running_reqs": "engine.max_num_seqs",
    "max_num_seqs": "engine.max_num_seqs",
    "max_num_scheduled_tokens": "engine.max_num_batched_tokens",
    "max_num_batched_tokens": "engine.max_num_batched_tokens",
    "long_prefill_token_threshold": "engine.long_prefill_token_threshold",
    "gpu_memory_utilization": "engine.gpu_memory_utilization",
    "enable_prefix_caching": "engine.enable_prefix_caching",
    "num_instances": "deployment.num_instances",
    "min_instances": "deployment.min_instances",
    "max_instances": "deployment.max_instances",
    "workload": "workload.type",
    "workload_traces_filepath": "workload.traces_filepath",
    "workload_spec": "workload.spec_filepath",
    "rate": "workload.rate",
    "num_requests": "workload.num_requests",
    "arrival": "workload.arrival",
    "prefix_tokens": "workload.prefix_tokens",
    "prompt_tokens": "workload.prompt_tokens",
    "prompt_tokens_stdev": "workload.prompt_tokens_stdev",
    "prompt_tokens_min": "workload.prompt_tokens_min",
    "prompt_tokens_max": "workload.prompt_tokens_max",
    "output_tokens": "workload.output_tokens",
    "output_tokens_stdev": "workload.output_tokens_stdev",
    "output_tokens_min": "workload.output_tokens_min",
    "output_tokens_max": "workload.output_tokens_max",
    "seed": "simulation.seed",
    "simulation_seed": "simulation.simulation_seed",
    "horizon": "simulation.horizon",
    "compat": "simulation.compat",
    "admission_latency": "simulation.admission_latency",
    "routing_latency": "simulation.routing_latency",
    "check_invariants": "simulation.check_invariants",
    "max_events": "simulation.max_events",
    "admission_policy": "policy.admission",
    "token_bucket_capacity": "policy.token_bucket_capacity",
    "token_bucket_refill_rate": "policy.token_bucket_refill_rate",
    "routing_policy": "policy.routing",
    "routing_scorers": "policy.routing_scorers",
    "priority_policy": "policy.priority",
    "slo_class_weights": "policy.slo_class_weights",
    "scheduler": "policy.scheduler",
    "scheduler_weights": "policy.scheduler_weights",
    "preemption_victim": "policy.preemption_victim",
    "snapshot_refresh_interval": "policy.snapshot_refresh_interval",
    "snapshot_intervals": "policy.snapshot_intervals",
    "prefix_index_capacity": "policy.prefix_index_capacity",
    "fitness_weights": "policy.fitness_weights",
}
_PATH_FLAG = {}
for _flag, _path in FLAG_PATHS.items():
    _PATH_FLAG.setdefault(_path, _flag)
_SECTIONS = {"engine": EngineConfig, "deployment": DeploymentConfig, "workload": WorkloadConfig,
             "simulation": SimulationConfig, "policy": PolicyConfig}


def flag_for(path: str) -> str:
    """The CLI flag of a config path (``engine.max_num_seqs`` -> ``--max-num-running-reqs``)."""
    flag = _PATH_FLAG.get(path)
    return "--" + flag.replace("_", "-") if flag else path


def load_yaml(path: str | Path) -> dict:
    """Read a run-config YAML file (``--config``) into a dict."""
    return read_yaml_mapping(path, "--config")


def build_config(yaml_data: dict | None = None, overrides: dict[str, Any] | None = None,
                 policy_settings: dict[str, Any] | None = None, policy_origin: str = "--policy-config") -> SimConfig:
    """Defaults <- YAML data <- policy bundle settings <- CLI overrides (flat flag names;
    None = not given).  ``policy_settings`` are PolicyConfig fields (blis_fast.config.policy.load_policy_bundle)."""
    nested: dict[str, Any] = {}
    origin: dict[str, str] = {}  # path -> how the user spelled it (for messages)
    for key, value in (yaml_data or {}).items():
        if key in _SECTIONS and not (key in FLAG_PATHS and not isinstance(value, dict)):
            # (``workload: chatbot`` is the flat BLIS flag; ``workload: {...}`` the section)
            if not isinstance(value, dict):
                raise ConfigError(key, "must be a mapping")
            names = {f.name for f in fields(_SECTIONS[key])}
            for sub, v in value.items():
                if sub not in names:
                    raise ConfigError(f"{key}.{sub}", f"unknown key; known: {', '.join(sorted(names))}")
                nested[f"{key}.{sub}"] = v
                origin[f"{key}.{sub}"] = f"{key}.{sub}"
        elif key in FLAG_PATHS:
            nested[FLAG_PATHS[key]] = value
            origin[FLAG_PATHS[key]] = key
        else:
            known = sorted(set(FLAG_PATHS) | set(_SECTIONS))
            raise ConfigError(key, f"unknown key; known: {', '.join(known)}")
    for name, value in (policy_settings or {}).items():
        nested[f"policy.{name}"] = value
        origin[f"policy.{name}"] = f"{policy_origin} ({name})"
    for flag, value in (overrides or {}).items():
        if value is None:
            continue
        if flag not in FLAG_PATHS:
            raise ConfigError(flag, "unknown setting")
        nested[FLAG_PATHS[flag]] = value
        origin[FLAG_PATHS[flag]] = "--" + flag.replace("_", "-")

    def where(path: str) -> str:
        if path in origin:
            return origin[path]
        for p, o in origin.items():  # e.g. policy.routing_scorers.queue-depth under --routing-scorers
            if path.startswith(p + ".") or path.startswith(p + "["):
                return o + path[len(p):]
        return path

    sections = {}
    for name, cls in _SECTIONS.items():
        kwargs = {}
        for f in fields(cls):
            path = f"{name}.{f.name}"
            if path in nested:
                kwargs[f.name] = _coerce(nested[path], f.type, where(path))
        try:
            sections[name] = cls(**kwargs)
        except ConfigError as exc:
            raise ConfigError(where(exc.field), exc.message) from None
    top = {}
    for f in fields(SimConfig):
        if f.name in _SECTIONS or f.name not in nested:
            continue
        top[f.name] = _coerce(nested[f.name], f.type, where(f.name))
    cfg = SimConfig(**top, **sections)
    try:
        validate(cfg)
    except ConfigError as exc:
        raise ConfigError(where(exc.field), exc.message) from None
    return cfg


def validate(cfg: SimConfig) -> None:
    """Cross-field and range checks not done by the section dataclasses."""
    w, d, s = cfg.workload, cfg.deployment, cfg.simulation
    if cfg.latency_model is not None and cfg.latency_model not in LATENCY_MODELS:
        raise ConfigError("latency_model", f"must be one of {', '.join(LATENCY_MODELS)}, got {cfg.latency_model!r}")
    for name in ("alpha_coeffs", "beta_coeffs"):
        v = getattr(cfg, name)
        if v is not None and (len(v) != 3 or not all(math.isfinite(x) for x in v)):
            raise ConfigError(name, f"must be 3 finite numbers, got {v!r}")
    if w.type not in WORKLOAD_TYPES:
        raise ConfigError("workload.type", f"must be one of {', '.join(WORKLOAD_TYPES)}, got {w.type!r}")
    if w.arrival is not None and w.arrival not in ARRIVAL_PROCESSES:
        raise ConfigError("workload.arrival", f"must be one of {', '.join(ARRIVAL_PROCESSES)}, got {w.arrival!r}")
    if not (math.isfinite(w.rate) and w.rate > 0):
        raise ConfigError("workload.rate", f"must be a finite number > 0 (requests/s), got {w.rate!r}")
    if not 1 <= w.num_requests <= 100_000_000:
        raise ConfigError("workload.num_requests", f"must be an integer in [1, 100000000], got {w.num_requests!r}")
    if w.type == "traces" and not w.traces_filepath and not w.spec_filepath:
        raise ConfigError("workload.traces_filepath", "is required with workload type 'traces'")
    if not 1 <= d.num_instances <= 65_536:
        raise ConfigError("deployment.num_instances", f"must be an integer in [1, 65536], got {d.num_instances}")
    lo, hi = d.bounds()
    if lo < 1:
        raise ConfigError("deployment.min_instances", f"must be >= 1, got {lo}")
    if lo > hi:
        raise ConfigError("deployment.min_instances", f"must be <= max_instances ({hi}), got {lo}")
    if not lo <= d.num_instances <= hi:
        raise ConfigError("deployment.num_instances", f"must be in [min_instances, max_instances] = [{lo}, {hi}], got {d.num_instances}")
    if s.seed is not None and not 0 <= s.seed <= INT64_MAX:
        raise ConfigError("simulation.seed", f"must be an integer in [0, 2^63-1], got {s.seed}")
    if s.simulation_seed is not None and not 0 <= s.simulation_seed <= INT64_MAX:
        raise ConfigError("simulation.simulation_seed", f"must be an integer in [0, 2^63-1], got {s.simulation_seed}")
    if s.horizon is not None and s.horizon < 0:
        raise ConfigError("simulation.horizon", f"must be an integer >= 0 (µs), got {s.horizon}")
    if s.compat is not None and s.compat not in COMPAT_MODES:
        raise ConfigError("simulation.compat", f"must be one of {', '.join(COMPAT_MODES)}, got {s.compat!r}")
    for name in ("admission_latency", "routing_latency"):
        v = getattr(s, name)
        if not 0 <= v <= 10**12:
            raise ConfigError(f"simulation.{name}", f"must be an integer in [0, 1e12] µs, got {v}")
    if s.max_events is not None and s.max_events < 1:
        raise ConfigError("simulation.max_events", f"must be >= 1, got {s.max_events}")


def with_overrides(cfg: SimConfig, **flat: Any) -> SimConfig:
    """A copy of ``cfg`` with flat-named settings changed (API convenience), re-validated."""
    data = _to_dict(cfg)
    for flag, value in flat.items():
        if flag not in FLAG_PATHS:
            raise ConfigError(flag, "unknown setting")
        section, _, name = FLAG_PATHS[flag].rpartition(".")
        (data[section] if section else data)[name] = value
    return build_config(data)


# ----------------------------------------------------------------------------- helpers


def _coerce(value: Any, typ: Any, where: str) -> Any:
    """Check a YAML/CLI value against a field's annotation (a string under __future__)."""
    t = str(typ)
    optional = "None" in t
    if value is None:
        if optional:
            return None
        raise ConfigError(where, "must not be null")
    base = t.replace(" | None", "").strip()
    if base == "int":
        if isinstance(value, bool):
            raise ConfigError(where, f"must be an integer, got {value!r}")
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise ConfigError(where, f"must be an integer, got {value!r}")
    if base == "float":
        if isinstance(value, bool):
            raise ConfigError(where, f"must be a number, got {value!r}")
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise ConfigError(where, f"must be a number, got {value!r}") from None
        if math.isnan(x):
            raise ConfigError(where, "must be a number, got NaN")
        return x
    if base == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(where, f"must be true or false, got {value!r}")
    if base == "str":
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(where, f"must be a string, got {value!r}")
        return str(value)
    if base.startswith("dict[str, "):
        weights = parse_weights(value, where)
        if base == "dict[str, int]":
            out_i = {}
            for k, v in weights.items():
                if not float(v).is_integer():
                    raise ConfigError(f"{where}.{k}", f"must be an integer, got {v!r}")
                out_i[k] = int(v)
            return out_i
        return weights
    if base == "list[float]":
        items = value
        if isinstance(value, str):
            items = [x for x in value.replace(" ", "").split(",") if x != ""]
        if not isinstance(items, (list, tuple)):
            raise ConfigError(where, f"must be a list of numbers, got {value!r}")
        out = []
        for x in items:
            if isinstance(x, bool):
                raise ConfigError(where, f"must be a list of numbers, got {value!r}")
            try:
                out.append(float(x))
            except (TypeError, ValueError):
                raise ConfigError(where, f"must be a list of numbers, got {value!r}") from None
        return out
    return value


def _to_dict(obj: Any) -> Any:
    if is_dataclass(obj):
        return {f.name: _to_dict(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_to_dict(x) for x in obj]
    return obj


__all__ = [
    "SimConfig", "EngineConfig", "WorkloadConfig", "DeploymentConfig", "SimulationConfig",
    "FLAG_PATHS", "build_config", "load_yaml", "validate", "with_overrides", "flag_for", "replace",
]
