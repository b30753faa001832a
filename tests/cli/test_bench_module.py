"""blis_fast.experiments.bench: report structure, the text table, and ``blis-fast bench --json``.

Only the 1k scenario, one repeat, no start-up (fresh processes would compile); nothing
here asserts a wall time.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from blis_fast import ConfigError
from blis_fast.experiments import bench
from blis_fast.experiments.bench import (
    BASELINES,
    FIXED_RATE,
    NOT_DEFAULT,
    SANITY_METRICS,
    SATURATION_RPS_PER_INSTANCE,
    SCENARIOS,
    TARGET_LOAD,
    format_report,
    run_bench,
    scenario_overrides,
)
from builders import BOTH_WAYS, invoke


@pytest.fixture(scope="module")
def report():
    return run_bench(scenarios=["1k"], repeats=1, startup=False)


def test_report_structure(report):
    json.dumps(report, allow_nan=False)  # JSON-serializable as is
    assert {"cpu_count", "platform", "python", "numpy", "numba"} <= set(report["machine"])
    assert report["startup"] is None
    [sc] = report["scenarios"]
    assert sc["name"] == "1k"
    assert (sc["num_requests"], sc["num_instances"]) == (1_000, 1)
    assert len(sc["kernel_times_s"]) == 1
    assert sc["kernel_best_s"] == min(sc["kernel_times_s"]) > 0
    assert sc["kernel_median_s"] >= sc["kernel_best_s"]
    assert sc["requests_per_s"] == pytest.approx(sc["num_requests"] / sc["kernel_best_s"])
    assert sc["steps_per_s"] == pytest.approx(sc["steps"] / sc["kernel_best_s"])
    assert sc["events"] >= sc["steps"] > 0
    assert set(SANITY_METRICS) <= set(sc["metrics"])
    assert sc["metrics"]["completed_requests"] == 1_000
    assert sc["metrics"]["prefix_cache_hit_rate"] > 0  # the shared prefix is cached
    floor = sc["floor"]
    assert floor["requests"] == 1_000 and floor["steps"] > 0 and len(floor["times_s"]) == 1
    assert floor["best_s"] == min(floor["times_s"]) > 0
    assert sc["x_floor"] == pytest.approx(sc["kernel_best_s"] / floor["best_s"])


def test_format_report(report):
    text = format_report(report)
    lines = text.splitlines()
    assert any(line.startswith("1k ") for line in lines)
    assert "sim req/s" in text and "steps/s" in text
    assert "cold compile" not in text  # no start-up section without start-up figures
    assert "x floor" in text and "minimal continuous-batching loop" in text
    fake = {**report, "startup": {"command": "x", "cold_compile_s": 9.5, "cached_startup_s": 1.0,
                                  "cached_startup_times_s": [1.0], "first_call_s": 0.5}}
    text = format_report(fake)
    assert "cold compile" in text and "9.50" in text and "first simulate() call" in text
    # aligned: the header and every row of a table have the same width
    table = text.split("\n\n")[1].splitlines()[1:]  # minus the title line
    assert len({len(line) for line in table}) == 1


def test_scenario_rates_follow_the_calibration():
    for name, row in SCENARIOS.items():
        if name not in FIXED_RATE:
            assert row["rate"] == round(TARGET_LOAD * SATURATION_RPS_PER_INSTANCE * row["num_instances"], 1)


def test_reference_scenario_is_the_go_reference_shape():
    """100k-ref is `blis-fast run --num-requests 100000 --num-instances 16 --rate 480`:
    the distribution workload with its defaults (prompt and output Normal(512, 256) in [2, 7000])."""
    from blis_fast.config.sim import build_config
    from blis_fast.run import distribution_spec

    bench_cfg = build_config({}, scenario_overrides("100k-ref"))
    cli_cfg = build_config({}, {"num_requests": 100_000, "num_instances": 16, "rate": 480})
    spec = distribution_spec(bench_cfg)
    assert spec == distribution_spec(cli_cfg)
    assert (spec.prompt_tokens, spec.prompt_tokens_stdev, spec.prompt_tokens_min, spec.prompt_tokens_max) == (
        512, 256, 2, 7000)
    assert (spec.output_tokens, spec.output_tokens_stdev, spec.output_tokens_min, spec.output_tokens_max) == (
        512, 256, 2, 7000)
    assert spec.prefix_tokens == 0 and spec.rate == 480 and spec.num_requests == 100_000
    assert bench_cfg.deployment.num_instances == 16
    assert bench_cfg.simulation.workload_seed == cli_cfg.simulation.workload_seed


def test_kv_tier_scenarios_are_twins_on_the_study_spec():
    """100k-tiers is 100k-chat plus a CPU tier larger than the GPU cache (a smaller one
    would find nothing: docs/kv-tiers.md), both on the KV tiers study's spec, which replaces
    BASE's preset; the bench reports 100k-tiers against 100k-chat."""
    from blis_fast.config.sim import build_config

    chat, tiers = scenario_overrides("100k-chat"), scenario_overrides("100k-tiers")
    assert {k: v for k, v in tiers.items() if k != "kv_cpu_blocks"} == chat
    assert tiers["kv_cpu_blocks"] > chat["total_kv_blocks"]
    assert chat["workload_spec"].endswith("kv-tiers/long-chat.yaml")
    assert "workload" not in chat and "prefix_tokens" not in chat
    assert BASELINES["100k-tiers"] == "100k-chat"
    for overrides in (chat, tiers):
        cfg = build_config({}, overrides)
        assert cfg.workload.num_requests == 100_000 and cfg.deployment.num_instances == 16


