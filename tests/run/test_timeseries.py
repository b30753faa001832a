"""Time series (simulation.sample_interval_ms, Result.timeseries, --timeseries-out) and the
decision-trace table (--trace-out): sampling changes no result, Little's law holds on the
sampled series, per-instance rows add up to the cluster's, cumulative counters match the
run; the trace table has a row per decision with outcomes; files are byte-identical."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

import blis_fast
from blis_fast.results.trace_table import decision_table
from tests.builders import expect_cli_error, run_cli

KW = dict(num_requests=200, rate=40, num_instances=2, workload="chatbot", total_kv_blocks=200, max_num_seqs=16,
          seed=7)


def test_sampling_changes_nothing_and_littles_law_holds():
    plain = blis_fast.simulate(**KW)
    r = blis_fast.simulate(**KW, sample_interval_ms=5)
    assert plain.timeseries is None
    assert r.cluster == plain.cluster and r.request_records() == plain.request_records()
    c = r.timeseries.cluster()
    assert np.array_equal(c["time_us"], 5000 * np.arange(1, len(c["time_us"]) + 1))
    # L = λ·W over [0, T]: time-average number in the system = arrival rate x mean time in it
    lat = r.latencies
    assert lat["done"].all()
    T = c["time_us"][-1] / 1e6
    L = c["in_system"].mean()
    lam = c["arrivals"][-1] / T
    W = lat["e2e_us"].mean() / 1e6
    assert L == pytest.approx(lam * W, rel=0.01)
    # cumulative counters never decrease and end at the run's totals (within the last interval)
    for col in ("arrivals", "completions", "preemptions"):
        assert (np.diff(c[col]) >= 0).all()
    assert c["arrivals"][-1] == 200 and c["completions"][-1] >= 199
    assert c["preemptions"][-1] == r.cluster["preemption_count"] > 0


def test_instance_rows_add_up_to_the_cluster_rows():
    ts = blis_fast.simulate(**KW, sample_interval_ms=50).timeseries
    cols = ts.columns()
    inst = cols["instance"]
    assert set(inst.tolist()) == {-1, 0, 1}
    for name in ("waiting", "running", "kv_blocks_used", "completions", "preemptions"):
        per_inst = cols[name][inst >= 0].reshape(-1, 2).sum(axis=1)
        assert np.array_equal(per_inst, cols[name][inst == -1])
    kv = cols["kv_utilization"]
    assert ((kv >= 0) & (kv <= 1)).all() and kv.max() > 0.5


def test_rejections_are_counted_in_the_cluster_rows():
    r = blis_fast.simulate(**KW, sample_interval_ms=100, admission_policy="token-bucket", token_bucket_capacity=2000,
                           token_bucket_refill_rate=3000)
    c = r.timeseries.cluster()
    assert c["rejections"][-1] == r.cluster["rejected_requests"] > 0
    assert (c["in_system"] == c["arrivals"] - c["completions"] - c["rejections"] - c["dropped"]).all()


def test_decision_table_rows_and_outcomes():
    r = blis_fast.simulate(**KW, trace_level="decisions")
    t = decision_table(r).to_pydict()
    lp = r.state.loop[0]
    assert len(t["record"]) == int(lp["admit_records"] + lp["route_records"] + lp["preempt_records"])
    assert t["time_us"] == sorted(t["time_us"])
    routing = [k for k, rec in enumerate(t["record"]) if rec == "routing"]
    assert len(routing) == 200 and t["record"].count("preemption") == r.cluster["preemption_count"]
    reqs = r.state.reqs
    for k in routing[:20]:
        req = t["request"][k]
        assert t["instance"][k] == reqs["instance"][req]
        assert t["ttft_ms"][k] == pytest.approx(r.latencies["ttft_us"][req] / 1e3)
        assert t["alt1_instance"][k] == 1 - t["instance"][k] and t["alt2_instance"][k] is None
        assert t["cached_tokens"][k] == reqs["cached_tokens"][req] and t["admitted"][k] is None
    assert all(t["admitted"][k] and t["reason"][k] == "always-admit"
               for k, rec in enumerate(t["record"]) if rec == "admission")
    assert t["reason"][routing[0]] is None
    limited = decision_table(blis_fast.simulate(**KW, trace_level="decisions", admission_policy="token-bucket",
                                                token_bucket_capacity=2000, token_bucket_refill_rate=3000)).to_pydict()
    reasons = {(a, w) for a, w, rec in zip(limited["admitted"], limited["reason"], limited["record"])
               if rec == "admission"}
    assert reasons == {(True, "bucket"), (False, "bucket-short")}


def test_cli_analysis_outputs_are_byte_identical(tmp_path, capsys):
    args = ["run", "--num-requests", "60", "--rate", "20", "--num-instances", "2", "--counterfactual-k", "1",
            "--summarize-trace"]
    blobs = []
    for k in range(2):
        ts, tr = tmp_path / f"ts{k}.parquet", tmp_path / f"tr{k}.parquet"
        code, out, err = run_cli(capsys, *args, "--timeseries-out", ts, "--trace-out", tr)
        assert code == 0, err
        blobs.append((out, ts.read_bytes(), tr.read_bytes()))
    assert blobs[0] == blobs[1]
    assert '"summary_text": "# Run summary' in blobs[0][0] and '"counterfactuals"' in blobs[0][0]
    assert pq.read_table(tmp_path / "ts0.parquet").column("time_us")[0].as_py() == 100_000  # default 100 ms
    assert pq.read_table(tmp_path / "tr0.parquet").num_rows == 120  # admission + routing, no preemption


@pytest.mark.parametrize("args, needles", [
    (("--sample-interval-ms", "5"), ("--sample-interval-ms", "--timeseries-out")),
    (("--trace-level", "decisions"), ("--trace-level", "changes nothing")),
    (("--trace-level", "none", "--summarize-trace"), ("--summarize-trace", "decision trace")),
    (("--trace-level", "fully"), ("--trace-level", "none", "decisions", "full")),
    (("--trace-level", "full"), ("--trace-level", "full changes nothing", "--trace-out", "--summarize-trace")),
    (("--sample-interval-ms", "0", "--timeseries-out", "x.parquet"), ("--sample-interval-ms",)),
    (("--counterfactual-k", "-1"), ("--counterfactual-k",)),
])
def test_cli_analysis_flag_errors(capsys, args, needles):
    expect_cli_error(capsys, "run", *args, needles=needles)


def test_samples_between_events_take_one_kernel_return(monkeypatch):
    """A fine interval over a run with few events: the kernel stops once per distinct
    state, and the series still has a row for every sample time (the same as sampling
    each time on its own: the state cannot change between two events)."""
    from blis_fast.results.timeseries import TimeSeriesRecorder

    calls = []
    record = TimeSeriesRecorder.__call__

    def counting(self, state, t_us, repeats=1):
        calls.append(repeats)
        return record(self, state, t_us, repeats)

    monkeypatch.setattr(TimeSeriesRecorder, "__call__", counting)
    r = blis_fast.simulate(num_requests=3, rate=50, sample_interval_ms=0.01)
    times = r.timeseries.table().column("time_us").to_numpy()[::2]  # one instance + the cluster per sample
    assert len(times) == sum(calls) > 50 * len(calls)
    assert np.array_equal(times, 10 * np.arange(1, len(times) + 1))
    assert len(calls) <= int(r.state.loop[0]["events"]) + 1
    coarse = blis_fast.simulate(num_requests=3, rate=50, sample_interval_ms=0.03).timeseries.table()
    fine = r.timeseries.table()
    for name in ("waiting", "running", "completions", "kv_blocks_used"):
        assert np.array_equal(fine.column(name).to_numpy().reshape(-1, 2)[2::3],
                              coarse.column(name).to_numpy().reshape(-1, 2)[:len(fine) // 6])
