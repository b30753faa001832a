"""Prefill/decode pools, the configuration layer (blis_fast.config.disaggregation): a
deployments: entry's prefill, decode and both pools and its pd settings, the pd section
and its flags (the single-deployment shorthand), the resolved pools (run.resolve), and
every rule's one-line error naming the field (YAML path, flag or keyword).  No P/D run
here: the engine side has its own tests."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import yaml

from blis_fast.config.deployments import DeploymentSpec
from blis_fast.config.disaggregation import PDConfig, PDSpec, PoolSpec, TransferSpec
from blis_fast.config.engine import EngineConfig
from blis_fast.config.sim import SimConfig, build_config, with_overrides
from blis_fast.errors import ConfigError
from blis_fast.run import api
from blis_fast.run.api import as_config, simulate
from blis_fast.run.resolve import resolve
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

LLAMA = "meta-llama/llama-3.1-8b-instruct"
QWEN = "qwen/qwen2.5-7b-instruct"
PD = {"decider": "prefix-threshold", "threshold": 8, "first_token": "decode", "on_decode_full": "drop",
      "transfer": {"bandwidth_gbps": 12.5, "base_latency_ms": 0.1, "charge": "full-prompt", "contention": "link"}}


def entry(**keys) -> dict:
    return {"name": "llama-pd", "model": LLAMA, "hardware": "H100", "prefill": {"instances": 2},
            "decode": {"instances": 6}, **keys}


def config(*entries) -> dict:
    return {"deployments": list(entries or [entry()])}


# ----------------------------------------------------------------------------- a deployments: entry with pools


def test_an_entry_with_pools():
    cfg = build_config(config(entry(decode={"instances": 6, "hardware": "A100-80"}, both={"instances": 1, "tp": 2},
                                    pd=PD)))
    (dep,) = cfg.deployments
    assert dep.disaggregated and dep.instances == 9  # (the pools' sum: code summing instances keeps working)
    assert dep.prefill == PoolSpec(2)
    assert dep.decode == PoolSpec(6, hardware="A100-80")
    assert dep.both == PoolSpec(1, engine=replace(dep.engine, tp=2))  # (the whole engine, merged)
    assert dep.pd == PDSpec(threshold=8, on_decode_full="drop",
                            transfer=TransferSpec(12.5, 0.1, "full-prompt", "link"))
    assert [role for role, _ in dep.pools] == ["prefill", "decode", "both"]
    assert cfg.deployment.num_instances == 9  # (the top-level settings mirror the first deployment)


def test_pools_without_pd_get_the_default_pd():
    (dep,) = build_config(config()).deployments
    assert dep.pd == PDSpec() and dep.pd.transfer == TransferSpec()
    assert (dep.pd.decider, dep.pd.threshold, dep.pd.transfer.bandwidth_gbps, dep.pd.transfer.base_latency_ms) == \
        ("prefix-threshold", 16, 25.0, 0.05)
    one = DeploymentSpec(name="mono")
    assert not one.disaggregated and one.pd is None and one.pools == ()


def test_a_pool_takes_engine_keys_as_an_entry_does():
    (dep,) = build_config(config(entry(max_num_running_reqs=64, prefill={"instances": 2, "max_num_seqs": 8,
                                                                         "engine": {"long_prefill_token_threshold": 5}},
                                       decode={"instances": 6, "block_size_in_tokens": 16}))).deployments
    assert dep.engine.max_num_seqs == 64
    assert dep.prefill.engine == replace(dep.engine, max_num_seqs=8, long_prefill_token_threshold=5)
    assert dep.decode.engine == dep.engine  # (the deployment's block size again: not a change)


def test_round_trip_through_to_dict():
    cfg = build_config(config(entry(decode={"instances": 6, "hardware": "A100-80", "max_num_seqs": 32},
                                    both={"instances": 1}, pd=PD)))
    data = cfg.to_dict()
    (written,) = data["deployments"]
    assert "instances" not in written  # (the pools' sum: refused next to them when read back)
    assert written["decode"] == {"instances": 6, "hardware": "A100-80", "engine": {"max_num_seqs": 32}}
    assert written["prefill"] == {"instances": 2} and written["pd"] == PD
    assert as_config(data).deployments == cfg.deployments
    assert build_config(yaml.safe_load(yaml.safe_dump(data))).deployments == cfg.deployments
    assert with_overrides(cfg, rate=3.0).deployments == cfg.deployments


def test_to_dict_is_unchanged_without_pools():
    cfg = build_config(None)
    assert list(cfg.to_dict()) == ["model", "hardware", "vllm_version", "latency_model", "alpha_coeffs",
                                   "beta_coeffs", "engine", "deployment", "workload", "simulation", "policy",
                                   "objectives"]
    listed = build_config(config({"name": "a", "model": LLAMA, "instances": 2}))
    assert list(listed.to_dict()["deployments"][0]) == ["name", "model", "served_model_name", "hardware",
                                                        "vllm_version", "latency_model", "alpha_coeffs",
                                                        "beta_coeffs", "instances", "engine"]


# ----------------------------------------------------------------------------- the pd section and its flags


SHORTHAND_FLAGS = {"prefill_instances": "2", "decode_instances": "6", "pd_decider": "prefix-threshold",
                   "pd_threshold": "8", "pd_first_token": "decode", "pd_on_decode_full": "drop",
                   "pd_transfer_bandwidth_gbps": "12.5", "pd_transfer_base_latency_ms": "0.1",
                   "pd_transfer_charge": "full-prompt", "pd_transfer_contention": "link"}
SHORTHAND_YAML = {"pd": {"prefill_instances": 2, "decode_instances": 6, "decider": "prefix-threshold", "threshold": 8,
                         "first_token": "decode", "on_decode_full": "drop", "transfer_bandwidth_gbps": 12.5,
                         "transfer_base_latency_ms": 0.1, "transfer_charge": "full-prompt",
                         "transfer_contention": "link"}}


def test_the_shorthand_is_one_deployment_with_pools():
    cfg = build_config(SHORTHAND_YAML)
    (dep,) = cfg.deployment_list()
    (listed,) = build_config(config(entry(pd=PD))).deployments
    assert dep == replace(listed, name=LLAMA)
    assert cfg.deployment.num_instances == 8  # (mirrored: single-deployment code reads the pools' sum)
    default = build_config({}, {"prefill_instances": 1, "decode_instances": 3}).deployment_list()[0]
    assert (default.prefill, default.decode, default.both, default.pd) == (PoolSpec(1), PoolSpec(3), None, PDSpec())


class _Ran(Exception):
    """Raised instead of simulating: the test only wants the config."""


def test_flags_keywords_and_yaml_give_one_config(monkeypatch):
    from_yaml = build_config(SHORTHAND_YAML)
    flat_yaml = build_config({name: yaml.safe_load(v) for name, v in SHORTHAND_FLAGS.items()})
    assert flat_yaml == from_yaml
    assert as_config(None, SHORTHAND_FLAGS) == from_yaml  # (simulate's keywords)
    seen = []

    def fake_run_config(cfg, *args, **kwargs):
        seen.append(cfg)
        raise _Ran

    monkeypatch.setattr(api, "run_config", fake_run_config)
    args = [a for name, value in SHORTHAND_FLAGS.items() for a in ("--" + name.replace("_", "-"), value)]
    with pytest.raises(_Ran):
        cli_in_process("run", *args)
    assert seen == [from_yaml]


def test_the_shorthand_round_trips():
    cfg = build_config(SHORTHAND_YAML)
    data = cfg.to_dict()
    assert "deployment" not in data and data["pd"] == SHORTHAND_YAML["pd"]
    assert as_config(data) == cfg
    again = with_overrides(cfg, pd_threshold=4)
    assert again.deployment_list()[0].pd.threshold == 4 and again.deployment.num_instances == 8
    assert with_overrides(cfg, decode_instances=2).deployment.num_instances == 4
    with pytest.raises(ConfigError) as info:
        with_overrides(cfg, num_instances=4)
    assert info.value.field == "deployment.num_instances"


# ----------------------------------------------------------------------------- resolved pools


def test_resolved_pools_rows_and_latency():
    setup = resolve(build_config(config(
        entry(decode={"instances": 6, "hardware": "A100-80"}, both={"instances": 1, "tp": 2},
              pd={"on_decode_full": "drop"}),
        {"name": "qwen", "model": QWEN, "instances": 3})))
    pd, mono = setup.deployments
    assert [(p.role, p.instances, p.first_instance) for p in setup.pools] == \
        [("prefill", 2, 0), ("decode", 6, 2), ("both", 1, 8), ("mono", 3, 9)]
    assert (pd.instances, pd.first_instance, mono.first_instance) == (9, 0, 9)
    prefill, decode, both = pd.pools
    assert prefill.latency is pd.latency and prefill.hardware is pd.hardware  # (nothing of its own)
    assert decode.hardware.name == "A100-SXM" and decode.engine == pd.engine
    assert not np.array_equal(decode.latency.beta, prefill.latency.beta)  # (its own coefficient set)
    assert both.engine.tp == 2 and both.hardware is pd.hardware
    assert not np.array_equal(both.latency.beta, prefill.latency.beta)
    assert pd.pd == PDSpec(on_decode_full="drop") and mono.pd is None
    (only,) = mono.pools
    assert (only.hardware, only.engine, only.latency, only.instances) == \
        (mono.hardware, mono.engine, mono.latency, 3)


def test_shorthand_pools_resolve():
    setup = resolve(build_config({}, {"prefill_instances": 2, "decode_instances": 6}))
    assert [(p.role, p.instances, p.first_instance) for p in setup.pools] == [("prefill", 2, 0), ("decode", 6, 2)]
    assert all(p.latency is setup.latency for p in setup.pools)
    assert setup.deployments[0].instances == 8


def test_a_python_deployment_spec():
    dep = DeploymentSpec(name="pd", prefill=PoolSpec(2), decode=PoolSpec(3, engine=EngineConfig(max_num_seqs=8)))
    assert dep.instances == 5 and dep.pd == PDSpec()
    assert replace(dep, name="copy").instances == 5  # (a copy passes the sum back in)
    cfg = SimConfig(deployments=(dep,))
    assert cfg.deployment.num_instances == 5
    assert SimConfig(pd=PDConfig(prefill_instances=1, decode_instances=2)).deployment.num_instances == 3


# ----------------------------------------------------------------------------- refused


def two_models(first: dict, second: dict) -> dict:
    return config({"name": "a", "model": LLAMA, **first}, {"name": "b", "model": LLAMA, **second})


POOLS = {"prefill": {"instances": 1}, "decode": {"instances": 1}}
BAD = [
    ("decode without prefill", config(entry(prefill=None)), ["deployments[0].prefill", "is required with decode"]),
    ("prefill without decode", config(entry(decode=None)), ["deployments[0].decode", "is required with prefill"]),
    ("zero decode instances", config(entry(decode={"instances": 0})), ["deployments[0].decode.instances",
                                                                       "[1, 65536]"]),
    ("pool without instances", config(entry(prefill={"hardware": "A100-80"})),
     ["deployments[0].prefill.instances", "required"]),
    ("both alone", config({"name": "a", "model": LLAMA, "both": {"instances": 1}}),
     ["deployments[0].both", "needs prefill and decode"]),
    ("instances with pools", config(entry(instances=8)), ["deployments[0].instances", "prefill.instances"]),
    ("pd without pools", config({"name": "a", "model": LLAMA, "pd": {"threshold": 4}}),
     ["deployments[0].pd", "pd settings need prefill and decode pools"]),
    ("pool block size", config(entry(decode={"instances": 1, "block_size_in_tokens": 32})),
     ["deployments[0].decode.block_size_in_tokens", "may not change"]),
    ("pool block size (engine)", config(entry(both={"instances": 1, "engine": {"block_size": 8}})),
     ["deployments[0].both.engine.block_size", "may not change"]),
    ("negative bandwidth", config(entry(pd={"transfer": {"bandwidth_gbps": -1}})),
     ["deployments[0].pd.transfer.bandwidth_gbps", "[1e-06, 1e+06] (GB/s)"]),
    ("zero bandwidth", config(entry(pd={"transfer": {"bandwidth_gbps": 0}})),
     ["deployments[0].pd.transfer.bandwidth_gbps", "[1e-06, 1e+06]"]),
    ("a bandwidth whose transfer times would overflow the clock", config(entry(pd={"transfer": {"bandwidth_gbps": 1e-300}})),
     ["deployments[0].pd.transfer.bandwidth_gbps", "[1e-06, 1e+06]"]),
    ("latency too high", config(entry(pd={"transfer": {"base_latency_ms": 1e7}})),
     ["deployments[0].pd.transfer.base_latency_ms", "[0, 1e+06]"]),
    ("threshold below 0", config(entry(pd={"threshold": -1})), ["deployments[0].pd.threshold", "[0, 1000000000]"]),
    ("first_token misspelt", config(entry(pd={"first_token": "decoder"})),
     ["deployments[0].pd.first_token", "allowed: decode, prefill"]),
    ("unknown decider", config(entry(pd={"decider": "sometimes"})), ["deployments[0].pd.decider", "prefix-threshold"]),
    ("unknown charge", config(entry(pd={"transfer": {"charge": "half"}})),
     ["deployments[0].pd.transfer.charge", "destination-missing"]),
    ("unknown pool key", config(entry(decode={"instances": 1, "gpus": 2})),
     ["deployments[0].decode.gpus", "unknown key", "instances"]),
    ("unknown pd key", config(entry(pd={"thresold": 2})), ["deployments[0].pd.thresold", "unknown key", "threshold"]),
    ("unknown transfer key", config(entry(pd={"transfer": {"gbps": 2}})),
     ["deployments[0].pd.transfer.gbps", "unknown key", "bandwidth_gbps"]),
    ("pool not a mapping", config(entry(decode=4)), ["deployments[0].decode", "mapping"]),
    ("pool pp", config(entry(decode={"instances": 1, "engine": {"pp": 2}})),
     ["deployments[0].decode.engine.pp", "only 1"]),
    ("pool coefficients", config(entry(decode={"instances": 1, "beta_coeffs": [1, 2]})),
     ["deployments[0].decode.beta_coeffs", "3 finite numbers"]),
    ("pool full step", config(entry(decode={"instances": 1, "beta_coeffs": [1e9, 1e9, 1e9],
                                            "max_num_batched_tokens": 2**30})),
     ["deployments[0].decode.beta_coeffs", "2^53"]),
    ("pools over the limit", config(entry(prefill={"instances": 40000}, decode={"instances": 40000})),
     ["deployments[0].decode.instances", "65536"]),
    ("deployments over the limit", two_models({"prefill": {"instances": 30000}, "decode": {"instances": 10000}},
                                              {"prefill": {"instances": 30000}, "decode": {"instances": 10000}}),
     ["deployments:", "65536"]),
    ("one model, one disaggregated", two_models({"instances": 2}, POOLS),
     ["deployments[1].prefill", "all disaggregated or none"]),
    ("one model, one not", two_models(POOLS, {"instances": 2}), ["deployments[1].prefill", "is missing"]),
    ("one model, two pd", two_models(POOLS, {**POOLS, "pd": {"threshold": 4}}),
     ["deployments[1].pd", "agree on pd"]),
    ("threshold without its decider", config(entry(pd={"decider": "always", "threshold": 8})),
     ["deployments[0].pd.threshold", "no effect with decider always"]),
    ("transfer with decider never", config(entry(pd={"decider": "never", "transfer": {"contention": "link"}})),
     ["deployments[0].pd.transfer", "no effect with decider never"]),
    ("first_token with decider never", config(entry(pd={"decider": "never", "first_token": "prefill"})),
     ["deployments[0].pd.first_token", "no effect with decider never"]),
    ("pd section: threshold, decider always", {"pd": {"prefill_instances": 1, "decode_instances": 1,
                                                      "decider": "always", "threshold": 4}},
     ["pd.threshold", "no effect with decider always"]),
    ("pool unknown GPU", config(entry(decode={"instances": 1, "hardware": "Z100"})),
     ["deployments[0].decode.hardware", "Z100"]),
    ("pool bad tp", config(entry(prefill={"instances": 1, "tp": 3})), ["deployments[0].prefill.tp", "divide"]),
    ("pd section with a list", {**config(), "pd": {"threshold": 4}}, ["pd.threshold", "deployments[i].pd.threshold"]),
    ("pd flat key with a list", {**config(), "prefill_instances": 2},
     ["prefill_instances:", "deployments[i].prefill.instances"]),
    ("pd section unknown key", {"pd": {"treshold": 4}}, ["pd.treshold", "unknown key"]),
    ("pd section without pools", {"pd": {"threshold": 4}}, ["pd.threshold", "needs --prefill-instances"]),
    ("pd section, one pool", {"pd": {"decode_instances": 4}}, ["pd.decode_instances", "needs --prefill-instances too"]),
    ("num_instances with pools", {"num_instances": 3, "pd": {"prefill_instances": 1, "decode_instances": 2}},
     ["num_instances:", "sum of --prefill-instances and --decode-instances"]),
]


@pytest.mark.parametrize("data,needles", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_pd_config_gives_one_line(tmp_path, data, needles):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    assert_clean_error(*cli_in_process("run", "--config", path), needles)
    with pytest.raises(ConfigError) as info:
        resolve(as_config(data))
    assert info.value.field == needles[0].rstrip(":")


BAD_FLAGS = [
    (["--pd-threshold", "8"], ["--pd-threshold", "needs --prefill-instances and --decode-instances"]),
    (["--prefill-instances", "2"], ["--prefill-instances", "needs --decode-instances too"]),
    (["--decode-instances", "2", "--pd-transfer-charge", "full-prompt"], ["--pd-transfer-charge", "needs"]),
    (["--prefill-instances", "2", "--decode-instances", "6", "--num-instances", "8"],
     ["--num-instances", "sum of --prefill-instances"]),
    (["--prefill-instances", "2", "--decode-instances", "6", "--max-instances", "8"], ["--max-instances"]),
    (["--prefill-instances", "0", "--decode-instances", "6"], ["--prefill-instances", "[1, 65536]"]),
    (["--prefill-instances", "40000", "--decode-instances", "40000"], ["--decode-instances", "65536"]),
    (["--prefill-instances", "2", "--decode-instances", "6", "--pd-first-token", "both"],
     ["--pd-first-token", "allowed: decode, prefill"]),
    (["--prefill-instances", "2", "--decode-instances", "6", "--pd-transfer-bandwidth-gbps", "-1"],
     ["--pd-transfer-bandwidth-gbps", "[1e-06, 1e+06]"]),
    (["--prefill-instances", "2", "--decode-instances", "6", "--pd-transfer-bandwidth-gbps", "nan"],
     ["--pd-transfer-bandwidth-gbps", "finite"]),
    (["--prefill-instances", "2", "--decode-instances", "6", "--pd-threshold", "-1"], ["--pd-threshold", "[0, "]),
    (["--prefill-instances", "2", "--decode-instances", "6", "--pd-decider", "never", "--pd-on-decode-full", "drop"],
     ["--pd-on-decode-full", "no effect with decider never"]),
    (["--prefill-instances", "2", "--decode-instances", "6", "--pd-on-decode-full", "\x1b[31m"],
     ["--pd-on-decode-full", "\\x1b"]),
]


@pytest.mark.parametrize("args,needles", BAD_FLAGS, ids=[" ".join(a[::2]) for a, _ in BAD_FLAGS])
def test_bad_pd_flags_give_one_line(args, needles):
    assert_clean_error(*cli_in_process("run", *args), needles)
    keywords = {a[2:].replace("-", "_"): v for a, v in zip(args[::2], args[1::2])}
    with pytest.raises(ConfigError) as info:
        simulate(**keywords)
    assert info.value.field == needles[0][2:].replace("-", "_")


def test_bad_python_objects_name_the_field():
    cases = [
        (lambda: PoolSpec(0), "instances"),
        (lambda: PoolSpec(2, engine={"tp": 2}), "engine"),
        (lambda: PDSpec(threshold=-1), "threshold"),
        (lambda: PDSpec(transfer={"bandwidth_gbps": 1}), "transfer"),
        (lambda: TransferSpec(bandwidth_gbps=0.0), "bandwidth_gbps"),
        (lambda: TransferSpec(contention="shared"), "contention"),
        (lambda: DeploymentSpec(prefill=PoolSpec(1)), "decode"),
        (lambda: DeploymentSpec(prefill=PoolSpec(1), decode=2), "decode"),
        (lambda: DeploymentSpec(instances=3, prefill=PoolSpec(1), decode=PoolSpec(1)), "instances"),
        (lambda: DeploymentSpec(prefill=PoolSpec(1), decode=PoolSpec(1, engine=EngineConfig(block_size=32))),
         "decode.block_size"),
        (lambda: SimConfig(pd=PDConfig(threshold=3)), "pd.threshold"),
        (lambda: SimConfig(pd=PDConfig(prefill_instances=1, decode_instances=1), deployment=replace(
            SimConfig().deployment, num_instances=5)), "deployment.num_instances"),
        (lambda: SimConfig(pd=PDConfig(prefill_instances=1, decode_instances=1),
                           deployments=(DeploymentSpec(),)), "pd.prefill_instances"),
        (lambda: SimConfig(pd="link"), "pd"),
    ]
    for make, field in cases:
        with pytest.raises(ConfigError) as info:
            make()
        assert info.value.field == field, (field, info.value)


def test_studies_vary_the_pools_and_refuse_an_instance_search():
    from blis_fast.studies.runs import configs_for

    cfg = build_config(SHORTHAND_YAML)
    (point,) = configs_for(cfg, {"prefill_instances": 3, "pd_transfer_bandwidth_gbps": 1.0}, [7])
    (dep,) = point.deployment_list()
    assert (dep.prefill.instances, dep.decode.instances, dep.pd.transfer.bandwidth_gbps) == (3, 6, 1.0)
    assert point.simulation.seed == 7 and dep.pd.threshold == 8
    with pytest.raises(ConfigError) as info:
        configs_for(cfg, {"num_instances": 4}, [7])
    assert info.value.field == "deployment.num_instances"
    assert_clean_error(*cli_in_process("capacity", "--search", "instances", "--slo", "ttft_p99_ms<500",
                                       "--prefill-instances", "1", "--decode-instances", "2"),
                       ["--search", "prefill and decode pools", "sweep"])


def test_a_setting_the_decider_does_not_read():
    # the deciders that read each setting are accepted with it
    build_config(config(entry(pd={"decider": "always", "on_decode_full": "drop", "transfer": {"contention": "link"}})))
    build_config(config(entry(pd={"decider": "never", "transfer": {}})))  # (an empty mapping sets nothing)
    # a later layer that switches the decider leaves the file's threshold as a notice, as for policies
    file = {"pd": {"prefill_instances": 1, "decode_instances": 1, "threshold": 4}}
    assert build_config(file, {"pd_decider": "never"}).deployment_list()[0].pd.decider == "never"
    assert with_overrides(build_config(file), pd_decider="always").pd.threshold == 4  # (a checked config's)
    with pytest.raises(ConfigError) as info:
        build_config({"pd": {"prefill_instances": 1, "decode_instances": 1, "decider": "never"}},
                     {"pd_transfer_charge": "full-prompt"})
    assert info.value.field == "--pd-transfer-charge"
