"""The router's prefix-affinity index (kernels/prefix_index.py) against a naive model:
one OrderedDict per instance (least recent first) with a capacity and LRU eviction, and
the cluster map key -> set of instances derived from it.

Covers ``index_touch`` (insert, move-to-most-recent, eviction when full), the cluster map
``gmap_*`` (open addressing with backward-shift deletion, keys chosen to collide), and
``leading_matches`` (matched leading keys per active instance), including more than 64
instances (two mask words)."""

from __future__ import annotations

import copy
from collections import OrderedDict

import numpy as np
import pytest

from kernels import dtypes as D
from kernels.prefix_index import (
    _home,
    gmap_clear_bit,
    gmap_find,
    gmap_set_bit,
    index_touch,
    leading_matches,
)


def next_pow2(x: int) -> int:
    return 1 << max(int(x) - 1, 1).bit_length()


class NaiveIndex:
    """Per-instance LRU of keys (OrderedDict: first = least recent)."""

    def __init__(self, n_inst: int, capacity: int):
        self.capacity = capacity
        self.lru = [OrderedDict() for _ in range(n_inst)]

    def touch(self, i: int, key: int) -> None:
        od = self.lru[i]
        if key in od:
            od.move_to_end(key)
            return
        if len(od) >= self.capacity:
            od.popitem(last=False)
        od[key] = None

    def holders(self, key: int) -> set[int]:
        return {i for i, od in enumerate(self.lru) if key in od}

    def matches(self, keys, active) -> list[int]:
        out = []
        for i, od in enumerate(self.lru):
            n = 0
            if active[i]:
                for k in keys:
                    if k not in od:
                        break
                    n += 1
            out.append(n)
        return out


