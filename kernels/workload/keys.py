"""Chained 64-bit keys of full KV blocks (prefix caching, docs/semantics.md §6).

key_k identifies the whole token sequence up to and including block k:

    block_hash_k = fold(combine64, BLOCK_SEED, tokens of block k)      (bs tokens)
    state_k      = combine64(state_{k-1} ^ CHAIN_SALT, block_hash_k),  state_{-1} = CHAIN_SEED

and the stored key is state_k as int64, with -1 (the kernels' "no key") remapped to -2.
Unequal prefixes collide only by chance (~2^-64 per pair).  Token ids are int64 and are
reinterpreted bit-for-bit as uint64, so any int64 id is accepted.

A request's *sequence* is its prompt followed by its output tokens; it has
floor((L + N) / bs) keyed blocks, the first floor(L / bs) of which are its prompt's
(``hash_sequence_blocks``).  Generated workloads need no token ids: ``chain_sequence_keys``
gives each request's blocks keys with exactly the sharing structure of the real token
sequences (see its docstring).
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
RAW_NONE = np.uint64(0xFFFFFFFFFFFFFFFF)  # Key.NONE (-1) and Key.REPLACEMENT (-2) as uint64
REMAPPED = np.uint64(0xFFFFFFFFFFFFFFFE)


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


@kernel
def hash_sequence_blocks(tokens, token_offsets, out_tokens, out_offsets, output_len, content_seed, block_size):
    """Keys of every full block of each request's sequence, prompt then output: request i's
    prompt is tokens[token_offsets[i]:token_offsets[i+1]]; its N_i = output_len[i] output
    tokens are out_tokens[out_offsets[i]:out_offsets[i+1]] when out_offsets has n+1
    entries (then out_offsets[i+1] - out_offsets[i] must equal output_len[i]), else
    unknown: every block that is not entirely prompt is then *fresh* (block hash
    combine64(FRESH_SEED, content_seed[i]) + k·MUL, as in chain_sequence_keys; content_seed
    is only read in that case).  Returns (keys int64, key_offsets int64[n+1]):
    floor((L_i + N_i) / block_size) keys for request i, the first floor(L_i / block_size)
    equal to hash_prompt_blocks', none equal to -1."""
    n = token_offsets.shape[0] - 1
    explicit = out_offsets.shape[0] == n + 1
    offs = np.empty(n + 1, dtype=np.int64)
    offs[0] = 0
    for i in range(n):
        offs[i + 1] = offs[i] + (token_offsets[i + 1] - token_offsets[i] + output_len[i]) // block_size
    states = np.empty(offs[n], dtype=np.uint64)
    utok = tokens.view(np.uint64)
    uout = out_tokens.view(np.uint64)
    useed = content_seed.view(np.uint64)
    for i in range(n):
        start = token_offsets[i]
        plen = token_offsets[i + 1] - start
        ostart = out_offsets[i] if explicit else 0
        h = np.uint64(0)
        if not explicit:
            h = combine64(FRESH_SEED, useed[i])
        prev = CHAIN_SEED
        for k in range(offs[i + 1] - offs[i]):
            base = k * block_size
            if base + block_size <= plen:
                bh = BLOCK_SEED
                for j in range(block_size):
                    bh = combine64(bh, utok[start + base + j])
            elif explicit:
                bh = BLOCK_SEED
                for j in range(block_size):
                    q = base + j
                    if q < plen:
                        bh = combine64(bh, utok[start + q])
                    else:
                        bh = combine64(bh, uout[ostart + q - plen])
            else:
                bh = h + np.uint64(k) * MUL
            prev = combine64(prev ^ CHAIN_SALT, bh)
            states[offs[i] + k] = prev
    keys = states.view(np.int64)
    for k in range(keys.shape[0]):
        if keys[k] == Key.NONE:
            keys[k] = Key.REPLACEMENT
    return keys, offs


