"""Paged KV cache with prefix caching (docs/semantics.md §6), one per instance, over the
State's flat tables.

Per instance i (a row of the instance table):
- blocks [kv_offset, kv_offset + kv_total) of the block table;
- a free list in LRU order: never-used blocks first, then the released blocks in release
  order.  Allocation takes from the head, release appends to the tail, and a freed block
  keeps its prefix key (that *is* the cache) until it is reused.  Only named free blocks
  are linked (structs/dlist.py through the block table); the others are counted in the
  gaps (below: named and anonymous blocks), so millions of blocks cost nothing to set up;
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

Named and anonymous blocks.  Which block a request gets matters only for a block that
can be found by its key: every unkeyed free block is as good as any other.  So a block
has an identity (a block id, a row of the block table) only where it may ever carry a
key: request r's blocks at positions < ``named_upto`` (the positions up to its last
shared key; all of them once it has been preempted, or when event skipping is off).  Its
other blocks are *anonymous*: counted in ``kv_allocated``, nothing else.  The free list
keeps the LRU order of all free blocks: named free blocks (the keyed ones -- every one
when event skipping is off -- in the block table's ``lru`` links) with the anonymous free
blocks counted in the gaps -- ``head_units``
before the first one, ``gap_after`` after each -- so taking k anonymous blocks from the
head costs O(1) per named block passed, and a released request's anonymous tail is one
addition.  A named block that is freed unkeyed becomes an anonymous unit (its id goes
to ``id_pool``); a position that needs an id takes one from the pool or the never-used
ids (``kv_virgin_next``).  Riding decode requests whose remaining blocks are anonymous
need no visit when they take one (engine/calendar.py counts them).  A preemption names
the victim's filled anonymous blocks first (``register_deferred_keys``).
"""

import numpy as np

from ..jit import helper, kernel

LOADING = -2  # kv_admit's answer for a request whose blocks must first load from a tier
from ..schema import ALL_NAMED, KV_MEMO_BLOCKS, N_KV_MEMO, N_TIERS, KvMemo
from ..structs.dlist import dl_push_back, dl_remove
from ..structs.prefetch import prefetch
from ..structs.hashtable import table_delete_at, table_find, table_probe
from .tiers import count_tier_hits, load_time_us, tier_find, tier_pin, tier_store, tier_touch

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
    st.inst[i]["ht_changes"] += 1
    return True


@helper
def prefix_forget(st, i, key, block):
    """Remove the entry ``key -> block``; no-op if the key maps elsewhere or is absent."""
    off = st.inst[i]["ht_offset"]
    mask = st.inst[i]["ht_mask"]
    h = table_find(st.kv_table, off, mask, key)
    if h >= 0 and st.kv_table[off + h, 1] == block + 1:
        table_delete_at(st.kv_table, off, mask, h)
        st.inst[i]["ht_changes"] += 1


@helper
def key_lookup(st, i, q):
    """Block of instance i caching key number q, or -1."""
    if st.key_shared[q] != 0:
        return prefix_lookup(st, i, st.keys[q])
    return np.int64(st.kv_slot[q]) - 1  # only q's own request (on one instance) asks


@helper
def is_prefill_leg(st, r):
    """True if request row r is a P/D request's prefill leg (engine/disaggregation.py)."""
    base = st.settings[0]["pd_base"]
    return base > 0 and r >= base


@helper
def key_deferred(st, r, q):
    """True if the registration of request r's key number q waits for r's preemption
    (module docstring: deferred registration) -- or never comes: a P/D prefill leg never
    registers an unshared key (its request, on another instance, is the key's only other
    user, and an unshared key's entry is one slot for the whole cluster)."""
    if st.key_shared[q] != 0:
        return False
    if st.settings[0]["event_skipping"] != 0 and st.reqs[r]["preemptions"] == 0:
        return True
    return is_prefill_leg(st, r)


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
    """Free blocks of instance i."""
    return inst[i]["kv_total"] - inst[i]["kv_allocated"]


