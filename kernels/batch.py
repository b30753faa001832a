"""Wait queue, preemption and batch formation of one instance (SEMANTICS §3-4).

The wait queue is a doubly linked list threaded through the request table
(``queue_prev``/``queue_next``), so an instance's queue can hold any number of requests
without a per-instance buffer.  The running batch of instance ``i`` is
``batch[i, :inst[i].batch_len]`` in admission order.
"""

import numpy as np
from .jit import helper, kernel

from .dtypes import REQ_QUEUED, REQ_RUNNING
from .kvcache import kv_admit, kv_grow, kv_release

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
def preempt_last(inst, i, batch, reqs, blocks, req_blocks):
    """Preempt the last request of instance i's batch (recompute semantics, SEMANTICS §4):
    release its blocks, reset its progress, put it at the head of the wait queue.
    Returns the victim's id."""
    k = inst[i].batch_len - 1
    v = batch[i, k]
    inst[i].batch_len = k
    kv_release(inst, i, blocks, reqs, v, req_blocks)
    reqs[v].computed = 0
    reqs[v].state = REQ_QUEUED
    reqs[v].preemptions += 1
    inst[i].preemptions += 1
    wq_push_front(inst, i, reqs, v)
    return v


# ----------------------------------------------------------------------------- batch formation


@helper
def form_batch(inst, i, now, batch, work, context, reqs, blocks, slots, req_blocks, keys, bs, prefix_caching):
    """Form instance i's batch for a step starting at ``now`` (SEMANTICS §3.2).

    Pass A gives running requests their next chunk / decode token in batch order,
    preempting from the tail when KV runs out; pass B admits from the wait-queue head
    (strict head-of-line) unless a preemption happened.  Writes ``work[k]`` (tokens to
    compute for batch slot k, 0 = none this step) and ``context[k]`` (tokens already in
    KV).  Returns (prefill tokens P, decode requests D, preempted?).
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
            victim = preempt_last(inst, i, batch, reqs, blocks, req_blocks)
            preempted = True
            if victim == r:
                break
        if not ok:
            break  # r itself was the last request and left the batch
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
