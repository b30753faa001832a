"""The router's view of each instance's prefix cache (prefix-affinity routing).

Per instance, an LRU index of at most ``capacity`` prefix-block keys the router has sent
there (updated with every key of each request it routes, most recent last).  A request's
affinity for instance i = the number of its *leading* block keys present in i's index.

The structures, kept in sync (``pi_state[i]``: IndexState; columns IndexRow, IndexRecord):
- per instance, touch records (``pi_records[i]``): a record is a run of keys touched one
  after the other, ``keys[POS:POS+COUNT]`` -- a routed request's run of shared keys is one
  record, not one per key -- with LIVE, the number of its keys whose latest touch it still
  holds, and FRONT, the keys eviction has passed;
- per instance, a ring (``pi_ring[i]``) of the records in the order they were last
  touched: an entry is a record id (current when the record's SLOT names it; an older
  entry of a record touched again since is stale and skipped), or -n for a run of n
  place-holders (see index_insert_unshared).  The least recently touched key is the
  first live key of the first current entry: exact LRU, no linked list;
- per instance, hash rows (key, record + 1, offset) in ``pi_table`` (structs/hashtable.py):
  one probe per touch of a single key;
- cluster-wide ``gmap``: rows (key, bit mask words...) of the instances whose index holds
  the key, so the affinity of *every* instance comes from one lookup per leading key
  (``pi_memo`` counts its changes: see leading_matches).

A request that touches exactly the run of a record whose keys are all still live -- the
usual case for a popular prefix -- moves the record to the tail of the ring in one step
(index_record_request): its rows name the record, not a slot or a time, so none of them
changes.
"""

import numpy as np

from ..jit import helper
from ..schema import N_ROUTER_MEMO, IndexRecord, IndexRow, IndexState, RouterMemo
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
def _slot(head, j, n_ring):
    """Ring slot j places after ``head`` (0 <= j < n_ring): (head + j) % n_ring without the
    division, which was ~15 % of a touch."""
    p = head + j
    return p - n_ring if p >= n_ring else p


@helper
def _free_record(st, i, r):
    rec = st.pi_records
    rec[i, r, IndexRecord.SLOT] = -1
    rec[i, r, IndexRecord.POS] = st.pi_state[i, IndexState.FREE_RECORD] - 1
    st.pi_state[i, IndexState.FREE_RECORD] = r + 1


@helper
def _new_record(st, i, pos):
    """A record for the run starting at ``keys[pos]`` (one key so far), not in the ring yet."""
    ps = st.pi_state
    rec = st.pi_records
    r = ps[i, IndexState.FREE_RECORD] - 1
    if r >= 0:
        ps[i, IndexState.FREE_RECORD] = rec[i, r, IndexRecord.POS] + 1
    else:
        r = ps[i, IndexState.NEXT_RECORD]
        ps[i, IndexState.NEXT_RECORD] = r + 1
    rec[i, r, IndexRecord.POS] = pos
    rec[i, r, IndexRecord.COUNT] = 1
    rec[i, r, IndexRecord.LIVE] = 1
    rec[i, r, IndexRecord.FRONT] = 0
    rec[i, r, IndexRecord.SLOT] = -1
    return r


@helper
def _evict_lru(st, off, mask, i, units):
    """Drop instance i's ``units`` least recently touched keys (stale entries and records
    holding no key's latest touch leave on the way; place-holders a run at a time)."""
    ps = st.pi_state
    ring = st.pi_ring
    rec = st.pi_records
    n_ring = ring.shape[1]
    while units > 0 and ps[i, IndexState.RING_LEN] > 0:
        head = ps[i, IndexState.RING_HEAD]
        e = ring[i, head]
        if e < 0:  # a run of -e keys no other request has: they only held places
            k = min(-e, units)
            ps[i, IndexState.SIZE] -= k
            units -= k
            if k < -e:  # the rest of the run stays at the head
                ring[i, head] = e + k
                continue
        elif rec[i, e, IndexRecord.SLOT] == head:  # the record's current entry (else: a stale one)
            if rec[i, e, IndexRecord.LIVE] > 0:  # its first key not passed yet goes if its latest touch is here
                t = rec[i, e, IndexRecord.FRONT]
                key = st.keys[rec[i, e, IndexRecord.POS] + t]
                h = table_find(st.pi_table, off, mask, key)
                if h >= 0 and st.pi_table[off + h, IndexRow.RECORD] == e + 1 \
                        and st.pi_table[off + h, IndexRow.OFFSET] == t:
                    table_delete_at(st.pi_table, off, mask, h)
                    _gmap_clear_bit(st.gmap, key, i)
                    st.pi_memo[RouterMemo.GMAP_VERSION] += 1
                    ps[i, IndexState.SIZE] -= 1
                    units -= 1
                    rec[i, e, IndexRecord.LIVE] -= 1
                rec[i, e, IndexRecord.FRONT] = t + 1
                if rec[i, e, IndexRecord.LIVE] > 0:  # the rest of the run stays at the head
                    continue
            _free_record(st, i, e)
        ps[i, IndexState.RING_HEAD] = _slot(head, np.int64(1), n_ring)
        ps[i, IndexState.RING_LEN] -= 1


