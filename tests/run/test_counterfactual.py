"""Exact counterfactual replay (blis_fast.run.counterfactual): a replay resumed from a copied
state equals a full run with that single routing decision forced; replays of a request
routed away from its cached prefix show the cached alternative's lower TTFT."""

from __future__ import annotations

import json

import pytest

import blis_fast
from blis_fast.run.counterfactual import forced_session, replay_worst_decisions, replays, worst_decisions
from tests.builders import lengths_workload

LOADED = dict(num_requests=100, rate=40, num_instances=3, workload="chatbot", prefix_tokens=128, total_kv_blocks=150,
              max_num_seqs=8, seed=5, trace_level="decisions")


def test_replay_equals_a_full_run_with_that_decision_forced():
    base = blis_fast.simulate(**LOADED)
    rows = worst_decisions(base, 1)
    seen = 0
    for row, j, replayed in replays(base, rows.tolist()):
        r = int(base.state.route_log["request"][row])
        full = forced_session(base, r, j).run().finish()
        assert replayed.state.reqs["instance"][r] == j
        assert replayed.results_json() == full.results_json()
        seen += 1
    assert seen == LOADED["num_instances"] - 1


def test_replays_are_deterministic_and_reported_with_objectives():
    a = blis_fast.simulate(**LOADED, counterfactual_k=1)
    b = blis_fast.simulate(**LOADED, counterfactual_k=1)
    assert json.dumps(a.counterfactuals) == json.dumps(b.counterfactuals)
    (rep,) = a.counterfactuals
    assert rep["estimated_regret_ms"] > 0 and len(rep["alternatives"]) == 2
    assert rep["baseline"]["instance"] == rep["chosen_instance"]
    assert {alt["instance"] for alt in rep["alternatives"]} | {rep["chosen_instance"]} == {0, 1, 2}
    assert set(rep["baseline"]["objectives"]) == {"slo_attainment", "goodput_rps", "ttft_p99_ms", "e2e_p99_ms"}
    assert a.evaluate().to_dict()["counterfactuals"] == a.counterfactuals
    assert a.summary()["counterfactuals"] == a.counterfactuals


def shared_prefix_run(**kw):
    """Two idle instances, requests 0.5 s apart sharing a 1024-token prefix: round-robin
    sends request 1 to the instance without the prefix."""
    prefix = list(range(1, 1025))
    wl = lengths_workload([500_000 * i for i in range(8)], [1100] * 8, [4] * 8, prefixes=[prefix] * 8)
    return blis_fast.simulate(workload=wl, num_instances=2, total_kv_blocks=2000, trace_level="decisions", **kw)


def test_replay_of_a_request_routed_away_from_its_prefix_shows_the_cached_alternative_faster():
    base = shared_prefix_run(routing_policy="round-robin")
    (rep,) = replay_worst_decisions(base, 1)
    assert rep["request"] == 1 and rep["chosen_instance"] == 1
    (alt,) = rep["alternatives"]
    assert alt["instance"] == 0
    assert alt["ttft_ms"] < rep["baseline"]["ttft_ms"] / 2  # 64 cached blocks of 68


def test_counterfactual_k_needs_and_implies_the_trace():
    from blis_fast.errors import ConfigError

    r = blis_fast.simulate(num_requests=30, num_instances=2, counterfactual_k=1)
    assert len(r.counterfactuals) == 1 and int(r.state.settings[0]["trace_level"]) == 1
    with pytest.raises(ConfigError, match="counterfactual.k: needs the decision trace"):
        blis_fast.simulate(num_requests=30, counterfactual_k=1, trace_level="none")
