"""Joining an instance's wait queue: the one way a request enters it from outside the
instance (after its queueing overhead, or after its KV arrived by transfer).
"""

import numpy as np

from ..jit import helper
from ..schema import InstanceEvent, RequestState
from ..structs.dlist import dl_push_back
from .events import event_priority, push_event


@helper
def join_wait_queue(st, i, r, t):
    """Request r enters instance i's wait queue at time t; an idle instance gets a Step at
    max(t, end of its last step) -- at t in compat mode."""
    reqs = st.reqs
    inst = st.inst
    reqs[r]["state"] = RequestState.QUEUED
    reqs[r]["queued_us"] = t
    dl_push_back(reqs["queue_prev"], reqs["queue_next"], inst["wq_head"], inst["wq_tail"], inst["wq_len"], i, r)
    if inst[i]["wq_len"] > inst[i]["wq_peak"]:
        inst[i]["wq_peak"] = inst[i]["wq_len"]
    ensure_step(st, i, t)


@helper
def ensure_step(st, i, t):
    """Give instance i a Step at max(t, end of its last step) -- at t in compat mode --
    unless it has one pending."""
    inst = st.inst
    if inst[i]["step_pending"] == 0:
        start = t
        if st.settings[0]["compat"] == 0 and inst[i]["busy_until_us"] > t:
            start = inst[i]["busy_until_us"]  # the instance is still running a step
        push_event(st, start, event_priority(InstanceEvent.STEP, i), np.int64(-1))
        inst[i]["step_pending"] = 1
