"""Reference for kernels/structs/mix.py and kernels/workload/keys.py: the 64-bit mixing
function and chained prefix-block keys on Python ints with explicit mod 2^64 (the
constants are taken from the kernels: they are data, not logic)."""

from __future__ import annotations

from blis_fast_kernels.structs import mix as M
from blis_fast_kernels.workload import keys as K

MASK = (1 << 64) - 1
FMIX_M1, FMIX_M2, MUL = int(M.FMIX_M1), int(M.FMIX_M2), int(M.MUL)
BLOCK_SEED, CHAIN_SEED, CHAIN_SALT, FRESH_SEED = (int(K.BLOCK_SEED), int(K.CHAIN_SEED), int(K.CHAIN_SALT),
                                                  int(K.FRESH_SEED))


def u64(x: int) -> int:
    """An int64 (or any int) read as uint64."""
    return x & MASK


def i64(x: int) -> int:
    """A uint64 read as int64."""
    return x - (1 << 64) if x >= 1 << 63 else x


def naive_fmix(x: int) -> int:
    x = ((x ^ (x >> 30)) * FMIX_M1) & MASK
    x = ((x ^ (x >> 27)) * FMIX_M2) & MASK
    return x ^ (x >> 31)


def naive_combine(h: int, v: int) -> int:
    return naive_fmix((h * MUL + v) & MASK)


def naive_splitmix64(n: int, seed: int) -> list[int]:
    """fmix64(seed + (k + 1)·MUL) for k < n, as int64."""
    return [i64(naive_fmix((u64(seed) + (k + 1) * MUL) & MASK)) for k in range(n)]


def naive_chain_states(prompts: list[list[int]], bs: int) -> list[list[int]]:
    """Raw chain states (uint64 as int64) of each prompt's full blocks."""
    out = []
    for toks in prompts:
        states, prev = [], CHAIN_SEED
        for k in range(len(toks) // bs):
            bh = BLOCK_SEED
            for t in toks[k * bs: (k + 1) * bs]:
                bh = naive_combine(bh, u64(t))  # int64 id read as uint64
            prev = naive_combine(prev ^ CHAIN_SALT, bh)
            states.append(i64(prev))
        out.append(states)
    return out


def _remap(key: int) -> int:
    return -2 if key == -1 else key


def naive_keys(prompts: list[list[int]], bs: int) -> list[list[int]]:
    """hash_prompt_blocks: the chain states with -1 remapped to -2."""
    return [[_remap(s) for s in states] for states in naive_chain_states(prompts, bs)]


def naive_chain_prompt_keys(n_blocks, parent, group, content_seed, group_states) -> list[list[int]]:
    """chain_prompt_keys on Python lists: request i has n_blocks[i] keys; its leading
    min(#parent keys, n_blocks[i]) keys are its parent's (parent >= 0), else min(#group
    states, n_blocks[i]) of its group's raw states (group >= 0); every later block k gets
    the chain step with block hash combine64(FRESH_SEED, seed) + k·MUL.  Parents are
    resolved recursively (so no processing order is needed); -1 remapped to -2 at the end."""
    raw: dict[int, list[int]] = {}

    def keys_of(i: int) -> list[int]:
        if i in raw:
            return raw[i]
        nb = n_blocks[i]
        if parent[i] >= 0:
            shared = [u64(k) for k in keys_of(parent[i])][:nb]
        elif group[i] >= 0:
            shared = [u64(s) for s in group_states[group[i]]][:nb]
        else:
            shared = []
        prev = shared[-1] if shared else CHAIN_SEED
        h = naive_combine(FRESH_SEED, u64(content_seed[i]))
        out = list(shared)
        for k in range(len(shared), nb):
            prev = naive_combine(prev ^ CHAIN_SALT, (h + k * MUL) & MASK)
            out.append(prev)
        raw[i] = [i64(x) for x in out]
        return raw[i]

    return [[_remap(k) for k in keys_of(i)] for i in range(len(n_blocks))]


def naive_unfmix(y: int) -> int:
    """Inverse of naive_fmix (to construct an input whose key would be -1)."""

    def unxorshift(x: int, s: int) -> int:
        r = x
        for _ in range(64 // s + 1):
            r = x ^ (r >> s)
        return r

    y = unxorshift(y, 31)
    y = (y * pow(FMIX_M2, -1, 1 << 64)) & MASK
    y = unxorshift(y, 27)
    y = (y * pow(FMIX_M1, -1, 1 << 64)) & MASK
    return unxorshift(y, 30)
