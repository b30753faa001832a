"""Sending a request to an instance and joining its wait queue: the one way a request
enters an instance from outside (after the routing decision and the instance's queueing
overhead).
"""

import numpy as np

from ..jit import helper
from ..latency.steptime import queueing_delay_us
from ..schema import InstanceEvent, RequestState
from ..structs.dlist import dl_push_back
from .events import event_priority, push_event, push_event_with, request_epoch


@helper
def send_to_instance(st, i, r, t):
    """Request row r, routed to instance i at time t: its Queued event follows after the
    instance's queueing overhead trunc(α0 + α1·L)."""
    reqs = st.reqs
    inst = st.inst
    reqs[r]["instance"] = i
    reqs[r]["routed_us"] = t
    reqs[r]["state"] = RequestState.ROUTED
    inst[i]["routed_pending"] += 1
    q = queueing_delay_us(inst[i]["alpha0"], inst[i]["alpha1"], reqs[r]["prompt_len"])
    push_event_with(st, t + q, event_priority(InstanceEvent.QUEUED, i), r, request_epoch(st, r))


@helper
def join_wait_queue(st, i, r, t):
    """Request r enters instance i's wait queue at time t; an idle instance gets a Step at
    max(t, end of its last step) -- at t in compat mode."""
    reqs = st.reqs
    inst = st.inst
    reqs[r]["state"] = RequestState.QUEUED
    if reqs[r]["queued_us"] < 0:  # (its first entry: a request a draining instance sent back keeps it)
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
