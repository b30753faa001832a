"""Where a request's phase ends: ``end_phase``, the one place later features hook (a
prefill pool handing a request to a decode pool when its prefill is done, a KV tier
keeping its blocks at completion, an agent DAG releasing its children).

    PREFILL_DONE       its prompt is computed: the first output token is emitted
    OUTPUT_DONE        its last output token is emitted: it completes and frees its KV
    FOLLOWER_RELEASED  after the step that completed it: the closed-loop request it
                       releases (next turn, tool call) is scheduled
    KV_HANDED_OVER     (P/D) a prefill leg's KV reached the decode side, or its request
                       ended there: the leg frees its blocks and completes

The engine step (step.py) calls it at the first three points, in that order within a
step; what each does is docs/semantics.md's (§3.4-5, §8).  A P/D prefill leg's ends differ
(§13): at OUTPUT_DONE it keeps its blocks (held outside the batch), at FOLLOWER_RELEASED
its handover to the decode side is scheduled (a LegDone event), and
engine/disaggregation.py ends its KV_HANDED_OVER -- and a request's first token and
completion when the prefill side emits them.
"""

import numpy as np

from ..jit import helper
from ..kv.cache import anonymous_held, is_prefill_leg, kv_release
from ..schema import ClusterEvent, InstanceEvent, PhaseEnd, RequestState
from .agents import agent_call_complete
from .autoscale import maybe_terminate, note_completion, note_first_token
from .events import event_priority, push_event
from .queueing import ensure_step


@helper
def end_phase(st, i, r, phase, now, step_idx):
    """End ``phase`` (schema.PhaseEnd) of request r on instance i at time ``now`` (µs: the
    token's visible time, or the step's end for FOLLOWER_RELEASED) in step ``step_idx``."""
    reqs = st.reqs
    if phase == PhaseEnd.PREFILL_DONE:
        reqs[r]["first_token_us"] = now
        reqs[r]["run_start_step"] = step_idx
        if st.settings[0]["autoscaled"] != 0:
            note_first_token(st, i, r, now)
    elif phase == PhaseEnd.OUTPUT_DONE:
        if is_prefill_leg(st, r):  # its blocks stay held until its transfer ends (engine/disaggregation.py)
            reqs[r]["state"] = RequestState.TRANSFERRING
            st.pd_inst[i]["pd_prefills"] += 1
            st.pd_inst[i]["held_outside"] += 1
            st.pd_inst[i]["held_anon"] += anonymous_held(st, r)
            return
        kv_release(st, i, r)
        reqs[r]["state"] = RequestState.COMPLETED
        st.inst[i]["completed"] += 1
        if st.settings[0]["autoscaled"] != 0:
            note_completion(st, i, r, now)
    elif phase == PhaseEnd.FOLLOWER_RELEASED:
        if is_prefill_leg(st, r):  # handed over when the step that completed its prompt ends
            st.pd_reqs[r - st.settings[0]["pd_base"]]["prefill_done_us"] = now
            when = now
            if st.pd_models[reqs[r]["model"]]["first_token_prefill"] != 0:
                when = max(now, reqs[r]["first_token_us"])  # ... and the client has its first token
            push_event(st, when, event_priority(InstanceEvent.LEG_DONE, i), r)
        elif st.settings[0]["agents"] != 0 and st.agent_req_node[r] >= 0:
            agent_call_complete(st, r)  # an agent DAG's llm node (engine/agents.py)
        else:
            release_follower(st, r)
    elif phase == PhaseEnd.KV_HANDED_OVER:  # (a prefill leg on its prefill instance i)
        st.pd_inst[i]["held_anon"] -= anonymous_held(st, r)
        kv_release(st, i, r)
        reqs[r]["state"] = RequestState.COMPLETED
        st.pd_inst[i]["held_outside"] -= 1
        if st.inst[i]["wq_len"] > 0:  # its queue may have waited for these blocks
            ensure_step(st, i, now)
        elif st.settings[0]["autoscaled"] != 0:
            maybe_terminate(st, i, now)  # a draining prefill instance: its last leg is handed over


@helper
def release_follower(st, r):
    """Closed loop: when request r completes, the request it releases (the next turn or
    tool call) arrives follow_delay_us after r's last token."""
    reqs = st.reqs
    nxt = reqs[r]["next_request"]
    if nxt >= 0:
        ta = reqs[r]["last_token_us"] + reqs[r]["follow_delay_us"]
        reqs[nxt]["arrival_us"] = ta
        push_event(st, ta, event_priority(ClusterEvent.ARRIVAL, np.int64(-1)), nxt)
