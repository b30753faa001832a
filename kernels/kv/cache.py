"""Paged KV cache with prefix caching (docs/semantics.md §6), one per instance, over the
State's flat tables.

Per instance i (a row of the instance table):
- blocks [kv_offset, kv_offset + kv_total) of the block table;
- a free list in LRU order: never-used ("virgin") blocks first, in index order, then the
  released blocks in release order (structs/dlist.py through the block table).
  Allocation takes from the head, release appends to the tail, and a freed block keeps
  its prefix key (that *is* the cache) until it is reused.  Virgin blocks are not linked
  (``kv_virgin_next`` marks them), so millions of blocks cost nothing to set up;
- the cache's index from a block key to the block holding it.  Key number q (position
  q of the workload's ``keys``) is looked up in one of two ways: a key whose value no
  other position carries (``key_shared[q] == 0``: content only its own request has)
  can only ever be registered and looked up by that request, so ``kv_slot[q]`` holds its
  block + 1 directly -- no hashing, and a request's slots are contiguous; every other
  key goes through the instance's prefix table (structs/hashtable.py rows of
  (key value, block + 1)) in rows [ht_offset, ht_offset + ht_mask] of ``kv_table``.
  Both give the same answers a single hash table would.  A block records the key
  number it caches (``key_index``, -1 = none).
- deferred registration: with event skipping on, an unshared key of a request that was
  never preempted is registered only when that request is preempted
  (``register_deferred_keys``), not when its block fills.  Nobody else can look it up,
  and the request itself looks keys up only when it is admitted again, after a
  preemption; before its first preemption none of its unshared keys can be registered
  already, so registering later gives the same blocks the same keys.  A completing request
  never registers them at all (nobody will ever ask).  This spares the engine a visit to
  every decode request at every block it fills (engine/calendar.py), and the eviction of
  such a block its key bookkeeping.

Request r's blocks are the first ``blocks_held`` entries of its slice
``req_blocks[block_start : block_start + block_cap]``.  Allocation is all-or-nothing.

Named and counted blocks.  Which block a request gets matters only once some block can
be found by its key: before that, every free block is as good as any other, and the
cache is just a count (``kv_allocated`` of ``kv_total``).  An instance starts *counted*
(``kv_named == 0``) when nothing can ever be found by key before a preemption -- prefix
caching off, or no key shared by two requests (with deferred registration, above) -- and
event skipping is on: requests then hold a number of blocks and nothing else (no block
table, free list or key slots are touched, and riding decode requests need no visit when
they take a new block: engine/calendar.py counts them).  The first preemption that must
register keys names the blocks (``name_blocks``): every held block gets an identity, the
rest become never-used blocks -- which is exactly the state a named cache would be in,
because no block carried a key.  An instance never goes back to counting.
"""

import numpy as np

from ..jit import helper, kernel
from ..structs.dlist import dl_push_back, dl_remove
from ..structs.prefetch import prefetch
from ..structs.hashtable import table_delete_at, table_find, table_probe

# ----------------------------------------------------------------------------- prefix table


@helper
def prefix_lookup(st, i, key):
    """Block of instance i holding prefix ``key``, or -1."""
    off = st.inst[i]["ht_offset"]
    h = table_find(st.kv_table, off, st.inst[i]["ht_mask"], key)
    if h < 0:
        return np.int64(-1)
    return st.kv_table[off + h, 1] - 1


@helper
def prefix_register(st, i, key, block):
    """Map ``key`` to ``block`` unless the key is already present; True if inserted."""
    off = st.inst[i]["ht_offset"]
    h, found = table_probe(st.kv_table, off, st.inst[i]["ht_mask"], key)
    if found:
        return False
    st.kv_table[off + h, 0] = key
    st.kv_table[off + h, 1] = block + 1
    return True


@helper
def prefix_forget(st, i, key, block):
    """Remove the entry ``key -> block``; no-op if the key maps elsewhere or is absent."""
    off = st.inst[i]["ht_offset"]
    mask = st.inst[i]["ht_mask"]
    h = table_find(st.kv_table, off, mask, key)
    if h >= 0 and st.kv_table[off + h, 1] == block + 1:
        table_delete_at(st.kv_table, off, mask, h)