def test_spec_scenarios_report_the_specs_offered_rate(monkeypatch):
    """A scenario on a workload spec (no "rate") runs, reports the spec's offered rate (every
    turn counted, x rate_scale) and its ratio to its twin: a small copy of the KV tier pair."""
    small = {"num_requests": 300, "num_instances": 4, "rate_scale": 1.0, "total_kv_blocks": 2000}
    monkeypatch.setitem(SCENARIOS, "small-chat", {**SCENARIOS["100k-chat"], **small})
    monkeypatch.setitem(SCENARIOS, "small-tiers", {**SCENARIOS["100k-tiers"], **small})
    monkeypatch.setitem(BASELINES, "small-tiers", "small-chat")
    report = run_bench(scenarios=["small-chat", "small-tiers"], repeats=1, startup=False)
    chat, tiers = report["scenarios"]
    assert chat["rate"] == tiers["rate"] == pytest.approx(2 * 8)  # 2 conversations/s x 8 turns (their mean)
    assert chat["metrics"]["completed_requests"] == tiers["metrics"]["completed_requests"] == 300
    assert tiers["relative_to"] == {"scenario": "small-chat",
                                    "ratio": round(tiers["kernel_best_s"] / chat["kernel_best_s"], 3)}
    assert tiers["metrics"]["prefix_cache_hit_rate"] > chat["metrics"]["prefix_cache_hit_rate"]


def test_diurnal_scenarios_are_twins_with_and_without_the_autoscaler(monkeypatch):
    """100k-diurnal-autoscale is 100k-diurnal (a fleet sized for the peak: its maximum) with
    the autoscaling study's threshold autoscaler (docs/autoscaling.md), on the study's
    day; the bench reports it against 100k-diurnal.  A small copy runs: it scales (fewer
    engine steps than the full fleet), every request completes."""
    from blis_fast.config.sim import build_config

    fixed, scaled = scenario_overrides("100k-diurnal"), scenario_overrides("100k-diurnal-autoscale")
    assert {k: v for k, v in fixed.items() if k != "num_instances"} == {
        k: v for k, v in scaled.items() if k in fixed and k != "num_instances"}
    assert fixed["num_instances"] == scaled["max_instances"] == 12 and scaled["autoscaler"] == "threshold"
    assert fixed["workload_spec"].endswith("autoscaling/diurnal-day.yaml")
    assert BASELINES["100k-diurnal-autoscale"] == "100k-diurnal"
    for overrides in (fixed, scaled):
        cfg = build_config({}, overrides)
        assert cfg.workload.num_requests == 100_000 and cfg.engine.tp == 4
    small = {"num_requests": 3000}
    monkeypatch.setitem(SCENARIOS, "small-diurnal", {**SCENARIOS["100k-diurnal"], **small})
    monkeypatch.setitem(SCENARIOS, "small-diurnal-autoscale", {**SCENARIOS["100k-diurnal-autoscale"], **small})
    monkeypatch.setitem(BASELINES, "small-diurnal-autoscale", "small-diurnal")
    report = run_bench(scenarios=["small-diurnal", "small-diurnal-autoscale"], repeats=1, startup=False)
    fixed_run, scaled_run = report["scenarios"]
    assert fixed_run["metrics"]["completed_requests"] == scaled_run["metrics"]["completed_requests"] == 3000
    assert scaled_run["steps"] < fixed_run["steps"]
    assert scaled_run["relative_to"]["scenario"] == "small-diurnal"


def test_overload_scenarios_are_twins_with_and_without_flow_control(monkeypatch):
    """100k-overload-flow is 100k-overload (overload.yaml's TTLs and retries at three times
    16 instances' capacity) with the utilization detector; the bench reports it against
    100k-overload.  A small copy runs although requests time out: a request may end
    completed or timed out (the bench's sanity check accepts both), and the gateway
    changes the run."""
    plain, flow = scenario_overrides("100k-overload"), scenario_overrides("100k-overload-flow")
    assert {k: v for k, v in flow.items() if k != "flow_control"} == plain
    assert flow["flow_control"] == "utilization" and "flow_control" not in plain
    assert plain["workload_spec"].endswith("flow-control/overload.yaml") and plain["num_instances"] == 16
    assert BASELINES["100k-overload-flow"] == "100k-overload"
    small = {"num_requests": 6000, "num_instances": 1, "rate_scale": 0.25}
    monkeypatch.setitem(SCENARIOS, "small-overload", {**SCENARIOS["100k-overload"], **small})
    monkeypatch.setitem(SCENARIOS, "small-overload-flow", {**SCENARIOS["100k-overload-flow"], **small})
    monkeypatch.setitem(BASELINES, "small-overload-flow", "small-overload")
    report = run_bench(scenarios=["small-overload", "small-overload-flow"], repeats=1, startup=False)
    plain_run, flow_run = report["scenarios"]
    for run in (plain_run, flow_run):
        assert 0 < run["metrics"]["completed_requests"] < 6000  # (some time out)
    assert plain_run["steps"] != flow_run["steps"]
    assert flow_run["relative_to"]["scenario"] == "small-overload"


