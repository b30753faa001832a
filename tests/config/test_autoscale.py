"""Autoscaling, the configuration layer (blis_fast.config.autoscale, the autoscaler policy in
blis_fast.config.policy and blis_fast.policy.compile): the flags, the run config's
``autoscale`` section, a deployments: entry's and a pool's ``min_instances`` /
``max_instances`` / ``autoscale:`` keys, the bundle's ``autoscale:`` section, the resolved
settings in µs with the compiled AUTOSCALE row, the config echo, and every rule's one-line
error naming the field (flag, YAML path or keyword).  What the autoscaler does in a run is
tests/run/test_autoscale_engine.py's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from blis_fast.adapters.core import SECTIONS, FitnessSet, bundle_of_components
from blis_fast.config.autoscale import (
    AutoscaleSpec,
    Delay,
    ResolvedAutoscale,
    WarmupSpec,
    instance_rows,
)
from blis_fast.config.policy import PolicyConfig, bundle_to_settings
from blis_fast.config.sim import build_config, with_overrides
from blis_fast.config.validate import MAX_INSTANCES
from blis_fast.errors import ConfigError
from blis_fast.policy import compile_policies
from blis_fast.results.evaluation import TEMPLATE_WIDTH, _digest, policy_id
from blis_fast.run.api import simulate
from blis_fast.run.resolve import resolve
from blis_fast_kernels import schema as S
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

LLAMA = "meta-llama/llama-3.1-8b-instruct"
P = S.AutoscaleParam

# one autoscaled deployment, given three ways: flags, the run config's sections, a deployments: entry
FLAGS = {"autoscaler": "threshold", "autoscale_signal": "waiting", "autoscale_up": "4", "autoscale_down": "0.5",
         "num_instances": "2", "min_instances": "1", "max_instances": "6", "autoscale_interval_s": "10",
         "autoscale_metrics_delay_s": "2.5", "provisioning_delay_s": "mean:90,std:15", "loading_delay_s": "200",
         "instance_warmup_factor": "3", "instance_warmup_curve": "linear", "instance_warmup_requests": "20",
         "stabilization_up_s": "20", "stabilization_down_s": "120", "autoscale_max_change": "2", "drain": "wait",
         "drain_timeout_s": "45", "scale_down": "oldest", "cost_per_gpu_hour": "3.25"}
SECTIONS_YAML = """
policy: {autoscaler: threshold, autoscale_signal: waiting, autoscale_up: 4, autoscale_down: 0.5}
deployment: {num_instances: 2, min_instances: 1, max_instances: 6}
autoscale:
  interval_s: 10
  metrics_delay_s: 2.5
  provisioning_delay_s: {mean: 90, std: 15}
  loading_delay_s: 200
  warmup_factor: 3
  warmup_curve: linear
  warmup_requests: 20
  stabilization_up_s: 20
  stabilization_down_s: 120
  max_change: 2
  drain: wait
  drain_timeout_s: 45
  scale_down: oldest
  cost_per_gpu_hour: 3.25
