"""Prefill/decode disaggregation (docs/semantics.md §13).

A request of a disaggregated model is routed to a decode instance first (its model's
routing group); the decider then says whether its prompt is prefilled elsewhere.  If so,
its *prefill leg* -- request row r + ``pd_base``, a one-token request with the same
prompt keys that emits nothing -- is routed to a prefill instance (the model's prefill
group) and runs there like any request.  When the step that completes the prompt ends:

    (the LegDone event; engine/phases.py ``end_phase`` ends every phase of it)
    reserve the blocks on the decode instance  (none free: wait in its transfer queue, or drop)
      -> transfer: data at the link's bandwidth (shared by the prefill instance's transfers
         under contention), then the base latency
      -> TRANSFER_DONE on the decode instance: the leg's blocks go to the prefill instance's
         prefix cache; the request waits for a batch slot there (``rx``, admitted before
         the wait queue) with all prompt tokens but the last computed (all of them, and
         one token emitted, when the prefill side emits the first token)

The request row holds its blocks on the decode instance from the reservation on, the leg
its blocks on the prefill instance until the transfer ends: blocks held outside a batch,
counted per instance (``held_outside``, and ``held_anon`` for the anonymous ones, which
block conservation adds; kv/cache.py).
"""

import math

import numpy as np

from ..jit import helper
from ..kv.cache import anonymous_held, key_deferred, key_lookup, key_register, kv_admit, kv_forget_chunk
from ..policies.prefix_index import index_record_request
from ..policies.program import run_program
from ..policies.routing import (ROUTER_SNAP_FIELDS, choose_instance, is_candidate, refresh_snapshot,
                                request_route_features, route_scratch)
from ..schema import (InstanceEvent, PdDecider, PdFeature, PhaseEnd, PolicySlot, ProgramHeader, RequestState,
                      RoutingKind, Status)
from ..structs.dlist import dl_pop_front, dl_push_back, dl_remove
from ..structs.sharing import DONE_EPS_US, ps_advance, ps_next_due
from .events import event_priority, push_event, push_event_with
from .phases import end_phase
from .queueing import ensure_step, send_to_instance
from .tiers import wake_for_writes
from .trace import log_routing, tracing

_VERSION_MASK = np.int64(0x7FFFFFFF)  # a LINK event carries its link's version in the int32 payload


@helper
def on_pd_event(st, kind, i, r, t, arg2):
    """The P/D instance events (schema.InstanceEvent TRANSFER_DONE, LINK, LEG_DONE) of
    instance i: one call site in the loop's dispatch keeps its hot path as it was."""
    if kind == InstanceEvent.TRANSFER_DONE:
        on_transfer_done(st, i, r, t)
    elif kind == InstanceEvent.LINK:
        on_link(st, i, t, arg2)
    else:
        pd_leg_done(st, i, r, t)


@helper
def pd_decide(st, r, d, model):
    """True if request r (routed to decode instance d) is prefilled on a prefill instance:
    never, always, or when its prompt tokens beyond the leading blocks cached on d reach
    the model's threshold."""
    pm = st.pd_models[model]
    decider = pm["decider"]
    if decider == PdDecider.NEVER:
        return False
    if decider == PdDecider.ALWAYS:
        return True
    reqs = st.reqs
    hits = np.int64(0)
    if st.settings[0]["prefix_caching"] != 0:
        kstart = reqs[r]["key_start"]
        n = reqs[r]["prompt_key_count"]
        while hits < n and key_lookup(st, d, kstart + hits) >= 0:
            hits += 1
    uncached = reqs[r]["prompt_len"] - hits * np.int64(st.inst[d]["block_size"])
    if decider == PdDecider.EXPRESSION:
        return _decide_by_program(st, r, d, pm["prefill_group"], uncached)
    return uncached >= pm["threshold"]


