"""The router's view of each instance's prefix cache (SEMANTICS §8, prefix-affinity).

Per instance, an LRU index of at most ``capacity`` prefix-block keys the router has sent
there (updated with every key of each request it routes, most recent last).  A request's
affinity for instance i = the number of its *leading* block keys present in i's index.

Two structures, kept in sync:
- per-instance LRU: a hash of (key, last-touch stamp) plus a ring of touch records (see
  "per-instance LRU" below);
- a cluster-wide map key -> bitmask of the instances whose index holds it
  (``gmap[row] = [key, mask word 0, mask word 1, ...]``, key -1 = empty row), so that the
  affinity of *every* instance is found with one lookup per leading key.

All tables use open addressing with linear probing and backward-shift deletion; key -1
marks an empty slot (prefix keys are never -1).
"""

import numpy as np

from .jit import helper, kernel
from .pairtable import pair_delete_at, pair_find, pair_insert_new


@helper
def _home(key, mask):
    return (key ^ (key >> 29)) & mask


# ----------------------------------------------------------------------------- cluster map
# gmap[row] = [key, mask word 0, mask word 1, ...]; a row whose mask words are all zero is
# empty (rows are removed as soon as no instance holds their key), so np.zeros is an empty
# map and nothing needs initializing.


@helper
def _row_used(gmap, h):
    for w in range(1, gmap.shape[1]):
        if gmap[h, w] != 0:
            return True
    return False


@helper
def gmap_find(gmap, key):
    """Row of ``key`` in the cluster map, or -1."""
    mask = gmap.shape[0] - 1
    h = _home(key, mask)
    while _row_used(gmap, h):
        if gmap[h, 0] == key:
            return h
        h = (h + 1) & mask
    return np.int64(-1)


