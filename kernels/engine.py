"""The event loop of the cluster simulator (SEMANTICS §1-3, §8).

``simulate_cluster`` merges the pre-sorted arrival stream with the event heap and
dispatches each event:

    ClusterArrival ─► AdmissionDecision ─► RoutingDecision ─► Queued(instance) ─► Step(instance)

Arrivals never sit in the heap (their order is known), so the heap holds at most one
control event per in-flight request plus one Step per instance.  At equal times cluster
events run before instance events, lower instance indices first, then insertion order
(kernels.heap.event_priority).  Everything is mutated in place; nothing is allocated in
the loop except the ITL log, which doubles when full.
"""

import numpy as np
from .jit import helper, kernel

from .batch import form_batch, wq_push_back
from .dtypes import (
    EV_ADMISSION_DECISION,
    EV_CLUSTER_ARRIVAL,
    EV_QUEUED,
    EV_ROUTING_DECISION,
    EV_STEP,
    IRR_PREV_RUN_END,
    IRR_PREV_RUN_START,
    IRR_REQUEST,
    IRR_STEP,
    IRR_VALUE,
    LAT_BLACKBOX,
    REQ_ADMITTING,
    REQ_COMPLETED,
    REQ_DROPPED,
    REQ_QUEUED,
    REQ_REJECTED,
    REQ_ROUTED,
    SCHED_SORT,
    STATUS_CLOCK_BACKWARDS,
    STATUS_EVENT_HEAP_FULL,
    STATUS_INVARIANT_BATCH,
    STATUS_INVARIANT_KV,
    STATUS_MAX_EVENTS,
    STATUS_NO_INSTANCE,
    STATUS_OK,
    STATUS_STALL,
    STEP_LOG_DT,
    STEP_LOG_INSTANCE,
)
from .heap import event_kind_instance, event_priority, heap_pop, heap_push
from .policies import admit, choose_instance, refresh_snapshot, reorder_wait_queue, request_priority
from .prefix_index import index_insert_unshared, index_touch, leading_matches
from .kvcache import kv_conserved, kv_release
from .steptime import blackbox_step_us, output_token_delay_us, queueing_delay_us, roofline_entry, roofline_step_us


@helper
def step_duration_us(inst, i, roofline, batch, work, context, reqs, n_prefill, n_decode):
    """Duration of the step just formed on instance i (SEMANTICS §5), in µs."""
    if inst[i].latency_kind == LAT_BLACKBOX:
        return blackbox_step_us(inst[i].beta0, inst[i].beta1, inst[i].beta2, n_prefill, n_decode)
    pg = 0.0
    pv = 0.0
    pd = 0.0
    npre = 0
    dg = 0.0
    dv = 0.0
    dd = 0.0
    ndec = 0
    for k in range(inst[i].batch_len):
        n = work[k]
        if n == 0:
            continue
        r = batch[i, k]
        s = context[k]
        g, v, d = roofline_entry(roofline, s, n)
        if s < reqs[r].prefill_target:  # context below the prefill target: a prefill chunk
            pg += g
            pv += v
            pd += d
            npre += 1
        else:
            dg += g
            dv += v
            dd += d
            ndec += 1
    return roofline_step_us(roofline, pg, pv, pd, npre, dg, dv, dd, ndec)


