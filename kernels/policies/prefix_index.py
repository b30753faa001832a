"""The router's view of each instance's prefix cache (prefix-affinity routing).

Per instance, an LRU index of at most ``capacity`` prefix-block keys the router has sent
there (updated with every key of each request it routes, most recent last).  A request's
affinity for instance i = the number of its *leading* block keys present in i's index.

Two structures, kept in sync, both structs/hashtable.py row tables:
- per instance: rows (key, last-touch stamp, record slot) in ``pi_table`` plus a ring of
  touch records in ``pi_ring[i]``.  A touch writes a fresh stamp into the key's row and
  appends a record; the least recently touched key is the first ring record that still
  holds some key's latest touch.  Exact LRU with one hash probe per touch and no linked
  list.  ``pi_state[i]`` holds IndexState; columns: IndexRow, IndexRecord.
  A record is a run: (position | count << RUN_SHIFT, first stamp, live) stands for the
  keys ``keys[position:position+count]`` touched with consecutive stamps -- a routed
  request's run of shared keys is one record, not one per key -- and (count, PHANTOM)
  for ``count`` place-holders (see index_insert_unshared).  ``live`` counts the run's keys
  whose latest touch it still is (each row names the slot of its latest record), so a
  record whose keys were all touched again later -- the usual fate of a popular prefix's
  run -- leaves the ring without a probe per key.
- cluster-wide ``gmap``: rows (key, bit mask words...) of the instances whose index holds
  the key, so the affinity of *every* instance comes from one lookup per leading key
  (``pi_memo`` counts its changes: see leading_matches).
"""

import numpy as np

from ..jit import helper
from ..schema import N_ROUTER_MEMO, PHANTOM, IndexRecord, IndexRow, IndexState, RouterMemo
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
    """Drop instance i's ``units`` least recently touched keys (records holding no key's
    latest touch leave on the way; place-holders leave a run at a time)."""
    ps = st.pi_state
    ring = st.pi_ring
    n_ring = ring.shape[1]
    while units > 0 and ps[i, IndexState.RING_LEN] > 0:
        head = ps[i, IndexState.RING_HEAD]
        a = ring[i, head, IndexRecord.RUN]
        stamp = ring[i, head, IndexRecord.STAMP]
        if stamp == PHANTOM:  # a run of ``a`` keys no other request has: they only held places
            k = min(a, units)
            ps[i, IndexState.SIZE] -= k
            units -= k
            if k < a:  # the rest of the run stays at the head
                ring[i, head, IndexRecord.RUN] = a - k
                continue
        elif ring[i, head, IndexRecord.LIVE] > 0:  # the run's first touch: evict its key if that is still its latest
            key = st.keys[a & RUN_POS]
            h = table_find(st.pi_table, off, mask, key)
            if h >= 0 and st.pi_table[off + h, IndexRow.STAMP] == stamp:
                table_delete_at(st.pi_table, off, mask, h)
                _gmap_clear_bit(st.gmap, key, i)
                st.pi_memo[RouterMemo.GMAP_VERSION] += 1
                ps[i, IndexState.SIZE] -= 1
                units -= 1
                ring[i, head, IndexRecord.LIVE] -= 1
            if a >= 2 * RUN_ONE:  # the rest of the run stays at the head
                ring[i, head, IndexRecord.RUN] = a + 1 - RUN_ONE
                ring[i, head, IndexRecord.STAMP] = stamp + 1
                continue
        ps[i, IndexState.RING_HEAD] = _slot(head, np.int64(1), n_ring)
        ps[i, IndexState.RING_LEN] -= 1


@helper
def _compact_ring(st, off, mask, i):
    """Keep only the records of instance i's ring that hold some key's latest touch (in
    order; place-holder runs are kept), pointing the rows of the moved ones at their new
    slots.  Each kept record holds a key of the index, so at most ``capacity`` are kept
    and the ring has room again."""
    ps = st.pi_state
    ring = st.pi_ring
    n_ring = ring.shape[1]
    head = ps[i, IndexState.RING_HEAD]
    kept = 0
    for j in range(ps[i, IndexState.RING_LEN]):
        p = _slot(head, j, n_ring)
        a = ring[i, p, IndexRecord.RUN]
        stamp = ring[i, p, IndexRecord.STAMP]
        if stamp != PHANTOM and ring[i, p, IndexRecord.LIVE] == 0:
            continue
        q = _slot(head, kept, n_ring)
        kept += 1
        if q == p:
            continue
        for c in range(ring.shape[2]):
            ring[i, q, c] = ring[i, p, c]
        if stamp != PHANTOM:
            pos = a & RUN_POS
            for k in range(a >> RUN_SHIFT):
                h = table_find(st.pi_table, off, mask, st.keys[pos + k])
                if h >= 0 and st.pi_table[off + h, IndexRow.RECORD] == p:
                    st.pi_table[off + h, IndexRow.RECORD] = q
    ps[i, IndexState.RING_LEN] = kept


