"""kernels.prefix.hash_prompt_blocks against a slow pure-Python reference."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import prefix as P

MASK = (1 << 64) - 1


# --- naive reference (Python ints, explicit mod 2^64) ------------------------------------
def naive_fmix(x: int) -> int:
    x = ((x ^ (x >> 30)) * int(P.FMIX_M1)) & MASK
    x = ((x ^ (x >> 27)) * int(P.FMIX_M2)) & MASK
    return x ^ (x >> 31)


def naive_combine(h: int, v: int) -> int:
    return naive_fmix((h * int(P.MUL) + v) & MASK)


def naive_keys(prompts: list[list[int]], bs: int) -> list[list[int]]:
    out = []
    for toks in prompts:
        keys, prev = [], int(P.CHAIN_SEED)
        for k in range(len(toks) // bs):
            bh = int(P.BLOCK_SEED)
            for t in toks[k * bs : (k + 1) * bs]:
                bh = naive_combine(bh, t & MASK)  # int64 id read as uint64
            prev = naive_combine(prev ^ int(P.CHAIN_SALT), bh)
            key = prev - (1 << 64) if prev >= 1 << 63 else prev
            keys.append(-2 if key == -1 else key)
        out.append(keys)
    return out


def naive_unfmix(y: int) -> int:
    """Inverse of naive_fmix (to construct an input whose key would be -1)."""

    def unxorshift(x: int, s: int) -> int:
        r = x
        for _ in range(64 // s + 1):
            r = x ^ (r >> s)
        return r

    y = unxorshift(y, 31)
    y = (y * pow(int(P.FMIX_M2), -1, 1 << 64)) & MASK
    y = unxorshift(y, 27)
    y = (y * pow(int(P.FMIX_M1), -1, 1 << 64)) & MASK
    return unxorshift(y, 30)


# --- helpers ------------------------------------------------------------------------------
def flatten(prompts):
    offs = np.zeros(len(prompts) + 1, dtype=np.int64)
    offs[1:] = np.cumsum([len(p) for p in prompts])
    toks = np.array([t for p in prompts for t in p], dtype=np.int64)
    return toks, offs


def run_kernel(prompts, bs):
    toks, offs = flatten(prompts)
    with np.errstate(over="ignore"):
        keys, koffs = P.hash_prompt_blocks(toks, offs, np.int64(bs))
    return [keys[koffs[i] : koffs[i + 1]].tolist() for i in range(len(prompts))], keys, koffs


# --- tests --------------------------------------------------------------------------------
def test_naive_unfmix_inverts_fmix():
    rng = np.random.default_rng(1)
    for x in rng.integers(0, 2**63, size=50).tolist() + [0, MASK, 1 << 63]:
        assert naive_unfmix(naive_fmix(x)) == x


@pytest.mark.parametrize("bs", [1, 3, 16])
def test_kernel_matches_naive_reference(bs):
    rng = np.random.default_rng(bs)
    prompts = []
    for _ in range(40):
        n = int(rng.integers(0, 5 * bs + 3))
        kind = rng.integers(0, 3)
        if kind == 0:
            prompts.append(rng.integers(0, 128000, size=n).tolist())
        elif kind == 1:  # any int64 id, including negative ones
            prompts.append(rng.integers(-(2**63), 2**63 - 1, size=n, dtype=np.int64).tolist())
        else:
            prompts.append(rng.integers(0, 3, size=n).tolist())  # many repeats
    got, keys, koffs = run_kernel(prompts, bs)
    assert keys.dtype == np.int64 and koffs.dtype == np.int64
    assert koffs.tolist() == [0] + np.cumsum([len(p) // bs for p in prompts]).tolist()
    assert got == naive_keys(prompts, bs)


def test_equal_prefixes_iff_equal_keys():
    bs = 4
    rng = np.random.default_rng(7)
    base = rng.integers(0, 128000, size=40).tolist()
    prompts = [base]
    for j in range(0, 41, 3):  # share the first j tokens, then differ at token j
        other = base[:j] + [(base[j] + 1) % 128000 if j < 40 else 0] + base[j + 1 :]
        prompts.append(other[:40])
    got, _, _ = run_kernel(prompts, bs)
    for j, keys in zip(range(0, 41, 3), got[1:]):
        for k in range(10):
            shared = (k + 1) * bs <= j
            assert (keys[k] == got[0][k]) == shared, (j, k)


def test_only_full_blocks_are_keyed():
    got, _, koffs = run_kernel([[1] * 15, [1] * 16, [1] * 17, []], 16)
    assert [len(k) for k in got] == [0, 1, 1, 0]
    assert got[1] == got[2]  # the partial tail of request 2 does not enter the key


def test_key_never_minus_one():
    # Construct a one-token, bs=1 prompt whose chained key would be exactly -1: invert
    # combine64 twice (the chain step, then the block hash).
    target = MASK  # uint64 pattern of int64 -1
    x = naive_unfmix(target)  # = (prev ^ salt) * MUL + bh  (mod 2^64)
    bh = (x - (int(P.CHAIN_SEED) ^ int(P.CHAIN_SALT)) * int(P.MUL)) & MASK
    t = (naive_unfmix(bh) - int(P.BLOCK_SEED) * int(P.MUL)) & MASK
    token = t - (1 << 64) if t >= 1 << 63 else t
    got, _, _ = run_kernel([[token], [token, 5]], 1)
    assert got[0] == [-2]
    assert got[1][0] == -2 and got[1][1] != -1
    # and random inputs never produce -1 either
    _, keys, _ = run_kernel([np.arange(100000).tolist()], 1)
    assert not np.any(keys == -1)
