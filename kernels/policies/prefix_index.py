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
def _evict_lru(st, off, mask, i):
    """Drop instance i's least recently touched key (pops stale ring records on the way)."""
    ps = st.pi_state
    ring = st.pi_ring
    n_ring = ring.shape[1]
    while ps[i, IndexState.RING_LEN] > 0:
        head = ps[i, IndexState.RING_HEAD]
        key = ring[i, head, 0]
        stamp = ring[i, head, 1]
        ps[i, IndexState.RING_HEAD] = (head + 1) % n_ring
        ps[i, IndexState.RING_LEN] -= 1
        if stamp == PHANTOM:  # a run of keys no other request has: they only held places
            if key > 1:  # evict one of the run, keep the rest at the head
                ring[i, head, 0] = key - 1
                ps[i, IndexState.RING_HEAD] = head
                ps[i, IndexState.RING_LEN] += 1
            ps[i, IndexState.SIZE] -= 1
            return
        h = table_find(st.pi_table, off, mask, key)
        if h >= 0 and st.pi_table[off + h, 1] == stamp:
            table_delete_at(st.pi_table, off, mask, h)
            _gmap_clear_bit(st.gmap, key, i)
            ps[i, IndexState.SIZE] -= 1
            return


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
def index_insert_unshared(st, capacity, rows_per_inst, i):
    """Insert a key that no other request of the workload has into instance i's index.

    It can never be matched (only its own request carries it, and that request was routed
    before the insertion), so only its place in the LRU order matters: it takes one unit
    of capacity, evicting the least recently touched key if full, and leaves when it
    becomes the least recent itself.  Consecutive place-holders are one ring record
    (count, PHANTOM), without hash rows or map bits.  Exactly equivalent to index_touch
    for such keys, at the cost of a counter increment."""
    ps = st.pi_state
    off = i * rows_per_inst
    mask = rows_per_inst - 1
    if ps[i, IndexState.SIZE] >= capacity:
        _evict_lru(st, off, mask, i)
    ps[i, IndexState.SIZE] += 1
    n = ps[i, IndexState.RING_LEN]
    if n > 0:  # consecutive place-holders share one ring record: (count, PHANTOM)
        tail = (ps[i, IndexState.RING_HEAD] + n - 1) % st.pi_ring.shape[1]
        if st.pi_ring[i, tail, 1] == PHANTOM:
            st.pi_ring[i, tail, 0] += 1
            return
    _ring_append(st, off, mask, i, np.int64(1), PHANTOM)


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
            _evict_lru(st, off, mask, i)
        h, _ = table_probe(st.pi_table, off, mask, key)
        st.pi_table[off + h, 0] = key
        st.pi_table[off + h, 1] = stamp
        ps[i, IndexState.SIZE] += 1
        _gmap_set_bit(st.gmap, key, i)
    _ring_append(st, off, mask, i, key, stamp)


@helper
def leading_matches(st, kstart, kcount):
    """For every active instance, the number of leading keys ``keys[kstart:kstart+kcount]``
    its index holds -> ``affinity[i]`` (0 for inactive instances).  ``alive`` is scratch
    with one int64 per mask word; one cluster-map lookup per leading key."""
    gmap = st.gmap
    alive = st.alive
    counts = st.affinity
    active = st.inst["active"]
    n_words = alive.shape[0]
    gmask = gmap.shape[0] - 1
    for w in range(n_words):
        alive[w] = 0
    for i in range(counts.shape[0]):
        counts[i] = 0
        if active[i] != 0:
            alive[i // 64] |= np.int64(1) << (i % 64)
    any_alive = counts.shape[0] > 0
    depth = 0
    while any_alive and depth < kcount:
        row = table_find(gmap, np.int64(0), gmask, st.keys[kstart + depth])
        any_alive = False
        for w in range(n_words):
            now = alive[w] & gmap[row, 1 + w] if row >= 0 else np.int64(0)
            dropped = alive[w] & ~now
            if dropped != 0:
                for b in range(64):
                    if (dropped >> b) & 1:
                        counts[w * 64 + b] = depth
            alive[w] = now
            if now != 0:
                any_alive = True
        depth += 1
    if any_alive:
        for w in range(n_words):
            for b in range(64):
                if (alive[w] >> b) & 1:
                    counts[w * 64 + b] = depth