@helper
def _decide_by_program(st, r, d, prefill_group, uncached):
    """The P/D decider program's decision for request r on decode instance d: disaggregate
    iff its value (PdFeature) is > 0; a value that is not finite keeps it on d (counted)."""
    inst = st.inst
    req = st.reqs[r]
    f = st.prog_features
    f[PdFeature.PROMPT_TOKENS] = req["prompt_len"]
    f[PdFeature.CACHED_TOKENS] = req["prompt_len"] - uncached
    f[PdFeature.UNCACHED_TOKENS] = uncached
    f[PdFeature.DECODE_LOAD] = inst[d]["routed_pending"] + inst[d]["wq_len"] + inst[d]["batch_len"]
    f[PdFeature.DECODE_KV_UTILIZATION] = inst[d]["kv_allocated"] / inst[d]["kv_total"]
    f[PdFeature.TRANSFER_QUEUE] = st.pd_inst[d]["xq_len"]
    f[PdFeature.SLO_CLASS] = req["slo_class"]
    f[PdFeature.TENANT] = req["tenant"]
    prog = st.policy_param[PolicySlot.PD_DECIDER]
    if (np.int64(prog[ProgramHeader.FEATURES]) >> PdFeature.PREFILL_LOAD) & 3 != 0:  # the prefill pool's
        n = 0
        load = 0.0
        for i in range(inst.shape[0]):
            if is_candidate(inst, i, prefill_group):
                n += 1
                load += inst[i]["routed_pending"] + inst[i]["wq_len"] + inst[i]["batch_len"]
        f[PdFeature.PREFILL_LOAD] = load / n if n > 0 else 0.0
        f[PdFeature.PREFILL_INSTANCES] = n
    v = run_program(prog, f, st.prog_stack)
    if not (v > -np.inf and v < np.inf):
        st.prog_faults[PolicySlot.PD_DECIDER] += 1
        return False
    return v > 0.0


@helper
def pd_route_prefill(st, r, d, t):
    """Request r goes to decode instance d by way of a prefill instance: route its prefill
    leg with the model's prefill routing; the leg's Queued follows after that instance's
    queueing overhead.  Returns False (nothing routed) if the prefill routing chose d
    itself (a `both` instance): the request then runs there undisaggregated."""
    reqs = st.reqs
    inst = st.inst
    model = reqs[r]["model"]
    g = st.pd_models[model]["prefill_group"]
    kind = st.routing_kind[g]
    if kind != RoutingKind.ROUND_ROBIN:
        refresh_snapshot(inst, st.snap, st.snap_refreshed, st.policy_param[PolicySlot.SNAPSHOT], t, ROUTER_SNAP_FIELDS)
    n_keys = reqs[r]["prompt_key_count"]
    if kind == RoutingKind.EXPRESSION:
        request_route_features(st.prog_features, reqs[r])
    p, cursor = choose_instance(kind, st.routing_param[g], inst, st.snap, st.affinity, n_keys, st.rr_cursor[g],
                                st.route_scores, g, route_scratch(st))
    if p < 0:
        st.loop[0]["status"] = Status.NO_INSTANCE
        st.loop[0]["error_request"] = r
        return True
    st.rr_cursor[g] = cursor
    if p == d:
        return False
    leg = r + st.settings[0]["pd_base"]
    if tracing(st):
        log_routing(st, leg, t, p, n_keys, False)
    if st.settings[0]["prefix_index"] != 0:
        index_record_request(st, p, reqs[r]["key_start"], n_keys)
    reqs[r]["instance"] = d
    reqs[r]["routed_us"] = t
    reqs[r]["state"] = RequestState.REMOTE_PREFILL
    st.pd_reqs[r]["prefill_instance"] = p
    send_to_instance(st, p, leg, t)
    return True


@helper
def pd_leg_done(st, p, leg, t):
    """Hand prefill leg ``leg``'s request to its decode instance at t -- the end of the step
    that completed the leg's prompt on prefill instance p (``prefill_done_us``), or, when
    the prefill side emits the first token, that token's output: reserve blocks and
    transfer, or wait, or drop."""
    reqs = st.reqs
    inst = st.inst
    r = leg - st.settings[0]["pd_base"]
    pm = st.pd_models[reqs[r]["model"]]
    if pm["first_token_prefill"] != 0:  # the prefill side streamed the first token
        token = reqs[leg]["first_token_us"]
        end_phase(st, p, r, np.int64(PhaseEnd.PREFILL_DONE), token, reqs[leg]["run_start_step"])
        reqs[r]["last_token_us"] = token
        reqs[r]["generated"] = 1
        if reqs[r]["output_len"] <= 1:  # nothing left to decode: done without a transfer
            end_phase(st, p, leg, np.int64(PhaseEnd.KV_HANDED_OVER), t, np.int64(-1))
            reqs[r]["instance"] = p  # (no decode instance: prefill_instance stays p, no transfer)
            end_phase(st, p, r, np.int64(PhaseEnd.OUTPUT_DONE), token, np.int64(-1))
            end_phase(st, p, r, np.int64(PhaseEnd.FOLLOWER_RELEASED), t, np.int64(-1))
            return
    d = reqs[r]["instance"]
    if reqs[r]["block_cap"] > inst[d]["kv_total"]:  # can never fit there: dropped unservable
        end_phase(st, p, leg, np.int64(PhaseEnd.KV_HANDED_OVER), t, np.int64(-1))
        reqs[r]["state"] = RequestState.DROPPED
        inst[d]["dropped"] += 1
        return
    if st.pd_inst[d]["xq_len"] == 0 and pd_reserve(st, d, r):
        pd_start_transfer(st, r, d, t)
    elif pm["drop_when_full"] != 0:
        end_phase(st, p, leg, np.int64(PhaseEnd.KV_HANDED_OVER), t, np.int64(-1))
        reqs[r]["state"] = RequestState.DROPPED_AT_DECODE
        st.pd_inst[d]["pd_drops"] += 1
    else:  # wait, behind the requests already waiting there
        reqs[r]["state"] = RequestState.TRANSFER_WAIT
        st.pd_reqs[r]["wait_start_us"] = t
        dl_push_back(reqs["queue_prev"], reqs["queue_next"], st.pd_inst["xq_head"], st.pd_inst["xq_tail"], st.pd_inst["xq_len"], d, r)
        st.pd_inst[d]["pd_waits"] += 1
        if st.kv_tier_inst[d]["n_tiers"] > 0 and st.inst[d]["batch_len"] == 0:
            wake_for_writes(st, d, t)  # (an idle instance: its stores' pinned blocks free when they land)
        if st.pd_inst[d]["xq_len"] > st.pd_inst[d]["xq_peak"]:
            st.pd_inst[d]["xq_peak"] = st.pd_inst[d]["xq_len"]


