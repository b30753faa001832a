"""A binary min-heap of events over an EVENT_DT table, ordered by (time, priority, seq).

``seq`` is an ever-increasing insertion counter, so the order is total and does not
depend on how the heap happens to be laid out.  The sift loops move the five columns as
plain integers and never copy a record through a temporary; a record is 32 bytes (the two
payload values are int32, schema/tables.py says their ranges), two to a cache line.  Sizes are passed in and
returned: the heap does not know where its size is kept (engine/events.py keeps it in
the loop record).
"""

import numpy as np

from ..jit import helper


@helper
def event_before(ta, pa, sa, tb, pb, sb):
    """True if event (ta, pa, sa) orders before (tb, pb, sb): time, then priority, then seq."""
    if ta != tb:
        return ta < tb
    if pa != pb:
        return pa < pb
    return sa < sb


@helper
def heap_push(heap, size, t, p, s, r, a2):
    """Insert event (time t, priority p, seq s, request r, second payload a2) into a heap
    of ``size`` entries; returns the new size, or -1 if the table is full (nothing changes
    then).  r and a2 are stored as int32 (EVENT_DT: both lie in [-2^31, 2^31))."""
    time = heap["time_us"]
    prio = heap["priority"]
    seq = heap["seq"]
    req = heap["request"]
    arg2 = heap["arg2"]
    if size >= time.shape[0]:
        return np.int64(-1)
    i = size
    while i > 0:  # sift up: move parents down into the hole until the new key fits
        parent = (i - 1) >> 1
        if event_before(time[parent], prio[parent], seq[parent], t, p, s):
            break
        time[i] = time[parent]
        prio[i] = prio[parent]
        seq[i] = seq[parent]
        req[i] = req[parent]
        arg2[i] = arg2[parent]
        i = parent
    time[i] = t
    prio[i] = p
    seq[i] = s
    req[i] = r
    arg2[i] = a2
    return np.int64(size + 1)


@helper
def heap_pop(heap, size):
    """Remove the minimum of a heap of ``size`` > 0 entries; returns (new size, time,
    priority, seq, request, second payload), all int64."""
    time = heap["time_us"]
    prio = heap["priority"]
    seq = heap["seq"]
    req = heap["request"]
    arg2 = heap["arg2"]
    t0 = time[0]
    p0 = prio[0]
    s0 = seq[0]
    r0 = np.int64(req[0])
    a0 = np.int64(arg2[0])
    size -= 1
    if size > 0:  # sift the last entry down from the root through the hole
        t = time[size]
        p = prio[size]
        s = seq[size]
        r = req[size]
        a = arg2[size]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= size:
                break
            if child + 1 < size and event_before(time[child + 1], prio[child + 1], seq[child + 1],
                                                 time[child], prio[child], seq[child]):
                child += 1
            if event_before(t, p, s, time[child], prio[child], seq[child]):
                break
            time[i] = time[child]
            prio[i] = prio[child]
            seq[i] = seq[child]
            req[i] = req[child]
            arg2[i] = arg2[child]
            i = child
        time[i] = t
        prio[i] = p
        seq[i] = s
        req[i] = r
        arg2[i] = a
    return size, t0, p0, s0, r0, a0
