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
    ADMIT_ALWAYS,
    EV_ADMISSION_DECISION,
    EV_CLUSTER_ARRIVAL,
    EV_QUEUED,
    EV_ROUTING_DECISION,
    EV_STEP,
    LAT_BLACKBOX,
    REQ_ADMITTING,
    REQ_COMPLETED,
    REQ_DROPPED,
    REQ_QUEUED,
    REQ_REJECTED,
    REQ_ROUTED,
    STATUS_CLOCK_BACKWARDS,
    STATUS_EVENT_HEAP_FULL,
    STATUS_INVARIANT_BATCH,
    STATUS_INVARIANT_KV,
    STATUS_MAX_EVENTS,
    STATUS_NO_INSTANCE,
    STATUS_OK,
    STATUS_STALL,
)
from .heap import event_kind_instance, event_priority, heap_pop, heap_push
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
def execute_step(inst, i, now, dt, compat, batch, work, reqs, blocks, req_blocks, itl_value, itl_count, itl_inst,
                 n_itl):
    """Apply a step of duration ``dt`` that started at ``now`` (SEMANTICS §3.4-5): advance
    prefill chunks, emit tokens at step end + a2, complete requests and free their KV.

    ITL samples are the gaps between a request's consecutive token times; in ``compat``
    mode they follow the reference instead (SEMANTICS §11): step + a2 per token, plus one
    more at completion.  Samples go to the ITL log as (value µs, count, instance) rows: one
    row per step for the common value, one row per other sample.  Returns the log length.
    """
    end = now + dt
    a2 = output_token_delay_us(inst[i].alpha2)
    token_us = end + a2
    common = dt + a2 if compat else dt  # the sample of a request that also ran last step
    n_common = 0
    write = 0
    for k in range(inst[i].batch_len):
        r = batch[i, k]
        n = work[k]
        if n > 0:
            reqs[r].computed += n
            if reqs[r].computed >= reqs[r].prefill_target:
                # prefill finished (first or recomputed) or a decode: one new output token
                if reqs[r].first_token_us < 0:
                    reqs[r].first_token_us = token_us
                else:
                    sample = common if compat else token_us - reqs[r].last_token_us
                    reqs[r].itl_sum_us += sample
                    if sample == common:
                        n_common += 1
                    else:
                        itl_value[n_itl] = sample
                        itl_count[n_itl] = 1
                        itl_inst[n_itl] = i
                        n_itl += 1
                reqs[r].last_token_us = token_us
                reqs[r].last_step_us = dt
                reqs[r].generated += 1
                if reqs[r].generated >= reqs[r].output_len:
                    if compat:  # the reference's extra sample at completion
                        reqs[r].itl_sum_us += common
                        n_common += 1
                    kv_release(inst, i, blocks, reqs, r, req_blocks)
                    reqs[r].state = REQ_COMPLETED
                    inst[i].completed += 1
                    continue
        batch[i, write] = r
        write += 1
    inst[i].batch_len = write
    if n_common > 0:
        itl_value[n_itl] = common
        itl_count[n_itl] = n_common
        itl_inst[n_itl] = i
        n_itl += 1
    return n_itl


@kernel
def _grow(a, n_used):
    """Return a copy of ``a`` with twice the capacity (first n_used rows kept)."""
    b = np.empty(max(2 * a.shape[0], 1024), a.dtype)
    b[:n_used] = a[:n_used]
    return b


@kernel
def simulate_cluster(sim, reqs, arrival_order, keys, req_blocks, inst, batch, work, context, blocks, slots,
                     heap, roofline, itl_value, itl_count, itl_inst, stats):
    """Run the whole simulation.  Mutates reqs, inst, batch, blocks, slots, heap, stats.

    Returns the (possibly regrown) ITL log arrays; ``stats[0].itl_records`` rows are used.
    """
    horizon = sim[0].horizon_us
    bs = sim[0].block_size
    prefix_caching = sim[0].prefix_caching != 0
    compat = sim[0].compat != 0
    check = sim[0].check_invariants != 0
    max_events = sim[0].max_events
    h_time = heap["time_us"]
    h_prio = heap["priority"]
    h_seq = heap["seq"]
    h_req = heap["request"]
    n_inst = inst.shape[0]
    n_arr = arrival_order.shape[0]

    size = 0
    seq = np.int64(0)
    clock = np.int64(0)
    ap = 0  # next arrival in arrival_order
    rr_next = 0  # round-robin cursor
    n_itl = np.int64(0)
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
                admit = True
                if sim[0].admission_kind != ADMIT_ALWAYS:
                    admit = False
                if not admit:
                    reqs[r].state = REQ_REJECTED
                    rejected += 1
                    continue
                size = heap_push(h_time, h_prio, h_seq, h_req, size, t + sim[0].routing_latency_us,
                                 event_priority(EV_ROUTING_DECISION, -1), seq, r)
                seq += 1
            else:  # EV_ROUTING_DECISION: round-robin over active instances
                target = -1
                for _ in range(n_inst):
                    cand = rr_next
                    rr_next = (rr_next + 1) % n_inst
                    if inst[cand].active != 0:
                        target = cand
                        break
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
            # the ITL log needs at most batch + 1 rows for this step
            if n_itl + inst[i].max_num_seqs + 1 > itl_value.shape[0]:
                itl_value = _grow(itl_value, n_itl)
                itl_count = _grow(itl_count, n_itl)
                itl_inst = _grow(itl_inst, n_itl)
            n_prefill, n_decode, _pre = form_batch(inst, i, t, batch, work, context, reqs, blocks, slots,
                                                   req_blocks, keys, bs, prefix_caching)
            if inst[i].batch_len == 0:
                if inst[i].wq_len > 0:
                    status = STATUS_STALL
                    err_inst = i
                    break
                continue  # an empty batch never steps
            dt = step_duration_us(inst, i, roofline, batch, work, context, reqs, n_prefill, n_decode)
            steps += 1
            inst[i].steps += 1
            inst[i].busy_us += dt
            inst[i].sum_wq_len += wq_at_start
            inst[i].sum_batch_len += inst[i].batch_len
            inst[i].prefill_tokens += n_prefill
            inst[i].decode_tokens += n_decode
            n_itl = execute_step(inst, i, t, dt, compat, batch, work, reqs, blocks, req_blocks,
                                 itl_value, itl_count, itl_inst, n_itl)
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
    stats[0].itl_records = n_itl
    stats[0].error_instance = err_inst
    stats[0].error_request = err_req
    return itl_value, itl_count, itl_inst
