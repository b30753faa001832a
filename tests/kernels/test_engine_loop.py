"""The resumable event loop (kernels/engine/loop.py ``run_events``): a run that stops at an
event boundary -- logs full (Status.LOG_FULL), pause time reached (Status.PAUSED) -- and is
called again continues exactly as an uninterrupted run, also from a copy of its State; and
each error status is raised where documented, with its instance or request."""

from __future__ import annotations

import numpy as np
import pytest

from blis_fast.run import run_to_end
from blis_fast.run.runner import grow_logs
from blis_fast_kernels.engine.loop import run_events
from builders import lengths_workload
from blis_fast_kernels.schema import IRR_DT, STEP_DT, RequestState, Status
from blis_fast_kernels.schema.state import copy_array, copy_state
from states import make_state

# A small loaded run: 2 instances, KV pressure (preemptions), a shared prefix (cache hits),
# chunked prefills, invariant checks after every step.
N = 40


def loaded_state(**kw):
    rng = np.random.default_rng(4)
    lens = rng.integers(1, 300, N)
    shared = rng.integers(0, 128_000, 64)
    prefixes = [shared if i % 3 == 0 else [] for i in range(N)]
    lens = [max(n, 80) if i % 3 == 0 else int(n) for i, n in enumerate(lens)]
    outs = rng.integers(0, 40, N)
    arrivals = np.sort(rng.integers(0, 400_000, N))
    wl = lengths_workload(arrivals, lens, outs, bs=16, prefixes=prefixes)
    settings = dict(num_instances=2, total_kv_blocks=40, max_num_running_reqs=6, max_num_scheduled_tokens=128,
                    alpha_coeffs=[100, 1, 50], beta_coeffs=[5000, 20, 100], check_invariants=True,
                    routing_policy="least-loaded")
    settings.update(kw)
    return make_state(wl, **settings)


def straight():
    st = run_to_end(loaded_state())
    assert int(st.loop[0]["status"]) == Status.OK
    assert int(st.inst["preemptions"].sum()) > 0 and int(st.inst["prefix_hit_tokens"].sum()) > 0
    assert int(st.loop[0]["irregular_records"]) > 0  # preemptions leave irregular ITL records
    return st


def assert_same_run(a, b):
    """Every table equal; the logs up to their used rows; settings but the pause time and
    the chunk size (how often the kernel returns, not what it computes)."""
    for name in a._fields:
        x, y = getattr(a, name), getattr(b, name)
        if name == "step_log":
            n = int(a.loop[0]["steps"])
            x, y = x[:n], y[:n]
        elif name == "irr_log":
            n = int(a.loop[0]["irregular_records"])
            x, y = x[:n], y[:n]
        elif name == "settings":
            x, y = x.copy(), y.copy()
            x["pause_at_us"] = y["pause_at_us"] = 0
            x["chunk_events"] = y["chunk_events"] = 0
        assert np.array_equal(x, y), name


def test_minimal_log_growth_gives_the_same_run():
    """Grow the logs by the least the loop asks for, so it returns LOG_FULL before almost
    every step: the result equals the straight run."""
    want = straight()
    st = loaded_state()
    seqs = int(st.inst["max_num_seqs"].max())
    st = st._replace(step_log=np.zeros(0, STEP_DT), irr_log=np.zeros(0, IRR_DT))
    calls = 0
    while True:
        run_events(st)
        calls += 1
        status = int(st.loop[0]["status"])
        if status == Status.OK:
            break
        assert status == Status.LOG_FULL
        lp = st.loop[0]
        step_log = np.zeros(int(lp["steps"]) + 1, STEP_DT)
        step_log[: len(st.step_log)] = st.step_log
        irr_log = np.zeros(max(len(st.irr_log), int(lp["irregular_records"]) + seqs), IRR_DT)
        irr_log[: len(st.irr_log)] = st.irr_log
        st = st._replace(step_log=step_log, irr_log=irr_log)
    assert calls > int(want.loop[0]["steps"])  # (almost) every step needed its own call
    assert_same_run(st, want)


