"""The ``policy`` section of a run: admission, routing, priority, queue order, preemption
victim, router observability and fitness weights -- validated settings, the
``name:weight`` list syntax, and the policy-bundle YAML (``--policy-config``).

``blis_fast.policy`` compiles a PolicyConfig into the arrays the kernels read.
"""

from __future__ import annotations

from dataclasses import dataclass, fields as dataclass_fields
import math
from pathlib import Path
from typing import Any

import yaml

from blis_fast.config.validate import (
    MAX_POLICY_WEIGHT,
    MAX_STR_LEN,
    as_choice,
    as_float,
    as_int,
    as_list,
    as_mapping,
    check_fields,
    check_value,
    key_name,
    show,
)
from blis_fast.config.validate import setting as _opt
from blis_fast.config.expression import compile_expression, compile_tree
from blis_fast.config.yamlfile import read_yaml_mapping
from blis_fast.errors import ConfigError
from blis_fast_kernels import schema as S

# ``expression`` and ``tree``: a program (blis_fast/policy/expression.py) in the slot's
# ``<slot>_program`` field; the bundle key that gives it in each section is PROGRAM_KEYS'
PROGRAM_KINDS = ("expression", "tree")
ADMISSION_POLICIES = {"always-admit": S.AdmissionKind.ALWAYS, "token-bucket": S.AdmissionKind.TOKEN_BUCKET,
                      "reject-all": S.AdmissionKind.REJECT_ALL, "expression": S.AdmissionKind.EXPRESSION,
                      "tree": S.AdmissionKind.EXPRESSION}
ROUTING_POLICIES = {"round-robin": S.RoutingKind.ROUND_ROBIN, "least-loaded": S.RoutingKind.LEAST_LOADED,
                    "weighted": S.RoutingKind.WEIGHTED, "prefix-affinity": S.RoutingKind.PREFIX_AFFINITY,
                    "always-busiest": S.RoutingKind.ALWAYS_BUSIEST, "expression": S.RoutingKind.EXPRESSION,
                    "tree": S.RoutingKind.EXPRESSION}
SCORERS = {"queue-depth": S.RouteWeight.QUEUE_DEPTH, "kv-utilization": S.RouteWeight.KV_UTILIZATION,
           "load-balance": S.RouteWeight.LOAD_BALANCE, "prefix-affinity": S.RouteWeight.PREFIX_AFFINITY}
DEFAULT_SCORERS = {"prefix-affinity": 3.0, "queue-depth": 2.0, "kv-utilization": 2.0}  # BLIS's default
PRIORITY_AGE_WEIGHT = {"constant": 0.0, "slo-based": 1e-6, "inverted-slo": -1e-6}  # per µs of age
PRIORITY_POLICIES = (*PRIORITY_AGE_WEIGHT, *PROGRAM_KINDS)
# scheduler -> weights over (priority, arrival, prompt length, output length); None = keep order
SCHEDULERS: dict[str, tuple[float, float, float, float] | None] = {
    "fcfs": None,
    "priority-fcfs": (-1.0, 0.0, 0.0, 0.0),
    "sjf": (0.0, 0.0, 1.0, 0.0),
    "reverse-priority": (1.0, 0.0, 0.0, 0.0),
    "sort": (0.0, 0.0, 0.0, 0.0),  # custom: weights given in scheduler_weights
    "expression": None,  # a program's key (scheduler_program)
    "tree": None,
}
SORT_ATTRIBUTES = ("priority", "arrival", "prompt_len", "output_len")
VICTIMS = {"last": S.VictimKind.LAST, "lowest-priority": S.VictimKind.LOWEST_PRIORITY,
           "expression": S.VictimKind.EXPRESSION, "tree": S.VictimKind.EXPRESSION}
# slot -> (the PolicyConfig field of its policy, the field of its program, the bundle key of an
# expression in its section, the program's features: blis_fast.policy.expression.FEATURES)
PROGRAM_SLOTS = {"admission": ("admission", "admission_program", "admit"),
                 "routing": ("routing", "routing_program", "score"),
                 "priority": ("priority", "priority_program", "priority"),
                 "scheduler": ("scheduler", "scheduler_program", "key"),
                 "victim": ("preemption_victim", "victim_program", "evict"),
                 "dispatch": ("dispatch_order", "dispatch_program", "dispatch_key"),
                 "pd": ("pd_decider", "pd_program", "disaggregate"),
                 "autoscale": ("autoscaler", "autoscale_program", "desired"),
                 "flow_instance": ("flow_control", "flow_instance_program", "instance"),
                 "flow_saturated": ("flow_control", "flow_saturated_program", "saturated")}
# a program with a default: an expression detector's saturation test is optional
DEFAULT_SATURATED = "total <= in_routing"
# slot -> (how a policy bundle gives its expression, what the value means): the search adapters'
# prompts and seeds quote them (each also takes a tree: the same with tree / tree: {...})
PROGRAM_FORMS = {
    "admission": ('admission: {type: expression, admit: "<expr>"}', "a request is admitted iff the value is > 0"),
    "routing": ('routing: {type: expression, score: "<expr>"}',
                "scored per candidate instance, the highest wins, ties to the lowest index"),
    "priority": ('priority: {type: expression, priority: "<expr>"}', "the request's priority, higher is more urgent"),
    "scheduler": ('scheduler: {type: expression, key: "<expr>"}', "the wait queue's sort key, lower runs first"),
    "victim": ('preemption: {victim: expression, evict: "<expr>"}',
               "under KV pressure the running request with the highest value is preempted"),
    "dispatch": ('flow_control: {policy: <detector>, dispatch_order: expression, dispatch_key: "<expr>"}',
                 "the gateway releases the waiting request with the lowest value first"),
    "pd": ('pd: {decider: expression, disaggregate: "<expr>"}',
           "a request of a disaggregated model is prefilled on a prefill instance iff the value is > 0"),
    "autoscale": ('autoscale: {policy: expression, desired: "<expr>"}',
                  "a pool's desired instances = ceil(value) at each tick"),
    "flow_instance": ('flow_control: {policy: expression, instance: "<expr>", saturated: "<expr>", recheck: '
                      'concurrency | utilization | free-slot}',
                      "the gateway's saturation detector: instance is valued for each ready instance of the model "
                      "(policy: tree takes the same keys, a tree in instance)"),
    "flow_saturated": ('(the same flow_control\'s saturated: "<expr>")',
                       f"the model is saturated (requests wait in the gateway) iff the value > 0; default "
                       f"{DEFAULT_SATURATED}"),
}
PROGRAM_FIELDS = tuple(program for _, program, _ in PROGRAM_SLOTS.values())
KV_SNAPSHOT_FIELDS = ("kv_utilization", "free_kv_blocks", "cache_hit_rate")
MAX_INTERVAL_US = 2**53  # snapshot refresh intervals travel as float64: kept exact
MAX_WEIGHTS = 64  # entries of one name:weight list
MAX_ROUTING_OVERRIDES = 64  # entries of routing_per_model (one per served model)
PD_DECIDERS = ("never", "always", "prefix-threshold", "expression", "tree")
MAX_PROGRAM_TEXT = 4096  # characters of an expression (blis_fast.policy.expression.MAX_EXPRESSION_CHARS)


