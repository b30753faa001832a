"""Agent DAGs in the event loop (docs/agents.md, docs/semantics.md "Agent DAGs"): tools share
the agents' resources by exact fair share (kernels/agents/fairshare.py), llm nodes are
requests to the simulated cluster.

The agents are a third source of events beside the arrival stream and the heap: their next
instant (``State.agent_ctr[AgentCounter.NEXT_US]``: an agent request's arrival, a resource's
next finish, or an llm node just done) is merged by the loop as a cluster event of kind
AGENT, never held in the heap.  One AGENT event runs its µs to its closure (``fs_instant``),
then sends the llm nodes it started to the cluster: each one's request arrives at that µs
(an ARRIVAL event, as a closed-loop follower's), in node order -- the order of the arrival
stream at a tie, so the cluster sees exactly what it would see if the same requests were an
ordinary workload arriving at those times (a test replays them so).  When such a request's last token is out
(engine/phases.py: its step has ended), an AGENT_LLM_DONE event at that token's time marks
its node's part done; the node finishes at the AGENT instant that follows at the same µs.

With ``SETTINGS_DT.agents`` 0 nothing here runs and the State's agent tables have their
minimal sizes.
"""

import numpy as np

from ..agents.fairshare import fs_instant, fs_next_us, fs_part_done
from ..jit import helper
from ..schema import AgentCounter, ClusterEvent, Status
from .events import event_priority, push_event


@helper
def agents_next_us(st):
    """The agents' next instant (AGENT_NEVER_US: none)."""
    return st.agent_ctr[AgentCounter.NEXT_US]


@helper
def on_agent_instant(st, t):
    """The AGENT event at µs t: the agents' instant to its closure, then the requests of the
    llm nodes it started arrive at t."""
    c = st.agent_ctr
    fs_instant(t, st.agent_arrival, st.agent_first_node, np.int64(st.settings[0]["agent_share"]), st.agent_res,
               st.agent_loads, st.agent_slots, st.agent_nodes, st.agent_succ, st.agent_done, st.agent_stack,
               st.agent_dirty, st.agent_released, st.agent_heap, c)
    if c[AgentCounter.STATUS] != 0:
        st.loop[0]["status"] = Status.AGENT_HEAP_FULL
        return
    reqs = st.reqs
    released = st.agent_released
    n = c[AgentCounter.N_RELEASED]
    for k in range(1, n):  # in node order (= request row order), whatever order the cascade started them in
        v = released[k]
        j = k - 1
        while j >= 0 and released[j] > v:
            released[j + 1] = released[j]
            j -= 1
        released[j + 1] = v
    for k in range(n):
        r = st.agent_nodes[released[k]]["request"]
        reqs[r]["arrival_us"] = t
        push_event(st, t, event_priority(ClusterEvent.ARRIVAL, np.int64(-1)), r)
    c[AgentCounter.N_RELEASED] = 0
    c[AgentCounter.NEXT_US] = fs_next_us(st.agent_arrival, st.agent_res, st.agent_heap, c)


@helper
def agent_call_complete(st, r):
    """Request r, an llm node's call, has completed (its step has ended): its node's part is
    done at its last token's time (AGENT_LLM_DONE)."""
    when = max(st.reqs[r]["last_token_us"], st.loop[0]["clock_us"])
    push_event(st, when, event_priority(ClusterEvent.AGENT_LLM_DONE, np.int64(-1)), r)


@helper
def on_agent_llm_done(st, r, t):
    """AGENT_LLM_DONE of request r at µs t: its llm node is done; the AGENT instant at t
    finishes it and starts its successors."""
    c = st.agent_ctr
    fs_part_done(st.agent_nodes, st.agent_stack, c, st.agent_req_node[r])
    if t < c[AgentCounter.NEXT_US]:
        c[AgentCounter.NEXT_US] = t
