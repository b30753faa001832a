"""The KV-cache kernels (kernels/kv/cache.py) against tests/naive/kv.py's NaiveKVCache.

States are allocated by ``blis_fast.run.build_state`` for two instances; the tests drive
one of them (instance 1 by default, so every offset is exercised) and the other must stay
untouched.  Block keys are replaced by hand-made ones (``KeyScheme``) so that hash-table
collisions can be forced, and each test runs with every key going through the hash table
(``key_mode="hash"``) or with keys no other request carries in their direct slots
(``key_mode="flags"``, as a run does): both must behave like the naive cache.
"""

import numpy as np
import pytest

import entry as E
from builders import seeds
from blis_fast.run.tables import next_pow2
from blis_fast_kernels.kv.cache import kv_conserved
from blis_fast_kernels.schema import ALL_NAMED
from naive.kv import NaiveKVCache
from states import lengths_state


class KernelKV:
    """A State with ``n_inst`` instances of ``total`` KV blocks; operations on instance ``i``.

    ``prompts[r] = (prompt_len, keys)`` with len(keys) == prompt_len // bs; ``max_tokens[r]``
    = the most KV tokens request r ever holds (L + N - 1).  ``ht_size`` replaces the
    per-instance prefix-table size build_state chose.
    """

    def __init__(self, total, bs, prompts, max_tokens, i=1, n_inst=2, ht_size=None, prefix_caching=True,
                 key_mode="hash"):
        self.total, self.bs, self.i = total, bs, i
        lens = [p[0] for p in prompts]
        outputs = [int(m) - L + 1 for L, m in zip(lens, max_tokens, strict=True)]  # block_cap = ceil(m / bs)
        st = lengths_state(lens, outputs, bs=bs, num_instances=n_inst, total_kv_blocks=total,
                           enable_prefix_caching=prefix_caching)
        # the hand-made keys replace the workload's: request r has len(prompts[r][1]) of them
        counts = np.array([len(p[1]) for p in prompts], np.int64)
        st.reqs["key_count"] = counts
        st.reqs["key_start"] = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        st.reqs["prompt_key_count"] = np.minimum(counts, np.array(lens) // bs)
        keys = np.array([k for p in prompts for k in p[1]], dtype=np.int64)
        if key_mode == "hash":
            shared = np.ones(len(keys), np.uint8)
        else:
            values, inverse, occurrences = np.unique(keys, return_inverse=True, return_counts=True)
            shared = (occurrences[inverse] > 1).astype(np.uint8)
        st = st._replace(keys=keys, key_shared=shared, kv_slot=np.zeros(max(1, len(keys)), np.int32))
        if ht_size is None:  # build_state sized the table for the workload's own keys
            ht_size = next_pow2(2 * max(1, min(total, len(keys))))
        if ht_size is not None:
            st = st._replace(kv_table=np.zeros((n_inst * ht_size, 2), np.int64))
            st.inst["ht_offset"] = np.arange(n_inst) * ht_size
            st.inst["ht_mask"] = ht_size - 1
        assert int(st.settings[0]["prefix_caching"]) == int(prefix_caching)
        # the naive cache registers every key when its block fills; with event skipping the
        # engine defers unshared keys until a preemption (kv/cache.py), which the event-
        # skipping tests (tests/run/test_event_skipping.py) check end to end
        st.settings["event_skipping"] = 0
        st.reqs["named_upto"] = ALL_NAMED  # every block with an identity (kv/cache.py)
        assert st.reqs["block_cap"].tolist() == [-(-int(m) // bs) for m in max_tokens]
        # a request that can never fit is dropped at its instance and gets no block slice:
        # it must not be admitted here either
        assert (st.reqs["block_cap"] <= total).all(), "every request must fit in the cache"
        self.st = st
        self.inst, self.blocks, self.reqs = st.inst, st.blocks, st.reqs
        self.off = int(st.inst[i]["kv_offset"])

    # -- operations (the engine's calling conventions)
    def admit(self, r, target, budget, cap):
        self.reqs[r]["prefill_target"] = target
        n, cached = E.kv_admit(self.st, self.i, r, budget, cap)
        return None if n < 0 else (int(n), int(cached))

    def grow(self, r, n):
        return bool(E.kv_grow(self.st, self.i, r, n))

    def release(self, r):
        E.kv_release(self.st, self.i, r)

    def forget_chunk(self, r, c, n):
        E.kv_forget_chunk(self.st, self.i, r, c, n)

    def set_computed(self, r, c):
        self.reqs[r]["computed"] = c

    # -- observables (block ids relative to the instance)
    def held(self, r):
        s = int(self.reqs[r]["block_start"])
        return [int(b) - self.off for b in self.st.req_blocks[s: s + int(self.reqs[r]["blocks_held"])]]

    def free_count(self):
        return int(E.kv_free_blocks(self.inst, self.i))

    def free_order(self):
        """Blocks in the order they would be taken: virgin blocks, then the LRU list."""
        row = self.inst[self.i]
        order = list(range(int(row["kv_virgin_next"]) - self.off, self.total))
        b = int(row["free_head"])
        prev = -1
        while b >= 0:
            assert int(self.blocks[b]["lru_prev"]) == prev, "broken back link"
            order.append(b - self.off)
            prev = b
            b = int(self.blocks[b]["lru_next"])
        assert prev == int(row["free_tail"])
        assert len(order) - (self.total - (int(row["kv_virgin_next"]) - self.off)) == int(row["free_len"])
        return order

    def used_range(self):
        return int(self.inst[self.i]["kv_virgin_next"]) - self.off

    def block_keys(self):
        """Key of every block (None = unkeyed); never-used blocks are unkeyed by definition."""
        kidx = self.blocks["key_index"][self.off: self.off + self.total]
        used = self.used_range()
        return [None if (b >= used or kidx[b] < 0) else int(self.st.keys[kidx[b]]) for b in range(self.total)]

    def lookup(self, key):
        """Block caching ``key`` (absolute id) or -1: the hash table for shared keys, the
        direct slot of its only position otherwise."""
        where = np.flatnonzero(self.st.keys == key)
        q = int(where[0]) if len(where) else -1
        if q < 0 or self.st.key_shared[q]:  # (a key registered by hand lives in the table)
            return int(E.prefix_lookup(self.st, self.i, np.int64(key)))
        return int(self.st.kv_slot[q]) - 1

    def cached_entries(self):
        """Entries of instance i's hash table plus its direct slots in use."""
        h0, size = int(self.inst[self.i]["ht_offset"]), int(self.inst[self.i]["ht_mask"]) + 1
        slots = self.st.kv_slot[: len(self.st.keys)]
        mine = (slots > 0) & ((slots - 1) // self.total == self.i) if self.total else slots > 0
        return int((self.st.kv_table[h0: h0 + size, 1] != 0).sum()) + int(np.count_nonzero(mine))

    def refs(self):
        return [int(x) for x in self.blocks["ref_count"][self.off: self.off + self.total]]

    def find(self, key):
        b = self.lookup(key)
        return None if b < 0 else b - self.off

    def snapshot(self):
        held = {r: self.held(r) for r in range(len(self.reqs))}
        return (self.inst.copy(), self.blocks.copy(), self.st.kv_table.copy(), self.reqs.copy(), held)


def assert_same(k: KernelKV, nv: NaiveKVCache, all_keys, n_req):
    for r in range(n_req):
        assert k.held(r) == nv.blocks_of(r), f"request {r}"
    assert k.free_count() == nv.free_count()
    assert k.free_order() == nv.free
    assert int(k.inst[k.i]["kv_allocated"]) == nv.allocated()
    assert int(k.inst[k.i]["kv_peak_allocated"]) == nv.peak
    assert k.refs() == nv.ref
    assert k.block_keys() == nv.key
    for key in all_keys:
        b = k.lookup(key)
        assert (None if b < 0 else b - k.off) == nv.cache.get(key), f"key {key}"
    assert kv_conserved(k.st, k.i)
    # the prefix table and the direct slots hold exactly the cached keys
    assert k.cached_entries() == len(nv.cache)
    # the other instance is untouched
    for j in range(len(k.inst)):
        if j == k.i:
            continue
        lo = int(k.inst[j]["kv_offset"])
        assert (k.blocks["ref_count"][lo: lo + k.total] == 0).all()
        assert int(k.inst[j]["kv_allocated"]) == 0 and int(k.inst[j]["kv_virgin_next"]) == lo
        h0 = int(k.inst[j]["ht_offset"])
        size = int(k.inst[j]["ht_mask"]) + 1
        assert not k.st.kv_table[h0: h0 + size].any()


# ----------------------------------------------------------------------------- key schemes


class KeyScheme:
    """Chained prompt-block keys: equal keys <=> equal prefixes (exact, via a dict of
    prefix tuples).  ``mode`` picks how a prefix id becomes an int64 key:
    ``random`` -- well-spread 64-bit values; ``collide`` -- every key has home slot 0 in
    any table of <= 2^20 slots (one long probe run); ``few`` -- four home slots."""

    def __init__(self, mode, seed):
        self.mode = mode
        self.ids = {}
        self.rng = np.random.default_rng(seed)
        self.values = {}

    def key(self, prefix_tuple):
        if prefix_tuple not in self.ids:
            pid = len(self.ids) + 1
            self.ids[prefix_tuple] = pid
            if self.mode == "random":
                v = int(self.rng.integers(0, 2**62))
            elif self.mode == "collide":
                v = pid << 20
            else:
                v = (pid << 20) | (pid % 4)
            self.values[prefix_tuple] = v
        return self.values[prefix_tuple]

    def keys_of(self, tokens, bs):
        return [self.key(tuple(tokens[: (j + 1) * bs])) for j in range(len(tokens) // bs)]


def _random_prompts(rng, bs, n_req, scheme):
    families = [list(rng.integers(0, 3, int(rng.integers(0, 4 * bs)))) for _ in range(3)]
    prompts, max_tokens = [], []
    for _ in range(n_req):
        fam = families[int(rng.integers(0, len(families)))]
        toks = fam + list(rng.integers(0, 3, int(rng.integers(0 if fam else 1, 3 * bs))))
        toks = [int(t) for t in toks]
        n_out = 1 + int(rng.integers(0, 12))
        outputs = [int(t) for t in rng.integers(0, 3, n_out)]  # generated tokens have identities too
        prompts.append((len(toks), scheme.keys_of(toks + outputs, bs)))  # keys of the whole sequence
        max_tokens.append(len(toks) + n_out - 1)  # L + N - 1
    return prompts, max_tokens


def _drive_random(mode, seed, check=True, key_mode="hash"):
    """Random admit / grow / release sequence on kernel and naive caches, compared after
    every operation.  Returns how often each interesting path ran."""
    rng = np.random.default_rng(seed)
    bs = int(rng.choice([1, 2, 4, 8]))
    n_req = int(rng.integers(2, 10))
    scheme = KeyScheme(mode, seed)
    prompts, max_tokens = _random_prompts(rng, bs, n_req, scheme)
    caps = [-(-m // bs) for m in max_tokens]
    total = int(rng.integers(max(caps), 3 * sum(caps) // 2 + 2))
    tiny_ht = mode != "random"  # colliding keys in the smallest legal table: long probe runs, wrap-around
    ht_size = next_pow2(total + 1) if tiny_ht else None
    pc = bool(rng.random() < 0.85)
    inst_i = int(rng.integers(0, 2))
    k = KernelKV(total, bs, prompts, max_tokens, i=inst_i, ht_size=ht_size, prefix_caching=pc, key_mode=key_mode)
    nv = NaiveKVCache(total, bs, pc)
    all_keys = sorted({key for _, ks in prompts for key in ks})
    computed = [0] * n_req
    holding = [False] * n_req
    seen = dict(admit_fail=0, grow_fail=0, hit=0, hit_free=0, evicted_key=0, forgot_key=0)
    last_chunk = [None] * n_req  # (context, tokens) of each request's latest chunk
    rng_forget = np.random.default_rng(10_000 + seed)  # separate stream: the scenario is unchanged
    for _ in range(400):
        r = int(rng.integers(0, n_req))
        L, keys = prompts[r]
        cached_before = set(nv.cache)
        if not holding[r]:
            target = min(L + int(rng.integers(0, max_tokens[r] - L + 1)), max_tokens[r])  # L + generated
            budget = int(rng.integers(1, 40))
            cap = 0 if rng.random() < 0.5 else int(rng.integers(1, 20))
            free_before = set(nv.free)
            got = k.admit(r, target, budget, cap)
            want = nv.admit(r, keys, target, budget, cap)
            assert got == want
            if got is not None:
                n, cached = got
                seen["hit"] += cached > 0
                seen["hit_free"] += any(b in free_before for b in nv.blocks_of(r)[: cached // bs])
                computed[r] = cached + n  # the engine executes the chunk
                k.set_computed(r, computed[r])
                holding[r] = True
                last_chunk[r] = (cached, n)
            else:
                seen["admit_fail"] += 1
        elif rng.random() < 0.6 and computed[r] < max_tokens[r]:
            n = int(rng.integers(1, min(max_tokens[r] - computed[r], 20) + 1))
            ok = k.grow(r, n)
            assert ok == nv.grow(r, keys, computed[r], n)
            if ok:
                last_chunk[r] = (computed[r], n)
                computed[r] += n
                k.set_computed(r, computed[r])
            else:
                seen["grow_fail"] += 1
        else:
            if last_chunk[r] is not None and rng_forget.random() < 0.5:
                # preempted in the step that served it: the chunk's KV is never computed
                c0, n0 = last_chunk[r]
                k.forget_chunk(r, c0, n0)
                nv.forget_chunk(r, keys, c0, n0)
                seen["forgot_key"] += len(cached_before - set(nv.cache))
                cached_before = set(nv.cache)
                if check:
                    assert_same(k, nv, all_keys, n_req)
            k.release(r)
            nv.release(r)
            last_chunk[r] = None
            holding[r] = False
            computed[r] = 0
            k.set_computed(r, 0)
        seen["evicted_key"] += len(cached_before - set(nv.cache))
        if check:
            assert_same(k, nv, all_keys, n_req)
    return seen


@pytest.mark.parametrize("key_mode", ["hash", "flags"])
@pytest.mark.parametrize("mode", ["random", "collide", "few"])
@pytest.mark.parametrize("seed", seeds(12, fast=1))
def test_random_operations_match_naive(mode, seed, key_mode):
    _drive_random(mode, seed, key_mode=key_mode)


def test_random_operations_cover_every_path():
    total = {}
    for mode in ("random", "collide", "few"):
        for seed in range(12):
            for key, v in _drive_random(mode, seed, check=False, key_mode="flags").items():
                total[key] = total.get(key, 0) + v
    assert all(v >= 20 for v in total.values()), total


def test_kv_conserved_detects_a_miscount():
    k, _ = _kv(4, [(12, A_KEYS)], [12])
    k.admit(0, 12, 100, 0)
    assert kv_conserved(k.st, k.i)
    k.inst[k.i]["kv_allocated"] -= 1
    assert not kv_conserved(k.st, k.i)


# ----------------------------------------------------------------------------- targeted cases

BS = 4
A_KEYS = [101, 102, 103]  # a 12-token prompt: three full blocks
B_KEYS = [201, 202]


def _kv(total, prompts, max_tokens, **kw):
    return KernelKV(total, BS, prompts, max_tokens, **kw), NaiveKVCache(total, BS)


def test_lru_eviction_order_oldest_release_first_tail_block_first():
    c_keys = [301, 302, 303, 304]
    k, nv = _kv(6, [(12, A_KEYS), (8, B_KEYS), (16, c_keys)], [12, 8, 16])
    everything = A_KEYS + B_KEYS + c_keys
    assert k.admit(0, 12, 100, 0) == nv.admit(0, A_KEYS, 12, 100, 0) == (12, 0)
    assert k.held(0) == [0, 1, 2]
    k.release(0), nv.release(0)
    assert k.free_order() == [3, 4, 5, 2, 1, 0]  # virgin first, then released last-to-first
    assert k.admit(1, 8, 100, 0) == nv.admit(1, B_KEYS, 8, 100, 0) == (8, 0)
    assert k.held(1) == [3, 4]
    k.release(1), nv.release(1)
    assert k.free_order() == [5, 2, 1, 0, 4, 3]
    assert_same(k, nv, everything, 3)
    # C needs 4 blocks: the virgin one, then A's (released earlier) tail first
    assert k.admit(2, 16, 100, 0) == nv.admit(2, c_keys, 16, 100, 0) == (16, 0)
    assert k.held(2) == [5, 2, 1, 0]
    assert [k.find(x) for x in A_KEYS] == [None, None, None]  # evicted: keys dropped
    assert [k.find(x) for x in B_KEYS] == [3, 4]  # released later: still cached
    assert [k.find(x) for x in c_keys] == [5, 2, 1, 0]
    assert_same(k, nv, everything, 3)
    # A again: no hits any more, needs 3 blocks but only 2 free -> fails, nothing changes
    before = k.snapshot()
    assert k.admit(0, 12, 100, 0) is None and nv.admit(0, A_KEYS, 12, 100, 0) is None
    _assert_unchanged(k, before)


def test_release_walks_last_to_first():
    k, nv = _kv(8, [(12, A_KEYS), (8, B_KEYS)], [20, 8])
    assert k.admit(0, 12, 100, 0) == (12, 0)
    k.set_computed(0, 12)
    assert k.grow(0, 5)  # decode/recompute room: blocks 3 and 4
    assert k.held(0) == [0, 1, 2, 3, 4]
    k.release(0)
    assert k.free_order() == [5, 6, 7, 4, 3, 2, 1, 0]
    row = k.inst[k.i]
    assert int(row["free_head"]) - k.off == 4 and int(row["free_tail"]) - k.off == 0
    assert int(k.reqs[0]["blocks_held"]) == 0 and int(row["kv_allocated"]) == 0


def _assert_unchanged(k, before):
    inst, blocks, slots, reqs, held = before
    assert np.array_equal(k.inst, inst)
    assert np.array_equal(k.blocks, blocks)
    assert np.array_equal(k.st.kv_table, slots)
    # prefill_target is set by the caller (the engine) before kv_admit, not by the kernel
    now = k.reqs.copy()
    now["prefill_target"] = reqs["prefill_target"]
    assert np.array_equal(now, reqs)
    assert {r: k.held(r) for r in range(len(k.reqs))} == held


def test_all_or_nothing_admit_with_free_hits_leaves_state_unchanged():
    # A caches 3 blocks, is released; B holds the rest.  A' (same prompt, longer target)
    # would hit 2 free cached blocks but needs more new blocks than remain.
    k, nv = _kv(5, [(12, A_KEYS), (8, B_KEYS), (12, A_KEYS)], [12, 8, 20])  # (all fit in 5 blocks)
    assert k.admit(0, 12, 100, 0) == (12, 0)
    k.release(0)
    assert k.admit(1, 8, 100, 0) == (8, 0)  # takes virgin 3, 4
    assert k.held(1) == [3, 4]
    before = k.snapshot()
    # target 20: max hits = min(3, 19 // 4) = 3 blocks (all free) -> n = 8 -> 2 new blocks;
    # free = 3, of which 3 are the hits -> 0 usable -> fail
    assert k.admit(2, 20, 100, 0) is None
    _assert_unchanged(k, before)
    # the naive reference agrees after replaying the same operations
    nv.admit(0, A_KEYS, 12, 100, 0), nv.release(0), nv.admit(1, B_KEYS, 8, 100, 0)
    assert nv.admit(2, A_KEYS, 20, 100, 0) is None
    assert_same(k, nv, A_KEYS + B_KEYS, 3)


def test_all_or_nothing_grow_leaves_state_unchanged():
    k, _ = _kv(4, [(12, A_KEYS), (4, [401])], [16, 4])
    assert k.admit(0, 12, 4, 0) == (4, 0)  # first chunk: one block
    k.set_computed(0, 4)
    assert k.admit(1, 4, 100, 0) == (4, 0)
    k.set_computed(1, 4)
    before = k.snapshot()
    assert not k.grow(0, 12)  # needs 3 more blocks, 2 free
    _assert_unchanged(k, before)
    assert k.grow(0, 8)  # 2 more blocks: fits exactly
    assert k.free_count() == 0
    before = k.snapshot()
    assert not k.grow(1, 1)  # decode room: block full, nothing free
    _assert_unchanged(k, before)


def test_shared_prefix_blocks_have_ref_count_two():
    ab_keys = A_KEYS[:2] + [999]  # same first 8 tokens as A, different third block
    k, nv = _kv(8, [(12, A_KEYS), (12, ab_keys)], [12, 12])
    assert k.admit(0, 12, 100, 0) == nv.admit(0, A_KEYS, 12, 100, 0) == (12, 0)
    # max hits = min(3, 11 // 4) = 2: the two shared blocks; the third is computed
    assert k.admit(1, 12, 100, 0) == nv.admit(1, ab_keys, 12, 100, 0) == (4, 8)
    assert k.held(1) == [0, 1, 3]
    assert k.refs()[:4] == [2, 2, 1, 1]
    assert int(k.inst[k.i]["kv_allocated"]) == 4
    assert k.find(999) == 3
    k.release(0), nv.release(0)
    assert k.refs()[:4] == [1, 1, 0, 1]
    assert k.free_order() == [4, 5, 6, 7, 2]  # only A's unshared block was freed
    k.release(1), nv.release(1)
    assert k.free_order() == [4, 5, 6, 7, 2, 3, 1, 0]
    assert_same(k, nv, A_KEYS + [999], 2)


def test_freed_cached_block_is_hit_not_evicted():
    ab_keys = A_KEYS[:2] + [999]
    k, nv = _kv(6, [(12, A_KEYS), (12, ab_keys), (12, [701, 702, 703])], [12, 12, 12])
    k.admit(0, 12, 100, 0), nv.admit(0, A_KEYS, 12, 100, 0)
    k.release(0), nv.release(0)
    assert k.free_order() == [3, 4, 5, 2, 1, 0]
    # B hits A's first two blocks out of the middle/tail of the free list
    assert k.admit(1, 12, 100, 0) == nv.admit(1, ab_keys, 12, 100, 0) == (4, 8)
    assert k.held(1) == [0, 1, 3]
    assert k.free_order() == [4, 5, 2]
    assert k.find(A_KEYS[2]) == 2  # A's third block is still cached
    assert k.refs()[:3] == [1, 1, 0]
    # the next allocation evicts from the head: virgin 4, 5, then A's third block
    assert k.admit(2, 12, 100, 0) == nv.admit(2, [701, 702, 703], 12, 100, 0) == (12, 0)
    assert k.held(2) == [4, 5, 2]
    assert k.find(A_KEYS[2]) is None
    assert_same(k, nv, A_KEYS + [999, 701, 702, 703], 3)


def test_hits_limited_to_floor_target_minus_one_and_duplicate_key_stays_unkeyed():
    k, nv = _kv(6, [(8, B_KEYS), (8, B_KEYS)], [8, 8])
    k.admit(0, 8, 100, 0), nv.admit(0, B_KEYS, 8, 100, 0)
    k.release(0), nv.release(0)
    # identical 8-token prompt: max hits = (8 - 1) // 4 = 1 block; the last token is computed
    assert k.admit(1, 8, 100, 0) == nv.admit(1, B_KEYS, 8, 100, 0) == (4, 4)
    assert k.held(1) == [0, 2]  # hit block 0, new virgin block 2
    assert k.find(B_KEYS[1]) == 1  # the key stays with the (free) block 1 ...
    assert k.block_keys()[2] is None  # ... and the duplicate block is unkeyed
    assert_same(k, nv, B_KEYS, 2)


def test_evicting_own_next_block_re_registers_key():
    # total 2: B's released blocks are [1, 0] in the free list; B' hits block 0, takes
    # block 1 (evicting its key) and registers that same key in it again
    k, nv = _kv(2, [(8, B_KEYS), (8, B_KEYS)], [8, 8])
    k.admit(0, 8, 100, 0), nv.admit(0, B_KEYS, 8, 100, 0)
    k.release(0), nv.release(0)
    assert k.free_order() == [1, 0]
    assert k.admit(1, 8, 100, 0) == nv.admit(1, B_KEYS, 8, 100, 0) == (4, 4)
    assert k.held(1) == [0, 1]
    assert k.find(B_KEYS[0]) == 0 and k.find(B_KEYS[1]) == 1
    assert_same(k, nv, B_KEYS, 2)


def test_key_registered_at_allocation_is_hit_by_next_admission():
    k, nv = _kv(8, [(12, A_KEYS), (12, A_KEYS)], [12, 12])
    # first chunk of 5 tokens: block 0 full (keyed), block 1 partial (unkeyed)
    assert k.admit(0, 12, 5, 0) == nv.admit(0, A_KEYS, 12, 5, 0) == (5, 0)
    assert k.block_keys()[:2] == [A_KEYS[0], None]
    # same step, next admission: hits block 0 only (block 1's key is not registered yet)
    assert k.admit(1, 12, 100, 0) == nv.admit(1, A_KEYS, 12, 100, 0) == (8, 4)
    assert k.refs()[0] == 2
    # request 1's own blocks now carry keys 2 and 3 (computed by it)
    assert k.find(A_KEYS[1]) == k.held(1)[1] and k.find(A_KEYS[2]) == k.held(1)[2]
    # request 0's continuation: block 1 becomes full, but its key is already cached elsewhere
    k.set_computed(0, 5)
    assert k.grow(0, 7) and nv.grow(0, A_KEYS, 5, 7)
    assert k.block_keys()[1] is None
    assert_same(k, nv, A_KEYS, 2)


def test_prefix_caching_off_never_keys_or_hits():
    k = KernelKV(6, BS, [(12, A_KEYS), (12, A_KEYS)], [12, 12], prefix_caching=False)
    nv = NaiveKVCache(6, BS, prefix_caching=False)
    assert k.admit(0, 12, 100, 0) == nv.admit(0, A_KEYS, 12, 100, 0) == (12, 0)
    k.release(0), nv.release(0)
    assert k.admit(1, 12, 100, 0) == nv.admit(1, A_KEYS, 12, 100, 0) == (12, 0)
    assert all(x is None for x in k.block_keys())
    assert_same(k, nv, A_KEYS, 2)


def test_long_prefill_cap_and_budget_cap_the_first_chunk():
    k, nv = _kv(8, [(12, A_KEYS)], [12])
    assert k.admit(0, 12, 100, 5) == nv.admit(0, A_KEYS, 12, 100, 5) == (5, 0)
    k.release(0), nv.release(0)
    assert k.admit(0, 12, 3, 5) == nv.admit(0, A_KEYS, 12, 3, 5) == (3, 4)  # block 0 was cached
    assert_same(k, nv, A_KEYS, 1)


# ----------------------------------------------------------------------------- prefix table


def _table_kv(ht_size, total=8, i=1):
    """A KernelKV whose instance i has a prefix table of ``ht_size`` rows (keys are not used)."""
    return KernelKV(total, BS, [(4, [1])], [4], i=i, ht_size=ht_size)


@pytest.mark.parametrize("home", [0, 5, 7])
def test_prefix_forget_in_long_probe_run_keeps_other_keys(home):
    k = _table_kv(8)
    keys = [(m << 20) | home for m in range(1, 7)]  # one run of 6 that wraps around when home is 5 or 7
    for b, key in enumerate(keys):
        assert E.prefix_register(k.st, k.i, key, k.off + b)
    assert not E.prefix_register(k.st, k.i, keys[2], k.off + 7)  # already present
    assert k.find(keys[2]) == 2
    gone = set()
    for victim in (keys[1], keys[4], keys[0], keys[5]):
        E.prefix_forget(k.st, k.i, victim, k.off + keys.index(victim))
        gone.add(victim)
        for b, key in enumerate(keys):
            assert k.find(key) == (None if key in gone else b)
    other = 1 - k.i  # the other instance's rows stayed empty
    h0 = int(k.inst[other]["ht_offset"])
    assert not k.st.kv_table[h0: h0 + 8].any()


def test_prefix_forget_only_removes_matching_block():
    k = _table_kv(8)
    E.prefix_register(k.st, k.i, 42, k.off + 3)
    E.prefix_forget(k.st, k.i, 42, k.off + 4)  # maps elsewhere: no-op
    assert k.find(42) == 3
    E.prefix_forget(k.st, k.i, 43, k.off + 3)  # absent: no-op
    assert k.find(42) == 3
    E.prefix_forget(k.st, k.i, 42, k.off + 3)
    assert k.find(42) is None
    assert not k.st.kv_table.any()


@pytest.mark.parametrize("seed", seeds(30, fast=4))
def test_prefix_table_random_ops_match_dict(seed):
    rng = np.random.default_rng(seed)
    size = int(rng.choice([2, 4, 8, 16]))
    k = _table_kv(size, total=1000)
    mask = size - 1
    # keys from a few home rows (including the last row: runs wrap around)
    homes = rng.choice(size, size=min(size, 3), replace=False)
    universe = [(m << 20) | int(h) for m in range(1, 8) for h in homes]
    ref = {}
    for _ in range(300):
        key = universe[int(rng.integers(0, len(universe)))]
        if key in ref:
            E.prefix_forget(k.st, k.i, key, k.off + ref.pop(key))
        elif len(ref) < mask:  # keep one empty row: probing stops at an empty row
            b = int(rng.integers(0, 1000))
            assert E.prefix_register(k.st, k.i, key, k.off + b)
            ref[key] = b
        for u in universe:
            assert k.find(u) == ref.get(u)
        assert int((k.st.kv_table[:, 1] != 0).sum()) == len(ref)