@helper
def execute_step(inst, i, now, dt, step_idx, compat, batch, work, reqs, blocks, req_blocks, irr_log, n_irr,
                 done_buf):
    """Apply step ``step_idx`` of duration ``dt`` that started at ``now`` (SEMANTICS
    §3.4-5): advance prefill chunks, emit tokens at step end + a2, complete requests and
    free their KV.

    ITL bookkeeping: a token emitted right after the request's token of the instance's
    previous step extends its current run (its sample is this step's duration, rebuilt
    from the step log later); any other non-first token is logged in ``irr_log`` with its
    sample.  Samples are token-time gaps, or in ``compat`` mode the reference's step + a2
    (plus one more at completion).  ``itl_sum_us`` accumulates each request's samples.
    Completed requests are listed in ``done_buf``.  Returns (irregular-log length, number
    completed).
    """
    end = now + dt
    a2 = output_token_delay_us(inst[i].alpha2)
    token_us = end + a2
    prev_step = inst[i].prev_step
    write = 0
    n_done = 0
    for k in range(inst[i].batch_len):
        r = batch[i, k]
        n = work[k]
        if n > 0:
            reqs[r].computed += n
            if reqs[r].computed >= reqs[r].prefill_target:
                # prefill finished (first or recomputed) or a decode: one new output token
                if reqs[r].first_token_us < 0:
                    reqs[r].first_token_us = token_us
                    reqs[r].run_start_step = step_idx
                else:
                    sample = dt + a2 if compat else token_us - reqs[r].last_token_us
                    reqs[r].itl_sum_us += sample
                    if reqs[r].last_token_step != prev_step:  # not a continuation: log it
                        irr_log[n_irr, IRR_REQUEST] = r
                        irr_log[n_irr, IRR_STEP] = step_idx
                        irr_log[n_irr, IRR_VALUE] = sample
                        irr_log[n_irr, IRR_PREV_RUN_START] = reqs[r].run_start_step
                        irr_log[n_irr, IRR_PREV_RUN_END] = reqs[r].last_token_step
                        n_irr += 1
                        reqs[r].run_start_step = step_idx
                reqs[r].last_token_us = token_us
                reqs[r].last_token_step = step_idx
                reqs[r].last_step_us = dt
                reqs[r].generated += 1
                if reqs[r].generated >= reqs[r].output_len:
                    if compat:  # the reference's extra sample at completion
                        reqs[r].itl_sum_us += dt + a2
                    kv_release(inst, i, blocks, reqs, r, req_blocks)
                    reqs[r].state = REQ_COMPLETED
                    inst[i].completed += 1
                    done_buf[n_done] = r
                    n_done += 1
                    continue
        batch[i, write] = r
        write += 1
    inst[i].batch_len = write
    inst[i].prev_step = step_idx
    return n_irr, n_done


@kernel
def _grow(a, n_used):
    """Return a copy of the 2-D log ``a`` with twice the rows (first n_used rows kept)."""
    b = np.empty((max(2 * a.shape[0], 1024), a.shape[1]), a.dtype)
    b[:n_used] = a[:n_used]
    return b


