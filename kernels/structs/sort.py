"""One stable bottom-up merge sort, over parallel arrays keyed lexicographically by
(k1 float64, k2 int64, id int64).  Used to order a wait queue (policies/scheduler.py) and,
with pair counting switched on, to count dominated pairs for the priority-inversion
anomaly (``count_dominated_pairs``).
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
def merge_sort(ids, k1, k2, tmp_ids, tmp_k1, tmp_k2, n, pair_factor):
    """Sort the first n entries of (ids, k1, k2) by (k1, k2, id), using the tmp arrays.

    With ``pair_factor`` > 0, also counts the pairs i < j (positions before sorting) with
    k1[i] > pair_factor * k1[j]: before each merge both runs are sorted and every left
    element precedes every right one, so a two-pointer pass counts them.  Returns (pairs,
    in_tmp): in_tmp is True when the sorted result ended up in the tmp arrays."""
    count = np.int64(0)
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
            if pair_factor > 0.0:
                j = mid
                for i in range(lo, mid):
                    while j < hi and s_k1[i] > pair_factor * s_k1[j]:
                        j += 1
                    count += j - mid
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
    return count, in_tmp


@kernel
def count_dominated_pairs(values, factor):
    """Number of pairs i < j with values[i] > factor * values[j] (O(n log n))."""
    n = values.shape[0]
    ids = np.arange(n).astype(np.int64)
    k1 = values.astype(np.float64).copy()
    k2 = np.zeros(n, np.int64)
    count, _ = merge_sort(ids, k1, k2, np.empty(n, np.int64), np.empty(n, np.float64), np.empty(n, np.int64), n,
                          factor)
    return count
