"""Wait queue, preemption and batch formation of one instance (SEMANTICS §3-4).

The wait queue is a doubly linked list threaded through the request table
(``queue_prev``/``queue_next``), so an instance's queue can hold any number of requests
without a per-instance buffer.  The running batch of instance ``i`` is
``batch[i, :inst[i].batch_len]`` in admission order.
"""

import numpy as np
from .jit import helper

from .dtypes import REQ_QUEUED, REQ_RUNNING, VICTIM_LOWEST_PRIORITY
from .kvcache import kv_admit, kv_forget_chunk, kv_grow, kv_release
from .policies import request_priority

# ----------------------------------------------------------------------------- wait queue


@helper
def wq_push_back(inst, i, reqs, r):
    """Append request r to instance i's wait queue."""
    t = inst[i].wq_tail
    reqs[r].queue_prev = t
    reqs[r].queue_next = -1
    if t >= 0:
        reqs[t].queue_next = r
    else:
        inst[i].wq_head = r
    inst[i].wq_tail = r
    inst[i].wq_len += 1
    if inst[i].wq_len > inst[i].wq_peak:
        inst[i].wq_peak = inst[i].wq_len


@helper
def wq_push_front(inst, i, reqs, r):
    """Put request r at the head of instance i's wait queue (preempted requests)."""
    h = inst[i].wq_head
    reqs[r].queue_prev = -1
    reqs[r].queue_next = h
    if h >= 0:
        reqs[h].queue_prev = r
    else:
        inst[i].wq_tail = r
    inst[i].wq_head = r
    inst[i].wq_len += 1
    if inst[i].wq_len > inst[i].wq_peak:
        inst[i].wq_peak = inst[i].wq_len


@helper
def wq_pop_front(inst, i, reqs):
    """Remove and return the head of instance i's wait queue (must be non-empty)."""
    r = inst[i].wq_head
    n = reqs[r].queue_next
    inst[i].wq_head = n
    if n >= 0:
        reqs[n].queue_prev = -1
    else:
        inst[i].wq_tail = -1
    reqs[r].queue_next = -1
    inst[i].wq_len -= 1
    return r


# ----------------------------------------------------------------------------- preemption


@helper
def choose_victim(inst, i, batch, reqs, victim_kind, prio_params, now):
    """Batch slot of the request to preempt: the last one, or the lowest-priority one
    (ties -> the later slot)."""
    last = inst[i].batch_len - 1
    if victim_kind != VICTIM_LOWEST_PRIORITY:
        return last
    best = last
    best_p = np.inf
    for k in range(last, -1, -1):
        r = batch[i, k]
        p = request_priority(prio_params, reqs[r].arrival_us, reqs[r].slo_class, now)
        if p < best_p:
            best_p = p
            best = k
    return best


@helper
def preempt_slot(inst, i, j, batch, work, context, reqs, blocks, req_blocks):
    """Preempt the request in batch slot j (recompute semantics, SEMANTICS §4): release its
    blocks, reset its progress, put it at the head of the wait queue; later slots shift
    left (with their ``work``/``context``).  Returns the victim's id."""
    v = batch[i, j]
    n = inst[i].batch_len
    for k in range(j, n - 1):
        batch[i, k] = batch[i, k + 1]
        work[k] = work[k + 1]
        context[k] = context[k + 1]
    inst[i].batch_len = n - 1
    kv_release(inst, i, blocks, reqs, v, req_blocks)
    reqs[v].computed = 0
    reqs[v].state = REQ_QUEUED
    reqs[v].preemptions += 1
    inst[i].preemptions += 1
    wq_push_front(inst, i, reqs, v)
    return v


# ----------------------------------------------------------------------------- batch formation


@helper
def form_batch(inst, i, now, batch, work, context, reqs, blocks, slots, req_blocks, keys, bs, prefix_caching,
               victim_kind, prio_params):
    """Form instance i's batch for a step starting at ``now`` (SEMANTICS §3.2).

    Pass A gives running requests their next chunk / decode token in batch order,
    preempting (``choose_victim``) when KV runs out -- a victim already served this step
    gives its tokens back; pass B admits from the wait-queue head (strict head-of-line)
    unless a preemption happened.  Writes ``work[k]`` (tokens to compute for batch slot k,
    0 = none this step) and ``context[k]`` (tokens already in KV).  Returns (prefill
    tokens P, decode requests D, preempted?).
    """
    budget = inst[i].max_batched_tokens
    cap = inst[i].long_prefill_threshold
    n_prefill = np.int64(0)
    n_decode = np.int64(0)
    preempted = False

    # Pass A: running requests.
    k = 0
    while k < inst[i].batch_len:
        if budget == 0:
            break  # the rest get no work (and do not advance) this step
        r = batch[i, k]
        c = reqs[r].computed
        remaining = reqs[r].prefill_target - c
        if remaining > 0:  # chunked-prefill continuation
            n = remaining
            if cap > 0 and n > cap:
                n = cap
            if n > budget:
                n = budget
        else:  # decode: KV for one more token
            n = 1
        # fast path: a decode token that fits in the last block needs no allocation
        ok = remaining <= 0 and c < reqs[r].blocks_held * bs
        while not ok:
            if kv_grow(inst, i, blocks, slots, reqs, r, req_blocks, keys, bs, prefix_caching, n):
                ok = True
                break
            j = choose_victim(inst, i, batch, reqs, victim_kind, prio_params, now)
            if j < k:  # already served this step: give its tokens back
                v = batch[i, j]
                if prefix_caching:
                    kv_forget_chunk(inst, i, blocks, slots, reqs, v, req_blocks, context[j], work[j], bs)
                budget += work[j]
                if context[j] < reqs[v].prefill_target:
                    n_prefill -= work[j]
                else:
                    n_decode -= 1
            victim = preempt_slot(inst, i, j, batch, work, context, reqs, blocks, req_blocks)
            preempted = True
            if victim == r:
                break
            if j < k:
                k -= 1  # r moved one slot left
        if not ok:
            continue  # r left the batch; slot k now holds the next request (if any)
        work[k] = n
        context[k] = c
        budget -= n
        if remaining > 0:
            n_prefill += n
        else:
            n_decode += 1
        k += 1
    for j in range(k, inst[i].batch_len):
        work[j] = 0

    # Pass B: admissions from the head of the wait queue.
    if not preempted:
        while inst[i].wq_len > 0 and inst[i].batch_len < inst[i].max_num_seqs and budget > 0:
            r = inst[i].wq_head
            target = reqs[r].prompt_len + reqs[r].generated
            reqs[r].prefill_target = target
            n, cached = kv_admit(inst, i, blocks, slots, reqs, r, req_blocks, keys, bs, prefix_caching, budget, cap)
            if n < 0:
                break  # head-of-line: no skipping
            wq_pop_front(inst, i, reqs)
            k = inst[i].batch_len
            batch[i, k] = r
            inst[i].batch_len = k + 1
            work[k] = n
            context[k] = cached
            reqs[r].state = REQ_RUNNING
            if reqs[r].first_scheduled_us < 0:
                reqs[r].first_scheduled_us = now
                reqs[r].cached_tokens = cached
            inst[i].prefix_query_tokens += target
            inst[i].prefix_hit_tokens += cached
            budget -= n
            n_prefill += n
    if inst[i].batch_len > inst[i].batch_peak:
        inst[i].batch_peak = inst[i].batch_len
    return n_prefill, n_decode, preempted
