"""The event heap: a binary min-heap over an EVENT_DT table, keyed by (time, priority, seq).

``seq`` is an ever-increasing insertion counter, so the order is total and independent of
how the heap happens to be laid out (SEMANTICS §1, STYLE §5).  Functions take the four
column views of the table (``time, prio, seq, req``) so the sift loops move plain integers
and never copy records through a temporary (STYLE §8).
"""

import numpy as np
from .jit import helper

from .dtypes import N_CLUSTER_KINDS, N_INSTANCE_KINDS


@helper
def event_priority(kind, instance):
    """Tie-break rank of an event: cluster kinds (instance < 0) first, then instance 0's
    kinds, instance 1's, ... (SEMANTICS §1)."""
    if instance < 0:
        return np.int64(kind)
    return np.int64(N_CLUSTER_KINDS + instance * N_INSTANCE_KINDS + kind)


@helper
def event_kind_instance(priority):
    """Inverse of event_priority: (kind, instance), instance = -1 for cluster events."""
    if priority < N_CLUSTER_KINDS:
        return priority, np.int64(-1)
    p = priority - N_CLUSTER_KINDS
    return p % N_INSTANCE_KINDS, p // N_INSTANCE_KINDS


@helper
def _less(time, prio, seq, a, b):
    """True if heap slot a orders before slot b."""
    if time[a] != time[b]:
        return time[a] < time[b]
    if prio[a] != prio[b]:
        return prio[a] < prio[b]
    return seq[a] < seq[b]


@helper
def heap_push(time, prio, seq, req, size, t, p, s, r):
    """Insert event (t, p, s, r) into a heap of ``size`` entries; returns the new size, or
    -1 if the table is full.  Mutates the four columns."""
    if size >= time.shape[0]:
        return -1
    i = size
    # sift up: move parents down into the hole until the new key fits
    while i > 0:
        parent = (i - 1) >> 1
        pt = time[parent]
        if pt < t or (pt == t and (prio[parent] < p or (prio[parent] == p and seq[parent] < s))):
            break
        time[i] = pt
        prio[i] = prio[parent]
        seq[i] = seq[parent]
        req[i] = req[parent]
        i = parent
    time[i] = t
    prio[i] = p
    seq[i] = s
    req[i] = r
    return size + 1


@helper
def heap_pop(time, prio, seq, req, size):
    """Remove the minimum; returns (new_size, time, prio, seq, req).  ``size`` must be > 0."""
    t0 = time[0]
    p0 = prio[0]
    s0 = seq[0]
    r0 = req[0]
    size -= 1
    if size > 0:
        # sift the last entry down from the root through the hole
        t = time[size]
        p = prio[size]
        s = seq[size]
        r = req[size]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= size:
                break
            if child + 1 < size and _less(time, prio, seq, child + 1, child):
                child += 1
            ct = time[child]
            if t < ct or (t == ct and (p < prio[child] or (p == prio[child] and s < seq[child]))):
                break
            time[i] = ct
            prio[i] = prio[child]
            seq[i] = seq[child]
            req[i] = req[child]
            i = child
        time[i] = t
        prio[i] = p
        seq[i] = s
        req[i] = r
    return size, t0, p0, s0, r0