# Generated workloads.  The chain state after block k is
#
#     state_k = combine64(state_{k-1} ^ CHAIN_SALT, block_hash_k),   state_{-1} = CHAIN_SEED
#
# and the stored key is state_k as int64 (-1 remapped to -2).  ``hash_sequence_blocks``
# computes block_hash_k from the block's token ids.  Here a request's blocks (prompt, then
# output) come in two kinds:
#
# - shared blocks -- the leading blocks of a prefix-group prompt (hashed from its real token
#   ids by ``hash_chain_states``) or of the request's predecessor in its session, whose
#   prompt *and output* it extends (copied from the predecessor's sequence keys): the
#   states are *identical* to what ``hash_sequence_blocks`` gives on the real tokens,
#   because the tokens are identical and the chain is the same function of them;
# - fresh blocks -- every later block, which holds at least one token unique to this
#   request (its own user text, a tool result, its own output).  On real tokens the hash
#   would give such a block an unpredictable 64-bit block hash shared with no other block;
#   we draw that value instead -- block_hash_k = h + k·MUL with h = combine64(FRESH_SEED,
#   content_seed): distinct for every k of a request and pseudo-random across requests
#   (the chain's combine64 then mixes it fully) -- and chain it the same way.
#
# So the keys have exactly the sharing structure of the real token sequences: equal where
# the content is shared (shared blocks always lead, so their chain states agree), distinct
# elsewhere up to 2^-64 collisions -- without materializing the unique tokens.
@kernel
def chain_sequence_keys(key_offsets, prompt_blocks, parent, group, content_seed, order, group_states, group_offsets,
                        keys, shared):
    """Fill ``keys`` (int64, allocated by the caller so numpy can back it with huge pages)
    with every request's chained sequence-block keys, -1 remapped to -2, and ``shared``
    (uint8, same length) with 1 where the key occurs more than once in ``keys``, else 0.
    Request i owns keys[key_offsets[i]:key_offsets[i+1]] (floor((L_i + N_i)/bs) blocks);
    the first prompt_blocks[i] (floor(L_i/bs)) are its prompt's.

    parent int64[n]: the request whose prompt + output this one's prompt extends (its
    predecessor in a session) or -1; group int64[n]: the prefix-group prompt it starts with
    (row of group_offsets) or -1, used when parent < 0; content_seed int64[n]: seed of its
    fresh blocks; order int64[n]: processing order, every parent before its children;
    group_states / group_offsets: raw chain states of each group prompt (hash_chain_states).
    Shared leading blocks: min(#parent keys, prompt_blocks[i]) copied from the parent's
    sequence keys, else min(#group blocks, prompt_blocks[i]) from the group; every later
    block (the rest of the prompt, all output blocks) is fresh.

    ``shared`` is exact up to 2^-64 collisions: a parent copy marks the copied keys and
    their source; a group block is shared when two or more requests start with it (or a
    session copies it)."""
    n = key_offsets.shape[0] - 1
    ukeys = keys.view(np.uint64)
    ugroup = group_states.view(np.uint64)
    useed = content_seed.view(np.uint64)
    group_use = np.zeros(group_states.shape[0], np.int64)
    for j in range(n):
        i = order[j]
        base = key_offsets[i]
        nb = key_offsets[i + 1] - base
        npb = min(prompt_blocks[i], nb)
        m = 0
        prev = CHAIN_SEED
        p = parent[i]
        if p >= 0:
            src = key_offsets[p]
            m = min(key_offsets[p + 1] - src, npb)
            for k in range(m):
                ukeys[base + k] = ukeys[src + k]  # the parent's keys are remapped already
                shared[base + k] = 1
                shared[src + k] = 1
            if m > 0:
                prev = ukeys[base + m - 1]
                if prev == REMAPPED:  # (2^-64) the raw state was -1
                    prev = RAW_NONE
        elif group[i] >= 0:
            g = group[i]
            src = group_offsets[g]
            m = min(group_offsets[g + 1] - src, npb)
            for k in range(m):
                v = ugroup[src + k]
                ukeys[base + k] = REMAPPED if v == RAW_NONE else v
                shared[base + k] = 0  # set below if another request uses the block
                group_use[src + k] += 1
            if m > 0:
                prev = ugroup[src + m - 1]
        h = combine64(FRESH_SEED, useed[i])
        for k in range(m, nb):
            prev = combine64(prev ^ CHAIN_SALT, h + np.uint64(k) * MUL)
            ukeys[base + k] = REMAPPED if prev == RAW_NONE else prev
            shared[base + k] = 0
    if group_use.shape[0] == 0:
        return
    for i in range(n):
        g = group[i]
        if parent[i] >= 0 or g < 0:
            continue
        base = key_offsets[i]
        src = group_offsets[g]
        m = min(group_offsets[g + 1] - src, prompt_blocks[i], key_offsets[i + 1] - base)
        for k in range(m):
            if group_use[src + k] > 1:
                shared[base + k] = 1


@kernel
def chain_prompt_keys(key_offsets, parent, group, content_seed, order, group_states, group_offsets, keys):
    """chain_sequence_keys with every key a prompt key (prompt_blocks = the key counts):
    min(#parent keys, #own keys) copied from the parent, else min(#group blocks, #own
    keys) from the group, the rest fresh; no shared flags."""
    prompt_blocks = key_offsets[1:] - key_offsets[:-1]
    shared = np.empty(keys.shape[0], np.uint8)
    chain_sequence_keys(key_offsets, prompt_blocks, parent, group, content_seed, order, group_states, group_offsets,
                        keys, shared)
