"""Reference for kernels/kv/cache.py: a paged KV cache with prefix caching, LRU free list,
all-or-nothing allocation (docs/semantics.md §6)."""

from __future__ import annotations

import numpy as np

def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class NaiveKVCache:
    """One instance's paged KV cache with prefix caching (docs/semantics.md §6).

    Blocks are numbered 0..total-1.  ``free`` is the LRU free list as a Python list: the
    head (index 0) is taken first.  It starts as all blocks in index order ("virgin"
    blocks); released blocks are appended at the tail.  ``cache`` maps a prefix key to the
    block holding it; ``key[b]`` is None for an unkeyed block.  ``held[r]`` is the list of
    blocks request r holds, in token order.
    """

    def __init__(self, total: int, block_size: int, prefix_caching: bool = True):
        self.total = total
        self.bs = block_size
        self.prefix_caching = prefix_caching
        self.key: list[int | None] = [None] * total
        self.ref = [0] * total
        self.free = list(range(total))
        self.cache: dict[int, int] = {}
        self.held: dict[int, list[int]] = {}
        self.peak = 0

    # -- observables
    def free_count(self) -> int:
        return len(self.free)

    def allocated(self) -> int:
        return sum(1 for c in self.ref if c > 0)

    def blocks_of(self, r: int) -> list[int]:
        return list(self.held.get(r, []))

    def _note_peak(self) -> None:
        self.peak = max(self.peak, self.allocated())

    # -- operations
    def _take(self) -> int:
        """Take the LRU head; evicting a cached block forgets its key."""
        b = self.free.pop(0)
        if self.key[b] is not None:
            del self.cache[self.key[b]]
            self.key[b] = None
        self.ref[b] = 1
        return b

    def grow(self, r: int, keys: list[int], computed: int, n: int) -> bool:
        """Give request r room for n more tokens after ``computed``; all-or-nothing.

        Full prompt blocks completed by these tokens get their prefix key, unless the key
        is already cached (then the block stays unkeyed).  ``keys`` are r's prompt-block
        keys (one per *full* prompt block), so block j is a full prompt block iff
        j < len(keys).
        """
        blocks = self.held.setdefault(r, [])
        need = _ceil_div(computed + n, self.bs) - len(blocks)
        if need > len(self.free):
            return False
        for _ in range(max(need, 0)):
            blocks.append(self._take())
        self._note_peak()
        if self.prefix_caching:
            # blocks full after this chunk but not before: j in [computed // bs, (computed + n) // bs)
            for j in range(computed // self.bs, min((computed + n) // self.bs, len(keys))):
                b = blocks[j]
                if self.key[b] is None and keys[j] not in self.cache:
                    self.key[b] = keys[j]
                    self.cache[keys[j]] = b
        return True

    def admit(self, r: int, keys: list[int], target: int, budget: int, cap: int, reuse_all: bool = False):
        """Admit request r (holding nothing) for a prefill of ``target`` tokens.

        Returns (n tokens to compute now, cached tokens) or None if the blocks are not free
        (then nothing changed).  ``reuse_all`` (compat, first admission): every cached full
        block of the target may be reused, not only those before its last token.
        """
        assert not self.held.get(r), "admit of a request that holds blocks"
        hits: list[int] = []
        if self.prefix_caching:
            for j in range(min(len(keys), (target if reuse_all else target - 1) // self.bs)):
                b = self.cache.get(keys[j])
                if b is None:
                    break
                hits.append(b)
        cached = len(hits) * self.bs
        n = target - cached
        if cap > 0:
            n = min(n, cap)
        n = min(n, budget)
        need = _ceil_div(cached + n, self.bs) - len(hits)
        usable = [b for b in self.free if b not in hits]
        if need > len(usable):
            return None
        for b in hits:
            if self.ref[b] == 0:
                self.free.remove(b)
            self.ref[b] += 1
        self.held[r] = list(hits)
        self._note_peak()
        ok = self.grow(r, keys, cached, n)
        assert ok
        return n, cached

    def forget_chunk(self, r: int, keys: list[int], computed: int, n: int) -> None:
        """Unregister the prefix keys of the full prompt blocks of r's chunk [computed,
        computed + n) (its KV will never be computed: r is preempted in the step that
        scheduled the chunk); the blocks stay held, unkeyed."""
        blocks = self.held.get(r, [])
        for j in range(computed // self.bs, min((computed + n) // self.bs, len(keys), len(blocks))):
            b = blocks[j]
            if self.key[b] is not None:
                del self.cache[self.key[b]]
                self.key[b] = None

    def release(self, r: int) -> None:
        """Release all of r's blocks, last to first; a block reaching ref 0 goes to the tail."""
        for b in reversed(self.held.pop(r, [])):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free.append(b)


def assert_kv_recount(r) -> None:
    """Independent recount of every instance's KV blocks (KV conservation) from a Result's
    tables.  A request's blocks at positions < named_upto have ids, the rest are anonymous
    (kernels/kv/cache.py): named held blocks + anonymous held blocks = allocated; the free
    list's named blocks + the anonymous free blocks counted in its gaps = total -
    allocated; every id is held, free, pooled or never used; every block reference belongs
    to one request of that instance; the peak within the total."""
    st = r.state
    blocks, inst, reqs = st.blocks, st.inst, st.reqs
    for i in range(len(inst)):
        lo, tot = int(inst[i]["kv_offset"]), int(inst[i]["kv_total"])
        ref = blocks["ref_count"][lo:lo + tot]
        assert (ref >= 0).all()
        used = int((ref > 0).sum())
        mine = reqs["instance"] == i
        held = reqs["blocks_held"][mine]
        named = np.minimum(held, np.maximum(reqs["named_upto"][mine], 0))
        assert used + int((held - named).sum()) == inst[i]["kv_allocated"]
        free_named, free_units, b = 0, int(inst[i]["head_units"]), int(inst[i]["free_head"])
        while b >= 0:
            free_named += 1
            free_units += int(blocks["gap_after"][b])
            b = int(blocks["lru_next"][b])
        assert free_named == int(inst[i]["free_len"])
        assert free_named + free_units == tot - int(inst[i]["kv_allocated"])
        pooled, b = 0, int(inst[i]["id_pool"])
        while b >= 0:
            pooled += 1
            b = int(blocks["lru_next"][b])
        virgin = lo + tot - int(inst[i]["kv_virgin_next"])
        assert used + free_named + pooled + virgin == tot
        assert int(ref.sum()) == int(named.sum())
        assert inst[i]["kv_peak_allocated"] <= tot
