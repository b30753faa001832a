"""The router's view of each instance's prefix cache (prefix-affinity routing).

Per instance, an LRU index of at most ``capacity`` prefix-block keys the router has sent
there (updated with every key of each request it routes, most recent last).  A request's
affinity for instance i = the number of its *leading* block keys present in i's index.

Two structures, kept in sync, both structs/hashtable.py row tables:
- per instance: rows (key, last-touch stamp) in ``pi_table`` plus a ring of touch records
  in ``pi_ring[i]``.  A touch writes a fresh stamp into the key's row and appends a
  record; the least recently touched key is the first ring record whose stamp still
  matches its row (older records of re-touched keys are stale and skipped).  Exact LRU
  with one hash probe per touch and no linked list.  ``pi_state[i]`` holds IndexState.
- cluster-wide ``gmap``: rows (key, bit mask words...) of the instances whose index holds
  the key, so the affinity of *every* instance comes from one lookup per leading key.
"""

import numpy as np

from ..jit import helper
from ..schema import PHANTOM, IndexState
from ..structs.hashtable import row_empty, table_delete_at, table_find, table_probe

# ----------------------------------------------------------------------------- cluster map


@helper
def _gmap_set_bit(gmap, key, i):
    """Record that instance i's index holds ``key``."""
    h, _ = table_probe(gmap, np.int64(0), gmap.shape[0] - 1, key)
    gmap[h, 0] = key
    gmap[h, 1 + i // 64] |= np.int64(1) << (i % 64)


@helper
def _gmap_clear_bit(gmap, key, i):
    """Record that instance i's index no longer holds ``key``; drop the row when empty."""
    mask = gmap.shape[0] - 1
    h = table_find(gmap, np.int64(0), mask, key)
    if h < 0:
        return
    gmap[h, 1 + i // 64] &= ~(np.int64(1) << (i % 64))
    if row_empty(gmap, h):
        table_delete_at(gmap, np.int64(0), mask, h)


# ----------------------------------------------------------------------------- per-instance LRU


@helper
def _evict_lru(st, off, mask, i, units):
    """Drop instance i's ``units`` least recently touched keys (pops stale ring records on
    the way; place-holders leave a run at a time)."""
    ps = st.pi_state
    ring = st.pi_ring
    n_ring = ring.shape[1]
    while units > 0 and ps[i, IndexState.RING_LEN] > 0:
        head = ps[i, IndexState.RING_HEAD]
        key = ring[i, head, 0]
        stamp = ring[i, head, 1]
        if stamp == PHANTOM:  # a run of ``key`` keys no other request has: they only held places
            k = min(key, units)
            ps[i, IndexState.SIZE] -= k
            units -= k
            if k < key:  # the rest of the run stays at the head
                ring[i, head, 0] = key - k
                continue
        else:
            h = table_find(st.pi_table, off, mask, key)
            if h >= 0 and st.pi_table[off + h, 1] == stamp:
                table_delete_at(st.pi_table, off, mask, h)
                _gmap_clear_bit(st.gmap, key, i)
                ps[i, IndexState.SIZE] -= 1
                units -= 1
        ps[i, IndexState.RING_HEAD] = (head + 1) % n_ring
        ps[i, IndexState.RING_LEN] -= 1


@helper
def _compact_ring(st, off, mask, i):
    """Keep only the live records of instance i's ring (in order)."""
    ps = st.pi_state
    ring = st.pi_ring
    n_ring = ring.shape[1]
    head = ps[i, IndexState.RING_HEAD]
    kept = 0
    for j in range(ps[i, IndexState.RING_LEN]):
        p = (head + j) % n_ring
        key = ring[i, p, 0]
        stamp = ring[i, p, 1]
        live = stamp == PHANTOM
        if not live:
            h = table_find(st.pi_table, off, mask, key)
            live = h >= 0 and st.pi_table[off + h, 1] == stamp
        if live:
            q = (head + kept) % n_ring
            ring[i, q, 0] = key
            ring[i, q, 1] = stamp
            kept += 1
    ps[i, IndexState.RING_LEN] = kept


@helper
def _ring_append(st, off, mask, i, key, stamp):
    ps = st.pi_state
    ring = st.pi_ring
    n_ring = ring.shape[1]
    if ps[i, IndexState.RING_LEN] == n_ring:
        _compact_ring(st, off, mask, i)
    tail = (ps[i, IndexState.RING_HEAD] + ps[i, IndexState.RING_LEN]) % n_ring
    ring[i, tail, 0] = key
    ring[i, tail, 1] = stamp
    ps[i, IndexState.RING_LEN] += 1


@helper
def index_insert_unshared(st, capacity, rows_per_inst, i, count):
    """Insert ``count`` consecutive keys that no other request of the workload has into
    instance i's index.

    They can never be matched (only their own request carries them, and that request was
    routed before the insertion), so only their places in the LRU order matter: each takes
    one unit of capacity, evicting the least recently touched key if full, and leaves when
    it becomes the least recent itself.  Consecutive place-holders are one ring record
    (count, PHANTOM), without hash rows or map bits.  Exactly equivalent to index_touch
    for each key in turn: a chunk of at most ``capacity`` keys evicts only keys that were
    there before it, so it can make its evictions first, all at once."""
    ps = st.pi_state
    off = i * rows_per_inst
    mask = rows_per_inst - 1
    ring = st.pi_ring
    while count > 0:
        c = min(count, capacity)
        count -= c
        over = ps[i, IndexState.SIZE] + c - capacity
        if over > 0:
            _evict_lru(st, off, mask, i, over)
        ps[i, IndexState.SIZE] += c
        n = ps[i, IndexState.RING_LEN]
        if n > 0:  # consecutive place-holders share one ring record: (count, PHANTOM)
            tail = (ps[i, IndexState.RING_HEAD] + n - 1) % ring.shape[1]
            if ring[i, tail, 1] == PHANTOM:
                ring[i, tail, 0] += c
                continue
        _ring_append(st, off, mask, i, c, PHANTOM)


@helper
def index_touch(st, capacity, rows_per_inst, i, key):
    """Mark ``key`` as most recently routed to instance i, inserting it (and evicting the
    least recently touched key when the index holds ``capacity`` keys)."""
    ps = st.pi_state
    off = i * rows_per_inst
    mask = rows_per_inst - 1
    stamp = ps[i, IndexState.STAMP] + 1
    ps[i, IndexState.STAMP] = stamp
    h = table_find(st.pi_table, off, mask, key)
    if h >= 0:
        st.pi_table[off + h, 1] = stamp
    else:
        if ps[i, IndexState.SIZE] >= capacity:
            _evict_lru(st, off, mask, i, np.int64(1))
        h, _ = table_probe(st.pi_table, off, mask, key)
        st.pi_table[off + h, 0] = key
        st.pi_table[off + h, 1] = stamp
        ps[i, IndexState.SIZE] += 1
        _gmap_set_bit(st.gmap, key, i)
    _ring_append(st, off, mask, i, key, stamp)


@helper
def index_record_request(st, i, kstart, kcount):
    """Record the prompt keys ``keys[kstart:kstart+kcount]`` of a request routed to instance i,
    in order; each run of unshared keys in one call."""
    capacity = st.settings[0]["prefix_index_capacity"]
    rows = st.settings[0]["prefix_index_slots"]
    shared = st.key_shared
    j = kstart
    end = kstart + kcount
    while j < end:
        if shared[j]:
            index_touch(st, capacity, rows, i, st.keys[j])
            j += 1
        else:
            run = j + 1
            while run < end and not shared[run]:
                run += 1
            index_insert_unshared(st, capacity, rows, i, np.int64(run - j))
            j = run


@helper
def leading_matches(st, kstart, kcount):
    """For every active instance, the number of leading keys ``keys[kstart:kstart+kcount]``
    its index holds -> ``affinity[i]`` (0 for inactive instances).  ``alive`` is scratch
    with one int64 per mask word; one cluster-map lookup per leading key, none for an
    unshared key (no index holds it: only its own request carries it, which is being routed)."""
    gmap = st.gmap
    alive = st.alive
    counts = st.affinity
    active = st.inst["active"]
    n_inst = counts.shape[0]
    n_words = alive.shape[0]
    gmask = gmap.shape[0] - 1
    for w in range(n_words):
        alive[w] = 0
    for i in range(n_inst):
        counts[i] = 0
        if active[i] != 0:
            alive[i // 64] |= np.int64(1) << (i % 64)
    any_alive = n_inst > 0
    depth = 0
    while any_alive and depth < kcount:
        k = kstart + depth
        row = table_find(gmap, np.int64(0), gmask, st.keys[k]) if st.key_shared[k] else np.int64(-1)
        any_alive = False
        for w in range(n_words):
            now = alive[w] & gmap[row, 1 + w] if row >= 0 else np.int64(0)
            dropped = alive[w] & ~now
            if dropped != 0:
                for b in range(min(64, n_inst - w * 64)):  # (no bits beyond the last instance)
                    if (dropped >> b) & 1:
                        counts[w * 64 + b] = depth
            alive[w] = now
            if now != 0:
                any_alive = True
        depth += 1
    if any_alive:
        for w in range(n_words):
            for b in range(min(64, n_inst - w * 64)):
                if (alive[w] >> b) & 1:
                    counts[w * 64 + b] = depth
