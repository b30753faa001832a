"""Anomaly counters (docs/semantics.md §8): priority inversions, HOL blocking, rejections."""

from __future__ import annotations

import numpy as np

from .metrics import stable_order, value_order
from blis_fast_kernels.native import count_inversions
from blis_fast_kernels.schema import PoolRole


def priority_inversions(reqs: np.ndarray, e2e_us: np.ndarray, done: np.ndarray, priority_policy: str) -> int:
    """Pairs (i arrived before j, same instance and SLO class, both completed) with
    E2E_i > 2·E2E_j.  Defined as 0 under the constant priority policy (no priorities to
    invert)."""
    if priority_policy == "constant":
        return 0

    idx = np.flatnonzero(done)
    if idx.size < 2:
        return 0
    # group by (instance, slo class); within a group order by (arrival, id): two stable
    # sorts -- by arrival (timsort: requests are nearly in arrival order already), then by
    # group (small integers: radix) -- cheaper than one 4-key lexsort
    idx = idx[np.argsort(reqs["arrival_us"][idx], kind="stable")]
    group = reqs["instance"][idx].astype(np.int64) * (int(reqs["slo_class"].max()) + 1) + reqs["slo_class"][idx]
    order = stable_order(group)
    idx, group = idx[order], group[order]
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])  # where each group begins
    group_start = np.repeat(first, np.diff(np.r_[first, len(idx)]))
    e2e = e2e_us[idx]
    return int(count_inversions(e2e.astype(np.float64), group_start.astype(np.int64), value_order(e2e), 2.0))


def hol_blocking_instances(inst: np.ndarray, roles: np.ndarray | None = None) -> int:
    """With >= 2 instances: instances whose mean wait-queue length per step exceeds twice
    the mean over instances -- over the instances of its pool for a P/D deployment's (a
    prefill instance's queue holds every request it serves; a decode instance's few).
    ``roles``: each instance's PoolRole (``State.pd_inst``; default all monolithic)."""
    used_rows = (inst["active"] != 0) | (inst["injected"] > 0)
    used = inst[used_rows]
    mono = np.ones(len(used), bool) if roles is None else roles[used_rows] == PoolRole.MONO
    group = np.where(mono, -1, used["pool"])
    return sum(_hol_count(used[group == g]) for g in np.unique(group).tolist())


def _hol_count(used: np.ndarray) -> int:
    if len(used) < 2:
        return 0
    steps = used["steps"].astype(np.float64)
    mean_q = np.divide(used["sum_wq_len"], steps, out=np.zeros(len(used)), where=steps > 0)
    overall = mean_q.mean()
    return int(np.count_nonzero(mean_q > 2.0 * overall)) if overall > 0 else 0