@helper
def key_lookup(st, i, q):
    """Block of instance i caching key number q, or -1."""
    if st.key_shared[q] != 0:
        return prefix_lookup(st, i, st.keys[q])
    return np.int64(st.kv_slot[q]) - 1  # only q's own request (on one instance) asks


@helper
def key_deferred(st, r, q):
    """True if the registration of request r's key number q waits for r's preemption
    (module docstring: deferred registration)."""
    return (st.settings[0]["event_skipping"] != 0 and st.key_shared[q] == 0
            and st.reqs[r]["preemptions"] == 0)


@helper
def key_register(st, i, q, b):
    """Make block b the cache entry of key number q unless another block already holds
    that content; True if it did."""
    if st.key_shared[q] != 0:
        return prefix_register(st, i, st.keys[q], b)
    if st.kv_slot[q] != 0:
        return False
    st.kv_slot[q] = b + 1
    return True


@helper
def key_forget(st, i, q, b):
    """Remove block b as the cache entry of key number q (no-op if it is not)."""
    if st.key_shared[q] != 0:
        prefix_forget(st, i, st.keys[q], b)
    elif st.kv_slot[q] == b + 1:
        st.kv_slot[q] = 0


# ----------------------------------------------------------------------------- blocks


@helper
def kv_free_blocks(inst, i):
    """Free blocks of instance i (named: never used + released)."""
    return inst[i]["kv_total"] - inst[i]["kv_allocated"]


@helper
def name_blocks(st, i):
    """Give instance i's counted blocks identities (module docstring): the running
    requests' blocks, in batch order, become blocks kv_offset, kv_offset + 1, ...; the
    others never-used blocks.  Every running request must be up to date (riders synced)."""
    inst = st.inst
    reqs = st.reqs
    blocks = st.blocks
    b = inst[i]["kv_offset"]
    for k in range(inst[i]["batch_len"]):
        r = st.batch[i, k]
        start = reqs[r]["block_start"]
        for j in range(reqs[r]["blocks_held"]):
            st.req_blocks[start + j] = b
            blocks[b]["ref_count"] = 1
            blocks[b]["key_index"] = -1
            blocks[b]["lru_prev"] = -1
            blocks[b]["lru_next"] = -1
            b += 1
    inst[i]["kv_virgin_next"] = b
    inst[i]["free_head"] = -1
    inst[i]["free_tail"] = -1
    inst[i]["free_len"] = 0
    inst[i]["kv_named"] = 1


@helper
def _unlink_free(st, i, b):
    inst = st.inst
    dl_remove(st.blocks["lru_prev"], st.blocks["lru_next"], inst["free_head"], inst["free_tail"], inst["free_len"],
              i, b)


@helper
def _take_block(st, i):
    """Take the next free block (virgin first, else the LRU head), dropping its old key."""
    inst = st.inst
    blocks = st.blocks
    v = inst[i]["kv_virgin_next"]
    if v < inst[i]["kv_offset"] + inst[i]["kv_total"]:
        inst[i]["kv_virgin_next"] = v + 1
        b = v
        blocks[b]["key_index"] = -1  # the table is allocated with zeros (lazily mapped pages)
        blocks[b]["lru_prev"] = -1
        blocks[b]["lru_next"] = -1
    else:
        b = inst[i]["free_head"]
        _unlink_free(st, i, b)
        if inst[i]["free_head"] >= 0:  # the next allocation's block: long untouched, load it early
            prefetch(blocks, inst[i]["free_head"])
        q = np.int64(blocks[b]["key_index"])
        if q >= 0:  # evicting a cached block: forget its key
            key_forget(st, i, q, b)
            blocks[b]["key_index"] = -1
    blocks[b]["ref_count"] = 1
    inst[i]["kv_allocated"] += 1
    return b


