"""Handlers of the cluster events and of Queued (docs/semantics.md §1, §8):

    ClusterArrival ─► AdmissionDecision ─► RoutingDecision ─► Queued(instance) ─► Step(instance)

Each takes the State, the event's request (and instance) and the time; each schedules
the next event of the request's life with ``push_event``.  The Step handler is in
``step.py``.
"""

import numpy as np

from ..jit import helper
from ..kv.cache import is_prefill_leg
from ..policies.admission import admit, admit_by_program
from ..policies.prefix_index import index_record_request, leading_matches
from ..policies.routing import (ROUTER_SNAP_FIELDS, choose_instance, refresh_snapshot, request_route_features,
                                route_scratch)
from ..schema import AdmissionKind, ClusterEvent, FlowDetector, PolicySlot, RequestState, RoutingKind, Status
from .autoscale import maybe_terminate, redirecting, reroute
from .disaggregation import pd_decide, pd_route_prefill
from .events import event_priority, push_event_with, request_epoch
from .flow import (back_to_gateway, begin_attempt, gateway_admit, hide_busy_instances, recheck_rule, routing_done,
                   show_instances)
from .queueing import join_wait_queue, send_to_instance
from .trace import log_admission, log_routing, tracing


@helper
def on_arrival(st, r, t):
    """Request r reaches the cluster: the admission decision follows after its latency.
    (With deadlines, a retry of a request is an arrival too: engine/flow.py.)"""
    if st.settings[0]["deadlines"] == 0 or begin_attempt(st, r, t):
        st.loop[0]["injected"] += 1
    st.reqs[r]["state"] = RequestState.ADMITTING
    push_event_with(st, t + st.settings[0]["admission_latency_us"], event_priority(ClusterEvent.ADMISSION, np.int64(-1)),
                    r, request_epoch(st, r))


@helper
def on_admission(st, r, t):
    """Admit (the routing decision follows after its latency) or reject request r."""
    reqs = st.reqs
    kind = st.policy_kind[PolicySlot.ADMISSION]
    if kind == AdmissionKind.EXPRESSION:
        admitted = admit_by_program(st, r, t)
    else:
        admitted = admit(kind, st.policy_param[PolicySlot.ADMISSION], st.tb_tokens, st.tb_last_us, reqs[r]["tenant"],
                         reqs[r]["prompt_len"], t)
    if tracing(st):
        log_admission(st, r, t, admitted)
    if not admitted:
        reqs[r]["state"] = RequestState.REJECTED
        st.loop[0]["rejected"] += 1
        return
    if st.settings[0]["flow"] != 0:  # the gateway queue (engine/flow.py)
        gateway_admit(st, r, t)
        return
    push_event_with(st, t + st.settings[0]["routing_latency_us"], event_priority(ClusterEvent.ROUTING, np.int64(-1)),
                    r, request_epoch(st, r))


@helper
def on_routing(st, r, t):
    """Route request r: refresh the router's snapshot, choose an instance, record the keys
    of the request's full prompt blocks in the router's index (the router sees only the
    prompt); Queued follows after α0 + α1·L.  The routing policy is the request's model's
    (``routing_kind``/``routing_param``: the policy's own unless it sets that model's).

    A *cohort* -- candidates whose policies differ only in their routing parameters,
    simulated as one run while they decide alike (``st.cohort``, blis_fast.batch.cohorts)
    -- routes only when every member picks the same instance; otherwise the loop stops
    with Status.COHORT_SPLIT and each member's pick in ``cohort_choice``, having changed
    nothing a decision reads (refreshing the snapshot again at the same time changes
    nothing, and the prefix-index walk memo is only a cache)."""
    reqs = st.reqs
    inst = st.inst
    s = st.settings
    model = reqs[r]["model"]
    kind = st.routing_kind[model]  # the routing of the request's model (routing per model)
    flow = s[0]["flow"] != 0
    hidden = flow and recheck_rule(st, model) == FlowDetector.FREE_SLOT
    if hidden and not hide_busy_instances(st, model, t):  # late binding: the free instances only
        back_to_gateway(st, r, t)  # none left: it waits again, in its place
        return
    if kind != RoutingKind.ROUND_ROBIN or tracing(st):
        # (round-robin reads no snapshot, and the decision trace is the only other reader)
        refresh_snapshot(inst, st.snap, st.snap_refreshed, st.policy_param[PolicySlot.SNAPSHOT], t, ROUTER_SNAP_FIELDS)
    kstart = reqs[r]["key_start"]
    n_keys = reqs[r]["prompt_key_count"]
    use_index = s[0]["prefix_index"] != 0
    if use_index:
        leading_matches(st, kstart, n_keys)
    lp = st.loop
    feats = st.prog_features
    if kind == RoutingKind.EXPRESSION:
        request_route_features(feats, reqs[r])
    members = st.cohort.shape[0]
    for m in range(1, members):  # a cohort's other members decide first (the scores left are member 0's)
        # (programs never run as a cohort: a member's faults would be counted as member 0's)
        st.cohort_choice[m], _ = choose_instance(kind, st.cohort[m], inst, st.snap, st.affinity, n_keys,
                                                 st.rr_cursor[model], st.route_scores, model, route_scratch(st))
    target, cursor = choose_instance(kind, st.routing_param[model], inst, st.snap, st.affinity, n_keys,
                                     st.rr_cursor[model], st.route_scores, model, route_scratch(st))
    if hidden:
        show_instances(st)
    forced = r == s[0]["forced_request"] and target >= 0
    if members > 1 and not forced:
        # the members share the routing kind, so the same instance means the same cursor
        st.cohort_choice[0] = target
        for m in range(1, members):
            if st.cohort_choice[m] != target:  # they part here: nothing is decided (engine/loop.py)
                lp[0]["status"] = Status.COHORT_SPLIT
                lp[0]["error_request"] = r
                return
    st.rr_cursor[model] = cursor
    if flow:
        routing_done(st, r, t)
    if forced:  # a counterfactual replay: only this decision changes (the cursor moves as chosen)
        target = s[0]["forced_instance"]
    if target >= 0 and tracing(st):
        log_routing(st, r, t, target, n_keys, forced)
    if target >= 0 and use_index:
        index_record_request(st, target, kstart, n_keys)
    if target < 0:
        lp[0]["status"] = Status.NO_INSTANCE
        lp[0]["error_request"] = r
        return
    if (s[0]["pd_base"] > 0 and st.pd_models[model]["enabled"] != 0 and pd_decide(st, r, target, model)
            and pd_route_prefill(st, r, target, t)):
        return  # decode first, then its prefill leg (engine/disaggregation.py)
    send_to_instance(st, target, r, t)


@helper
def on_queued(st, i, r, t):
    """Request r enters instance i's wait queue (or is dropped if it can never fit); an
    idle instance gets a Step at max(t, end of its last step) -- at t in compat mode."""
    reqs = st.reqs
    inst = st.inst
    inst[i]["routed_pending"] -= 1
    if st.settings[0]["autoscaled"] != 0 and redirecting(st, i):  # a draining instance sends it back
        reroute(st, i, r, t)
        maybe_terminate(st, i, t)
        return
    inst[i]["injected"] += 1
    if reqs[r]["block_cap"] > inst[i]["kv_total"]:
        reqs[r]["state"] = RequestState.DROPPED  # could never fit: not cycled forever
        inst[i]["dropped"] += 1
        if is_prefill_leg(st, r):  # its request ends with it (engine/disaggregation.py)
            reqs[r - st.settings[0]["pd_base"]]["state"] = RequestState.DROPPED
        return
    join_wait_queue(st, i, r, t)
