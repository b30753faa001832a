"""A thread that evaluates candidate after candidate builds each state in the previous
one's arrays (run.tables.StateArrays, blis_fast.batch): the arrays ``scratch`` hands over
uncleared must be ones the kernels write before they read.  Checked by poisoning every kept
array between two runs: the second run -- hash tables and counters cleared, scratch arrays
full of garbage -- must equal a run on fresh arrays, byte for byte."""

from __future__ import annotations

import numpy as np
import pytest

from blis_fast.config.sim import build_config
from blis_fast.policy import compile_policies
from blis_fast.run import run_to_end
from blis_fast.run.resolve import build_workload, resolve
from blis_fast.run.tables import StateArrays, build_state
from builders import COMPAT, LOADED

CASES = {
    "loaded": LOADED,  # prefix hits, KV pressure, preemptions, invariant checks every step
    "sjf-prefix-affinity": {**LOADED, "scheduler": "sjf", "routing_policy": "prefix-affinity",
                            "prefix_index_capacity": 40},
    "weighted-priority": {**LOADED, "routing_policy": "weighted", "scheduler": "priority-fcfs",
                          "priority_policy": "slo-based"},
    "compat": dict(num_requests=150, rate=20, num_instances=2, compat=COMPAT, total_kv_blocks=500,
                   workload="chatbot", prefix_tokens=64),
}


def _run(cfg, arrays, event_skipping=True):
    setup = resolve(cfg)
    wl = build_workload(cfg)
    st = build_state(setup, wl, compile_policies(cfg.policy), arrays=arrays, event_skipping=event_skipping)
    return run_to_end(st)


def _same(a, b):
    steps = int(a.loop[0]["steps"])
    assert a.loop.tobytes() == b.loop.tobytes()
    assert a.reqs.tobytes() == b.reqs.tobytes()
    assert a.inst.tobytes() == b.inst.tobytes()
    assert a.step_log[:steps].tobytes() == b.step_log[:steps].tobytes()


@pytest.mark.parametrize("event_skipping", [True, False], ids=["skipping", "reference"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_reused_arrays_full_of_garbage_change_nothing(case, event_skipping):
    cfg = build_config({}, CASES[case])
    fresh = _run(cfg, None, event_skipping)
    kept = StateArrays(reuse=True)
    _run(cfg, kept, event_skipping)
    for a in kept._kept.values():
        a.reshape(-1).view(np.uint8)[:] = 0xA5  # garbage in every kept array
    _same(fresh, _run(cfg, kept, event_skipping))
