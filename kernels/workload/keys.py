"""Chained 64-bit keys of full KV blocks (prefix caching, docs/semantics.md §6).

key_k identifies the whole token sequence up to and including block k:

    block_hash_k = fold(combine64, BLOCK_SEED, tokens of block k)      (bs tokens)
    state_k      = combine64(state_{k-1} ^ CHAIN_SALT, block_hash_k),  state_{-1} = CHAIN_SEED

and the stored key is state_k as int64, with -1 (the kernels' "no key") remapped to -2.
Unequal prefixes collide only by chance (~2^-64 per pair).  Token ids are int64 and are
reinterpreted bit-for-bit as uint64, so any int64 id is accepted.

Generated workloads need no token ids: ``chain_prompt_keys`` gives each request's blocks
keys with exactly the sharing structure of the real token sequences (see its docstring).
"""

from __future__ import annotations

import numpy as np

from ..jit import kernel
from ..schema import Key
from ..structs.mix import MUL, combine64

BLOCK_SEED = np.uint64(0x243F6A8885A308D3)  # pi fraction digits: arbitrary fixed seeds
CHAIN_SEED = np.uint64(0x13198A2E03707344)
CHAIN_SALT = np.uint64(0xA4093822299F31D0)
FRESH_SEED = np.uint64(0x082EFA98EC4E6C89)  # more pi digits: seed of fresh block hashes


@kernel
def hash_chain_states(tokens, token_offsets, block_size):
    """Raw chain states (uint64 viewed as int64, no -1 remapping) of every full block of
    each token sequence i = tokens[token_offsets[i]:token_offsets[i+1]]; returns
    (states int64, state_offsets int64[n+1]).  Remapping -1 -> -2 gives hash_prompt_blocks."""
    n = token_offsets.shape[0] - 1
    offs = np.empty(n + 1, dtype=np.int64)
    offs[0] = 0
    for i in range(n):
        offs[i + 1] = offs[i] + (token_offsets[i + 1] - token_offsets[i]) // block_size
    states = np.empty(offs[n], dtype=np.uint64)
    utok = tokens.view(np.uint64)
    for i in range(n):
        start = token_offsets[i]
        prev = CHAIN_SEED
        for k in range(offs[i + 1] - offs[i]):
            bh = BLOCK_SEED
            base = start + k * block_size
            for j in range(block_size):
                bh = combine64(bh, utok[base + j])
            prev = combine64(prev ^ CHAIN_SALT, bh)
            states[offs[i] + k] = prev
    return states.view(np.int64), offs



@kernel
def hash_prompt_blocks(tokens, token_offsets, block_size):
    """Keys of every full prompt block: request i's tokens are tokens[token_offsets[i]:
    token_offsets[i+1]] (int64 ids); returns (keys int64, key_offsets int64[n+1]) with
    floor(L_i / block_size) chained keys for request i, none equal to -1."""
    keys, key_offsets = hash_chain_states(tokens, token_offsets, block_size)
    for k in range(keys.shape[0]):
        if keys[k] == Key.NONE:
            keys[k] = Key.REPLACEMENT
    return keys, key_offsets


# Generated workloads.  The chain state after block k is
#
#     state_k = combine64(state_{k-1} ^ CHAIN_SALT, block_hash_k),   state_{-1} = CHAIN_SEED
#
# and the stored key is state_k as int64 (-1 remapped to -2).  ``hash_prompt_blocks``
# computes block_hash_k from the block's token ids.  Here a request's blocks come in two
# kinds:
#
# - shared blocks -- the leading blocks of a prefix-group prompt (hashed from its real token
#   ids by ``hash_chain_states``) or of the request's predecessor in its session (copied):
#   the states are *identical* to what ``hash_prompt_blocks`` gives on the real tokens,
#   because the tokens are identical and the chain is the same function of them;
# - fresh blocks -- every later block, which holds at least one token unique to this
#   request (its own user text, the predecessor's output, a tool result).  On real tokens
#   hash_prompt_blocks would give such a block an unpredictable 64-bit block hash shared
#   with no other block; we draw that value instead -- block_hash_k = h + k·MUL with
#   h = combine64(FRESH_SEED, content_seed): distinct for every k of a request and
#   pseudo-random across requests (the chain's combine64 then mixes it fully) -- and chain
#   it the same way.
#
# So the keys have exactly the sharing structure of the real token sequences: equal where
# the content is shared (shared blocks always lead, so their chain states agree), distinct
# elsewhere up to 2^-64 collisions -- without materializing the unique tokens.
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
        if keys[q] == Key.NONE:
            keys[q] = Key.REPLACEMENT
