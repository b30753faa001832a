"""A P/D run's results (blis_fast/results/disaggregation.py, docs/semantics.md §13): the
per-request fields and TTFT parts, the ``disaggregation`` summary group, the time series'
pool column, head-of-line blocking within pools, the summary text; the policy bundle's
``routing.prefill`` and ``pd`` sections; batch evaluation of P/D scenarios."""

from __future__ import annotations

import numpy as np
import pytest

import blis_fast
from blis_fast.errors import ConfigError
from blis_fast_kernels.schema import RequestState
from builders import lengths_workload, run_cli

PD = dict(num_requests=300, rate=20.0, prefill_instances=1, decode_instances=2, seed=5)


@pytest.fixture(scope="module")
def pd_result():
    return blis_fast.simulate(**PD, trace_level="decisions", sample_interval_ms=500)


def test_a_monolithic_run_has_no_pd_fields_or_group():
    r = blis_fast.simulate(num_requests=50, num_instances=2, rate=20.0, sample_interval_ms=500)
    assert "disaggregation" not in r.summary() and r.disaggregation is None
    assert "disaggregated" not in r.request_records()[0]
    assert "pool" not in r.timeseries.columns()


def test_ttft_parts_add_up_to_each_disaggregated_requests_ttft(pd_result):
    records = pd_result.request_records()
    parts = ("routing_ms", "prefill_queue_ms", "prefill_compute_ms", "transfer_wait_ms", "transfer_ms",
             "decode_queue_ms", "first_decode_step_ms")
    dis = [rec for rec in records if rec["disaggregated"]]
    assert len(dis) > 200
    for rec in dis:
        assert rec["prefill_instance"] == "instance_0" and rec["decode_instance"] in ("instance_1", "instance_2")
        assert sum(rec[p] for p in parts) == pytest.approx(rec["ttft_ms"], abs=1e-6)
        assert rec["prefill_done_s"] <= rec["transfer_start_s"] < rec["transfer_end_s"] <= rec["decode_scheduled_s"]
    local = [rec for rec in records if not rec["disaggregated"]]
    for rec in local:  # (prompts under the default threshold stay on their decode instance)
        assert rec["prefill_instance"] is None and rec["transfer_ms"] is None
    assert len(dis) + len(local) == 300


def test_the_disaggregation_group_counts_what_the_requests_show(pd_result):
    g = pd_result.summary()["disaggregation"]
    records = pd_result.request_records()
    dis = sum(rec["disaggregated"] for rec in records)
    assert g["requests_disaggregated"] == dis and g["requests_routed"] == 300
    assert g["disaggregated_fraction"] == pytest.approx(dis / 300)
    assert g["transfers_completed"] == dis and g["dropped_at_decode"] == 0
    kv_per_token = 2 * 32 * 8 * 128 * 2  # llama-3.1-8b
    charged = pd_result.full_state.pd_reqs["charged_tokens"]
    assert g["bytes_transferred"] == int(charged.sum()) * kv_per_token
    transfer = [rec["transfer_ms"] for rec in records if rec["disaggregated"]]
    assert g["transfer_mean_ms"] == pytest.approx(np.mean(transfer))
    pools = g["pools"]
    assert set(pools) == {"meta-llama/llama-3.1-8b-instruct/prefill", "meta-llama/llama-3.1-8b-instruct/decode"}
    prefill, decode = pools.values()
    assert prefill["prefill_legs"] == dis and decode["transfers_received"] == dis and prefill["decode_tokens"] == 0


def test_time_series_name_each_instances_pool(pd_result):
    cols = pd_result.timeseries.columns()
    pools = {i: p for i, p in zip(cols["instance"].tolist(), cols["pool"].tolist())}
    assert pools == {0: "prefill", 1: "decode", 2: "decode", -1: None}
    assert pd_result.timeseries.table()["pool"].type == "string"


def test_head_of_line_blocking_compares_a_pools_instances_among_themselves(pd_result):
    inst = pd_result.state.inst
    mean_q = inst["sum_wq_len"] / np.maximum(inst["steps"], 1)
    assert mean_q[0] > 2 * mean_q.mean()  # (compared with every instance, the prefill one would count)
    assert pd_result.cluster["hol_blocking_instances"] == 0


def test_the_decision_trace_and_the_summary_text_describe_both_routings(pd_result):
    table = pd_result.decision_table()
    records = table["record"].to_pylist()
    assert records.count("routing") == 300
    assert records.count("prefill_routing") == pd_result.disaggregation["requests_disaggregated"]
    text = pd_result.evaluate(summarize=True).summary_text
    assert "Disaggregation:" in text and "-bound**" in text


def test_a_slow_link_makes_the_run_transfer_bound():
    r = blis_fast.simulate(**PD, pd_transfer_bandwidth_gbps=0.2)
    from blis_fast.results.trace_summary import pd_bound

    side, share = pd_bound(r.disaggregation)
    assert side == "transfer" and share > 0.5


# ----------------------------------------------------------------------------- policy bundles


