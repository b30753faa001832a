"""The event loop: merge the pre-sorted arrival stream with the event heap and hand each
event to its handler, until a stop condition (docs/semantics.md §1).

Arrivals whose time is known up front never sit in the heap (their order is known), so
the heap holds at most one control event per in-flight request, closed-loop followers
and one Step per instance.  A stream arrival wins a tie with a heap event (ClusterArrival
has the lowest priority).

The loop keeps nothing in local variables across events: every piece of state is in the
``State`` arrays, so a run that returned (Status.LOG_FULL, Status.PAUSED) continues
exactly where it stopped when called again.
"""

import numpy as np

from ..jit import helper, kernel
from ..schema import ClusterEvent, InstanceEvent, Status
from ..byref import by_ref
from ..structs.heap import heap_pop, heap_push
from .calendar import sync_riders
from .events import event_kind_instance, stale
from .flow import after_life, after_queued, after_step, on_dispatch, on_expire
from .disaggregation import on_pd_event
from .tiers import on_tier_event, tier_catch_up
from .autoscale import counts_as_scaler, on_actuate, on_life, on_tick, start_autoscalers
from .agents import agents_next_us, on_agent_instant, on_agent_llm_done

_END_OF_TIME = np.int64(1) << 62  # (== AGENT_NEVER_US: the agents' "no next instant")
_AGENT_PRIORITY = np.int64(ClusterEvent.AGENT)  # the agents' instant ranks as a cluster event of that kind
from .handlers import on_admission, on_arrival, on_queued, on_routing
from .step import on_step
from .trace import log_room, scale_log_room


@helper
def unknown_event(st, kind, instance, r):
    """Stop the loop on an event of a kind it has no handler for (an internal error:
    runner.describe_error names the kind)."""
    lp = st.loop
    lp[0]["status"] = Status.UNKNOWN_EVENT
    lp[0]["error_kind"] = kind
    lp[0]["error_instance"] = instance
    lp[0]["error_request"] = r


@helper
def queued_event(st, i, r, t, flow):
    """Queued of request r at instance i (and, with flow control, its gateway's look)."""
    on_queued(st, i, r, t)
    if flow:
        after_queued(st, i, r, t)


@helper
def step_event(st, i, t, flow):
    """Step of instance i (and, with flow control, its gateway's look at the step's end)."""
    if flow:
        steps_before = st.inst[i]["steps"]
        on_step(st, i, t)
        after_step(st, i, steps_before, t)
    else:
        on_step(st, i, t)


@helper
def life_event(st, i, r, t, step, flow):
    """LIFE event of instance i (autoscaling; with flow control, its gateway's look: the
    instance may have become ready)."""
    if counts_as_scaler(step):
        st.loop[0]["scaler_events"] -= 1
    on_life(st, i, r, step, t)
    if flow:
        after_life(st, i, t)


@helper
def idle_expiries(st):
    """EXPIRE events in the heap that do not keep the run alive: all of them while no
    request waits in a gateway queue (every live request has an event of its own then)."""
    lp = st.loop
    if lp[0]["gateway_depth"] > 0:
        return np.int64(0)
    return lp[0]["expiry_events"]


@helper
def cluster_event(st, kind, r, t, arg2, from_agents):
    """Dispatch a cluster event (every kind by name: enums.py's ordering table; an unknown
    one stops the run).  ``from_agents``: the event is the agents' instant (never a heap
    event: a kind-3 event from the heap is unknown)."""
    lp = st.loop
    if kind == ClusterEvent.ARRIVAL:
        on_arrival(st, r, t)
    elif kind == ClusterEvent.ADMISSION:
        if not stale(st, r, arg2):
            on_admission(st, r, t)
    elif kind == ClusterEvent.ROUTING:
        if not stale(st, r, arg2):
            on_routing(st, r, t)
    elif kind == ClusterEvent.EXPIRE:  # flow control and deadlines (engine/flow.py)
        on_expire(st, r, t)
    elif kind == ClusterEvent.AGENT and from_agents:  # agent DAGs (engine/agents.py)
        on_agent_instant(st, t)
    elif kind == ClusterEvent.AGENT_LLM_DONE:  # r = the llm node's request
        on_agent_llm_done(st, r, t)
    elif kind == ClusterEvent.DISPATCH:  # r = the model
        on_dispatch(st, r, t)
    elif kind == ClusterEvent.AUTOSCALE_TICK:  # autoscaling (engine/autoscale.py): r = the pool
        lp[0]["scaler_events"] -= 1
        on_tick(st, r, t)
    elif kind == ClusterEvent.ACTUATE:
        lp[0]["scaler_events"] -= 1
        on_actuate(st, r, arg2, t)
    else:
        unknown_event(st, kind, np.int64(-1), r)


@kernel
def run_events(st):
    """Process events in (time, priority, seq) order.  Sets ``st.loop[0]["status"]``:
    OK when no event is left or the next lies beyond the horizon; LOG_FULL before a step
    the logs have no room for; PAUSED before an event beyond ``settings.pause_at_us``;
    CHUNK_DONE after ``settings.chunk_events`` events in this call;
    otherwise an error status (with error_instance / error_request).  On return every
    running request's fields are up to date (riders synced, engine/calendar.py)."""
    # the loop is a helper: without the reference counting of every array a kernel uses
    # (kernels/jit.py); it takes the State by reference (kernels/byref.py)
    event_loop(by_ref(st))


