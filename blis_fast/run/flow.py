"""The State tables of gateway flow control and request deadlines (kernels/engine/flow.py):
their sizes and contents, from the compiled FLOW slot and the workload's deadline columns.

Off (no detector, no deadline columns) every table has its minimal size and the kernel
never reads them: the run is the one without flow control, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blis_fast.errors import ConfigError
from blis_fast_kernels import schema as S


@dataclass(frozen=True)
class FlowLayout:
    """What a run's flow control and deadlines need: ``flow`` (a saturation detector),
    ``deadlines`` (the workload has TTLs, shedding or retries), the gateway queues
    (``round_robin``: one per (model, tenant), else one per model) and the log sizes."""

    flow: bool = False
    deadlines: bool = False
    round_robin: tuple[bool, ...] = ()  # per served model: one gateway queue per tenant
    n_models: int = 1
    n_tenants: int = 1
    n_ttl: int = 0  # requests with a TTL (an EXPIRE each in the heap at most)
    n_stale: int = 0  # retries of requests with a TTL (a timed-out attempt may leave one stale event in the heap)
    attempt_rows: int = 1  # attempts that may fail: 1 + retries of each request with a TTL or that may be shed
    attempts: int = 0  # every attempt the requests may make (decision-trace rows), 0 = one per request
    backoff_rows: int = 1  # rows of Workload.retry_backoff (one per client id)

    @property
    def on(self) -> bool:
        return self.flow or self.deadlines

    def groups_of(self, model: int) -> int:
        """Gateway queues of served model ``model``."""
        return self.n_tenants if self.round_robin[model] else 1

    @property
    def n_groups(self) -> int:
        return sum(self.groups_of(m) for m in range(self.n_models)) if self.flow else 1


def flow_layout(flow_kind: np.ndarray, flow_param: np.ndarray, workload, n_tenants: int) -> FlowLayout:
    """The FlowLayout of a run of ``workload`` whose served models have detectors
    ``flow_kind`` and FLOW rows ``flow_param`` (``CompiledPolicies.flow_rows``)."""
    n_models = len(flow_kind)
    flow = bool(np.any(flow_kind != S.FlowDetector.NEVER))
    deadlines = workload.has_deadlines
    if not (flow or deadlines):
        return FlowLayout(n_models=n_models, n_tenants=n_tenants)
    rr = tuple(bool(k != S.FlowDetector.NEVER and int(row[S.FlowParam.FAIRNESS]) == S.Fairness.ROUND_ROBIN)
               for k, row in zip(flow_kind, flow_param))
    n_ttl, n_stale, rows, attempts = 0, 0, 1, 0
    if deadlines:
        ttl = workload.ttl_us >= 0
        may_fail = ttl | ((workload.sheddable != 0) & flow)
        tries = 1 + workload.max_retries.astype(np.int64)
        n_ttl = int(np.count_nonzero(ttl))
        n_stale = int(workload.max_retries[ttl].astype(np.int64).sum())
        rows = max(1, int(tries[may_fail].sum()))
        attempts = int(tries.sum())
    backoff_rows = len(workload.retry_backoff) if deadlines else 1
    return FlowLayout(flow, deadlines, rr, n_models, n_tenants, n_ttl, n_stale, rows, attempts, backoff_rows)


def flow_sizes(layout: FlowLayout | None, n: int, n_inst: int, traced: bool = False) -> dict[str, int]:
    """The flow-control sizes (schema.state.SIZE_NAMES) of ``n`` requests on ``n_inst`` rows
    (``traced``: decisions are traced)."""
    lay = layout or FlowLayout()
    return {
        # each attempt enters the gateway queue and leaves it (or is shed) once (a return from
        # free-slot routing that found no free instance is not logged)
        "gateway_rows": 2 * (lay.attempts or n) if traced and lay.flow else 1,
        "n_flow_requests": n if lay.on else 1,
        "n_flow_groups": lay.n_groups,
        "n_flow_inst": n_inst if lay.flow else 1,
        "n_backoff_rows": lay.backoff_rows,
        "attempt_rows": lay.attempt_rows if lay.on else 1,
    }


def flow_rows(layout: FlowLayout, workload, reqs: np.ndarray, n_models: int) -> dict[str, np.ndarray]:
    """The GIVEN flow tables: ``flow_reqs``, ``flow_groups``, ``flow_models``, ``retry_backoff``."""
    n = len(reqs) if layout.on else 1
    fr = np.zeros(n, S.FLOW_REQ_DT)
    for f in ("deadline_us", "expire_at_us", "gw_pos", "gw_enter_us", "gw_leave_us", "ttl_us"):
        fr[f] = -1
    fr["first_arrival_us"] = reqs["arrival_us"][:n] if layout.on else -1
    models = np.zeros(max(n_models, 1), S.FLOW_MODEL_DT)
    models["dispatch_at_us"] = -1
    models["n_groups"] = 1
    groups = np.zeros(layout.n_groups, S.FLOW_GROUP_DT)
    groups["tenant"] = -1
    backoff = np.zeros((1, S.N_RETRY_BACKOFF), np.float64)
    backoff[:, S.RetryBackoff.FACTOR] = 1.0
    if layout.deadlines:
        fr["ttl_us"] = workload.ttl_us
        fr["max_retries"] = workload.max_retries
        fr["sheddable"] = workload.sheddable
        backoff = np.ascontiguousarray(workload.retry_backoff, np.float64)
    if layout.flow:
        per_model = np.array([layout.groups_of(m) for m in range(layout.n_models)], np.int64)
        first = np.concatenate(([0], np.cumsum(per_model)[:-1]))
        model = reqs["model"].astype(np.int64)
        group = first[model] + np.where(per_model[model] > 1, reqs["tenant"].astype(np.int64), 0)
        fr["group"] = group
        count = np.bincount(group, minlength=layout.n_groups)
        groups["offset"] = np.concatenate(([0], np.cumsum(count)[:-1]))
        groups["model"] = np.repeat(np.arange(layout.n_models), per_model)
        groups["tenant"] = np.where(np.repeat(per_model, per_model) > 1,
                                    np.arange(layout.n_groups) - np.repeat(first, per_model), -1)
        models["first_group"][:layout.n_models] = first
        models["n_groups"][:layout.n_models] = per_model
    return {"flow_reqs": fr, "flow_groups": groups, "flow_models": models, "retry_backoff": backoff}


def check_flow_support(layout: FlowLayout, disaggregated: bool, tiered: bool) -> None:
    """Refuse flow control or deadlines with prefill/decode disaggregation or KV tiers:
    a cancellation there would have to free a transfer or a load in flight, which the
    event loop does not do yet."""
    if not layout.on:
        return
    what = "--flow-control" if layout.flow else "request deadlines (ttl_s, sheddable, retries)"
    field = "flow_control" if layout.flow else "workload.ttl_s"
    if disaggregated:
        raise ConfigError(field, f"{what} with prefill/decode disaggregation is not supported yet (a cancellation "
                                 f"would have to stop a KV transfer in flight); use a monolithic deployment")
    if tiered:
        raise ConfigError(field, f"{what} with KV cache tiers (cpu/disk) is not supported yet (a cancellation "
                                 f"would have to stop a load in flight); leave the tiers out")
