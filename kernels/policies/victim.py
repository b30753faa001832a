"""Preemption victim: the last request of the batch (vLLM), the lowest-priority one, or
the one a program scores highest."""

import numpy as np

from ..jit import helper
from ..schema import PolicySlot, VictimKind
from .priority import PROGRAM_WORST, priority_of, priority_slot, request_program_value


@helper
def choose_victim(st, i, kind, now):
    """Batch slot of the request to preempt on instance i: the last one, the
    lowest-priority one, or the highest value of the victim program (−PROGRAM_WORST if
    not finite); ties -> the later slot."""
    last = st.inst[i]["batch_len"] - 1
    if kind == VictimKind.LAST:
        return last
    params, priority_program = priority_slot(st)
    program = kind == VictimKind.EXPRESSION
    best = last
    best_v = np.inf
    for k in range(last, -1, -1):
        r = st.batch[i, k]
        v = priority_of(st, params, priority_program, r, now)
        if program:  # minus the program's value: the highest is chosen
            v = -request_program_value(st, st.policy_param[PolicySlot.VICTIM], r, now, v, k, PolicySlot.VICTIM,
                                       -PROGRAM_WORST)
        if v < best_v:
            best_v = v
            best = k
    return best
