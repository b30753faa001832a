"""A link shared by processor sharing: its jobs -- a list threaded through ``nxt`` from
``head`` (structs/dlist.py) -- each hold the work they have left (``work``, µs at the full
rate), and each of the k jobs in progress is served at 1/k of the rate.  Users: the P/D
KV transfer link of a prefill instance (engine/disaggregation.py) and each KV tier's read
link (engine/tiers.py), which keep the jobs in their own tables and schedule an event at
``ps_next_due``.
"""

import math

import numpy as np

from ..jit import helper

DONE_EPS_US = 1e-6  # work below this (µs at the full rate) counts as done: the rounding of the shares


@helper
def ps_advance(work, nxt, head, k, elapsed_us):
    """The k jobs from ``head`` have each done elapsed_us / k of work."""
    if k > 0:
        share = np.float64(elapsed_us) / np.float64(k)
        x = head
        while x >= 0:
            work[x] -= share
            x = nxt[x]


@helper
def ps_next_due(work, nxt, head, k, t):
    """When (µs, rounded up) the job with the least work left finishes at the current share
    of the k jobs from ``head``, from t."""
    least = np.inf
    x = head
    while x >= 0:
        least = min(least, work[x])
        x = nxt[x]
    return t + np.int64(math.ceil(max(0.0, least * np.float64(k) - DONE_EPS_US)))
