"""Control policies as data (SEMANTICS §8): admission, routing, priority, queue order,
preemption victim.

Every policy is a kind code (``kernels.dtypes``) plus a float64 parameter vector compiled
by ``blis_fast.policy``; the kernels branch on the kind and read the vector, so a new
candidate policy costs no compilation and cannot escape the simulation.  Ties are always
broken by the lowest instance index (routing) or by (arrival, request id) (ordering).
"""

import numpy as np

from .dtypes import (
    ADMIT_REJECT_ALL,
    ADMIT_TOKEN_BUCKET,
    AP_CAPACITY,
    AP_REFILL_PER_S,
    N_SNAP,
    PRIO_AGE_WEIGHT,
    PRIO_CLASS_WEIGHTS,
    ROUTE_ALWAYS_BUSIEST,
    ROUTE_LEAST_LOADED,
    ROUTE_PREFIX_AFFINITY,
    ROUTE_ROUND_ROBIN,
    RW_KV_UTILIZATION,
    RW_LOAD_BALANCE,
    RW_PREFIX_AFFINITY,
    RW_QUEUE_DEPTH,
    SNAP_BATCH_SIZE,
    SNAP_CACHE_HIT_RATE,
    SNAP_FREE_BLOCKS,
    SNAP_KV_UTILIZATION,
    SNAP_PENDING,
    SNAP_QUEUE_DEPTH,
    SW_ARRIVAL,
    SW_OUTPUT_LEN,
    SW_PRIORITY,
    SW_PROMPT_LEN,
)
from .jit import helper
from .kvcache import kv_free_blocks

# ----------------------------------------------------------------------------- admission


@helper
def admit(kind, params, tb_tokens, tb_last_us, tenant, cost, now):
    """Admission decision for a request of ``cost`` prompt tokens from ``tenant`` at ``now``.
    Token bucket (per tenant): starts full, refills elapsed·R/1e6 up to the capacity,
    admits iff tokens >= cost and then spends them.  Mutates tb_tokens, tb_last_us."""
    if kind == ADMIT_REJECT_ALL:
        return False
    if kind == ADMIT_TOKEN_BUCKET:
        cap = params[AP_CAPACITY]
        tokens = tb_tokens[tenant] + (now - tb_last_us[tenant]) * params[AP_REFILL_PER_S] / 1e6
        if tokens > cap:
            tokens = cap
        tb_last_us[tenant] = now
        if tokens >= cost:
            tb_tokens[tenant] = tokens - cost
            return True
        tb_tokens[tenant] = tokens
        return False
    return True


# ----------------------------------------------------------------------------- priority


@helper
def request_priority(params, arrival_us, slo_class, now):
    """Priority of a request (higher = more urgent): age weight · (now − arrival) plus its
    SLO class's weight.  constant = all zeros; slo-based = +1e-6 per µs of age;
    inverted-slo = −1e-6."""
    p = params[PRIO_AGE_WEIGHT] * (now - arrival_us)
    j = PRIO_CLASS_WEIGHTS + slo_class
    if slo_class >= 0 and j < params.shape[0]:
        p += params[j]
    return p


# ----------------------------------------------------------------------------- queue order


@helper
def _sort_key(weights, reqs, r):
    return (weights[SW_PRIORITY] * reqs[r].priority + weights[SW_ARRIVAL] * reqs[r].arrival_us
            + weights[SW_PROMPT_LEN] * reqs[r].prompt_len + weights[SW_OUTPUT_LEN] * reqs[r].output_len)


@helper
def _before(ka, kb, reqs, a, b):
    """Order of the scheduler: key ascending, then arrival, then request id."""
    if ka != kb:
        return ka < kb
    if reqs[a].arrival_us != reqs[b].arrival_us:
        return reqs[a].arrival_us < reqs[b].arrival_us
    return a < b


@helper
def reorder_wait_queue(inst, i, reqs, weights, ids, keys, tmp_ids, tmp_keys):
    """Stable-sort instance i's wait queue by Σ weights·(priority, arrival, prompt length,
    output length), ties by (arrival, id): a bottom-up merge sort over scratch arrays,
    then the linked list is rebuilt in that order."""
    n = inst[i].wq_len
    if n < 2:
        return
    r = inst[i].wq_head
    for k in range(n):
        ids[k] = r
        keys[k] = _sort_key(weights, reqs, r)
        r = reqs[r].queue_next
    width = 1
    src_ids, src_keys, dst_ids, dst_keys = ids, keys, tmp_ids, tmp_keys
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            a, b, o = lo, mid, lo
            while a < mid and b < hi:
                if _before(src_keys[b], src_keys[a], reqs, src_ids[b], src_ids[a]):
                    dst_ids[o] = src_ids[b]
                    dst_keys[o] = src_keys[b]
                    b += 1
                else:
                    dst_ids[o] = src_ids[a]
                    dst_keys[o] = src_keys[a]
                    a += 1
                o += 1
            while a < mid:
                dst_ids[o] = src_ids[a]
                dst_keys[o] = src_keys[a]
                a += 1
                o += 1
            while b < hi:
                dst_ids[o] = src_ids[b]
                dst_keys[o] = src_keys[b]
                b += 1
                o += 1
            lo = hi
        src_ids, src_keys, dst_ids, dst_keys = dst_ids, dst_keys, src_ids, src_keys
        width *= 2
    prev = np.int64(-1)
    for k in range(n):
        r = src_ids[k]
        reqs[r].queue_prev = prev
        reqs[r].queue_next = -1
        if prev >= 0:
            reqs[prev].queue_next = r
        else:
            inst[i].wq_head = r
        prev = r
    inst[i].wq_tail = prev


