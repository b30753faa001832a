"""The array-backed structures of kernels/structs/ against their naive references:
doubly linked lists (dlist) vs Python lists, open-addressing row tables (hashtable) vs a
dict, the merge sort (sort) vs ``sorted`` and a quadratic pair count, key counting
(keycount) vs a set.  The heap is in test_heap.py, the 64-bit mix in test_prefix_keys.py."""

import numpy as np
import pytest

import entry as E
from builders import seeds
from blis_fast_kernels.schema import INSTANCE_DT, KV_BLOCK_DT, REQUEST_DT
from blis_fast_kernels.structs.keycount import REPEATED, SHARED, flag_keys
from naive.dlist import NaiveLists
from naive.hashtable import NaiveTable, naive_repeated, naive_shared
from naive.sort import naive_sorted

# ============================================================================ dlist


class KernelLists:
    """Lists threaded through a table the way the engine threads them: wait queues through
    the request table (int64 links), free lists through the block table (int32 links);
    list ends and lengths in the instance table."""

    def __init__(self, n_elems, n_owners, through):
        self.inst = np.zeros(n_owners, INSTANCE_DT)
        if through == "requests":
            self.elems = np.zeros(n_elems, REQUEST_DT)
            self.links = ("queue_prev", "queue_next")
            self.ends = ("wq_head", "wq_tail", "wq_len")
        else:
            self.elems = np.zeros(n_elems, KV_BLOCK_DT)
            self.links = ("lru_prev", "lru_next")
            self.ends = ("free_head", "free_tail", "free_len")
        for f in self.links:
            self.elems[f] = -1
        for f in self.ends[:2]:
            self.inst[f] = -1

    def args(self):
        return (self.elems[self.links[0]], self.elems[self.links[1]], self.inst[self.ends[0]],
                self.inst[self.ends[1]], self.inst[self.ends[2]])

    def members(self, o):
        """Walk list o forwards and backwards; both walks and the length must agree."""
        prev, nxt = (self.elems[f] for f in self.links)
        head, tail, length = (int(self.inst[o][f]) for f in self.ends)
        fwd, e, last = [], head, -1
        while e >= 0:
            assert int(prev[e]) == last, "broken back link"
            fwd.append(e)
            last, e = e, int(nxt[e])
            assert len(fwd) <= len(prev), "cycle"
        assert last == tail
        bwd, e = [], tail
        while e >= 0:
            bwd.append(e)
            e = int(prev[e])
            assert len(bwd) <= len(prev), "cycle"
        assert bwd[::-1] == fwd
        assert length == len(fwd)
        return fwd


@pytest.mark.parametrize("through", ["requests", "blocks"])
@pytest.mark.parametrize("seed", seeds(8, fast=3))
def test_dlist_random_operations_match_python_lists(seed, through):
    rng = np.random.default_rng(seed)
    n_elems, n_owners = int(rng.integers(1, 30)), int(rng.integers(1, 4))
    k, m = KernelLists(n_elems, n_owners, through), NaiveLists(n_owners)
    where = {}  # element -> owner
    for _ in range(300):
        o = int(rng.integers(n_owners))
        op = rng.random()
        free = [e for e in range(n_elems) if e not in where]
        if free and op < 0.4:
            e = int(rng.choice(free))
            if rng.random() < 0.5:
                E.dl_push_back(*k.args(), o, e)
                m.push_back(o, e)
            else:
                E.dl_push_front(*k.args(), o, e)
                m.push_front(o, e)
            where[e] = o
        elif m.lists[o] and op < 0.65:
            e = int(rng.choice(m.lists[o]))
            E.dl_remove(*k.args(), o, e)
            m.remove(o, e)
            del where[e]
        elif m.lists[o] and op < 0.85:
            assert int(E.dl_pop_front(*k.args(), o)) == m.pop_front(o)
            where = {e: w for e, w in where.items() if e in m.lists[w]}
        elif m.lists[o]:
            order = rng.permutation(m.lists[o]).astype(np.int64)
            padded = np.r_[order, rng.integers(0, n_elems, 3)]  # only order[:n] is read
            prev, nxt, head, tail, _ = k.args()
            E.dl_relink(prev, nxt, head, tail, o, padded, len(order))
            m.relink(o, order.tolist())
        for w in range(n_owners):
            assert k.members(w) == m.lists[w]
        prev, nxt = (k.elems[f] for f in k.links)
        for e in range(n_elems):  # elements in no list carry no links
            if e not in where:
                assert int(prev[e]) == -1 and int(nxt[e]) == -1


