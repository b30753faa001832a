"""Results of a run with an autoscaler (blis_fast.results.autoscale, docs/autoscaling.md):
billing from the lifecycle log computed here by hand, the summary's ``autoscale`` group (only
with an autoscaler), the oscillation anomaly, the ``gpu_hours`` / ``cost`` objectives, the
time series' lifecycle columns, the scale events / ticks tables and the scaling-lag line of
the trace summary."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import blis_fast
from blis_fast.results.autoscale import billing, scale_oscillations, tick_log, timelines
from blis_fast.results.objectives import default_direction, metric_value
from blis_fast.results.timeseries import COLUMNS
from blis_fast_kernels.schema import LifeState
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

# a step load one instance cannot carry: the threshold autoscaler scales up to 3 on the
# waiting signal; constant delays, ticks every 10 s, the decision acts 5 s later
SCALED = dict(num_instances=1, min_instances=1, max_instances=3, autoscaler="threshold", autoscale_signal="waiting",
              autoscale_up=2, autoscale_down=0.5, rate=60, num_requests=2400, seed=5, autoscale_interval_s=10,
              autoscale_metrics_delay_s=5, provisioning_delay_s=10, loading_delay_s=10, stabilization_down_s=30)
OSCILLATOR = dict(num_instances=2, min_instances=1, max_instances=4, autoscaler="oscillator",
                  autoscale_period_ticks=1, stabilization_down_s=0, rate=20, num_requests=1000, seed=5,
                  autoscale_interval_s=10, provisioning_delay_s=5, loading_delay_s=5)
UNSCALED = dict(num_instances=2, rate=20, num_requests=300, seed=5)
CLI_SCALED = ["run", "--num-instances", "2", "--min-instances", "1", "--max-instances", "4", "--autoscaler",
              "oscillator", "--autoscale-period-ticks", "1", "--stabilization-down-s", "0", "--rate", "20",
              "--num-requests", "600", "--autoscale-interval-s", "10", "--provisioning-delay-s", "5",
              "--loading-delay-s", "5", "--quiet"]


@pytest.fixture(scope="module")
def scaled():
    return blis_fast.simulate(**SCALED, sample_interval_ms=1000, trace_level="decisions")


@pytest.fixture(scope="module")
def oscillating():
    return blis_fast.simulate(**OSCILLATOR, sample_interval_ms=1000)


@pytest.fixture(scope="module")
def unscaled():
    return blis_fast.simulate(**UNSCALED, sample_interval_ms=1000, trace_level="decisions")


def life_rows(result):
    st = result.state
    return st.life_log[: int(st.loop[0]["life_records"])]


def billed_seconds_by_hand(result, pool=0) -> float:
    """Instance-seconds held by pool ``pool``: each instance from its provisioning (the
    initial ones from 0) to its termination or the run's end, walked row by row through the
    lifecycle log."""
    end = int(result.state.loop[0]["clock_us"])
    p = result.setup.pools[pool]
    start = {i: 0 for i in range(p.first_instance, p.first_instance + p.instances)}  # instance -> held since
    held_us = 0
    for row in life_rows(result).tolist():
        t, i, state = row
        if not p.first_instance <= i < p.first_instance + p.rows:
            continue
        if state == LifeState.PROVISIONING:
            start[i] = t
        elif state == LifeState.TERMINATED:
            held_us += t - start.pop(i)
    held_us += sum(end - t for t in start.values())
    return held_us / 1e6


def test_scale_up_times_follow_the_delays(scaled):
    """The first tick (10 s) decides a scale-up that acts after the metrics delay (5 s):
    provisioning at 15 s, loading 10 s later, active 10 s after that (no warm-up)."""
    rows = [(t, s) for t, i, s in life_rows(scaled).tolist() if i == 1]
    assert rows[:3] == [(15_000_000, LifeState.PROVISIONING), (25_000_000, LifeState.LOADING),
                        (35_000_000, LifeState.ACTIVE)]


def test_billing_is_exact(scaled):
    group = scaled.summary()["autoscale"]
    seconds = billed_seconds_by_hand(scaled)
    assert len(life_rows(scaled)) >= 3  # it scaled
    assert group["gpu_hours"] == pytest.approx(seconds / 3600, rel=1e-12)
    assert group["cost"] == pytest.approx(seconds / 3600 * 4.0, rel=1e-12)  # H100's default price
    assert group["billed_s"] == int(scaled.state.loop[0]["clock_us"]) / 1e6
    pool = group["pools"]["meta-llama/llama-3.1-8b-instruct"]
    assert pool["mean_instances"] == pytest.approx(seconds / group["billed_s"], rel=1e-12)
    assert pool["peak_instances"] == 3 and pool["max_instances"] == 3 and pool["autoscaled"]
    assert pool["scale_ups"] == 2 == group["scale_ups"]
    ticks = tick_log(scaled)
    assert group["scale_events"] == int((ticks["target"] != ticks["current"]).sum()) > 0
    assert billing(scaled) == (group["gpu_hours"], group["cost"])


def test_billing_counts_tp_and_the_given_price():
    """Two GPUs per instance at 3.5 per GPU-hour: twice the instance-hours, at that price."""
    result = blis_fast.simulate(**{**SCALED, "num_requests": 1200}, tp=2, cost_per_gpu_hour=3.5)
    group = result.summary()["autoscale"]
    seconds = billed_seconds_by_hand(result)
    assert group["gpu_hours"] == pytest.approx(2 * seconds / 3600, rel=1e-12)
    assert group["cost"] == pytest.approx(2 * seconds / 3600 * 3.5, rel=1e-12)


def test_the_group_only_with_an_autoscaler(scaled, unscaled):
    assert "autoscale" in scaled.summary()
    assert "autoscale" not in unscaled.summary() and unscaled.autoscale is None
    assert "gpu_hours" not in unscaled.evaluation_metrics  # (its tables as they were)
    assert list(unscaled.timeseries.cols) == list(COLUMNS)  # no lifecycle columns


def test_oscillator_triggers_the_oscillation_anomaly(oscillating, scaled):
    group = oscillating.summary()["autoscale"]
    ticks = tick_log(oscillating)
    events = ticks[ticks["target"] != ticks["current"]]
    direction = np.sign(events["target"] - events["current"])
    # window: stabilization_down_s is 0, so one interval (10 s): every reversal of consecutive events
    by_hand = int(((direction[1:] != direction[:-1]) & (np.diff(events["time_us"]) <= 10_000_000)).sum())
    assert group["scale_oscillations"] == by_hand > 0
    assert scale_oscillations(tick_log(scaled), timelines(scaled)[0]) == 0  # it only scales up


def test_objectives_accept_gpu_hours_and_cost(scaled, unscaled):
    assert default_direction("gpu_hours") == default_direction("cost") == "min"
    group = scaled.summary()["autoscale"]
    ev = scaled.evaluate("gpu_hours,cost")
    assert ev.metrics["gpu_hours"] == group["gpu_hours"] and ev.metrics["cost"] == group["cost"]
    assert 0 < ev.objectives["gpu_hours"] < 1
    # a run without an autoscaler: its instances billed for the whole run
    hours = 2 * int(unscaled.state.loop[0]["clock_us"]) / 3600e6
    assert metric_value(unscaled, "gpu_hours") == pytest.approx(hours, rel=1e-12)
    assert metric_value(unscaled, "cost") == pytest.approx(4.0 * hours, rel=1e-12)


def test_evaluate_command_takes_them(tmp_path):
    code, out, err = cli_in_process(*CLI_SCALED, "--objectives", "gpu_hours,cost:min:1", "--json")
    assert code == 0, err
    evaluation = json.loads(out)["evaluation"]
    assert set(evaluation["objectives"]) == {"gpu_hours", "cost"}
    assert evaluation["values"]["gpu_hours"] == json.loads(out)["autoscale"]["gpu_hours"]


def test_time_series_lifecycle_counts_within_bounds(scaled, oscillating):
    for result, lo, hi in ((scaled, 1, 3), (oscillating, 1, 4)):
        c = result.timeseries.cluster()
        held = sum(c[k] for k in ("provisioning", "loading_model", "warming", "active", "draining"))
        current = held - c["draining"]
        assert len(held) > 10 and (held <= hi).all() and (current >= lo).all() and (held >= 1).all()
        # the same counts as the lifecycle log gives at each sample time
        tl = timelines(result)[0]
        k = tl.at(c["time_us"])
        for j, name in enumerate(("provisioning", "loading_model", "warming", "active", "draining")):
            assert (c[name] == tl.counts[k, LifeState.PROVISIONING + j]).all(), name
    assert (oscillating.timeseries.cluster()["draining"] > 0).any()


def test_scale_tables_written_and_read_back(tmp_path):
    events, ticks = tmp_path / "events.parquet", tmp_path / "ticks.csv"
    code, out, err = cli_in_process(*CLI_SCALED, "--json", "--scale-events-out", events, "--scale-ticks-out", ticks)
    assert code == 0, err
    group = json.loads(out)["autoscale"]
    ev = pq.read_table(events).to_pydict()
    all_ticks = pacsv.read_csv(ticks).to_pydict()
    assert len(ev["time_s"]) == group["scale_events"] > 0
    assert len(all_ticks["time_s"]) == group["pools"]["meta-llama/llama-3.1-8b-instruct"]["ticks"]
    assert all(a != b for a, b in zip(ev["from_instances"], ev["to_instances"]))
    assert ev["act_time_s"] == [t + 15.0 for t in ev["time_s"]]  # the default metrics delay
    assert set(ev["reason"]) <= {"up", "down"}
    jsonl = tmp_path / "events.jsonl"
    assert cli_in_process(*CLI_SCALED, "--json", "--scale-events-out", jsonl)[0] == 0
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["to_instances"] for r in records] == ev["to_instances"]


def test_scale_tables_refused_without_an_autoscaler_or_format(tmp_path):
    assert_clean_error(*cli_in_process("run", "--num-requests", "5", "--scale-events-out", tmp_path / "e.csv"),
                       ("--scale-events-out", "needs an autoscaler"))
    assert_clean_error(*cli_in_process(*CLI_SCALED, "--scale-ticks-out", tmp_path / "t.txt"),
                       ("--scale-ticks-out", ".parquet"))
    assert not list(tmp_path.iterdir())


def test_summarize_trace_names_scaling_lag(scaled):
    text = scaled.summary_text()
    lag = [line for line in text.splitlines() if line.startswith("**Scaling lag**")]
    assert len(lag) == 1 and "arrived while instances were provisioning or loading" in lag[0]
    assert "Autoscaling: " in text


def test_under_and_over_provisioning_by_hand(scaled):
    """Both anomalies recomputed by a plain walk over the run (module docstring's definitions)."""
    group = scaled.summary()["autoscale"]
    tl = timelines(scaled)[0]
    reqs = scaled.reqs
    served = np.flatnonzero(reqs["instance"] >= 0)
    arrival = reqs["arrival_us"][served].tolist()
    # under: the at-max time inside each 10 s window where < 90 % of the arrivals kept their TTFT within the p90
    ttft = scaled.latencies["ttft_us"]
    firsts = sorted(ttft[scaled.latencies["has_first"]].tolist())
    p90 = firsts[-(-9 * len(firsts) // 10) - 1]
    met = [bool(scaled.latencies["has_first"][r]) and ttft[r] <= p90 for r in served.tolist()]
    edges = list(tl.times.tolist()) + [tl.end_us]
    at_max = (tl.current == 3).tolist()
    under = 0
    for w in range(tl.end_us // 10_000_000 + 1):
        lo, hi = w * 10_000_000, min((w + 1) * 10_000_000, tl.end_us)
        mine = [m for a, m in zip(arrival, met) if lo <= a < lo + 10_000_000]
        if mine and sum(mine) < 0.9 * len(mine):
            under += sum(max(0, min(edges[k + 1], hi) - max(edges[k], lo)) for k in range(len(at_max)) if at_max[k])
    assert group["under_provisioned_s"] == under / 1e6 > 0
    # over: above min with fewer requests in the system than ready instances
    leave = [int(reqs["last_token_us"][r]) if reqs["state"][r] == blis_fast.results.metrics.REQ_COMPLETED
             else tl.end_us for r in served.tolist()]
    cuts = sorted(t for t in set(edges) | set(arrival) | set(leave) if t <= tl.end_us)  # (billed time only)
    over = 0
    for a, b in zip(cuts, cuts[1:]):
        k = int(np.searchsorted(tl.times, a, side="right")) - 1
        in_system = sum(1 for x, y in zip(arrival, leave) if x <= a < y)
        if tl.current[k] > 1 and in_system < tl.ready[k]:
            over += b - a
    assert group["over_provisioned_s"] == over / 1e6


def test_decision_trace_has_scale_records(scaled, unscaled):
    trace = scaled.decision_table()
    records = trace["record"].to_pylist()
    scale = [k for k, r in enumerate(records) if r == "scale"]
    ticks = tick_log(scaled)
    assert len(scale) == len(ticks) > 0
    rows = trace.take(scale).to_pydict()
    assert rows["time_us"] == ticks["time_us"].tolist() and set(rows["request"]) == {None}
    assert rows["to_instances"] == ticks["target"].tolist()
    changed = ticks["target"] != ticks["current"]
    assert rows["act_time_us"] == [t + 5_000_000 if c else None for t, c in zip(ticks["time_us"].tolist(), changed)]
    times = trace["time_us"].to_numpy()
    assert (times[1:] >= times[:-1]).all()
    assert trace.num_rows - len(scale) > 0 and set(trace["pool"].to_pylist()[k] for k in range(trace.num_rows)
                                                    if records[k] != "scale") == {None}
    # a run without an autoscaler: no scale record, no scale column
    plain = unscaled.decision_table()
    assert plain.num_rows > 0 and "pool" not in plain.column_names and "scale" not in plain["record"].to_pylist()


def test_pd_pools_billed_apart():
    """A P/D deployment: each pool named by deployment and role, billed at its own GPU's
    price (prefill H100 4.0, decode A100 2.5)."""
    scale = {"interval_s": 5, "provisioning_delay_s": 5, "loading_delay_s": 5, "stabilization_down_s": 5}
    result = blis_fast.simulate(
        {"policy": {"autoscaler": "threshold", "autoscale_signal": "waiting", "autoscale_up": 1, "autoscale_down": 0.5},
         "deployments": [{"name": "llama", "model": "meta-llama/llama-3.1-8b-instruct",
                          "prefill": {"instances": 1, "max_instances": 3, "autoscale": scale},
                          "decode": {"instances": 2, "min_instances": 1, "max_instances": 4, "hardware": "A100",
                                     "autoscale": scale}}]}, rate=40, num_requests=1000, seed=5)
    group = result.summary()["autoscale"]
    assert list(group["pools"]) == ["llama.prefill", "llama.decode"]
    for k, (name, price) in enumerate((("llama.prefill", 4.0), ("llama.decode", 2.5))):
        pool = group["pools"][name]
        assert pool["role"] == name.split(".")[1] and pool["cost_per_gpu_hour"] == price
        assert pool["gpu_hours"] == pytest.approx(billed_seconds_by_hand(result, k) / 3600, rel=1e-12)
        assert pool["cost"] == pytest.approx(pool["gpu_hours"] * price, rel=1e-12)
    assert group["cost"] == pytest.approx(sum(p["cost"] for p in group["pools"].values()), rel=1e-12)


def test_a_gpu_without_a_price_has_no_cost(unscaled, monkeypatch):
    """(Every shipped GPU has a default price; one without gets a null cost, never a made-up one.)"""
    import blis_fast.results.autoscale as autoscale_results
    from blis_fast.errors import ConfigError

    monkeypatch.setattr(autoscale_results, "DEFAULT_COST_PER_GPU_HOUR", {})
    hours, cost = billing(unscaled)
    assert hours > 0 and cost is None
    with pytest.raises(ConfigError, match="cost: .*no default cost_per_gpu_hour"):
        metric_value(unscaled, "cost")


def test_scale_table_shares_no_file_with_another_output(tmp_path):
    same = tmp_path / "x.csv"
    assert_clean_error(*cli_in_process(*CLI_SCALED, "--per-request-out", same, "--scale-events-out", same),
                       ("--scale-events-out", "--per-request-out"))


def test_terminal_summary_has_an_autoscaling_line(oscillating, unscaled):
    import io

    from rich.console import Console

    from blis_fast.cli.output import render

    def shown(result):
        out = io.StringIO()
        render(result.summary(), console=Console(file=out, width=200))
        return [line for line in out.getvalue().splitlines() if line.startswith("autoscaling:")]

    group = oscillating.summary()["autoscale"]
    (line,) = shown(oscillating)
    assert f"{group['scale_events']} scale events" in line and f"oscillations {group['scale_oscillations']}" in line
    assert shown(unscaled) == []
