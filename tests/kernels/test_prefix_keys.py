"""Prefix-block keys (kernels/workload/keys.py) and the 64-bit mix behind them
(kernels/structs/mix.py) against tests/naive/keys.py's Python-int references."""

from __future__ import annotations

import numpy as np
import pytest

import entry as E
from blis_fast_kernels.structs.mix import splitmix64_sequence
from blis_fast_kernels.workload.keys import chain_prompt_keys, hash_chain_states, hash_prompt_blocks
from naive.keys import (
    BLOCK_SEED,
    CHAIN_SALT,
    CHAIN_SEED,
    MASK,
    MUL,
    naive_chain_prompt_keys,
    naive_chain_states,
    naive_combine,
    naive_fmix,
    naive_keys,
    naive_splitmix64,
    naive_unfmix,
)


# --- helpers ------------------------------------------------------------------------------
def flatten(prompts):
    offs = np.zeros(len(prompts) + 1, dtype=np.int64)
    offs[1:] = np.cumsum([len(p) for p in prompts])
    toks = np.array([t for p in prompts for t in p], dtype=np.int64)
    return toks, offs


def run_kernel(prompts, bs):
    toks, offs = flatten(prompts)
    with np.errstate(over="ignore"):
        keys, koffs = hash_prompt_blocks(toks, offs, np.int64(bs))
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
    bh = (x - (CHAIN_SEED ^ CHAIN_SALT) * MUL) & MASK
    t = (naive_unfmix(bh) - BLOCK_SEED * MUL) & MASK
    token = t - (1 << 64) if t >= 1 << 63 else t
    got, _, _ = run_kernel([[token], [token, 5]], 1)
    assert got[0] == [-2]
    assert got[1][0] == -2 and got[1][1] != -1
    # and random inputs never produce -1 either
    _, keys, _ = run_kernel([np.arange(100000).tolist()], 1)
    assert not np.any(keys == -1)


# --- the mixing function ------------------------------------------------------------------
def test_fmix64_and_combine64_match_python_ints():
    rng = np.random.default_rng(3)
    xs = [0, 1, MASK, 1 << 63, (1 << 63) - 1] + [int(x) for x in rng.integers(0, 2**63, 40, dtype=np.int64)]
    for x in xs:
        v = (x * 7919 + 13) & MASK
        with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
            assert int(E.fmix64(np.uint64(x))) == naive_fmix(x)
            assert int(E.combine64(np.uint64(x), np.uint64(v))) == naive_combine(x, v)


@pytest.mark.parametrize("seed", [0, 1, -1, 2**62, -(2**63)])
def test_splitmix64_sequence_matches_python_ints(seed):
    with np.errstate(over="ignore"):
        out = splitmix64_sequence(50, np.int64(seed))
    assert out.dtype == np.int64
    assert out.tolist() == naive_splitmix64(50, seed)
    assert len(set(out.tolist())) == 50


# --- chained keys of generated workloads ----------------------------------------------------
def test_hash_chain_states_are_the_unremapped_keys():
    rng = np.random.default_rng(5)
    prompts = [rng.integers(-(2**63), 2**63 - 1, int(rng.integers(0, 40)), dtype=np.int64).tolist() for _ in range(20)]
    toks, offs = flatten(prompts)
    with np.errstate(over="ignore"):
        states, soffs = hash_chain_states(toks, offs, np.int64(4))
    assert [states[soffs[i]:soffs[i + 1]].tolist() for i in range(len(prompts))] == naive_chain_states(prompts, 4)


@pytest.mark.parametrize("seed", range(6))
def test_chain_prompt_keys_match_naive(seed):
    """Sessions (a request extends its parent's prompt), prefix groups and fresh blocks,
    processed in an order that puts every parent first but is otherwise shuffled."""
    rng = np.random.default_rng(seed)
    bs = int(rng.choice([1, 4, 16]))
    groups = [rng.integers(0, 1000, int(rng.integers(0, 5 * bs))).tolist() for _ in range(3)]
    with np.errstate(over="ignore"):
        g_states, g_offs = hash_chain_states(*flatten(groups), np.int64(bs))
    group_states = [g_states[g_offs[g]:g_offs[g + 1]].tolist() for g in range(len(groups))]
    n = int(rng.integers(1, 40))
    parent, group, n_blocks = [], [], []
    for i in range(n):
        p = int(rng.integers(0, i)) if i > 0 and rng.random() < 0.4 else -1
        parent.append(p)
        group.append(int(rng.integers(-1, len(groups))))
        lo = n_blocks[p] if p >= 0 and rng.random() < 0.8 else 0  # usually longer than the parent
        n_blocks.append(lo + int(rng.integers(0, 6)))
    seeds = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    # any order with parents first: a random topological order
    order, done = [], set()
    pending = list(rng.permutation(n))
    while pending:
        i = int(pending.pop(0))
        if parent[i] < 0 or parent[i] in done:
            order.append(i)
            done.add(i)
        else:
            pending.append(i)
    key_offsets = np.concatenate([[0], np.cumsum(n_blocks)]).astype(np.int64)
    keys = np.full(int(key_offsets[-1]), 12345, np.int64)
    with np.errstate(over="ignore"):
        chain_prompt_keys(key_offsets, np.array(parent, np.int64), np.array(group, np.int64), seeds,
                          np.array(order, np.int64), g_states, g_offs, keys)
    got = [keys[key_offsets[i]:key_offsets[i + 1]].tolist() for i in range(n)]
    assert got == naive_chain_prompt_keys(n_blocks, parent, group, seeds.tolist(), group_states)
    # shared structure: a child's leading keys are its parent's
    for i in range(n):
        if parent[i] >= 0:
            m = min(n_blocks[i], n_blocks[parent[i]])
            assert got[i][:m] == got[parent[i]][:m]
    assert -1 not in keys.tolist()


def test_chain_prompt_keys_of_group_prompts_equal_hashed_tokens():
    """A request that starts with a group prompt gets exactly the keys hash_prompt_blocks
    gives its real tokens on the shared blocks."""
    bs = 4
    group = list(range(100, 118))  # 4 full blocks + 2 tokens
    key_offsets = np.array([0, 3, 9], np.int64)  # request 0: 3 blocks, request 1: 6 blocks
    keys = np.empty(9, np.int64)
    with np.errstate(over="ignore"):
        g_states, g_offs = hash_chain_states(*flatten([group]), np.int64(bs))
        chain_prompt_keys(key_offsets, np.array([-1, -1]), np.array([0, 0]), np.array([7, 8], np.int64),
                          np.array([0, 1]), g_states, g_offs, keys)
    real, _, _ = run_kernel([group], bs)
    assert keys[:3].tolist() == real[0][:3]
    assert keys[3:7].tolist() == real[0][:4]
    assert len(set(keys[7:9].tolist()) | set(real[0])) == len(real[0]) + 2  # fresh blocks: new keys
