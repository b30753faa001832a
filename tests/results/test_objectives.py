"""Objectives, evaluation metrics and EvaluationResult (blis_fast.results.objectives,
scorecard, evaluation): hand-computed goodput / attainment / Jain, monotone documented
normalization, parsing and errors, deterministic evaluation documents, the CLI flags."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import blis_fast
from hypothesis import given, settings
from hypothesis import strategies as hs

from blis_fast.errors import ConfigError
from blis_fast.results.evaluation import EvaluationResult
from blis_fast.results.objectives import Objective, metric_value, parse_objectives, score
from blis_fast.results.scorecard import jain_index
from tests.builders import HAND_STEPS, expect_cli_error, lengths_workload, run_cli, sim


def test_jain_index_hand_values():
    assert jain_index([5, 5, 5]) == 1.0
    assert jain_index([9, 0, 0]) == pytest.approx(1 / 3)
    assert jain_index([1, 3]) == pytest.approx(16 / 20)
    assert jain_index([]) == jain_index([7]) == jain_index([0, 0]) == 1.0


def hand_run(lens=(100, 50, 100, 300), **kw):
    """One instance, requests far apart (no interference), blackbox steps of 1000 + 10 per
    prefill token µs, one output token each: TTFT = E2E = 1 ms + 10 µs · L.
    tenant a: L=100 (2 ms, class slow: met), L=50 (1.5 ms, class fast: met);
    tenant b: L=100 (2 ms, class fast: missed), L=300 (4 ms, class slow: met)."""
    wl = lengths_workload([0, 1_000_000, 2_000_000, 3_000_000], list(lens), [1, 1, 1, 1],
                          tenant=[0, 0, 1, 1], slo_class=[1, 0, 0, 1])
    wl = dataclasses.replace(wl, names={"tenant": ["a", "b"], "slo_class": ["fast", "slow"]},
                             slo_targets={"fast": {"ttft_ms": 1.5}, "slow": {"ttft_ms": 5.0}})
    return sim(wl, **HAND_STEPS, total_kv_blocks=1000, **kw)


def test_goodput_attainment_and_fairness_are_exact_on_a_hand_case():
    r = hand_run()
    m = r.evaluation_metrics
    dur = 3.004  # last step ends at 3 s + 1000 + 10·300 µs
    assert m["simulated_duration_s"] == pytest.approx(dur)
    assert m["slo_met_requests"] == 3 and m["slo_attainment"] == 0.75
    assert m["goodput_rps"] == pytest.approx(3 / dur)
    assert m["jain_fairness"] == pytest.approx(9 / (2 * 5))  # goodput 2/dur vs 1/dur
    assert m["jain_fairness_throughput"] == pytest.approx(1.0)  # 2 completed each
    assert m["rejected_fraction"] == 0.0 and m["preemption_rate"] == 0.0
    assert metric_value(r, "slo_attainment[class=fast]") == 0.5
    assert metric_value(r, "slo_attainment[class=slow]") == 1.0
    assert metric_value(r, "goodput_rps[tenant=b]") == pytest.approx(1 / dur)
    assert metric_value(r, "ttft_p50_ms[tenant=a]") == pytest.approx(1.75)
    assert metric_value(r, "ttft_mean_ms[class=slow]") == pytest.approx(3.0)
    assert metric_value(r, "utilization[instance=0]") == pytest.approx((2000 + 1500 + 2000 + 4000) / 3_004_000)
    assert m["utilization_imbalance"] == 1.0
    # one tenant taking everything: Jain = 1/n
    only_a = hand_run((100, 50, 5000, 6000), admission_policy="token-bucket", token_bucket_capacity=1000,
                      token_bucket_refill_rate=0).evaluation_metrics
    assert only_a["rejected_fraction"] == 0.5 and only_a["jain_fairness"] == pytest.approx(0.5)


def test_unknown_groups_and_metrics_name_the_choices():
    r = hand_run()
    with pytest.raises(ConfigError, match="tenants: a, b"):
        metric_value(r, "goodput_rps[tenant=zed]")
    with pytest.raises(ConfigError, match="instances: 0"):
        metric_value(r, "utilization[instance=3]")
    with pytest.raises(ConfigError, match=r"unknown metric for \[class=...\] 'jain_fairness'"):
        parse_objectives("jain_fairness[class=fast]")


def test_parse_objectives_forms_and_defaults():
    objs = parse_objectives("ttft_p99_ms:min:200, slo_attainment[class=a,b]:max::2 ,goodput_rps")
    assert [(o.metric, o.direction, o.target, o.weight) for o in objs] == [
        ("ttft_p99_ms", "min", 200.0, 1.0), ("slo_attainment[class=a,b]", "max", None, 2.0),
        ("goodput_rps", "max", None, 1.0)]
    assert parse_objectives("rejected_fraction")[0].direction == "min"  # less is better by default
    assert parse_objectives([{"metric": "e2e_p99_ms", "target": 1000}])[0] == Objective("e2e_p99_ms", "min", 1000.0)
    assert [o.metric for o in parse_objectives(None)] == ["slo_attainment", "goodput_rps", "ttft_p99_ms", "e2e_p99_ms"]


@pytest.mark.parametrize("spec, needle", [
    ("ttft_p99_ms:up", "must be min or max"),
    ("ttft_p99_ms:min:-1", "target"),
    ("ttft_p99_ms:min:1:0", "weight > 0"),
    ("a:b:c:d:e", "expected metric"),
    ("ttft_p99_ms,ttft_p99_ms", "appears twice"),
    ("ttft_p99_ms[zone=x]", "unknown selector"),
    ("", "needs at least one"),
    ([{"metric": "ttft_p99_ms", "wieght": 2}], "unknown key"),
    ([{"metric": "ttft_p99_ms", "scale": 0}], "scale"),
])
def test_bad_objectives_are_one_line_config_errors(spec, needle):
    with pytest.raises(ConfigError, match=needle) as exc:
        parse_objectives(spec)
    assert "\n" not in str(exc.value)


KINDS = ["ttft_p99_ms", "slo_attainment", "goodput_rps", "queue_depth_mean", "rejected_fraction", "tokens_per_sec"]


@settings(max_examples=60, deadline=None)
@given(metric=hs.sampled_from(KINDS), direction=hs.sampled_from(["min", "max"]),
       target=hs.none() | hs.floats(0, 1e4, allow_subnormal=False),
       values=hs.lists(hs.floats(0, 1e6, allow_subnormal=False), min_size=2, max_size=8))
def test_normalization_is_monotone_bounded_and_one_iff_target_met(metric, direction, target, values):
    o = Objective(metric, direction, target)
    vs = sorted(values)
    s = [o.normalize(v) for v in vs]
    assert all(0.0 <= x <= 1.0 for x in s)
    diffs = np.diff(s)
    assert (diffs >= -1e-12).all() if direction == "max" else (diffs <= 1e-12).all()
    if target is not None:
        for v, x in zip(vs, s):
            if o.met(v):
                assert x == 1.0
            elif abs(v - target) > 1e-6 * max(target, 1.0):  # clearly missed (float resolution aside)
                assert x < 1.0


def test_score_is_the_weighted_mean_and_evaluation_is_deterministic():
    a, b = hand_run(), hand_run()
    spec = "slo_attainment:max::3,ttft_p99_ms:min:2"
    total, vec = score(a, spec)
    assert vec["slo_attainment"] == 0.75
    assert vec["ttft_p99_ms"] == pytest.approx(2 / a.evaluation_metrics["ttft_p99_ms"])
    assert total == pytest.approx((3 * 0.75 + vec["ttft_p99_ms"]) / 4)
    ea, eb = a.evaluate(spec), b.evaluate(spec)
    assert ea.to_json() == eb.to_json() and "wall_time_s" not in ea.to_dict()
    assert ea.to_dict(include_wall_time=True)["wall_time_s"] > 0
    assert ea.score == total and ea.details[0]["met"] is None and ea.details[1]["met"] is False
    assert ea.status == "ok" and ea.seed == 42 and len(ea.policy_id) == len(ea.workload_id) == 16
    json.loads(ea.to_json())
    other = hand_run(routing_policy="least-loaded").evaluate(spec)
    assert other.policy_id != ea.policy_id and other.workload_id == ea.workload_id
    assert EvaluationResult.failed("timeout", "took too long").to_dict()["score"] == 0.0


def test_config_objectives_feed_evaluate_and_the_summary():
    r = sim(num_requests=20, objectives="ttft_p99_ms:min:50,goodput_rps:max")
    assert r.evaluate().objectives.keys() == {"ttft_p99_ms", "goodput_rps"}
    # the YAML form: a list of mappings under objectives:
    y = blis_fast.simulate({"objectives": [{"metric": "ttft_p99_ms", "target": 50}, {"metric": "goodput_rps"}],
                            "workload": {"num_requests": 20}})
    assert y.evaluate().to_json() == r.evaluate().to_json()
    with pytest.raises(ConfigError, match=r"^objectives\[1\]\.direction"):
        blis_fast.simulate({"objectives": [{"metric": "ttft_p99_ms"}, {"metric": "e2e_p99_ms", "direction": "up"}]})
    assert r.summary()["evaluation"]["score"] == r.evaluate().score
    assert "evaluation" not in sim(num_requests=20).summary()


def test_cli_evaluation_out_and_bad_objectives(tmp_path, capsys):
    out = tmp_path / "ev.json"
    code, stdout, err = run_cli(capsys, "run", "--num-requests", "20", "--objectives", "e2e_p99_ms:min:100000",
                                "--evaluation-out", out)
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["objectives"] == {"e2e_p99_ms": 1.0} and doc["score"] == 1.0 and "wall_time_s" not in doc
    first = out.read_bytes()
    run_cli(capsys, "run", "--num-requests", "20", "--objectives", "e2e_p99_ms:min:100000", "--evaluation-out", out)
    assert out.read_bytes() == first
    expect_cli_error(capsys, "run", "--objectives", "ttft_p99_ms:sideways", needles=("--objectives", "min or max"))


def test_known_metric_names_are_exactly_what_a_run_reports():
    from blis_fast.results.scorecard import (AUTOSCALE_METRICS, FLOW_METRICS, GROUP_METRICS, INSTANCE_METRICS,
                                             TIER_METRICS, group_metrics, instance_metrics, known_metrics)

    r = hand_run()
    overall, group, instance = known_metrics()
    # (without KV tiers, an autoscaler or flow control their metrics are computed when asked)
    overall = set(overall) - set(FLOW_METRICS)  # (a flow run's: tests/results/test_flow_results.py)
    assert overall - set(TIER_METRICS) - set(AUTOSCALE_METRICS) == set(r.evaluation_metrics)
    assert overall - set(AUTOSCALE_METRICS) == set(hand_run(kv_cpu_blocks=100).evaluation_metrics)
    scaled = hand_run(num_instances=1, max_instances=2, autoscaler="threshold", autoscale_signal="waiting",
                      autoscale_up=2, autoscale_down=0.5)
    assert overall - set(TIER_METRICS) == set(scaled.evaluation_metrics)
    assert set(group) == set(GROUP_METRICS) == set(group_metrics(r, None))
    assert set(instance) == set(INSTANCE_METRICS) == set(instance_metrics(r, np.array([0])))


def test_latency_with_nothing_measured_gets_no_credit():
    """Rejecting everything must not look fast: a latency statistic over no samples scores 0."""
    spec = "ttft_p99_ms:min:1000,e2e_p99_ms:min,ttft_p99_ms[class=fast]:min"
    nothing = hand_run(admission_policy="reject-all").evaluate(spec)
    assert nothing.metrics["ttft_p99_ms"] == 0.0 and nothing.score == 0.0
    assert [d["met"] for d in nothing.details] == [False, None, None]
    served = hand_run().evaluate(spec)
    assert served.score > 0.9 and served.details[0]["met"] is True
