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
  A record is a run: (position | count << RUN_SHIFT, first stamp) stands for the keys
  ``keys[position:position+count]`` touched with consecutive stamps -- a routed request's
  run of shared keys is one record, not one per key -- and (count, PHANTOM) for ``count``
  place-holders (see index_insert_unshared).
- cluster-wide ``gmap``: rows (key, bit mask words...) of the instances whose index holds
  the key, so the affinity of *every* instance comes from one lookup per leading key.
"""

import numpy as np

from ..jit import helper
from ..schema import PHANTOM, IndexState
from ..structs.hashtable import row_empty, table_delete_at, table_find, table_probe

RUN_SHIFT = 40  # a keyed ring record's key column: position in ``keys`` | count << RUN_SHIFT
RUN_ONE = np.int64(1) << RUN_SHIFT
RUN_POS = RUN_ONE - 1

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
def _slot(head, j, n_ring):
    """Ring slot j places after ``head`` (0 <= j < n_ring): (head + j) % n_ring without the
    division, which was ~15 % of a touch."""
    p = head + j
    return p - n_ring if p >= n_ring else p



@helper
def _evict_lru(st, off, mask, i, units):
    """Drop instance i's ``units`` least recently touched keys (skips stale touches on the
    way; place-holders leave a run at a time)."""
    ps = st.pi_state
    ring = st.pi_ring
    n_ring = ring.shape[1]
    while units > 0 and ps[i, IndexState.RING_LEN] > 0:
        head = ps[i, IndexState.RING_HEAD]
        a = ring[i, head, 0]
        stamp = ring[i, head, 1]
        if stamp == PHANTOM:  # a run of ``a`` keys no other request has: they only held places
            k = min(a, units)
            ps[i, IndexState.SIZE] -= k
            units -= k
            if k < a:  # the rest of the run stays at the head
                ring[i, head, 0] = a - k
                continue
        else:  # the run's first touch: evict its key if that is still its latest touch
            key = st.keys[a & RUN_POS]
            h = table_find(st.pi_table, off, mask, key)
            if h >= 0 and st.pi_table[off + h, 1] == stamp:
                table_delete_at(st.pi_table, off, mask, h)
                _gmap_clear_bit(st.gmap, key, i)
                ps[i, IndexState.SIZE] -= 1
                units -= 1
            if a >= 2 * RUN_ONE:  # the rest of the run stays at the head
                ring[i, head, 0] = a + 1 - RUN_ONE
                ring[i, head, 1] = stamp + 1
                continue
        ps[i, IndexState.RING_HEAD] = _slot(head, np.int64(1), n_ring)
        ps[i, IndexState.RING_LEN] -= 1


@helper
def _run_live(st, off, mask, a, stamp):
    """True if a ring record holds a key's latest touch (a place-holder run always does)."""
    if stamp == PHANTOM:
        return True
    pos = a & RUN_POS
    for j in range(a >> RUN_SHIFT):
        h = table_find(st.pi_table, off, mask, st.keys[pos + j])
        if h >= 0 and st.pi_table[off + h, 1] == stamp + j:
            return True
    return False


@helper
def _compact_ring(st, off, mask, i):
    """Keep only the live records of instance i's ring (in order).  Each kept record holds
    a key of the index, so at most ``capacity`` are kept and the ring has room again."""
    ps = st.pi_state
    ring = st.pi_ring
    n_ring = ring.shape[1]
    head = ps[i, IndexState.RING_HEAD]
    kept = 0
    for j in range(ps[i, IndexState.RING_LEN]):
        p = _slot(head, j, n_ring)
        a = ring[i, p, 0]
        stamp = ring[i, p, 1]
        if _run_live(st, off, mask, a, stamp):
            q = _slot(head, kept, n_ring)
            ring[i, q, 0] = a
            ring[i, q, 1] = stamp
            kept += 1
    ps[i, IndexState.RING_LEN] = kept


@helper
def _ring_append(st, off, mask, i, a, stamp):
    ps = st.pi_state
    ring = st.pi_ring
    n_ring = ring.shape[1]
    if ps[i, IndexState.RING_LEN] == n_ring:
        _compact_ring(st, off, mask, i)
    tail = _slot(ps[i, IndexState.RING_HEAD], ps[i, IndexState.RING_LEN], n_ring)
    ring[i, tail, 0] = a
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
            tail = _slot(ps[i, IndexState.RING_HEAD], n - 1, ring.shape[1])
            if ring[i, tail, 1] == PHANTOM:
                ring[i, tail, 0] += c
                continue
        _ring_append(st, off, mask, i, c, PHANTOM)


@helper
def index_touch(st, capacity, rows_per_inst, i, pos):
    """Mark the key ``keys[pos]`` as most recently routed to instance i, inserting it (and
    evicting the least recently touched key when the index holds ``capacity`` keys)."""
    ps = st.pi_state
    ring = st.pi_ring
    off = i * rows_per_inst
    mask = rows_per_inst - 1
    key = st.keys[pos]
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
    n = ps[i, IndexState.RING_LEN]
    if n > 0:  # the touch that continues the last record's run (next position and stamp) joins it
        tail = _slot(ps[i, IndexState.RING_HEAD], n - 1, ring.shape[1])
        a = ring[i, tail, 0]
        t_stamp = ring[i, tail, 1]
        count = a >> RUN_SHIFT
        if t_stamp != PHANTOM and (a & RUN_POS) + count == pos and t_stamp + count == stamp:
            ring[i, tail, 0] = a + RUN_ONE
            return
    _ring_append(st, off, mask, i, pos | RUN_ONE, stamp)


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
            index_touch(st, capacity, rows, i, j)
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
