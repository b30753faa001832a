"""Scheduling records (``trace_level full``: kernels/schema/tables.py SCHED_DT, written by
kernels/engine/trace.py from the batch formation of kernels/engine/step.py) and their
columns in the decision table (blis_fast/results/trace_table.py)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from blis_fast.config.sim import build_config
from blis_fast.results import Result
from blis_fast.run import build_state, build_workload, resolve, run_to_end
from blis_fast_kernels.schema import SchedRecord, TraceLevel
from builders import HAND_STEPS, lengths_workload, sim

SCHED_COLUMNS = ("time_us", "record", "request", "position", "queue_len", "wait_us", "tokens", "budget_left",
                 "free_blocks", "block_reason", "blocked_steps", "blocked_until_us")


def scheduling_rows(result) -> list[tuple]:
    t = result.decision_table().to_pydict()
    return [tuple(t[k][i] for k in SCHED_COLUMNS) for i in range(len(t["time_us"]))
            if t["record"][i] in ("scheduled", "blocked")]


def test_sjf_with_a_tiny_token_budget_by_hand():
    """One instance, sjf, 512 tokens per step, 4 sequences; step time 1000 + 10·P + 5·D µs.

    Step 1 (t = 0): r0..r3 wait (800, 100, 400, 200 tokens); sjf takes r1 (100), r3 (200) and
    a 212-token chunk of r2: the budget is gone and r0 stays at the head (token-budget).
    It lasts 1000 + 10·512 = 6120 µs.  Step 2 (t = 6120): r1, r3 decode, r2 finishes its
    prompt (188), r4 (300, arrived at 40) sorts before r0 and takes 300 of the 322 left; the
    batch is full, r0 blocked again (batch-full) -- also in step 3 (t = 12010) -- and is
    admitted in step 4 with 510 tokens (two decode tokens took the rest).  KV: 1000 blocks
    of 16 tokens."""
    wl = lengths_workload([0, 0, 0, 0, 40], [800, 100, 400, 200, 300], [3] * 5)
    r = sim(wl, **HAND_STEPS, total_kv_blocks=1000, max_num_seqs=4, max_num_batched_tokens=512,
            scheduler="sjf", trace_level="full")
    assert scheduling_rows(r) == [
        # time, record, request, position, queue_len, wait, tokens, budget, free blocks, reason, steps, until
        (0, "scheduled", 1, 0, 4, 0, 100, 512, 1000, None, None, None),
        (0, "scheduled", 3, 1, 3, 0, 200, 412, 1000 - 7, None, None, None),
        (0, "scheduled", 2, 2, 2, 0, 212, 212, 993 - 13, None, None, None),
        (0, "blocked", 0, 3, 1, 0, 800, 0, 980 - 14, "token-budget", 1, 0),
        (6120, "scheduled", 4, 0, 2, 6120 - 40, 300, 512 - 2 - 188, 966 - 11, None, None, None),
        (6120, "blocked", 0, 1, 1, 6120, 800, 322 - 300, 955 - 19, "batch-full", 2, 12010),
        (13030, "scheduled", 0, 0, 1, 13030, 510, 510, 955, None, None, None),
    ]
    # the recorded order is the order the requests entered the batch, at the times they did
    t = r.decision_table().to_pydict()
    order = [t["request"][i] for i in range(len(t["record"])) if t["record"][i] == "scheduled"]
    reqs = r.state.reqs
    assert order == list(np.lexsort((reqs["admit_seq"], reqs["first_scheduled_us"])))
    keys = [t["sched_key"][i] for i in range(len(t["record"])) if t["record"][i] == "scheduled"]
    assert keys == [100.0, 200.0, 400.0, 300.0, 800.0]  # sjf: the prompt length


def test_kv_blocked_head_counts_the_requests_that_would_fit_behind_it():
    """fcfs, 60 KV blocks: r0 (800 tokens, 50 blocks) runs; r1 (400, 25 blocks) cannot get
    them and blocks r2 (100, 7 blocks), which would fit -- head-of-line blocking."""
    wl = lengths_workload([0, 10, 20], [800, 400, 100], [3] * 3)
    r = sim(wl, **HAND_STEPS, total_kv_blocks=60, max_num_seqs=4, max_num_batched_tokens=2048, trace_level="full")
    t = r.decision_table().to_pydict()
    blocked = [i for i in range(len(t["record"])) if t["record"][i] == "blocked"]
    assert len(blocked) == 1
    b = blocked[0]
    assert (t["request"][b], t["block_reason"][b], t["free_blocks"][b], t["fits_behind"][b], t["queue_len"][b]) \
        == (1, "kv-blocks", 9, 1, 2)
    assert t["blocked_steps"][b] == 2  # r0's decode steps until it completes and frees its blocks


def test_preemption_context_and_the_readmission():
    """10 KV blocks: r0 and r1 (60-token prompts, 100 output tokens) both start, decode until
    the blocks run out; r1 (the last admitted, and the younger: lower slo-based priority) is
    preempted for r0, waits one step with no admissions (preemption), then for KV blocks
    until r0 completes, and is readmitted."""
    wl = lengths_workload([0, 10], [60, 60], [100, 100])
    r = sim(wl, **HAND_STEPS, total_kv_blocks=10, max_num_seqs=4, priority_policy="slo-based", trace_level="full")
    t = r.decision_table().to_pydict()
    rows = [(t["record"][i], t["request"][i], t["block_reason"][i], t["readmission"][i])
            for i in range(len(t["record"])) if t["record"][i] in ("scheduled", "blocked", "preemption")]
    assert rows == [("scheduled", 0, None, False), ("scheduled", 1, None, False), ("preemption", 1, None, None),
                    ("blocked", 1, "preemption", None), ("blocked", 1, "kv-blocks", None),
                    ("scheduled", 1, None, True)]
    p = t["record"].index("preemption")
    assert (t["position"][p], t["batch_size"][p], t["for_request"][p], t["lower_priority_running"][p]) == (1, 2, 0, 0)
    # slo-based: 1e-6 per µs of age at the step's start
    assert t["priority"][p] == pytest.approx((t["time_us"][p] - 10) * 1e-6)
    assert t["for_priority"][p] == pytest.approx(t["time_us"][p] * 1e-6)
    b = t["block_reason"].index("preemption")
    assert t["priority"][b] == t["priority"][p]  # the victim's priority as of that step
    k = t["block_reason"].index("kv-blocks")
    readmitted = len(t["record"]) - 1 - t["record"][::-1].index("scheduled")
    assert t["time_us"][readmitted] > t["blocked_until_us"][k] > t["time_us"][k]
    assert t["e2e_ms"][readmitted] is not None and r.state.reqs["preemptions"][1] == 1


LOADED = dict(num_requests=200, rate=60, num_instances=2, workload="chatbot", prefix_tokens=64, total_kv_blocks=120,
              max_num_seqs=16, seed=3, scheduler="priority-fcfs", priority_policy="inverted-slo",
              preemption_victim="lowest-priority")


def run_state(trace_level, event_skipping=True, **kw):
    cfg = build_config({}, {**LOADED, **kw})
    setup = resolve(cfg)
    wl = build_workload(cfg)
    return setup, wl, run_to_end(build_state(setup, wl, trace_level=trace_level, event_skipping=event_skipping))


def doc(setup, wl, st):
    return json.dumps(Result(setup, wl, st).results_document(), sort_keys=True)


def test_full_trace_changes_no_result_and_is_consistent():
    """Under KV pressure (preemptions): results equal to untraced and decisions-traced runs,
    the decision logs equal too; scheduling records agree with the run."""
    none, dec, full = (run_state(level) for level in (TraceLevel.NONE, TraceLevel.DECISIONS, TraceLevel.FULL))
    assert doc(*none) == doc(*dec) == doc(*full)
    st_d, st = dec[2], full[2]
    for name, count in (("route_log", "route_records"), ("admit_log", "admit_records"),
                        ("preempt_log", "preempt_records")):
        n = int(st.loop[0][count])
        assert getattr(st_d, name)[:n].tobytes() == getattr(st, name)[:n].tobytes()
    log = st.sched_log[: int(st.loop[0]["sched_records"])]
    assert len(log) > 1024  # more than the log's first allocation: it grew during the run (Status.LOG_FULL)
    reqs = st.reqs
    sch = log[log["kind"] == SchedRecord.SCHEDULED]
    vic = log[log["kind"] == SchedRecord.VICTIM]
    pre = st.preempt_log[: int(st.loop[0]["preempt_records"])]
    assert len(pre) > 0 and len(vic) == len(pre)
    assert np.array_equal(vic["request"], pre["victim"]) and np.array_equal(vic["for_request"], pre["for_request"])
    # lowest-priority victims: nobody running had a lower priority
    assert (vic["higher_behind"] == 0).all()
    # every admission to a batch: first ones at the request's first scheduling time, the others readmissions
    first = sch[sch["readmission"] == 0]
    assert sorted(first["request"].tolist()) == np.flatnonzero(reqs["first_scheduled_us"] >= 0).tolist()
    assert np.array_equal(reqs["first_scheduled_us"][first["request"]], first["time_us"])
    assert np.array_equal(reqs["cached_tokens"][first["request"]], first["cached_tokens"])
    assert len(sch) - len(first) <= int(reqs["preemptions"].sum())
    assert np.array_equal(reqs["instance"][sch["request"]], sch["instance"])
    # within a step, admissions come from the head in the sorted queue's order
    for (i, t) in {(int(a), int(b)) for a, b in zip(sch["instance"], sch["time_us"])}:
        step = sch[(sch["instance"] == i) & (sch["time_us"] == t)]
        assert step["position"].tolist() == list(range(len(step)))
        assert (np.diff(step["sched_key"]) >= 0).all()
        assert (np.diff(step["queue_len"]) == -1).all()
        assert (np.diff(step["budget_left"]) < 0).all()
    assert (log["wait_us"] >= 0).all()
    table = Result(*full).decision_table()
    kinds = table.column("record").to_pylist()
    assert kinds.count("scheduled") == len(sch) and kinds.count("blocked") == int((log["kind"] == 1).sum())


def test_full_trace_is_the_same_with_and_without_event_skipping():
    a = run_state(TraceLevel.FULL)[2]
    b = run_state(TraceLevel.FULL, event_skipping=False)[2]
    n = int(a.loop[0]["sched_records"])
    assert n == int(b.loop[0]["sched_records"]) and n > 0
    assert a.sched_log[:n].tobytes() == b.sched_log[:n].tobytes()


def test_decision_trace_file_is_unchanged_by_full_columns_and_deterministic(tmp_path):
    """The decisions-level table has no scheduling columns; full adds them; the same run
    twice gives the same Parquet bytes."""
    import pyarrow.parquet as pq

    from blis_fast.results.trace_table import write_decision_trace

    def parquet(level):
        path = tmp_path / "trace.parquet"
        write_decision_trace(Result(*run_state(level)), path)
        return path.read_bytes()

    dec, full = parquet(TraceLevel.DECISIONS), parquet(TraceLevel.FULL)
    assert parquet(TraceLevel.FULL) == full
    cols_d = pq.read_table(io.BytesIO(dec)).column_names
    cols_f = pq.read_table(io.BytesIO(full)).column_names
    assert "block_reason" not in cols_d and "block_reason" in cols_f
    assert set(cols_d) < set(cols_f)
    tab_d = pq.read_table(io.BytesIO(dec))
    tab_f = pq.read_table(io.BytesIO(full))
    rec = tab_f.column("record").to_pylist()
    keep = [k for k, v in enumerate(rec) if v in ("admission", "routing", "preemption")]
    assert tab_f.select(cols_d).take(keep).equals(tab_d)


@pytest.mark.parametrize("level", ["none", "decisions"])
def test_levels_below_full_allocate_no_scheduling_log(level):
    r = sim(lengths_workload([0, 0], [100, 100], [2, 2]), trace_level=level)
    assert len(r.state.sched_log) == 1 and int(r.state.loop[0]["sched_records"]) == 0
    assert "block_reason" not in r.decision_table().column_names


def test_cli_full_trace_file_has_the_scheduling_records(tmp_path, capsys):
    from builders import run_cli

    out = tmp_path / "trace.parquet"
    code, _, err = run_cli(capsys, "run", "--num-requests", "40", "--rate", "20", "--trace-level", "full",
                           "--trace-out", out)
    assert code == 0, err
    import pyarrow.parquet as pq

    records = pq.read_table(out).column("record").to_pylist()
    assert records.count("scheduled") == 40 and records.count("admission") == 40
    code, stdout, err = run_cli(capsys, "run", "--num-requests", "40", "--rate", "20", "--trace-level", "full",
                                "--summarize-trace", "--json")
    assert code == 0, err
    assert '"summary_text": "# Run summary' in stdout


def test_yaml_full_without_an_output_is_refused(tmp_path, capsys):
    from builders import expect_cli_error, write

    cfg = write(tmp_path, "run.yaml", {"simulation": {"trace_level": "full"}})
    expect_cli_error(capsys, "run", "--config", cfg, needles=("simulation.trace_level", "full changes nothing"))
    cfg = write(tmp_path, "bad.yaml", {"simulation": {"trace_level": "all"}})
    expect_cli_error(capsys, "run", "--config", cfg, needles=("simulation.trace_level", "none", "decisions", "full"))


def test_the_scheduling_log_is_charged_to_the_memory_budget():
    """The scheduling log counts in the run's memory estimate (its own family) from
    TraceLevel.FULL on only, and a run whose trace does not fit is refused naming it."""
    from blis_fast.config import memory
    from blis_fast.errors import ConfigError
    from blis_fast.run.tables import estimate_state_bytes
    from blis_fast_kernels.schema import SCHED_DT

    setup = resolve(build_config({}, {"num_instances": 4}))
    n = 1_000_000

    def estimate(level):
        return estimate_state_bytes(setup.config, setup.latency, n, 0, 0, False, 0, trace_level=level)

    assert estimate(TraceLevel.DECISIONS)["scheduling trace"] == SCHED_DT.itemsize + 8
    assert estimate(TraceLevel.FULL)["scheduling trace"] == n * SCHED_DT.itemsize + 4 * 8
    small = resolve(build_config({}, {"num_instances": 4, "max_num_seqs": 2, "total_kv_blocks": 64,
                                      "prefix_index_capacity": 16}))
    wl = lengths_workload([0] * 100, [16] * 100, [1] * 100)
    parts = {level: estimate_state_bytes(small.config, small.latency, 100, 100, 100, True, 0, trace_level=level)
             for level in (TraceLevel.DECISIONS, TraceLevel.FULL)}
    budget = sum(parts[TraceLevel.DECISIONS].values()) + parts[TraceLevel.FULL]["scheduling trace"] // 2
    with memory.memory_budget(budget):
        build_state(small, wl, trace_level=TraceLevel.DECISIONS)  # fits
    with memory.memory_budget(budget), pytest.raises(ConfigError, match="simulation.max_memory.*scheduling trace"):
        build_state(small, wl, trace_level=TraceLevel.FULL)
