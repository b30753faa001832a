"""References for the anomaly counters (blis_fast/results/anomalies.py, which counts
inversions with kernels/structs/sort.py): brute-force recomputations from a Result's
tables, straight from the definitions (docs/policies.md "Anomaly counters")."""

from __future__ import annotations

import numpy as np


def brute_force_inversions(r) -> int:
    """Priority inversions of a Result, O(n²): completed pairs on the same instance and SLO
    class, i arrived strictly before j, E2E_i > 2·E2E_j."""
    from blis_fast_kernels.schema import RequestState

    q = r.state.reqs
    e2e = r.request_columns()["e2e_us"]
    done = np.flatnonzero(q["state"] == RequestState.COMPLETED)
    n = 0
    for i in done:
        for j in done:
            if (q["instance"][i] == q["instance"][j] and q["slo_class"][i] == q["slo_class"][j]
                    and q["arrival_us"][i] < q["arrival_us"][j] and e2e[i] > 2 * e2e[j]):
                n += 1
    return n


def brute_force_hol(r) -> int:
    """HOL-blocking instances of a Result: active instances (>= 2 of them) whose mean wait
    queue length per step exceeds twice the mean over the active instances."""
    inst = r.state.inst
    rows = [i for i in range(len(inst)) if inst["active"][i]]
    if len(rows) < 2:
        return 0
    mean_q = [inst["sum_wq_len"][i] / inst["steps"][i] if inst["steps"][i] > 0 else 0.0 for i in rows]
    overall = sum(mean_q) / len(mean_q)
    return sum(1 for q in mean_q if q > 2 * overall) if overall > 0 else 0