@helper
def _compact_ring(st, i):
    """Keep only the entries of instance i's ring that matter, in order: place-holder runs
    and the current entries of records holding some key's latest touch (the others'
    records are freed).  Each kept entry holds a key or a place of the index, so at most
    ``capacity`` are kept and the ring has room again."""
    ps = st.pi_state
    ring = st.pi_ring
    rec = st.pi_records
    n_ring = ring.shape[1]
    head = ps[i, IndexState.RING_HEAD]
    kept = 0
    for j in range(ps[i, IndexState.RING_LEN]):
        p = _slot(head, j, n_ring)
        e = ring[i, p]
        if e >= 0:
            if rec[i, e, IndexRecord.SLOT] != p:  # stale
                continue
            if rec[i, e, IndexRecord.LIVE] == 0:
                _free_record(st, i, e)
                continue
        q = _slot(head, kept, n_ring)
        kept += 1
        ring[i, q] = e
        if e >= 0:
            rec[i, e, IndexRecord.SLOT] = q
    ps[i, IndexState.RING_LEN] = kept


@helper
def _ring_room(st, i):
    """Make room for one more entry in instance i's ring (compact it when full)."""
    if st.pi_state[i, IndexState.RING_LEN] == st.pi_ring.shape[1]:
        _compact_ring(st, i)


@helper
def _ring_push(st, i, e):
    """Append entry ``e`` to instance i's ring (which has room) -> its slot."""
    ps = st.pi_state
    tail = _slot(ps[i, IndexState.RING_HEAD], ps[i, IndexState.RING_LEN], st.pi_ring.shape[1])
    st.pi_ring[i, tail] = e
    ps[i, IndexState.RING_LEN] += 1
    return tail


@helper
def _tail_slot(st, i):
    """The slot of instance i's last ring entry (the ring is not empty)."""
    ps = st.pi_state
    return _slot(ps[i, IndexState.RING_HEAD], ps[i, IndexState.RING_LEN] - 1, st.pi_ring.shape[1])


