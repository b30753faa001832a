"""Chained 64-bit keys of full prompt blocks (prefix caching, SEMANTICS §6).

key_k identifies the whole prompt prefix up to and including block k:

    block_hash_k = fold(combine, BLOCK_SEED, tokens of block k)      (bs tokens)
    key_k        = combine(key_{k-1} ^ CHAIN_SALT, block_hash_k),     key_{-1} = CHAIN_SEED

with ``combine(h, v) = fmix64(h * MUL + v)`` and ``fmix64`` the splitmix64 finalizer (a
bijection on uint64).  For a fixed ``h``, ``v -> h * MUL + v`` is a bijection too, so two
blocks that differ in one token always differ in that step; unequal prefixes collide only
by chance (~2^-64 per pair).  The key is stored as int64; the value -1 (the kernels'
"no key" marker) is remapped to -2.

All arithmetic is on uint64 (wrap-around is intended).  Token ids are int64 and are
reinterpreted bit-for-bit as uint64, so any int64 id is accepted.
"""

from __future__ import annotations

import numpy as np

from .jit import helper, kernel

# Constants are typed uint64 so numba never promotes the arithmetic to float64.
FMIX_M1 = np.uint64(0xBF58476D1CE4E5B9)
FMIX_M2 = np.uint64(0x94D049BB133111EB)
MUL = np.uint64(0x9E3779B97F4A7C15)  # golden-ratio odd multiplier
BLOCK_SEED = np.uint64(0x243F6A8885A308D3)  # pi fraction digits: arbitrary fixed seeds
CHAIN_SEED = np.uint64(0x13198A2E03707344)
CHAIN_SALT = np.uint64(0xA4093822299F31D0)
S30 = np.uint64(30)
S27 = np.uint64(27)
S31 = np.uint64(31)
NO_KEY = -1  # the kernels' "no key" marker; never produced as a key
NO_KEY_REPLACEMENT = -2


@helper
def fmix64(x):
    """splitmix64 finalizer of the uint64 ``x`` (a bijection, good avalanche)."""
    x = (x ^ (x >> S30)) * FMIX_M1
    x = (x ^ (x >> S27)) * FMIX_M2
    return x ^ (x >> S31)


@helper
def combine64(h, v):
    """Mix the uint64 value ``v`` into the uint64 state ``h``; returns the new state."""
    return fmix64(h * MUL + v)


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
        if keys[k] == NO_KEY:
            keys[k] = NO_KEY_REPLACEMENT
    return keys, key_offsets
