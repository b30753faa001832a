"""Paged KV cache with prefix caching (SEMANTICS §6), one per instance, over flat tables.

Per instance ``i`` (a row of INSTANCE_DT):
- blocks ``[kv_offset, kv_offset + kv_total)`` of the KV_BLOCK_DT table;
- a free list in LRU order: never-used ("virgin") blocks first, in index order, then the
  released blocks in release order.  Allocation takes from the head, release appends to
  the tail, a freed block keeps its prefix key (that *is* the cache) until it is reused.
  Virgin blocks are not linked (``kv_virgin_next`` marks them), so a cluster with millions
  of blocks costs nothing to set up;
- an open-addressing hash table (linear probing, backward-shift deletion) mapping a
  prefix key to the block holding it: ``ht_mask + 1`` slots from slot ``ht_offset`` of
  ``slots``, each a (key, block + 1) pair of int64 (block 0 = empty, so the table can be
  allocated with np.zeros and probing never touches the block table).

A request's blocks are the first ``blocks_held`` entries of its slice
``req_blocks[block_start : block_start + block_cap]``.  Allocation is all-or-nothing.
"""

import numpy as np
from .jit import helper, kernel
from .pairtable import pair_delete_at, pair_find, pair_insert_new


# ----------------------------------------------------------------------------- hash table
# Instance i's prefix table maps a key to ``block + 1`` (kernels.pairtable).


@helper
def ht_find(slots, off, mask, key):
    """Block holding prefix ``key`` in one instance's table, or -1."""
    h = pair_find(slots, off, mask, key)
    if h < 0:
        return np.int64(-1)
    return slots[2 * (off + h) + 1] - 1


@helper
def ht_insert_new(slots, off, mask, key, block):
    """Map ``key`` to ``block`` unless the key is already present; True if inserted."""
    return pair_insert_new(slots, off, mask, key, block + 1)


@helper
def ht_delete(slots, off, mask, key, block):
    """Remove the entry ``key -> block``; no-op if the key maps elsewhere or is absent."""
    h = pair_find(slots, off, mask, key)
    if h >= 0 and slots[2 * (off + h) + 1] == block + 1:
        pair_delete_at(slots, off, mask, h)


# ----------------------------------------------------------------------------- free list


@helper
def _lru_remove(inst, i, lru_prev, lru_next, b):
    """Unlink block b from instance i's free list."""
    p = lru_prev[b]
    n = lru_next[b]
    if p >= 0:
        lru_next[p] = n
    else:
        inst[i].kv_lru_head = n
    if n >= 0:
        lru_prev[n] = p
    else:
        inst[i].kv_lru_tail = p
    lru_prev[b] = -1
    lru_next[b] = -1
    inst[i].kv_lru_len -= 1


@helper
def _lru_append(inst, i, lru_prev, lru_next, b):
    """Link block b at the tail of instance i's free list (evicted last)."""
    t = inst[i].kv_lru_tail
    lru_prev[b] = t
    lru_next[b] = -1
    if t >= 0:
        lru_next[t] = b
    else:
        inst[i].kv_lru_head = b
    inst[i].kv_lru_tail = b
    inst[i].kv_lru_len += 1


@helper
def kv_free_blocks(inst, i):
    """Free blocks of instance i: never used + released."""
    return inst[i].kv_offset + inst[i].kv_total - inst[i].kv_virgin_next + inst[i].kv_lru_len


@helper
def _take_block(inst, i, blocks, slots):
    """Take the next free block (virgin first, else the LRU head), dropping its old key."""
    v = inst[i].kv_virgin_next
    if v < inst[i].kv_offset + inst[i].kv_total:
        inst[i].kv_virgin_next = v + 1
        b = v
        blocks[b].key = -1  # the table is allocated with zeros (lazily mapped pages)
        blocks[b].lru_prev = -1
        blocks[b].lru_next = -1
    else:
        b = inst[i].kv_lru_head
        _lru_remove(inst, i, blocks["lru_prev"], blocks["lru_next"], b)
        key = blocks[b].key
        if key != -1:  # evicting a cached prefix block: forget its key
            ht_delete(slots, inst[i].ht_offset, inst[i].ht_mask, key, b)
            blocks[b].key = -1
    blocks[b].ref_count = 1
    inst[i].kv_allocated += 1
    return b


# ----------------------------------------------------------------------------- requests


