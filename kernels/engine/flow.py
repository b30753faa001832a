"""Gateway flow control and request deadlines (docs/semantics.md §16).

**Gateway queue.**  With a saturation detector (``flow_kind[m]``: the FLOW policy slot's or
the model's own, ``settings.flow`` when some model has one)
an admitted request of served model m is routed at once only while m's instances are not
saturated and m's gateway queue is empty; otherwise it waits in the queue (state GATEWAY)
-- or, if its SLO class is sheddable, it is shed (state SHED).  The queue is a heap per
model, or per (model, tenant) with round-robin fairness (``flow_groups``,
structs/keyed_heap.py), ordered by the dispatch order's key.  A DISPATCH(m) event releases
waiting requests to routing, one by one while the detector says m is not saturated; it is
pushed when the detector may change its mind, while m's queue holds requests: after a step
of m's instances forms (utilization: then; free-slot: then if the instance is free, else
at the step's end if it will have room and nothing waiting; concurrency: at the step's end
if it completes a request; and, when the queue fills from empty, at the end of every step
in flight), when a request is
cancelled or dropped, after each routing decision under concurrency (the router may have
sent its request to an instance already at the limit, leaving the others' headroom), and
when an instance becomes ready (autoscaling).

The detectors read each ready instance of m; a step's slots count as taken until the step
ends (``flow_inst.step_batch``: a request completing in a step leaves the batch when the
step starts but its slot frees when it ends):

- concurrency: in flight = routed + waiting + slots taken; saturated when the headroom
  Σ max(0, limit - in flight) is no more than the requests released to routing whose
  decision is pending (``in_routing``);
- utilization: mean over instances of max(queued / queue threshold, KV utilization / KV
  threshold) >= 1, where an instance's queued requests are those waiting there and those
  routed to it on their way, and the requests released to routing whose decision is
  pending count as queued too (one more each / queue threshold in the sum) -- so one
  dispatch cannot release more than the thresholds allow;
- free-slot: an instance is free when nothing is routed to it or waiting there and its
  slots taken are fewer than max_num_seqs; saturated when the free instances are no more
  than ``in_routing``.  Routing then chooses among the free instances only (late binding);
  with none left the request goes back to the gateway queue in its place;
- expression: two programs (docs/policies.md) -- the FLOW_INSTANCE program's value for each
  ready instance (FlowInstanceFeature), summed in instance order (also its largest and
  smallest), and the FLOW_SATURATED program over them (FlowModelFeature): saturated iff its
  value > 0 (no ready instance, or a value that is not finite: saturated).  It looks again
  when the built-in detector named by ``FlowParam.RECHECK`` would, and with free-slot's
  rules it binds late too, an instance being free when its value is > 0.  So
  ``max(0, 100 - in_flight)`` with ``total <= in_routing`` is concurrency, byte for byte.

**Deadlines.**  A request with a TTL gets an EXPIRE event at each attempt's arrival +
TTL.  If it is still live then (admitting, in the gateway, routed, waiting or running) it
is cancelled where it is -- its place in a queue, its routed slot, its batch slot and KV
blocks freed at that moment -- and ends TIMED_OUT; its events still in the heap are stale
(each carries the request's ``epoch`` of when it was pushed, engine/loop.py ignores older
ones).  A request has at most one EXPIRE in the heap: a later attempt's deadline is later,
so an EXPIRE that finds a live attempt with a later deadline is pushed again for it.

**Retries.**  A timed-out or shed request with retries left is sent again as a new attempt
of the same request row: after base · factor^k µs (k = retries so far) times a uniform draw
in [1 - jitter, 1 + jitter], truncated to whole µs, it arrives again (an ARRIVAL event) and
goes through admission as a new request would.  Every failed attempt is a row of the
failed-attempt log (``attempt_log``); the request's own row keeps its last attempt.
"""

import numpy as np

from ..jit import helper
from ..kv.cache import kv_release
from ..policies.priority import PROGRAM_WORST, request_priority, request_program_value
from ..policies.program import run_program
from ..schema import (ALL_NAMED, AttemptEnd, GatewayAction, ClusterEvent, DispatchOrder, FlowDetector, FlowInstanceFeature,
                      FlowModelFeature, FlowParam, ProgramHeader,
                      PolicySlot, PriorityParam, RequestState, RetryBackoff)