@helper
def gmap_set_bit(gmap, key, inst):
    """Record that instance ``inst``'s index holds ``key``."""
    mask = gmap.shape[0] - 1
    h = _home(key, mask)
    while _row_used(gmap, h) and gmap[h, 0] != key:
        h = (h + 1) & mask
    gmap[h, 0] = key
    gmap[h, 1 + inst // 64] |= np.int64(1) << (inst % 64)


@helper
def gmap_clear_bit(gmap, key, inst):
    """Record that instance ``inst``'s index no longer holds ``key``; drop empty rows."""
    mask = gmap.shape[0] - 1
    h = gmap_find(gmap, key)
    if h < 0:
        return
    gmap[h, 1 + inst // 64] &= ~(np.int64(1) << (inst % 64))
    if _row_used(gmap, h):
        return
    # backward-shift deletion of the now empty row h
    hole = h
    j = h
    while True:
        j = (j + 1) & mask
        if not _row_used(gmap, j):
            break
        home = _home(gmap[j, 0], mask)
        if hole <= j:
            stays = hole < home <= j
        else:
            stays = hole < home or home <= j
        if stays:
            continue
        for w in range(gmap.shape[1]):
            gmap[hole, w] = gmap[j, w]
        hole = j
    for w in range(gmap.shape[1]):
        gmap[hole, w] = 0


# ----------------------------------------------------------------------------- per-instance LRU
# Instance i's index: a hash of (key, stamp) pairs in slots [i*S, (i+1)*S) of ``slots``
# (stamp 0 = empty slot) and a ring of (key, stamp) touch records in ring[i].  A touch
# writes a fresh stamp into the key's slot and appends a record; the least recently
# touched key is the first ring record whose stamp still matches its slot (older records
# of re-touched keys are stale and skipped).  This is exact LRU with one hash probe per
# touch and no linked list.  pi_state[i] = (size, ring head, ring length, stamp counter).

PI_SIZE = 0
PI_RING_HEAD = 1
PI_RING_LEN = 2
PI_STAMP = 3
PHANTOM = -1  # ring-record stamp of a run of unshared keys; the key field holds the run length


@helper
def _evict_lru(pi_state, slots, ring, gmap, off, mask, i):
    """Drop instance i's least recently touched key (pops stale ring records on the way)."""
    n_ring = ring.shape[1]
    while pi_state[i, PI_RING_LEN] > 0:
        head = pi_state[i, PI_RING_HEAD]
        key = ring[i, head, 0]
        stamp = ring[i, head, 1]
        pi_state[i, PI_RING_HEAD] = (head + 1) % n_ring
        pi_state[i, PI_RING_LEN] -= 1
        if stamp == PHANTOM:  # a run of keys no other request has: they only held places
            if key > 1:  # evict one of the run, keep the rest at the head
                ring[i, head, 0] = key - 1
                pi_state[i, PI_RING_HEAD] = head
                pi_state[i, PI_RING_LEN] += 1
            pi_state[i, PI_SIZE] -= 1
            return
        h = pair_find(slots, off, mask, key)
        if h >= 0 and slots[2 * (off + h) + 1] == stamp:
            pair_delete_at(slots, off, mask, h)
            gmap_clear_bit(gmap, key, i)
            pi_state[i, PI_SIZE] -= 1
            return


@helper
def _compact_ring(pi_state, slots, ring, off, mask, i):
    """Keep only the live records of instance i's ring (in order)."""
    n_ring = ring.shape[1]
    head = pi_state[i, PI_RING_HEAD]
    n = pi_state[i, PI_RING_LEN]
    kept = 0
    for j in range(n):
        p = (head + j) % n_ring
        key = ring[i, p, 0]
        stamp = ring[i, p, 1]
        live = stamp == PHANTOM
        if not live:
            h = pair_find(slots, off, mask, key)
            live = h >= 0 and slots[2 * (off + h) + 1] == stamp
        if live:
            q = (head + kept) % n_ring
            ring[i, q, 0] = key
            ring[i, q, 1] = stamp
            kept += 1
    pi_state[i, PI_RING_LEN] = kept


@helper
def _ring_append(pi_state, slots, ring, off, mask, i, key, stamp):
    n_ring = ring.shape[1]
    if pi_state[i, PI_RING_LEN] == n_ring:
        _compact_ring(pi_state, slots, ring, off, mask, i)
    tail = (pi_state[i, PI_RING_HEAD] + pi_state[i, PI_RING_LEN]) % n_ring
    ring[i, tail, 0] = key
    ring[i, tail, 1] = stamp
    pi_state[i, PI_RING_LEN] += 1


@helper
def index_insert_unshared(pi_state, slots, ring, gmap, capacity, slots_per_inst, i, key):
    """Insert a key that no other request of the workload has into instance i's index.

    It can never be matched (only its own request carries it, and that request was routed
    before the insertion), so only its place in the LRU order matters: it takes one unit
    of capacity, evicting the least recently touched key if full, and leaves when it
    becomes the least recent itself.  Consecutive place-holders are one ring record
    (count, PHANTOM), without hash entries or map bits.  Exactly equivalent to index_touch
    for such keys, at the cost of a counter increment."""
    off = i * slots_per_inst
    mask = slots_per_inst - 1
    if pi_state[i, PI_SIZE] >= capacity:
        _evict_lru(pi_state, slots, ring, gmap, off, mask, i)
    pi_state[i, PI_SIZE] += 1
    n = pi_state[i, PI_RING_LEN]
    if n > 0:  # consecutive place-holders share one ring record: (count, PHANTOM)
        tail = (pi_state[i, PI_RING_HEAD] + n - 1) % ring.shape[1]
        if ring[i, tail, 1] == PHANTOM:
            ring[i, tail, 0] += 1
            return
    _ring_append(pi_state, slots, ring, off, mask, i, np.int64(1), PHANTOM)


@helper
def index_touch(pi_state, slots, ring, gmap, capacity, slots_per_inst, i, key):
    """Mark ``key`` as most recently routed to instance i, inserting it (and evicting the
    least recently touched key when the index holds ``capacity`` keys)."""
    off = i * slots_per_inst
    mask = slots_per_inst - 1
    stamp = pi_state[i, PI_STAMP] + 1
    pi_state[i, PI_STAMP] = stamp
    h = pair_find(slots, off, mask, key)
    if h >= 0:
        slots[2 * (off + h) + 1] = stamp
    else:
        if pi_state[i, PI_SIZE] >= capacity:
            _evict_lru(pi_state, slots, ring, gmap, off, mask, i)
        pair_insert_new(slots, off, mask, key, stamp)
        pi_state[i, PI_SIZE] += 1
        gmap_set_bit(gmap, key, i)
    _ring_append(pi_state, slots, ring, off, mask, i, key, stamp)


@helper
def leading_matches(gmap, keys, kstart, kcount, inst, alive, counts):
    """For every active instance, the number of leading keys ``keys[kstart:kstart+kcount]``
    its index holds -> ``counts[i]`` (0 for inactive instances).  ``alive`` is scratch
    with one int64 per mask word; one cluster-map lookup per leading key."""
    n_words = alive.shape[0]
    for w in range(n_words):
        alive[w] = 0
    for i in range(counts.shape[0]):
        counts[i] = 0
        if inst[i].active != 0:
            alive[i // 64] |= np.int64(1) << (i % 64)
    any_alive = counts.shape[0] > 0
    depth = 0
    while any_alive and depth < kcount:
        row = gmap_find(gmap, keys[kstart + depth])
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


@kernel
def mark_shared_keys(keys):
    """(flags, distinct): flags[j] = 1 if keys[j] occurs more than once in ``keys`` (in two
    requests' prompts), else 0; distinct = how many different keys are shared.  Counting
    with an open-addressing table of 2^k >= 2n slots."""
    n = keys.shape[0]
    size = 1
    while size < 2 * n:
        size *= 2
    mask = size - 1
    table_key = np.empty(size, np.int64)
    table_count = np.zeros(size, np.int64)
    slot_of = np.empty(n, np.int64)
    for j in range(n):
        k = keys[j]
        h = _home(k, mask)
        while table_count[h] != 0 and table_key[h] != k:
            h = (h + 1) & mask
        table_key[h] = k
        table_count[h] += 1
        slot_of[j] = h
    out = np.zeros(n, np.uint8)
    for j in range(n):
        if table_count[slot_of[j]] > 1:
            out[j] = 1
    n_distinct = 0
    for h in range(size):
        if table_count[h] > 1:
            n_distinct += 1
    return out, n_distinct
