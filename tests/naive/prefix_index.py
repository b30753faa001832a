"""Reference for kernels/policies/prefix_index.py: the router's per-instance LRU index of
prefix-block keys, one OrderedDict per instance (first = least recently touched), with a
capacity and LRU eviction; the cluster map and match depths derived from it."""

from __future__ import annotations

import itertools
from collections import OrderedDict


class NaiveIndex:
    """Per-instance LRU of keys (OrderedDict: first = least recent)."""

    def __init__(self, n_inst: int, capacity: int):
        self.capacity = capacity
        self.lru: list[OrderedDict] = [OrderedDict() for _ in range(n_inst)]
        self._fresh = itertools.count()

    def touch(self, i: int, key) -> None:
        """Mark key as the most recently routed to i (insert, evicting the LRU key if full)."""
        od = self.lru[i]
        if key in od:
            od.move_to_end(key)
            return
        if len(od) >= self.capacity:
            od.popitem(last=False)
        od[key] = None

    def insert_unshared(self, i: int) -> None:
        """A key no other request carries: a touch of a brand-new key that matches nothing."""
        self.touch(i, ("unshared", next(self._fresh)))

    def size(self, i: int) -> int:
        return len(self.lru[i])

    def holders(self, key) -> set[int]:
        return {i for i, od in enumerate(self.lru) if key in od}

    def matches(self, keys, active) -> list[int]:
        """Per instance: its number of leading ``keys`` in its index (0 if inactive)."""
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