def test_default_run_leaves_out_the_long_chat_pair(monkeypatch):
    """`blis-fast bench` without --scenarios runs every scenario but NOT_DEFAULT's (minutes)."""
    monkeypatch.setattr(bench, "bench_scenario", lambda name, repeats: {"name": name, "kernel_best_s": 1.0})
    monkeypatch.setattr(bench, "bench_batch", lambda name, *args: {"name": name})
    report = run_bench(repeats=1, startup=False)
    assert NOT_DEFAULT == {"100k-chat", "100k-tiers", "100k-diurnal", "100k-diurnal-autoscale", "100k-overload",
                           "100k-overload-flow", "100k-overload-flow-expr"}
    assert [r["name"] for r in report["scenarios"]] == [n for n in SCENARIOS if n not in NOT_DEFAULT]
    assert [r["name"] for r in report["batch"]] == ["batch-10k"]


def test_unknown_scenario_is_a_config_error():
    with pytest.raises(ConfigError, match="scenarios"):
        run_bench(scenarios=["nope"], repeats=1, startup=False)


@BOTH_WAYS
def test_cli_bench_json(mode, capsys):
    code, stdout, stderr = invoke(mode, capsys, "bench", "--json", "--scenarios", "1k", "--repeats", "1", "--no-startup")
    assert code == 0, stderr
    out = json.loads(stdout)
    assert [s["name"] for s in out["scenarios"]] == ["1k"]
    assert out["startup"] is None


# ----------------------------------------------------------------------------- the floor kernel


def _floor(arrival, prompt, output, instances=1, seqs=2, budget=8, beta=(1000.0, 10.0, 100.0)):
    from blis_fast.experiments.bench import run_floor

    inputs = {"arrival_us": np.array(arrival, np.int64), "prompt_len": np.array(prompt, np.int64),
              "output_len": np.array(output, np.int64), "num_instances": instances, "max_num_seqs": seqs,
              "token_budget": budget, "beta0": beta[0], "beta1": beta[1], "beta2": beta[2]}
    steps, first, last = run_floor(inputs)
    return steps, first.tolist(), last.tolist()


def test_floor_kernel_by_hand():
    """One instance, max_num_seqs 2, budget 8 tokens, step = 1000 + 10·P + 100·D µs.
    r0 (t=0, L=4, N=2), r1 (t=0, L=6, N=1), r2 (t=500, L=3, N=3):
      step 1 @0:    admit r0 (4 tokens) and r1 (4 of 6): P=8        -> 1080; r0 first token
      step 2 @1080: r0 decodes, r1 finishes its prefill (2): P=2 D=1 -> 2200; r0 and r1 done
                    (r2 arrived at 500 but the batch was full)
      step 3 @2200: admit r2 (3): P=3                             -> 3230; r2 first token
      step 4 @3230: D=1 -> 4330;  step 5 @4330: D=1 -> 5430; r2 done"""
    steps, first, last = _floor([0, 0, 500], [4, 6, 3], [2, 1, 3])
    assert steps == 5
    assert first == [1080, 2200, 3230]
    assert last == [2200, 2200, 5430]


def test_floor_kernel_idle_gap_budget_and_instances():
    """Two instances get requests alternately; an idle instance waits for its next arrival;
    a budget-limited step leaves the last running requests without work; N = 0 counts as 1."""
    # instance 0: r0 (t=0, L=10, N=1), r2 (t=50000, L=1, N=0); instance 1: r1 (t=10, L=2, N=2)
    steps, first, last = _floor([0, 10, 50000], [10, 2, 1], [1, 2, 0], instances=2, seqs=4, budget=4)
    # inst 0: r0 prefill 4+4+2 tokens: 1040, 2080, 3100 (first = last = 3100); idle until 50000:
    #         r2: P=1 -> 51010
    # inst 1: starts at 10: r1 P=2 -> 1030; decode D=1 -> 2130
    assert steps == 3 + 1 + 2
    assert first == [3100, 1030, 51010]
    assert last == [3100, 2130, 51010]
    # budget 1 with two decodes: only the first in admission order advances each step
    steps, first, last = _floor([0, 0], [1, 1], [3, 3], seqs=2, budget=1, beta=(100.0, 0.0, 1.0))
    # step 1: admit r0 only (budget 1): 100; step 2: r0 decodes (101) -> 201; the pass stops
    # at B = 0, so r1 waits in the queue (batch has room but no budget) ...
    assert first[0] == 100 and last[0] == 302  # r0: tokens at 100, 201, 302
    assert first[1] == 402 and last[1] == 604  # then r1: 402 (P=1), 503, 604
    assert steps == 6
