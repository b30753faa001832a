"""KV cache tiers beyond the GPU: CPU memory and local disk (docs/semantics.md §14).

Each instance may have up to ``N_TIERS`` tiers (``KV_TIER_INST_DT.n_tiers``; tier 0 is the
first beyond the GPU).  A tier holds block *contents*, named by their key value: an entry
per key, at most once, evicted least recently used first.  Only shared keys (a value that
occurs at another position of the workload: content another request can ask for) are
stored -- an unshared key is only ever looked up by its own request after a preemption,
and leaving it out keeps the tiers identical with event skipping on or off (kv/cache.py
defers unshared keys).

    store     a GPU block that gets its key (kv_grow) is copied to tier 0 when its store
              mode takes it (all, or prompt blocks only); the copy waits in tier 0's writer
              queue (FIFO: one device-to-host stream) and takes block bytes / write
              bandwidth; the GPU block is pinned (one more reference) until it has landed,
              and the entry is visible from then.
    demote    an entry evicted from tier k to make room goes to tier k + 1's writer (its
              content leaves tier k at once and is found nowhere until the write lands).
    find      kv/cache.py kv_admit: the chain of the request's leading keys continues past
              a GPU miss into tier 0, then tier 1, and stops at the first key found nowhere.
    load      the blocks found in tier k are allocated on the GPU and loaded over tier k's
              read link: one transfer per request and tier; transfers on one link share its
              bandwidth by processor sharing; each takes the tier's latency after its data.
              The request waits (RequestState.LOADING, its blocks held outside the batch) and
              is then admitted before the wait queue with the loaded tokens computed
              (engine/step.py admit_received).  ``load: step`` instead charges the load time
              (latency + bytes / bandwidth per tier, no contention) to the admitting step.

This module holds the tiers' entries and writers; kv/cache.py finds and attaches tier hits
at admission, engine/tiers.py moves loads over the links and applies landed writes.
Writes land lazily: ``tier_catch_up(st, i, t)`` (engine/tiers.py) applies every queued write of instance i
that has landed by t, in landing order, and runs before anything reads or changes the
tiers at t (a step of the instance, a load's end).  Entries being loaded are pinned (out
of the LRU list) until their request's load is done.
"""

import math

import numpy as np

from ..jit import helper, kernel
from ..schema import N_TIERS
from ..structs.dlist import dl_push_back, dl_remove
from ..structs.hashtable import table_delete_at, table_find, table_probe


# ----------------------------------------------------------------------------- entries


@helper
def tier_find(st, row, key):
    """Entry of tier ``row`` holding block key value ``key``, or -1."""
    t = st.tiers[row]
    off = t["ht_offset"]
    h = table_find(st.tier_table, off, t["ht_mask"], key)
    if h < 0:
        return np.int64(-1)
    return st.tier_table[off + h, 1] - 1


@helper
def _lru_push(st, row, s):
    dl_push_back(st.tier_slots["lru_prev"], st.tier_slots["lru_next"], st.tiers["lru_head"], st.tiers["lru_tail"],
                 st.tiers["lru_len"], row, s)


@helper
def _lru_remove(st, row, s):
    dl_remove(st.tier_slots["lru_prev"], st.tier_slots["lru_next"], st.tiers["lru_head"], st.tiers["lru_tail"],
              st.tiers["lru_len"], row, s)


@helper
def tier_touch(st, row, s):
    """Entry s was used: it becomes the most recently used (unless pinned: out of the list)."""
    if st.tier_slots[s]["pins"] == 0:
        _lru_remove(st, row, s)
        _lru_push(st, row, s)


@helper
def tier_pin(st, s):
    """A load reads entry s: it cannot be evicted until ``tier_unpin``."""
    if st.tier_slots[s]["pins"] == 0:
        _lru_remove(st, st.tier_slots[s]["tier"], s)
    st.tier_slots[s]["pins"] += 1


@helper
def tier_unpin(st, s):
    st.tier_slots[s]["pins"] -= 1
    if st.tier_slots[s]["pins"] == 0:
        _lru_push(st, st.tier_slots[s]["tier"], s)