@helper
def _new_id(st, i):
    """An unassigned block id of instance i (the pool first, else a never-used one), as a
    fresh row."""
    inst = st.inst
    blocks = st.blocks
    b = inst[i]["id_pool"]
    if b >= 0:
        inst[i]["id_pool"] = blocks[b]["lru_next"]
    else:
        b = inst[i]["kv_virgin_next"]
        inst[i]["kv_virgin_next"] = b + 1
    blocks[b]["key_index"] = -1  # the table is allocated with zeros (lazily mapped pages)
    blocks[b]["lru_prev"] = -1
    blocks[b]["lru_next"] = -1
    blocks[b]["gap_after"] = 0
    return b


@helper
def _retire_id(st, i, b):
    """Block b (free, unkeyed) becomes an anonymous unit: its id goes back to the pool."""
    st.blocks[b]["ref_count"] = 0
    st.blocks[b]["lru_next"] = st.inst[i]["id_pool"]
    st.inst[i]["id_pool"] = b


@helper
def _unlink_free(st, i, b):
    """Take named free block b out of the free list; the anonymous blocks after it now
    follow its predecessor."""
    inst = st.inst
    blocks = st.blocks
    p = blocks[b]["lru_prev"]
    if p >= 0:
        blocks[p]["gap_after"] += blocks[b]["gap_after"]
    else:
        inst[i]["head_units"] += blocks[b]["gap_after"]
    blocks[b]["gap_after"] = 0
    dl_remove(blocks["lru_prev"], blocks["lru_next"], inst["free_head"], inst["free_tail"], inst["free_len"], i, b)


@helper
def _append_free(st, i, units):
    """Append ``units`` anonymous free blocks to the free list's tail."""
    t = st.inst[i]["free_tail"]
    if t >= 0:
        st.blocks[t]["gap_after"] += units
    else:
        st.inst[i]["head_units"] += units


@helper
def _take_head(st, i):
    """Take the free list's first block: -1 for an anonymous one, else the named block
    (its old key dropped: an eviction)."""
    inst = st.inst
    if inst[i]["head_units"] > 0:
        inst[i]["head_units"] -= 1
        return np.int64(-1)
    blocks = st.blocks
    b = np.int64(inst[i]["free_head"])
    _unlink_free(st, i, b)
    q = np.int64(blocks[b]["key_index"])
    if q >= 0:  # evicting a cached block: forget its key
        key_forget(st, i, q, b)
        blocks[b]["key_index"] = -1
        if st.kv_tier_inst[i]["n_tiers"] > 0 and st.key_shared[q] != 0:
            st.kv_tier_inst[i]["gpu_evictions"] += 1  # (KV tiers: evicted content another request may ask for)
    return b


@helper
def take_block(st, i):
    """Take the next free block as a named block (an id for an anonymous one)."""
    b = _take_head(st, i)
    if b < 0:
        b = _new_id(st, i)
    st.blocks[b]["ref_count"] = 1
    st.inst[i]["kv_allocated"] += 1
    return b


@helper
def take_anonymous(st, i, k):
    """Take the next ``k`` free blocks as anonymous blocks (their ids, if any, retire)."""
    inst = st.inst
    inst[i]["kv_allocated"] += k
    while k > 0:
        u = inst[i]["head_units"]
        if u > 0:
            t = min(u, k)
            inst[i]["head_units"] = u - t
            k -= t
        else:
            _retire_id(st, i, _take_head(st, i))
            k -= 1


@helper
def _note_peak(inst, i):
    if inst[i]["kv_allocated"] > inst[i]["kv_peak_allocated"]:
        inst[i]["kv_peak_allocated"] = inst[i]["kv_allocated"]


# ----------------------------------------------------------------------------- requests


