"""Reference for kernels/policies/: the control-policy templates of docs/policies.md written
out literally -- token buckets, the router's snapshot and routing scorers, request
priority, the wait-queue sort and the preemption victim.

Floating-point expressions are written in the order docs/policies.md gives them, which is
also the kernels' order, so exact ties compare equal on both sides."""

from __future__ import annotations

# ----------------------------------------------------------------------------- admission


class NaiveTokenBuckets:
    """One token bucket per tenant: starts full (C); at a decision refills elapsed·R/1e6
    up to C; admits iff tokens >= cost, then spends them."""

    def __init__(self, capacity: float, refill_per_s: float):
        self.capacity = capacity
        self.rate = refill_per_s
        self.tokens: dict[int, float] = {}
        self.last: dict[int, int] = {}

    def admit(self, tenant: int, cost: int, now: int) -> bool:
        tokens = self.tokens.get(tenant, self.capacity) + (now - self.last.get(tenant, 0)) * self.rate / 1e6
        tokens = min(tokens, self.capacity)
        self.last[tenant] = now
        ok = tokens >= cost
        self.tokens[tenant] = tokens - cost if ok else tokens
        return ok


# ----------------------------------------------------------------------------- router snapshot

SNAP_FIELDS = ("queue_depth", "batch_size", "kv_utilization", "free_kv_blocks", "cache_hit_rate", "pending",
               "in_flight")


def naive_snapshot_row(inst_row) -> dict[str, float]:
    """Every snapshot field of one instance-table row, live."""
    virgin = int(inst_row["kv_offset"]) + int(inst_row["kv_total"]) - int(inst_row["kv_virgin_next"])
    q = int(inst_row["prefix_query_tokens"])
    return {
        "queue_depth": float(inst_row["wq_len"]),
        "batch_size": float(inst_row["batch_len"]),
        "kv_utilization": int(inst_row["kv_allocated"]) / int(inst_row["kv_total"]),
        "free_kv_blocks": float(virgin + int(inst_row["free_len"])),
        "cache_hit_rate": int(inst_row["prefix_hit_tokens"]) / q if q > 0 else 0.0,
        "pending": float(inst_row["routed_pending"]),
        "in_flight": float(int(inst_row["routed_pending"]) + int(inst_row["wq_len"]) + int(inst_row["batch_len"])),
    }


class NaiveSnapshot:
    """The router's view: field f of every instance is re-read at a decision when its
    interval (µs; 0 = live) has elapsed since its last refresh, or it was never read."""

    def __init__(self, n_inst: int, intervals):
        self.intervals = list(intervals)
        self.view = [{f: 0.0 for f in SNAP_FIELDS} for _ in range(n_inst)]
        self.refreshed: dict[str, int] = {}

    def refresh(self, inst, now: int) -> None:
        for f, iv in zip(SNAP_FIELDS, self.intervals, strict=True):
            last = self.refreshed.get(f)
            if iv > 0 and last is not None and now - last < iv:
                continue
            self.refreshed[f] = now
            for i in range(len(inst)):
                self.view[i][f] = naive_snapshot_row(inst[i])[f]


# ----------------------------------------------------------------------------- routing

ROUTING = ("round-robin", "least-loaded", "weighted", "prefix-affinity", "always-busiest")
SCORERS = ("queue-depth", "kv-utilization", "load-balance", "prefix-affinity")


def _clamp01(x: float) -> float:
    return min(max(x, 0.0), 1.0)


def naive_route(policy: str, weights, active, view, affinity, n_keys: int, rr_next: int):
    """(chosen instance or -1, next round-robin cursor).  ``view[i]`` is instance i's
    snapshot dict; ``weights`` are the weighted scorers' weights in SCORERS order."""
    n = len(active)
    cands = [i for i in range(n) if active[i]]
    if policy == "round-robin":
        for k in range(n):
            i = (rr_next + k) % n
            if active[i]:
                return i, (i + 1) % n
        return -1, rr_next
    if not cands:
        return -1, rr_next

    def load(i):
        return view[i]["queue_depth"] + view[i]["batch_size"] + view[i]["pending"]

    def best(score):  # argmax, ties -> lowest index
        return max(cands, key=lambda i: (score(i), -i))

    if policy == "prefix-affinity":
        if any(affinity[i] > 0 for i in cands):
            return best(lambda i: affinity[i]), rr_next
        policy = "least-loaded"
    if policy == "least-loaded":
        return best(lambda i: -load(i)), rr_next
    if policy == "always-busiest":
        return best(load), rr_next
    assert policy == "weighted"
    hi = max(load(i) for i in cands)
    lo = min(load(i) for i in cands)
    w_qd, w_kv, w_lb, w_pa = weights
    total = w_qd + w_kv + w_lb + w_pa

    def score(i):
        qd = (hi - load(i)) / (hi - lo) if hi > lo else 1.0
        kv = 1.0 - view[i]["kv_utilization"]
        lb = 1.0 / (1.0 + load(i))
        pa = affinity[i] / n_keys if n_keys > 0 else 0.0
        s = w_qd * _clamp01(qd) + w_kv * _clamp01(kv) + w_lb * _clamp01(lb) + w_pa * _clamp01(pa)
        return s / total if total > 0 else s

    return best(score), rr_next


# ----------------------------------------------------------------------------- priority, scheduler, victim


def naive_priority(age_weight: float, class_weights, arrival_us: int, slo_class: int, now: int) -> float:
    """age_weight·(now − arrival) + the weight of the request's SLO class (0 for a class
    without a weight)."""
    p = age_weight * (now - arrival_us)
    if 0 <= slo_class < len(class_weights):
        p += class_weights[slo_class]
    return p


def naive_queue_order(queue, weights, priority, arrival, prompt_len, output_len) -> list[int]:
    """The wait queue (request ids) stably sorted ascending by Σ weights·(priority,
    arrival, prompt length, output length), ties by (arrival, id)."""
    w0, w1, w2, w3 = weights

    def key(r):
        k = w0 * priority[r] + w1 * arrival[r] + w2 * prompt_len[r] + w3 * output_len[r]
        return (k, arrival[r], r)

    return sorted(queue, key=key)


def naive_victim(kind: str, priorities) -> int:
    """Batch slot to preempt: the last, or the lowest priority (ties -> the later slot)."""
    n = len(priorities)
    if kind == "last":
        return n - 1
    return min(range(n), key=lambda k: (priorities[k], -k))