@helper
def _evict(st, i, k, t_us):
    """Evict tier k's least recently used unpinned entry (it exists) and hand its content
    to tier k + 1's writer; returns its slot, now empty."""
    row = i * N_TIERS + k
    tiers = st.tiers
    s = tiers[row]["lru_head"]
    _lru_remove(st, row, s)
    key = st.tier_slots[s]["key"]
    off = tiers[row]["ht_offset"]
    mask = tiers[row]["ht_mask"]
    h = table_find(st.tier_table, off, mask, key)
    table_delete_at(st.tier_table, off, mask, h)
    tiers[row]["used"] -= 1
    tiers[row]["evictions"] += 1
    if k + 1 < st.kv_tier_inst[i]["n_tiers"]:
        below = row + 1
        d = tier_find(st, below, key)
        if d >= 0:
            tier_touch(st, below, d)
        else:
            tier_write(st, i, k + 1, key, np.int64(-1), np.int64(-1), t_us)
    return s


@helper
def tier_insert(st, i, k, key, t_us):
    """A write of content ``key`` into tier k of instance i has landed at t_us: it becomes
    the tier's most recently used entry, evicting the least recently used unpinned one if
    the tier is full (every entry pinned: the write is dropped)."""
    row = i * N_TIERS + k
    tiers = st.tiers
    s = tier_find(st, row, key)
    if s >= 0:  # (a second copy of the same content)
        tier_touch(st, row, s)
        return
    # an entry leaves a tier only to make room for another, which takes its slot: the slots
    # in use are [slot_offset, virgin_next), as many as the distinct shared keys at most
    room = tiers[row]["virgin_next"] < tiers[row]["slot_offset"] + tiers[row]["slot_rows"]
    if tiers[row]["used"] < tiers[row]["capacity"] and room:
        s = tiers[row]["virgin_next"]
        tiers[row]["virgin_next"] = s + 1
    elif tiers[row]["lru_len"] > 0:
        s = _evict(st, i, k, t_us)
    else:
        tiers[row]["write_drops"] += 1
        return
    slot = st.tier_slots
    slot[s]["key"] = key
    slot[s]["pins"] = 0
    slot[s]["tier"] = row
    slot[s]["lru_prev"] = -1
    slot[s]["lru_next"] = -1
    off = tiers[row]["ht_offset"]
    h, found = table_probe(st.tier_table, off, tiers[row]["ht_mask"], key)
    st.tier_table[off + h, 0] = key
    st.tier_table[off + h, 1] = s + 1
    _lru_push(st, row, s)
    tiers[row]["used"] += 1
    tiers[row]["stored"] += 1
    if tiers[row]["used"] > tiers[row]["peak_used"]:
        tiers[row]["peak_used"] = tiers[row]["used"]


# ----------------------------------------------------------------------------- writes


@helper
def tier_write(st, i, k, key, block, q, t_us):
    """Queue a write of one block into tier k of instance i at t_us (FIFO: it starts when
    the writer has written everything queued before it); False if the queue is full."""
    row = i * N_TIERS + k
    tiers = st.tiers
    n = tiers[row]["wr_len"]
    cap = tiers[row]["wr_cap"]
    if n >= cap:
        tiers[row]["write_drops"] += 1
        return False
    start = max(np.float64(t_us), tiers[row]["write_free_us"])
    done = start + st.kv_tier_inst[i]["block_bytes"] / tiers[row]["write_bytes_per_us"]
    tiers[row]["write_free_us"] = done
    w = tiers[row]["wr_offset"] + (tiers[row]["wr_head"] + n) % cap
    st.tier_writes[w]["done_us"] = np.int64(math.ceil(done))
    st.tier_writes[w]["key"] = key
    st.tier_writes[w]["block"] = block
    st.tier_writes[w]["key_index"] = q
    tiers[row]["wr_len"] = n + 1
    return True