# ----------------------------------------------------------------------------- autoscaler

AUTOSCALERS = {**{name: code for code, name in enumerate(S.AUTOSCALER_NAMES)}, "tree": S.AutoscaleKind.EXPRESSION}
SIGNALS = {name: code for code, name in enumerate(S.SIGNAL_NAMES)}
# the signals whose values are fractions (0..1); the others are counts, rates or ms >= 0
FRACTION_SIGNALS = ("kv_utilization", "slo_attainment")
HIGHER_IS_BETTER = ("slo_attainment",)  # threshold: scale up when it falls below up (down < up's opposite)
MAX_SIGNAL_VALUE = 1e9  # waiting, in-flight (per instance), arrival rate (req/s per instance), TTFT p90 (ms)
MAX_PERIOD_TICKS = 10**6
# autoscaler -> its parameters (PolicyConfig fields) and their defaults
AUTOSCALER_PARAMETERS = {
    "none": {},
    "threshold": {"autoscale_signal": "kv_utilization", "autoscale_up": 0.8, "autoscale_down": 0.3},
    "target": {"autoscale_signal": "kv_utilization", "autoscale_target": 0.6},
    "saturation": {"autoscale_kv_up": 0.8, "autoscale_kv_down": 0.4},
    "oscillator": {"autoscale_period_ticks": 2},
    "expression": {"autoscale_program": None},  # desired = ceil(its value)
    "tree": {"autoscale_program": None},
}
AUTOSCALE_FIELDS = ("autoscale_signal", "autoscale_up", "autoscale_down", "autoscale_target", "autoscale_kv_up",
                    "autoscale_kv_down", "autoscale_period_ticks")
# the bundle's autoscale: keys -> PolicyConfig fields
AUTOSCALE_BUNDLE_KEYS = {**{name.removeprefix("autoscale_"): name for name in AUTOSCALE_FIELDS},
                         "desired": "autoscale_program", "tree": "autoscale_program"}


def check_autoscaler(p) -> None:
    """The autoscaler's parameters: only its own (``threshold``'s ``up`` with ``target`` is
    refused), each in its signal's range, ``up`` beyond ``down`` in the direction that
    scales up and ``kv_up`` above ``kv_down``."""
    own = AUTOSCALER_PARAMETERS[p.autoscaler]
    for name in AUTOSCALE_FIELDS:
        if getattr(p, name) is not None:
            why = foreign_parameter(name, p.autoscaler, AUTOSCALER_PARAMETERS, "autoscaler", "--autoscaler")
            if why is not None:
                raise ConfigError(f"policy.{name}", why)
    if p.autoscaler in ("threshold", "target"):
        signal = autoscale_value(p, "autoscale_signal")
        hi = 1.0 if signal in FRACTION_SIGNALS else MAX_SIGNAL_VALUE
        for name in ("autoscale_up", "autoscale_down", "autoscale_target"):
            if name in own and getattr(p, name) is not None:
                as_float(getattr(p, name), f"policy.{name}", 0, hi, lo_open=name == "autoscale_target", text=False)
        if p.autoscaler == "threshold":
            up, down = autoscale_value(p, "autoscale_up"), autoscale_value(p, "autoscale_down")
            if signal in HIGHER_IS_BETTER and not up < down:
                raise ConfigError("policy.autoscale_up", f"must be < down ({down:g}) with signal {signal}: it scales "
                                                         f"up when the signal falls below up, got {up:g}")
            if signal not in HIGHER_IS_BETTER and not up > down:
                raise ConfigError("policy.autoscale_up", f"must be > down ({down:g}) with signal {signal}: it scales "
                                                         f"up when the signal exceeds up, got {up:g}")
    if p.autoscaler == "saturation":
        kv_up, kv_down = autoscale_value(p, "autoscale_kv_up"), autoscale_value(p, "autoscale_kv_down")
        if not kv_down < kv_up:
            raise ConfigError("policy.autoscale_kv_down", f"must be < kv_up ({kv_up:g}), got {kv_down:g}")


def autoscale_value(p, name: str):
    """An autoscaler parameter in force: given, else its autoscaler's default."""
    value = getattr(p, name)
    return AUTOSCALER_PARAMETERS[p.autoscaler].get(name) if value is None else value


# ----------------------------------------------------------------------------- gateway flow control

FLOW_DETECTORS = {**{name: code for code, name in enumerate(S.FLOW_DETECTOR_NAMES)}, "tree": S.FlowDetector.EXPRESSION}
# the built-in detectors whose rules for looking again an expression detector can follow (FlowParam.RECHECK)
FLOW_RECHECKS = {name: FLOW_DETECTORS[name] for name in ("concurrency", "utilization", "free-slot")}
DISPATCH_ORDERS = {**{name: code for code, name in enumerate(S.DISPATCH_ORDER_NAMES)},
                   "tree": S.DispatchOrder.EXPRESSION}
FAIRNESS_MODES = {name: code for code, name in enumerate(S.FAIRNESS_NAMES)}
MAX_CONCURRENCY_LIMIT = 10**6  # requests in flight per instance (no instance holds more)
MAX_QUEUE_THRESHOLD = 1e9  # waiting requests per instance
# detector -> its parameters (PolicyConfig fields) and their defaults: the Gateway API Inference
# Extension's (utilization: queue depth 5, KV 0.8; concurrency: 100 in flight per instance).  Every
# detector that queues also has a dispatch order and a fairness.
_DISPATCH_DEFAULTS = {"dispatch_order": "fifo", "gateway_fairness": "strict", "dispatch_program": None}
FLOW_CONTROL_PARAMETERS = {
    "never": {},
    "concurrency": {"flow_concurrency_limit": 100, **_DISPATCH_DEFAULTS},
    "utilization": {"flow_queue_threshold": 5.0, "flow_kv_threshold": 0.8, **_DISPATCH_DEFAULTS},
    "free-slot": dict(_DISPATCH_DEFAULTS),
    "expression": {"flow_instance_program": None, "flow_saturated_program": DEFAULT_SATURATED,
                   "flow_recheck": "concurrency", **_DISPATCH_DEFAULTS},
}
FLOW_CONTROL_PARAMETERS["tree"] = dict(FLOW_CONTROL_PARAMETERS["expression"])
FLOW_CONTROL_FIELDS = ("flow_concurrency_limit", "flow_queue_threshold", "flow_kv_threshold", "dispatch_order",
                       "gateway_fairness", "dispatch_program", "flow_instance_program", "flow_saturated_program",
                       "flow_recheck")
