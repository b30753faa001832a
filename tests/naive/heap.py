"""Reference for kernels/structs/heap.py and engine/events.py: the event order (time, priority, seq)."""

from __future__ import annotations

class NaiveEventQueue:
    """A priority queue of events ordered by (time, priority, seq): a sorted Python list.

    ``seq`` is an insertion counter (FIFO among equal (time, priority)) unless given.
    """

    def __init__(self, capacity: int | None = None):
        self.items: list[tuple[int, int, int, int]] = []  # (time, priority, seq, payload)
        self.capacity = capacity
        self.next_seq = 0

    def __len__(self) -> int:
        return len(self.items)

    def push(self, time: int, priority: int, payload: int = -1, seq: int | None = None) -> bool:
        """Insert an event; False (and nothing changes) if the queue is at capacity."""
        if self.capacity is not None and len(self.items) >= self.capacity:
            return False
        if seq is None:
            seq = self.next_seq
        self.next_seq = max(self.next_seq, seq) + 1
        self.items.append((time, priority, seq, payload))
        self.items.sort(key=lambda e: (e[0], e[1], e[2]))
        return True

    def pop(self) -> tuple[int, int, int, int]:
        """Remove and return the smallest (time, priority, seq, payload)."""
        return self.items.pop(0)