@helper
def tier_store(st, i, r, j, q, b):
    """Block b of request r (its position j) just got key number q on instance i: copy it
    to tier 0 if the store mode takes it and tier 0 does not hold that content yet."""
    ti = st.kv_tier_inst[i]
    if st.key_shared[q] == 0:
        return
    if ti["store_all"] == 0 and (j + 1) * np.int64(st.inst[i]["block_size"]) > st.reqs[r]["prompt_len"]:
        return  # prompt-only: a block holding a generated token stays on the GPU
    row = i * N_TIERS
    key = st.keys[q]
    s = tier_find(st, row, key)
    if s >= 0:
        tier_touch(st, row, s)
        return
    if tier_write(st, i, np.int64(0), key, b, q, st.loop[0]["clock_us"]):
        st.blocks[b]["ref_count"] += 1  # pinned until the copy has landed


@helper
def next_write_us(st, i):
    """When instance i's next queued write lands (-1: none queued)."""
    best = np.int64(-1)
    for k in range(st.kv_tier_inst[i]["n_tiers"]):
        row = i * N_TIERS + k
        if st.tiers[row]["wr_len"] > 0:
            d = st.tier_writes[st.tiers[row]["wr_offset"] + st.tiers[row]["wr_head"]]["done_us"]
            if best < 0 or d < best:
                best = d
    return best


# ----------------------------------------------------------------------------- finding


@helper
def load_time_us(st, i, found0, found1):
    """load: step -- the time of loading these blocks alone: latency + bytes / bandwidth per tier."""
    total = 0.0
    bb = st.kv_tier_inst[i]["block_bytes"]
    for k in range(st.kv_tier_inst[i]["n_tiers"]):
        n = found0 if k == 0 else found1
        if n > 0:
            row = i * N_TIERS + k
            total += st.tiers[row]["latency_us"] + n * bb / st.tiers[row]["read_bytes_per_us"]
    return total


@helper
def tier_hit_tokens(st, i, r):
    """Prompt tokens request r's last admission on instance i found in its tiers."""
    return (st.tier_reqs[r]["hit_blocks_0"] + st.tier_reqs[r]["hit_blocks_1"]) * np.int64(st.inst[i]["block_size"])


@helper
def count_tier_hits(st, i, r, found0, found1):
    tr = st.tier_reqs
    tr[r]["hit_blocks_0"] = found0
    tr[r]["hit_blocks_1"] = found1
    tr[r]["loaded_blocks_0"] += found0
    tr[r]["loaded_blocks_1"] += found1
    st.tiers[i * N_TIERS]["hit_blocks"] += found0
    if found1 > 0:
        st.tiers[i * N_TIERS + 1]["hit_blocks"] += found1


@kernel
def tiers_conserved(st, i):
    """Entry conservation in every tier of instance i: the entries its hash rows name are
    ``used`` (at most its capacity), each a slot of its own holding that key once; the
    unpinned ones are its LRU list, the others pinned; the slots in use are the first
    ``used`` of its own."""
    slots = st.tier_slots
    for k in range(st.kv_tier_inst[i]["n_tiers"]):
        row = i * N_TIERS + k
        t = st.tiers[row]
        lo = t["slot_offset"]
        hi = lo + t["slot_rows"]
        entries = 0
        pinned = 0
        for h in range(t["ht_offset"], t["ht_offset"] + t["ht_mask"] + 1):
            if st.tier_table[h, 1] == 0:
                continue
            s = st.tier_table[h, 1] - 1
            if s < lo or s >= hi or slots[s]["key"] != st.tier_table[h, 0] or slots[s]["tier"] != row:
                return False
            entries += 1
            if slots[s]["pins"] > 0:
                pinned += 1
        if entries != t["used"] or t["used"] > t["capacity"]:
            return False
        listed = 0
        s = t["lru_head"]
        while s >= 0 and listed <= t["slot_rows"]:
            if slots[s]["pins"] != 0:
                return False
            listed += 1
            s = slots[s]["lru_next"]
        if listed != t["lru_len"] or listed + pinned != t["used"] or t["virgin_next"] - lo != t["used"]:
            return False
    return True
