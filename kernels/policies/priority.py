"""Request priority (higher = more urgent)."""

from ..jit import helper
from ..schema import PriorityParam


@helper
def request_priority(params, arrival_us, slo_class, now):
    """AGE_WEIGHT · (now − arrival) plus the weight of the request's SLO class.
    constant = all zeros; slo-based = +1e-6 per µs of age; inverted-slo = −1e-6."""
    p = params[PriorityParam.AGE_WEIGHT] * (now - arrival_us)
    j = PriorityParam.CLASS_WEIGHTS + slo_class
    if slo_class >= 0 and j < params.shape[0]:
        p += params[j]
    return p


@helper
def update_wait_queue_priorities(st, i, params, now):
    """Set the priority of every request waiting at instance i."""
    reqs = st.reqs
    r = st.inst[i]["wq_head"]
    while r >= 0:
        reqs[r]["priority"] = request_priority(params, reqs[r]["arrival_us"], reqs[r]["slo_class"], now)
        r = reqs[r]["queue_next"]