from ..structs.dlist import dl_remove
from ..structs.keyed_heap import kh_push, kh_remove
from .autoscale import forget_own_keys, maybe_terminate, uniform_draw
from .calendar import calendar_remove
from .events import event_priority, push_event_with
from .step import batch_remove
from .trace import tracing

_NO_DEADLINE = np.float64(2.0 ** 62)  # the deadline order's key of a class without a TTFT target


# ----------------------------------------------------------------------------- detectors


@helper
def slots_taken(st, i, t):
    """Batch slots of instance i taken at time t: the batch, or while a step runs, the
    batch it started with (a request finishing in it holds its slot until it ends)."""
    n = st.inst[i]["batch_len"]
    if st.inst[i]["busy_until_us"] > t and st.flow_inst[i]["step_batch"] > n:
        n = st.flow_inst[i]["step_batch"]
    return n


@helper
def slot_free(st, i, t):
    """Free-slot detector: instance i has a free running slot, nothing routed to it and
    nothing waiting."""
    inst = st.inst
    return inst[i]["wq_len"] == 0 and inst[i]["routed_pending"] == 0 and slots_taken(st, i, t) < inst[i]["max_num_seqs"]


@helper
def saturated(st, m, t):
    """True if model m's ready instances are saturated at time t (its detector: ``flow_kind``;
    never with NEVER, a model without flow control when others have it)."""
    kind = st.flow_kind[m]
    par = st.flow_param[m]
    if kind == FlowDetector.NEVER:
        return False
    if kind == FlowDetector.EXPRESSION:
        return saturated_by_program(st, m, t)
    inst = st.inst
    n = 0
    headroom = np.int64(0)
    load = 0.0
    for i in range(inst.shape[0]):
        if inst[i]["active"] == 0 or inst[i]["model"] != m:
            continue
        n += 1
        if kind == FlowDetector.CONCURRENCY:
            busy = inst[i]["routed_pending"] + inst[i]["wq_len"] + slots_taken(st, i, t)
            room = np.int64(par[FlowParam.CONCURRENCY_LIMIT]) - busy
            if room > 0:
                headroom += room
        elif kind == FlowDetector.UTILIZATION:
            q = (inst[i]["wq_len"] + inst[i]["routed_pending"]) / par[FlowParam.QUEUE_THRESHOLD]
            kv = 0.0
            if inst[i]["kv_total"] > 0:
                kv = inst[i]["kv_allocated"] / inst[i]["kv_total"] / par[FlowParam.KV_THRESHOLD]
            load += max(q, kv)
        elif slot_free(st, i, t):
            headroom += 1
    if n == 0:
        return True
    if kind == FlowDetector.UTILIZATION:  # (the requests it released, not routed yet, queue somewhere too)
        load += st.flow_models[m]["in_routing"] / par[FlowParam.QUEUE_THRESHOLD]
        return load / n >= 1.0
    return headroom <= st.flow_models[m]["in_routing"]


# ----------------------------------------------------------------------------- the expression detector


@helper
def recheck_rule(st, m):
    """The built-in detector whose rules for looking again (and for late binding) model m's
    detector follows: its own, or an expression detector's ``FlowParam.RECHECK``."""
    kind = st.flow_kind[m]
    if kind == FlowDetector.EXPRESSION:
        return np.int64(st.flow_param[m][FlowParam.RECHECK])
    return kind


@helper
def gateway_features(st, m, f):
    """The model-level FlowInstanceFeature columns of model m's instance program (the ready
    instances are counted only if the program reads them)."""
    fm = st.flow_models
    prog = st.policy_param[PolicySlot.FLOW_INSTANCE]
    if (np.int64(prog[ProgramHeader.FEATURES]) >> FlowInstanceFeature.INSTANCES) & 1:
        inst = st.inst
        n = 0
        for i in range(inst.shape[0]):
            if inst[i]["active"] != 0 and inst[i]["model"] == m:
                n += 1
        f[FlowInstanceFeature.INSTANCES] = n
    f[FlowInstanceFeature.IN_ROUTING] = fm[m]["in_routing"]
    f[FlowInstanceFeature.GATEWAY_DEPTH] = fm[m]["depth"]