@helper
def event_loop(st):
    """run_events' loop (see there)."""
    lp = st.loop
    horizon = st.settings[0]["horizon_us"]
    pause_at = st.settings[0]["pause_at_us"]
    max_events = st.settings[0]["max_events"]
    chunk = st.settings[0]["chunk_events"]
    done_here = 0
    order = st.arrival_order
    arrival = st.reqs["arrival_us"]
    h_time = st.heap["time_us"]
    h_prio = st.heap["priority"]
    lp[0]["status"] = Status.OK
    drained = False  # every event done
    autoscaled = st.settings[0]["autoscaled"] != 0
    flow = st.settings[0]["flow"] != 0
    agents = st.settings[0]["agents"] != 0
    if autoscaled and lp[0]["scale_started"] == 0:
        start_autoscalers(st)
    while True:
        size = lp[0]["heap_size"]
        if size > lp[0]["heap_peak"]:
            lp[0]["heap_peak"] = size
        # ---- the next event: the arrival stream or the heap, whichever orders first
        ap = lp[0]["next_arrival"]
        r = np.int64(-1)
        t = np.int64(0)
        prio = np.int64(0)
        seq = np.int64(0)
        arg2 = np.int64(0)
        from_stream = False
        if ap < order.shape[0]:
            r = order[ap]
            t = arrival[r]
            from_stream = size == 0 or t <= h_time[0]
        from_agents = False
        agent_t = _END_OF_TIME
        if agents:  # agent DAGs: their next instant is a third source, ordered as a cluster event (engine/agents.py)
            agent_t = agents_next_us(st)
            from_agents = agent_t < _END_OF_TIME and (ap >= order.shape[0] or agent_t < t) and (
                size == 0 or agent_t < h_time[0] or (agent_t == h_time[0] and _AGENT_PRIORITY < h_prio[0]))
        if from_agents:
            from_stream = False
            t = agent_t
            kind = np.int64(ClusterEvent.AGENT)
            ev_inst = np.int64(-1)
        elif from_stream:
            kind = np.int64(ClusterEvent.ARRIVAL)
            ev_inst = np.int64(-1)
        elif size > 0 and (size > lp[0]["scaler_events"] + idle_expiries(st) or ap < order.shape[0]
                           or agent_t < _END_OF_TIME):
            # (nor do autoscaler events alone, engine/autoscale.py, nor idle expiries, engine/flow.py)
            t = h_time[0]
            kind, ev_inst = event_kind_instance(h_prio[0])
        else:
            drained = True
            break
        if t > horizon:
            break
        if t > pause_at:
            lp[0]["status"] = Status.PAUSED
            break
        if chunk > 0 and done_here >= chunk:
            lp[0]["status"] = Status.CHUNK_DONE
            break
        done_here += 1
        if ev_inst >= 0 and kind == InstanceEvent.STEP and not log_room(st, ev_inst):
            lp[0]["status"] = Status.LOG_FULL
            break
        if autoscaled and not scale_log_room(st):
            lp[0]["status"] = Status.LOG_FULL
            break
        # ---- consume it
        if from_stream:
            lp[0]["next_arrival"] = ap + 1
        elif from_agents:
            r = np.int64(-1)  # (the agents' instant is not in the heap)
        else:
            size, t, prio, seq, r, arg2 = heap_pop(st.heap, size)
            lp[0]["heap_size"] = size
        if t < lp[0]["clock_us"]:
            lp[0]["status"] = Status.CLOCK_BACKWARDS
            lp[0]["error_request"] = r
            break
        lp[0]["clock_us"] = t
        lp[0]["events"] += 1
        if lp[0]["events"] > max_events:
            lp[0]["status"] = Status.MAX_EVENTS
            break
        # ---- dispatch: every kind by name (enums.py's ordering table); an unknown one stops the run
        if ev_inst < 0:
            cluster_event(st, kind, r, t, arg2, from_agents)
        elif kind == InstanceEvent.QUEUED:
            if not stale(st, r, arg2):  # (an attempt that ended early: engine/flow.py)
                queued_event(st, ev_inst, r, t, flow)
        elif kind == InstanceEvent.STEP:
            step_event(st, ev_inst, t, flow)
        elif InstanceEvent.TRANSFER_DONE <= kind <= InstanceEvent.LEG_DONE:  # P/D's three (engine/disaggregation.py)
            on_pd_event(st, kind, ev_inst, r, t, arg2)
        elif kind == InstanceEvent.LIFE:  # autoscaling: r = the life of the row the event belongs to
            life_event(st, ev_inst, r, t, arg2, flow)
        elif kind == InstanceEvent.TIER_LINK or kind == InstanceEvent.LOAD_DONE:  # KV tiers (engine/tiers.py)
            on_tier_event(st, kind, ev_inst, r, t, arg2)
        else:
            unknown_event(st, kind, ev_inst, r)
        if lp[0]["status"] != Status.OK:
            if lp[0]["status"] == Status.COHORT_SPLIT:  # the routing was not done: the event goes back as it was
                lp[0]["heap_size"] = heap_push(st.heap, lp[0]["heap_size"], t, prio, seq, r, arg2)
                lp[0]["events"] -= 1
            break
    for i in range(st.inst.shape[0]):
        sync_riders(st, i)
        if drained and st.kv_tier_inst[i]["n_tiers"] > 0:
            tier_catch_up(st, i, _END_OF_TIME)  # KV tiers: the writes still queued land (nothing else happens)
