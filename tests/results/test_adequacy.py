"""Run adequacy (blis_fast.results.adequacy): a run too short for steady state, a saturated
one, one the horizon cut, and one that measures steady state; ``blis-fast run``'s warning
on stderr and the summary JSON's ``adequacy`` object."""

from __future__ import annotations

import json

import pytest

import blis_fast
from blis_fast.results.adequacy import MIN_SPAN_OVER_E2E, VERDICTS
from builders import run_cli

# llama-3.1-8b on H100 (the defaults), the chatbot preset, 4 instances: they complete about
# 340 req/s when offered more (measured with the tool: the saturated run below).
CHATBOT_4 = dict(workload="chatbot", num_instances=4)
CAPACITY_RPS = 340
FIELDS = ["verdict", "arrival_span_s", "e2e_p99_s", "span_over_e2e_p99", "transient_fraction", "in_flight_at_end",
          "backlog_growth", "arrival_rate_rps", "completion_rate_rps", "reasons"]


def chatbot_args(rate: float, n: int) -> list[str]:
    return ["run", "--workload", "chatbot", "--num-instances", "4", "--rate", str(rate), "--num-requests", str(n)]


def test_run_warns_on_100_requests_at_4x_capacity(capsys):
    code, out, err = run_cli(capsys, *chatbot_args(4 * CAPACITY_RPS, 100))
    assert code == 0, err
    adequacy = json.loads(out)["adequacy"]
    assert list(adequacy) == FIELDS
    assert adequacy["verdict"] == "too_short" and adequacy["span_over_e2e_p99"] < 1
    warnings = [line for line in err.splitlines() if line.startswith("blis-fast: warning:")]
    assert len(warnings) == 1, err
    assert "too short" in warnings[0] and "--num-requests" in warnings[0]
    # --quiet drops it; the JSON still carries the diagnosis
    code, out, err = run_cli(capsys, *chatbot_args(4 * CAPACITY_RPS, 100), "--quiet")
    assert code == 0 and "warning" not in err and json.loads(out)["adequacy"] == adequacy


def test_run_does_not_warn_on_20000_requests_at_half_capacity(capsys):
    code, out, err = run_cli(capsys, *chatbot_args(CAPACITY_RPS / 2, 20_000))
    assert code == 0, err
    assert "warning" not in err
    a = json.loads(out)["adequacy"]
    assert a["verdict"] == "ok" and a["reasons"] == []
    assert a["span_over_e2e_p99"] > MIN_SPAN_OVER_E2E and a["transient_fraction"] < 0.1
    assert abs(a["backlog_growth"]) < 0.05 and a["in_flight_at_end"] == 0
    assert a["completion_rate_rps"] == pytest.approx(a["arrival_rate_rps"], rel=0.05)


def test_a_saturated_run_reports_its_arrival_and_completion_rates():
    """Four times the capacity for 20,000 requests: the backlog grows by most of the
    arrivals; completions level off at the capacity."""
    a = blis_fast.simulate(rate=4 * CAPACITY_RPS, num_requests=20_000, **CHATBOT_4).adequacy
    assert a.verdict == "saturated" and a.backlog_growth > 0.5
    assert a.arrival_rate_rps == pytest.approx(4 * CAPACITY_RPS, rel=0.1)
    assert a.completion_rate_rps == pytest.approx(CAPACITY_RPS, rel=0.1)
    assert "saturated" in a.warning() and "completions" in a.warning()


def test_a_run_cut_by_the_horizon_is_unfinished():
    """Requests of ~13 s (2,000 output tokens) arriving until the horizon: more than 5 %
    of them are still running when it ends."""
    a = blis_fast.simulate(rate=4, num_requests=5000, horizon=200_000_000, output_tokens=2000, output_tokens_stdev=0,
                           output_tokens_min=2000, output_tokens_max=2000).adequacy
    assert a.verdict == "unfinished" and a.in_flight_at_end > 0.05 * a.arrived_requests
    assert "--horizon" in a.warning()


def test_every_verdict_is_json_ready_and_deterministic():
    runs = [blis_fast.simulate(num_requests=1), blis_fast.simulate(num_requests=50, rate=5, warmup_s=1, cooldown_s=1)]
    for r in runs:
        d = r.summary()["adequacy"]
        assert d["verdict"] in VERDICTS
        json.dumps(d, allow_nan=False)
        assert r.adequacy.to_dict() == d
    assert runs[0].adequacy.verdict == "too_short"  # one request: no span at all


def test_a_run_without_latencies_says_so_rather_than_asking_for_more_requests():
    rejected = blis_fast.simulate(num_requests=50, admission_policy="token-bucket", token_bucket_capacity=1,
                                  token_bucket_refill_rate=0.0001).adequacy
    assert rejected.verdict == "too_short" and rejected.e2e_p99_s is None
    assert "measured no latency" in rejected.warning() and "rejected" in rejected.warning()
    assert "--num-requests" not in rejected.warning()
    none_arrived = blis_fast.simulate(num_requests=10, horizon=1).adequacy
    assert none_arrived.arrived_requests == 0 and "no request arrived" in none_arrived.warning()
    # a remedy beyond what a run may hold names the rate instead
    huge = blis_fast.simulate(num_requests=2, rate=1e12).adequacy
    assert "a lower --rate" in huge.warning()
