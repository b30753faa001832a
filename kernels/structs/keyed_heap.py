"""A binary min-heap of ids that knows where each id sits, so any id can be removed in
O(log n): the gateway queues of flow control (engine/flow.py), where a request whose TTL
expires leaves from the middle.

The heap of one queue is ``h[off : off + size]``; ids order by (``key[id]``,
``seq[id]``) -- a float key, then an int tie-break -- and ``pos[id]`` is an id's index in
its heap (-1 = in none).  ``key``, ``seq`` and ``pos`` are per-id arrays (columns of a
table), shared by every queue of ``h``.
"""

from ..jit import helper


@helper
def _before(key, seq, a, b):
    """True if id a orders before id b."""
    return key[a] < key[b] or (key[a] == key[b] and seq[a] < seq[b])


@helper
def kh_sift_up(h, off, j, key, seq, pos):
    """Move the id at index j towards the root while it orders before its parent."""
    e = h[off + j]
    while j > 0:
        p = (j - 1) >> 1
        q = h[off + p]
        if not _before(key, seq, e, q):
            break
        h[off + j] = q
        pos[q] = j
        j = p
    h[off + j] = e
    pos[e] = j


@helper
def kh_sift_down(h, off, size, j, key, seq, pos):
    """Move the id at index j away from the root while a child orders before it."""
    e = h[off + j]
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        if c + 1 < size and _before(key, seq, h[off + c + 1], h[off + c]):
            c += 1
        q = h[off + c]
        if not _before(key, seq, q, e):
            break
        h[off + j] = q
        pos[q] = j
        j = c
    h[off + j] = e
    pos[e] = j


@helper
def kh_push(h, off, size, key, seq, pos, e):
    """Insert id e into the heap of ``size`` ids; returns the new size (the caller keeps
    room: at most one entry per id)."""
    h[off + size] = e
    pos[e] = size
    kh_sift_up(h, off, size, key, seq, pos)
    return size + 1


@helper
def kh_remove(h, off, size, key, seq, pos, e):
    """Remove id e (in the heap: ``pos[e] >= 0``); returns the new size."""
    j = pos[e]
    last = size - 1
    pos[e] = -1
    if j != last:
        m = h[off + last]
        h[off + j] = m
        pos[m] = j
        kh_sift_down(h, off, last, j, key, seq, pos)
        kh_sift_up(h, off, pos[m], key, seq, pos)
    return last