@kernel
def simulate_cluster(sim, reqs, arrival_order, keys, req_blocks, inst, batch, work, context, blocks, slots,
                     heap, roofline, step_log, irr_log, done_buf, stats,
                     adm_params, tb_tokens, tb_last_us, route_weights, prio_params, sched_weights,
                     snap, snap_refreshed, snap_interval, affinity, alive,
                     pi_state, pi_slots, pi_ring, gmap, key_shared, sort_ids, sort_keys, sort_tmp_ids, sort_tmp_keys):
    """Run the whole simulation.  Mutates reqs, inst, batch, blocks, slots, heap, stats and
    the policy state (token buckets, router snapshot, prefix index).

    Policies are data: kinds in ``sim``, parameters in ``adm_params`` (admission),
    ``route_weights`` (scorer weights), ``prio_params`` (priority), ``sched_weights``
    (queue order); ``snap_interval`` holds each snapshot field's refresh interval (µs).
    Returns the (possibly regrown) step and irregular-ITL logs; ``stats[0].steps`` and
    ``stats[0].irregular_records`` rows are used.
    """
    horizon = sim[0].horizon_us
    bs = sim[0].block_size
    prefix_caching = sim[0].prefix_caching != 0
    compat = sim[0].compat != 0
    check = sim[0].check_invariants != 0
    max_events = sim[0].max_events
    use_index = sim[0].prefix_index != 0
    pi_capacity = sim[0].prefix_index_capacity
    pi_slots_per_inst = sim[0].prefix_index_slots
    prio_active = sim[0].priority_active != 0
    sort_queue = sim[0].scheduler_kind == SCHED_SORT
    victim_kind = sim[0].victim_kind
    h_time = heap["time_us"]
    h_prio = heap["priority"]
    h_seq = heap["seq"]
    h_req = heap["request"]
    n_arr = arrival_order.shape[0]

    size = 0
    seq = np.int64(0)
    clock = np.int64(0)
    ap = 0  # next arrival in arrival_order
    rr_next = 0  # round-robin cursor
    n_irr = np.int64(0)
    status = STATUS_OK
    events = np.int64(0)
    steps = np.int64(0)
    heap_peak = 0
    injected = np.int64(0)
    rejected = np.int64(0)
    err_inst = -1
    err_req = -1

    while True:
        if size < 0:
            status = STATUS_EVENT_HEAP_FULL
            break
        if size > heap_peak:
            heap_peak = size
        # ---- next event: the arrival stream or the heap, whichever orders first
        have_arrival = ap < n_arr
        if have_arrival:
            r = arrival_order[ap]
            ta = reqs[r].arrival_us
        if have_arrival and (size == 0 or ta <= h_time[0]):
            # a ClusterArrival has the lowest priority value, so it wins ties
            if ta > horizon:
                break
            t = ta
            kind = EV_CLUSTER_ARRIVAL
            ev_inst = np.int64(-1)
            ap += 1
        elif size > 0:
            if h_time[0] > horizon:
                break
            size, t, prio, _s, r = heap_pop(h_time, h_prio, h_seq, h_req, size)
            kind, ev_inst = event_kind_instance(prio)
        else:
            break
        if t < clock:
            status = STATUS_CLOCK_BACKWARDS
            err_req = r
            break
        clock = t
        events += 1
        if events > max_events:
            status = STATUS_MAX_EVENTS
            break

        # ---- dispatch
        if ev_inst < 0:
            if kind == EV_CLUSTER_ARRIVAL:
                injected += 1
                reqs[r].state = REQ_ADMITTING
                size = heap_push(h_time, h_prio, h_seq, h_req, size, t + sim[0].admission_latency_us,
                                 event_priority(EV_ADMISSION_DECISION, -1), seq, r)
                seq += 1
            elif kind == EV_ADMISSION_DECISION:
                if not admit(sim[0].admission_kind, adm_params, tb_tokens, tb_last_us, reqs[r].tenant,
                             reqs[r].prompt_len, t):
                    reqs[r].state = REQ_REJECTED
                    rejected += 1
                    continue
                size = heap_push(h_time, h_prio, h_seq, h_req, size, t + sim[0].routing_latency_us,
                                 event_priority(EV_ROUTING_DECISION, -1), seq, r)
                seq += 1
            else:  # EV_ROUTING_DECISION
                refresh_snapshot(inst, snap, snap_refreshed, snap_interval, t)
                kstart = reqs[r].key_start
                n_keys = reqs[r].key_count
                if use_index:
                    leading_matches(gmap, keys, kstart, n_keys, inst, alive, affinity)
                target, rr_next = choose_instance(sim[0].routing_kind, route_weights, inst, snap, affinity, n_keys,
                                                  rr_next)
                if target >= 0 and use_index:
                    for j in range(n_keys):
                        if key_shared[kstart + j]:
                            index_touch(pi_state, pi_slots, pi_ring, gmap, pi_capacity, pi_slots_per_inst, target,
                                        keys[kstart + j])
                        else:
                            index_insert_unshared(pi_state, pi_slots, pi_ring, gmap, pi_capacity, pi_slots_per_inst,
                                                  target, keys[kstart + j])
                if target < 0:
                    status = STATUS_NO_INSTANCE
                    err_req = r
                    break
                reqs[r].instance = target
                reqs[r].routed_us = t
                reqs[r].state = REQ_ROUTED
                inst[target].routed_pending += 1
                q = queueing_delay_us(inst[target].alpha0, inst[target].alpha1, reqs[r].prompt_len)
                size = heap_push(h_time, h_prio, h_seq, h_req, size, t + q,
                                 event_priority(EV_QUEUED, target), seq, r)
                seq += 1
        elif kind == EV_QUEUED:
            i = ev_inst
            inst[i].routed_pending -= 1
            inst[i].injected += 1
            if reqs[r].block_cap > inst[i].kv_total:
                reqs[r].state = REQ_DROPPED  # could never fit: not cycled forever
                inst[i].dropped += 1
                continue
            reqs[r].state = REQ_QUEUED
            reqs[r].queued_us = t
            wq_push_back(inst, i, reqs, r)
            if inst[i].step_pending == 0:
                start = t
                if not compat and inst[i].busy_until_us > t:
                    start = inst[i].busy_until_us  # the instance is still running a step
                size = heap_push(h_time, h_prio, h_seq, h_req, size, start,
                                 event_priority(EV_STEP, i), seq, -1)
                seq += 1
                inst[i].step_pending = 1
        else:  # EV_STEP
            i = ev_inst
            inst[i].step_pending = 0
            wq_at_start = inst[i].wq_len
            # room for this step's rows (at most one irregular token per batch slot)
            if steps + 1 > step_log.shape[0]:
                step_log = _grow(step_log, steps)
            if n_irr + inst[i].max_num_seqs > irr_log.shape[0]:
                irr_log = _grow(irr_log, n_irr)
            if prio_active:  # priorities of the waiting requests at this step
                w = inst[i].wq_head
                while w >= 0:
                    reqs[w].priority = request_priority(prio_params, reqs[w].arrival_us, reqs[w].slo_class, t)
                    w = reqs[w].queue_next
            if sort_queue:
                reorder_wait_queue(inst, i, reqs, sched_weights, sort_ids, sort_keys, sort_tmp_ids, sort_tmp_keys)
            n_prefill, n_decode, _pre = form_batch(inst, i, t, batch, work, context, reqs, blocks, slots,
                                                   req_blocks, keys, bs, prefix_caching, victim_kind, prio_params)
            if inst[i].batch_len == 0:
                if inst[i].wq_len > 0:
                    status = STATUS_STALL
                    err_inst = i
                    break
                continue  # an empty batch never steps
            dt = step_duration_us(inst, i, roofline, batch, work, context, reqs, n_prefill, n_decode)
            step_log[steps, STEP_LOG_INSTANCE] = i
            step_log[steps, STEP_LOG_DT] = dt
            inst[i].steps += 1
            inst[i].busy_us += dt
            inst[i].sum_wq_len += wq_at_start
            inst[i].sum_batch_len += inst[i].batch_len
            inst[i].prefill_tokens += n_prefill
            inst[i].decode_tokens += n_decode
            n_irr, n_done = execute_step(inst, i, t, dt, steps, compat, batch, work, reqs, blocks, req_blocks,
                                         irr_log, n_irr, done_buf)
            steps += 1
            for d in range(n_done):  # closed loop: a completion releases the next turn / call
                nxt = reqs[done_buf[d]].next_request
                if nxt >= 0:
                    ta = reqs[done_buf[d]].last_token_us + reqs[done_buf[d]].follow_delay_us
                    reqs[nxt].arrival_us = ta
                    size = heap_push(h_time, h_prio, h_seq, h_req, size, ta,
                                     event_priority(EV_CLUSTER_ARRIVAL, -1), seq, nxt)
                    seq += 1
            end = t + dt
            inst[i].busy_until_us = end
            inst[i].last_step_end_us = end
            if check:
                if not kv_conserved(inst, i, blocks):
                    status = STATUS_INVARIANT_KV
                    err_inst = i
                    break
                if inst[i].batch_len > inst[i].max_num_seqs:
                    status = STATUS_INVARIANT_BATCH
                    err_inst = i
                    break
            if inst[i].batch_len > 0 or inst[i].wq_len > 0:
                size = heap_push(h_time, h_prio, h_seq, h_req, size, end,
                                 event_priority(EV_STEP, i), seq, -1)
                seq += 1
                inst[i].step_pending = 1

    stats[0].status = status
    stats[0].clock_us = clock
    stats[0].events = events
    stats[0].steps = steps
    stats[0].heap_peak = heap_peak
    stats[0].injected = injected
    stats[0].rejected = rejected
    stats[0].irregular_records = n_irr
    stats[0].error_instance = err_inst
    stats[0].error_request = err_req
    return step_log, irr_log