class KernelIndex:
    """The arrays the engine allocates for the index (as blis_fast.simulator.build_state:
    ``pi_state`` (n_inst, 4), the per-instance hash ``slots`` and the ring of touch
    records, ``ring_factor`` × capacity records per instance; the engine uses 4)."""

    def __init__(self, n_inst: int, capacity: int, ring_factor: float = 4):
        self.n_inst = n_inst
        self.capacity = capacity
        self.slots_per_inst = next_pow2(2 * capacity)
        self.n_words = (n_inst + 63) // 64
        self.pi_state = np.zeros((n_inst, 4), np.int64)
        self.slots = np.zeros(2 * n_inst * self.slots_per_inst, np.int64)
        self.ring = np.zeros((n_inst, max(int(ring_factor * capacity), capacity + 1), 2), np.int64)
        self.gmap = np.zeros((next_pow2(2 * n_inst * capacity), 1 + self.n_words), np.int64)
        self.gmap[:, 0] = -1
        self.inst = np.zeros(n_inst, D.INSTANCE_DT)
        self.inst["active"] = 1
        self.alive = np.zeros(self.n_words, np.int64)
        self.counts = np.zeros(n_inst, np.int64)

    def touch(self, i: int, key: int) -> None:
        index_touch(self.pi_state, self.slots, self.ring, self.gmap, np.int64(self.capacity),
                    np.int64(self.slots_per_inst), np.int64(i), np.int64(key))

    def holders(self, key: int) -> set[int] | None:
        row = int(gmap_find(self.gmap, np.int64(key)))
        if row < 0:
            return None
        return {i for i in range(self.n_inst) if (int(self.gmap[row, 1 + i // 64]) >> (i % 64)) & 1}

    def matches(self, keys, active) -> list[int]:
        self.inst["active"] = np.asarray(active, np.int32)
        keys = np.asarray(keys, np.int64)
        leading_matches(self.gmap, keys, np.int64(0), np.int64(len(keys)), self.inst, self.alive, self.counts)
        return self.counts.tolist()


def check_same(k: KernelIndex, m: NaiveIndex, universe) -> None:
    """Same key sets per instance (seen through the cluster map and single-key matches),
    no orphan cluster-map rows."""
    for key in universe:
        expect = m.holders(key)
        got = k.holders(key)
        if expect:
            assert got == expect, f"key {key}: holders"
        else:
            assert got is None, f"key {key}: stale cluster-map row"
        assert k.matches([key], np.ones(k.n_inst, np.int32)) == [int(i in expect) for i in range(k.n_inst)]
    used_rows = int(np.count_nonzero(k.gmap[:, 1:].any(axis=1)))
    assert used_rows == sum(1 for key in universe if m.holders(key)), "orphan rows in the cluster map"


def lru_order(k: KernelIndex, i: int, universe) -> list[int]:
    """Instance i's keys least recent first, observed by evicting them one by one on a copy
    (touching fresh keys into a full index)."""
    c = copy.deepcopy(k)
    held = [key for key in universe if i in (c.holders(key) or set())]
    fresh = max(abs(int(x)) for x in universe) + 1000
    order = []
    while len(order) < len(held):
        if len(order) == 0:  # fill to capacity first so that every further touch evicts
            for _ in range(k.capacity - len(held)):
                c.touch(i, fresh)
                fresh += 1
        before = {key for key in held if i in (c.holders(key) or set())}
        c.touch(i, fresh)
        fresh += 1
        after = {key for key in held if i in (c.holders(key) or set())}
        gone = before - after
        assert len(gone) == 1, gone
        order.append(gone.pop())
    return order


# ============================================================================ index_touch


def test_eviction_order_when_capacity_exceeded():
    k, m = KernelIndex(2, 3), NaiveIndex(2, 3)
    universe = list(range(1, 10))
    for i, key in [(0, 1), (0, 2), (0, 3), (1, 1)]:
        k.touch(i, key)
        m.touch(i, key)
    check_same(k, m, universe)
    assert lru_order(k, 0, universe) == [1, 2, 3]
    k.touch(0, 4)  # full: evicts key 1 from instance 0 only
    m.touch(0, 4)
    check_same(k, m, universe)
    assert lru_order(k, 0, universe) == [2, 3, 4]
    assert k.holders(1) == {1}
    k.touch(0, 2)  # re-reference moves it to the most recent end, no eviction
    m.touch(0, 2)
    assert lru_order(k, 0, universe) == [3, 4, 2]
    k.touch(0, 5)  # now evicts 3, not 2
    m.touch(0, 5)
    check_same(k, m, universe)
    assert lru_order(k, 0, universe) == [4, 2, 5]
    assert k.holders(3) is None
    k.touch(0, 5)  # touching the tail changes nothing
    m.touch(0, 5)
    check_same(k, m, universe)


def test_capacity_one():
    k, m = KernelIndex(1, 1), NaiveIndex(1, 1)
    for key in [7, 7, 8, 7, 9, 9]:
        k.touch(0, key)
        m.touch(0, key)
        check_same(k, m, [7, 8, 9])


@pytest.mark.parametrize("ring_factor", [4, 1], ids=["ring4x", "ring-tight"])
@pytest.mark.parametrize("n_inst,capacity,seed", [(3, 4, 0), (4, 8, 1), (5, 16, 2), (70, 3, 3)])
def test_random_touches_match_naive_model(n_inst, capacity, seed, ring_factor):
    """Random touches (many re-touches: stale ring records, ring compaction, evictions)."""
    rng = np.random.default_rng(seed)
    k, m = KernelIndex(n_inst, capacity, ring_factor), NaiveIndex(n_inst, capacity)
    # keys chosen to collide in the hash tables: small multiples of the table sizes, plus
    # large and negative int64 keys
    size = k.gmap.shape[0]
    universe = sorted({int(x) for x in np.r_[np.arange(1, 3 * capacity), size * np.arange(1, 6),
                                             k.slots_per_inst * np.arange(1, 6) + 1,
                                             rng.integers(-2**62, 2**62, 8)] if x != -1})
    for step in range(600):
        i = int(rng.integers(n_inst)) if n_inst < 64 else int(rng.choice([0, 1, 63, 64, 65, 69]))
        key = int(rng.choice(universe))
        k.touch(i, key)
        m.touch(i, key)
        if step % 25 == 0:
            check_same(k, m, universe)
        if step % 100 == 99:
            for j in {0, n_inst - 1, i}:
                assert lru_order(k, j, universe) == list(m.lru[j])
    check_same(k, m, universe)


# ============================================================================ cluster map


@pytest.mark.parametrize("n_words", [1, 2])
def test_gmap_set_clear_with_collisions(n_words):
    rng = np.random.default_rng(7)
    rows = 16
    gmap = np.zeros((rows, 1 + n_words), np.int64)
    gmap[:, 0] = -1
    n_inst = 64 * n_words
    model: dict[int, set[int]] = {}
    # every key has home 3 or 4 (mask 15, keys < 2**29): long probe chains and wrap-around
    universe = [3 + 16 * j for j in range(5)] + [4 + 16 * j for j in range(3)] + [15, 31, 0]
    for key in universe:
        assert int(_home(np.int64(key), np.int64(rows - 1))) in (3, 4, 15, 0)
    for _ in range(2000):
        key = int(rng.choice(universe))
        i = int(rng.integers(n_inst)) if rng.random() < 0.5 else int(rng.choice([0, 63, n_inst - 1]))
        if rng.random() < 0.55:
            gmap_set_bit(gmap, np.int64(key), np.int64(i))
            model.setdefault(key, set()).add(i)
        else:
            gmap_clear_bit(gmap, np.int64(key), np.int64(i))
            if key in model:
                model[key].discard(i)
                if not model[key]:
                    del model[key]
        for kk in universe:
            row = int(gmap_find(gmap, np.int64(kk)))
            if kk in model:
                assert row >= 0
                bits = {b for b in range(n_inst) if (int(gmap[row, 1 + b // 64]) >> (b % 64)) & 1}
                assert bits == model[kk]
            else:
                assert row == -1
        assert int(np.count_nonzero(gmap[:, 1:].any(axis=1))) == len(model)


def test_gmap_bit_63_and_64_are_distinct_words():
    gmap = np.zeros((8, 3), np.int64)
    gmap[:, 0] = -1
    gmap_set_bit(gmap, np.int64(42), np.int64(63))
    gmap_set_bit(gmap, np.int64(42), np.int64(64))
    row = int(gmap_find(gmap, np.int64(42)))
    assert gmap[row, 1] == np.int64(-2**63)  # bit 63 of word 0 (sign bit)
    assert gmap[row, 2] == 1
    gmap_clear_bit(gmap, np.int64(42), np.int64(63))
    assert gmap_find(gmap, np.int64(42)) == row and gmap[row, 1] == 0
    gmap_clear_bit(gmap, np.int64(42), np.int64(64))
    assert gmap_find(gmap, np.int64(42)) == -1
    gmap_clear_bit(gmap, np.int64(42), np.int64(64))  # absent key: no-op
    assert not gmap[:, 1:].any()  # every row empty (all mask words zero)


# ============================================================================ leading_matches


def _request_paths(rng, n_paths, depth):
    """Key chains sharing prefixes, as chained prefix keys would: path p's key d depends on
    its first d+1 branch choices."""
    paths = []
    for _ in range(n_paths):
        choices = rng.integers(0, 3, depth)
        keys, h = [], 17
        for c in choices:
            h = (h * 1_000_003 + int(c) + 1) % (2**61 - 1)
            keys.append(h)
        paths.append(keys)
    return paths


@pytest.mark.parametrize("n_inst,capacity,seed", [(4, 6, 0), (6, 12, 1), (70, 5, 2), (130, 4, 3)])
def test_leading_matches_random(n_inst, capacity, seed):
    rng = np.random.default_rng(seed)
    k, m = KernelIndex(n_inst, capacity), NaiveIndex(n_inst, capacity)
    paths = _request_paths(rng, 12, 6)
    for _ in range(250):
        req = paths[int(rng.integers(len(paths)))][: int(rng.integers(1, 7))]
        i = int(rng.integers(n_inst))
        for key in req:  # the engine touches every key of the routed request, in order
            k.touch(i, key)
            m.touch(i, key)
        query = paths[int(rng.integers(len(paths)))][: int(rng.integers(0, 7))]
        active = (rng.random(n_inst) < 0.8).astype(np.int32)
        assert k.matches(query, active) == m.matches(query, active)
    universe = sorted({key for p in paths for key in p})
    check_same(k, m, universe)


def test_leading_matches_counts_only_leading_keys_and_active_instances():
    k = KernelIndex(70, 10)
    for key in (1, 2, 3):
        k.touch(2, key)
    for key in (1, 2):
        k.touch(65, key)
    for key in (2, 3):  # not leading: no match without key 1
        k.touch(5, key)
    k.touch(69, 1)
    active = np.ones(70, np.int32)
    got = k.matches([1, 2, 3, 4], active)
    expect = [0] * 70
    expect[2], expect[65], expect[69] = 3, 2, 1
    assert got == expect
    active[65] = 0
    expect[65] = 0
    assert k.matches([1, 2, 3, 4], active) == expect
    assert k.matches([], np.ones(70, np.int32)) == [0] * 70
    assert k.matches([9], np.ones(70, np.int32)) == [0] * 70


def test_leading_match_lost_when_leading_key_evicted():
    """Keys of a request are touched in order, so its first key is the oldest and is
    evicted first: then the instance matches nothing for that prompt."""
    k, m = KernelIndex(2, 4), NaiveIndex(2, 4)
    for key in (10, 11, 12, 13):
        k.touch(0, key)
        m.touch(0, key)
    assert k.matches([10, 11, 12, 13], [1, 1]) == [4, 0]
    k.touch(0, 99)
    m.touch(0, 99)
    assert k.matches([10, 11, 12, 13], [1, 1]) == [0, 0] == m.matches([10, 11, 12, 13], [1, 1])
