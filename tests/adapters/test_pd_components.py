"""The adapters' fitness set on a P/D scenario: a candidate's ``pd`` component (the
decider, docs/policies.md) and ``routing.prefill`` change its runs like any other policy
section (blis_fast/adapters/core.py), with no framework installed."""

from __future__ import annotations

from blis_fast.adapters.core import SECTIONS, FitnessSet

PD_SCENARIO = [{"name": "pd", "seed": 3,
                "config": {"prefill_instances": 1, "decode_instances": 2, "workload": "chatbot", "rate": 40,
                           "num_requests": 150}}]


def test_the_pd_component_is_searched_like_the_other_sections():
    assert "pd" in SECTIONS
    fs = FitnessSet(PD_SCENARIO, objectives="ttft_p99_ms:min", workers=1)
    never = fs.run({"routing": "type: least-loaded", "pd": "decider: never"})[0]
    always = fs.run({"routing": "type: least-loaded", "pd": "decider: always"})[0]
    assert never.status == always.status == "ok"
    assert never.metrics["ttft_p99_ms"] != always.metrics["ttft_p99_ms"]
    assert never.policy_id != always.policy_id
    prefill = fs.run({"routing": "type: least-loaded\nparams: {prefill: always-busiest}"})[0]
    assert prefill.status == "ok" and prefill.policy_id not in (never.policy_id, always.policy_id)


def test_a_bad_pd_component_is_an_invalid_candidate_not_a_crash():
    fs = FitnessSet(PD_SCENARIO, objectives="ttft_p99_ms:min", workers=1)
    (row,) = fs.run({"pd": "decider: sometimes"})
    assert row.status != "ok" and "pd.decider" in row.message