@helper
def _ring_append(st, off, mask, i, a, stamp, live):
    """Append the record (a, stamp, live) to instance i's ring -> its slot."""
    ps = st.pi_state
    ring = st.pi_ring
    n_ring = ring.shape[1]
    if ps[i, IndexState.RING_LEN] == n_ring:
        _compact_ring(st, off, mask, i)
    tail = _slot(ps[i, IndexState.RING_HEAD], ps[i, IndexState.RING_LEN], n_ring)
    ring[i, tail, IndexRecord.RUN] = a
    ring[i, tail, IndexRecord.STAMP] = stamp
    ring[i, tail, IndexRecord.LIVE] = live
    ps[i, IndexState.RING_LEN] += 1
    return tail


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
            if ring[i, tail, IndexRecord.STAMP] == PHANTOM:
                ring[i, tail, IndexRecord.RUN] += c
                continue
        _ring_append(st, off, mask, i, c, PHANTOM, np.int64(0))


@helper
def index_touch(st, capacity, rows_per_inst, i, pos):
    """Mark the key ``keys[pos]`` as most recently routed to instance i, inserting it (and
    evicting the least recently touched key when the index holds ``capacity`` keys)."""
    ps = st.pi_state
    ring = st.pi_ring
    table = st.pi_table
    off = i * rows_per_inst
    mask = rows_per_inst - 1
    key = st.keys[pos]
    stamp = ps[i, IndexState.STAMP] + 1
    ps[i, IndexState.STAMP] = stamp
    h = table_find(table, off, mask, key)
    if h >= 0:  # its previous touch is no longer its latest
        ring[i, table[off + h, IndexRow.RECORD], IndexRecord.LIVE] -= 1
        table[off + h, IndexRow.STAMP] = stamp
    else:
        if ps[i, IndexState.SIZE] >= capacity:
            _evict_lru(st, off, mask, i, np.int64(1))
        h, _ = table_probe(table, off, mask, key)
        table[off + h, IndexRow.KEY] = key
        table[off + h, IndexRow.STAMP] = stamp
        ps[i, IndexState.SIZE] += 1
        _gmap_set_bit(st.gmap, key, i)
        st.pi_memo[RouterMemo.GMAP_VERSION] += 1
    n = ps[i, IndexState.RING_LEN]
    if n > 0:  # the touch that continues the last record's run (next position and stamp) joins it
        tail = _slot(ps[i, IndexState.RING_HEAD], n - 1, ring.shape[1])
        a = ring[i, tail, IndexRecord.RUN]
        t_stamp = ring[i, tail, IndexRecord.STAMP]
        count = a >> RUN_SHIFT
        if t_stamp != PHANTOM and (a & RUN_POS) + count == pos and t_stamp + count == stamp:
            ring[i, tail, IndexRecord.RUN] = a + RUN_ONE
            ring[i, tail, IndexRecord.LIVE] += 1
            table[off + h, IndexRow.RECORD] = tail
            return
    table[off + h, IndexRow.RECORD] = _ring_append(st, off, mask, i, pos | RUN_ONE, stamp, np.int64(1))


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
    unshared key (no index holds it: only its own request carries it, which is being routed).

    Requests of a popular prefix ask the same question again and again: ``pi_memo`` keeps
    where the last walk could resume (RouterMemo: its depth before the key that ended it,
    the instances still in the race there).  When the cluster map and the active instances
    are unchanged since and this request's keys up to that depth equal the last one's, the
    walk resumes there -- ``affinity`` still holds the counts of the instances out of the
    race -- with compares of consecutive keys instead of a hash lookup per key."""
    gmap = st.gmap
    alive = st.alive
    counts = st.affinity
    memo = st.pi_memo
    active = st.inst["active"]
    n_inst = counts.shape[0]
    n_words = alive.shape[0]
    gmask = gmap.shape[0] - 1
    at_active = N_ROUTER_MEMO  # memo words: the active mask, then the mask where the walk resumes
    at_resume = N_ROUTER_MEMO + n_words
    depth = memo[RouterMemo.DEPTH]
    reuse = memo[RouterMemo.VERSION] == memo[RouterMemo.GMAP_VERSION] and depth <= kcount
    for w in range(n_words):
        word = np.int64(0)
        for b in range(min(64, n_inst - w * 64)):
            if active[w * 64 + b] != 0:
                word |= np.int64(1) << b
        if memo[at_active + w] != word:
            reuse = False
            memo[at_active + w] = word
    if reuse:
        mk = memo[RouterMemo.KSTART]
        for j in range(depth):
            if st.keys[kstart + j] != st.keys[mk + j]:
                reuse = False
                break
    any_alive = n_inst > 0
    if reuse:
        for w in range(n_words):
            alive[w] = memo[at_resume + w]
    else:
        for w in range(n_words):
            alive[w] = memo[at_active + w]
        for i in range(n_inst):
            counts[i] = 0
        depth = 0
    memo[RouterMemo.KSTART] = kstart
    while any_alive and depth < kcount:
        k = kstart + depth
        row = table_find(gmap, np.int64(0), gmask, st.keys[k]) if st.key_shared[k] else np.int64(-1)
        any_alive = False
        for w in range(n_words):
            memo[at_resume + w] = alive[w]  # (where a walk of the same keys can resume)
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
            memo[at_resume + w] = alive[w]
            for b in range(min(64, n_inst - w * 64)):
                if (alive[w] >> b) & 1:
                    counts[w * 64 + b] = depth
        memo[RouterMemo.DEPTH] = depth
    else:  # the last key put every instance out: resume before it
        memo[RouterMemo.DEPTH] = depth - 1 if depth > 0 else 0
    memo[RouterMemo.VERSION] = memo[RouterMemo.GMAP_VERSION]
