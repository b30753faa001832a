"""Engine invariants (docs/semantics.md §3, "Invariants"): monotone clock (steps never
overlap), batch size <= max_num_seqs, KV conservation (allocated + free blocks = total,
recounted independently at the end and at horizon snapshots); also: the per-step check
really runs, the event heap stays small."""

from __future__ import annotations

import pytest

import blis_fast
from builders import HAND_STEPS, LOADED
from naive.kv import assert_kv_recount
from blis_fast_kernels.schema import RequestState, Status


def test_clock_is_monotone_and_steps_do_not_overlap(any_loaded):
    r = any_loaded
    st = r.state.loop[0]
    assert st["status"] == Status.OK
    inst = r.state.inst
    # non-overlapping steps: busy time within [0, last step end] per instance
    assert (inst["busy_us"] <= inst["last_step_end_us"]).all()
    for s in r.instances:
        assert 0.0 <= s["busy_fraction"] <= 1.0
    horizon = r.setup.config.simulation.horizon
    if horizon is not None:
        assert st["clock_us"] <= horizon
    # the last event processed is no earlier than any step start or routing decision
    reqs = r.state.reqs
    assert st["clock_us"] >= reqs["routed_us"].max()
    assert st["clock_us"] >= reqs["first_scheduled_us"].max()


def test_batch_size_never_exceeds_max_num_seqs():
    r = blis_fast.simulate(num_requests=200, rate=200, num_instances=2, max_num_seqs=3,
                           alpha_coeffs=[0, 0, 0], beta_coeffs=[2000, 5, 20], total_kv_blocks=2000,
                           prompt_tokens=100, prompt_tokens_stdev=20, output_tokens=50,
                           output_tokens_stdev=10, check_invariants=True)
    assert r.cluster["completed_requests"] == 200
    for s in r.instances:
        assert s["batch_size_peak"] <= 3
    assert r.cluster["batch_size_peak"] == 3  # the cap binds
    assert r.cluster["wait_queue_peak"] > 0
    assert (r.state.inst["batch_peak"] <= 3).all()


def test_kv_conservation_at_end_of_full_run(loaded):
    assert_kv_recount(loaded)
    assert (loaded.state.inst["kv_allocated"] == 0).all()
    assert (loaded.state.reqs["blocks_held"] == 0).all()


@pytest.mark.parametrize("H", [250_000, 1_000_000, 2_345_678, 5_000_000, 9_000_001])
def test_kv_conservation_at_horizon_snapshots(H):
    r = blis_fast.simulate(horizon=H, **LOADED)
    assert_kv_recount(r)
    running = r.state.reqs["state"] == RequestState.RUNNING
    assert (r.state.reqs["blocks_held"][running] > 0).all()


@pytest.mark.parametrize("check", [True, False])
def test_check_invariants_is_live(check):
    """The per-step KV check really runs: a corrupted counter is caught only with check_invariants."""
    from blis_fast.config.sim import build_config
    from blis_fast.errors import SimulationError
    from blis_fast.run import build_state, build_workload, resolve, run_to_end

    cfg = build_config({}, dict(num_requests=20, rate=5, check_invariants=check, total_kv_blocks=100, **HAND_STEPS))
    state = build_state(resolve(cfg), build_workload(cfg))
    state.inst["kv_allocated"][0] = 1  # one phantom allocated block
    if check:
        with pytest.raises(SimulationError, match="KV"):
            run_to_end(state)
    else:
        run_to_end(state)
        assert state.loop[0]["status"] == Status.OK


def test_event_heap_bounded(loaded):
    st = loaded.state
    n, n_inst = len(st.reqs), len(st.inst)
    assert st.loop[0]["heap_peak"] <= n + 4 * n_inst + 64
    assert st.loop[0]["heap_peak"] <= n // 10


def test_event_heap_small_for_large_run():
    r = blis_fast.simulate(num_requests=5000, rate=50, num_instances=4,
                           alpha_coeffs=[232, 1.75, 3357], beta_coeffs=[5752, 17.25, 6],
                           prompt_tokens=200, prompt_tokens_stdev=50, output_tokens=20, output_tokens_stdev=5)
    peak = int(r.state.loop[0]["heap_peak"])
    assert peak <= 5000 + 4 * 4 + 64
    assert peak < 100  # ≪ n: only in-flight control events + one Step per instance
