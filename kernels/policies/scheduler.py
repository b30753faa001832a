"""Instance schedulers: keep the wait queue's order (FCFS) or stable-sort it by a weighted
key each step."""

from ..jit import helper
from ..schema import SchedWeight
from ..structs.dlist import dl_relink
from ..structs.sort import merge_sort


@helper
def scheduler_key(reqs, r, priority, weights):
    """The sort scheduler's key of request r whose priority is ``priority``: Σ weights·
    (priority, arrival, prompt length, output length); lower is scheduled earlier."""
    return (weights[SchedWeight.PRIORITY] * priority
            + weights[SchedWeight.ARRIVAL] * reqs[r]["arrival_us"]
            + weights[SchedWeight.PROMPT_LEN] * reqs[r]["prompt_len"]
            + weights[SchedWeight.OUTPUT_LEN] * reqs[r]["output_len"])


@helper
def reorder_wait_queue(st, i, weights):
    """Sort instance i's wait queue by Σ weights·(priority, arrival, prompt length, output
    length) ascending, ties by (arrival, id), and relink it in that order."""
    inst = st.inst
    reqs = st.reqs
    n = inst[i]["wq_len"]
    if n < 2:
        return
    r = inst[i]["wq_head"]
    for k in range(n):
        st.sort_ids[k] = r
        st.sort_k1[k] = scheduler_key(reqs, r, reqs[r]["priority"], weights)
        st.sort_k2[k] = reqs[r]["arrival_us"]
        r = reqs[r]["queue_next"]
    in_tmp = merge_sort(st.sort_ids, st.sort_k1, st.sort_k2, st.tmp_ids, st.tmp_k1, st.tmp_k2, n)
    order = st.tmp_ids if in_tmp else st.sort_ids
    dl_relink(reqs["queue_prev"], reqs["queue_next"], inst["wq_head"], inst["wq_tail"], i, order, n)