# the bundle's flow_control: keys -> PolicyConfig fields
FLOW_CONTROL_BUNDLE_KEYS = {"concurrency_limit": "flow_concurrency_limit", "queue_threshold": "flow_queue_threshold",
                            "kv_threshold": "flow_kv_threshold", "dispatch_order": "dispatch_order",
                            "fairness": "gateway_fairness", "dispatch_key": "dispatch_program",
                            "tree": "dispatch_program", "instance": "flow_instance_program",
                            "saturated": "flow_saturated_program", "recheck": "flow_recheck"}


def foreign_parameter(name: str, kind: str, parameters: dict[str, dict], what: str, flag: str) -> str | None:
    """The message refusing parameter ``name`` under policy ``kind`` when it belongs to other
    policies of the same slot (``parameters``: policy -> its parameters), None when it is
    ``kind``'s own."""
    if name in parameters[kind]:
        return None
    users = " or ".join(k for k, own in parameters.items() if name in own)
    return f"is a parameter of {what} {users}, not of {kind}; leave it out or choose {flag} {users}"


def check_flow_control(p) -> None:
    """The flow control's parameters: only its detector's own (``flow_kv_threshold`` with
    ``concurrency`` is refused, as is any of them with ``never``)."""
    for name in FLOW_CONTROL_FIELDS:
        if getattr(p, name) is not None:
            why = foreign_parameter(name, p.flow_control, FLOW_CONTROL_PARAMETERS, "flow control", "--flow-control")
            if why is not None:
                raise ConfigError(f"policy.{name}", why)
    if p.dispatch_order == "priority" and p.priority == "constant":
        raise ConfigError("policy.dispatch_order", "priority has no effect with priority constant: every request "
                                                   "has priority 0, so the gateway releases them in arrival order; "
                                                   "choose --priority slo-based or inverted-slo, or leave it out")


def flow_control_value(p, name: str):
    """A flow-control parameter in force: given, else its detector's default (None when
    the detector has no such parameter)."""
    value = getattr(p, name)
    return FLOW_CONTROL_PARAMETERS[p.flow_control].get(name) if value is None else value


def parse_flow_per_model(value: Any, path: str) -> dict[str, dict]:
    """A ``flow_control.per_model`` mapping -> ``{served model: {"policy": DETECTOR,
    "params": {bundle key: value}}}``: each entry a flow-control section as the bundle's
    ``flow_control:`` (``slot_settings``; the parameters it leaves out take their detector's
    defaults, not the run-wide ones), checked against the ranges of the run-wide flags.
    Whether the models are served is checked with the deployments (``check_flow_models``)."""
    as_mapping(value, path, what="a mapping served model: flow control")
    if len(value) > MAX_ROUTING_OVERRIDES:
        raise ConfigError(path, f"at most {MAX_ROUTING_OVERRIDES} models, got {len(value)}")
    fields = {f.name: f for f in dataclass_fields(PolicyConfig)}
    out: dict[str, dict] = {}
    for model, entry in value.items():
        if not isinstance(model, str) or not model or len(model) > MAX_STR_LEN:
            raise ConfigError(path, f"model names must be non-empty strings, got {show(model)}")
        where = f"{path}.{key_name(model)}"
        settings = slot_settings(entry, where, "flow_control", FLOW_CONTROL_BUNDLE_KEYS, FLOW_CONTROL_PARAMETERS,
                                 "flow control")
        params = {}
        for key, name in FLOW_CONTROL_BUNDLE_KEYS.items():
            if settings[name] is not None:
                f = fields[name]
                params[key] = check_value(settings[name], f.type, f.metadata.get("limits"), f"{where}.params.{key}")
        if settings["dispatch_order"] in PROGRAM_KINDS or settings["dispatch_program"] is not None:
            raise ConfigError(f"{where}.params.dispatch_order", "an expression or tree dispatch order is run-wide "
                                                                "only: give it in flow_control itself")
        if settings["flow_control"] in PROGRAM_KINDS:
            raise ConfigError(f"{where}.policy", f"an {settings['flow_control']} detector is run-wide only: give it "
                                                 "in flow_control itself (per_model takes never, concurrency, "
                                                 "utilization or free-slot)")
        out[model] = {"policy": settings["flow_control"], "params": params}
    return out


def flow_entry_value(entry: dict, name: str):
    """A parameter (PolicyConfig field ``name``) of a ``flow_per_model`` entry in force:
    given, else its detector's default."""
    key = next(k for k, field in FLOW_CONTROL_BUNDLE_KEYS.items() if field == name)
    value = entry["params"].get(key)
    return FLOW_CONTROL_PARAMETERS[entry["policy"]].get(name) if value is None else value


def check_flow_models(p, served: tuple[str, ...]) -> None:
    """Every model of ``flow_per_model`` is served by a deployment; a ``priority`` dispatch
    order needs an age-based priority policy (as the run-wide one)."""
    for model, entry in (p.flow_per_model or {}).items():
        where = f"policy.flow_per_model.{key_name(model)}"
        if model not in served:
            raise ConfigError(where, f"flow_control.per_model names {show(model)}, which no deployment serves; served "
                                     f"models: {', '.join(show(m) for m in served)}")
        if entry["params"].get("dispatch_order") == "priority" and p.priority == "constant":
            raise ConfigError(f"{where}.params.dispatch_order", "priority has no effect with priority constant; "
                                                                "choose --priority slo-based or inverted-slo")


def any_flow_control(p) -> bool:
    """True if some served model has a saturation detector (run-wide or its own)."""
    return p.flow_control != "never" or any(e["policy"] != "never" for e in (p.flow_per_model or {}).values())


# ----------------------------------------------------------------------------- programs


def program_kind(slot: str, kind: str, program: Any) -> str:
    """The form of ``slot``'s program under its policy ``kind``: the policy's, but an
    expression detector's saturation test is an expression unless given as a tree (a
    mapping, or YAML text of one), under either detector form."""
    if slot == "flow_saturated":
        tree = isinstance(program, dict) or (isinstance(program, str) and program.lstrip().startswith("{"))
        return "tree" if tree else "expression"
    return kind


