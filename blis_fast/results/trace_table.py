"""The decision trace as one table (``--trace-out FILE.parquet``): a row per admission,
routing decision and preemption -- and with ``trace_level full`` per scheduling record
(``scheduled``: a waiting request entered a batch; ``blocked``: a wait-queue head stayed
waiting, one row per episode; ``load``: a waiting request found blocks in a KV tier and
left the queue to load them) -- in time order (admission, routing, preemption, scheduled,
blocked at equal times, then decision order), filled with the request's outcome.  Columns
that do not apply to a record are null; the scheduling columns (second table) exist only
at ``full``, so a ``decisions`` trace is the same file with or without them.

| column | unit | records | definition |
|---|---|---|---|
| time_us | µs | all | when the decision was made (preemption: start of the step) |
| record | text | all | admission, routing or preemption |
| request | id | all | the request decided on (preemption: the victim) |
| tenant | name | all | the request's tenant |
| admitted | bool | admission | admitted (false = rejected) |
| cost_tokens | tokens | admission | prompt tokens charged to the tenant's bucket |
| bucket_tokens | tokens | admission | the token bucket after the decision (token-bucket admission) |
| reason | text | admission, gateway | always-admit, reject-all, or (token-bucket) bucket / bucket-short; gateway: queued, dispatched or shed (below) |
| instance | id | routing, preemption | the chosen instance / where the preemption happened |
| deployment | name | routing, preemption, scheduled, blocked | the deployment of the record's instance; only in a run of two or more deployments |
| candidates | count | routing | active instances chosen among |
| prompt_blocks | blocks | routing | full prompt blocks of the request |
| forced | bool | routing | decision forced (counterfactual replay) |
| score | policy units | routing | the routing policy's score of the chosen instance (higher = preferred) |
| load | requests | routing | the snapshot's load of the chosen instance (queue + batch + routed pending) |
| kv_utilization | fraction | routing | the snapshot's KV utilization of the chosen instance |
| matched_blocks | blocks | routing | leading prompt blocks the chosen instance's prefix index held |
| alt{k}_instance, alt{k}_score, alt{k}_load, alt{k}_kv_utilization, alt{k}_matched_blocks | as above | routing | the k-th best alternative by the policy's score (k = 1..4; null when fewer candidates) |
| estimated_regret_ms | ms | routing | blis_fast/results/regret.py |
| best_alternative | id | routing | the alternative with the lowest estimated cost |
| for_request | id | preemption | the request whose KV allocation failed |
| victim_generated | tokens | preemption | output tokens the victim had emitted |
| victim_blocks | blocks | preemption | KV blocks it released |
| ttft_ms, e2e_ms | ms | all | the request's outcome (null if it never got there) |
| cached_tokens | tokens | all | prompt tokens found in the prefix cache at its first admission |
| slo_met | bool | all | the request met its SLO class's targets |
| final_state | text | all | the request's state at the end of the run |

A run with gateway flow control (a detector other than never) adds a ``gateway`` record per
decision of the gateway (State.gateway_log), between the admission and the routing records
of its time: ``reason`` the action (``queued``: the request entered its model's gateway
queue; ``dispatched``: the gateway released it to routing; ``shed``: the saturated gateway
shed it), and the columns ``attempt`` (the request's attempt, 0 = first), ``gateway_depth``
(its model's gateway queue after the decision) and ``gateway_wait_us`` (dispatched: its
time in the queue) -- null on the other records; a trace without flow control has neither
the records nor the columns.

A run with an autoscaler adds a ``scale`` record per autoscaler tick (every tick, a hold
too), after the other records of its time: ``time_us`` and ``reason`` (the tick's: hold,
up, down, up_held, down_held, at_max, at_min) set, the request's columns null, and the
columns ``pool``, ``from_instances``, ``to_instances``, ``wish``, ``ready``, ``signal``,
``act_time_us`` (null on the other records; docs/autoscaling.md "Scale events and
ticks tables").

Added at ``trace_level full`` (kernels/schema/tables.py SCHED_DT; the scans behind a
record look at the first SCHED_SCAN_DEPTH = 16 waiting requests only):

| column | unit | records | definition |
|---|---|---|---|
| position | index | scheduled, blocked, preemption | wait-queue position when the step's admissions began (0 = head; = its rank among the step's admissions); preemption: the victim's batch slot |
| queue_len | requests | scheduled, blocked | requests waiting at that moment, itself included |
| priority | policy units | scheduled, blocked, preemption | the request's priority at that step (higher = more urgent; 0 under constant) |
| sched_key | policy units | scheduled, blocked | the sort scheduler's key (lower = earlier; null under fcfs) |
| wait_us | µs | scheduled, blocked | time since the request first entered a wait queue |
| tokens | tokens | scheduled, blocked, load | scheduled: its first chunk; blocked: the prefill it needs (prompt + generated); load: the tokens it loads from the tiers |
| hit_tokens | tokens | scheduled, load | prompt tokens found in the prefix cache at this admission (load: on the GPU and in the tiers) |
| budget_left | tokens | scheduled, blocked | the step's token budget left before it |
| free_blocks | blocks | scheduled, blocked | the instance's free KV blocks before it |
| readmission | bool | scheduled | it had been preempted before |
| higher_priority_behind | requests | scheduled, blocked | of the first 16 left waiting behind it, those of strictly higher priority (priority inversion) |
| block_reason | text | blocked | batch-full, token-budget, kv-blocks, preemption (no admissions in a step with a preemption) |
| blocked_steps, blocked_until_us | steps, µs | blocked | the episode: consecutive steps of the instance with this head blocked for this reason, and the start of its last step |
| load_done_us | µs | load | when its load was done (a run with KV tiers only) |
| fits_behind | requests | blocked | kv-blocks: of the first 16 behind the head, those whose first chunk would fit the free blocks without any cache hit (head-of-line blocking) |
| batch_size, for_priority, lower_priority_running | requests, policy units, requests | preemption | the batch before the preemption; the priority of the request it was preempted for; running requests of strictly lower priority than the victim |
"""

