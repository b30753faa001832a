"""The router's view of each instance's prefix cache (SEMANTICS §8, prefix-affinity).

Per instance, an LRU index of at most ``capacity`` prefix-block keys the router has sent
there (updated with every key of each request it routes, most recent last).  A request's
affinity for instance i = the number of its *leading* block keys present in i's index.

Two structures, kept in sync:
- per-instance LRU: a node pool (``nodes``: key, prev, next; instance i owns
  ``[i*capacity, (i+1)*capacity)``) with a per-instance hash (key -> node) in
  ``node_slots``; head = least recent.  Touching a key moves it to the tail; inserting
  into a full index evicts the head.
- a cluster-wide map key -> bitmask of the instances whose index holds it
  (``gmap[row] = [key, mask word 0, mask word 1, ...]``, key -1 = empty row), so that the
  affinity of *every* instance is found with one lookup per leading key.

All tables use open addressing with linear probing and backward-shift deletion; key -1
marks an empty slot (prefix keys are never -1).
"""

import numpy as np

from .jit import helper

EMPTY = -1


@helper
def _home(key, mask):
    return (key ^ (key >> 29)) & mask


# ----------------------------------------------------------------------------- cluster map


@helper
def gmap_find(gmap, key):
    """Row of ``key`` in the cluster map, or -1."""
    mask = gmap.shape[0] - 1
    h = _home(key, mask)
    while True:
        k = gmap[h, 0]
        if k == EMPTY:
            return np.int64(-1)
        if k == key:
            return h
        h = (h + 1) & mask


@helper
def gmap_set_bit(gmap, key, inst):
    """Record that instance ``inst``'s index holds ``key``."""
    mask = gmap.shape[0] - 1
    h = _home(key, mask)
    while True:
        k = gmap[h, 0]
        if k == EMPTY:
            gmap[h, 0] = key
            for w in range(1, gmap.shape[1]):
                gmap[h, w] = 0
            break
        if k == key:
            break
        h = (h + 1) & mask
    gmap[h, 1 + inst // 64] |= np.int64(1) << (inst % 64)


@helper
def gmap_clear_bit(gmap, key, inst):
    """Record that instance ``inst``'s index no longer holds ``key``; drop empty rows."""
    mask = gmap.shape[0] - 1
    h = gmap_find(gmap, key)
    if h < 0:
        return
    gmap[h, 1 + inst // 64] &= ~(np.int64(1) << (inst % 64))
    for w in range(1, gmap.shape[1]):
        if gmap[h, w] != 0:
            return
    # backward-shift deletion of row h
    hole = h
    j = h
    while True:
        j = (j + 1) & mask
        k = gmap[j, 0]
        if k == EMPTY:
            break
        home = _home(k, mask)
        if hole <= j:
            stays = hole < home <= j
        else:
            stays = hole < home or home <= j
        if stays:
            continue
        for w in range(gmap.shape[1]):
            gmap[hole, w] = gmap[j, w]
        hole = j
    gmap[hole, 0] = EMPTY


# ----------------------------------------------------------------------------- per-instance LRU


@helper
def _node_find(node_slots, off, mask, key):
    """Node holding ``key`` in one instance's index hash, or -1 (slots hold node + 1)."""
    h = _home(key, mask)
    while True:
        j = 2 * (off + h)
        n1 = node_slots[j + 1]
        if n1 == 0:
            return np.int64(-1)
        if node_slots[j] == key:
            return n1 - 1
        h = (h + 1) & mask


@helper
def _node_insert(node_slots, off, mask, key, node):
    h = _home(key, mask)
    while node_slots[2 * (off + h) + 1] != 0:
        h = (h + 1) & mask
    node_slots[2 * (off + h)] = key
    node_slots[2 * (off + h) + 1] = node + 1


@helper
def _node_delete(node_slots, off, mask, key):
    h = _home(key, mask)
    while True:
        j = 2 * (off + h)
        if node_slots[j + 1] == 0:
            return
        if node_slots[j] == key:
            break
        h = (h + 1) & mask
    hole = h
    k = h
    while True:
        k = (k + 1) & mask
        jk = 2 * (off + k)
        if node_slots[jk + 1] == 0:
            break
        home = _home(node_slots[jk], mask)
        if hole <= k:
            stays = hole < home <= k
        else:
            stays = hole < home or home <= k
        if stays:
            continue
        jh = 2 * (off + hole)
        node_slots[jh] = node_slots[jk]
        node_slots[jh + 1] = node_slots[jk + 1]
        hole = k
    node_slots[2 * (off + hole)] = 0
    node_slots[2 * (off + hole) + 1] = 0


@helper
def _unlink(pi_state, i, nodes, n):
    p = nodes[n].prev
    x = nodes[n].next
    if p >= 0:
        nodes[p].next = x
    else:
        pi_state[i, 0] = x
    if x >= 0:
        nodes[x].prev = p
    else:
        pi_state[i, 1] = p


@helper
def _append(pi_state, i, nodes, n):
    t = pi_state[i, 1]
    nodes[n].prev = t
    nodes[n].next = -1
    if t >= 0:
        nodes[t].next = n
    else:
        pi_state[i, 0] = n
    pi_state[i, 1] = n


@helper
def index_touch(pi_state, nodes, node_slots, gmap, capacity, slots_per_inst, i, key):
    """Mark ``key`` as most recently routed to instance i (insert, evicting the LRU key
    when the index is full).  ``pi_state[i] = (head, tail, size)``; instance i's hash is
    ``slots_per_inst`` (a power of two >= 2*capacity) slots from slot i*slots_per_inst."""
    off = i * slots_per_inst
    mask = slots_per_inst - 1
    n = _node_find(node_slots, off, mask, key)
    if n >= 0:
        if pi_state[i, 1] != n:
            _unlink(pi_state, i, nodes, n)
            _append(pi_state, i, nodes, n)
        return
    if pi_state[i, 2] < capacity:
        n = i * capacity + pi_state[i, 2]
        pi_state[i, 2] += 1
    else:
        n = pi_state[i, 0]  # evict the least recently routed key
        _unlink(pi_state, i, nodes, n)
        old = nodes[n].key
        _node_delete(node_slots, off, mask, old)
        gmap_clear_bit(gmap, old, i)
    nodes[n].key = key
    _node_insert(node_slots, off, mask, key, n)
    gmap_set_bit(gmap, key, i)
    _append(pi_state, i, nodes, n)


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
