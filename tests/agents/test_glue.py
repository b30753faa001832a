"""The two issue-26 building blocks fit: a scenario's generated run (blis_fast.agents) runs
through the tools-only fair-share driver (kernels/agents/fairshare.py).  The event-loop
integration (one loop with the LLM cluster) replaces this driver's use; the check stays as
the contract between the layouts."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from blis_fast.agents.generate import build_templates, generate_run, successors_csr
from blis_fast.agents.scenario import load_scenario
from blis_fast_kernels.agents.fairshare import DYNAMIC, run_tool_dags

SCENARIO = Path(__file__).resolve().parents[2] / "configs/agents/tools-only.yaml"


def test_a_generated_run_runs_through_the_fair_share_driver():
    sc = load_scenario(SCENARIO)
    tp, run = build_templates(sc), generate_run(sc, 0)
    n = run.node_work.shape[0]
    rows, cols = np.nonzero(run.node_work > 0)
    load_ptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=n)))).astype(np.int64)
    succ_ptr, succ = successors_csr(run, tp)
    weights = tp.type_weight[run.request_type[run.node_request]]
    assert np.all(weights == np.round(weights)) and weights.min() >= 1  # (the driver takes integer weights)
    start, finish, busy, work, events, status = run_tool_dags(
        run.request_arrival_us, run.request_first_node.astype(np.int64), run.node_n_pred.astype(np.int64),
        weights.astype(np.int64), load_ptr, cols.astype(np.int64), run.node_work[rows, cols],
        np.asarray(succ_ptr, np.int64), np.asarray(succ, np.int64), tp.resource_capacity,
        np.maximum(tp.resource_max_consumers, 0).astype(np.int64), DYNAMIC)
    assert status == 0 and (finish >= start).all() and (start >= 0).all()
    # roots start at their request's arrival; every other node when its last predecessor finishes
    arrival = run.request_arrival_us[run.node_request]
    roots = run.node_n_pred == 0
    assert np.array_equal(start[roots], arrival[roots])
    latest = np.full(n, -1, np.int64)
    for i in range(n):
        for s in succ[succ_ptr[i]:succ_ptr[i + 1]]:
            latest[s] = max(latest[s], finish[i])
    assert np.array_equal(start[~roots], latest[~roots])
    # the work done is the work given (every node finished)
    assert np.allclose(work, run.node_work.sum(axis=0))
