"""Flow control per served model (``flow_control.per_model`` in a bundle, ``policy.flow_per_model``
in a run config or the API): each model's detector and parameters reach the kernel
(``State.flow_kind`` / ``flow_param``), a model without one keeps no gateway queue, and bad
entries are refused naming the entry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

import blis_fast
from blis_fast.config.policy import bundle_to_settings
from blis_fast.config.sim import build_config
from blis_fast.errors import ConfigError
from blis_fast_kernels import schema as S

ROOT = Path(__file__).resolve().parents[2]
LLAMA, QWEN = "meta-llama/llama-3.1-8b-instruct", "qwen/qwen2.5-7b-instruct"


def two_models(rate_scale: float = 4.0) -> dict:
    cfg = yaml.safe_load((ROOT / "configs/examples/two-models.yaml").read_text())
    cfg["workload"] = {"spec_filepath": str(ROOT / "configs/workloads/two-models.yaml"), "rate_scale": rate_scale}
    return cfg


def run(policy: dict, n: int = 300):
    return blis_fast.simulate({**two_models(), "policy": policy}, num_requests=n)


def test_a_models_own_detector_and_parameters_reach_the_kernel():
    r = run({"flow_per_model": {QWEN: {"policy": "concurrency", "params": {"concurrency_limit": 2}}}})
    st = r.state
    assert st.flow_kind.tolist() == [S.FlowDetector.NEVER, S.FlowDetector.CONCURRENCY]
    assert st.flow_param[1, S.FlowParam.CONCURRENCY_LIMIT] == 2
    assert int(st.settings[0]["flow"]) == 1
    qwen = st.reqs["model"] == 1
    # only the qwen requests ever waited in a gateway queue; llama's went straight to routing
    waited = st.flow_reqs["gw_enter_us"] >= 0
    assert waited[qwen].any() and not waited[~qwen].any()
    assert int(st.flow_models[0]["peak"]) == 0 and int(st.flow_models[1]["peak"]) > 0


def test_the_run_wide_detector_applies_to_the_models_without_their_own():
    r = run({"flow_control": "utilization", "flow_per_model": {QWEN: {"policy": "free-slot"}}})
    assert r.state.flow_kind.tolist() == [S.FlowDetector.UTILIZATION, S.FlowDetector.FREE_SLOT]
    assert r.state.flow_param[0, S.FlowParam.QUEUE_THRESHOLD] == 5.0  # the run-wide detector's default


def test_per_model_changes_the_run_and_its_policy_id():
    base = run({})
    limited = run({"flow_per_model": {QWEN: {"policy": "concurrency", "params": {"concurrency_limit": 2}}}})
    assert not np.array_equal(base.request_columns()["e2e_us"], limited.request_columns()["e2e_us"])
    assert base.evaluate().policy_id != limited.evaluate().policy_id


def test_a_bundle_section_with_per_model_only_keeps_the_run_wide_one_never():
    settings = bundle_to_settings({"flow_control": {"per_model": {QWEN: {"policy": "free-slot", "fairness": "round-robin"}}}})
    assert settings["flow_control"] == "never"
    assert settings["flow_per_model"] == {QWEN: {"policy": "free-slot", "params": {"fairness": "round-robin"}}}
    cfg = build_config(two_models(), policy_settings=settings)
    assert cfg.policy.flow_per_model[QWEN]["policy"] == "free-slot"
    # the config as a dict reads back to the same policy (results JSON round trip)
    assert build_config(cfg.to_dict()).policy.flow_per_model == cfg.policy.flow_per_model


@pytest.mark.parametrize("entry, field", [
    ({"nope/model": {"policy": "free-slot"}}, "policy.flow_per_model.nope/model"),
    ({QWEN: {"policy": "free-slot", "params": {"kv_threshold": 0.5}}}, "kv_threshold"),
    ({QWEN: {"policy": "concurrency", "params": {"concurrency_limit": 0}}}, "concurrency_limit"),
    ({QWEN: {"policy": "sometimes"}}, "policy"),
    ({QWEN: {"policy": "free-slot", "params": {"dispatch_order": "priority"}}}, "dispatch_order"),
])
def test_bad_entries_are_refused_naming_them(entry, field):
    with pytest.raises(ConfigError) as exc:
        blis_fast.simulate({**two_models(), "policy": {"flow_per_model": entry}}, num_requests=5)
    assert field in str(exc.value) and "\n" not in str(exc.value)
