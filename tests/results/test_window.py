"""Warm-up and cool-down (simulation.warmup_s / cooldown_s, results.window): the request
statistics cover exactly the requests arriving in [first + warm-up, last - cool-down]."""

from __future__ import annotations

import numpy as np
import pytest

import blis_fast
from blis_fast.results.objectives import metric_value
from builders import expect_cli_error, pct, run_main

SPEC = """seed: 3
rate: 12
duration_s: 30
slo_classes:
  fast: {ttft_ms: 40}
  slow: {e2e_ms: 4000}
clients:
  - {name: a, slo_class: fast, rate_fraction: 0.5, prompt_tokens: {type: constant, value: 200},
     output_tokens: {type: constant, value: 60}}
  - {name: b, slo_class: slow, rate_fraction: 0.5, prompt_tokens: {type: constant, value: 900},
     output_tokens: {type: constant, value: 300}}
"""
RUN = dict(num_instances=2, max_num_seqs=8)


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("window") / "spec.yaml"
    path.write_text(SPEC)
    return str(path)


@pytest.fixture(scope="module")
def runs(spec):
    return (blis_fast.simulate(workload_spec=spec, **RUN),
            blis_fast.simulate(workload_spec=spec, warmup_s=5, cooldown_s=8, **RUN))


def test_statistics_cover_the_window_requests_only(runs):
    full, win = runs
    arrival = win.state.reqs["arrival_us"]
    lo, hi = int(arrival.min()) + 5_000_000, int(arrival.max()) - 8_000_000
    inside = (arrival >= lo) & (arrival <= hi)
    assert win.window == (lo, hi) and np.array_equal(win.in_window, inside)
    assert full.window is None and full.in_window is None and "window_start_s" not in full.cluster
    c = win.request_columns()
    done = inside & (c["e2e_us"] >= 0)
    cl = win.cluster
    assert cl["completed_requests"] == int(done.sum()) < full.cluster["completed_requests"]
    assert cl["arrived_requests"] == int(inside.sum()) and cl["still_in_flight"] == 0
    assert cl["ttft_p99_ms"] == pytest.approx(pct(c["ttft_us"][inside & (c["ttft_us"] >= 0)], 99))
    assert cl["e2e_mean_ms"] == pytest.approx(c["e2e_us"][done].mean() / 1e3)
    # rates: the requests whose last token is visible inside the window, over its span
    last = win.state.reqs["last_token_us"]
    finished = (c["e2e_us"] >= 0) & (last >= lo) & (last <= hi)
    assert np.array_equal(win.finished_in_window, finished)
    assert cl["responses_per_sec"] == pytest.approx(finished.sum() / ((hi - lo) / 1e6))
    assert (cl["window_start_s"], cl["window_end_s"]) == (lo / 1e6, hi / 1e6)
    # the whole run's engine counters are unchanged
    for key in ("engine_steps", "vllm_estimated_duration_s", "busy_fraction", "kv_peak_used_blocks"):
        assert cl[key] == full.cluster[key]
    assert sum(i["completed_requests"] for i in win.instances) == cl["completed_requests"]


def test_slo_attainment_and_evaluation_metrics_follow_the_window(runs):
    full, win = runs
    reqs = win.state.reqs
    names = win.workload.names["slo_class"]
    for k, name in enumerate(names):
        mask = win.in_window & (reqs["slo_class"] == k)
        assert win.slo["slo_classes"][name]["arrived"] == int(mask.sum())
        met = win.outcomes["met"] & mask
        assert metric_value(win, f"slo_attainment[class={name}]") == pytest.approx(met.sum() / mask.sum())
    assert metric_value(win, "arrived_requests") == int(win.in_window.sum())
    assert metric_value(win, "goodput_rps") == pytest.approx(
        int((win.outcomes["met"] & win.finished_in_window).sum()) / win.rate_duration_s)
    assert metric_value(full, "arrived_requests") == len(reqs)


def test_empty_window_is_refused(spec, capsys):
    with pytest.raises(blis_fast.ConfigError) as e:
        blis_fast.simulate(num_requests=50, warmup_s=1000)
    assert "warmup_s" in e.value.field and "no request" in e.value.message
    expect_cli_error(capsys, "run", "--num-requests", "50", "--rate", "10", "--cooldown-s", "20", "--warmup-s", "40",
                     needles=["--warmup-s", "no request"])
    expect_cli_error(capsys, "run", "--warmup-s", "-2", needles=["--warmup-s"])


def test_cli_window_flags(capsys):
    out = run_main(capsys, "--num-requests", "300", "--rate", "20", "--warmup-s", "2", "--cooldown-s", "1")
    c = out["cluster"]
    assert c["window_start_s"] >= 2 and c["completed_requests"] < 300
    assert out["run"]["config"]["simulation"]["warmup_s"] == 2


def test_windowed_throughput_levels_off_past_saturation():
    """An overloaded single server (M/D/1 at rho = 2): every request completes in the end,
    so completions / duration say little; during the window the server completes one
    request per service time (100 req/s), half the arrival rate."""
    from builders import ONE_TOKEN_PROMPTS, SINGLE_SERVER, constant_outputs

    r = blis_fast.simulate(**SINGLE_SERVER, beta_coeffs=[1000, 0, 0], rate=200, num_requests=2000,
                           warmup_s=1, cooldown_s=1, **ONE_TOKEN_PROMPTS, **constant_outputs(10))
    assert r.cluster["responses_per_sec"] == pytest.approx(100, rel=0.01)
    assert metric_value(r, "responses_per_sec") == pytest.approx(100, rel=0.01)
    assert r.cluster["completed_requests"] == r.cluster["arrived_requests"]  # every window request finished
