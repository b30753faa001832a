"""Preemption victim: the last request of the batch (vLLM), the lowest-priority one, or
the one a program scores highest."""

import numpy as np

from ..jit import helper
from ..schema import PolicySlot, PriorityKind, VictimKind
from .priority import PROGRAM_WORST, age_class_priority, request_priority, request_program_value


@helper
def choose_victim(st, i, kind, now):
    """Batch slot of the request to preempt on instance i: the last one, the
    lowest-priority one, or the highest value of the victim program (−PROGRAM_WORST if
    not finite); ties -> the later slot."""
    last = st.inst[i]["batch_len"] - 1
    if kind == VictimKind.LAST:
        return last
    reqs = st.reqs
    params = st.policy_param[PolicySlot.PRIORITY]
    program = kind == VictimKind.EXPRESSION
    best = last
    best_v = np.inf
    for k in range(last, -1, -1):
        r = st.batch[i, k]
        if program:  # minus the program's value: the highest is chosen
            v = -request_program_value(st, st.policy_param[PolicySlot.VICTIM], r, now, request_priority(st, r, now), k,
                                       PolicySlot.VICTIM, -PROGRAM_WORST)
        elif st.policy_kind[PolicySlot.PRIORITY] == PriorityKind.EXPRESSION:
            v = request_priority(st, r, now)
        else:  # (the template's arithmetic inline)
            v = age_class_priority(params, reqs[r]["arrival_us"], reqs[r]["slo_class"], now)
        if v < best_v:
            best_v = v
            best = k
    return best