@helper
def index_insert_unshared(st, capacity, rows_per_inst, i, count):
    """Insert ``count`` consecutive keys that no other request of the workload has into
    instance i's index.

    They can never be matched (only their own request carries them, and that request was
    routed before the insertion), so only their places in the LRU order matter: each takes
    one unit of capacity, evicting the least recently touched key if full, and leaves when
    it becomes the least recent itself.  Consecutive place-holders are one ring entry
    (-count), without records, hash rows or map bits.  Exactly equivalent to index_touch
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
        if ps[i, IndexState.RING_LEN] > 0:  # consecutive place-holders share one entry
            tail = _tail_slot(st, i)
            if ring[i, tail] < 0:
                ring[i, tail] -= c
                continue
        _ring_room(st, i)
        _ring_push(st, i, -c)


@helper
def index_touch(st, capacity, rows_per_inst, i, pos):
    """Mark the key ``keys[pos]`` as most recently routed to instance i, inserting it (and
    evicting the least recently touched key when the index holds ``capacity`` keys)."""
    ps = st.pi_state
    rec = st.pi_records
    table = st.pi_table
    off = i * rows_per_inst
    mask = rows_per_inst - 1
    key = st.keys[pos]
    h = table_find(table, off, mask, key)
    if h >= 0:  # its previous touch is no longer its latest
        rec[i, table[off + h, IndexRow.RECORD] - 1, IndexRecord.LIVE] -= 1
    else:
        if ps[i, IndexState.SIZE] >= capacity:
            _evict_lru(st, off, mask, i, np.int64(1))
        h, _ = table_probe(table, off, mask, key)
        table[off + h, IndexRow.KEY] = key
        ps[i, IndexState.SIZE] += 1
        _gmap_set_bit(st.gmap, key, i)
        st.pi_memo[RouterMemo.GMAP_VERSION] += 1
    if ps[i, IndexState.RING_LEN] > 0:  # the touch that continues the last record's run joins it
        tail = _tail_slot(st, i)
        e = st.pi_ring[i, tail]
        if e >= 0 and rec[i, e, IndexRecord.SLOT] == tail \
                and rec[i, e, IndexRecord.POS] + rec[i, e, IndexRecord.COUNT] == pos:
            table[off + h, IndexRow.RECORD] = e + 1
            table[off + h, IndexRow.OFFSET] = rec[i, e, IndexRecord.COUNT]
            rec[i, e, IndexRecord.COUNT] += 1
            rec[i, e, IndexRecord.LIVE] += 1
            return
    _ring_room(st, i)  # (before the new record: compaction frees records)
    r = _new_record(st, i, pos)
    rec[i, r, IndexRecord.SLOT] = _ring_push(st, i, r)
    table[off + h, IndexRow.RECORD] = r + 1
    table[off + h, IndexRow.OFFSET] = 0


@helper
def _touch_whole_record(st, rows_per_inst, i, pos, count):
    """Touch ``keys[pos:pos+count]`` in one step if they are exactly the run of one record
    whose keys are all still live (True), else do nothing (False).  Touching them one by
    one would move them, in that order, behind every other key: the record moves to the
    tail of the ring, its rows stay as they are."""
    rec = st.pi_records
    table = st.pi_table
    off = i * rows_per_inst
    h = table_find(table, off, rows_per_inst - 1, st.keys[pos])
    if h < 0 or table[off + h, IndexRow.OFFSET] != 0:
        return False
    r = table[off + h, IndexRow.RECORD] - 1
    if rec[i, r, IndexRecord.COUNT] != count or rec[i, r, IndexRecord.LIVE] != count:
        return False
    old = rec[i, r, IndexRecord.POS]
    for t in range(1, count):
        if st.keys[old + t] != st.keys[pos + t]:
            return False
    rec[i, r, IndexRecord.POS] = pos  # (same key values; later runs continue from here)
    if rec[i, r, IndexRecord.SLOT] == _tail_slot(st, i):
        return True  # already the most recent: the order does not change
    rec[i, r, IndexRecord.SLOT] = -1  # its entry becomes stale
    _ring_room(st, i)
    rec[i, r, IndexRecord.SLOT] = _ring_push(st, i, r)
    return True


@helper
def index_record_request(st, i, kstart, kcount):
    """Record the prompt keys ``keys[kstart:kstart+kcount]`` of a request routed to instance i,
    in order: each run of shared keys that is exactly a live record's in one step, other
    shared keys one by one, each run of unshared keys in one call."""
    capacity = st.settings[0]["prefix_index_capacity"]
    rows = st.settings[0]["prefix_index_slots"]
    shared = st.key_shared
    j = kstart
    end = kstart + kcount
    while j < end:
        run = j + 1
        while run < end and shared[run] == shared[j]:
            run += 1
        if not shared[j]:
            index_insert_unshared(st, capacity, rows, i, np.int64(run - j))
        elif not _touch_whole_record(st, rows, i, j, run - j):
            for k in range(j, run):
                index_touch(st, capacity, rows, i, k)
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


@helper
def forget_instance(st, i):
    """Instance i's index becomes empty (a terminated instance's row starts a new life
    with nothing cached, engine/autoscale.py): its keys leave the cluster map, its rows,
    ring and records are cleared."""
    rows = st.settings[0]["prefix_index_slots"]
    table = st.pi_table
    off = i * rows
    for h in range(off, off + rows):
        if not row_empty(table, h):
            _gmap_clear_bit(st.gmap, table[h, IndexRow.KEY], i)
            st.pi_memo[RouterMemo.GMAP_VERSION] += 1
        for c in range(table.shape[1]):
            table[h, c] = 0
    for c in range(st.pi_state.shape[1]):
        st.pi_state[i, c] = 0
