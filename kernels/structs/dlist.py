"""Doubly linked lists threaded through a table: element e's links are ``prev[e]`` and
``nxt[e]`` (-1 = none); list o's ends and length are ``head[o]``, ``tail[o]``,
``length[o]`` -- columns of its owner's table.  Used for every instance's wait queue
(through the request table) and KV free list (through the block table).
"""

import numpy as np

from ..jit import helper


@helper
def dl_push_back(prev, nxt, head, tail, length, o, e):
    """Append e to list o."""
    t = tail[o]
    prev[e] = t
    nxt[e] = -1
    if t >= 0:
        nxt[t] = e
    else:
        head[o] = e
    tail[o] = e
    length[o] += 1


@helper
def dl_push_front(prev, nxt, head, tail, length, o, e):
    """Put e at the head of list o."""
    h = head[o]
    prev[e] = -1
    nxt[e] = h
    if h >= 0:
        prev[h] = e
    else:
        tail[o] = e
    head[o] = e
    length[o] += 1


@helper
def dl_remove(prev, nxt, head, tail, length, o, e):
    """Unlink e (a member of list o)."""
    p = prev[e]
    n = nxt[e]
    if p >= 0:
        nxt[p] = n
    else:
        head[o] = n
    if n >= 0:
        prev[n] = p
    else:
        tail[o] = p
    prev[e] = -1
    nxt[e] = -1
    length[o] -= 1


@helper
def dl_pop_front(prev, nxt, head, tail, length, o):
    """Remove and return the head of list o (which must be non-empty)."""
    e = head[o]
    dl_remove(prev, nxt, head, tail, length, o, e)
    return e


@helper
def dl_relink(prev, nxt, head, tail, o, order, n):
    """Re-thread the n members of list o in the order ``order[:n]`` (same members)."""
    last = np.int64(-1)
    for k in range(n):
        e = order[k]
        prev[e] = last
        nxt[e] = -1
        if last >= 0:
            nxt[last] = e
        else:
            head[o] = e
        last = e
    tail[o] = last
