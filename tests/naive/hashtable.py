"""Reference for kernels/structs/hashtable.py and keycount.py: a Python dict and set."""

from __future__ import annotations

import numpy as np


class NaiveTable:
    """key -> tuple of value words; what an open-addressing row table must hold."""

    def __init__(self):
        self.rows: dict[int, tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def put(self, key: int, values) -> bool:
        """Set key's values; True if the key was present already."""
        found = key in self.rows
        self.rows[key] = tuple(int(v) for v in values)
        return found

    def delete(self, key: int) -> bool:
        return self.rows.pop(key, None) is not None

    def get(self, key: int):
        return self.rows.get(key)


def naive_repeated(keys) -> np.ndarray:
    """bool per key: does it repeat an earlier one (a Python set)."""
    seen, out = set(), []
    for k in np.asarray(keys).tolist():
        out.append(k in seen)
        seen.add(k)
    return np.array(out, bool)


def naive_shared(keys) -> tuple[np.ndarray, int]:
    """(bool per key: does the key occur more than once anywhere, number of such distinct keys)."""
    counts: dict[int, int] = {}
    ks = np.asarray(keys).tolist()
    for k in ks:
        counts[k] = counts.get(k, 0) + 1
    return np.array([counts[k] > 1 for k in ks], bool), sum(1 for c in counts.values() if c > 1)