@helper
def instance_flow_value(st, i, t, f):
    """The instance program's value for ready instance i at t (``f``: the feature row, its
    model-level columns set by ``gateway_features``); NaN, counted, if it is not finite."""
    inst = st.inst
    taken = slots_taken(st, i, t)
    f[FlowInstanceFeature.IN_FLIGHT] = inst[i]["routed_pending"] + inst[i]["wq_len"] + taken
    f[FlowInstanceFeature.ROUTED] = inst[i]["routed_pending"]
    f[FlowInstanceFeature.QUEUE] = inst[i]["wq_len"]
    f[FlowInstanceFeature.RUNNING] = inst[i]["batch_len"]
    f[FlowInstanceFeature.SLOTS_TAKEN] = taken
    f[FlowInstanceFeature.MAX_NUM_SEQS] = inst[i]["max_num_seqs"]
    kv = 0.0
    if inst[i]["kv_total"] > 0:
        kv = inst[i]["kv_allocated"] / inst[i]["kv_total"]
    f[FlowInstanceFeature.KV_UTILIZATION] = kv
    f[FlowInstanceFeature.KV_FREE_BLOCKS] = inst[i]["kv_total"] - inst[i]["kv_allocated"]
    f[FlowInstanceFeature.STEPPING] = 1.0 if inst[i]["busy_until_us"] > t else 0.0
    v = run_program(st.policy_param[PolicySlot.FLOW_INSTANCE], f, st.prog_stack)
    if not (v > -np.inf and v < np.inf):
        st.prog_faults[PolicySlot.FLOW_INSTANCE] += 1
        return np.nan
    return v


@helper
def saturated_by_program(st, m, t):
    """The expression detector: the instance program's values over model m's ready
    instances (in instance order) give the saturation test's TOTAL, LARGEST and SMALLEST;
    saturated iff its value > 0.  No ready instance, or a value that is not finite (the
    first one counted), is saturated: the detector's worst, which holds requests back."""
    inst = st.inst
    f = st.prog_features
    gateway_features(st, m, f)
    n = 0
    total = 0.0
    largest = -np.inf
    smallest = np.inf
    for i in range(inst.shape[0]):
        if inst[i]["active"] == 0 or inst[i]["model"] != m:
            continue
        n += 1
        v = instance_flow_value(st, i, t, f)
        if v != v:
            return True
        total += v
        largest = max(largest, v)
        smallest = min(smallest, v)
    if n == 0:
        return True
    fm = st.flow_models
    f[FlowModelFeature.TOTAL] = total
    f[FlowModelFeature.LARGEST] = largest
    f[FlowModelFeature.SMALLEST] = smallest
    f[FlowModelFeature.INSTANCES] = n
    f[FlowModelFeature.IN_ROUTING] = fm[m]["in_routing"]
    f[FlowModelFeature.GATEWAY_DEPTH] = fm[m]["depth"]
    v = run_program(st.policy_param[PolicySlot.FLOW_SATURATED], f, st.prog_stack)
    if not (v > -np.inf and v < np.inf):
        st.prog_faults[PolicySlot.FLOW_SATURATED] += 1
        return True
    return v > 0.0


@helper
def instance_free(st, i, t):
    """Late binding: instance i may take a released request -- it has a free slot
    (free-slot), or the expression detector's value for it is > 0 (its model-level
    features set here)."""
    m = st.inst[i]["model"]
    if st.flow_kind[m] == FlowDetector.EXPRESSION:
        gateway_features(st, m, st.prog_features)
        return instance_flow_value(st, i, t, st.prog_features) > 0.0
    return slot_free(st, i, t)


# ----------------------------------------------------------------------------- the gateway queue


