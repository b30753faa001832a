"""Prompt-block keys of generated workloads (blis_fast.workload.generate / trace_format).

The keys follow kernels/prefix.py exactly: the chain state after block k is

    state_k = combine64(state_{k-1} ^ CHAIN_SALT, block_hash_k),   state_{-1} = CHAIN_SEED

and the stored key is state_k as int64 (-1 remapped to -2).  ``hash_prompt_blocks``
computes block_hash_k from the block's token ids.  Here a request's blocks come in two
kinds:

- shared blocks -- the leading blocks of a prefix-group prompt (hashed from its real token
  ids by ``hash_chain_states``) or of the request's predecessor in its session (copied):
  the states are *identical* to what ``hash_prompt_blocks`` gives on the real tokens,
  because the tokens are identical and the chain is the same function of them;
- fresh blocks -- every later block, which holds at least one token unique to this
  request (its own user text, the predecessor's output, a tool result).  On real tokens
  hash_prompt_blocks would give such a block an unpredictable 64-bit block hash shared
  with no other block; we draw that value instead -- block_hash_k = h + k·MUL with
  h = combine64(FRESH_SEED, content_seed): distinct for every k of a request and
  pseudo-random across requests (the chain's combine64 then mixes it fully) -- and chain
  it the same way.

So the keys have exactly the sharing structure of the real token sequences: equal where
the content is shared (shared blocks always lead, so their chain states agree), distinct
elsewhere up to 2^-64 collisions -- without materializing the unique tokens.
"""

from __future__ import annotations

import numpy as np

from kernels.jit import kernel
from kernels.prefix import CHAIN_SALT, CHAIN_SEED, MUL, NO_KEY, NO_KEY_REPLACEMENT, combine64

FRESH_SEED = np.uint64(0x082EFA98EC4E6C89)  # more pi digits: arbitrary fixed seed of fresh block hashes

__all__ = ["FRESH_SEED", "chain_prompt_keys"]


@kernel
def chain_prompt_keys(key_offsets, parent, group, content_seed, order, group_states, group_offsets, keys):
    """Fill ``keys`` (int64, allocated by the caller so numpy can back it with huge pages)
    with every request's chained prompt-block keys, -1 remapped to -2.  Request i owns
    keys[key_offsets[i]:key_offsets[i+1]] (floor(L_i/bs) blocks).

    parent int64[n]: the request whose prompt this one extends (its predecessor in a
    session) or -1; group int64[n]: the prefix-group prompt it starts with (row of
    group_offsets) or -1, used when parent < 0; content_seed int64[n]: seed of its fresh
    blocks; order int64[n]: processing order, every parent before its children;
    group_states / group_offsets: raw chain states of each group prompt (hash_chain_states).
    Shared leading blocks: min(#parent blocks, #own blocks) copied from the parent, else
    min(#group blocks, #own blocks) from the group; the rest are fresh."""
    n = key_offsets.shape[0] - 1
    ukeys = keys.view(np.uint64)
    ugroup = group_states.view(np.uint64)
    useed = content_seed.view(np.uint64)
    for j in range(n):
        i = order[j]
        base = key_offsets[i]
        nb = key_offsets[i + 1] - base
        m = 0
        p = parent[i]
        if p >= 0:
            src = key_offsets[p]
            m = min(key_offsets[p + 1] - src, nb)
            for k in range(m):
                ukeys[base + k] = ukeys[src + k]
        elif group[i] >= 0:
            g = group[i]
            src = group_offsets[g]
            m = min(group_offsets[g + 1] - src, nb)
            for k in range(m):
                ukeys[base + k] = ugroup[src + k]
        prev = CHAIN_SEED
        if m > 0:
            prev = ukeys[base + m - 1]
        h = combine64(FRESH_SEED, useed[i])
        for k in range(m, nb):
            prev = combine64(prev ^ CHAIN_SALT, h + np.uint64(k) * MUL)
            ukeys[base + k] = prev
    for q in range(keys.shape[0]):
        if keys[q] == NO_KEY:
            keys[q] = NO_KEY_REPLACEMENT


@kernel
def mark_repeated_keys(keys):
    """uint8[len(keys)]: 1 where keys[q] equals some earlier keys[p] (p < q), else 0 --
    open-addressing hash set of the keys seen so far (capacity a power of two >= 2·len)."""
    n = keys.shape[0]
    cap = 16
    while cap < 2 * n:
        cap *= 2
    mask = cap - 1
    table = np.full(cap, NO_KEY, dtype=np.int64)  # keys are never -1 (NO_KEY)
    out = np.zeros(n, dtype=np.uint8)
    for q in range(n):
        k = keys[q]
        h = np.int64(combine64(np.uint64(k), CHAIN_SALT) & np.uint64(mask))
        while True:
            v = table[h]
            if v == NO_KEY:
                table[h] = k
                break
            if v == k:
                out[q] = 1
                break
            h = (h + 1) & mask
    return out
