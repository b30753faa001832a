"""KV cache tiers in the event loop (docs/semantics.md §14; the tiers themselves:
kv/tiers.py): queued writes land (``tier_catch_up``), loads move over each tier's read
link by processor sharing (TIER_LINK events; structs/sharing.py, as P/D's transfer link),
and a request whose loads are done joins the instance's
received queue (LOAD_DONE)."""

import numpy as np

from ..jit import helper
from ..kv.cache import key_register, release_block
from ..kv.tiers import next_write_us, tier_insert, tier_unpin
from ..schema import N_TIERS, InstanceEvent, RequestState
from ..structs.dlist import dl_push_back, dl_remove
from ..structs.sharing import DONE_EPS_US, ps_advance, ps_next_due
from .events import event_priority, push_event_with
from .queueing import ensure_step
from .trace import tracing_schedulers

_VERSION_MASK = np.int64(0x7FFFFFFF)  # a TIER_LINK event carries its link's version in the int32 payload


# ----------------------------------------------------------------------------- writes


@helper
def _store_landed(st, i, b, q, key, t_us):
    """A store of GPU block b has landed: unpin b (freed if nobody else holds it, as a
    release would) and insert its content unless the block lost its key meanwhile (a
    preempted chunk's never-computed content, kv_forget_chunk)."""
    valid = st.blocks[b]["key_index"] == q
    release_block(st, i, b)
    if valid:
        tier_insert(st, i, np.int64(0), key, t_us)



@helper
def tier_catch_up(st, i, t):
    """Apply every queued write of instance i that has landed by t, in landing order (tier 0
    first at equal times)."""
    n = st.kv_tier_inst[i]["n_tiers"]
    tiers = st.tiers
    while True:
        best = -1
        best_us = t + 1
        for k in range(n):
            row = i * N_TIERS + k
            if tiers[row]["wr_len"] > 0:
                w = tiers[row]["wr_offset"] + tiers[row]["wr_head"]
                if st.tier_writes[w]["done_us"] < best_us:
                    best = k
                    best_us = st.tier_writes[w]["done_us"]
        if best < 0:
            return
        row = i * N_TIERS + best
        w = tiers[row]["wr_offset"] + tiers[row]["wr_head"]
        tiers[row]["wr_head"] = (tiers[row]["wr_head"] + 1) % tiers[row]["wr_cap"]
        tiers[row]["wr_len"] -= 1
        key = st.tier_writes[w]["key"]
        b = st.tier_writes[w]["block"]
        if b >= 0:
            _store_landed(st, i, b, st.tier_writes[w]["key_index"], key, best_us)
        else:
            tier_insert(st, i, best, key, best_us)



@helper
def wake_for_writes(st, i, t):
    """Instance i has work waiting for KV blocks (its wait queue, P/D transfers) and will
    not step on its own: give it a Step when its next queued write lands -- a store's GPU
    block is pinned until then, and writes land when the instance looks (tier_catch_up)."""
    due = next_write_us(st, i)
    if due >= 0:
        ensure_step(st, i, max(t, due))


# ----------------------------------------------------------------------------- loads


@helper
def start_loads(st, i, r, t):
    """Request r (its tier hits allocated and pinned) starts loading at t: one transfer per
    tier it found blocks in, on that tier's read link."""
    tr = st.tier_reqs
    tr[r]["load_start_us"] = t
    tr[r]["loads_left"] = 0
    st.kv_tier_inst[i]["loading"] += 1
    st.kv_tier_inst[i]["load_requests"] += 1
    bb = st.kv_tier_inst[i]["block_bytes"]
    jobs = st.tier_jobs
    for k in range(st.kv_tier_inst[i]["n_tiers"]):
        n = tr[r]["hit_blocks_0"] if k == 0 else tr[r]["hit_blocks_1"]
        if n == 0:
            continue
        row = i * N_TIERS + k
        tr[r]["loads_left"] += 1
        st.tiers[row]["loads"] += 1
        link_advance(st, row, t)
        x = r * N_TIERS + k
        jobs[x]["work_left_us"] = np.float64(n) * bb / st.tiers[row]["read_bytes_per_us"]
        dl_push_back(jobs["link_prev"], jobs["link_next"], st.tiers["link_head"], st.tiers["link_tail"],
                     st.tiers["link_len"], row, x)
        if st.tiers[row]["link_len"] > st.tiers[row]["link_peak"]:
            st.tiers[row]["link_peak"] = st.tiers[row]["link_len"]
        link_reschedule(st, i, k, t)


