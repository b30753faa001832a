"""A stable bottom-up merge sort over parallel arrays keyed lexicographically by
(k1 float64, k2 int64, id int64), which orders a wait queue (policies/scheduler.py).
"""

import numpy as np

from ..jit import helper


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