@helper
def kv_grow(st, i, r, n):
    """Give request r KV room for ``n`` more tokens beyond ``computed``; all-or-nothing.

    New blocks at positions < ``named_upto`` are named, the others anonymous (taken in
    position order, as the reference does).  Registers the key of every named block these
    tokens fill -- prompt blocks and blocks filled by generated tokens alike (docs/
    semantics.md §6), unless deferred -- when the allocation is made, as the reference
    does.  Returns True on success; on failure nothing changes.
    """
    reqs = st.reqs
    bs = np.int64(st.inst[i]["block_size"])
    c = reqs[r]["computed"]
    held = reqs[r]["blocks_held"]
    named_upto = reqs[r]["named_upto"]
    need = (c + n + bs - 1) // bs - held
    if need > 0:
        if need > kv_free_blocks(st.inst, i):
            return False
        start = reqs[r]["block_start"]
        named = min(need, max(np.int64(0), named_upto - held))
        for k in range(named):
            st.req_blocks[start + held + k] = take_block(st, i)
        if need > named:
            take_anonymous(st, i, need - named)
        reqs[r]["blocks_held"] = held + need
        _note_peak(st.inst, i)
    if st.settings[0]["prefix_caching"] != 0:
        # blocks completed by these tokens: [c // bs, (c + n) // bs), as far as keys exist
        # and blocks are named
        last = min((c + n) // bs, reqs[r]["key_count"], named_upto)
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
                if st.kv_tier_inst[i]["n_tiers"] > 0:
                    tier_store(st, i, r, j, q, b)
            # else another block already caches this content: leave this one unkeyed
    return True


@helper
def _memo_hits(st, i, kstart, start, max_hits):
    """(hits, free ones among them) of the request's leading keys ``keys[kstart:]`` that
    instance i's last prompt lookup answers (``kv_memo[i]``): when the prefix table has not
    changed since and the keys equal that request's, they hit the same blocks -- a popular
    prefix costs compares of consecutive keys, not a hash lookup per block.  Their blocks
    go to ``req_blocks[start:]`` as the lookup loop would put them."""
    memo = st.kv_memo
    if memo[i, KvMemo.CHANGES] != st.inst[i]["ht_changes"]:
        return np.int64(0), np.int64(0)
    mk = memo[i, KvMemo.KSTART]
    m = min(memo[i, KvMemo.HITS], max_hits)
    block_ref = st.blocks["ref_count"]
    hits = np.int64(0)
    hits_free = np.int64(0)
    while hits < m and st.keys[kstart + hits] == st.keys[mk + hits]:
        b = memo[i, N_KV_MEMO + hits]
        st.req_blocks[start + hits] = b
        if block_ref[b] == 0:
            hits_free += 1
        hits += 1
    return hits, hits_free


@helper
def _memo_keep(st, i, kstart, start, hits):
    """Remember this lookup's leading hits on shared keys (kv_memo[i]; an unshared key's
    entry is its own request's and may change without the table changing)."""
    memo = st.kv_memo
    n = 0
    while n < hits and n < KV_MEMO_BLOCKS and st.key_shared[kstart + n] != 0:
        memo[i, N_KV_MEMO + n] = st.req_blocks[start + n]
        n += 1
    memo[i, KvMemo.CHANGES] = st.inst[i]["ht_changes"]
    memo[i, KvMemo.KSTART] = kstart
    memo[i, KvMemo.HITS] = n


@helper
def kv_admit(st, i, r, budget, cap, with_tiers):
    """Admit waiting request r: attach its cached prefix blocks and allocate its first chunk.

    The chunk is the rest of ``prefill_target`` after the cache hits (at most
    floor((target - 1) / bs) blocks are reused, so the last token is always computed),
    capped by ``cap`` (long-prefill threshold, 0 = none) and ``budget``.  All-or-nothing:
    returns (n tokens to compute, cached tokens), or (-1, 0) if the blocks are not free.
    (Only named positions can hit: an anonymous position's key is its own and deferred.)
    ``with_tiers``: the prefix chain continues into the instance's KV tiers (kv/tiers.py);
    blocks found there make it (LOADING, cached tokens) -- their blocks held, the loads
    still to start -- unless the tiers load at the admitting step (load: step).
    """
    reqs = st.reqs
    inst = st.inst
    bs = np.int64(st.inst[i]["block_size"])
    target = reqs[r]["prefill_target"]
    start = reqs[r]["block_start"]
    block_ref = st.blocks["ref_count"]
    hits = 0
    hits_free = 0
    if st.settings[0]["prefix_caching"] != 0:
        max_hits = min(reqs[r]["key_count"], (target - 1) // bs, reqs[r]["named_upto"])
        if st.settings[0]["compat"] != 0 and reqs[r]["generated"] == 0:
            # the reference reuses every cached full block of the prompt: a block-aligned,
            # fully cached prompt is admitted with nothing to compute (docs/semantics.md §11)
            max_hits = min(reqs[r]["key_count"], target // bs, reqs[r]["named_upto"])
        kstart = reqs[r]["key_start"]
        hits, hits_free = _memo_hits(st, i, kstart, start, max_hits)
        while hits < max_hits:
            b = key_lookup(st, i, kstart + hits)
            if b < 0:
                break
            st.req_blocks[start + hits] = b  # tentative: blocks_held still 0
            if block_ref[b] == 0:
                hits_free += 1
            hits += 1
        _memo_keep(st, i, kstart, start, hits)
        if with_tiers and hits < max_hits and st.kv_tier_inst[i]["n_tiers"] > 0:
            lead = hits
            hits, more_free, found0, found1 = tier_lookup(st, i, r, kstart, start, hits, max_hits)
            if found0 + found1 > 0:
                return _admit_tier_hits(st, i, r, budget, cap, lead, hits, hits_free + more_free, found0, found1)
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
def tier_lookup(st, i, r, kstart, start, hits, max_hits):
    """Continue request r's prefix chain on instance i past its GPU hits: key by key, the
    GPU first, then tier 0, tier 1; stop at the first key found nowhere.  A GPU hit's block
    goes to ``req_blocks`` as kv_admit's loop puts it; a tier hit's entry + 1 to
    ``tier_src`` (its block is allocated by the caller).  Returns (hits, GPU hits among the
    new ones that are free, tier-0 hits, tier-1 hits)."""
    n_tiers = st.kv_tier_inst[i]["n_tiers"]
    block_ref = st.blocks["ref_count"]
    hits_free = np.int64(0)
    found0 = np.int64(0)
    found1 = np.int64(0)
    while hits < max_hits:
        q = kstart + hits
        b = key_lookup(st, i, q)
        if b >= 0:
            st.req_blocks[start + hits] = b
            st.tier_src[start + hits] = 0
            if block_ref[b] == 0:
                hits_free += 1
            hits += 1
            continue
        if st.key_shared[q] == 0:
            break
        s = np.int64(-1)
        k = 0
        while k < n_tiers:
            s = tier_find(st, i * N_TIERS + k, st.keys[q])
            if s >= 0:
                break
            k += 1
        if s < 0:
            break
        st.req_blocks[start + hits] = -1
        st.tier_src[start + hits] = s + 1
        if k == 0:
            found0 += 1
        else:
            found1 += 1
        hits += 1
    return hits, hits_free, found0, found1




@helper
def attach_tier_hits(st, i, r, start, hits, first, register):
    """Give each tier hit among positions [first, hits) of request r a new GPU block
    (its key registered now if ``register``: load: step, else when the load is done); the
    entries are pinned (async loads) -- or not (``register``: the load is immediate)."""
    block_key = st.blocks["key_index"]
    for j in range(first, hits):
        s = st.tier_src[start + j] - 1
        if s < 0:
            continue
        b = take_block(st, i)
        st.req_blocks[start + j] = b
        q = st.reqs[r]["key_start"] + j
        if register:
            st.tier_src[start + j] = 0
            tier_touch(st, st.tier_slots[s]["tier"], s)
            if key_register(st, i, q, b):
                block_key[b] = q
        else:
            tier_pin(st, s)




@helper
def _admit_tier_hits(st, i, r, budget, cap, lead, hits, hits_free, found0, found1):
    """kv_admit of request r whose prefix chain found blocks in a tier (positions [lead,
    hits) may hold them, ``tier_src``): all-or-nothing, as kv_admit.  Async loads: only the
    prefix blocks are taken now (the tier hits' new blocks unkeyed, their entries pinned)
    and (LOADING, cached tokens) is returned; load: step also takes the first chunk, keys the
    loaded blocks at once and owes the load time to this step."""
    reqs = st.reqs
    inst = st.inst
    bs = np.int64(inst[i]["block_size"])
    start = reqs[r]["block_start"]
    found = found0 + found1
    step_mode = st.kv_tier_inst[i]["load_step"] != 0
    cached = hits * bs
    n = reqs[r]["prefill_target"] - cached  # load: step -- the first chunk
    if cap > 0 and n > cap:
        n = cap
    if n > budget:
        n = budget
    # async loads take one block beyond the prefix now (the next token's): once loaded, the
    # request can always compute at least that much (engine/step.py admit_received), so
    # requests holding loaded blocks cannot hold the whole cache waiting for room
    chunk = (cached + n + bs - 1) // bs - hits if step_mode else np.int64(1)
    if chunk + found > kv_free_blocks(inst, i) - hits_free:
        for j in range(lead, hits):
            st.tier_src[start + j] = 0
        return np.int64(-1), np.int64(0)
    block_ref = st.blocks["ref_count"]
    for k in range(hits):  # the GPU hits first: taking the tier hits' blocks must not evict them
        if st.tier_src[start + k] != 0:
            continue
        b = np.int64(st.req_blocks[start + k])
        if block_ref[b] == 0:
            _unlink_free(st, i, b)
            inst[i]["kv_allocated"] += 1
        block_ref[b] += 1
    attach_tier_hits(st, i, r, start, hits, lead, step_mode)
    reqs[r]["blocks_held"] = hits
    count_tier_hits(st, i, r, found0, found1)
    _note_peak(inst, i)
    if not step_mode:
        reqs[r]["computed"] = cached  # (its next token fills no block: kv_grow only takes the block)
        kv_grow(st, i, r, np.int64(1))
        st.tier_reqs[r]["load_cached"] = cached
        return np.int64(LOADING), cached
    st.kv_tier_inst[i]["step_load_us"] += load_time_us(st, i, found0, found1)
    reqs[r]["computed"] = cached
    kv_grow(st, i, r, n)  # (room checked above)
    return n, cached


@helper
def kv_forget_chunk(st, i, r, c, n):
    """Unregister the keys request r registered for the tokens [c, c + n) of this step
    (a prefill chunk or a decode token), before a preemption frees those blocks
    un-computed (a victim chosen after it was served).  Without this, a later request
    could count never-computed KV as cached."""
    reqs = st.reqs
    bs = np.int64(st.inst[i]["block_size"])
    last = min((c + n) // bs, reqs[r]["key_count"], reqs[r]["named_upto"])
    block_key = st.blocks["key_index"]
    for j in range(c // bs, min(last, reqs[r]["blocks_held"])):
        b = np.int64(st.req_blocks[reqs[r]["block_start"] + j])
        q = np.int64(block_key[b])
        if q >= 0:
            key_forget(st, i, q, b)
            block_key[b] = -1


@helper
def register_deferred_keys(st, i, r):
    """Before request r (never preempted so far) is preempted: name the anonymous blocks
    it has filled and register their deferred keys, so that it finds them again when it
    is readmitted; from then on all its blocks are named."""
    if st.settings[0]["prefix_caching"] == 0:
        return
    reqs = st.reqs
    bs = np.int64(st.inst[i]["block_size"])
    block_key = st.blocks["key_index"]
    start = reqs[r]["block_start"]
    filled = min(reqs[r]["computed"] // bs, reqs[r]["key_count"], reqs[r]["blocks_held"])
    named_upto = reqs[r]["named_upto"]
    for j in range(named_upto, filled):  # anonymous blocks -> named (same count held)
        b = _new_id(st, i)
        st.blocks[b]["ref_count"] = 1
        st.req_blocks[start + j] = b
    if filled > named_upto:
        reqs[r]["named_upto"] = filled
    leg = is_prefill_leg(st, r)
    for j in range(filled):
        q = reqs[r]["key_start"] + j
        if key_deferred(st, r, q) and not leg:
            b = np.int64(st.req_blocks[start + j])
            if key_register(st, i, q, b):
                block_key[b] = q


@helper
def anonymous_held(st, r):
    """Request r's anonymous blocks (those at positions >= named_upto)."""
    held = st.reqs[r]["blocks_held"]
    return held - min(held, max(np.int64(0), st.reqs[r]["named_upto"]))


@helper
def kv_release(st, i, r):
    """Release all of request r's blocks, last to first (its tail is evicted first): its
    anonymous blocks, then its named ones -- each that nobody else holds goes to the
    free list's tail, as a named block if it is keyed, else as an anonymous one."""
    reqs = st.reqs
    inst = st.inst
    held = reqs[r]["blocks_held"]
    named = min(held, max(np.int64(0), reqs[r]["named_upto"]))
    if held > named:
        _append_free(st, i, held - named)
        inst[i]["kv_allocated"] -= held - named
    start = reqs[r]["block_start"]
    blocks = st.blocks
    block_ref = blocks["ref_count"]
    prev = blocks["lru_prev"]
    nxt = blocks["lru_next"]
    # the reference path (event skipping off) keeps every block named: a freed unkeyed
    # block stays in the free list under its id
    retire_unkeyed = st.settings[0]["event_skipping"] != 0
    for j in range(named - 1, -1, -1):
        if j >= 8:  # rows touched long ago: start loading the ones 8 steps ahead of the walk
            prefetch(blocks, st.req_blocks[start + j - 8])
        b = np.int64(st.req_blocks[start + j])
        block_ref[b] -= 1
        if block_ref[b] == 0:
            inst[i]["kv_allocated"] -= 1
            if blocks[b]["key_index"] >= 0 or not retire_unkeyed:
                blocks[b]["gap_after"] = 0
                dl_push_back(prev, nxt, inst["free_head"], inst["free_tail"], inst["free_len"], i, b)
            else:
                _retire_id(st, i, b)
                _append_free(st, i, 1)
    reqs[r]["blocks_held"] = 0


@helper
def release_block(st, i, b):
    """Drop one reference to named block b (a store's pin, kv/tiers.py); a block nobody
    holds any more is freed as kv_release frees it."""
    blocks = st.blocks
    blocks[b]["ref_count"] -= 1
    if blocks[b]["ref_count"] == 0:
        st.inst[i]["kv_allocated"] -= 1
        if blocks[b]["key_index"] >= 0 or st.settings[0]["event_skipping"] == 0:
            blocks[b]["gap_after"] = 0
            dl_push_back(blocks["lru_prev"], blocks["lru_next"], st.inst["free_head"], st.inst["free_tail"],
                         st.inst["free_len"], i, b)
        else:
            _retire_id(st, i, b)
            _append_free(st, i, 1)


@kernel
def kv_conserved(st, i):
    """Block conservation by recount, as of the instance's next step (a counted rider's
    blocks are derived from its tokens, engine/calendar.py): named blocks with ref > 0 +
    the running requests' anonymous blocks == kv_allocated; free blocks (anonymous units
    of the free list + its named blocks) == total - allocated; and every id is either
    named (held or free), pooled or never used."""
    inst = st.inst
    reqs = st.reqs
    bs = np.int64(st.inst[i]["block_size"])
    anon = st.pd_inst[i]["held_anon"]  # (P/D: anonymous blocks held outside the batch)
    for k in range(inst[i]["batch_len"]):
        r = st.batch[i, k]
        held = reqs[r]["blocks_held"]
        if reqs[r]["ride_phase"] >= 0:
            c = reqs[r]["computed"] + max(0, inst[i]["steps"] - reqs[r]["sync_step"])
            held = (c + bs - 1) // bs
        anon += held - min(held, max(0, reqs[r]["named_upto"]))
    lo = inst[i]["kv_offset"]
    used = 0
    ref = st.blocks["ref_count"]
    for b in range(lo, inst[i]["kv_virgin_next"]):
        if ref[b] > 0:
            used += 1
    free_units = inst[i]["head_units"]
    free_named = 0
    b = inst[i]["free_head"]
    while b >= 0 and free_named <= inst[i]["kv_total"]:
        free_units += st.blocks[b]["gap_after"]
        free_named += 1
        b = st.blocks[b]["lru_next"]
    pooled = 0
    b = inst[i]["id_pool"]
    while b >= 0 and pooled <= inst[i]["kv_total"]:
        pooled += 1
        b = st.blocks[b]["lru_next"]
    never = lo + inst[i]["kv_total"] - inst[i]["kv_virgin_next"]
    return (used + anon == inst[i]["kv_allocated"]
            and free_units + free_named == inst[i]["kv_total"] - inst[i]["kv_allocated"]
            and free_named == inst[i]["free_len"]
            and used + free_named + pooled + never == inst[i]["kv_total"])