@helper
def link_advance(st, row, t):
    """Bring the remaining work of tier ``row``'s loads up to t: each of its k loads
    progressed at 1/k of the bandwidth since the last update (processor sharing)."""
    tiers = st.tiers
    ps_advance(st.tier_jobs["work_left_us"], st.tier_jobs["link_next"], tiers[row]["link_head"], tiers[row]["link_len"],
               t - tiers[row]["link_last_us"])
    tiers[row]["link_last_us"] = t


@helper
def link_reschedule(st, i, k, t):
    """Schedule tier k's next TIER_LINK event on instance i: when its load with the least
    work left finishes its data at the current share (rounded up to the µs); earlier
    events of the link become stale."""
    row = i * N_TIERS + k
    tiers = st.tiers
    tiers[row]["link_version"] += 1
    n = tiers[row]["link_len"]
    if n == 0:
        return
    due = ps_next_due(st.tier_jobs["work_left_us"], st.tier_jobs["link_next"], tiers[row]["link_head"], n, t)
    push_event_with(st, due, event_priority(InstanceEvent.TIER_LINK, i), np.int64(k),
                    tiers[row]["link_version"] & _VERSION_MASK)


@helper
def on_tier_link(st, i, k, t, version):
    """TIER_LINK event of tier k of instance i: the loads whose data is through leave the
    link (the tier's latency follows: LOAD_DONE); the others' share grows."""
    row = i * N_TIERS + k
    tiers = st.tiers
    if version != (tiers[row]["link_version"] & _VERSION_MASK):
        return  # superseded by a later reschedule
    link_advance(st, row, t)
    jobs = st.tier_jobs
    x = tiers[row]["link_head"]
    while x >= 0:
        nxt = jobs[x]["link_next"]
        if jobs[x]["work_left_us"] <= DONE_EPS_US:
            dl_remove(jobs["link_prev"], jobs["link_next"], tiers["link_head"], tiers["link_tail"], tiers["link_len"],
                      row, x)
            push_event_with(st, t + tiers[row]["latency_us"], event_priority(InstanceEvent.LOAD_DONE, i),
                            x // N_TIERS, np.int64(k))
        x = nxt
    link_reschedule(st, i, k, t)


@helper
def on_load_done(st, i, r, t):
    """One of request r's loads on instance i is done at t; when all are, its loaded blocks
    get their keys, its entries are unpinned, and it waits for a batch slot (``rx``,
    admitted before the wait queue) with every block it found computed."""
    tr = st.tier_reqs
    tr[r]["loads_left"] -= 1
    if tr[r]["loads_left"] > 0:
        return
    tier_catch_up(st, i, t)
    reqs = st.reqs
    start = reqs[r]["block_start"]
    held = reqs[r]["blocks_held"]
    block_key = st.blocks["key_index"]
    for j in range(held):
        s = st.tier_src[start + j] - 1
        if s < 0:
            continue
        st.tier_src[start + j] = 0
        tier_unpin(st, s)
        b = np.int64(st.req_blocks[start + j])
        q = reqs[r]["key_start"] + j
        if key_register(st, i, q, b):
            block_key[b] = q
    reqs[r]["computed"] = tr[r]["load_cached"]
    tr[r]["load_end_us"] = t
    tr[r]["load_wait_us"] += t - tr[r]["load_start_us"]
    if tracing_schedulers(st) and tr[r]["load_record"] >= 0:
        st.sched_log[tr[r]["load_record"]]["last_time_us"] = t
        tr[r]["load_record"] = -1
    st.kv_tier_inst[i]["loading"] -= 1
    reqs[r]["state"] = RequestState.QUEUED
    dl_push_back(reqs["queue_prev"], reqs["queue_next"], st.pd_inst["rx_head"], st.pd_inst["rx_tail"],
                 st.pd_inst["rx_len"], i, r)
    ensure_step(st, i, t)


@helper
def on_tier_event(st, kind, i, r, t, arg2):
    """The KV tier instance events (schema.InstanceEvent TIER_LINK, LOAD_DONE): one call site
    in the loop's dispatch."""
    if kind == InstanceEvent.TIER_LINK:
        on_tier_link(st, i, r, t, arg2)
    else:
        on_load_done(st, i, r, t)
