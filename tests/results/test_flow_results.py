"""Results of runs with gateway flow control and request deadlines (blis_fast.results.flow_control,
issue 25): hand-computed summary fields, per-request columns, the failed-attempt log, the
gateway depth time series and the decision trace's gateway records on tiny runs; the
objectives and the capacity study's predicate; the trace summary's gateway-bound and
timeout-storm lines; request conservation; outputs byte-identical without flow control and
deterministic with it; the CLI's --attempts-out.

The hand runs: one instance serving one request at a time (SINGLE_SERVER), 1-token prompts and
10 output tokens, a step of exactly 1000 µs -- each request runs 10 ms -- three requests arriving
at 0, 100 and 200 µs, every one with a 25 ms TTL, free-slot flow control.  Request 0 goes
straight through (0..10000); request 1 waits in the gateway 100..10000 and runs to 20000;
request 2 waits 200..20000, runs from 20000 and is cancelled at its deadline 25200 while
running.  With one retry after a 5 ms backoff it arrives again at 30200, goes straight through
and completes at 40200: its exchange took 40000 µs.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from blis_fast.results.flow_control import STORM_MIN, timeout_storm
from blis_fast.results.objectives import default_direction, metric_value, parse_objectives
from blis_fast.studies.slo import parse_slos
from blis_fast_kernels import schema as S
from tests.builders import SINGLE_SERVER, lengths_workload, sim
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

STEP_US = 1000
HAND = dict(SINGLE_SERVER, beta_coeffs=[STEP_US, 0, 0], flow_control="free-slot")
FLOW_FIELDS = ("gateway_wait_mean_ms", "gateway_wait_p99_ms", "gateway_depth_peak", "timeouts", "timed_out",
               "timeout_fraction", "sheds", "shed", "shed_fraction", "retries", "attempts_mean",
               "exchange_e2e_mean_ms", "exchange_e2e_p99_ms")
REQUEST_COLUMNS = ("attempts", "first_arrival_us", "exchange_e2e_us", "gateway_wait_us", "timeouts", "sheds")
SMALL_CLI = ["run", "--num-requests", "30", "--rate", "40", "--seed", "3", "--json", "--quiet"]


def hand_workload(retries: int = 0, ttl_us: int = 25_000, sheddable=(0, 0, 0)):
    """The three requests of the module docstring with their deadline columns."""
    w = lengths_workload([0, 100, 200], [1, 1, 1], [10, 10, 10])
    backoff = np.zeros((1, S.N_RETRY_BACKOFF))
    backoff[0, S.RetryBackoff.BASE_US] = 5000
    backoff[0, S.RetryBackoff.FACTOR] = 1.0
    return dataclasses.replace(w, ttl_us=np.full(3, ttl_us, np.int64), sheddable=np.array(sheddable, np.uint8),
                               max_retries=np.full(3, retries, np.int32), retry_backoff=backoff)


@pytest.fixture(scope="module")
def timed_out():
    return sim(hand_workload(), **HAND, trace_level="decisions", sample_interval_ms=5)


@pytest.fixture(scope="module")
def retried():
    return sim(hand_workload(retries=1), **HAND, trace_level="decisions", sample_interval_ms=5)


def conserved(cluster: dict) -> bool:
    """completed + rejected + dropped + timed out + shed + unfinished == arrived."""
    unfinished = cluster["still_queued"] + cluster["still_running"] + cluster["still_in_flight"]
    ended = cluster["completed_requests"] + cluster["rejected_requests"] + cluster["dropped_unservable"]
    return ended + cluster.get("timed_out", 0) + cluster.get("shed", 0) + unfinished == cluster["arrived_requests"]


def test_hand_run_summary_fields(timed_out):
    c = timed_out.cluster
    # gateway waits: 0 (straight through), 9900, 19800 (the timed-out attempt's, until its release)
    assert c["gateway_wait_mean_ms"] == pytest.approx(9.9)
    assert c["gateway_wait_p99_ms"] == pytest.approx(float(np.percentile([0, 9900, 19800], 99)) / 1000)
    assert c["gateway_depth_peak"] == 2
    assert (c["timeouts"], c["timed_out"], c["sheds"], c["shed"], c["retries"]) == (1, 1, 0, 0, 0)
    assert c["timeout_fraction"] == pytest.approx(1 / 3) and c["shed_fraction"] == 0.0
    assert c["attempts_mean"] == 1.0
    assert c["exchange_e2e_mean_ms"] == pytest.approx((10.0 + 19.9) / 2)
    assert c["completed_requests"] == 2 and c["still_in_flight"] == 0 and conserved(c)
    assert timed_out.adequacy.in_flight_at_end == 0  # (a timed-out request has left: not in flight)
    group = timed_out.summary()["flow_control"]
    assert (group["detector"], group["dispatch_order"], group["fairness"]) == ("free-slot", "fifo", "strict")
    assert list(group["models"].values()) == [{"dispatched": 2, "sheds": 0, "depth_peak": 2}]


def test_hand_run_request_columns_and_records(timed_out):
    c = timed_out.request_columns()
    assert c["state"].tolist() == [S.RequestState.COMPLETED, S.RequestState.COMPLETED, S.RequestState.TIMED_OUT]
    assert c["attempts"].tolist() == [1, 1, 1]
    assert c["first_arrival_us"].tolist() == [0, 100, 200]
    assert c["exchange_e2e_us"].tolist() == [10_000, 19_900, -1]
    assert c["gateway_wait_us"].tolist() == [0, 9900, 19_800]
    assert c["timeouts"].tolist() == [0, 0, 1] and c["sheds"].tolist() == [0, 0, 0]
    last = timed_out.request_records()[2]
    assert last["state"] == "timed_out" and last["exchange_e2e_ms"] is None and last["gateway_wait_ms"] == 19.8
    assert last["attempts"] == 1 and last["first_arrival_s"] == 0.0002
    table = timed_out.requests_table()
    assert table.schema.field("gateway_wait_ms").type == "double" and table.schema.field("attempts").type == "int64"


def test_hand_run_attempt_log(timed_out):
    assert timed_out.attempts_table().to_pylist() == [
        {"request": 2, "attempt": 0, "arrival_us": 200, "gateway_enter_us": 200, "gateway_leave_us": 20_000,
         "gateway_wait_us": 19_800, "end_us": 25_200, "outcome": "timed_out", "place": "running", "instance": 0}]


def test_retry_with_backoff(retried):
    c = retried.request_columns()
    assert c["state"].tolist() == [S.RequestState.COMPLETED] * 3
    assert c["arrival_us"].tolist() == [0, 100, 30_200]  # the row keeps the final attempt: 25200 + 5000
    assert c["attempts"].tolist() == [1, 1, 2] and c["first_arrival_us"].tolist() == [0, 100, 200]
    assert c["e2e_us"].tolist() == [10_000, 19_900, 10_000]
    assert c["exchange_e2e_us"].tolist() == [10_000, 19_900, 40_000]
    s = retried.cluster
    assert (s["timeouts"], s["timed_out"], s["retries"]) == (1, 0, 1)
    assert s["attempts_mean"] == pytest.approx(4 / 3) and s["timeout_fraction"] == 0.0
    assert s["gateway_wait_mean_ms"] == pytest.approx((0 + 9900 + 0 + 19_800) / 4 / 1000)  # the retry: 0
    assert s["exchange_e2e_mean_ms"] == pytest.approx((10 + 19.9 + 40) / 3)
    assert conserved(s)


def test_gateway_depth_time_series(timed_out, retried):
    ts = timed_out.timeseries.cluster()
    assert ts["time_us"].tolist() == [5000, 10_000, 15_000, 20_000, 25_000]
    assert ts["gateway_waiting"].tolist() == [2, 1, 1, 0, 0]
    assert ts["in_system"].tolist() == [3, 2, 2, 1, 1]
    cols = timed_out.timeseries.columns()
    assert not cols["gateway_waiting"][cols["instance"] >= 0].any()
    # between its attempts (25200..30200) request 2 is still in the system; after it, nothing is
    assert retried.timeseries.cluster()["in_system"].tolist() == [3, 2, 2, 1, 1, 1, 1]


def test_decision_trace_gateway_records(timed_out):
    t = timed_out.decision_table()
    gw = [r for r in t.to_pylist() if r["record"] == "gateway"]
    assert [(r["time_us"], r["request"], r["reason"], r["gateway_depth"], r["gateway_wait_us"]) for r in gw] == [
        (100, 1, "queued", 1, None), (200, 2, "queued", 2, None), (10_000, 1, "dispatched", 1, 9900),
        (20_000, 2, "dispatched", 0, 19_800)]
    records = t.column("record").to_pylist()
    at = [k for k, r in enumerate(t.to_pylist()) if r["time_us"] == 10_000]
    assert [records[k] for k in at] == ["gateway", "routing"]  # the dispatch, then the routing it leads to


def test_shedding_counts_apart_from_rejections():
    r = sim(hand_workload(ttl_us=-1, sheddable=(0, 1, 0)), **HAND)
    c = r.cluster
    assert (c["sheds"], c["shed"], c["rejected_requests"], c["timeouts"]) == (1, 1, 0, 0)
    assert c["shed_fraction"] == pytest.approx(1 / 3) and conserved(c)
    assert r.request_columns()["sheds"].tolist() == [0, 1, 0]
    row = r.attempts_table().to_pylist()[0]
    assert (row["request"], row["outcome"], row["place"], row["gateway_enter_us"], row["end_us"]) == \
        (1, "shed", "gateway", -1, 100)
    assert r.summary()["flow_control"]["models"] == {
        name: {"dispatched": 1, "sheds": 1, "depth_peak": 1} for name in r.summary()["flow_control"]["models"]}


def test_objectives_and_capacity_predicate(timed_out):
    from blis_fast.results.scorecard import AUTOSCALE_METRICS, FLOW_METRICS, TIER_METRICS, known_metrics

    # a flow run reports every flow metric itself, and nothing an objective may not name
    known = set(known_metrics()[0]) - set(TIER_METRICS) - set(AUTOSCALE_METRICS)
    assert set(FLOW_METRICS) <= known == set(timed_out.evaluation_metrics)
    assert metric_value(timed_out, "timeout_fraction") == pytest.approx(1 / 3)
    assert metric_value(timed_out, "shed_fraction") == 0.0
    assert metric_value(timed_out, "gateway_wait_mean_ms") == pytest.approx(9.9)
    assert metric_value(timed_out, "attempts_mean") == 1.0
    for m in ("timeout_fraction", "shed_fraction", "gateway_wait_mean_ms", "attempts_mean"):
        assert default_direction(m) == "min"
    ev = timed_out.evaluate("timeout_fraction:min:0.01,goodput_rps:max")
    assert ev.metrics["timeout_fraction"] == pytest.approx(1 / 3)
    (pred,) = parse_slos("timeout_fraction<=0.01")
    assert not pred.holds(metric_value(timed_out, pred.metric))


def test_flow_metrics_of_a_run_without_flow_control():
    r = sim(lengths_workload([0, 100], [1, 1], [10, 10]), **SINGLE_SERVER, beta_coeffs=[STEP_US, 0, 0])
    assert not {*FLOW_FIELDS} & set(r.cluster) and "flow_control" not in r.summary()
    assert not {*REQUEST_COLUMNS} & set(r.request_columns())
    assert [metric_value(r, m) for m in ("timeout_fraction", "shed_fraction", "gateway_wait_mean_ms",
                                         "attempts_mean")] == [0.0, 0.0, 0.0, 1.0]
    assert metric_value(r, "exchange_e2e_p99_ms") == r.cluster["e2e_p99_ms"]
    assert parse_objectives("timeout_fraction")[0].direction == "min"


def test_timeout_storm_and_gateway_bound_summary():
    n = 2 * STORM_MIN
    w = lengths_workload(list(range(0, 100 * n, 100)), [1] * n, [10] * n)
    w = dataclasses.replace(w, ttl_us=np.full(n, 25_000, np.int64), sheddable=np.zeros(n, np.uint8),
                            max_retries=np.zeros(n, np.int32), retry_backoff=np.array([[0.0, 1.0, 0.0]]))
    r = sim(w, **HAND, trace_level="decisions")
    count, first, last = timeout_storm(r)
    assert count == r.cluster["timeouts"] >= STORM_MIN and last - first <= 1_000_000
    text = r.summary_text()
    assert "**gateway-bound**" in text and "**Timeout storm**" in text
    assert "Flow control: gateway wait" in text
    assert "**gateway saturation, timeouts and shedding** -- 19 requests, 19 missed" in text  # all but the first
    assert timeout_storm(sim(hand_workload(), **HAND)) is None  # one timeout: no storm


def test_outputs_byte_identical_without_flow_control(tmp_path):
    outs = []
    for extra in ([], ["--flow-control", "never"]):
        res, table = tmp_path / f"r{len(outs)}.json", tmp_path / f"r{len(outs)}.parquet"
        code, out, err = cli_in_process(*SMALL_CLI, *extra, "--results-path", res, "--per-request-out", table)
        assert code == 0, err
        outs.append((out, res.read_bytes(), table.read_bytes()))
        assert "timeouts" not in json.loads(out)["cluster"] and "flow_control" not in json.loads(out)
    assert outs[0] == outs[1]


def test_flow_run_deterministic_with_cli_outputs(tmp_path):
    runs = []
    for k in range(2):
        paths = {flag: tmp_path / f"{k}{name}" for flag, name in (
            ("--results-path", "r.json"), ("--per-request-out", "r.parquet"), ("--attempts-out", "a.csv"),
            ("--timeseries-out", "ts.parquet"), ("--trace-out", "tr.parquet"))}
        args = [a for flag, p in paths.items() for a in (flag, p)]
        code, out, err = cli_in_process(*SMALL_CLI, "--flow-control", "concurrency", "--flow-concurrency-limit", "1",
                                        "--request-ttl-s", "0.05", *args)
        assert code == 0, err
        runs.append((out, *(p.read_bytes() for p in paths.values())))
        summary = json.loads(out)
        assert summary["cluster"]["timeouts"] > 0 and conserved(summary["cluster"])
        attempts = pacsv.read_csv(paths["--attempts-out"]).to_pydict()
        assert len(attempts["request"]) == summary["cluster"]["timeouts"]
        assert set(attempts["outcome"]) == {"timed_out"}
        ts = pq.read_table(paths["--timeseries-out"]).to_pydict()
        assert max(ts["gateway_waiting"]) <= summary["cluster"]["gateway_depth_peak"]
        trace = pq.read_table(paths["--trace-out"]).to_pydict()
        assert "gateway" in trace["record"]
        records = json.loads(paths["--results-path"].read_text())["requests"]
        assert {r["state"] for r in records} >= {"timed_out"} and "gateway_wait_ms" in records[0]
    assert runs[0] == runs[1]


def test_attempts_out_refused_without_deadlines(tmp_path):
    assert_clean_error(*cli_in_process(*SMALL_CLI, "--attempts-out", tmp_path / "a.csv"),
                       ("--attempts-out", "needs request deadlines"))
    assert_clean_error(*cli_in_process(*SMALL_CLI, "--request-ttl-s", "1", "--attempts-out", tmp_path / "a.txt"),
                       ("--attempts-out", ".parquet"))
    assert not list(tmp_path.iterdir())


def test_per_class_report_sheds_only_the_sheddable_class(tmp_path):
    spec = {"seed": 3, "rate": 50, "num_requests": 60,
            "slo_classes": {"interactive": {"ttft_ms": 300, "ttl_s": 0.5}, "batch": {"e2e_ms": 60000, "sheddable": True}},
            "clients": [{"name": "chat", "slo_class": "interactive", "rate_fraction": 0.5, "prompt_tokens": 64,
                         "output_tokens": 32},
                        {"name": "jobs", "slo_class": "batch", "rate_fraction": 0.5, "prompt_tokens": 64,
                         "output_tokens": 32}]}
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec), encoding="utf-8")
    r = sim(workload_spec=str(path), num_instances=1, flow_control="concurrency", flow_concurrency_limit=1)
    classes = r.slo["slo_classes"]
    assert classes["batch"]["shed"] > 0 and classes["interactive"]["shed"] == 0
    assert classes["batch"]["timed_out"] == 0 and classes["interactive"]["timed_out"] == r.cluster["timed_out"]
    assert sum(g["shed"] for g in classes.values()) == r.cluster["shed"] == r.cluster["sheds"]
    for g in classes.values():  # every arrived request of a class ended somehow (the run went to its end)
        assert g["completed"] + g["rejected"] + g["dropped_unservable"] + g["timed_out"] + g["shed"] == g["arrived"]
    assert conserved(r.cluster)
    spec["slo_classes"] = {"interactive": {"ttft_ms": 300}, "batch": {"e2e_ms": 60000}}
    path.write_text(json.dumps(spec), encoding="utf-8")
    plain = sim(workload_spec=str(path), num_instances=1).slo["slo_classes"]  # (no deadlines: the report as before)
    assert not {"timed_out", "shed"} & {k for g in plain.values() for k in g}


def test_terminal_summary_has_a_flow_control_line(timed_out):
    import io

    from rich.console import Console

    from blis_fast.cli.output import render

    out = io.StringIO()
    render(timed_out.summary(), console=Console(file=out, width=200))
    line = next(x for x in out.getvalue().splitlines() if x.startswith("flow control free-slot:"))
    assert "gateway wait 9.9 ms mean" in line and "timeouts 1 (1 requests, 33.3%)" in line


@pytest.mark.parametrize("cut", [dict(warmup_s=1, cooldown_s=1), dict(horizon=2_000_000)])
def test_conservation_with_a_window_or_a_horizon(cut):
    r = sim(num_requests=200, rate=40, seed=3, flow_control="concurrency", flow_concurrency_limit=1,
            request_ttl_s=0.5, **cut)
    assert r.cluster["timed_out"] > 0 and conserved(r.cluster)