@helper
def pd_reserve(st, d, r):
    """Reserve request r's prompt blocks on decode instance d (its leading blocks cached
    there are shared, the rest allocated; one more token's room when the prefill side emits
    the first token); False (nothing changed) if they are not free.  The new blocks get
    their keys when the data has arrived (``pd_register_received``)."""
    reqs = st.reqs
    prompt = reqs[r]["prompt_len"]
    target = prompt + reqs[r]["generated"]
    reqs[r]["prefill_target"] = target
    n, cached = kv_admit(st, d, r, target, np.int64(0), False)
    if n < 0:
        return False
    kv_forget_chunk(st, d, r, cached, n)  # not cached content until the transfer is done
    charged = prompt
    if st.pd_models[reqs[r]["model"]]["charge_full_prompt"] == 0:
        charged = prompt - cached  # only the blocks the decode instance does not hold (cached < prompt)
    st.pd_reqs[r]["charged_tokens"] = charged
    reqs[r]["cached_tokens"] = cached
    st.pd_inst[d]["held_outside"] += 1  # until it is admitted to the batch
    st.pd_inst[d]["held_anon"] += anonymous_held(st, r)
    st.inst[d]["prefix_query_tokens"] += prompt
    st.inst[d]["prefix_hit_tokens"] += cached
    return True


@helper
def pd_start_transfer(st, r, d, t):
    """Start request r's KV transfer to decode instance d at t (its blocks reserved)."""
    reqs = st.reqs
    pd = st.pd_reqs
    pm = st.pd_models[reqs[r]["model"]]
    reqs[r]["state"] = RequestState.TRANSFERRING
    pd[r]["transfer_start_us"] = t
    work = np.float64(pd[r]["charged_tokens"]) * pm["kv_bytes_per_token"] / pm["bytes_per_us"]
    if pm["link_contention"] == 0:  # ceil(base latency + data time), as the reference
        pd[r]["transfer_data_us"] = t + np.int64(math.ceil(work))
        end = t + np.int64(math.ceil(pm["base_latency_us"] + work))
        push_event(st, end, event_priority(InstanceEvent.TRANSFER_DONE, d), r)
        return
    p = pd[r]["prefill_instance"]
    link_advance(st, p, t)
    pd[r]["work_left_us"] = work
    dl_push_back(pd["link_prev"], pd["link_next"], st.pd_inst["link_head"], st.pd_inst["link_tail"], st.pd_inst["link_len"], p, r)
    if st.pd_inst[p]["link_len"] > st.pd_inst[p]["link_peak"]:
        st.pd_inst[p]["link_peak"] = st.pd_inst[p]["link_len"]
    link_reschedule(st, p, t)


@helper
def link_advance(st, p, t):
    """Bring the remaining work of prefill instance p's transfers up to time t: each of its
    k transfers progressed at 1/k of the bandwidth since the last update (processor
    sharing, structs/sharing.py)."""
    pd = st.pd_inst
    ps_advance(st.pd_reqs["work_left_us"], st.pd_reqs["link_next"], pd[p]["link_head"], pd[p]["link_len"],
               t - pd[p]["link_last_us"])
    pd[p]["link_last_us"] = t