@helper
def _note_peak(inst, i):
    if inst[i]["kv_allocated"] > inst[i]["kv_peak_allocated"]:
        inst[i]["kv_peak_allocated"] = inst[i]["kv_allocated"]


# ----------------------------------------------------------------------------- requests


@helper
def kv_grow(st, i, r, n):
    """Give request r KV room for ``n`` more tokens beyond ``computed``; all-or-nothing.

    Registers the key of every block these tokens fill -- prompt blocks and blocks filled
    by generated tokens alike (docs/semantics.md §6) -- when the allocation is made, as
    the reference does.  Returns True on success; on failure nothing changes.
    """
    reqs = st.reqs
    bs = st.settings[0]["block_size"]
    c = reqs[r]["computed"]
    held = reqs[r]["blocks_held"]
    need = (c + n + bs - 1) // bs - held
    named = st.inst[i]["kv_named"] != 0
    if need > 0:
        if need > kv_free_blocks(st.inst, i):
            return False
        if named:
            start = reqs[r]["block_start"]
            for k in range(need):
                st.req_blocks[start + held + k] = _take_block(st, i)
        else:
            st.inst[i]["kv_allocated"] += need
        reqs[r]["blocks_held"] = held + need
        _note_peak(st.inst, i)
    if named and st.settings[0]["prefix_caching"] != 0:  # (counted: no key is registered yet)
        # blocks completed by these tokens: [c // bs, (c + n) // bs), as far as keys exist
        last = min((c + n) // bs, reqs[r]["key_count"])
        # these blocks are either taken just now or the partly filled last one: never keyed
        # yet (cache hits attached at admission lie before c // bs)
        block_key = st.blocks["key_index"]
        for j in range(c // bs, last):
            q = reqs[r]["key_start"] + j
            if key_deferred(st, r, q):
                continue
            b = np.int64(st.req_blocks[reqs[r]["block_start"] + j])
            if key_register(st, i, q, b):
                block_key[b] = q
            # else another block already caches this content: leave this one unkeyed
    return True


@helper
def kv_admit(st, i, r, budget, cap):
    """Admit waiting request r: attach its cached prefix blocks and allocate its first chunk.

    The chunk is the rest of ``prefill_target`` after the cache hits (at most
    floor((target - 1) / bs) blocks are reused, so the last token is always computed),
    capped by ``cap`` (long-prefill threshold, 0 = none) and ``budget``.  All-or-nothing:
    returns (n tokens to compute, cached tokens), or (-1, 0) if the blocks are not free.
    """
    reqs = st.reqs
    inst = st.inst
    bs = st.settings[0]["block_size"]
    target = reqs[r]["prefill_target"]
    start = reqs[r]["block_start"]
    block_ref = st.blocks["ref_count"]
    hits = 0
    hits_free = 0
    if st.settings[0]["prefix_caching"] != 0 and inst[i]["kv_named"] != 0:  # counted: nothing to find
        max_hits = min(reqs[r]["key_count"], (target - 1) // bs)
        if st.settings[0]["compat"] != 0 and reqs[r]["generated"] == 0:
            # the reference reuses every cached full block of the prompt: a block-aligned,
            # fully cached prompt is admitted with nothing to compute (docs/semantics.md §11)
            max_hits = min(reqs[r]["key_count"], target // bs)
        kstart = reqs[r]["key_start"]
        while hits < max_hits:
            b = key_lookup(st, i, kstart + hits)
            if b < 0:
                break
            st.req_blocks[start + hits] = b  # tentative: blocks_held still 0
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
    for k in range(hits):
        b = np.int64(st.req_blocks[start + k])
        if block_ref[b] == 0:
            _unlink_free(st, i, b)
            inst[i]["kv_allocated"] += 1
        block_ref[b] += 1
    reqs[r]["blocks_held"] = hits
    reqs[r]["computed"] = cached
    if not kv_grow(st, i, r, n):  # cannot happen: availability was checked above
        return np.int64(-1), np.int64(0)
    _note_peak(inst, i)
    return n, cached


@helper
def kv_forget_chunk(st, i, r, c, n):
    """Unregister the keys request r registered for the tokens [c, c + n) of this step
    (a prefill chunk or a decode token), before a preemption frees those blocks
    un-computed (a victim chosen after it was served).  Without this, a later request
    could count never-computed KV as cached."""
    reqs = st.reqs
    bs = st.settings[0]["block_size"]
    if st.inst[i]["kv_named"] == 0:
        return  # counted: no key is registered
    last = min((c + n) // bs, reqs[r]["key_count"])
    block_key = st.blocks["key_index"]
    for j in range(c // bs, min(last, reqs[r]["blocks_held"])):
        b = np.int64(st.req_blocks[reqs[r]["block_start"] + j])
        q = np.int64(block_key[b])
        if q >= 0:
            key_forget(st, i, q, b)
            block_key[b] = -1


@helper
def register_deferred_keys(st, i, r):
    """Register the deferred keys of the blocks request r has filled (before r, never
    preempted so far, is preempted and releases them).  Names the instance's blocks first
    if they are counted."""
    if st.settings[0]["prefix_caching"] == 0:
        return
    if st.inst[i]["kv_named"] == 0:
        name_blocks(st, i)
    reqs = st.reqs
    bs = st.settings[0]["block_size"]
    block_key = st.blocks["key_index"]
    last = min(reqs[r]["computed"] // bs, reqs[r]["key_count"], reqs[r]["blocks_held"])
    for j in range(last):
        q = reqs[r]["key_start"] + j
        if key_deferred(st, r, q):
            b = np.int64(st.req_blocks[reqs[r]["block_start"] + j])
            if key_register(st, i, q, b):
                block_key[b] = q


@helper
def kv_release(st, i, r):
    """Release all of request r's blocks, last to first (its tail is evicted first)."""
    reqs = st.reqs
    inst = st.inst
    if inst[i]["kv_named"] == 0:
        inst[i]["kv_allocated"] -= reqs[r]["blocks_held"]
        reqs[r]["blocks_held"] = 0
        return
    start = reqs[r]["block_start"]
    block_ref = st.blocks["ref_count"]
    prev = st.blocks["lru_prev"]
    nxt = st.blocks["lru_next"]
    for j in range(reqs[r]["blocks_held"] - 1, -1, -1):
        if j >= 8:  # rows touched long ago: start loading the ones 8 steps ahead of the walk
            prefetch(st.blocks, st.req_blocks[start + j - 8])
        b = np.int64(st.req_blocks[start + j])
        block_ref[b] -= 1
        if block_ref[b] == 0:
            dl_push_back(prev, nxt, inst["free_head"], inst["free_tail"], inst["free_len"], i, b)
            inst[i]["kv_allocated"] -= 1
    reqs[r]["blocks_held"] = 0


@kernel
def kv_conserved(st, i):
    """Block conservation by recount: named, blocks with ref > 0 == kv_allocated, and
    allocated + free == total; counted, the blocks the running requests' KV tokens fill
    (as of the instance's next step; a riding request's count is derived, engine/
    calendar.py) == kv_allocated."""
    inst = st.inst
    if inst[i]["kv_named"] == 0:
        bs = st.settings[0]["block_size"]
        held = 0
        for k in range(inst[i]["batch_len"]):
            r = st.batch[i, k]
            c = st.reqs[r]["computed"] + max(0, inst[i]["steps"] - st.reqs[r]["sync_step"])
            held += (c + bs - 1) // bs
        return held == inst[i]["kv_allocated"] and held <= inst[i]["kv_total"]
    lo = inst[i]["kv_offset"]
    used = 0
    ref = st.blocks["ref_count"]
    for b in range(lo, lo + inst[i]["kv_total"]):
        if ref[b] > 0:
            used += 1
    free = inst[i]["kv_offset"] + inst[i]["kv_total"] - inst[i]["kv_virgin_next"] + inst[i]["free_len"]
    return used == inst[i]["kv_allocated"] and used + free == inst[i]["kv_total"]