# ============================================================================ hashtable


def _colliding_universe(rng, mask, n_homes, per_home):
    """(keys with few home rows, including the last row so that probe runs wrap around --
    the high word folds into the home, so it is chosen to cancel; a few large and
    negative keys)."""
    homes = rng.choice(mask + 1, size=min(mask + 1, n_homes), replace=False).tolist()
    if mask not in homes:
        homes[-1] = mask
    colliding = [(hi << 32) | (hi ^ h) for h in homes for hi in range(1, per_home + 1)]
    extra = [int(x) for x in rng.integers(-2**63, 2**63 - 1, 3, dtype=np.int64)]
    return colliding, extra


@pytest.mark.parametrize("width", [2, 3])
@pytest.mark.parametrize("seed", seeds(10, fast=3))
def test_hashtable_random_ops_match_dict(seed, width):
    rng = np.random.default_rng(seed)
    mask = int(rng.choice([1, 3, 7, 15]))
    off = int(rng.integers(0, 3))
    rows = np.zeros((off + mask + 1 + 2, width), np.int64)  # rows around the table's slice stay zero
    colliding, extra = _colliding_universe(rng, mask, 3, 6)
    assert len({int(E.table_home(np.int64(k), np.int64(mask))) for k in colliding}) <= 3  # they do collide
    universe = sorted(set(colliding + extra))
    ref = NaiveTable()
    for _ in range(300):
        key = int(rng.choice(universe))
        if ref.get(key) is not None and rng.random() < 0.6:
            assert E.table_delete(rows, off, mask, key)
            ref.delete(key)
        elif ref.get(key) is not None or len(ref) < mask:  # keep one empty row: probing stops there
            values = rng.integers(1, 1000, width - 1)
            if width > 2 and rng.random() < 0.5:
                values[0] = 0  # one zero word is fine, all zero would be an empty row
            h, found = E.table_put(rows, off, mask, key, values.astype(np.int64))
            assert bool(found) == ref.put(key, values)
        else:
            assert not E.table_delete(rows, off, mask, key)  # absent: no-op
        for u in universe:
            h = int(E.table_find(rows, off, mask, np.int64(u)))
            want = ref.get(u)
            if want is None:
                assert h == -1
                ph, pf = E.table_probe(rows, off, mask, np.int64(u))
                assert not pf and not rows[off + int(ph), 1:].any()  # the empty row it would go to
            else:
                assert 0 <= h <= mask and int(rows[off + h, 0]) == u
                assert tuple(int(x) for x in rows[off + h, 1:]) == want
        assert int(rows[off:off + mask + 1, 1:].any(axis=1).sum()) == len(ref)
        assert not rows[:off].any() and not rows[off + mask + 1:].any()  # stayed in its slice


@pytest.mark.parametrize("home", [0, 5, 7])
def test_hashtable_delete_in_a_long_wrapping_probe_run(home):
    mask, off = 7, 1
    rows = np.zeros((off + mask + 1 + 3, 2), np.int64)
    keys = [(m << 20) | home for m in range(1, 7)]  # one run of 6 that wraps when home is 5 or 7
    assert {int(E.table_home(np.int64(k), np.int64(mask))) for k in keys} == {home}
    for b, key in enumerate(keys):
        E.table_put(rows, off, mask, key, np.array([b + 1], np.int64))
    gone = set()
    for victim in (keys[1], keys[4], keys[0], keys[5]):
        assert E.table_delete(rows, off, mask, victim)
        gone.add(victim)
        for b, key in enumerate(keys):
            h = int(E.table_find(rows, off, mask, key))
            assert (h == -1) if key in gone else int(rows[off + h, 1]) == b + 1
    assert not rows[:off].any() and not rows[off + mask + 1:].any()


