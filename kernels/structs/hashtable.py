"""Open-addressing hash tables of int64 rows ``[key, value words...]`` with linear probing
and backward-shift deletion (no tombstones, so probe runs stay short however many
deletions happen).  A row whose value words are all zero is empty, so a table is
allocated with np.zeros and needs no initialisation; callers store ``id + 1``, a stamp
>= 1, or a non-empty bit mask.

A table is the ``mask + 1`` rows starting at row ``off`` of a 2-D array, so one array
holds one table per instance.  Callers size each table to at least twice the entries it
can hold, so probing always meets an empty row.  Keys are well-mixed 64-bit hashes.
Users: the KV prefix cache (key -> block + 1), the router's prefix index (key -> stamp)
and its cluster map (key -> instance bit mask).
"""

import numpy as np

from ..jit import helper


@helper
def table_home(key, mask):
    """Home row of a key (fold the high bits in)."""
    return (key ^ (key >> 32)) & mask


@helper
def row_empty(rows, r):
    """True if absolute row r holds no entry."""
    for w in range(1, rows.shape[1]):
        if rows[r, w] != 0:
            return False
    return True


@helper
def table_find(rows, off, mask, key):
    """Relative row holding ``key``, or -1."""
    h = table_home(key, mask)
    while True:
        r = off + h
        if row_empty(rows, r):
            return np.int64(-1)
        if rows[r, 0] == key:
            return h
        h = (h + 1) & mask


@helper
def table_probe(rows, off, mask, key):
    """(relative row, found): the row holding ``key``, else the empty row where it goes."""
    h = table_home(key, mask)
    while True:
        r = off + h
        if row_empty(rows, r):
            return h, False
        if rows[r, 0] == key:
            return h, True
        h = (h + 1) & mask


@helper
def table_delete_at(rows, off, mask, h):
    """Empty relative row h: later rows of its probe run whose home does not lie
    cyclically in (hole, row] move back into the hole."""
    width = rows.shape[1]
    hole = h
    k = h
    while True:
        k = (k + 1) & mask
        if row_empty(rows, off + k):
            break
        home = table_home(rows[off + k, 0], mask)
        if hole <= k:
            stays = hole < home <= k
        else:
            stays = hole < home or home <= k
        if stays:
            continue
        for w in range(width):
            rows[off + hole, w] = rows[off + k, w]
        hole = k
    for w in range(width):
        rows[off + hole, w] = 0
