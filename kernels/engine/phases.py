"""Where a request's phase ends: ``end_phase``, the one place later features hook (a
prefill pool handing a request to a decode pool when its prefill is done, a KV tier
keeping its blocks at completion, an agent DAG releasing its children).

    PREFILL_DONE       its prompt is computed: the first output token is emitted
    OUTPUT_DONE        its last output token is emitted: it completes and frees its KV
    FOLLOWER_RELEASED  after the step that completed it: the closed-loop request it
                       releases (next turn, tool call) is scheduled

The engine step (step.py) calls it at those three points, in that order within a step;
what each does is docs/semantics.md's (§3.4-5, §8).
"""

from ..jit import helper
from ..kv.cache import is_prefill_leg, kv_release
from ..schema import InstanceEvent, PhaseEnd, RequestState
from .disaggregation import pd_hold_leg
from .events import event_priority, push_event, release_follower


@helper
def end_phase(st, i, r, phase, now, step_idx):
    """End ``phase`` (schema.PhaseEnd) of request r on instance i at time ``now`` (µs: the
    token's visible time, or the step's end for FOLLOWER_RELEASED) in step ``step_idx``."""
    reqs = st.reqs
    if phase == PhaseEnd.PREFILL_DONE:
        reqs[r]["first_token_us"] = now
        reqs[r]["run_start_step"] = step_idx
    elif phase == PhaseEnd.OUTPUT_DONE:
        if is_prefill_leg(st, r):  # its blocks stay held until its transfer ends (engine/disaggregation.py)
            pd_hold_leg(st, i, r)
            return
        kv_release(st, i, r)
        reqs[r]["state"] = RequestState.COMPLETED
        st.inst[i]["completed"] += 1
    elif phase == PhaseEnd.FOLLOWER_RELEASED:
        if is_prefill_leg(st, r):  # handed over when the step that completed its prompt ends
            when = now
            if st.pd_models[reqs[r]["model"]]["first_token_prefill"] != 0:
                when = max(now, reqs[r]["first_token_us"])  # ... and the client has its first token
            push_event(st, when, event_priority(InstanceEvent.LEG_DONE, i), r)
        else:
            release_follower(st, r)