@helper
def order_key(st, r, t):
    """Request r's dispatch-order key (lower first; ties by gateway entry): 0 (fifo); the
    priority policy's priority at any common time, negated (priority = w·(now − arrival)
    + class weight, so −priority orders as w·arrival − class weight); its TTFT deadline;
    the dispatch program's value at its entry ``t``."""
    order = np.int64(st.flow_param[st.reqs[r]["model"]][FlowParam.DISPATCH_ORDER])
    reqs = st.reqs
    if order == DispatchOrder.PRIORITY:
        pp = st.policy_param[PolicySlot.PRIORITY]
        key = pp[PriorityParam.AGE_WEIGHT] * np.float64(reqs[r]["arrival_us"])
        j = PriorityParam.CLASS_WEIGHTS + reqs[r]["slo_class"]
        if reqs[r]["slo_class"] >= 0 and j < pp.shape[0]:
            key -= pp[j]
        return key
    if order == DispatchOrder.EXPRESSION:  # (its value at the request's entry; not finite: last)
        return request_program_value(st, st.policy_param[PolicySlot.DISPATCH], r, t, request_priority(st, r, t), -1,
                                     PolicySlot.DISPATCH, PROGRAM_WORST)
    if order == DispatchOrder.DEADLINE:
        c = reqs[r]["slo_class"]
        if 0 <= c < st.slo_targets.shape[0] and st.slo_targets[c, 0] >= 0:
            return np.float64(reqs[r]["arrival_us"] + st.slo_targets[c, 0])
        return _NO_DEADLINE
    return 0.0


@helper
def enter_gateway(st, r, t, fresh):
    """Request r waits in its gateway queue from time t (``fresh``: a new entry of its
    attempt, which takes a place at the back of its order; else it goes back in its place)."""
    fr = st.flow_reqs
    lp = st.loop
    m = st.reqs[r]["model"]
    g = fr[r]["group"]
    if fresh:
        fr[r]["gw_key"] = order_key(st, r, t)
        fr[r]["gw_seq"] = lp[0]["gateway_entries"]
        lp[0]["gateway_entries"] += 1
    fg = st.flow_groups
    fg[g]["size"] = kh_push(st.flow_heap, fg[g]["offset"], fg[g]["size"], fr["gw_key"], fr["gw_seq"], fr["gw_pos"], r)
    if fg[g]["size"] > fg[g]["peak"]:
        fg[g]["peak"] = fg[g]["size"]
    st.reqs[r]["state"] = RequestState.GATEWAY
    fr[r]["gw_enter_us"] = t
    fr[r]["gw_leave_us"] = -1
    fm = st.flow_models
    fm[m]["depth"] += 1
    if fm[m]["depth"] > fm[m]["peak"]:
        fm[m]["peak"] = fm[m]["depth"]
    lp[0]["gateway_depth"] += 1
    if lp[0]["gateway_depth"] > lp[0]["gateway_peak"]:
        lp[0]["gateway_peak"] = lp[0]["gateway_depth"]
    if fresh and tracing(st):
        log_gateway(st, r, t, GatewayAction.QUEUED, np.int64(0))
    if fm[m]["depth"] == 1:  # it fills from empty: look again at every step end in flight
        dispatch_at_step_ends(st, m, t)


@helper
def leave_gateway(st, r, t):
    """Request r leaves its gateway queue at time t (released or cancelled)."""
    fr = st.flow_reqs
    fg = st.flow_groups
    g = fr[r]["group"]
    fg[g]["size"] = kh_remove(st.flow_heap, fg[g]["offset"], fg[g]["size"], fr["gw_key"], fr["gw_seq"], fr["gw_pos"], r)
    wait = t - fr[r]["gw_enter_us"]
    fr[r]["gw_wait_us"] += wait
    fr[r]["gw_wait_total_us"] += wait
    m = st.reqs[r]["model"]
    st.flow_models[m]["depth"] -= 1
    st.loop[0]["gateway_depth"] -= 1


