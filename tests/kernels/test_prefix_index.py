"""The router's prefix-affinity index (kernels/policies/prefix_index.py) against
tests/naive/prefix_index.py: one OrderedDict per instance (least recent first) with a
capacity and LRU eviction, and the cluster map key -> set of instances derived from it.

Covers ``index_touch`` (insert, move-to-most-recent, eviction when full),
``index_insert_unshared`` (place-holders), the cluster map (``_gmap_set_bit`` /
``_gmap_clear_bit`` over structs/hashtable.py rows, keys chosen to collide), and
``leading_matches`` (matched leading keys per active instance), including more than 64
instances (two mask words)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import entry as E
from blis_fast.run.tables import next_pow2
from blis_fast_kernels.schema import IndexRecord, IndexRow, IndexState
from naive.prefix_index import NaiveIndex
from states import lengths_state


class KernelIndex:
    """The router-index arrays of a State (``blis_fast.run.build_state`` with the
    prefix-affinity policy), resized for the test: per instance a hash of
    ``next_pow2(2 * capacity)`` rows and a ring of ``ring_factor`` × capacity touch
    records (the engine allocates 2 × capacity), and a cluster map of
    ``next_pow2(2 * n_inst * capacity)`` rows."""

    def __init__(self, n_inst: int, capacity: int, ring_factor: float = 2):
        self.n_inst = n_inst
        self.capacity = capacity
        self.rows_per_inst = next_pow2(2 * capacity)
        self.n_words = (n_inst + 63) // 64
        st = lengths_state([16], [1], num_instances=n_inst, total_kv_blocks=4, routing_policy="prefix-affinity",
                           prefix_index_capacity=capacity)
        assert st.pi_state.shape == (n_inst, len(IndexState)) and st.alive.shape == (self.n_words,)
        self.st = st._replace(
            pi_table=np.zeros((n_inst * self.rows_per_inst, len(IndexRow)), np.int64),
            pi_ring=np.zeros((n_inst, max(int(ring_factor * capacity), capacity + 1)), np.int64),
            pi_records=np.zeros((n_inst, max(int(ring_factor * capacity), capacity + 1), len(IndexRecord)), np.int64),
            gmap=np.zeros((next_pow2(2 * n_inst * capacity), 1 + self.n_words), np.int64),
            keys=np.zeros(1024, np.int64),
            key_shared=np.ones(1024, np.uint8),
        )
        self.st.settings[0]["prefix_index_slots"] = self.rows_per_inst  # (index_record_request reads it)
        # the engine names a key by its position in ``keys``: each touch and each query gets
        # fresh positions (the array only grows, as a run's keys never change: the router's
        # memo of its last walk compares keys by position)
        self.n_keys = 0

    def _append(self, keys) -> int:
        """Write ``keys`` at fresh positions of ``keys`` (all shared) -> the first one."""
        keys = np.asarray(keys, np.int64).reshape(-1)
        pos = self.n_keys
        while pos + len(keys) > len(self.st.keys):
            self.st = self.st._replace(keys=np.r_[self.st.keys, np.zeros_like(self.st.keys)],
                                       key_shared=np.ones(2 * len(self.st.keys), np.uint8))
        self.st.keys[pos:pos + len(keys)] = keys
        self.n_keys += len(keys)
        return pos

    @property
    def gmap(self):
        return self.st.gmap

    def touch(self, i: int, key: int) -> None:
        pos = self._append([key])
        E.index_touch(self.st, np.int64(self.capacity), np.int64(self.rows_per_inst), np.int64(i), np.int64(pos))

    def touch_run(self, i: int, keys) -> None:
        """Touch ``keys`` in order at consecutive positions, as the router records a
        request's shared keys (index_record_request: one record per run, a run that is
        exactly a live record's moved in one step)."""
        pos = self._append(keys)
        E.index_record_request(self.st, np.int64(i), np.int64(pos), np.int64(len(keys)))

    def insert_unshared(self, i: int, count: int = 1) -> None:
        E.index_insert_unshared(self.st, np.int64(self.capacity), np.int64(self.rows_per_inst), np.int64(i),
                                np.int64(count))

    def size(self, i: int) -> int:
        return int(self.st.pi_state[i, IndexState.SIZE])

    def holders(self, key: int) -> set[int] | None:
        row = int(E.table_find(self.gmap, 0, self.gmap.shape[0] - 1, np.int64(key)))
        if row < 0:
            return None
        return {i for i in range(self.n_inst) if (int(self.gmap[row, 1 + i // 64]) >> (i % 64)) & 1}

    def matches(self, keys, active) -> list[int]:
        self.st.inst["active"] = np.asarray(active, np.int32)
        pos = self._append(keys)
        E.leading_matches(self.st, np.int64(pos), np.int64(len(keys)))
        return self.st.affinity.tolist()


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


@pytest.mark.parametrize("ring_factor", [4, 2, 1], ids=["ring4x", "ring2x", "ring-tight"])
@pytest.mark.parametrize("n_inst,capacity,seed", [(3, 4, 0), (4, 8, 1), (5, 16, 2), (70, 3, 3)])
def test_random_touches_match_naive_model(n_inst, capacity, seed, ring_factor):
    """Random touches (many re-touches: stale ring records, ring compaction, evictions)."""
    rng = np.random.default_rng(seed)
    k, m = KernelIndex(n_inst, capacity, ring_factor), NaiveIndex(n_inst, capacity)
    # keys chosen to collide in the hash tables: small multiples of the table sizes, plus
    # large and negative int64 keys
    size = k.gmap.shape[0]
    universe = sorted({int(x) for x in np.r_[np.arange(1, 3 * capacity), size * np.arange(1, 6),
                                             k.rows_per_inst * np.arange(1, 6) + 1,
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


@pytest.mark.parametrize("ring_factor", [2, 1], ids=["ring2x", "ring-tight"])
@pytest.mark.parametrize("n_inst,capacity,seed", [(3, 4, 0), (2, 1, 1), (5, 9, 2), (66, 3, 3)])
def test_unshared_place_holders_match_fresh_keys(n_inst, capacity, seed, ring_factor):
    """A place-holder behaves exactly like a touch of a key no one else has: it takes a
    unit of capacity, evicts the LRU key when full and leaves when it is the LRU itself --
    also a run of them inserted at once, longer than the capacity or not."""
    rng = np.random.default_rng(50 + seed)
    k, m = KernelIndex(n_inst, capacity, ring_factor), NaiveIndex(n_inst, capacity)
    universe = list(range(1, 2 * capacity + 3))
    for step in range(500):
        i = int(rng.integers(n_inst)) if n_inst < 64 else int(rng.choice([0, 63, 64, 65]))
        if rng.random() < 0.45:  # runs of place-holders are one ring record, inserted in one call
            run = int(rng.integers(1, 4)) if rng.random() < 0.8 else int(rng.integers(1, 2 * capacity + 3))
            k.insert_unshared(i, run)
            for _ in range(run):
                m.insert_unshared(i)
        else:
            key = int(rng.choice(universe))
            k.touch(i, key)
            m.touch(i, key)
        assert k.size(i) == m.size(i)
        if step % 20 == 0:
            check_same(k, m, universe)
            assert [k.size(j) for j in range(n_inst)] == [m.size(j) for j in range(n_inst)]
    check_same(k, m, universe)


def check_records(k: KernelIndex) -> None:
    """Every current record's live count is the number of its keys whose row names it (at
    their place in its run, not yet passed by eviction); every row names a current record,
    at a place holding its key; records own one current entry each."""
    st = k.st
    rows = k.rows_per_inst
    for i in range(k.n_inst):
        head, n = int(st.pi_state[i, IndexState.RING_HEAD]), int(st.pi_state[i, IndexState.RING_LEN])
        slots = [(head + j) % st.pi_ring.shape[1] for j in range(n)]
        table = st.pi_table[i * rows:(i + 1) * rows]
        held = {int(r[IndexRow.KEY]): (int(r[IndexRow.RECORD]) - 1, int(r[IndexRow.OFFSET]))
                for r in table if r[IndexRow.RECORD] != 0}
        current = {}
        for slot in slots:
            e = int(st.pi_ring[i, slot])
            if e >= 0 and int(st.pi_records[i, e, IndexRecord.SLOT]) == slot:
                current[e] = slot
        for e in current:
            pos, count, live, front = (int(st.pi_records[i, e, c]) for c in
                                       (IndexRecord.POS, IndexRecord.COUNT, IndexRecord.LIVE, IndexRecord.FRONT))
            mine = [t for t in range(front, count) if held.get(int(st.keys[pos + t])) == (e, t)]
            assert live == len(mine), f"instance {i} record {e}: live {live}, keys at {mine}"
        for key, (e, t) in held.items():
            assert e in current, f"instance {i}: key {key} names record {e}, which has no current entry"
            pos = int(st.pi_records[i, e, IndexRecord.POS])
            assert int(st.keys[pos + t]) == key


@pytest.mark.parametrize("ring_factor", [2, 1], ids=["ring2x", "ring-tight"])
@pytest.mark.parametrize("n_inst,capacity,seed", [(2, 6, 0), (3, 16, 1), (4, 40, 2)])
def test_prefix_runs_match_naive_model(n_inst, capacity, seed, ring_factor):
    """Requests' key runs -- a few popular prefixes of a few keys, touched again and again
    (stale whole-run records), longer chains cut short, place-holders between -- keep the
    same keys as the naive LRU (evictions follow its order), and every record's live count
    and every row's record slot stay right."""
    rng = np.random.default_rng(300 + seed)
    k, m = KernelIndex(n_inst, capacity, ring_factor), NaiveIndex(n_inst, capacity)
    prefixes = [[100 * g + j for j in range(1, int(rng.integers(2, 7)))] for g in range(1, 5)]
    universe = sorted({key for p in prefixes for key in p})
    for step in range(400):
        i = int(rng.integers(n_inst))
        p = prefixes[int(rng.integers(len(prefixes)))]
        run = p[:int(rng.integers(1, len(p) + 1))]
        k.touch_run(i, run)
        for key in run:
            m.touch(i, key)
        if rng.random() < 0.5:
            c = int(rng.integers(1, capacity + 2))
            k.insert_unshared(i, c)
            for _ in range(c):
                m.insert_unshared(i)
        check_records(k)
        if step % 20 == 0:
            check_same(k, m, universe)
            assert [k.size(j) for j in range(n_inst)] == [m.size(j) for j in range(n_inst)]
    check_same(k, m, universe)


# ============================================================================ cluster map


def gmap_find(gmap, key) -> int:
    return int(E.table_find(gmap, 0, gmap.shape[0] - 1, np.int64(key)))


def bit_set(words) -> set[int]:
    """The instances whose bits are set in a row's mask words."""
    out = set()
    for w, x in enumerate(words.tolist()):
        x &= (1 << 64) - 1
        while x:
            low = x & -x
            out.add(64 * w + low.bit_length() - 1)
            x ^= low
    return out


@pytest.mark.parametrize("n_words", [1, 2])
def test_gmap_set_clear_with_collisions(n_words):
    rng = np.random.default_rng(7)
    rows = 16
    gmap = np.zeros((rows, 1 + n_words), np.int64)
    n_inst = 64 * n_words
    model: dict[int, set[int]] = {}
    # every key has home 3 or 4 (mask 15, keys < 2**29): long probe chains and wrap-around
    universe = [3 + 16 * j for j in range(5)] + [4 + 16 * j for j in range(3)] + [15, 31, 0]
    for key in universe:
        assert int(E.table_home(np.int64(key), np.int64(rows - 1))) in (3, 4, 15, 0)
    for _ in range(2000):
        key = int(rng.choice(universe))
        i = int(rng.integers(n_inst)) if rng.random() < 0.5 else int(rng.choice([0, 63, n_inst - 1]))
        if rng.random() < 0.55:
            E.gmap_set_bit(gmap, np.int64(key), np.int64(i))
            model.setdefault(key, set()).add(i)
        else:
            E.gmap_clear_bit(gmap, np.int64(key), np.int64(i))
            if key in model:
                model[key].discard(i)
                if not model[key]:
                    del model[key]
        rows_of = E.table_find_many(gmap, 0, rows - 1, np.array(universe, np.int64)).tolist()
        for kk, row in zip(universe, rows_of, strict=True):
            if kk in model:
                assert row >= 0
                assert bit_set(gmap[row, 1:]) == model[kk]
            else:
                assert row == -1
        assert int(np.count_nonzero(gmap[:, 1:].any(axis=1))) == len(model)


def test_gmap_bit_63_and_64_are_distinct_words():
    gmap = np.zeros((8, 3), np.int64)
    E.gmap_set_bit(gmap, np.int64(42), np.int64(63))
    E.gmap_set_bit(gmap, np.int64(42), np.int64(64))
    row = gmap_find(gmap, 42)
    assert gmap[row, 1] == np.int64(-2**63)  # bit 63 of word 0 (sign bit)
    assert gmap[row, 2] == 1
    E.gmap_clear_bit(gmap, np.int64(42), np.int64(63))
    assert gmap_find(gmap, 42) == row and gmap[row, 1] == 0
    E.gmap_clear_bit(gmap, np.int64(42), np.int64(64))
    assert gmap_find(gmap, 42) == -1
    E.gmap_clear_bit(gmap, np.int64(42), np.int64(64))  # absent key: no-op
    assert not gmap.any()  # every row empty (all mask words zero)


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


@pytest.mark.parametrize("seed", range(3))
def test_leading_matches_memo_follows_every_change(seed):
    """The same popular prefixes asked again and again (the router's memo answers from its
    last walk), with index changes in between -- re-touches that change nothing in the
    cluster map, inserts, evictions by place-holders -- and active-set changes."""
    rng = np.random.default_rng(40 + seed)
    n_inst, capacity = 5, 8
    k, m = KernelIndex(n_inst, capacity), NaiveIndex(n_inst, capacity)
    paths = _request_paths(rng, 3, 7)
    active = np.ones(n_inst, np.int32)
    for _ in range(400):
        r = rng.random()
        i = int(rng.integers(n_inst))
        if r < 0.25:
            for key in paths[int(rng.integers(len(paths)))][: int(rng.integers(1, 8))]:
                k.touch(i, key)
                m.touch(i, key)
        elif r < 0.35:
            c = int(rng.integers(1, 4))
            k.insert_unshared(i, c)
            for _ in range(c):
                m.insert_unshared(i)
        elif r < 0.4:
            active[i] = 1 - active[i]
        query = paths[int(rng.integers(len(paths)))][: int(rng.integers(0, 8))]
        assert k.matches(query, active) == m.matches(query, active)


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