def program_row(kind: str, program: Any, slot: str, field: str):
    """The program row (blis_fast/config/expression.py) of a slot whose policy is
    ``expression`` (``program``: the formula) or ``tree`` (a mapping, or its YAML text)."""
    if kind == "expression":
        if not isinstance(program, str):
            raise ConfigError(field, f"an expression is a string, e.g. \"-load\", got {type(program).__name__}; "
                                     "a mapping is a tree (type tree)")
        return compile_expression(program, slot, field)
    return compile_tree(tree_mapping(program, field), slot, field)


def tree_mapping(program: Any, field: str) -> dict:
    """A tree given as a mapping or as YAML text (the CLI's ``--routing-program "{feature:
    queue, threshold: 4, left: 1, right: 0}"``) -> the mapping."""
    if isinstance(program, str):
        if len(program) > MAX_PROGRAM_TEXT:
            raise ConfigError(field, f"is {len(program)} characters long, at most {MAX_PROGRAM_TEXT}")
        try:
            program = yaml.safe_load(program)
        except yaml.YAMLError as e:
            raise ConfigError(field, f"a tree given as text must be a YAML mapping: {str(e).splitlines()[0]}") from None
    if not isinstance(program, dict):
        raise ConfigError(field, "a tree is a mapping {feature, threshold, left, right}, got "
                                 f"{type(program).__name__}")
    return program


def check_programs(p) -> None:
    """Each slot's program is given exactly when its policy is ``expression`` or ``tree``,
    and compiles (a one-line error naming the column and what is allowed if not)."""
    for slot, (kind_field, program_field, key) in PROGRAM_SLOTS.items():
        kind, program = getattr(p, kind_field), getattr(p, program_field)
        field = f"policy.{program_field}"
        if kind in PROGRAM_KINDS:
            if program is None and slot == "flow_saturated":
                continue  # (DEFAULT_SATURATED)
            if program is None:
                raise ConfigError(field, f"missing: {kind_field} {kind} needs its {kind} (a policy bundle's "
                                         f"{{type: {kind}, {key if kind == 'expression' else 'tree'}: ...}})")
            program_row(program_kind(slot, kind, program), program, slot, field)
        # (a program without its policy: refused by config.effective as the other unused parameters, or
        # ignored when a later layer switched the policy)
    if p.admission in PROGRAM_KINDS:
        row = program_row(p.admission, p.admission_program, "admission", "policy.admission_program")
        reads_bucket = int(row[S.ProgramHeader.FEATURES]) >> S.AdmitFeature.BUCKET_TOKENS & 1
        for name in ("token_bucket_capacity", "token_bucket_refill_rate"):
            if not reads_bucket and getattr(p, name) != PolicyConfig.__dataclass_fields__[name].default:
                raise ConfigError(f"policy.{name}", f"has no effect: the admission {p.admission} does not read "
                                                    "bucket_tokens")
    if p.scheduler in PROGRAM_KINDS and p.scheduler_weights:
        raise ConfigError("policy.scheduler_weights", f"apply only to scheduler sort, not {p.scheduler}")
    if p.priority in PROGRAM_KINDS and p.slo_class_weights:
        raise ConfigError("policy.slo_class_weights", f"apply only to priority slo-based or inverted-slo, not "
                                                      f"{p.priority}: a program can read slo_class itself")


# the keys of policy.fitness_weights (blis_fast.results.fitness computes the fitness)
FITNESS_KEYS = ("throughput", "tokens_per_sec", "p99_ttft", "p50_ttft", "mean_ttft", "p99_e2e", "p50_e2e", "mean_e2e")


def validate_fitness_weights(weights: dict[str, float], path: str = "fitness_weights") -> None:
    """Known keys, finite weights >= 0, at least one."""
    if not weights:
        raise ConfigError(path, "needs at least one key:weight")
    for key, w in weights.items():
        if key not in FITNESS_KEYS:
            raise ConfigError(path, f"unknown key {key!r}; allowed: {', '.join(FITNESS_KEYS)}")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(float(w)) or w < 0:
            raise ConfigError(f"{path}.{key}", f"weight must be a finite number >= 0, got {w!r}")


