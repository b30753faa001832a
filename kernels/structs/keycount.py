"""Counting equal int64 keys with one open-addressing table (structs/hashtable.py rows of
(key, count)): which keys occur more than once, which occurrences repeat an earlier one."""

import numpy as np

from ..jit import kernel
from ..schema import KeyFlagMode
from .hashtable import table_probe

SHARED, REPEATED = KeyFlagMode.SHARED, KeyFlagMode.REPEATED


@kernel
def flag_keys(keys, mode):
    """(flags uint8[len(keys)], distinct): mode SHARED flags every key occurring more than
    once, mode REPEATED every occurrence after the first; distinct = the number of
    different keys that occur more than once."""
    n = keys.shape[0]
    size = 16
    while size < 2 * n:
        size *= 2
    mask = size - 1
    rows = np.zeros((size, 2), np.int64)  # (key, count); count 0 = empty row
    row_of = np.empty(n, np.int64)
    out = np.zeros(n, np.uint8)
    for j in range(n):
        h, found = table_probe(rows, np.int64(0), mask, keys[j])
        if found:
            if mode == REPEATED:
                out[j] = 1
        else:
            rows[h, 0] = keys[j]
        rows[h, 1] += 1
        row_of[j] = h
    if mode == SHARED:
        for j in range(n):
            if rows[row_of[j], 1] > 1:
                out[j] = 1
    distinct = 0
    for h in range(size):
        if rows[h, 1] > 1:
            distinct += 1
    return out, distinct