# ============================================================================ sort


def _sort_case(rng):
    n = int(rng.integers(0, 130))
    pad = int(rng.integers(0, 4))
    ids = rng.integers(0, 3 * n + 1, n + pad).astype(np.int64)  # duplicate ids too
    k1 = rng.choice([-2.5, -1.0, 0.0, 0.5, 1.0, 3.0, 1e9], n + pad) * rng.choice([1, 1, 7], n + pad)
    k2 = rng.integers(-2, 3, n + pad).astype(np.int64)
    return n, ids, k1.astype(np.float64), k2


@pytest.mark.parametrize("seed", range(20))
def test_merge_sort_matches_sorted(seed):
    rng = np.random.default_rng(seed)
    n, ids, k1, k2 = _sort_case(rng)
    want = naive_sorted(ids[:n], k1[:n], k2[:n])
    a = (ids.copy(), k1.copy(), k2.copy())
    tmp = (np.full(len(ids), -7, np.int64), np.full(len(ids), -7.0), np.full(len(ids), -7, np.int64))
    in_tmp = E.merge_sort(*a, *tmp, n)
    out = tmp if in_tmp else a
    got = list(zip(out[1][:n].tolist(), out[2][:n].tolist(), out[0][:n].tolist()))
    assert got == want
    for arr, orig in zip((*a, *tmp), (ids, k1, k2, np.full(len(ids), -7, np.int64), np.full(len(ids), -7.0),
                                     np.full(len(ids), -7, np.int64))):
        assert np.array_equal(arr[n:], orig[n:])  # nothing beyond n is touched


def test_merge_sort_breaks_ties_by_k2_then_id():
    """The order is (k1, k2, id) -- the scheduler's (weighted key, arrival, request id)."""
    k1 = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    k2 = np.array([0, 5, 0, 5, 0, 4, 0, 4, 0], np.int64)
    ids = np.array([8, 7, 6, 5, 4, 3, 2, 1, 0], np.int64)
    n = len(ids)
    tmp = (np.empty(n, np.int64), np.empty(n), np.empty(n, np.int64))
    in_tmp = E.merge_sort(ids, k1, k2, *tmp, n)
    out_ids = (tmp if in_tmp else (ids, k1, k2))[0]
    assert out_ids.tolist() == [1, 3, 5, 7, 0, 2, 4, 6, 8]



# ============================================================================ keycount


@pytest.mark.parametrize("seed", range(10))
def test_flag_keys_match_a_set(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 200))
    pool = np.r_[rng.integers(-2**63, 2**63 - 1, 10, dtype=np.int64), np.arange(-3, 4) << 32, [0, -1, -2]]
    keys = rng.choice(pool, n).astype(np.int64)
    shared, distinct = naive_shared(keys)
    flags, d = flag_keys(keys, SHARED)
    assert flags.dtype == np.uint8 and flags.view(bool).tolist() == shared.tolist() and int(d) == distinct
    flags, d = flag_keys(keys, REPEATED)
    assert flags.view(bool).tolist() == naive_repeated(keys).tolist() and int(d) == distinct


def test_flag_keys_small_cases():
    keys = np.array([5, 7, 5, 9, -3, 7, 11, -3], np.int64)
    flags, n_distinct = flag_keys(keys, SHARED)
    assert flags.tolist() == [1, 1, 1, 0, 1, 1, 0, 1] and n_distinct == 3  # 5, 7, -3
    flags, n_distinct = flag_keys(keys, REPEATED)
    assert flags.tolist() == [0, 0, 1, 0, 0, 1, 0, 1] and n_distinct == 3
    for mode in (SHARED, REPEATED):
        flags, n_distinct = flag_keys(np.zeros(0, np.int64), mode)
        assert flags.tolist() == [] and n_distinct == 0
