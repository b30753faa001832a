"""Bottom-up merge sorts: a stable one over parallel arrays keyed lexicographically by
(k1 float64, k2 int64, id int64), which orders a wait queue (policies/scheduler.py), and
one over values alone that counts dominated pairs for the priority-inversion anomaly
(``count_dominated_pairs``).
"""

import numpy as np

from ..jit import helper, kernel


@helper
def _lex_before(k1a, k2a, ia, k1b, k2b, ib):
    if k1a != k1b:
        return k1a < k1b
    if k2a != k2b:
        return k2a < k2b
    return ia < ib


@helper
def merge_sort(ids, k1, k2, tmp_ids, tmp_k1, tmp_k2, n):
    """Sort the first n entries of (ids, k1, k2) by (k1, k2, id), using the tmp arrays.
    Returns True when the sorted result ended up in the tmp arrays."""
    width = 1
    in_tmp = False
    while width < n:
        if in_tmp:
            s_ids, s_k1, s_k2, d_ids, d_k1, d_k2 = tmp_ids, tmp_k1, tmp_k2, ids, k1, k2
        else:
            s_ids, s_k1, s_k2, d_ids, d_k1, d_k2 = ids, k1, k2, tmp_ids, tmp_k1, tmp_k2
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            a, b, o = lo, mid, lo
            while a < mid and b < hi:
                if _lex_before(s_k1[b], s_k2[b], s_ids[b], s_k1[a], s_k2[a], s_ids[a]):
                    d_ids[o] = s_ids[b]
                    d_k1[o] = s_k1[b]
                    d_k2[o] = s_k2[b]
                    b += 1
                else:
                    d_ids[o] = s_ids[a]
                    d_k1[o] = s_k1[a]
                    d_k2[o] = s_k2[a]
                    a += 1
                o += 1
            while a < mid:
                d_ids[o] = s_ids[a]
                d_k1[o] = s_k1[a]
                d_k2[o] = s_k2[a]
                a += 1
                o += 1
            while b < hi:
                d_ids[o] = s_ids[b]
                d_k1[o] = s_k1[b]
                d_k2[o] = s_k2[b]
                b += 1
                o += 1
            lo = hi
        in_tmp = not in_tmp
        width *= 2
    return in_tmp


@kernel
def count_dominated_pairs(values, factor):
    """Number of pairs i < j with values[i] > factor * values[j] (factor > 0; O(n log n)).

    A bottom-up merge sort of the values alone: before each merge both runs are sorted and
    every left value precedes every right one in the input, so a two-pointer pass counts
    the pairs across them."""
    n = values.shape[0]
    src = values.astype(np.float64).copy()
    dst = np.empty(n, np.float64)
    count = np.int64(0)
    width = 1
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            j = mid
            for i in range(lo, mid):
                while j < hi and src[i] > factor * src[j]:
                    j += 1
                count += j - mid
            a, b = lo, mid
            for o in range(lo, hi):
                if b >= hi or (a < mid and src[a] <= src[b]):
                    dst[o] = src[a]
                    a += 1
                else:
                    dst[o] = src[b]
                    b += 1
            lo = hi
        src, dst = dst, src
        width *= 2
    return count
