"""Open-addressing hash tables of int64 (key, value) pairs, shared by the KV prefix cache
and the router's prefix index.

A table is a slice of ``slots``: ``mask + 1`` slots (a power of two) starting at slot
``off``; slot h is the pair ``slots[2(off+h)] = key, slots[2(off+h)+1] = value`` and a
value of 0 marks an empty slot (so tables can be allocated with np.zeros; callers store
``id + 1`` or a stamp >= 1).  Linear probing; deletion shifts the rest of the probe run
back (no tombstones), so lookups stay short however many deletions happen.  Callers
size each table to at least twice the entries it can ever hold (a KV table holds at most
one key per block, the router index ``capacity`` keys), so probing always meets an empty
slot.
"""

import numpy as np

from .jit import helper


@helper
def pair_home(key, mask):
    """Home slot of a key (keys are well-mixed 64-bit hashes; fold the high bits in)."""
    return (key ^ (key >> 32)) & mask


@helper
def pair_find(slots, off, mask, key):
    """Relative slot holding ``key``, or -1."""
    h = pair_home(key, mask)
    while True:
        j = 2 * (off + h)
        if slots[j + 1] == 0:
            return np.int64(-1)
        if slots[j] == key:
            return h
        h = (h + 1) & mask


@helper
def pair_insert_new(slots, off, mask, key, value):
    """Store ``key -> value`` unless the key is present; True if stored."""
    h = pair_home(key, mask)
    while True:
        j = 2 * (off + h)
        if slots[j + 1] == 0:
            slots[j] = key
            slots[j + 1] = value
            return True
        if slots[j] == key:
            return False
        h = (h + 1) & mask


@helper
def pair_delete_at(slots, off, mask, h):
    """Empty relative slot h: later entries of its probe run whose home does not lie
    cyclically in (hole, j] move back into the hole."""
    hole = h
    k = h
    while True:
        k = (k + 1) & mask
        jk = 2 * (off + k)
        if slots[jk + 1] == 0:
            break
        home = pair_home(slots[jk], mask)
        if hole <= k:
            stays = hole < home <= k
        else:
            stays = hole < home or home <= k
        if stays:
            continue
        jh = 2 * (off + hole)
        slots[jh] = slots[jk]
        slots[jh + 1] = slots[jk + 1]
        hole = k
    slots[2 * (off + hole)] = 0
    slots[2 * (off + hole) + 1] = 0