@helper
def link_reschedule(st, p, t):
    """Schedule prefill instance p's next LINK event: when its transfer with the least work
    left finishes at the current share (rounded up to the µs); earlier LINK events of p
    become stale."""
    st.pd_inst[p]["link_version"] += 1
    k = st.pd_inst[p]["link_len"]
    if k == 0:
        return
    due = ps_next_due(st.pd_reqs["work_left_us"], st.pd_reqs["link_next"], st.pd_inst[p]["link_head"], k, t)
    push_event_with(st, due, event_priority(InstanceEvent.LINK, p), np.int64(-1),
                    st.pd_inst[p]["link_version"] & _VERSION_MASK)


@helper
def on_link(st, p, t, version):
    """LINK event of prefill instance p: the transfers whose data is through leave the
    link (their base latency follows); the others' share grows."""
    pd = st.pd_reqs
    if version != (st.pd_inst[p]["link_version"] & _VERSION_MASK):
        return  # superseded by a later reschedule
    link_advance(st, p, t)
    x = st.pd_inst[p]["link_head"]
    while x >= 0:
        nxt = pd[x]["link_next"]
        if pd[x]["work_left_us"] <= DONE_EPS_US:
            dl_remove(pd["link_prev"], pd["link_next"], st.pd_inst["link_head"], st.pd_inst["link_tail"], st.pd_inst["link_len"], p, x)
            pd[x]["transfer_data_us"] = t
            base = np.int64(math.ceil(st.pd_models[st.reqs[x]["model"]]["base_latency_us"]))
            push_event(st, t + base, event_priority(InstanceEvent.TRANSFER_DONE, st.reqs[x]["instance"]), x)
        x = nxt
    link_reschedule(st, p, t)


@helper
def on_transfer_done(st, d, r, t):
    """Request r's KV has arrived at decode instance d: its prefill leg's blocks go to the
    prefill instance's cache, the received blocks get their keys, and it waits for a batch
    slot on d (``rx``: admitted before d's wait queue) with all prompt tokens but the last
    computed (vLLM recomputes the last one to produce the first token) -- or, when the
    prefill side emitted the first token, with the prompt computed and that token
    generated."""
    reqs = st.reqs
    leg = r + st.settings[0]["pd_base"]
    end_phase(st, reqs[leg]["instance"], leg, np.int64(PhaseEnd.KV_HANDED_OVER), t, np.int64(-1))
    st.pd_reqs[r]["transfer_end_us"] = t
    st.pd_inst[d]["pd_transfers_in"] += 1
    st.inst[d]["injected"] += 1
    if reqs[r]["generated"] > 0:
        reqs[r]["computed"] = reqs[r]["prompt_len"]
    else:
        reqs[r]["computed"] = reqs[r]["prompt_len"] - 1
    pd_register_received(st, d, r)
    reqs[r]["state"] = RequestState.QUEUED
    reqs[r]["queued_us"] = t
    dl_push_back(reqs["queue_prev"], reqs["queue_next"], st.pd_inst["rx_head"], st.pd_inst["rx_tail"], st.pd_inst["rx_len"], d, r)
    ensure_step(st, d, t)


@helper
def pd_register_received(st, d, r):
    """Key the blocks request r received on decode instance d (the full blocks of its
    computed tokens that are not keyed yet) unless another block already caches them."""
    if st.settings[0]["prefix_caching"] == 0:
        return
    reqs = st.reqs
    bs = np.int64(st.inst[d]["block_size"])
    block_key = st.blocks["key_index"]
    start = reqs[r]["block_start"]
    # named positions only (an anonymous one has no block id), and not the deferred keys
    filled = min(reqs[r]["computed"] // bs, reqs[r]["key_count"], reqs[r]["blocks_held"], reqs[r]["named_upto"])
    for j in range(filled):
        b = np.int64(st.req_blocks[start + j])
        q = reqs[r]["key_start"] + j
        if block_key[b] < 0 and not key_deferred(st, r, q):
            if key_register(st, d, q, b):
                block_key[b] = q


@helper
def pd_retry_waiting(st, d, t):
    """After a step of decode instance d freed blocks: start the transfers waiting there,
    in order, while their blocks can be reserved."""
    reqs = st.reqs
    while st.pd_inst[d]["xq_len"] > 0:
        r = st.pd_inst[d]["xq_head"]
        if not pd_reserve(st, d, r):
            return
        dl_pop_front(reqs["queue_prev"], reqs["queue_next"], st.pd_inst["xq_head"], st.pd_inst["xq_tail"], st.pd_inst["xq_len"], d)
        pd_start_transfer(st, r, d, t)
