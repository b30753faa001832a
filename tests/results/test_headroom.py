"""Headroom metrics (blis_fast.results.metrics.headroom) and honest labels: token-budget,
batch-slot and KV occupancy fall with the load while the step occupancy (busy_fraction)
stays near 1; their definitions against the summary's own counters; SLO attainment is
null where a class sets no targets and such a class is refused as an objective; the run
view's labels and evaluation line."""

from __future__ import annotations

import dataclasses

import pytest

import blis_fast
from blis_fast.errors import ConfigError
from blis_fast.results.metrics import HEADROOM_METRICS
from blis_fast.results.objectives import metric_value
from tests.builders import HAND_STEPS, lengths_workload, sim

# one H100 instance with the default workload completes ~42 requests/s at saturation
# (the batch-slot limit, max_num_seqs 256, binds first): 20 req/s is about half load
HALF_LOAD = dict(rate=20, num_requests=2000)


@pytest.fixture(scope="module")
def half_load():
    return blis_fast.simulate(**HALF_LOAD, num_instances=1)


def test_half_load_shows_headroom_while_steps_run_all_the_time(half_load):
    c = half_load.cluster
    assert c["busy_fraction"] > 0.95  # a step is running nearly all the time...
    for key in HEADROOM_METRICS:  # ...yet every step is far from full
        assert 0.0 < c[key] < 0.5, key
    assert c["token_budget_occupancy"] < 0.2


def test_saturation_fills_the_binding_limit():
    c = blis_fast.simulate(rate=400, num_requests=3000).cluster
    assert c["batch_slot_occupancy"] > 0.85  # the batch is full: no headroom left
    assert c["busy_fraction"] > 0.95


def test_definitions_against_the_summary_counters(half_load):
    c = half_load.cluster
    cfg = half_load.setup.config.engine
    tokens = c["prefill_tokens_computed"] + c["decode_tokens_computed"]
    assert c["token_budget_occupancy"] == pytest.approx(tokens / (c["steps"] * cfg.max_num_batched_tokens))
    assert c["batch_slot_occupancy"] == pytest.approx(c["mean_batch_size"] / cfg.max_num_seqs)
    assert c["kv_occupancy_mean"] == pytest.approx(half_load.evaluation_metrics["kv_utilization_mean"])
    inst = half_load.instances[0]
    for key in HEADROOM_METRICS:
        assert inst[key] == c[key]
        assert metric_value(half_load, f"{key}[instance=0]") == c[key]
        assert metric_value(half_load, key) == c[key]


def test_cluster_pools_the_instances_steps():
    r = blis_fast.simulate(rate=20, num_requests=300, num_instances=3)
    c, inst = r.cluster, r.instances
    budget = r.setup.config.engine.max_num_batched_tokens
    tokens = sum(s["prefill_tokens_computed"] + s["decode_tokens_computed"] for s in inst)
    assert c["token_budget_occupancy"] == pytest.approx(tokens / (budget * sum(s["steps"] for s in inst)))
    assert min(s["batch_slot_occupancy"] for s in inst) <= c["batch_slot_occupancy"] \
        <= max(s["batch_slot_occupancy"] for s in inst)


def test_no_steps_reads_zero_not_nan():
    r = blis_fast.simulate(rate=1, num_requests=1, num_instances=2)
    idle = [s for s in r.instances if s["steps"] == 0]
    assert idle and all(s[k] == 0.0 for s in idle for k in HEADROOM_METRICS)


def targets_run(targets: dict):
    """Four requests of two classes: fast (targets as given) and slow (none)."""
    wl = lengths_workload([0, 1_000_000, 2_000_000, 3_000_000], [100, 50, 100, 300], [1, 1, 1, 1],
                          tenant=[0, 0, 1, 1], slo_class=[1, 0, 0, 1])
    wl = dataclasses.replace(wl, names={"tenant": ["a", "b"], "slo_class": ["fast", "slow"]},
                             slo_targets=targets)
    return sim(wl, **HAND_STEPS, total_kv_blocks=1000)


def test_slo_attainment_is_null_without_targets():
    r = targets_run({"fast": {"ttft_ms": 1.5}, "slow": {}})
    classes = r.summary()["slo"]["slo_classes"]
    assert classes["fast"]["slo_attainment"] == 0.5
    assert classes["slow"]["slo_attainment"] is None and classes["slow"]["completed"] == 2
    tenants = r.summary()["slo"]["tenants"]
    assert tenants["a"]["slo_attainment"] is not None  # it has a request of the class with targets
    none = targets_run({}).summary()["slo"]
    assert all(g["slo_attainment"] is None for part in none.values() for g in part.values())


def test_an_objective_on_a_class_without_targets_is_refused():
    r = targets_run({"fast": {"ttft_ms": 1.5}, "slow": {"ttft_ms": None}})
    assert metric_value(r, "slo_attainment[class=fast]") == 0.5
    with pytest.raises(ConfigError) as exc:
        r.evaluate("slo_attainment[class=slow]:max")
    assert exc.value.field == "objectives.metric" and "sets no SLO targets" in str(exc.value)
    assert r.evaluate("slo_attainment:max").score == 0.75  # whole run: targetless classes count completions


def test_evaluation_values_beside_scores():
    r = blis_fast.simulate(rate=5, num_requests=30, objectives="ttft_p99_ms:min:1,slo_attainment:max")
    ev = r.summary()["evaluation"]
    assert ev["values"]["ttft_p99_ms"] == r.cluster["ttft_p99_ms"]
    assert ev["objectives"]["ttft_p99_ms"] == pytest.approx(1 / r.cluster["ttft_p99_ms"])
    assert ev["values"]["slo_attainment"] is None  # no SLO target in the workload: no attainment to show
    assert ev["objectives"]["slo_attainment"] == 1.0  # (its score counts completions: fitness stays defined)


def test_trace_summary_says_step_occupancy_and_no_targets():
    text = blis_fast.simulate(rate=10, num_requests=60, num_instances=2).summary_text()
    assert "step occupancy" in text and "token budget" in text and "utilization 0" not in text
    assert "SLO attainment - (no SLO targets" in text
    judged = targets_run({"fast": {"ttft_ms": 1.5}}).summary_text()
    assert "SLO attainment 0.75" in judged