from __future__ import annotations

import numpy as np

from blis_fast_kernels.schema import (BLOCK_REASON_NAMES, GATEWAY_ACTION_NAMES, N_TRACE_ALTERNATIVES,
                                     REQUEST_STATE_NAMES, PolicySlot,
                                     SchedRecord,
                                     SchedulerKind, TraceLevel)
from blis_fast.results.regret import estimated_regret

from .deployments import deployment_names_of, has_groups
from .autoscale import has_autoscaler, with_scale_records
from .kv_tiers import has_tiers

RECORDS = ("admission", "routing", "preemption", "scheduled", "blocked", "prefill_routing", "load", "gateway")
# the order of records of equal time: as RECORDS, but a gateway decision comes between the
# admission and the routing it leads to
_TIE_RANK = np.array([0, 2, 3, 4, 5, 6, 7, 1])
# (a run with an autoscaler adds a ``scale`` record per tick: results.autoscale.with_scale_records)


def decision_table(result):
    """The pyarrow Table of the run's decision trace (empty when not traced)."""
    import pyarrow as pa  # deferred: pyarrow


    st = result.state
    lp = st.loop[0]
    adm = st.admit_log[: int(lp["admit_records"])]
    rte = st.route_log[: int(lp["route_records"])]
    prt = result.prefill_routing_log  # P/D: the prefill legs' routing (their requests' ids)
    pre = st.preempt_log[: int(lp["preempt_records"])]
    full = int(st.settings[0]["trace_level"]) >= TraceLevel.FULL
    sched = scheduling_records(result)
    sch = sched[sched["kind"] == SchedRecord.SCHEDULED]
    blk = sched[sched["kind"] == SchedRecord.BLOCKED]
    vic = sched[sched["kind"] == SchedRecord.VICTIM]  # one per preemption row, in the same order
    lod = sched[sched["kind"] == SchedRecord.LOAD]  # KV tiers: a request left the queue to load blocks
    gated = int(st.settings[0]["flow"]) != 0  # gateway flow control: its decisions
    gw = st.gateway_log[: int(lp["gateway_records"])] if gated else st.gateway_log[:0]
    sizes = [len(adm), len(rte), len(pre), len(sch), len(blk), len(prt), len(lod), len(gw)]
    n_a, n_r, n_p, n_s, n_b, n_x, n_l, _ = sizes
    n = sum(sizes)
    kind = np.repeat(np.arange(len(sizes)), sizes)
    time_us = np.concatenate([adm["time_us"], rte["time_us"], pre["time_us"], sch["time_us"],
                              blk["time_us"], prt["time_us"], lod["time_us"], gw["time_us"]]).astype(np.int64)
    request = np.concatenate([adm["request"], rte["request"], pre["victim"], sch["request"],
                              blk["request"], prt["request"], lod["request"], gw["request"]]).astype(np.int64)
    seq = np.concatenate([np.arange(k) for k in sizes])
    order = np.lexsort((seq, _TIE_RANK[kind], time_us))

    starts = dict(enumerate(np.concatenate(([0], np.cumsum(sizes)[:-1])).tolist()))

    def col(values_by_kind: dict, dtype, valid_by_kind: dict | None = None):
        """One column: the values of the record kinds that have it (where valid), null elsewhere."""
        out = np.zeros(n, dtype)
        valid = np.zeros(n, bool)
        for k, v in values_by_kind.items():
            out[starts[k]: starts[k] + len(v)] = v
            valid[starts[k]: starts[k] + len(v)] = True if valid_by_kind is None else valid_by_kind[k]
        return pa.array(out[order], mask=~valid[order])

    tenant_ids = st.reqs["tenant"][request]
    names = (result.workload.names or {}).get("tenant") or []
    tenant = [names[t] if t < len(names) else str(t) for t in tenant_ids[order].tolist()]
    regret, best = estimated_regret(result, rte)
    best_inst = rte["alt_instance"][np.arange(n_r), np.maximum(best, 0)] if n_r else np.zeros(0, np.int64)
    cols = {
        "time_us": pa.array(time_us[order]),
        "record": pa.array([RECORDS[k] for k in kind[order].tolist()], pa.string()),
        "request": pa.array(request[order]),
        "tenant": pa.array(tenant, pa.string()),
        "admitted": col({0: adm["admitted"] != 0}, bool),
        "cost_tokens": col({0: adm["cost"]}, np.int64),
        "bucket_tokens": col({0: adm["bucket_tokens"]}, np.float64),
        "reason": _admission_reasons(result.setup.config.policy.admission, adm, n, order, n_a, gw, starts[7]),
        "instance": col({1: rte["chosen_instance"], 2: pre["instance"], 5: prt["chosen_instance"], 6: lod["instance"]},
                        np.int64),
        "candidates": col({1: rte["candidates"], 5: prt["candidates"]}, np.int64),
        "prompt_blocks": col({1: rte["prompt_blocks"], 5: prt["prompt_blocks"]}, np.int64),
        "forced": col({1: rte["forced"] != 0, 5: prt["forced"] != 0}, bool),
        "score": col({1: rte["chosen_score"], 5: prt["chosen_score"]}, np.float64),
        "load": col({1: rte["chosen_load"], 5: prt["chosen_load"]}, np.float64),
        "kv_utilization": col({1: rte["chosen_kv_utilization"], 5: prt["chosen_kv_utilization"]}, np.float64),
        "matched_blocks": col({1: rte["chosen_matched_blocks"], 5: prt["chosen_matched_blocks"]}, np.int64),
    }
    alt_fields = (("instance", "alt_instance", np.int64), ("score", "alt_score", np.float64),
                  ("load", "alt_load", np.float64), ("kv_utilization", "alt_kv_utilization", np.float64),
                  ("matched_blocks", "alt_matched_blocks", np.int64))
    for a in range(N_TRACE_ALTERNATIVES):
        present = {1: rte["alt_instance"][:, a] >= 0, 5: prt["alt_instance"][:, a] >= 0}
        for name, field, dtype in alt_fields:
            cols[f"alt{a + 1}_{name}"] = col({1: rte[field][:, a], 5: prt[field][:, a]}, dtype, present)
    cols["estimated_regret_ms"] = col({1: regret / 1e3}, np.float64)
    cols["best_alternative"] = col({1: best_inst}, np.int64, {1: best >= 0})
    cols["for_request"] = col({2: pre["for_request"]}, np.int64)
    cols["victim_generated"] = col({2: pre["victim_generated"]}, np.int64)
    cols["victim_blocks"] = col({2: pre["victim_blocks"]}, np.int64)
    if gated:  # (a trace without flow control keeps its columns)
        cols["attempt"] = col({7: gw["attempt"]}, np.int64)
        cols["gateway_depth"] = col({7: gw["depth"]}, np.int64)
        cols["gateway_wait_us"] = col({7: gw["wait_us"]}, np.int64,
                                      {7: gw["action"] == GATEWAY_ACTION_NAMES.index("dispatched")})
    if has_groups(result.setup):  # (a single-deployment trace keeps its columns)
        where = np.full(n, -1, np.int64)  # each record's instance, -1 for admissions
        for k, v in {1: rte["chosen_instance"], 2: pre["instance"], 3: sch["instance"], 4: blk["instance"],
                     5: prt["chosen_instance"], 6: lod["instance"]}.items():
            where[starts[k]: starts[k] + len(v)] = v
        items = list(cols.items())
        at = list(cols).index("instance") + 1
        names = pa.array(deployment_names_of(result.setup, where[order]), pa.string())
        cols = dict([*items[:at], ("deployment", names), *items[at:]])
    if result.disaggregation is not None:  # the decider's answer on each request's own routing record
        dis = result.full_state.pd_reqs["prefill_instance"][rte["request"]] >= 0
        cols["disaggregated"] = col({1: dis}, bool)
    if full:
        cols.update(_scheduling_columns(result, col, sch, blk, vic, lod))
    tab = result.outcomes
    r = request[order]
    ttft, e2e = tab["ttft_us"][r], tab["e2e_us"][r]
    cols["ttft_ms"] = pa.array(ttft / 1e3, mask=ttft < 0)
    cols["e2e_ms"] = pa.array(e2e / 1e3, mask=e2e < 0)
    cols["cached_tokens"] = pa.array(st.reqs["cached_tokens"][r].astype(np.int64))
    cols["slo_met"] = pa.array(tab["met"][r])
    cols["final_state"] = pa.array([REQUEST_STATE_NAMES[s] for s in st.reqs["state"][r].tolist()], pa.string())
    if has_autoscaler(result.setup) and int(st.settings[0]["trace_level"]) >= TraceLevel.DECISIONS:
        return with_scale_records(pa.table(cols), result)  # (a run without an autoscaler keeps its trace)
    return pa.table(cols)