@helper
def next_waiting(st, m):
    """The request model m's gateway releases next: the head of its queue (strict), or of
    the next non-empty tenant queue after the last one served (round-robin)."""
    fm = st.flow_models
    fg = st.flow_groups
    n = fm[m]["n_groups"]
    first = fm[m]["first_group"]
    start = fm[m]["rr_next"]
    for k in range(n):
        j = start + k
        if j >= n:
            j -= n
        g = first + j
        if fg[g]["size"] > 0:
            if n > 1:
                nxt = j + 1
                fm[m]["rr_next"] = nxt if nxt < n else 0
            return st.flow_heap[fg[g]["offset"]]
    return np.int64(-1)


@helper
def release_to_routing(st, r, t):
    """Flow control lets request r go: its routing decision follows after the routing latency."""
    m = st.reqs[r]["model"]
    st.flow_reqs[r]["routing"] = 1
    st.flow_models[m]["in_routing"] += 1
    st.reqs[r]["state"] = RequestState.ADMITTING
    push_event_with(st, t + st.settings[0]["routing_latency_us"], event_priority(ClusterEvent.ROUTING, np.int64(-1)),
                    r, st.flow_reqs[r]["epoch"])


@helper
def gateway_admit(st, r, t):
    """Admitted request r meets its model's gateway: routed now if the model is not
    saturated and nobody waits; else shed (a sheddable request) or queued."""
    m = st.reqs[r]["model"]
    if st.flow_models[m]["depth"] > 0 or saturated(st, m, t):
        if st.flow_reqs[r]["sheddable"] != 0:
            shed(st, r, t)
        else:
            st.flow_reqs[r]["gw_wait_us"] = 0
            enter_gateway(st, r, t, True)
        return
    st.flow_reqs[r]["gw_wait_us"] = 0
    release_to_routing(st, r, t)


@helper
def push_dispatch(st, m, t):
    """A DISPATCH of model m now (time t), unless one is already due now (a cancellation or
    an instance coming up: at most one per model in the heap)."""
    fm = st.flow_models
    if fm[m]["dispatch_at_us"] == t:
        return
    fm[m]["dispatch_at_us"] = t
    push_event_with(st, t, event_priority(ClusterEvent.DISPATCH, np.int64(-1)), m, np.int64(0))


@helper
def dispatch_at_step_end(st, i):
    """A DISPATCH of instance i's model when its step in flight ends, unless one is due then
    (at most one per instance is in the heap: the one of its current step)."""
    end = st.inst[i]["busy_until_us"]
    if st.flow_inst[i]["dispatch_at_us"] == end:
        return
    st.flow_inst[i]["dispatch_at_us"] = end
    push_event_with(st, end, event_priority(ClusterEvent.DISPATCH, np.int64(-1)), st.inst[i]["model"], np.int64(0))


@helper
def dispatch_at_step_ends(st, m, t):
    """A DISPATCH of model m at the end of each step of its instances still running at t."""
    inst = st.inst
    for i in range(inst.shape[0]):
        if inst[i]["model"] == m and inst[i]["busy_until_us"] > t:
            dispatch_at_step_end(st, i)


@helper
def after_step(st, i, steps_before, t):
    """Instance i's Step event at t is done: if it ran a step and its model's gateway holds
    requests, they are looked at again when the detector may change its mind -- the state
    a step changes is the one it formed at t (admissions, KV), but its slots stay taken
    until it ends.  Utilization: now.  Free-slot: now if the instance is free now (its
    waiting requests all admitted with room to spare), else at the step's end if it has
    room then and nothing waits.  Concurrency: at the step's end if it completes a request."""
    inst = st.inst
    if inst[i]["steps"] == steps_before:
        return
    m = inst[i]["model"]
    if st.flow_models[m]["depth"] == 0:
        return
    rule = recheck_rule(st, m)
    if rule == FlowDetector.UTILIZATION:
        push_dispatch(st, m, t)
    elif rule == FlowDetector.FREE_SLOT:
        if instance_free(st, i, t):
            push_dispatch(st, m, t)
        elif inst[i]["wq_len"] == 0 and inst[i]["batch_len"] < inst[i]["max_num_seqs"]:
            dispatch_at_step_end(st, i)
    elif inst[i]["batch_len"] < st.flow_inst[i]["step_batch"]:
        dispatch_at_step_end(st, i)


