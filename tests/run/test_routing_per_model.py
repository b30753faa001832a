"""Routing per model (docs/policies.md "Routing per model"): a policy bundle's
``routing.per_model`` gives some served models their own routing policy; each request is
routed by its model's (``State.routing_kind`` / ``routing_param``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import yaml

from blis_fast.config.policy import PolicyConfig, bundle_to_settings
from blis_fast.config.sim import build_config
from blis_fast.errors import ConfigError
from blis_fast.policy import compile_policies
from blis_fast.results import Result
from blis_fast.results.evaluation import evaluate
from blis_fast_kernels.schema import RoutingKind
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process
from tests.run.test_deployments_engine import LLAMA, QWEN, run, two_models

PER_MODEL = {LLAMA: {"type": "round-robin"}, QWEN: {"type": "least-loaded"}}


def with_policy(cfg, **policy):
    return replace(cfg, policy=replace(cfg.policy, **policy))


def test_each_model_is_routed_as_alone_with_its_policy(tmp_path):
    """Model A round-robin, model B least-loaded (the default always-busiest applies to
    neither): each model's requests go to the same instance, at the same times, as in a
    run of its deployment alone with that policy."""
    both_cfg = with_policy(two_models(tmp_path, duration_s=20), routing="always-busiest",
                           routing_per_model=PER_MODEL)
    setup, wl, st = run(both_cfg)
    assert list(st.routing_kind) == [RoutingKind.ROUND_ROBIN, RoutingKind.LEAST_LOADED]
    both = Result(setup, wl, st).request_columns()
    for k, (dep, routing) in enumerate(zip(setup.deployments, ("round-robin", "least-loaded"))):
        mine = wl.model == k
        alone_cfg = with_policy(two_models(tmp_path, clients=[k], deployments=[k], duration_s=20), routing=routing)
        a_setup, a_wl, a_st = run(alone_cfg)
        alone = Result(a_setup, a_wl, a_st).request_columns()
        assert len(a_wl) == int(mine.sum()) > 0
        assert np.array_equal(both["instance"][mine] - dep.first_instance, alone["instance"]), dep.name
        for col in ("ttft_us", "e2e_us", "completion_us"):
            assert np.array_equal(both[col][mine], alone[col]), (dep.name, col)
    # the runs differ from the default's (always-busiest piles requests onto one instance)
    d_setup, d_wl, d_st = run(with_policy(both_cfg, routing_per_model=None))
    assert not np.array_equal(d_st.reqs["instance"], st.reqs["instance"])


def test_policy_id_includes_the_per_model_rows(tmp_path):
    cfg = two_models(tmp_path, duration_s=2)
    ids = {}
    for name, per_model in (("none", None), ("same", {QWEN: {"type": "round-robin"}}),
                            ("ll", {QWEN: "least-loaded"}), ("w", {QWEN: {"type": "weighted"}})):
        setup, wl, st = run(with_policy(cfg, routing_per_model=per_model))
        ids[name] = evaluate(Result(setup, wl, st)).policy_id
    assert ids["same"] == ids["none"]  # (an override equal to the default changes nothing)
    assert len({ids["none"], ids["ll"], ids["w"]}) == 3


def test_bundle_per_model_section():
    got = bundle_to_settings({"routing": {"type": "least-loaded", "per_model": {
        QWEN: {"type": "weighted", "scorers": {"queue-depth": 2, "prefix-affinity": 3}}, LLAMA: "round-robin"}}})
    assert got["routing"] == "least-loaded"
    assert got["routing_per_model"] == {QWEN: {"type": "weighted", "scorers": {"queue-depth": 2.0,
                                                                              "prefix-affinity": 3.0}},
                                        LLAMA: {"type": "round-robin", "scorers": None}}
    compiled = compile_policies(PolicyConfig(**got))
    assert compiled.uses_prefix_index  # (qwen's weighted routing reads the prefix index)
    kinds, rows = compiled.routing_rows((LLAMA, QWEN))
    assert list(kinds) == [RoutingKind.ROUND_ROBIN, RoutingKind.WEIGHTED]
    assert rows[0].sum() == 0 and rows[1].sum() == 5


def test_single_served_model_override_replaces_the_default(tmp_path):
    cfg = two_models(tmp_path, clients=[1], deployments=[1], duration_s=5)
    over = run(with_policy(cfg, routing="round-robin", routing_per_model={QWEN: "least-loaded"}))[2]
    plain = run(with_policy(cfg, routing="least-loaded"))[2]
    assert np.array_equal(over.reqs["instance"], plain.reqs["instance"])


@pytest.mark.parametrize("per_model, field, words", [
    ({"nobody/unknown": "least-loaded"}, "policy.routing_per_model.nobody/unknown",
     [LLAMA, QWEN, "no deployment serves"]),
    ({QWEN: "fastest"}, f"policy.routing_per_model.{QWEN}.type", ["round-robin"]),
    ({QWEN: {"type": "least-loaded", "scorers": {"queue-depth": 1}}}, f"policy.routing_per_model.{QWEN}.scorers",
     ["weighted"]),
    ({QWEN: {"scorers": {"queue-depth": 1}}}, f"policy.routing_per_model.{QWEN}.type", ["missing"]),
    ({QWEN: {"type": "weighted", "scorers": {"queue-depth": -1}}},
     f"policy.routing_per_model.{QWEN}.scorers.queue-depth", []),
    ({QWEN: {"type": "weighted", "speed": 1}}, f"policy.routing_per_model.{QWEN}.speed", ["scorers"]),
    ("least-loaded", "policy.routing_per_model", ["mapping"]),
])
def test_bad_per_model_routing_is_refused(tmp_path, per_model, field, words):
    doc = two_models(tmp_path, duration_s=1).to_dict()
    doc["policy"]["routing_per_model"] = per_model
    with pytest.raises(ConfigError) as exc:
        build_config(doc)
    assert exc.value.field == field
    assert "\n" not in str(exc.value)
    for w in words:
        assert w in exc.value.message


def test_bundle_with_an_unknown_model_is_refused_from_the_cli(tmp_path):
    cfg = two_models(tmp_path, duration_s=1)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    (tmp_path / "bundle.yaml").write_text(yaml.safe_dump({"routing": {"per_model": {"x/y": "least-loaded"}}}))
    code, out, err = cli_in_process("run", "--config", tmp_path / "run.yaml", "--policy-config",
                                    tmp_path / "bundle.yaml")
    assert_clean_error(code, out, err, ["routing_per_model", "served models", QWEN])


def test_the_docs_example_parses_and_runs(tmp_path):
    """docs/policies.md "Routing per model": its bundle, on configs/examples/two-models.yaml."""
    from tests.run.test_deployments_engine import ROOT

    text = (ROOT / "docs" / "policies.md").read_text()
    section = text[text.index("### Routing per model"):]
    start = section.index("```yaml\n") + len("```yaml\n")
    bundle = yaml.safe_load(section[start: section.index("```", start)])
    cfg = build_config(two_models(tmp_path, duration_s=2).to_dict(), policy_settings=bundle_to_settings(bundle))
    st = run(cfg)[2]
    assert list(st.routing_kind) == [RoutingKind.ROUND_ROBIN, RoutingKind.WEIGHTED]


def test_the_run_summary_names_the_per_model_routing(tmp_path):
    cfg = with_policy(two_models(tmp_path, clients=[1], deployments=[1], duration_s=2),
                      routing_per_model={QWEN: {"type": "weighted", "scorers": {"queue-depth": 1}}})
    text = Result(*run(cfg)).summary_text()
    assert f"(per model: {QWEN} `weighted` (scorers {{'queue-depth': 1.0}}))" in text
    assert "per model" not in Result(*run(with_policy(cfg, routing_per_model=None))).summary_text()


def test_binding_rows_to_models_that_do_not_include_an_override_is_refused():
    compiled = compile_policies(PolicyConfig(routing_per_model={"x/y": "least-loaded"}))
    with pytest.raises(ConfigError, match="no deployment serves it; served models: 'a/b'") as exc:
        compiled.routing_rows(("a/b",))
    assert exc.value.field == "policy.routing_per_model.x/y"