@dataclass(frozen=True)
class PolicyConfig:
    """Admission, routing, priority, queue order, preemption victim and router observability."""

    admission: str = _opt("always-admit", "admission policy: always-admit | token-bucket | reject-all | expression | "
                                        "tree", choices=ADMISSION_POLICIES)
    admission_program: str | dict | None = _opt(
        None, "admission expression or tree: admitted iff its value > 0 (features: docs/policies.md)",
        max_len=MAX_PROGRAM_TEXT)
    token_bucket_capacity: float = _opt(10000.0, "token-bucket capacity, prompt tokens (>= 0; with admission token-bucket)", lo=0,
                                        hi=MAX_POLICY_WEIGHT)
    token_bucket_refill_rate: float = _opt(1000.0, "token-bucket refill rate, prompt tokens per second (>= 0; with admission token-bucket)", lo=0,
                                           hi=MAX_POLICY_WEIGHT)
    routing: str = _opt("round-robin", "routing policy: round-robin | least-loaded | weighted | prefix-affinity | "
                                       "always-busiest | expression | tree", choices=ROUTING_POLICIES)
    routing_program: str | dict | None = _opt(
        None, "routing expression or tree: each candidate instance's score, the highest wins (features: "
              "docs/policies.md)", max_len=MAX_PROGRAM_TEXT)
    routing_scorers: dict[str, float] | None = _opt(
        None, "routing weighted: scorers name:weight (queue-depth, kv-utilization, load-balance, prefix-affinity); "
              "default prefix-affinity:3,queue-depth:2,kv-utilization:2")
    priority: str = _opt("constant", "priority policy: constant | slo-based | inverted-slo | expression | tree",
                         choices=PRIORITY_POLICIES)
    priority_program: str | dict | None = _opt(
        None, "priority expression or tree: a request's priority, higher = more urgent (features: docs/policies.md)",
        max_len=MAX_PROGRAM_TEXT)
    slo_class_weights: list[float] | None = _opt(None, "priority added per SLO class (class 0, 1, ...; with priority slo-based or inverted-slo)",
                                                 lo=-MAX_POLICY_WEIGHT, hi=MAX_POLICY_WEIGHT,
                                                 max_len=S.MAX_SLO_CLASS_WEIGHTS)
    scheduler: str = _opt("fcfs", "instance scheduler: fcfs | priority-fcfs | sjf | reverse-priority | sort | "
                                   "expression | tree", choices=SCHEDULERS)
    scheduler_program: str | dict | None = _opt(
        None, "scheduler expression or tree: the wait queue's sort key, lower first (features: docs/policies.md)",
        max_len=MAX_PROGRAM_TEXT)
    scheduler_weights: dict[str, float] | None = _opt(
        None, "scheduler 'sort': ascending key = Σ weight·attribute over priority, arrival, prompt_len, output_len")
    preemption_victim: str = _opt("last", "preemption victim: last (last admitted) | lowest-priority | expression | "
                                          "tree", choices=VICTIMS)
    victim_program: str | dict | None = _opt(
        None, "preemption victim expression or tree: the running request with the highest value is preempted "
              "(features: docs/policies.md)", max_len=MAX_PROGRAM_TEXT)
    snapshot_refresh_interval: int = _opt(0, "µs between refreshes of the router's KV fields (0 = live)", lo=0,
                                          hi=MAX_INTERVAL_US, unit="µs")
    snapshot_intervals: dict[str, int] | None = _opt(
        None, "per-field refresh interval µs: queue_depth, batch_size, kv_utilization, free_kv_blocks, "
              "cache_hit_rate, pending, in_flight (overrides snapshot_refresh_interval)")
    prefix_index_capacity: int = _opt(10000, "prefix-block keys per instance in the router's prefix-affinity index",
                                      lo=1, hi=10_000_000)
    fitness_weights: dict[str, float] | None = _opt(None, "fitness components key:weight (see docs/policies.md)")
    routing_per_model: dict[str, dict] | None = _opt(
        None, "routing of some served models instead of routing/routing_scorers: {served model: {type: NAME, "
              "scorers: {name: weight}}} (a policy bundle's routing.per_model; YAML and API only)",
        cli=False, parse=lambda value, where: parse_routing_per_model(value, where))

    prefill_routing: dict | None = _opt(
        None, "P/D: the routing of prefill legs instead of their model's: {type: NAME, scorers: {name: weight}} "
              "(a policy bundle's routing.prefill; YAML and API only)",
        cli=False, parse=lambda value, where: parse_routing_entry(value, where))
    pd_decider: str | None = _opt(None, "P/D: the decider of every disaggregated model instead of its "
                                        "deployment's pd.decider: never | always | prefix-threshold | expression | "
                                        "tree (a policy bundle's pd.decider; YAML and API only)",
                                  choices=PD_DECIDERS, cli=False)
    pd_program: str | dict | None = _opt(
        None, "P/D decider expression or tree: disaggregate a request iff its value > 0 (features: docs/policies.md; "
              "a policy bundle's pd.disaggregate; YAML and API only)", max_len=MAX_PROGRAM_TEXT, cli=False)
    pd_threshold: int | None = _opt(None, "P/D: the prefix-threshold decider's threshold instead of the "
                                          "deployment's, tokens (a policy bundle's pd.threshold; YAML and API only)",
                                    lo=0, hi=10**9, cli=False)

    autoscaler: str = _opt("none", "autoscaling policy of every autoscaled pool: none | threshold | target | "
                                   "saturation | oscillator (pathological)", choices=AUTOSCALERS)
    autoscale_signal: str | None = _opt(None, "autoscaler threshold or target: the signal it reads: kv_utilization | "
                                              "waiting | in_flight | arrival_rate | ttft_p90_ms | slo_attainment "
                                              "(default kv_utilization)", choices=SIGNALS)
    autoscale_up: float | None = _opt(None, "autoscaler threshold: scale up when the signal exceeds this (below it "
                                            "for slo_attainment; default 0.8)", lo=0, hi=MAX_SIGNAL_VALUE)
    autoscale_down: float | None = _opt(None, "autoscaler threshold: scale down when the signal falls below this "
                                              "(above it for slo_attainment; default 0.3)", lo=0, hi=MAX_SIGNAL_VALUE)
    autoscale_target: float | None = _opt(None, "autoscaler target: the signal's target per instance, desired = "
                                                "ceil(current x signal / target) (default 0.6)", lo=0, lo_open=True,
                                          hi=MAX_SIGNAL_VALUE)
    autoscale_kv_up: float | None = _opt(None, "autoscaler saturation: scale up when KV demand (queued tokens "
                                               "included) / capacity exceeds this (default 0.8)", lo=0, lo_open=True,
                                         hi=1)
    autoscale_kv_down: float | None = _opt(None, "autoscaler saturation: scale down when it falls below this "
                                                 "(default 0.4)", lo=0, hi=1)
    autoscale_period_ticks: int | None = _opt(None, "autoscaler oscillator: ticks between its changes (default 2)",
                                              lo=1, hi=MAX_PERIOD_TICKS)
    autoscale_program: str | dict | None = _opt(
        None, "autoscaler expression or tree: a pool's desired instances = ceil(its value) at each tick (features: "
              "docs/policies.md)", max_len=MAX_PROGRAM_TEXT)

    flow_control: str = _opt("never", "gateway flow control: the saturation detector that holds requests in a "
                                      "queue in front of the router: never | concurrency | utilization | free-slot "
                                      "(late binding) | expression | tree", choices=FLOW_DETECTORS)
    flow_concurrency_limit: int | None = _opt(None, "flow control concurrency: saturated when every instance has this "
                                                    "many requests in flight (default 100)", lo=1,
                                              hi=MAX_CONCURRENCY_LIMIT)
    flow_queue_threshold: float | None = _opt(None, "flow control utilization: the wait-queue depth per instance that "
                                                    "counts as full (default 5)", lo=0, lo_open=True,
                                              hi=MAX_QUEUE_THRESHOLD)
    flow_kv_threshold: float | None = _opt(None, "flow control utilization: the KV utilization that counts as full "
                                                 "(default 0.8)", lo=0, lo_open=True, hi=1)
    dispatch_order: str | None = _opt(None, "flow control: which waiting request the gateway releases first: fifo | "
                                            "priority | deadline (earliest TTFT deadline) | expression | tree "
                                            "(lowest dispatch_program value at entry; default fifo)",
                                      choices=DISPATCH_ORDERS)
    dispatch_program: str | dict | None = _opt(
        None, "flow control dispatch_order expression or tree: a waiting request's key, the lowest released first "
              "(features: docs/policies.md)", max_len=MAX_PROGRAM_TEXT)
    gateway_fairness: str | None = _opt(None, "flow control: dispatch among tenants: strict (one order) | "
                                              "round-robin (tenants take turns; default strict)",
                                        choices=FAIRNESS_MODES)
    flow_instance_program: str | dict | None = _opt(
        None, "flow control expression or tree: each ready instance's value, summed into the saturation test's "
              "total (features: docs/policies.md)", max_len=MAX_PROGRAM_TEXT)
    flow_saturated_program: str | dict | None = _opt(
        None, "flow control expression or tree: the model is saturated iff this is > 0 (features total, largest, "
              f"smallest, instances, in_routing, gateway_depth; default {DEFAULT_SATURATED})",
        max_len=MAX_PROGRAM_TEXT)
    flow_recheck: str | None = _opt(None, "flow control expression or tree: when the gateway looks again, as "
                                          "concurrency | utilization | free-slot (late binding too) does (default "
                                          "concurrency)", choices=FLOW_RECHECKS)
    flow_per_model: dict[str, dict] | None = _opt(
        None, "flow control of some served models instead of the run-wide one: {model: {policy: DETECTOR, params: "
              "{...}}} (a policy bundle's flow_control.per_model; YAML and API only)",
        cli=False, parse=lambda value, where: parse_flow_per_model(value, where))

    def __post_init__(self) -> None:
        if self.prefill_routing is not None:
            object.__setattr__(self, "prefill_routing", parse_routing_entry(self.prefill_routing,
                                                                            "policy.prefill_routing"))
        if self.flow_per_model is not None:  # one shape from here on: {model: {policy, params}}
            object.__setattr__(self, "flow_per_model", parse_flow_per_model(self.flow_per_model,
                                                                            "policy.flow_per_model"))
        if self.routing_per_model is not None:  # one shape from here on: {model: {type, scorers}}
            object.__setattr__(self, "routing_per_model",
                               parse_routing_per_model(self.routing_per_model, "policy.routing_per_model"))
        validate_policy(self)

    def scorers(self) -> dict[str, float]:
        """The weighted router's scorers (default BLIS's)."""
        return dict(self.routing_scorers) if self.routing_scorers is not None else dict(DEFAULT_SCORERS)