@helper
def after_queued(st, i, r, t):
    """Request r reached instance i at t: if it was dropped there (it could never fit), the
    instance's place is free again now."""
    if st.reqs[r]["state"] == RequestState.DROPPED and st.flow_models[st.inst[i]["model"]]["depth"] > 0:
        push_dispatch(st, st.inst[i]["model"], t)


@helper
def after_life(st, i, t):
    """Instance i's lifecycle moved (autoscaling): it may have become ready."""
    m = st.inst[i]["model"]
    if st.flow_models[m]["depth"] > 0:
        push_dispatch(st, m, t)


@helper
def on_dispatch(st, m, t):
    """Release model m's waiting requests, in the dispatch order, while it is not saturated."""
    fm = st.flow_models
    while fm[m]["depth"] > 0 and not saturated(st, m, t):
        r = next_waiting(st, m)
        if r < 0:
            break
        leave_gateway(st, r, t)
        st.flow_reqs[r]["gw_leave_us"] = t
        fm[m]["dispatched"] += 1
        if tracing(st):
            log_gateway(st, r, t, GatewayAction.DISPATCHED, st.flow_reqs[r]["gw_wait_us"])
        release_to_routing(st, r, t)


# ----------------------------------------------------------------------------- free-slot routing


@helper
def hide_busy_instances(st, m, t):
    """Late binding (free-slot, or an expression detector rechecking as free-slot does): make
    model m's instances that are not free (``instance_free``) no candidates (until
    ``show_instances``); False (nothing hidden) if none is free."""
    inst = st.inst
    program = st.flow_kind[m] == FlowDetector.EXPRESSION
    if program:  # (counted before any is hidden)
        gateway_features(st, m, st.prog_features)
    free = 0
    for i in range(inst.shape[0]):
        if inst[i]["active"] == 0 or inst[i]["model"] != m:
            continue
        if (instance_flow_value(st, i, t, st.prog_features) > 0.0) if program else slot_free(st, i, t):
            free += 1
        else:
            st.flow_inst[i]["saved_active"] = inst[i]["active"]
            inst[i]["active"] = 0
    if free == 0:
        show_instances(st)
        return False
    return True


@helper
def show_instances(st):
    """Undo ``hide_busy_instances``."""
    inst = st.inst
    for i in range(inst.shape[0]):
        if st.flow_inst[i]["saved_active"] != 0:
            inst[i]["active"] = st.flow_inst[i]["saved_active"]
            st.flow_inst[i]["saved_active"] = 0


@helper
def routing_done(st, r, t):
    """Request r's routing decision is made at t: it no longer counts as released to
    routing.  (Under concurrency, a request the router sent to an instance already at the
    limit leaves the others' headroom as it was: the model may take another now.)"""
    if st.flow_reqs[r]["routing"] != 0:
        m = st.reqs[r]["model"]
        st.flow_reqs[r]["routing"] = 0
        st.flow_models[m]["in_routing"] -= 1
        if recheck_rule(st, m) == FlowDetector.CONCURRENCY and st.flow_models[m]["depth"] > 0:
            push_dispatch(st, m, t)


@helper
def back_to_gateway(st, r, t):
    """Free-slot routing found no free instance: request r goes back to its place in the
    gateway queue."""
    routing_done(st, r, t)
    enter_gateway(st, r, t, False)


# ----------------------------------------------------------------------------- deadlines and retries


@helper
def begin_attempt(st, r, t):
    """Request r (re)arrives at time t: its attempt's deadline is set (and its EXPIRE
    pushed unless one is in the heap).  True for its first attempt (a new request)."""
    fr = st.flow_reqs
    first = fr[r]["attempt"] == 0
    if first:
        fr[r]["first_arrival_us"] = t
    st.reqs[r]["arrival_us"] = t
    ttl = fr[r]["ttl_us"]
    if ttl >= 0:
        d = t + ttl
        fr[r]["deadline_us"] = d
        if fr[r]["expire_at_us"] < 0:
            push_expiry(st, r, d)
    return first