def _bundle(**sections):
    return {"routing": {"type": "round-robin", **sections.pop("routing", {})}, **sections}


def test_a_bundles_decider_and_threshold_replace_the_deployments():
    never = blis_fast.simulate(**PD, policy=_bundle(pd={"decider": "never"}))
    assert never.disaggregation["requests_disaggregated"] == 0
    high = blis_fast.simulate(**PD, policy=_bundle(pd={"threshold": 10**6}))
    assert high.disaggregation["requests_disaggregated"] == 0
    always = blis_fast.simulate(**PD, pd_decider="never", policy=_bundle(pd={"decider": "always"}))
    assert always.disaggregation["requests_disaggregated"] == 300


def test_a_bundles_prefill_routing_routes_the_prefill_legs():
    kw = {**PD, "prefill_instances": 2}
    rr = blis_fast.simulate(**kw, policy=_bundle())
    busiest = blis_fast.simulate(**kw, policy=_bundle(routing={"prefill": "always-busiest"}))
    def legs(res):  # prefill legs per prefill instance (rows 0 and 1)
        p = res.full_state.pd_reqs["prefill_instance"]
        return np.bincount(p[p >= 0], minlength=2)

    legs_rr, legs_busiest = legs(rr), legs(busiest)
    assert abs(int(legs_rr[0]) - int(legs_rr[1])) <= 2  # round-robin shares them out
    assert max(legs_busiest) > 0.9 * legs_busiest.sum()  # the busiest takes nearly all
    # the decode routing is the bundle's round-robin in both
    dec = busiest.full_state.reqs["instance"][:300]
    assert set(np.unique(dec[busiest.full_state.pd_reqs["prefill_instance"] >= 0]).tolist()) == {2, 3}


@pytest.mark.parametrize("section, field", [({"pd": {"decider": "always"}}, "policy.pd_decider"),
                                            ({"routing": {"prefill": "least-loaded"}}, "policy.prefill_routing")])
def test_pd_policy_settings_without_pools_are_refused(section, field):
    with pytest.raises(ConfigError) as err:
        blis_fast.simulate(num_requests=20, num_instances=2, policy=_bundle(**section))
    assert err.value.field == field


def test_a_threshold_without_the_prefix_threshold_decider_is_refused():
    with pytest.raises(ConfigError) as err:
        blis_fast.simulate(**PD, pd_decider="always", policy=_bundle(pd={"threshold": 8}))
    assert err.value.field == "policy.pd_threshold" and "prefix-threshold" in err.value.message


@pytest.mark.parametrize("bad, where", [({"pd": {"decider": "sometimes"}}, "pd.decider"),
                                        ({"pd": {"threshold": -1}}, "pd.threshold"),
                                        ({"pd": {"speed": 1}}, "pd"),
                                        ({"routing": {"prefill": {"type": "nope"}}}, "routing.prefill.type")])
def test_bad_pd_bundle_sections_name_the_field(tmp_path, capsys, bad, where):
    import yaml

    path = tmp_path / "bundle.yaml"
    path.write_text(yaml.safe_dump(_bundle(**bad)))
    code, out, err = run_cli(capsys, "run", "--num-requests", "20", "--prefill-instances", "1", "--decode-instances",
                             "1", "--policy-config", path)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and where in lines[0], err


# ----------------------------------------------------------------------------- batch evaluation


def test_batch_evaluation_runs_each_pd_candidate_alone_and_searches_the_decider():
    from blis_fast.batch import Budget
    from blis_fast.batch.candidates import load_candidate
    from blis_fast.batch.evaluate import evaluate_prepared
    from blis_fast.batch.scenarios import Scenario, prepare
    from blis_fast.config.sim import build_config

    scenario = prepare(Scenario("pd", build_config({}, {**PD, "workload": "chatbot"})), "ttft_p99_ms:min")
    cands = [load_candidate(_bundle(pd={"decider": d}), d) for d in ("never", "always")]
    rows = [r.to_dict() for r in evaluate_prepared(cands, [scenario], Budget(max_wall_s=None), 1, cohorts=True)]
    alone = [blis_fast.simulate(**PD, workload="chatbot", policy=_bundle(pd={"decider": d})) for d in ("never", "always")]
    for row, res in zip(rows, alone):
        assert row["metrics"]["ttft_p99_ms"] == pytest.approx(res.cluster["ttft_p99_ms"])
    assert rows[0]["metrics"]["ttft_p99_ms"] != rows[1]["metrics"]["ttft_p99_ms"]


def test_a_request_completed_at_the_prefill_side_keeps_its_prefill_instance():
    wl = lengths_workload([0], [100], [1])
    r = blis_fast.simulate(workload=wl, prefill_instances=1, decode_instances=1, pd_decider="always",
                           pd_first_token="prefill")
    (rec,) = r.request_records()
    assert rec["state"] == "completed" and rec["disaggregated"] and rec["prefill_instance"] == "instance_0"
    assert rec["decode_instance"] is None and rec["transfer_start_s"] is None
    assert int(r.state.reqs[0]["state"]) == RequestState.COMPLETED