def parse_routing_per_model(value: Any, path: str) -> dict[str, dict]:
    """A ``routing.per_model`` mapping -> ``{served model: {"type": NAME, "scorers": {name:
    weight} | None}}``, each entry a routing policy name or a mapping ``{type, scorers}``
    (``scorers`` only with ``weighted``).  Whether the models are served is checked with the
    deployments (``check_routing_models``)."""
    as_mapping(value, path, what="a mapping served model: routing")
    if len(value) > MAX_ROUTING_OVERRIDES:
        raise ConfigError(path, f"at most {MAX_ROUTING_OVERRIDES} models, got {len(value)}")
    out: dict[str, dict] = {}
    for model, entry in value.items():
        if not isinstance(model, str) or not model or len(model) > MAX_STR_LEN:
            raise ConfigError(path, f"model names must be non-empty strings, got {show(model)}")
        out[model] = parse_routing_entry(entry, f"{path}.{key_name(model)}")
    return out


def parse_routing_entry(entry: Any, where: str) -> dict:
    """One routing choice -- a routing policy name, or a mapping ``{type, scorers}``
    (``scorers`` only with ``weighted``) -- as ``{"type": NAME, "scorers": {...} | None}``."""
    if isinstance(entry, dict) and "program" in entry:  # (already parsed: {type, scorers, program})
        entry = {k: v for k, v in entry.items() if v is not None}
        program = entry.pop("program", None)
        if program is not None:
            entry["score" if entry.get("type") == "expression" else "tree"] = program
    kind, params = _section(entry, where, {"scorers", "score", "tree"})
    _only(params, where, {"scorers", "score", "tree"})
    if kind is None:
        raise ConfigError(f"{where}.type", "missing: name the routing policy")
    _check_choice(f"{where}.type", kind, ROUTING_POLICIES)
    found: dict = {}
    _bundle_program(found, "routing", kind, params, where)
    program = found.get("routing_program")
    if kind in PROGRAM_KINDS and program is None:
        raise ConfigError(f"{where}.{'score' if kind == 'expression' else 'tree'}", f"missing: type {kind} needs it")
    scorers = params.get("scorers")
    if scorers is not None:
        if kind != "weighted":
            raise ConfigError(f"{where}.scorers", f"apply only to type weighted, not {show(kind)}")
        scorers = parse_weights(scorers, f"{where}.scorers")
        if not scorers:
            raise ConfigError(f"{where}.scorers", "needs at least one scorer")
        for s, w in scorers.items():
            _check_choice(f"{where}.scorers", s, SCORERS)
            _check_number(f"{where}.scorers.{s}", w, 0.0, allow_equal=False, hi=None)
    out = {"type": kind, "scorers": scorers}
    if program is not None:  # (only then: a template's entry keeps its shape)
        out["program"] = program
    return out


def check_routing_models(p: PolicyConfig, served: tuple[str, ...]) -> None:
    """Every model of ``routing_per_model`` is served by a deployment (ConfigError naming
    the entry and listing the served models)."""
    for model in p.routing_per_model or {}:
        if model not in served:
            raise ConfigError(f"policy.routing_per_model.{key_name(model)}",
                              f"routing.per_model names {show(model)}, which no deployment serves; served models: "
                              f"{', '.join(show(m) for m in served)}")


def _check_choice(path: str, value: Any, choices) -> str:
    return as_choice(value, path, tuple(choices))


def _check_number(path: str, value: Any, lo: float = 0.0, allow_equal: bool = True,
                  hi: float | None = MAX_POLICY_WEIGHT) -> float:
    return as_float(value, path, lo, hi, lo_open=not allow_equal, text=False)


def _weights(value: Any, path: str, names, lo: float | None, hi: float | None, lo_open: bool = False,
             integer: bool = False) -> None:
    as_mapping(value, path, what="a mapping name: weight")
    if len(value) > MAX_WEIGHTS:
        raise ConfigError(path, f"at most {MAX_WEIGHTS} entries, got {len(value)}")
    for name, w in value.items():
        _check_choice(path, name, names)
        if integer:
            as_int(w, f"{path}.{name}", lo, hi, text=False, integral_float=False)
        else:
            as_float(w, f"{path}.{name}", lo, hi, lo_open=lo_open, text=False)


def validate_policy(p: PolicyConfig) -> None:
    """Raise ConfigError (``policy.<field>``) on the first bad value: choices, numbers
    finite and in range (blis_fast.config.validate)."""
    check_fields(p, "policy")
    if p.routing_scorers is not None:
        # any finite positive weight: the router scales weights before scoring (no overflow)
        _weights(p.routing_scorers, "policy.routing_scorers", SCORERS, 0.0, None, lo_open=True)
        if not p.routing_scorers:
            raise ConfigError("policy.routing_scorers", "needs at least one scorer")
    if p.scheduler_weights is not None:
        _weights(p.scheduler_weights, "policy.scheduler_weights", SORT_ATTRIBUTES, -MAX_POLICY_WEIGHT,
                 MAX_POLICY_WEIGHT)
    if p.snapshot_intervals is not None:
        _weights(p.snapshot_intervals, "policy.snapshot_intervals", S.SNAPSHOT_FIELD_NAMES, 0, MAX_INTERVAL_US,
                 integer=True)
    if p.fitness_weights is not None:
        as_mapping(p.fitness_weights, "policy.fitness_weights", what="a mapping name: weight")
        for k, w in p.fitness_weights.items():
            as_float(w, f"policy.fitness_weights.{k}", text=False)
        validate_fitness_weights(p.fitness_weights, "policy.fitness_weights")
    check_programs(p)
    check_autoscaler(p)
    check_flow_control(p)