def scheduling_records(result) -> np.ndarray:
    """The run's scheduling records (kernels/schema/tables.py SCHED_DT, in decision order;
    empty unless traced at ``full``)."""
    st = result.state
    if int(st.settings[0]["trace_level"]) < TraceLevel.FULL:
        return st.sched_log[:0]
    return st.sched_log[: int(st.loop[0]["sched_records"])]


def _scheduling_columns(result, col, sch, blk, vic, lod) -> dict:
    """The columns a ``full`` trace adds (module docstring), through ``col``."""
    import pyarrow as pa  # deferred: pyarrow

    sorting = int(result.state.policy_kind[PolicySlot.SCHEDULER]) != SchedulerKind.FCFS
    both = {3: sch, 4: blk, 6: lod}  # (the fields a waiting request's records share)

    def waiting(field, dtype):
        return col({k: v[field] for k, v in both.items()}, dtype)

    n_s, n_b = len(sch), len(blk)
    reasons = col({4: blk["reason"]}, np.int64)
    out = {
        "position": col({2: vic["position"], 3: sch["position"], 4: blk["position"], 6: lod["position"]},
                        np.int64),
        "queue_len": waiting("queue_len", np.int64),
        "priority": col({2: vic["priority"], 3: sch["priority"], 4: blk["priority"], 6: lod["priority"]},
                        np.float64),
        "sched_key": col({3: sch["sched_key"], 4: blk["sched_key"], 6: lod["sched_key"]}, np.float64,
                         {3: np.full(n_s, sorting), 4: np.full(n_b, sorting), 6: np.full(len(lod), sorting)}),
        "wait_us": waiting("wait_us", np.int64),
        "tokens": waiting("tokens", np.int64),
        "hit_tokens": col({3: sch["cached_tokens"], 6: lod["cached_tokens"]}, np.int64),
        "budget_left": waiting("budget_left", np.int64),
        "free_blocks": waiting("free_blocks", np.int64),
        "readmission": col({3: sch["readmission"] != 0, 6: lod["readmission"] != 0}, bool),
        "higher_priority_behind": waiting("higher_behind", np.int64),
        "block_reason": pa.array([None if r is None else BLOCK_REASON_NAMES[r] for r in reasons.to_pylist()],
                                 pa.string()),
        "blocked_steps": col({4: blk["steps"]}, np.int64),
        "blocked_until_us": col({4: blk["last_time_us"]}, np.int64),
        "fits_behind": col({4: blk["fits_behind"]}, np.int64,
                           {4: blk["reason"] == BLOCK_REASON_NAMES.index("kv-blocks")}),
        "batch_size": col({2: vic["queue_len"]}, np.int64),
        "for_priority": col({2: vic["for_priority"]}, np.float64),
        "lower_priority_running": col({2: vic["higher_behind"]}, np.int64),
    }
    if has_tiers(result.setup):  # (a trace without tiers keeps its columns)
        out["load_done_us"] = col({6: lod["last_time_us"]}, np.int64)
    return out