@pytest.mark.parametrize("every_us", [997, 7_777, 100_000])
def test_pausing_gives_the_same_run(every_us):
    want = straight()
    seen = []
    st = run_to_end(loaded_state(), sample_every_us=every_us, on_sample=lambda s, t, k: seen.extend(range(t, t + k * every_us, every_us)))
    assert_same_run(st, want)
    assert seen and seen == sorted(seen) and all(t % every_us == 0 for t in seen)
    assert seen[-1] <= int(want.loop[0]["clock_us"])


@pytest.mark.parametrize("chunk", [1, 37, 1000])
def test_chunked_calls_give_the_same_run(chunk):
    """The kernel returning every ``chunk`` events (progress, interrupts) changes nothing."""
    want = straight()
    clocks = []
    st = run_to_end(loaded_state(), progress=lambda s: clocks.append(int(s.loop[0]["clock_us"])), chunk_events=chunk)
    assert_same_run(st, want)
    assert len(clocks) >= int(want.loop[0]["events"]) // chunk - 1
    assert clocks == sorted(clocks)


def test_copy_at_a_pause_continues_independently():
    want = straight()
    st = loaded_state()
    st.settings["pause_at_us"] = 200_000
    st = _run_raw(st)
    assert int(st.loop[0]["status"]) == Status.PAUSED
    assert int(st.loop[0]["clock_us"]) <= 200_000
    states = st.reqs["state"]
    assert (states == RequestState.COMPLETED).any() and (states == RequestState.PENDING).any()
    frozen = copy_state(st)
    twin = copy_state(st)
    st.settings["pause_at_us"] = np.iinfo(np.int64).max
    done = run_to_end(st)
    assert_same_run(done, want)
    assert_same_run(twin, frozen)  # continuing the original left the copy alone
    twin.settings["pause_at_us"] = np.iinfo(np.int64).max
    assert_same_run(run_to_end(twin), want)


def test_horizon_stops_with_ok_and_events_left():
    st = run_to_end(loaded_state(horizon=150_000))
    lp = st.loop[0]
    assert int(lp["status"]) == Status.OK
    assert int(lp["clock_us"]) <= 150_000
    assert int(lp["heap_size"]) > 0 or int(lp["next_arrival"]) < N  # something was left


# ----------------------------------------------------------------------------- error statuses


def _run_raw(st):
    """run_events until it returns something other than LOG_FULL (logs grown as needed)."""
    while True:
        run_events(st)
        if int(st.loop[0]["status"]) != Status.LOG_FULL:
            return st
        st = grow_logs(st)


def test_max_events_limit():
    st = _run_raw(loaded_state(max_events=50))
    assert int(st.loop[0]["status"]) == Status.MAX_EVENTS
    assert int(st.loop[0]["events"]) == 51


def test_heap_full():
    st = loaded_state()
    st = st._replace(heap=np.zeros(1, st.heap.dtype))
    st = _run_raw(st)
    assert int(st.loop[0]["status"]) == Status.HEAP_FULL
    assert int(st.loop[0]["heap_size"]) <= 1


def test_no_active_instance():
    st = loaded_state()
    st.inst["active"] = 0
    st = _run_raw(st)
    lp = st.loop[0]
    assert int(lp["status"]) == Status.NO_INSTANCE
    assert int(lp["error_request"]) == int(st.arrival_order[0])


def test_clock_backwards():
    st = loaded_state()
    st.loop["clock_us"] = 10**12
    st = _run_raw(st)
    lp = st.loop[0]
    assert int(lp["status"]) == Status.CLOCK_BACKWARDS
    assert int(lp["error_request"]) == int(st.arrival_order[0]) and int(lp["events"]) == 0


def test_stall_when_no_batch_can_form():
    st = loaded_state()
    st.inst["max_batched_tokens"] = 0  # no token budget: nothing can ever be admitted
    st = _run_raw(st)
    lp = st.loop[0]
    assert int(lp["status"]) == Status.STALL
    i = int(lp["error_instance"])
    assert int(st.inst[i]["wq_len"]) > 0 and int(st.inst[i]["batch_len"]) == 0