# ----------------------------------------------------------------------------- router snapshot


@helper
def refresh_snapshot(inst, snap, refreshed_us, interval_us, now):
    """Bring each snapshot field up to date if its refresh interval has elapsed (interval 0
    = always live).  snap[i, f] holds field f of instance i as the router sees it."""
    for f in range(N_SNAP):
        if interval_us[f] > 0 and refreshed_us[f] >= 0 and now - refreshed_us[f] < interval_us[f]:
            continue
        refreshed_us[f] = now
        for i in range(inst.shape[0]):
            if f == SNAP_QUEUE_DEPTH:
                v = np.float64(inst[i].wq_len)
            elif f == SNAP_BATCH_SIZE:
                v = np.float64(inst[i].batch_len)
            elif f == SNAP_KV_UTILIZATION:
                v = inst[i].kv_allocated / inst[i].kv_total
            elif f == SNAP_FREE_BLOCKS:
                v = np.float64(kv_free_blocks(inst, i))
            elif f == SNAP_CACHE_HIT_RATE:
                q = inst[i].prefix_query_tokens
                v = inst[i].prefix_hit_tokens / q if q > 0 else 0.0
            elif f == SNAP_PENDING:
                v = np.float64(inst[i].routed_pending)
            else:  # SNAP_IN_FLIGHT
                v = np.float64(inst[i].routed_pending + inst[i].wq_len + inst[i].batch_len)
            snap[i, f] = v


@helper
def _load(snap, i):
    """Effective load the router sees: queue depth + batch size + pending."""
    return snap[i, SNAP_QUEUE_DEPTH] + snap[i, SNAP_BATCH_SIZE] + snap[i, SNAP_PENDING]


@helper
def _clamp01(x):
    if x < 0.0:
        return 0.0
    if x > 1.0:
        return 1.0
    return x


@helper
def choose_instance(kind, weights, inst, snap, affinity, n_keys, rr_next):
    """The routing decision: (instance, new round-robin cursor); -1 if none is active.

    round-robin; least-loaded (min effective load); always-busiest (max); weighted
    (argmax Σ w·clamp01(scorer), weights normalized: queue-depth (max−load)/(max−min),
    kv-utilization 1 − util, load-balance 1/(1+load), prefix-affinity matched leading
    blocks / request blocks); prefix-affinity (most matched blocks, else least-loaded).
    Ties go to the lowest index.
    """
    n_inst = inst.shape[0]
    if kind == ROUTE_ROUND_ROBIN:
        for _ in range(n_inst):
            cand = rr_next
            rr_next = (rr_next + 1) % n_inst
            if inst[cand].active != 0:
                return cand, rr_next
        return np.int64(-1), rr_next
    if kind == ROUTE_PREFIX_AFFINITY:
        best = np.int64(-1)
        for i in range(n_inst):
            if inst[i].active != 0 and affinity[i] > 0 and (best < 0 or affinity[i] > affinity[best]):
                best = i
        if best >= 0:
            return best, rr_next
        kind = ROUTE_LEAST_LOADED
    lo = np.inf
    hi = -np.inf
    for i in range(n_inst):
        if inst[i].active != 0:
            x = _load(snap, i)
            lo = min(lo, x)
            hi = max(hi, x)
    best = np.int64(-1)
    best_score = -np.inf
    total_w = (weights[RW_QUEUE_DEPTH] + weights[RW_KV_UTILIZATION] + weights[RW_LOAD_BALANCE]
               + weights[RW_PREFIX_AFFINITY])
    for i in range(n_inst):
        if inst[i].active == 0:
            continue
        load = _load(snap, i)
        if kind == ROUTE_LEAST_LOADED:
            score = -load
        elif kind == ROUTE_ALWAYS_BUSIEST:
            score = load
        else:  # ROUTE_WEIGHTED
            qd = (hi - load) / (hi - lo) if hi > lo else 1.0
            kv = 1.0 - snap[i, SNAP_KV_UTILIZATION]
            lb = 1.0 / (1.0 + load)
            pa = affinity[i] / n_keys if n_keys > 0 else 0.0
            score = (weights[RW_QUEUE_DEPTH] * _clamp01(qd) + weights[RW_KV_UTILIZATION] * _clamp01(kv)
                     + weights[RW_LOAD_BALANCE] * _clamp01(lb)
                     + weights[RW_PREFIX_AFFINITY] * _clamp01(pa))
            if total_w > 0:
                score /= total_w
        if score > best_score:
            best_score = score
            best = i
    return best, rr_next
