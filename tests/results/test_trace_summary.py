"""TraceSummary (Result.summary_text, blis_fast.results.diagnosis): the key issue it names on
small workloads built to have one cause -- routing away from a shared prefix, a busiest-
instance router, a bursty tenant admitted, tiny KV caches -- and byte-identical text for
identical inputs."""

from __future__ import annotations

import re

import blis_fast
from blis_fast.results.diagnosis import diagnose
from blis_fast.results.objectives import metric_value
from tests.builders import write
from tests.run.test_counterfactual import shared_prefix_run


def first_issue(text: str) -> str:
    return re.search(r"^1\. \*\*(.+?)\*\*", text, re.M).group(1)


def focus(text: str) -> str:
    return text.split("## Suggested focus\n\n", 1)[1].splitlines()[0]


def test_shared_prefix_round_robin_names_routing_and_its_replay_is_faster():
    r = shared_prefix_run(routing_policy="round-robin", counterfactual_k=1)
    text = r.summary_text()
    assert first_issue(text) == "routing away from cached prefixes"
    assert focus(text).startswith("- routing:")
    # the counterfactual section carries the replay: the cached instance halves the TTFT
    (rep,) = r.counterfactuals
    line = next(ln for ln in text.splitlines() if ln.startswith("  - instance_0:"))
    assert f"TTFT {rep['alternatives'][0]['ttft_ms']:.1f} ms" in line
    assert rep["alternatives"][0]["ttft_ms"] < rep["baseline"]["ttft_ms"] / 2
    assert "request_1 at 0.500 s: chose instance_1" in text  # the worst decision, with context


def test_always_busiest_names_load_imbalance_in_routing():
    r = blis_fast.simulate(num_requests=120, rate=20, num_instances=3, workload="chatbot", prefix_tokens=256,
                           routing_policy="always-busiest", trace_level="decisions")
    text = r.summary_text()
    assert first_issue(text).startswith("load imbalance")
    assert focus(text).startswith("- routing:")


BURSTY_SPEC = {
    "seed": 3, "duration_s": 20, "slo_classes": {"interactive": {"ttft_ms": 300}},
    "clients": [
        {"name": "steady", "tenant": "good", "slo_class": "interactive", "rate": 4,
         "prompt_tokens": {"type": "constant", "value": 200}, "output_tokens": {"type": "constant", "value": 50}},
        {"name": "bursts", "tenant": "bad", "slo_class": "interactive",
         "arrival": {"type": "bursty", "burst_size": {"type": "constant", "value": 60},
                     "burst_interval_s": {"type": "constant", "value": 6}, "burst_gap_s": 0.002},
         "prompt_tokens": {"type": "constant", "value": 1500}, "output_tokens": {"type": "constant", "value": 100}},
    ],
}


def test_bursty_tenant_with_always_admit_names_admission(tmp_path):
    spec = write(tmp_path, "bursty.yaml", BURSTY_SPEC)
    r = blis_fast.simulate(workload_spec=str(spec), total_kv_blocks=8000)
    text = r.summary_text()
    assert first_issue(text) == "bursty tenant 'bad' admitted"
    # one client per tenant here: the client selector sees the same requests
    assert metric_value(r, "goodput_rps[client=steady]") == metric_value(r, "goodput_rps[tenant=good]") > 0
    assert focus(text).startswith("- admission: rate-limit tenant 'bad': --admission-policy token-bucket")
    # a token bucket sized as suggested pushes back: the detector no longer fires
    m = re.search(r"--token-bucket-refill-rate (\d+) --token-bucket-capacity (\d+)", text)
    limited = blis_fast.simulate(workload_spec=str(spec), total_kv_blocks=8000, admission_policy="token-bucket",
                                 token_bucket_refill_rate=float(m.group(1)), token_bucket_capacity=float(m.group(2)))
    assert "bursty_admitted" not in [i.key for i in diagnose(limited).issues]
    assert limited.evaluation_metrics["rejected_fraction"] > 0
    good = "slo_attainment[tenant=good]"
    assert metric_value(limited, good) > metric_value(r, good)  # and the steady tenant is protected


def test_tiny_kv_names_kv_pressure():
    r = blis_fast.simulate(num_requests=120, rate=20, total_kv_blocks=60, max_num_seqs=32)
    text = r.summary_text()
    assert first_issue(text) == "KV-cache pressure and preemptions"
    assert focus(text).startswith("- preemption / KV:")


def test_full_trace_names_head_of_line_blocking_from_the_scheduling_records():
    """One instance, prompts of 16..2000 tokens, 150 KV blocks, fcfs: long heads wait for
    blocks while short requests behind them would fit.  Only the scheduling records show it."""
    kw = dict(num_requests=120, rate=20, total_kv_blocks=150, max_num_seqs=32, prompt_tokens=400,
              prompt_tokens_stdev=600, prompt_tokens_min=16, prompt_tokens_max=2000, output_tokens=100)
    full = blis_fast.simulate(**kw, trace_level="full")
    text = full.summary_text()
    assert first_issue(text) == "head-of-line blocking"
    assert "(scheduling records)" in text and focus(text).startswith("- scheduler:")
    assert blis_fast.simulate(**kw, trace_level="full").summary_text() == text
    assert "head-of-line" not in blis_fast.simulate(**kw, trace_level="decisions").summary_text()


def test_summary_is_deterministic_compact_markdown():
    kw = dict(num_requests=150, rate=30, num_instances=3, workload="chatbot", prefix_tokens=128, total_kv_blocks=200,
              max_num_seqs=8, counterfactual_k=2, objectives="ttft_p99_ms:min:500,slo_attainment:max")
    a, b = blis_fast.simulate(**kw).summary_text(), blis_fast.simulate(**kw).summary_text()
    assert a == b
    assert 2000 <= len(a) <= 6000  # ~500-1500 tokens at ~4 characters per token
    for section in ("## Outcome", "## Key issues", "## Counterfactual analysis", "## Worst decisions",
                    "## Suggested focus"):
        assert section in a
    assert "| ttft_p99_ms (min) |" in a and "replayed:" in a
