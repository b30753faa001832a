"""Counting kernels for the anomaly detectors (SEMANTICS §8)."""

import numpy as np

from .jit import kernel


@kernel
def count_inversion_pairs(values):
    """Number of pairs i < j with values[i] > 2·values[j] (merge sort, O(n log n))."""
    n = values.shape[0]
    a = values.astype(np.float64).copy()
    tmp = np.empty_like(a)
    count = np.int64(0)
    width = 1
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            # both halves are sorted: count pairs across them
            j = mid
            for i in range(lo, mid):
                while j < hi and a[i] > 2.0 * a[j]:
                    j += 1
                count += j - mid
            # merge
            p, q, o = lo, mid, lo
            while p < mid and q < hi:
                if a[q] < a[p]:
                    tmp[o] = a[q]
                    q += 1
                else:
                    tmp[o] = a[p]
                    p += 1
                o += 1
            while p < mid:
                tmp[o] = a[p]
                p += 1
                o += 1
            while q < hi:
                tmp[o] = a[q]
                q += 1
                o += 1
            lo = hi
        a, tmp = tmp, a
        width *= 2
    return count