def _admission_reasons(policy: str, adm: np.ndarray, n: int, order: np.ndarray, n_a: int, gw: np.ndarray,
                       gw_start: int):
    """Why each admission went as it did: ``always-admit``, ``reject-all``, or for
    token-bucket ``bucket`` (the tenant's bucket covered the prompt) / ``bucket-short`` (it
    did not: rejected); the gateway's action on its records (rows ``gw_start`` on); null on
    other records."""
    import pyarrow as pa  # deferred: pyarrow

    if policy == "token-bucket":
        why = np.where(adm["admitted"] != 0, "bucket", "bucket-short")
    else:
        why = np.full(len(adm), policy, dtype=object)
    values = why.tolist() + [None] * (n - n_a)  # admission rows come first before sorting
    actions = [GATEWAY_ACTION_NAMES[a] for a in gw["action"].tolist()]
    values[gw_start: gw_start + len(actions)] = actions
    return pa.array([values[k] for k in order.tolist()], pa.string())


def write_decision_trace(result, path) -> None:
    """Write ``decision_table(result)`` as Parquet."""
    import pyarrow.parquet as pq  # deferred: pyarrow

    pq.write_table(decision_table(result), str(path))


__all__ = ["RECORDS", "decision_table", "scheduling_records", "write_decision_trace"]
