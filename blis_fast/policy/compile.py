"""Compile a policy configuration into a candidate the kernels read: one kind code and one
float64 parameter row per policy slot (layouts in ``blis_fast_kernels.schema``).

The kernels' signatures never change with the policy, so an evolutionary search can
evaluate thousands of candidates without a single recompilation, and a candidate (being
numbers) cannot break out of the simulation.  ``run.tables.build_state`` binds a compiled
candidate to a run's tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blis_fast.config.policy import (ADMISSION_POLICIES, AUTOSCALERS, DEFAULT_SCORERS, DISPATCH_ORDERS,
                                     FAIRNESS_MODES, FLOW_DETECTORS, FLOW_RECHECKS, KV_SNAPSHOT_FIELDS,
                                     PRIORITY_AGE_WEIGHT,
                                     ROUTING_POLICIES, SCHEDULERS, SCORERS, SIGNALS, SORT_ATTRIBUTES, VICTIMS,
                                     PROGRAM_KINDS, PolicyConfig, autoscale_value, flow_control_value, flow_entry_value,
                                     program_kind, program_row)
from blis_fast.config.validate import key_name, show
from blis_fast.errors import ConfigError
from blis_fast_kernels import schema as S

@dataclass(eq=False)
class CompiledPolicies:
    """A policy candidate as the kernels read it: one kind per slot and one parameter row
    per slot (layouts in ``blis_fast_kernels.schema``: PolicySlot, AdmissionParam, RouteWeight,
    PriorityParam, SchedWeight, SnapField)."""

    kinds: np.ndarray  # int64[N_POLICY_SLOTS]
    params: np.ndarray  # float64[N_POLICY_SLOTS, POLICY_WIDTH]
    uses_prefix_index: bool  # the router must keep its prefix-affinity index
    # routing overrides of some served models: (served model, routing kind, routing row)
    per_model: tuple[tuple[str, int, np.ndarray], ...] = ()
    # P/D: the prefill legs' routing (kind, row) instead of their models'; the decider and threshold
    # of every disaggregated model instead of its deployment's (None: the deployment's)
    prefill_routing: tuple[int, np.ndarray] | None = None
    pd_decider: str | None = None
    pd_threshold: int | None = None
    # flow control of some served models instead of the FLOW slot's: (served model, detector, FLOW row)
    flow_per_model: tuple[tuple[str, int, np.ndarray], ...] = ()

    @property
    def scheduler_kind(self) -> int:
        return int(self.kinds[S.PolicySlot.SCHEDULER])

    def routing_rows(self, served_models: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(routing kind per served model, routing parameter row per served model): the
        ROUTING slot's for every model but those with an override (``State.routing_kind``,
        ``State.routing_param``; model ids index ``served_models``)."""
        return self._per_model_rows(S.PolicySlot.ROUTING, self.per_model, "routing_per_model", served_models)

    def flow_rows(self, served_models: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(detector per served model, FLOW parameter row per served model): the FLOW slot's
        for every model but those of ``flow_per_model`` (``State.flow_kind``, ``flow_param``)."""
        return self._per_model_rows(S.PolicySlot.FLOW, self.flow_per_model, "flow_per_model", served_models)

    def _per_model_rows(self, slot: int, overrides, field: str, served_models: tuple[str, ...]):
        n = len(served_models)
        kinds = np.full(n, self.kinds[slot], np.int64)
        params = np.tile(np.asarray(self.params[slot], np.float64), (n, 1))
        for model, kind, row in overrides:
            if model not in served_models:  # (the config checks this first: check_routing_models, check_flow_models)
                raise ConfigError(f"policy.{field}.{key_name(model)}", "no deployment serves it; served "
                                  f"models: {', '.join(show(m) for m in served_models)}")
            m = served_models.index(model)
            kinds[m] = kind
            params[m] = row
        return kinds, params


MAX_INTERVAL_US = 2**53


def compile_policies(p: PolicyConfig) -> CompiledPolicies:
    """PolicyConfig -> (kinds, parameter matrix)."""
    slot = S.PolicySlot
    kinds = np.zeros(S.N_POLICY_SLOTS, np.int64)
    params = np.zeros((S.N_POLICY_SLOTS, S.POLICY_WIDTH), np.float64)
    kinds[slot.ADMISSION] = ADMISSION_POLICIES[p.admission]
    if p.admission in PROGRAM_KINDS:
        params[slot.ADMISSION] = program_row(p.admission, p.admission_program, "admission", "policy.admission_program")
        # the bucket the program reads as bucket_tokens (it is kept only if the program reads it)
        params[slot.ADMISSION, S.AdmissionParam.PROGRAM_CAPACITY] = p.token_bucket_capacity
        params[slot.ADMISSION, S.AdmissionParam.PROGRAM_REFILL_PER_S] = p.token_bucket_refill_rate
    else:
        params[slot.ADMISSION, S.AdmissionParam.CAPACITY] = p.token_bucket_capacity
        params[slot.ADMISSION, S.AdmissionParam.REFILL_PER_S] = p.token_bucket_refill_rate
    kinds[slot.ROUTING], params[slot.ROUTING], uses_index = _routing_row(p.routing, p.scorers(), p.routing_program)
    per_model = []
    for model, entry in (p.routing_per_model or {}).items():
        scorers = entry["scorers"] if entry["scorers"] is not None else DEFAULT_SCORERS
        kind, row, model_uses_index = _routing_row(entry["type"], scorers, entry.get("program"))
        per_model.append((model, int(kind), row))
        uses_index = uses_index or model_uses_index
    # constant = 0 for every request: SLO-class weights apply only to the age-based templates
    kinds[slot.PRIORITY], params[slot.PRIORITY] = _priority_row(p)
    kinds[slot.SCHEDULER], params[slot.SCHEDULER] = _scheduler_row(p)
    kinds[slot.VICTIM] = VICTIMS[p.preemption_victim]
    if p.preemption_victim in PROGRAM_KINDS:
        params[slot.VICTIM] = program_row(p.preemption_victim, p.victim_program, "victim", "policy.victim_program")
    for f in KV_SNAPSHOT_FIELDS:
        params[slot.SNAPSHOT, S.SNAPSHOT_FIELD_NAMES.index(f)] = p.snapshot_refresh_interval
    for name, v in (p.snapshot_intervals or {}).items():
        params[slot.SNAPSHOT, S.SNAPSHOT_FIELD_NAMES.index(name)] = v
    if params[slot.SNAPSHOT].max() > MAX_INTERVAL_US:  # intervals travel as float64: keep them exact
        raise ConfigError("policy.snapshot_refresh_interval", f"intervals must be <= {MAX_INTERVAL_US} µs")
    kinds[slot.AUTOSCALE], params[slot.AUTOSCALE] = autoscale_row(p)
    kinds[slot.FLOW], params[slot.FLOW] = flow_control_row(p)
    if p.flow_control in PROGRAM_KINDS:  # the expression detector: its two programs
        params[slot.FLOW_INSTANCE] = program_row(p.flow_control, p.flow_instance_program, "flow_instance",
                                                 "policy.flow_instance_program")
        saturated = flow_control_value(p, "flow_saturated_program")
        params[slot.FLOW_SATURATED] = program_row(program_kind("flow_saturated", p.flow_control, saturated), saturated,
                                                  "flow_saturated", "policy.flow_saturated_program")
    # programs of the P/D decider and the gateway's dispatch order (their kinds live elsewhere: PD_MODEL_DT.decider,
    # the FLOW rows' DISPATCH_ORDER column)
    if p.pd_decider in PROGRAM_KINDS:
        params[slot.PD_DECIDER] = program_row(p.pd_decider, p.pd_program, "pd", "policy.pd_program")
    if p.dispatch_order in PROGRAM_KINDS:
        params[slot.DISPATCH] = program_row(p.dispatch_order, p.dispatch_program, "dispatch", "policy.dispatch_program")
    prefill = None
    if p.prefill_routing is not None:
        entry = p.prefill_routing
        kind, row, prefill_uses_index = _routing_row(entry["type"], entry["scorers"] if entry["scorers"] is not None
                                                     else DEFAULT_SCORERS, entry.get("program"))
        prefill = (int(kind), row)
        uses_index = uses_index or prefill_uses_index
    flow_per_model = tuple((model, *flow_entry_row(entry)) for model, entry in (p.flow_per_model or {}).items())
    return CompiledPolicies(kinds=kinds, params=params, uses_prefix_index=uses_index, per_model=tuple(per_model),
                            prefill_routing=prefill, pd_decider=p.pd_decider, pd_threshold=p.pd_threshold,
                            flow_per_model=flow_per_model)


def _priority_row(p: PolicyConfig) -> tuple[int, np.ndarray]:
    """(PriorityKind, PRIORITY row): the age weight and SLO-class weights, or a program."""
    if p.priority in PROGRAM_KINDS:
        return S.PriorityKind.EXPRESSION, program_row(p.priority, p.priority_program, "priority",
                                                      "policy.priority_program")
    # constant = 0 for every request: SLO-class weights apply only to the age-based templates
    class_w = [float(x) for x in (p.slo_class_weights or [])] if p.priority != "constant" else []
    if len(class_w) > S.MAX_SLO_CLASS_WEIGHTS:
        raise ConfigError("policy.slo_class_weights", f"at most {S.MAX_SLO_CLASS_WEIGHTS} weights, got {len(class_w)}")
    prio = np.array([PRIORITY_AGE_WEIGHT[p.priority]] + class_w, dtype=np.float64)
    if p.priority == "inverted-slo":
        prio[S.PriorityParam.CLASS_WEIGHTS:] *= -1.0
    row = np.zeros(S.POLICY_WIDTH, np.float64)
    row[: len(prio)] = prio
    return (S.PriorityKind.AGE_AND_CLASS if np.any(prio != 0) else S.PriorityKind.CONSTANT), row


def _scheduler_row(p: PolicyConfig) -> tuple[int, np.ndarray]:
    """(SchedulerKind, SCHEDULER row): the sort weights (none: FCFS), or a program."""
    if p.scheduler in PROGRAM_KINDS:
        return S.SchedulerKind.EXPRESSION, program_row(p.scheduler, p.scheduler_program, "scheduler",
                                                       "policy.scheduler_program")
    base = SCHEDULERS[p.scheduler]
    row = np.zeros(S.POLICY_WIDTH, np.float64)
    if base is not None:
        row[: S.N_SCHED_WEIGHTS] = base
    if p.scheduler_weights:
        for name, w in p.scheduler_weights.items():
            row[SORT_ATTRIBUTES.index(name)] = w
    kind = S.SchedulerKind.FCFS if base is None and not p.scheduler_weights else S.SchedulerKind.SORT
    return kind, row


# the columns of the AUTOSCALE row each autoscaler fills (its parameters in force, defaults included)
_AUTOSCALE_COLUMNS = {"autoscale_up": S.AutoscaleParam.UP, "autoscale_down": S.AutoscaleParam.DOWN,
                      "autoscale_target": S.AutoscaleParam.TARGET, "autoscale_kv_up": S.AutoscaleParam.KV_UP,
                      "autoscale_kv_down": S.AutoscaleParam.KV_DOWN,
                      "autoscale_period_ticks": S.AutoscaleParam.PERIOD_TICKS}


def autoscale_row(p: PolicyConfig) -> tuple[int, np.ndarray]:
    """(AutoscaleKind, AUTOSCALE parameter row) of the autoscaler: its parameters in force
    (given, else its defaults) in their AutoscaleParam columns, the signal as its code;
    all zeros without an autoscaler."""
    kind = AUTOSCALERS[p.autoscaler]
    if p.autoscaler in PROGRAM_KINDS:
        return kind, program_row(p.autoscaler, p.autoscale_program, "autoscale", "policy.autoscale_program")
    row = np.zeros(S.POLICY_WIDTH, np.float64)
    if p.autoscaler in ("threshold", "target"):
        row[S.AutoscaleParam.SIGNAL] = SIGNALS[autoscale_value(p, "autoscale_signal")]
    for name, column in _AUTOSCALE_COLUMNS.items():
        value = autoscale_value(p, name)  # (a template's own: the others are None)
        if value is not None:
            row[column] = value
    return kind, row


# the columns of the FLOW row each detector fills (its parameters in force, defaults included;
# the dispatch order and fairness as their codes)
_FLOW_COLUMNS = {"flow_concurrency_limit": S.FlowParam.CONCURRENCY_LIMIT,
                 "flow_queue_threshold": S.FlowParam.QUEUE_THRESHOLD, "flow_kv_threshold": S.FlowParam.KV_THRESHOLD}
_FLOW_CODES = {"dispatch_order": (S.FlowParam.DISPATCH_ORDER, DISPATCH_ORDERS),
               "gateway_fairness": (S.FlowParam.FAIRNESS, FAIRNESS_MODES),
               "flow_recheck": (S.FlowParam.RECHECK, FLOW_RECHECKS)}


def flow_control_row(p: PolicyConfig) -> tuple[int, np.ndarray]:
    """(FlowDetector, FLOW parameter row) of the gateway's flow control: its detector's
    parameters in force in their FlowParam columns; all zeros with ``never``."""
    return _flow_row(p.flow_control, lambda name: flow_control_value(p, name))


def flow_entry_row(entry: dict) -> tuple[int, np.ndarray]:
    """(FlowDetector, FLOW parameter row) of one ``flow_per_model`` entry."""
    return _flow_row(entry["policy"], lambda name: flow_entry_value(entry, name))


def _flow_row(detector: str, value_of) -> tuple[int, np.ndarray]:
    row = np.zeros(S.POLICY_WIDTH, np.float64)
    for name, column in _FLOW_COLUMNS.items():
        value = value_of(name)
        if value is not None:
            row[column] = value
    for name, (column, codes) in _FLOW_CODES.items():
        value = value_of(name)
        if value is not None:
            row[column] = codes[value]
    return FLOW_DETECTORS[detector], row


def _routing_row(routing: str, scorers: dict[str, float], program=None) -> tuple[int, np.ndarray, bool]:
    """(kind, parameter row, whether the router needs its prefix index) of one routing
    policy; an expression or tree's row is its program (it needs the index if it reads the
    prefix hits)."""
    if routing in PROGRAM_KINDS:
        row = program_row(routing, program, "routing", "policy.routing_program")
        hits = 1 << S.RouteFeature.HIT_BLOCKS | 1 << S.RouteFeature.MAX_HIT
        return ROUTING_POLICIES[routing], row, bool(int(row[S.ProgramHeader.FEATURES]) & hits)
    row = np.zeros(S.POLICY_WIDTH, np.float64)
    if routing == "weighted":
        for name, w in scorers.items():
            row[SCORERS[name]] = w
    uses_index = routing == "prefix-affinity" or (routing == "weighted" and row[S.RouteWeight.PREFIX_AFFINITY] > 0)
    return ROUTING_POLICIES[routing], row, uses_index
