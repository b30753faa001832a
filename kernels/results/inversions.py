"""The priority-inversion anomaly (docs/semantics.md §8): within each group of requests
(same instance and SLO class) in (arrival, id) order, the pairs whose earlier request took
more than ``factor`` times the later one's E2E."""

import numpy as np

from ..jit import kernel


@kernel
def count_inversions(values, group_start, by_value, factor):
    """Pairs k < l of one group with values[k] > factor * values[l] (factor >= 0).

    Element k is the k-th request in group order (groups contiguous, each in arrival
    order); ``group_start[k]`` is where k's group begins; ``by_value`` lists the elements
    in ascending order of value.  A sweep from the largest value down: before element l
    is counted, every element worth more than factor * values[l] is in a Fenwick tree over
    the positions, so the count before l within its group is two prefix sums.
    O(n log n), branch-light (the merge-sort count this replaces mispredicted most
    comparisons)."""
    n = values.shape[0]
    tree = np.zeros(n + 1, np.int64)  # tree[x]: elements inserted at positions (x - x&-x, x]
    total = np.int64(0)
    p = n - 1  # by_value[p]: the largest value not inserted yet
    for q in range(n - 1, -1, -1):
        el = by_value[q]
        threshold = factor * values[el]
        while p >= 0 and values[by_value[p]] > threshold:
            x = by_value[p] + 1
            while x <= n:
                tree[x] += 1
                x += x & -x
            p -= 1
        # inserted elements at positions [group_start[el], el)
        x = el
        while x > 0:
            total += tree[x]
            x -= x & -x
        x = group_start[el]
        while x > 0:
            total -= tree[x]
            x -= x & -x
    return total
