"""Request priority (higher = more urgent), and the feature row of a request that
priority, scheduler-key and victim programs read."""

from ..jit import helper
from ..schema import PolicySlot, PriorityKind, PriorityParam, RequestFeature
from .program import finite_or, run_program

# the value a program that gave NaN or ±inf takes in a request-ordering slot: finite, so a
# weighted sort key (weight x priority) stays a number
PROGRAM_WORST = 1e300


@helper
def request_program_value(st, prog, r, now, priority, position, slot, worst):
    """Program ``prog``'s value for request r at ``now`` (RequestFeature; ``priority`` is
    its priority, 0 in a priority program; ``position`` its place, -1 where it has none),
    ``worst`` if it is not finite (counted in ``State.prog_faults[slot]``)."""
    f = st.prog_features
    req = st.reqs[r]
    f[RequestFeature.AGE_US] = now - req["arrival_us"]
    f[RequestFeature.ARRIVAL_US] = req["arrival_us"]
    f[RequestFeature.PROMPT_TOKENS] = req["prompt_len"]
    f[RequestFeature.OUTPUT_TOKENS] = req["output_len"]
    f[RequestFeature.SLO_CLASS] = req["slo_class"]
    f[RequestFeature.TENANT] = req["tenant"]
    f[RequestFeature.PRIORITY] = priority
    f[RequestFeature.GENERATED] = req["generated"]
    f[RequestFeature.POSITION] = position
    f[RequestFeature.ATTEMPT] = st.flow_reqs[r]["attempt"] if r < st.flow_reqs.shape[0] else 0
    c = req["slo_class"]
    f[RequestFeature.TTFT_TARGET_US] = st.slo_targets[c, 0] if 0 <= c < st.slo_targets.shape[0] else -1
    return finite_or(run_program(prog, f, st.prog_stack), worst, st.prog_faults, slot)


@helper
def age_class_priority(params, arrival_us, slo_class, now):
    """AGE_WEIGHT · (now − arrival) plus the weight of the request's SLO class (constant =
    all zeros; slo-based = +1e-6 per µs of age; inverted-slo = −1e-6)."""
    p = params[PriorityParam.AGE_WEIGHT] * (now - arrival_us)
    j = PriorityParam.CLASS_WEIGHTS + slo_class
    if slo_class >= 0 and j < params.shape[0]:
        p += params[j]
    return p


@helper
def priority_of(st, params, program, r, now):
    """The priority of request r at ``now`` under the PRIORITY slot's row ``params``
    (``program``: the slot holds a program) -- the slot looked up once by a loop's caller:
    ``age_class_priority``, or the program's value (−PROGRAM_WORST if not finite)."""
    if program:
        return request_program_value(st, params, r, now, 0.0, -1, PolicySlot.PRIORITY, -PROGRAM_WORST)
    return age_class_priority(params, st.reqs[r]["arrival_us"], st.reqs[r]["slo_class"], now)


@helper
def priority_slot(st):
    """(the PRIORITY slot's row, whether it holds a program): ``priority_of``'s arguments."""
    return st.policy_param[PolicySlot.PRIORITY], st.policy_kind[PolicySlot.PRIORITY] == PriorityKind.EXPRESSION


@helper
def request_priority(st, r, now):
    """The priority of request r at ``now`` (the PRIORITY slot; ``priority_of``)."""
    params, program = priority_slot(st)
    return priority_of(st, params, program, r, now)


@helper
def update_wait_queue_priorities(st, i, now):
    """Set the priority of every request waiting at instance i."""
    reqs = st.reqs
    params, program = priority_slot(st)
    r = st.inst[i]["wq_head"]
    while r >= 0:
        reqs[r]["priority"] = priority_of(st, params, program, r, now)
        r = reqs[r]["queue_next"]
