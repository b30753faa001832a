"""Preemption victim: the last request of the batch (vLLM), or the lowest-priority one."""

import numpy as np

from ..jit import helper
from ..schema import VictimKind
from .priority import request_priority


@helper
def choose_victim(st, i, kind, prio_params, now):
    """Batch slot of the request to preempt on instance i: the last one, or the
    lowest-priority one (ties -> the later slot)."""
    last = st.inst[i]["batch_len"] - 1
    if kind != VictimKind.LOWEST_PRIORITY:
        return last
    reqs = st.reqs
    best = last
    best_p = np.inf
    for k in range(last, -1, -1):
        r = st.batch[i, k]
        p = request_priority(prio_params, reqs[r]["arrival_us"], reqs[r]["slo_class"], now)
        if p < best_p:
            best_p = p
            best = k
    return best
