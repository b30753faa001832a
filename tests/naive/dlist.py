"""Reference for kernels/structs/dlist.py: one Python list per owner."""

from __future__ import annotations


class NaiveLists:
    """Lists of element ids, one per owner o; index 0 is the head."""

    def __init__(self, n_owners: int):
        self.lists: list[list[int]] = [[] for _ in range(n_owners)]

    def push_back(self, o: int, e: int) -> None:
        self.lists[o].append(e)

    def push_front(self, o: int, e: int) -> None:
        self.lists[o].insert(0, e)

    def remove(self, o: int, e: int) -> None:
        self.lists[o].remove(e)

    def pop_front(self, o: int) -> int:
        return self.lists[o].pop(0)

    def relink(self, o: int, order) -> None:
        assert sorted(order) == sorted(self.lists[o]), "relink must keep the members"
        self.lists[o] = list(order)
