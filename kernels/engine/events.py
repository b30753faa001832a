"""Event priorities and ``push_event`` / ``push_event_with``, the one way to schedule an event.

At equal times cluster events run before instance events and a lower instance index
before a higher one; within those bands the kind order of ``schema.ClusterEvent`` and
``schema.InstanceEvent`` decides; the insertion sequence breaks the remaining ties
(docs/semantics.md §1).  All of that is one int64 priority per event.
"""

import numpy as np

from ..jit import helper
from ..schema import N_CLUSTER_KINDS, N_INSTANCE_KINDS, Status
from ..structs.heap import heap_push


@helper
def event_priority(kind, instance):
    """Tie-break rank of an event: cluster kinds (instance < 0) first, then instance 0's
    kinds, instance 1's, ..."""
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
def push_event(st, t, priority, request):
    """Schedule an event at time t (µs) with the next sequence number and no second
    payload value (``push_event_with``)."""
    push_event_with(st, t, priority, request, np.int64(0))


@helper
def push_event_with(st, t, priority, request, arg2):
    """Schedule an event at time t (µs) carrying ``request`` and ``arg2`` (the event
    record's second payload value), with the next sequence number.  A full heap sets
    Status.HEAP_FULL in the loop record (the loop stops after the current handler)."""
    lp = st.loop
    size = heap_push(st.heap, lp[0]["heap_size"], t, priority, lp[0]["seq"], request, arg2)
    lp[0]["seq"] += 1
    if size < 0:
        lp[0]["status"] = Status.HEAP_FULL
    else:
        lp[0]["heap_size"] = size


@helper
def request_epoch(st, r):
    """The tag of request r's next lifecycle event (admission, routing, Queued): its epoch
    under flow control or deadlines (engine/flow.py: an attempt that ends early bumps it,
    so its events still in the heap are stale), else 0."""
    s = st.settings
    if s[0]["flow"] == 0 and s[0]["deadlines"] == 0:
        return np.int64(0)
    return st.flow_reqs[r]["epoch"]


@helper
def stale(st, r, tag):
    """True if a lifecycle event of request r tagged ``tag`` belongs to an attempt that has
    ended (``request_epoch``)."""
    s = st.settings
    if s[0]["flow"] == 0 and s[0]["deadlines"] == 0:
        return False
    return tag != st.flow_reqs[r]["epoch"]