@helper
def push_expiry(st, r, d):
    """Request r's EXPIRE event at time d."""
    st.flow_reqs[r]["expire_at_us"] = d
    st.loop[0]["expiry_events"] += 1
    push_event_with(st, d, event_priority(ClusterEvent.EXPIRE, np.int64(-1)), r, np.int64(0))


@helper
def live(state):
    """A state an attempt can be cancelled in (it has not ended)."""
    return (state == RequestState.ADMITTING or state == RequestState.GATEWAY or state == RequestState.ROUTED
            or state == RequestState.QUEUED or state == RequestState.RUNNING)


@helper
def on_expire(st, r, t):
    """Request r's EXPIRE event at t: cancel its attempt if it is live and due now."""
    fr = st.flow_reqs
    fr[r]["expire_at_us"] = -1
    st.loop[0]["expiry_events"] -= 1
    if not live(st.reqs[r]["state"]):
        return  # completed, ended otherwise, or between attempts (its next arrival pushes one)
    d = fr[r]["deadline_us"]
    if d > t:
        push_expiry(st, r, d)  # a later attempt's deadline
        return
    cancel(st, r, t)


@helper
def cancel(st, r, t):
    """Request r's TTL is up at time t: cancel it where it is, freeing what it holds there."""
    reqs = st.reqs
    inst = st.inst
    fr = st.flow_reqs
    state = reqs[r]["state"]
    i = np.int64(reqs[r]["instance"])
    m = reqs[r]["model"]
    if state == RequestState.ADMITTING:
        routing_done(st, r, t)
        i = np.int64(-1)  # (routed before? it left that instance)
    elif state == RequestState.GATEWAY:
        leave_gateway(st, r, t)
        i = np.int64(-1)
    elif state == RequestState.ROUTED:
        inst[i]["routed_pending"] -= 1  # (its Queued event is stale now)
    elif state == RequestState.QUEUED:
        dl_remove(reqs["queue_prev"], reqs["queue_next"], inst["wq_head"], inst["wq_tail"], inst["wq_len"], i, r)
    else:  # RUNNING
        if st.settings[0]["event_skipping"] != 0:
            calendar_remove(st, i, r)
        batch_remove(st, i, r)
        kv_release(st, i, r)
        if st.settings[0]["prefix_caching"] != 0:
            reqs[r]["named_upto"] = ALL_NAMED  # (as after a preemption: every block it takes again is named)
        forget_own_keys(st, r)
    fr[r]["epoch"] += 1
    reqs[r]["state"] = RequestState.TIMED_OUT
    fr[r]["timeouts"] += 1
    st.loop[0]["timeouts"] += 1
    log_attempt(st, r, t, AttemptEnd.TIMED_OUT, state, i)
    if i >= 0 and st.settings[0]["autoscaled"] != 0:
        maybe_terminate(st, i, t)  # a draining instance may have nothing left
    if st.settings[0]["flow"] != 0 and st.flow_models[m]["depth"] > 0:
        push_dispatch(st, m, t)  # its place may let a waiting request go
    maybe_retry(st, r, t)


@helper
def shed(st, r, t):
    """The saturated gateway sheds sheddable request r at time t."""
    fr = st.flow_reqs
    fr[r]["epoch"] += 1
    st.reqs[r]["state"] = RequestState.SHED
    fr[r]["sheds"] += 1
    st.loop[0]["sheds"] += 1
    st.flow_models[st.reqs[r]["model"]]["sheds"] += 1
    if tracing(st):
        log_gateway(st, r, t, GatewayAction.SHED, np.int64(0))
    log_attempt(st, r, t, AttemptEnd.SHED, RequestState.GATEWAY, np.int64(-1))
    maybe_retry(st, r, t)


@helper
def log_gateway(st, r, t, action, wait):
    """A row of the gateway's decision log (decisions traced)."""
    lp = st.loop
    k = lp[0]["gateway_records"]
    log = st.gateway_log
    if k >= log.shape[0]:  # (sized two per attempt: never)
        return
    m = st.reqs[r]["model"]
    log[k]["time_us"] = t
    log[k]["request"] = r
    log[k]["attempt"] = st.flow_reqs[r]["attempt"]
    log[k]["model"] = m
    log[k]["tenant"] = st.reqs[r]["tenant"]
    log[k]["action"] = action
    log[k]["depth"] = st.flow_models[m]["depth"]
    log[k]["wait_us"] = wait
    lp[0]["gateway_records"] = k + 1