# ----------------------------------------------------------------------------- name:weight lists


def parse_weights(text: str | dict, path: str) -> dict[str, float]:
    """``"a:1,b:2.5"`` (CLI) or a mapping (YAML) or BLIS's ``[{name, weight}]`` list ->
    {name: weight}; checks the syntax and that each weight is a finite number (ranges are
    checked where the weights are used)."""
    if isinstance(text, dict):
        items = list(text.items())
    elif isinstance(text, str):
        if len(text) > 100_000:
            raise ConfigError(path, f"expected name:weight pairs, got {show(text)}")
        items = []
        for part in [x.strip() for x in text.split(",") if x.strip()]:
            name, sep, w = part.partition(":")
            if not sep:
                raise ConfigError(path, f"expected name:weight, got {show(part)}")
            items.append((name.strip(), w.strip()))
    elif isinstance(text, list):  # BLIS style: [{name: ..., weight: ...}, ...]
        items = []
        for k, entry in enumerate(text):
            if not isinstance(entry, dict) or set(entry) - {"name", "weight"} or "name" not in entry:
                raise ConfigError(f"{path}[{k}]", f"expected a mapping with name and weight, got {show(entry)}")
            items.append((entry["name"], entry.get("weight", 1.0)))
    else:
        raise ConfigError(path, f"expected name:weight pairs, got {show(text)}")
    if len(items) > MAX_WEIGHTS:
        raise ConfigError(path, f"at most {MAX_WEIGHTS} entries, got {len(items)}")
    out: dict[str, float] = {}
    for name, w in items:
        if not isinstance(name, str) or not name or len(name) > MAX_STR_LEN:
            raise ConfigError(path, f"names must be non-empty strings, got {show(name)}")
        x = as_float(w, f"{path}.{key_name(name)}")
        if name in out:
            raise ConfigError(path, f"{show(name)} given twice")
        out[name] = x
    return out


# ----------------------------------------------------------------------------- policy bundle YAML

_BUNDLE_SECTIONS = ("admission", "routing", "priority", "scheduler", "preemption", "observability", "fitness", "pd",
                    "autoscale", "flow_control")


def load_policy_bundle(path: str | Path, name: str = "--policy-config") -> dict[str, Any]:
    """Read a policy bundle YAML into flat ``policy`` settings (``{field: value}``).

    Accepted shapes, per section: ``{type|policy: NAME, params: {...}}`` and BLIS's bundle
    (``admission.token_bucket_capacity``, ``routing.scorers: [{name, weight}]``,
    ``scheduler: NAME``).  Unknown keys and bad values raise ConfigError with the YAML path;
    a file that cannot be read, with ``name`` (the flag or keyword that gave it).
    """
    p = Path(path)
    data = read_yaml_mapping(p, name)
    return bundle_to_settings(data, p.name)


def _section(data: Any, path: str, allowed: set[str]) -> tuple[str | None, dict]:
    """(policy name, params) of one section; strict about keys and types."""
    if isinstance(data, str):
        return data, {}
    if not isinstance(data, dict):
        raise ConfigError(path, f"must be a policy name or a mapping, got {show(data)}")
    keys = allowed | {"type", "policy", "params"}
    as_mapping(data, path, keys)
    if "type" in data and "policy" in data:
        raise ConfigError(path, "give either type or policy, not both")
    name = data.get("type", data.get("policy"))
    if name is not None and not isinstance(name, str):
        raise ConfigError(f"{path}.type", f"must be a string, got {show(name)}")
    params = data.get("params") or {}
    as_mapping(params, f"{path}.params")
    merged = {k: v for k, v in data.items() if k not in ("type", "policy", "params")}
    for k, v in params.items():
        merged[k] = v
    return name, merged


def _only(params: dict, path: str, allowed: set[str]) -> None:
    for k in params:
        if k not in allowed:
            raise ConfigError(f"{path}.params.{key_name(k)}",
                              f"unknown parameter; allowed: {', '.join(sorted(allowed)) or 'none'}")


