"""Reference for kernels/structs/sort.py: Python's (stable) ``sorted`` and a quadratic pair count."""

from __future__ import annotations


def naive_sorted(ids, k1, k2) -> list[tuple[float, int, int]]:
    """The entries (k1, k2, id) in ascending lexicographic order (``sorted`` is stable, so
    equal entries keep their input order)."""
    return sorted(zip((float(x) for x in k1), (int(x) for x in k2), (int(x) for x in ids)),
                  key=lambda e: (e[0], e[1], e[2]))


def quadratic_inversion_pairs(values, factor=2.0) -> int:
    """Pairs i < j (positions) with values[i] > factor·values[j], by enumerating all pairs."""
    n = len(values)
    return sum(1 for i in range(n) for j in range(i + 1, n) if values[i] > factor * values[j])