@helper
def log_attempt(st, r, t, outcome, place, i):
    """A row of the failed-attempt log for request r's attempt that ended at t."""
    lp = st.loop
    k = lp[0]["attempt_records"]
    log = st.attempt_log
    if k >= log.shape[0]:  # (sized for every attempt that can fail: never)
        return
    fr = st.flow_reqs
    log[k]["request"] = r
    log[k]["attempt"] = fr[r]["attempt"]
    log[k]["arrival_us"] = st.reqs[r]["arrival_us"]
    log[k]["gw_enter_us"] = fr[r]["gw_enter_us"]
    log[k]["gw_leave_us"] = fr[r]["gw_leave_us"]
    log[k]["gw_wait_us"] = fr[r]["gw_wait_us"]
    log[k]["end_us"] = t
    log[k]["outcome"] = outcome
    log[k]["place"] = place
    log[k]["instance"] = i
    lp[0]["attempt_records"] = k + 1


@helper
def backoff_us(st, r, k):
    """The delay before request r's retry number k + 1 (k = 0 first): base · factor^k,
    times a uniform draw in [1 - jitter, 1 + jitter] (the request's and k's own draw of the
    run's seed), truncated to whole µs."""
    c = st.reqs[r]["client"]
    b = st.retry_backoff
    if c < 0 or c >= b.shape[0]:
        c = 0
    d = b[c, RetryBackoff.BASE_US] * b[c, RetryBackoff.FACTOR] ** k
    jitter = b[c, RetryBackoff.JITTER]
    if jitter > 0.0:
        u = uniform_draw(st.settings[0]["flow_seed"], np.int64(r), np.int64(k))
        d *= 1.0 + jitter * (2.0 * u - 1.0)
    return np.int64(d)


@helper
def maybe_retry(st, r, t):
    """Request r's attempt failed at t: with retries left it arrives again after its backoff."""
    fr = st.flow_reqs
    k = fr[r]["attempt"]
    if k >= fr[r]["max_retries"]:
        return  # its last attempt: it ends here
    delay = backoff_us(st, r, k)
    fr[r]["attempt"] = k + 1
    st.loop[0]["retries"] += 1
    reset_attempt(st, r)
    push_event_with(st, t + delay, event_priority(ClusterEvent.ARRIVAL, np.int64(-1)), r, fr[r]["epoch"])


@helper
def reset_attempt(st, r):
    """Request r's row as a new attempt finds it (pending; nothing computed or emitted)."""
    reqs = st.reqs
    fr = st.flow_reqs
    reqs[r]["state"] = RequestState.PENDING
    reqs[r]["computed"] = 0
    reqs[r]["prefill_target"] = 0
    reqs[r]["blocks_held"] = 0
    reqs[r]["generated"] = 0
    reqs[r]["first_token_us"] = -1
    reqs[r]["last_token_us"] = -1
    reqs[r]["last_token_step"] = -1
    reqs[r]["last_step_us"] = 0
    reqs[r]["itl_sum_us"] = 0
    reqs[r]["run_start_step"] = -1
    reqs[r]["sync_step"] = 0
    reqs[r]["cal_next"] = -1
    reqs[r]["ride_phase"] = -1
    reqs[r]["instance"] = -1
    reqs[r]["queue_prev"] = -1
    reqs[r]["queue_next"] = -1
    reqs[r]["routed_us"] = -1
    reqs[r]["queued_us"] = -1
    reqs[r]["first_scheduled_us"] = -1
    reqs[r]["cached_tokens"] = 0
    reqs[r]["priority"] = 0.0
    fr[r]["gw_enter_us"] = -1
    fr[r]["gw_leave_us"] = -1
    fr[r]["gw_wait_us"] = 0
    fr[r]["deadline_us"] = -1
