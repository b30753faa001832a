"""Instance schedulers: keep the wait queue's order (FCFS) or stable-sort it by a key each
step: a weighted sum of request attributes, or a program's value."""

from ..jit import helper
from ..schema import PolicySlot, SchedulerKind, SchedWeight
from ..structs.dlist import dl_relink
from ..structs.sort import merge_sort
from .priority import PROGRAM_WORST, request_program_value


@helper
def scheduler_key(st, r, priority, now, position):
    """The sort scheduler's key of request r whose priority is ``priority`` (lower is
    scheduled earlier): Σ weights·(priority, arrival, prompt length, output length), or the
    value of the scheduler's program at the request's queue ``position`` (PROGRAM_WORST if
    not finite)."""
    weights = st.policy_param[PolicySlot.SCHEDULER]
    if st.policy_kind[PolicySlot.SCHEDULER] == SchedulerKind.EXPRESSION:
        return request_program_value(st, weights, r, now, priority, position, PolicySlot.SCHEDULER, PROGRAM_WORST)
    return weighted_key(st.reqs, r, priority, weights)


@helper
def weighted_key(reqs, r, priority, weights):
    """Σ weights·(priority, arrival, prompt length, output length) of request r."""
    return (weights[SchedWeight.PRIORITY] * priority
            + weights[SchedWeight.ARRIVAL] * reqs[r]["arrival_us"]
            + weights[SchedWeight.PROMPT_LEN] * reqs[r]["prompt_len"]
            + weights[SchedWeight.OUTPUT_LEN] * reqs[r]["output_len"])


@helper
def reorder_wait_queue(st, i, now):
    """Sort instance i's wait queue by the scheduler's key (``scheduler_key``) ascending,
    ties by (arrival, id), and relink it in that order."""
    inst = st.inst
    reqs = st.reqs
    n = inst[i]["wq_len"]
    if n < 2:
        return
    weights = st.policy_param[PolicySlot.SCHEDULER]
    program = st.policy_kind[PolicySlot.SCHEDULER] == SchedulerKind.EXPRESSION
    r = inst[i]["wq_head"]
    for k in range(n):
        st.sort_ids[k] = r
        if program:
            st.sort_k1[k] = request_program_value(st, weights, r, now, reqs[r]["priority"], k, PolicySlot.SCHEDULER,
                                                  PROGRAM_WORST)
        else:  # (the template's arithmetic inline: this loop runs every step)
            st.sort_k1[k] = weighted_key(reqs, r, reqs[r]["priority"], weights)
        st.sort_k2[k] = reqs[r]["arrival_us"]
        r = reqs[r]["queue_next"]
    in_tmp = merge_sort(st.sort_ids, st.sort_k1, st.sort_k2, st.tmp_ids, st.tmp_k1, st.tmp_k2, n)
    order = st.tmp_ids if in_tmp else st.sort_ids
    dl_relink(reqs["queue_prev"], reqs["queue_next"], inst["wq_head"], inst["wq_tail"], i, order, n)