"""
ENTRY_AUTOSCALE = {"interval_s": 10, "metrics_delay_s": 2.5, "provisioning_delay_s": {"mean": 90, "std": 15},
                   "loading_delay_s": 200, "warmup": {"factor": 3, "curve": "linear", "requests": 20},
                   "stabilization_up_s": 20, "stabilization_down_s": 120, "max_change": 2, "drain": "wait",
                   "drain_timeout_s": 45, "scale_down": "oldest", "cost_per_gpu_hour": 3.25}
BUNDLE = {"autoscale": {"policy": "threshold", "params": {"signal": "waiting", "up": 4, "down": 0.5}}}


def entry(**keys) -> dict:
    return {"name": "llama", "model": LLAMA, **keys}


def row(**columns) -> tuple[float, ...]:
    out = np.zeros(S.POLICY_WIDTH)
    for name, value in columns.items():
        out[getattr(P, name)] = value
    return tuple(out)


WANT = ResolvedAutoscale(
    min_instances=1, max_instances=6, initial=2, interval_us=10_000_000, metrics_delay_us=2_500_000,
    provisioning_mean_us=90_000_000, provisioning_std_us=15_000_000, loading_mean_us=200_000_000, loading_std_us=0,
    warmup_factor=3.0, warmup_curve=S.WarmupCurve.LINEAR, warmup_requests=20, warmup_us=0,
    stabilization_up_us=20_000_000, stabilization_down_us=120_000_000, max_change=2, drain=S.DrainMode.WAIT,
    drain_timeout_us=45_000_000, scale_down=S.ScaleDownPick.OLDEST, cost_per_gpu_hour=3.25, gpus_per_instance=1,
    kind=S.AutoscaleKind.THRESHOLD, params=row(SIGNAL=S.Signal.WAITING, UP=4.0, DOWN=0.5))


def pool_autoscale(cfg, pool: int = 0):
    return resolve(cfg).pools[pool].autoscale


# ----------------------------------------------------------------------------- defaults, resolution, compilation


def test_without_an_autoscaler_nothing_changes():
    cfg = build_config({})
    assert cfg.policy.autoscaler == "none" and cfg.deployment_list()[0].autoscale is None
    assert pool_autoscale(cfg) is None
    data = cfg.to_dict()  # (the results JSON's config echo: the keys it had before autoscaling)
    assert "autoscale" not in data and not {k for k in data["policy"] if k.startswith("autoscale")}
    compiled = compile_policies(cfg.policy)
    assert compiled.kinds.shape == (S.N_POLICY_SLOTS,) == (12,) and S.PolicySlot.AUTOSCALE == 6
    assert compiled.kinds[S.PolicySlot.AUTOSCALE] == S.AutoscaleKind.NONE
    assert not compiled.params[S.PolicySlot.AUTOSCALE].any()
    # the policy id hashes the slots before AUTOSCALE then (and, without a program, the parameter
    # rows' first TEMPLATE_WIDTH columns): every existing candidate keeps its id
    six = _digest([compiled.kinds[:6], compiled.params[:6, :TEMPLATE_WIDTH], cfg.policy.prefix_index_capacity])
    assert policy_id(compiled.kinds, compiled.params, cfg.policy.prefix_index_capacity) == six


def test_bounds_equal_to_the_instance_count_stay_neutral():
    cfg = build_config({}, {"num_instances": "3", "min_instances": "3", "max_instances": "3"})
    assert cfg.deployment_list()[0].autoscale is None
    listed = build_config({"deployments": [entry(instances=3, min_instances=3, max_instances=3)]})
    assert listed.deployment_list()[0].autoscale.neutral(3) and pool_autoscale(listed) is None
    with pytest.raises(ConfigError) as exc:  # (anything more is refused without an autoscaler)
        build_config({"deployments": [entry(instances=3, min_instances=3, autoscale={"drain": "redirect"})]})
    assert exc.value.field == "deployments[0].autoscale.drain" and "--autoscaler" in exc.value.message


def test_the_flags_resolve_to_microseconds_and_the_compiled_row():
    assert pool_autoscale(build_config({}, FLAGS)) == WANT


def test_defaults_resolve_as_documented():
    got = pool_autoscale(build_config({}, {"autoscaler": "saturation", "max_instances": "4"}))
    assert (got.min_instances, got.max_instances, got.initial) == (1, 4, 1)
    assert (got.interval_us, got.metrics_delay_us) == (30_000_000, 15_000_000)
    assert (got.provisioning_mean_us, got.provisioning_std_us, got.loading_mean_us) == (120_000_000, 0, 240_000_000)
    assert (got.warmup_factor, got.warmup_requests, got.warmup_us) == (1.0, 0, 0)
    assert (got.stabilization_up_us, got.stabilization_down_us, got.max_change) == (0, 300_000_000, 0)
    assert (got.drain, got.drain_timeout_us, got.scale_down) == (S.DrainMode.WAIT, -1, S.ScaleDownPick.LEAST_LOADED)
    assert got.cost_per_gpu_hour == 4.0 and got.cost_per_instance_hour == 4.0  # (H100's default, TP 1)
    assert got.kind == S.AutoscaleKind.SATURATION and got.params == row(KV_UP=0.8, KV_DOWN=0.4)
    a100 = pool_autoscale(build_config({}, {"autoscaler": "saturation", "max_instances": "4", "hardware": "A100",
                                            "tp": "2"}))
    assert (a100.cost_per_gpu_hour, a100.gpus_per_instance, a100.cost_per_instance_hour) == (2.5, 2, 5.0)


@pytest.mark.parametrize("flags,kind,params", [
    ({"autoscaler": "threshold"}, S.AutoscaleKind.THRESHOLD, row(SIGNAL=S.Signal.KV_UTILIZATION, UP=0.8, DOWN=0.3)),
    ({"autoscaler": "threshold", "autoscale_signal": "slo_attainment", "autoscale_up": "0.9",
      "autoscale_down": "0.99"}, S.AutoscaleKind.THRESHOLD, row(SIGNAL=S.Signal.SLO_ATTAINMENT, UP=0.9, DOWN=0.99)),
    ({"autoscaler": "target", "autoscale_signal": "ttft_p90_ms", "autoscale_target": "250"},
     S.AutoscaleKind.TARGET, row(SIGNAL=S.Signal.TTFT_P90_MS, TARGET=250.0)),
    ({"autoscaler": "target"}, S.AutoscaleKind.TARGET, row(SIGNAL=S.Signal.KV_UTILIZATION, TARGET=0.6)),
    ({"autoscaler": "saturation", "autoscale_kv_up": "0.9"}, S.AutoscaleKind.SATURATION, row(KV_UP=0.9, KV_DOWN=0.4)),
    ({"autoscaler": "oscillator", "autoscale_period_ticks": "5"}, S.AutoscaleKind.OSCILLATOR, row(PERIOD_TICKS=5)),
])
def test_each_autoscaler_compiles_to_its_columns(flags, kind, params):
    cfg = build_config({}, {**flags, "max_instances": "3"})
    compiled = compile_policies(cfg.policy)
    assert compiled.kinds[S.PolicySlot.AUTOSCALE] == kind
    assert tuple(compiled.params[S.PolicySlot.AUTOSCALE]) == params
    got = pool_autoscale(cfg)
    assert (got.kind, got.params) == (kind, params)


def test_the_policy_id_covers_the_autoscaler():
    ids = set()
    for flags in ({}, {"autoscaler": "threshold"}, {"autoscaler": "threshold", "autoscale_up": "0.9"},
                  {"autoscaler": "target"}):
        p = build_config({}, {**flags, "max_instances": "3"} if flags else {}).policy
        c = compile_policies(p)
        ids.add(policy_id(c.kinds, c.params, p.prefix_index_capacity))
    assert len(ids) == 4


# ----------------------------------------------------------------------------- one setting, every surface


def test_yaml_sections_flags_entry_bundle_and_api_agree():
    flags = build_config({}, FLAGS)
    sections = build_config(yaml.safe_load(SECTIONS_YAML))
    listed = build_config({"policy": yaml.safe_load(SECTIONS_YAML)["policy"],
                           "deployments": [entry(instances=2, min_instances=1, max_instances=6,
                                                 autoscale=ENTRY_AUTOSCALE)]})
    bundle = build_config({k: v for k, v in FLAGS.items() if not k.startswith("autoscale") or "_s" in k
                           or k == "autoscale_max_change"}, policy_settings=bundle_to_settings(BUNDLE))
    for cfg in (flags, sections, listed, bundle):
        assert pool_autoscale(cfg) == WANT
    spec = AutoscaleSpec(min_instances=1, max_instances=6, interval_s=10.0, metrics_delay_s=2.5,
                         provisioning_delay_s=Delay(90.0, 15.0), loading_delay_s=Delay(200.0),
                         warmup=WarmupSpec(3.0, "linear", requests=20), stabilization_up_s=20.0,
                         stabilization_down_s=120.0, max_change=2, drain_timeout_s=45.0, scale_down="oldest",
                         cost_per_gpu_hour=3.25)
    assert flags.deployment_list()[0].autoscale == listed.deployment_list()[0].autoscale == spec
    api = build_config({"deployments": [entry(instances=2)]}, {}).deployment_list()[0]
    from dataclasses import replace  # (the API: a DeploymentSpec with an AutoscaleSpec)

    from blis_fast.config.sim import SimConfig

    cfg = SimConfig(deployments=(replace(api, autoscale=spec),), policy=flags.policy)
    assert pool_autoscale(cfg) == WANT


def test_the_config_echo_round_trips():
    for cfg in (build_config({}, FLAGS), build_config(yaml.safe_load(SECTIONS_YAML)),
                build_config({"policy": {"autoscaler": "oscillator"},
                              "deployments": [entry(instances=2, max_instances=3, autoscale=ENTRY_AUTOSCALE)]})):
        data = cfg.to_dict()
        again = build_config(yaml.safe_load(yaml.safe_dump(data)))
        assert again.to_dict() == data
        assert pool_autoscale(again) == pool_autoscale(cfg)
    entry_data = build_config({"policy": {"autoscaler": "target"},
                               "deployments": [entry(instances=2, max_instances=3)]}).to_dict()["deployments"][0]
    assert entry_data["max_instances"] == 3 and "autoscale" not in entry_data  # (defaults left out)


def test_pd_pools_scale_separately():
    cfg = build_config({"policy": {"autoscaler": "threshold"}, "deployments": [entry(
        prefill={"instances": 1, "max_instances": 3, "autoscale": {"scale_down": "newest"}},
        decode={"instances": 2, "min_instances": 1, "max_instances": 4, "hardware": "A100"})]})
    prefill, decode = resolve(cfg).pools
    assert (prefill.autoscale.min_instances, prefill.autoscale.max_instances) == (1, 3)
    assert prefill.autoscale.scale_down == S.ScaleDownPick.NEWEST and prefill.autoscale.cost_per_gpu_hour == 4.0
    assert (decode.autoscale.min_instances, decode.autoscale.max_instances, decode.autoscale.initial) == (1, 4, 2)
    assert decode.autoscale.cost_per_gpu_hour == 2.5  # (the pool's own GPU)
    assert instance_rows(cfg.deployment_list()[0]) == 7  # (each pool's max_instances)
    back = build_config(cfg.to_dict())
    assert [p.autoscale for p in resolve(back).pools] == [prefill.autoscale, decode.autoscale]
    one = build_config({"policy": {"autoscaler": "threshold"}, "deployments": [entry(
        prefill={"instances": 1}, decode={"instances": 2, "max_instances": 4})]})
    assert [p.autoscale is None for p in resolve(one).pools] == [True, False]


@pytest.mark.parametrize("pool", [{"drain": "redirect"}, {"drain": "immediate"}, {"drain_timeout_s": 5}])
def test_a_pd_pool_drains_only_by_waiting(pool):
    cfg = build_config({"policy": {"autoscaler": "threshold"}, "deployments": [entry(
        prefill={"instances": 1, "max_instances": 3, "autoscale": pool}, decode={"instances": 2})]})
    with pytest.raises(ConfigError, match=r"deployments\[0\]\.prefill\.autoscale\.drain: .*must be wait"):
        resolve(cfg)


def test_the_adapters_search_the_autoscale_section():
    assert "autoscale" in SECTIONS
    bundle = bundle_of_components({"routing": "type: least-loaded", "autoscale": "policy: target\nparams: {target: 3, "
                                                                                  "signal: waiting}"})
    settings = bundle_to_settings(bundle)
    assert settings["autoscaler"] == "target" and settings["autoscale_target"] == 3
    assert settings["autoscale_up"] is None  # (the section replaces the whole autoscaler)
    assert PolicyConfig(**settings).autoscaler == "target"


def test_a_later_layer_switching_the_autoscaler_drops_the_files_parameters():
    data = {"policy": {"autoscaler": "threshold", "autoscale_up": 0.9}, "max_instances": 3}
    flag = build_config(data, {"autoscaler": "target"})
    assert (flag.policy.autoscaler, flag.policy.autoscale_up) == ("target", None)
    bundle = build_config(data, policy_settings=bundle_to_settings({"autoscale": "saturation"}))
    assert (bundle.policy.autoscaler, bundle.policy.autoscale_up) == ("saturation", None)
    study_point = with_overrides(build_config(data), autoscaler="oscillator")  # (a study's --set autoscaler=...)
    assert (study_point.policy.autoscaler, study_point.policy.autoscale_up) == ("oscillator", None)
    with pytest.raises(ConfigError) as same_layer:
        build_config({**data, "policy": {"autoscaler": "target", "autoscale_up": 0.9}})
    assert same_layer.value.field == "policy.autoscale_up"


def test_an_autoscale_candidate_is_evaluated():
    scenario = [{"name": "small", "seed": 1, "config": {"num_requests": 20, "rate": 10, "max_instances": 3,
                                                          "policy": {"autoscaler": "threshold"}}}]
    fs = FitnessSet(scenario, objectives="ttft_p99_ms:min", workers=1)
    (row,) = fs.run({"autoscale": "policy: target"})
    assert row.status == "ok", row.message
    (plain,) = fs.run({"routing": "type: least-loaded"})
    assert plain.status == "ok"


# ----------------------------------------------------------------------------- refusals


# (flags, the field named, words of the message)
CLI_REFUSALS = [
    (["--autoscaler", "threshold", "--min-instances", "3", "--max-instances", "2", "--num-instances", "2"],
     "--min-instances", "max_instances"),
    (["--autoscaler", "threshold", "--num-instances", "5", "--max-instances", "4"], "--max-instances",
     "initial instance count (5)"),
    (["--drain", "redirect"], "--drain", "--autoscaler"),
    (["--max-instances", "3"], "--max-instances", "--autoscaler"),
    (["--autoscaler", "none", "--max-instances", "3"], "--max-instances", "--autoscaler"),
    (["--autoscaler", "threshold"], "--autoscaler", "no pool to scale"),
    (["--autoscaler", "target", "--autoscale-up", "0.5", "--max-instances", "3"], "--autoscale-up", "threshold"),
    (["--autoscale-target", "0.5"], "--autoscale-target", "--autoscaler target"),
    (["--autoscaler", "threshold", "--autoscale-up", "0.2", "--max-instances", "3"], "--autoscale-up", "> down"),
    (["--autoscaler", "threshold", "--autoscale-signal", "kv_utilization", "--autoscale-up", "2",
      "--max-instances", "3"], "--autoscale-up", "[0, 1]"),
    (["--autoscaler", "threshold", "--autoscale-signal", "vibes", "--max-instances", "3"], "--autoscale-signal",
     "kv_utilization"),
    (["--autoscaler", "saturation", "--autoscale-kv-down", "0.9", "--max-instances", "3"], "--autoscale-kv-down",
     "kv_up"),
    (["--autoscaler", "threshold", "--max-instances", "3", "--provisioning-delay-s", "-1"], "--provisioning-delay-s",
     "[0, 1e+07]"),
    (["--autoscaler", "threshold", "--max-instances", "3", "--loading-delay-s", "nan"], "--loading-delay-s", "finite"),
    (["--autoscaler", "threshold", "--max-instances", "3", "--loading-delay-s", "mean:1,std:inf"],
     "--loading-delay-s.std", "finite"),
    (["--autoscaler", "threshold", "--max-instances", "3", "--provisioning-delay-s", "std:30"],
     "--provisioning-delay-s.mean", "required"),
    (["--autoscaler", "threshold", "--max-instances", "3", "--provisioning-delay-s", "mean:1,sd:3"],
     "--provisioning-delay-s.sd", "unknown key"),
    (["--autoscaler", "threshold", "--max-instances", "3", "--drain", "immediate", "--drain-timeout-s", "30"],
     "--drain-timeout-s", "drain wait"),
    (["--autoscaler", "threshold", "--max-instances", "3", "--instance-warmup-factor", "2",
      "--instance-warmup-requests", "5", "--instance-warmup-seconds", "5"], "--instance-warmup-seconds", "not both"),
    (["--autoscaler", "threshold", "--max-instances", "3", "--instance-warmup-factor", "0.5"],
     "--instance-warmup-factor", "[1, 100]"),
    (["--autoscaler", "threshold", "--max-instances", "100000"], "--max-instances", str(MAX_INSTANCES)),
    (["--autoscaler", "threshold", "--max-instances", "1e30"], "--max-instances", str(MAX_INSTANCES)),
    (["--autoscaler", "threshold", "--max-instances", "3", "--stabilization-down-s", "10"], "--stabilization-down-s",
     "interval_s"),
    (["--autoscaler", "threshold", "--max-instances", "3", "--autoscale-interval-s", "0"], "--autoscale-interval-s",
     "[0.001"),
    (["--autoscaler", "threshold", "--max-instances", "3", "--autoscale-max-change", "0"], "--autoscale-max-change",
     "[1, 65536]"),
    (["--autoscaler", "threshold", "--max-instances", "3", "--cost-per-gpu-hour", "-2"], "--cost-per-gpu-hour",
     "[0, 1e+06]"),
    (["--autoscaler", "threshold", "--max-instances", "3", "--scale-down", "random"], "--scale-down", "least-loaded"),
    (["--autoscaler", "threshold", "--max-instances", "3", "--kv-cpu-blocks", "100"], "kv_tiers", "autoscaler"),
]


@pytest.mark.parametrize("args,field,words", CLI_REFUSALS, ids=[" ".join(a[-2:]) + " " + f for a, f, _ in
                                                                 CLI_REFUSALS])
def test_refused_from_the_command_line(args, field, words):
    line = assert_clean_error(*cli_in_process("run", "--num-requests", "5", *args), needles=(words,))
    assert line.startswith(f"error: {field}: "), line


# (settings, the keyword named, words) through the Python API
API_REFUSALS = [
    (dict(autoscaler="threshold", max_instances=3, drain="redirect", drain_timeout_s=5), "drain_timeout_s",
     "drain wait"),
    (dict(autoscaler="threshold", max_instances=3, provisioning_delay_s={"std": 3}), "provisioning_delay_s.mean",
     "required"),
    (dict(autoscaler="threshold", max_instances=3, loading_delay_s=-5), "loading_delay_s", "[0, 1e+07]"),
    (dict(num_instances=2, min_instances=1), "min_instances", "--autoscaler"),
    (dict(autoscaler="target", autoscale_kv_up=0.5, max_instances=3), "autoscale_kv_up", "saturation"),
    (dict(autoscaler="threshold", max_instances=3, autoscale_interval_s=0.01), "autoscale.stabilization_down_s",
     "4095 ticks"),
]


@pytest.mark.parametrize("settings,field,words", API_REFUSALS, ids=[f for _, f, _ in API_REFUSALS])
def test_refused_from_the_api(settings, field, words):
    with pytest.raises(ConfigError) as exc:
        simulate(num_requests=5, **settings)
    assert exc.value.field == field and words in exc.value.message, exc.value


# (YAML config, the path named, words)
YAML_REFUSALS = [
    ({"deployments": [entry(instances=2, max_instances=4, autoscale={"drain": "sideways"})],
      "policy": {"autoscaler": "threshold"}}, "deployments[0].autoscale.drain", "wait"),
    ({"deployments": [entry(instances=2, max_instances=4, autoscale={"interval": 3})],
      "policy": {"autoscaler": "threshold"}}, "deployments[0].autoscale.interval", "unknown key"),
    ({"deployments": [entry(instances=2, max_instances=4, autoscale={"warmup": {"factor": 2}})],
      "policy": {"autoscaler": "threshold"}}, "deployments[0].autoscale.warmup.factor", "requests or seconds"),
    ({"deployments": [entry(instances=5, max_instances=4)], "policy": {"autoscaler": "threshold"}},
     "deployments[0].max_instances", "initial instance count (5)"),
    ({"deployments": [entry(max_instances=4)]}, "deployments[0].max_instances", "--autoscaler"),
    ({"deployments": [entry(prefill={"instances": 1}, decode={"instances": 3, "min_instances": 4})],
      "policy": {"autoscaler": "threshold"}}, "deployments[0].decode.min_instances", "initial instance count (3)"),
    ({"deployments": [entry(min_instances=1, prefill={"instances": 1}, decode={"instances": 1})],
      "policy": {"autoscaler": "threshold"}}, "deployments[0].min_instances", "each pool"),
    ({"deployments": [entry(max_instances=40000), entry(name="b", max_instances=40000)],
      "policy": {"autoscaler": "threshold"}}, "deployments", str(MAX_INSTANCES)),
    ({"deployments": [entry()], "autoscale": {"drain": "redirect"}}, "autoscale.drain", "deployments[i]"),
    ({"policy": {"autoscaler": "threshold", "autoscale_target": 2}, "max_instances": 3}, "policy.autoscale_target",
     "target"),
]


@pytest.mark.parametrize("data,field,words", YAML_REFUSALS, ids=[f for _, f, _ in YAML_REFUSALS])
def test_refused_from_yaml_naming_the_path(data, field, words):
    with pytest.raises(ConfigError) as exc:
        build_config(data)
    assert exc.value.field == field and words in exc.value.message, exc.value


@pytest.mark.parametrize("section,path,words", [
    ({"policy": "sometimes"}, "autoscale.policy", "threshold"),
    ({"type": "threshold", "params": {"target": 3}}, "autoscale.params.target", "autoscaler target"),
    ({"policy": "threshold", "params": {"hysteresis": 3}}, "autoscale.params.hysteresis", "unknown parameter"),
    ({"params": {"up": 0.9}}, "autoscale.policy", "missing"),
])
def test_a_bad_bundle_section_names_its_path(section, path, words):
    with pytest.raises(ConfigError) as exc:
        bundle_to_settings({"autoscale": section})
    assert exc.value.field == path and words in exc.value.message, exc.value


def test_the_limits_page_example_resolves():
    text = (Path(__file__).resolve().parents[2] / "docs" / "limits.md").read_text(encoding="utf-8")
    section = text[text.index("## Autoscaling: configuration"):]
    block = section[section.index("```yaml\n") + len("```yaml\n"):section.index("```\n", section.index("```yaml"))]
    got = pool_autoscale(build_config(yaml.safe_load(block)))
    assert (got.min_instances, got.max_instances, got.initial, got.provisioning_std_us) == (1, 6, 2, 30_000_000)
    assert (got.warmup_factor, got.warmup_requests, got.max_change, got.drain_timeout_us) == (2.0, 50, 2, 60_000_000)


def test_a_workload_is_not_built_for_a_run_that_is_refused(monkeypatch):
    import blis_fast.run.api as api

    def fail(cfg):
        raise AssertionError("the workload was built")

    monkeypatch.setattr(api, "build_workload", fail)
    with pytest.raises(ConfigError, match="kv_tiers"):
        simulate(num_requests=5, autoscaler="threshold", max_instances=3, kv_cpu_blocks=100)


def test_a_bundle_without_a_pool_to_scale_is_refused_naming_the_bundle():
    with pytest.raises(ConfigError) as exc:
        build_config({}, policy_settings=bundle_to_settings({"autoscale": "threshold"}))
    assert exc.value.field == "--policy-config (autoscaler)" and "no pool to scale" in exc.value.message