def _paused_mid_run(**kw):
    """A run paused while an instance runs a batch of >= 2 requests: (state, instance)."""
    st = loaded_state(**kw)
    st.settings["pause_at_us"] = 120_000
    st = _run_raw(st)
    assert int(st.loop[0]["status"]) == Status.PAUSED
    busy = np.flatnonzero(st.inst["batch_len"] >= 2)
    assert busy.size > 0
    st.settings["pause_at_us"] = np.iinfo(np.int64).max
    return st, int(busy[0])


def test_invariant_kv_detects_a_miscount():
    st, i = _paused_mid_run()
    st.inst["kv_allocated"][i] += 1
    st = _run_raw(st)
    assert int(st.loop[0]["status"]) == Status.INVARIANT_KV
    assert int(st.loop[0]["error_instance"]) == i


def test_invariant_batch_detects_an_oversized_batch():
    st, i = _paused_mid_run()
    st.inst["max_num_seqs"][i] = int(st.inst[i]["batch_len"]) - 1  # smaller than the running batch
    st = _run_raw(st)
    assert int(st.loop[0]["status"]) == Status.INVARIANT_BATCH
    assert int(st.loop[0]["error_instance"]) == i


def test_invariant_checks_off_do_not_stop():
    """The same miscount goes unnoticed without the checks (it is only a counter)."""
    st, i = _paused_mid_run(check_invariants=False)
    assert int(st.settings[0]["check_invariants"]) == 0
    st.inst["kv_allocated"][i] += 1
    st = _run_raw(st)
    assert int(st.loop[0]["status"]) == Status.OK
    assert int(st.inst[i]["kv_allocated"]) == 1  # everything released but the phantom block


def test_copy_array_copies_tables_of_records_and_plain_arrays():
    from blis_fast_kernels.schema import REQUEST_DT

    rows = np.zeros(5, REQUEST_DT)
    rows["computed"] = np.arange(5)
    rows["priority"] = 0.5
    for a in (rows, np.arange(12, dtype=np.int64).reshape(3, 4), rows[::2]):  # bytes, plain, strided
        b = copy_array(a)
        assert b.dtype == a.dtype and b.shape == a.shape and (b == a).all() and not np.shares_memory(a, b)
    out = np.empty_like(rows)
    assert copy_array(rows, out) is out and (out == rows).all()
    out["computed"][0] = 99
    assert rows["computed"][0] == 0  # a copy, not a view


@pytest.mark.parametrize("kind,instance,name", [(7, -1, "cluster kind 7"), (3, -1, "cluster kind 3"),
                                                (9, 1, "instance kind 9")])
def test_an_unknown_event_kind_stops_the_loop_naming_it(kind, instance, name):
    """Dispatch is exhaustive: an event of a kind without a handler is an error status whose
    message names the kind, not a silent fall-through into another handler.  (Kind 3, the
    agents' instant, is never a heap event: one in the heap is unknown too.)"""
    from blis_fast.errors import SimulationError
    from blis_fast_kernels.schema import N_CLUSTER_KINDS, N_INSTANCE_KINDS

    st = loaded_state()
    st = st._replace(arrival_order=st.arrival_order[:0])  # the bogus event is the only one
    prio = kind if instance < 0 else N_CLUSTER_KINDS + instance * N_INSTANCE_KINDS + kind
    st.heap[0] = (0, prio, 0, 7, 0)
    st.loop[0]["heap_size"] = 1
    with pytest.raises(SimulationError, match=f"unknown kind.*{name}.*internal error"):
        run_to_end(st)
    lp = st.loop[0]
    assert int(lp["status"]) == Status.UNKNOWN_EVENT and int(lp["error_kind"]) == kind
    assert int(lp["error_request"]) == 7 and int(lp["error_instance"]) == instance
