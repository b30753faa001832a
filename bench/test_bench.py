"""The standard scenarios of ``blis_fast.experiments.bench`` as pytest-benchmark tests.

Run with ``python -m pytest bench --benchmark-only`` (the default test run skips them; the
100k-request scenarios are marked slow).
Each round times ``run_to_end`` alone on a fresh state; ``build_state`` runs in the
untimed setup.  The workload is generated once per scenario; one warm-up round runs first.
"""

from __future__ import annotations

import pytest

from blis_fast.config.sim import build_config
from blis_fast.experiments.bench import SCENARIOS, scenario_overrides
from blis_fast.run import build_state, build_workload, resolve, run_to_end
from blis_fast_kernels.schema import RequestState, Status

ROUNDS = {"1k": 20, "10k": 10, "100k": 5, "100k-weighted": 5, "100k-expr": 5, "100k-decisions": 5, "100k-full": 5}


@pytest.fixture(scope="module", params=[
    pytest.param(name, marks=pytest.mark.slow) if row["num_requests"] >= 100_000 else name
    for name, row in SCENARIOS.items()
])
def scenario(request):
    """(name, setup, workload) of one scenario, generated once."""
    cfg = build_config({}, scenario_overrides(request.param))
    return request.param, resolve(cfg), build_workload(cfg)


def test_kernel(benchmark, scenario):
    name, setup, wl = scenario
    benchmark.group = "kernel"
    benchmark.name = f"kernel[{name}]"

    from blis_fast.run.api import trace_level_code

    def fresh_state():
        return (build_state(setup, wl, trace_level=trace_level_code(setup.config)),), {}

    state = benchmark.pedantic(run_to_end, setup=fresh_state, rounds=ROUNDS.get(name, 5), warmup_rounds=1)

    # correctness of the last timed round: every request completed, status OK
    assert int(state.loop[0]["status"]) == Status.OK
    assert int((state.reqs["state"] == RequestState.COMPLETED).sum()) == len(wl)
    steps, events = int(state.loop[0]["steps"]), int(state.loop[0]["events"])
    best = benchmark.stats.stats.min
    benchmark.extra_info.update({
        "num_requests": len(wl), "num_instances": SCENARIOS[name]["num_instances"],
        "steps": steps, "events": events,
        "sim_requests_per_s": len(wl) / best, "steps_per_s": steps / best,
    })
