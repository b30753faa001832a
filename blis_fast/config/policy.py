"""The ``policy`` section of a run: admission, routing, priority, queue order, preemption
victim, router observability and fitness weights -- validated settings, the
``name:weight`` list syntax, and the policy-bundle YAML (``--policy-config``).

``blis_fast.policy`` compiles a PolicyConfig into the arrays the kernels read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blis_fast.errors import ConfigError
from blis_fast.config.yamlfile import read_yaml_mapping
from kernels import schema as S

ADMISSION_POLICIES = {"always-admit": S.AdmissionKind.ALWAYS, "token-bucket": S.AdmissionKind.TOKEN_BUCKET,
                      "reject-all": S.AdmissionKind.REJECT_ALL}
ROUTING_POLICIES = {"round-robin": S.RoutingKind.ROUND_ROBIN, "least-loaded": S.RoutingKind.LEAST_LOADED,
                    "weighted": S.RoutingKind.WEIGHTED, "prefix-affinity": S.RoutingKind.PREFIX_AFFINITY,
                    "always-busiest": S.RoutingKind.ALWAYS_BUSIEST}
SCORERS = {"queue-depth": S.RouteWeight.QUEUE_DEPTH, "kv-utilization": S.RouteWeight.KV_UTILIZATION,
           "load-balance": S.RouteWeight.LOAD_BALANCE, "prefix-affinity": S.RouteWeight.PREFIX_AFFINITY}
DEFAULT_SCORERS = {"prefix-affinity": 3.0, "queue-depth": 2.0, "kv-utilization": 2.0}  # BLIS's default
PRIORITY_AGE_WEIGHT = {"constant": 0.0, "slo-based": 1e-6, "inverted-slo": -1e-6}  # per µs of age
# scheduler -> weights over (priority, arrival, prompt length, output length); None = keep order
SCHEDULERS: dict[str, tuple[float, float, float, float] | None] = {
    "fcfs": None,
    "priority-fcfs": (-1.0, 0.0, 0.0, 0.0),
    "sjf": (0.0, 0.0, 1.0, 0.0),
    "reverse-priority": (1.0, 0.0, 0.0, 0.0),
    "sort": (0.0, 0.0, 0.0, 0.0),  # custom: weights given in scheduler_weights
}
SORT_ATTRIBUTES = ("priority", "arrival", "prompt_len", "output_len")
VICTIMS = {"last": S.VictimKind.LAST, "lowest-priority": S.VictimKind.LOWEST_PRIORITY}
KV_SNAPSHOT_FIELDS = ("kv_utilization", "free_kv_blocks", "cache_hit_rate")


def _opt(default, help_text: str):
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help_text})
    return field(default=default, metadata={"help": help_text})


@dataclass(frozen=True)
class PolicyConfig:
    """Admission, routing, priority, queue order, preemption victim and router observability."""

    admission: str = _opt("always-admit", "admission policy: always-admit | token-bucket | reject-all")
    token_bucket_capacity: float = _opt(10000.0, "token-bucket capacity, prompt tokens (>= 0)")
    token_bucket_refill_rate: float = _opt(1000.0, "token-bucket refill rate, prompt tokens per second (>= 0)")
    routing: str = _opt("round-robin", "routing policy: round-robin | least-loaded | weighted | prefix-affinity | always-busiest")
    routing_scorers: dict[str, float] | None = _opt(
        None, "weighted routing scorers name:weight (queue-depth, kv-utilization, load-balance, prefix-affinity); "
              "default prefix-affinity:3,queue-depth:2,kv-utilization:2")
    priority: str = _opt("constant", "priority policy: constant | slo-based | inverted-slo")
    slo_class_weights: list[float] | None = _opt(None, "priority added per SLO class (class 0, 1, ...)")
    scheduler: str = _opt("fcfs", "instance scheduler: fcfs | priority-fcfs | sjf | reverse-priority | sort")
    scheduler_weights: dict[str, float] | None = _opt(
        None, "scheduler 'sort': ascending key = Σ weight·attribute over priority, arrival, prompt_len, output_len")
    preemption_victim: str = _opt("last", "preemption victim: last (last admitted) | lowest-priority")
    snapshot_refresh_interval: int = _opt(0, "µs between refreshes of the router's KV fields (0 = live)")
    snapshot_intervals: dict[str, int] | None = _opt(
        None, "per-field refresh interval µs: queue_depth, batch_size, kv_utilization, free_kv_blocks, "
              "cache_hit_rate, pending, in_flight (overrides snapshot_refresh_interval)")
    prefix_index_capacity: int = _opt(10000, "prefix-block keys per instance in the router's prefix-affinity index")
    fitness_weights: dict[str, float] | None = _opt(None, "fitness components key:weight (see docs/policies.md)")

    def __post_init__(self) -> None:
        validate_policy(self)

    def scorers(self) -> dict[str, float]:
        """The weighted router's scorers (default BLIS's)."""
        return dict(self.routing_scorers) if self.routing_scorers is not None else dict(DEFAULT_SCORERS)


def _check_choice(path: str, value: str, choices) -> None:
    if value not in choices:
        raise ConfigError(path, f"unknown value {value!r}; allowed: {', '.join(choices)}")


def _check_number(path: str, value: Any, lo: float = 0.0, allow_equal: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(path, f"must be a number, got {value!r}")
    x = float(value)
    if not math.isfinite(x) or x < lo or (x == lo and not allow_equal):
        rng = f">= {lo:g}" if allow_equal else f"> {lo:g}"
        raise ConfigError(path, f"must be a finite number {rng}, got {value!r}")
    return x


def validate_policy(p: PolicyConfig) -> None:
    """Raise ConfigError (``policy.<field>``) on the first bad value."""
    _check_choice("policy.admission", p.admission, ADMISSION_POLICIES)
    _check_number("policy.token_bucket_capacity", p.token_bucket_capacity)
    _check_number("policy.token_bucket_refill_rate", p.token_bucket_refill_rate)
    _check_choice("policy.routing", p.routing, ROUTING_POLICIES)
    if p.routing_scorers is not None:
        if not p.routing_scorers:
            raise ConfigError("policy.routing_scorers", "needs at least one scorer")
        for name, w in p.routing_scorers.items():
            _check_choice("policy.routing_scorers", name, SCORERS)
            _check_number(f"policy.routing_scorers.{name}", w, 0.0, allow_equal=False)
    _check_choice("policy.priority", p.priority, PRIORITY_AGE_WEIGHT)
    for k, w in enumerate(p.slo_class_weights or []):
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(float(w)):
            raise ConfigError(f"policy.slo_class_weights[{k}]", f"must be a finite number, got {w!r}")
    _check_choice("policy.scheduler", p.scheduler, SCHEDULERS)
    if p.scheduler_weights is not None:
        for name, w in p.scheduler_weights.items():
            _check_choice("policy.scheduler_weights", name, SORT_ATTRIBUTES)
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(float(w)):
                raise ConfigError(f"policy.scheduler_weights.{name}", f"must be a finite number, got {w!r}")
    _check_choice("policy.preemption_victim", p.preemption_victim, VICTIMS)
    if isinstance(p.snapshot_refresh_interval, bool) or not isinstance(p.snapshot_refresh_interval, int) \
            or p.snapshot_refresh_interval < 0:
        raise ConfigError("policy.snapshot_refresh_interval", f"must be an integer >= 0 (µs), got {p.snapshot_refresh_interval!r}")
    for name, v in (p.snapshot_intervals or {}).items():
        _check_choice("policy.snapshot_intervals", name, S.SNAPSHOT_FIELD_NAMES)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"policy.snapshot_intervals.{name}", f"must be an integer >= 0 (µs), got {v!r}")
    if isinstance(p.prefix_index_capacity, bool) or not isinstance(p.prefix_index_capacity, int) \
            or not 1 <= p.prefix_index_capacity <= 10_000_000:
        raise ConfigError("policy.prefix_index_capacity", f"must be an integer in [1, 10000000], got {p.prefix_index_capacity!r}")
    if p.fitness_weights is not None:
        from blis_fast.results.fitness import validate_fitness_weights

        validate_fitness_weights(p.fitness_weights, "policy.fitness_weights")


# ----------------------------------------------------------------------------- name:weight lists


def parse_weights(text: str | dict, path: str) -> dict[str, float]:
    """``"a:1,b:2.5"`` (CLI) or a mapping (YAML) -> {name: weight}; checks the syntax only."""
    if isinstance(text, dict):
        items = list(text.items())
    elif isinstance(text, str):
        items = []
        for part in [x.strip() for x in text.split(",") if x.strip()]:
            name, sep, w = part.partition(":")
            if not sep:
                raise ConfigError(path, f"expected name:weight, got {part!r}")
            items.append((name.strip(), w.strip()))
    elif isinstance(text, list):  # BLIS style: [{name: ..., weight: ...}, ...]
        items = []
        for k, entry in enumerate(text):
            if not isinstance(entry, dict) or set(entry) - {"name", "weight"} or "name" not in entry:
                raise ConfigError(f"{path}[{k}]", "expected a mapping with name and weight")
            items.append((entry["name"], entry.get("weight", 1.0)))
    else:
        raise ConfigError(path, f"expected name:weight pairs, got {text!r}")
    out: dict[str, float] = {}
    for name, w in items:
        try:
            x = float(w)
        except (TypeError, ValueError):
            raise ConfigError(f"{path}.{name}", f"weight must be a number, got {w!r}") from None
        if isinstance(w, bool) or math.isnan(x):
            raise ConfigError(f"{path}.{name}", f"weight must be a number, got {w!r}")
        if name in out:
            raise ConfigError(path, f"{name!r} given twice")
        out[str(name)] = x
    return out


# ----------------------------------------------------------------------------- policy bundle YAML

_BUNDLE_SECTIONS = ("admission", "routing", "priority", "scheduler", "preemption", "observability", "fitness")


def load_policy_bundle(path: str | Path) -> dict[str, Any]:
    """Read a policy bundle YAML into flat ``policy`` settings (``{field: value}``).

    Accepted shapes, per section: ``{type|policy: NAME, params: {...}}`` and BLIS's bundle
    (``admission.token_bucket_capacity``, ``routing.scorers: [{name, weight}]``,
    ``scheduler: NAME``).  Unknown keys and bad values raise ConfigError with the YAML path.
    """
    p = Path(path)
    data = read_yaml_mapping(p, "--policy-config")
    return bundle_to_settings(data, p.name)


def _section(data: Any, path: str, allowed: set[str]) -> tuple[str | None, dict]:
    """(policy name, params) of one section; strict about keys."""
    if isinstance(data, str):
        return data, {}
    if not isinstance(data, dict):
        raise ConfigError(path, f"must be a policy name or a mapping, got {data!r}")
    unknown = sorted(set(data) - allowed - {"type", "policy", "params"})
    if unknown:
        raise ConfigError(f"{path}.{unknown[0]}", f"unknown key; allowed: {', '.join(sorted(allowed | {'type', 'policy', 'params'}))}")
    if "type" in data and "policy" in data:
        raise ConfigError(path, "give either type or policy, not both")
    name = data.get("type", data.get("policy"))
    if name is not None and not isinstance(name, str):
        raise ConfigError(f"{path}.type", f"must be a string, got {name!r}")
    params = data.get("params") or {}
    if not isinstance(params, dict):
        raise ConfigError(f"{path}.params", "must be a mapping")
    merged = {k: v for k, v in data.items() if k not in ("type", "policy", "params")}
    for k, v in params.items():
        merged[k] = v
    return name, merged


def _only(params: dict, path: str, allowed: set[str]) -> None:
    for k in params:
        if k not in allowed:
            raise ConfigError(f"{path}.params.{k}", f"unknown parameter; allowed: {', '.join(sorted(allowed)) or 'none'}")


def bundle_to_settings(data: dict, name: str = "policy") -> dict[str, Any]:
    """Translate a parsed bundle into PolicyConfig fields (strict; errors name the path)."""
    out: dict[str, Any] = {}
    for key in data:
        if key not in _BUNDLE_SECTIONS:
            raise ConfigError(f"{name}: {key}", f"unknown section; allowed: {', '.join(_BUNDLE_SECTIONS)}")
    if "admission" in data:
        pol, prm = _section(data["admission"], "admission", {"token_bucket_capacity", "token_bucket_refill_rate"})
        _only(prm, "admission", {"capacity", "refill_rate", "token_bucket_capacity", "token_bucket_refill_rate"})
        if pol is not None:
            _check_choice("admission.type", pol, ADMISSION_POLICIES)
            out["admission"] = pol
        for src, dst in (("capacity", "token_bucket_capacity"), ("token_bucket_capacity", "token_bucket_capacity"),
                         ("refill_rate", "token_bucket_refill_rate"),
                         ("token_bucket_refill_rate", "token_bucket_refill_rate")):
            if src in prm:
                out[dst] = _check_number(f"admission.params.{src}", prm[src])
    if "routing" in data:
        pol, prm = _section(data["routing"], "routing", {"scorers"})
        _only(prm, "routing", {"scorers"})
        if pol is not None:
            _check_choice("routing.type", pol, ROUTING_POLICIES)
            out["routing"] = pol
        if "scorers" in prm:
            weights = parse_weights(prm["scorers"], "routing.scorers")
            for s, w in weights.items():
                _check_choice("routing.scorers", s, SCORERS)
                _check_number(f"routing.scorers.{s}", w, 0.0, allow_equal=False)
            out["routing_scorers"] = weights
    if "priority" in data:
        pol, prm = _section(data["priority"], "priority", set())
        _only(prm, "priority", {"slo_class_weights"})
        if pol is not None:
            _check_choice("priority.type", pol, PRIORITY_AGE_WEIGHT)
            out["priority"] = pol
        if "slo_class_weights" in prm:
            out["slo_class_weights"] = prm["slo_class_weights"]
    if "scheduler" in data:
        pol, prm = _section(data["scheduler"], "scheduler", set())
        _only(prm, "scheduler", set(SORT_ATTRIBUTES) | {"weights"})
        if pol is not None:
            _check_choice("scheduler.type", pol, SCHEDULERS)
            out["scheduler"] = pol
        weights = prm.get("weights", {k: v for k, v in prm.items() if k in SORT_ATTRIBUTES})
        if weights:
            out["scheduler_weights"] = parse_weights(weights, "scheduler.params")
    if "preemption" in data:
        pol, prm = _section(data["preemption"], "preemption", {"victim"})
        _only(prm, "preemption", {"victim"})
        victim = prm.get("victim", pol)
        if victim is not None:
            _check_choice("preemption.victim", victim, VICTIMS)
            out["preemption_victim"] = victim
    if "observability" in data:
        obs = data["observability"]
        if not isinstance(obs, dict):
            raise ConfigError("observability", "must be a mapping")
        for k, v in obs.items():
            if k == "snapshot_refresh_interval":
                out["snapshot_refresh_interval"] = v
            elif k == "fields":
                if not isinstance(v, dict):
                    raise ConfigError("observability.fields", "must be a mapping field: interval_us")
                out["snapshot_intervals"] = dict(v)
            elif k == "prefix_index_capacity":
                out["prefix_index_capacity"] = v
            else:
                raise ConfigError(f"observability.{k}", "unknown key; allowed: snapshot_refresh_interval, fields, prefix_index_capacity")
    if "fitness" in data:
        fit = data["fitness"]
        if isinstance(fit, dict) and set(fit) <= {"weights"} and "weights" in fit:
            fit = fit["weights"]
        out["fitness_weights"] = parse_weights(fit, "fitness.weights")
    return out