@helper
def kv_grow(inst, i, blocks, slots, reqs, r, req_blocks, keys, bs, prefix_caching, n):
    """Give request r KV room for ``n`` more tokens beyond ``computed``; all-or-nothing.

    Registers the prefix keys of prompt blocks that become full.  Returns True on success;
    on failure nothing changes.  Mutates inst[i], blocks, slots, reqs[r], req_blocks.
    """
    c = reqs[r].computed
    held = reqs[r].blocks_held
    need = (c + n + bs - 1) // bs - held
    if need > 0:
        if need > kv_free_blocks(inst, i):
            return False
        start = reqs[r].block_start
        for k in range(need):
            req_blocks[start + held + k] = _take_block(inst, i, blocks, slots)
        reqs[r].blocks_held = held + need
        used = inst[i].kv_allocated
        if used > inst[i].kv_peak_allocated:
            inst[i].kv_peak_allocated = used
    if prefix_caching and c < reqs[r].prompt_len:
        # full prompt blocks completed by this chunk: [c // bs, min(c + n, L) // bs)
        last = min(c + n, reqs[r].prompt_len) // bs
        if last > reqs[r].key_count:
            last = reqs[r].key_count
        block_key = blocks["key"]
        off = inst[i].ht_offset
        mask = inst[i].ht_mask
        for j in range(c // bs, last):
            b = req_blocks[reqs[r].block_start + j]
            if block_key[b] != -1:
                continue  # a cache hit: already registered
            key = keys[reqs[r].key_start + j]
            if ht_insert_new(slots, off, mask, key, b):
                block_key[b] = key
            # else another block already caches this prefix: leave this one unkeyed
    return True


@helper
def kv_admit(inst, i, blocks, slots, reqs, r, req_blocks, keys, bs, prefix_caching, budget, cap):
    """Admit waiting request r: attach its cached prefix blocks and allocate its first chunk.

    The chunk is the rest of ``prefill_target`` after the cache hits (at most
    floor((target - 1) / bs) blocks are reused, so the last token is always computed),
    capped by ``cap`` (long-prefill threshold, 0 = none) and ``budget``.  All-or-nothing:
    returns (n tokens to compute, cached tokens), or (-1, 0) if the blocks are not free.
    """
    target = reqs[r].prefill_target
    start = reqs[r].block_start
    block_ref = blocks["ref_count"]
    hits = 0
    hits_free = 0
    if prefix_caching:
        off = inst[i].ht_offset
        mask = inst[i].ht_mask
        max_hits = min(reqs[r].key_count, (target - 1) // bs)
        kstart = reqs[r].key_start
        while hits < max_hits:
            b = ht_find(slots, off, mask, keys[kstart + hits])
            if b < 0:
                break
            req_blocks[start + hits] = b  # tentative: blocks_held still 0
            if block_ref[b] == 0:
                hits_free += 1
            hits += 1
    cached = hits * bs
    n = target - cached
    if cap > 0 and n > cap:
        n = cap
    if n > budget:
        n = budget
    need = (cached + n + bs - 1) // bs - hits
    if need > kv_free_blocks(inst, i) - hits_free:
        return np.int64(-1), np.int64(0)
    lru_prev = blocks["lru_prev"]
    lru_next = blocks["lru_next"]
    for k in range(hits):
        b = req_blocks[start + k]
        if block_ref[b] == 0:
            _lru_remove(inst, i, lru_prev, lru_next, b)
            inst[i].kv_allocated += 1
        block_ref[b] += 1
    reqs[r].blocks_held = hits
    reqs[r].computed = cached
    ok = kv_grow(inst, i, blocks, slots, reqs, r, req_blocks, keys, bs, prefix_caching, n)
    if not ok:  # cannot happen: availability was checked above
        return np.int64(-1), np.int64(0)
    used = inst[i].kv_allocated
    if used > inst[i].kv_peak_allocated:
        inst[i].kv_peak_allocated = used
    return n, cached


@helper
def kv_forget_chunk(inst, i, blocks, slots, reqs, r, req_blocks, c, n, bs):
    """Unregister the prefix keys request r registered for the chunk [c, c + n) of this
    step, before a preemption frees those blocks un-computed (a victim chosen after it was
    served).  Without this, a later request could count never-computed KV as cached."""
    last = min(c + n, reqs[r].prompt_len) // bs
    if last > reqs[r].key_count:
        last = reqs[r].key_count
    for j in range(c // bs, min(last, reqs[r].blocks_held)):
        b = req_blocks[reqs[r].block_start + j]
        key = blocks[b].key
        if key != -1:
            ht_delete(slots, inst[i].ht_offset, inst[i].ht_mask, key, b)
            blocks[b].key = -1


@helper
def kv_release(inst, i, blocks, reqs, r, req_blocks):
    """Release all of request r's blocks, last to first (its tail is evicted first)."""
    start = reqs[r].block_start
    block_ref = blocks["ref_count"]
    lru_prev = blocks["lru_prev"]
    lru_next = blocks["lru_next"]
    for j in range(reqs[r].blocks_held - 1, -1, -1):
        b = req_blocks[start + j]
        block_ref[b] -= 1
        if block_ref[b] == 0:
            _lru_append(inst, i, lru_prev, lru_next, b)
            inst[i].kv_allocated -= 1
    reqs[r].blocks_held = 0


@kernel
def kv_conserved(inst, i, blocks):
    """BC-13 check by recount: blocks with ref > 0 == kv_allocated and allocated + free == total."""
    lo = inst[i].kv_offset
    hi = lo + inst[i].kv_total
    used = 0
    for b in range(lo, hi):
        if blocks[b].ref_count > 0:
            used += 1
    return used == inst[i].kv_allocated and used + kv_free_blocks(inst, i) == inst[i].kv_total