def bundle_to_settings(data: dict, name: str = "policy") -> dict[str, Any]:
    """Translate a parsed bundle into PolicyConfig fields (strict; errors name the path)."""
    out: dict[str, Any] = {}
    as_mapping(data, name, what="a mapping of policy sections")
    for key in data:
        if key not in _BUNDLE_SECTIONS:
            raise ConfigError(f"{name}: {key_name(key)}", f"unknown section; allowed: {', '.join(_BUNDLE_SECTIONS)}")
    if "admission" in data:
        pol, prm = _section(data["admission"], "admission", {"token_bucket_capacity", "token_bucket_refill_rate",
                                                             "admit", "tree"})
        _only(prm, "admission", {"capacity", "refill_rate", "token_bucket_capacity", "token_bucket_refill_rate",
                                 "admit", "tree"})
        if pol is not None:
            _check_choice("admission.type", pol, ADMISSION_POLICIES)
            out["admission"] = pol
        _bundle_program(out, "admission", pol, prm, "admission")
        for src, dst in (("capacity", "token_bucket_capacity"), ("token_bucket_capacity", "token_bucket_capacity"),
                         ("refill_rate", "token_bucket_refill_rate"),
                         ("token_bucket_refill_rate", "token_bucket_refill_rate")):
            if src in prm:
                out[dst] = _check_number(f"admission.params.{src}", prm[src])
    if "routing" in data:
        pol, prm = _section(data["routing"], "routing", {"scorers", "per_model", "prefill", "score", "tree"})
        _only(prm, "routing", {"scorers", "per_model", "prefill", "score", "tree"})
        _bundle_program(out, "routing", pol, prm, "routing")
        if "per_model" in prm:
            out["routing_per_model"] = parse_routing_per_model(prm["per_model"], "routing.per_model")
        if "prefill" in prm:
            out["prefill_routing"] = parse_routing_entry(prm["prefill"], "routing.prefill")
        if pol is not None:
            _check_choice("routing.type", pol, ROUTING_POLICIES)
            out["routing"] = pol
        if "scorers" in prm:
            weights = parse_weights(prm["scorers"], "routing.scorers")
            for s, w in weights.items():
                _check_choice("routing.scorers", s, SCORERS)
                _check_number(f"routing.scorers.{s}", w, 0.0, allow_equal=False, hi=None)
            out["routing_scorers"] = weights
    if "pd" in data:  # P/D: the decider of every disaggregated model
        pd = as_mapping(data["pd"], "pd", allowed=("decider", "threshold", "disaggregate", "tree"),
                        what="a mapping with decider and/or threshold")
        if "decider" in pd:
            _check_choice("pd.decider", pd["decider"], PD_DECIDERS)
            out["pd_decider"] = pd["decider"]
        _bundle_program(out, "pd", pd.get("decider"), pd, "pd")
        if "threshold" in pd:
            out["pd_threshold"] = as_int(pd["threshold"], "pd.threshold", lo=0, hi=10**9)
    if "autoscale" in data:
        out.update(autoscale_settings(data["autoscale"]))
    if "flow_control" in data:
        section = data["flow_control"]
        if isinstance(section, dict) and "per_model" in section:  # (per served model: flow_per_model)
            section = dict(section)
            out["flow_per_model"] = parse_flow_per_model(section.pop("per_model"), "flow_control.per_model")
            if not ({"policy", "type"} & set(section)):  # per_model alone: the run-wide one stays never
                section["policy"] = "never"
        out.update(slot_settings(section, "flow_control", "flow_control", FLOW_CONTROL_BUNDLE_KEYS,
                                 FLOW_CONTROL_PARAMETERS, "flow control"))
    if "priority" in data:
        pol, prm = _section(data["priority"], "priority", {"priority", "tree"})
        _only(prm, "priority", {"slo_class_weights", "priority", "tree"})
        if pol is not None:
            _check_choice("priority.type", pol, PRIORITY_POLICIES)
            out["priority"] = pol
        _bundle_program(out, "priority", pol, prm, "priority")
        if "slo_class_weights" in prm:
            out["slo_class_weights"] = as_list(prm["slo_class_weights"], "priority.params.slo_class_weights",
                                               max_len=S.MAX_SLO_CLASS_WEIGHTS, what="a list of numbers")
    if "scheduler" in data:
        pol, prm = _section(data["scheduler"], "scheduler", {"key", "tree"})
        _only(prm, "scheduler", set(SORT_ATTRIBUTES) | {"weights", "key", "tree"})
        if pol is not None:
            _check_choice("scheduler.type", pol, SCHEDULERS)
            out["scheduler"] = pol
        _bundle_program(out, "scheduler", pol, prm, "scheduler")
        weights = prm.get("weights", {k: v for k, v in prm.items() if k in SORT_ATTRIBUTES})
        if weights:
            out["scheduler_weights"] = parse_weights(weights, "scheduler.params")
    if "preemption" in data:
        pol, prm = _section(data["preemption"], "preemption", {"victim", "evict", "tree"})
        _only(prm, "preemption", {"victim", "evict", "tree"})
        victim = prm.get("victim", pol)
        if victim is not None:
            _check_choice("preemption.victim", victim, VICTIMS)
            out["preemption_victim"] = victim
        _bundle_program(out, "victim", victim, prm, "preemption")
    if "observability" in data:
        obs = data["observability"]
        as_mapping(obs, "observability")
        for k, v in obs.items():
            if k == "snapshot_refresh_interval":
                out["snapshot_refresh_interval"] = v
            elif k == "fields":
                as_mapping(v, "observability.fields", what="a mapping field: interval_us")
                out["snapshot_intervals"] = dict(v)
            elif k == "prefix_index_capacity":
                out["prefix_index_capacity"] = v
            else:
                raise ConfigError(f"observability.{key_name(k)}", "unknown key; allowed: snapshot_refresh_interval, fields, prefix_index_capacity")
    if "fitness" in data:
        fit = data["fitness"]
        if isinstance(fit, dict) and set(fit) <= {"weights"} and "weights" in fit:
            fit = fit["weights"]
        out["fitness_weights"] = parse_weights(fit, "fitness.weights")
    return out


def _bundle_program(out: dict, slot: str, kind: str | None, params: dict, section: str) -> None:
    """A bundle section's program -- its expression key (``score:``, ``admit:``, ...,
    PROGRAM_SLOTS) with type expression, ``tree:`` with type tree -- into ``out``, checked
    here so an error names the YAML path."""
    _, program_field, key = PROGRAM_SLOTS[slot]
    given = [k for k in (key, "tree") if k in params]
    if not given:
        return
    if kind not in PROGRAM_KINDS:
        raise ConfigError(f"{section}.{given[0]}", f"applies only to type expression or tree, not {show(kind)}")
    want = key if kind == "expression" else "tree"
    if given != [want]:
        raise ConfigError(f"{section}.{given[0]}", f"type {kind} takes {want}: (one of them), not {given[0]}:")
    program_row(kind, params[want], slot, f"{section}.{want}")
    out[program_field] = params[want]


def autoscale_settings(section: Any, path: str = "autoscale") -> dict[str, Any]:
    """A bundle's ``autoscale:`` section -> every autoscaler field of PolicyConfig (``slot_settings``)."""
    return slot_settings(section, path, "autoscaler", AUTOSCALE_BUNDLE_KEYS, AUTOSCALER_PARAMETERS, "autoscaler")


def slot_settings(section: Any, path: str, kind_field: str, bundle_keys: dict[str, str],
                  parameters: dict[str, dict], what: str) -> dict[str, Any]:
    """A bundle section of a policy with its own parameters (``autoscale:``,
    ``flow_control:``; ``{policy|type: NAME, params: {...}}`` or the parameters beside the
    name) -> the policy's field ``kind_field`` and every parameter field (``bundle_keys``:
    section key -> PolicyConfig field): the section replaces the whole policy (the
    parameters it leaves out at None, their defaults), so a bundle never inherits another
    policy's parameters from the run config.  ``parameters``: policy -> its own fields."""
    kind, params = _section(section, path, set(bundle_keys))
    _only(params, path, set(bundle_keys))
    if kind is None:
        raise ConfigError(f"{path}.policy", f"missing: name the {what} ({', '.join(parameters)})")
    _check_choice(f"{path}.policy", kind, parameters)
    out: dict[str, Any] = {kind_field: kind, **{name: None for name in bundle_keys.values()}}
    for key, value in params.items():
        name = bundle_keys[key]
        if name not in parameters[kind]:
            users = [a for a, prm in parameters.items() if name in prm]
            raise ConfigError(f"{path}.params.{key}", f"is a parameter of {what} {' or '.join(users)}, not of "
                                                      f"{kind}")
        out[name] = value
    return out
