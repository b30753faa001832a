"""The run-config ``deployments:`` list (blis_fast.config.deployments, SimConfig.deployment_list,
run.resolve.resolve): the shorthand equals a one-entry list; every bad entry is refused with
one line naming its YAML path (exit 2), and the API raises ConfigError."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from blis_fast.config.sim import build_config, load_yaml, with_overrides
from blis_fast.errors import ConfigError
from blis_fast.run.api import as_config, simulate
from blis_fast.run.resolve import build_workload, resolve
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

ROOT = Path(__file__).resolve().parents[2]
LLAMA = "meta-llama/llama-3.1-8b-instruct"
QWEN = "qwen/qwen2.5-7b-instruct"
SHORTHAND = {"model": LLAMA, "hardware": "H100", "engine": {"tp": 1, "max_num_seqs": 64, "block_size": 32},
             "deployment": {"num_instances": 3}, "workload": {"type": "chatbot", "num_requests": 40}}
ONE_ENTRY = {"deployments": [{"name": "only", "model": LLAMA, "hardware": "H100", "tp": 1,
                              "max_num_running_reqs": 64, "block_size_in_tokens": 32, "instances": 3}],
             "workload": {"type": "chatbot", "num_requests": 40}}


def two(**second) -> dict:
    return {"deployments": [{"name": "a", "model": LLAMA, "hardware": "H100", "instances": 2},
                            {"name": "b", "model": QWEN, "hardware": "A100-80", "instances": 2, **second}]}


def test_shorthand_equals_a_one_entry_list():
    short, listed = build_config(SHORTHAND), build_config(ONE_ENTRY)
    # the list's first entry is mirrored at top level: single-deployment code reads the same config
    assert (listed.model, listed.hardware, listed.engine, listed.deployment) == \
        (short.model, short.hardware, short.engine, short.deployment)
    (a,), (b,) = short.deployment_list(), listed.deployment_list()
    assert a.name == LLAMA and b.name == "only"
    s1, s2 = resolve(short), resolve(listed)
    for d1, d2 in ((s1, s2), (s1.deployments[0], s2.deployments[0])):
        assert d1.model == d2.model and d1.hardware == d2.hardware
        assert d1.latency.kind == d2.latency.kind and d1.latency.total_kv_blocks == d2.latency.total_kv_blocks
        for name in ("alpha", "beta", "roofline"):
            assert np.array_equal(getattr(d1.latency, name), getattr(d2.latency, name))
    r1, r2 = s1.deployments[0], s2.deployments[0]
    assert (r1.engine, r1.instances, r1.first_instance) == (r2.engine, r2.instances, r2.first_instance) == \
        (short.engine, 3, 0)
    assert s1.served_models == s2.served_models == (LLAMA,)
    w1, w2 = build_workload(short), build_workload(listed)
    for name in ("arrival_us", "prompt_len", "output_len", "block_keys", "key_offsets", "model"):
        assert np.array_equal(getattr(w1, name), getattr(w2, name)), name
    assert w1.models == w2.models == (LLAMA,) and not w1.model.any()


def test_resolved_deployments_in_order():
    setup = resolve(build_config({**two(served_model_name="qwen"),
                                  "workload": {"type": "chatbot", "num_requests": 10}}))
    assert [(d.name, d.served_model_name, d.first_instance, d.instances) for d in setup.deployments] == \
        [("a", LLAMA, 0, 2), ("b", "qwen", 2, 2)]
    assert setup.served_models == (LLAMA, "qwen")
    assert setup.deployments[1].hardware.name != setup.deployments[0].hardware.name
    assert setup.latency is setup.deployments[0].latency


def test_round_trips_through_to_dict_and_overrides():
    cfg = build_config(two())
    assert "model" not in cfg.to_dict() and "engine" not in cfg.to_dict()
    assert as_config(cfg.to_dict()).deployments == cfg.deployments
    again = with_overrides(cfg, rate=3.0)
    assert again.deployments == cfg.deployments and again.workload.rate == 3.0
    assert "deployments" not in build_config(None).to_dict()  # (a single-deployment results JSON is unchanged)


def test_shipped_examples_resolve():
    for name, served in (("two-models", (LLAMA, QWEN)), ("hetero-fleet", (LLAMA,))):
        setup = resolve(build_config(load_yaml(ROOT / "configs" / "examples" / f"{name}.yaml")))
        assert setup.served_models == served
        assert [d.latency.kind for d in setup.deployments] == ["blackbox", "blackbox"]
        assert {d.hardware.name for d in setup.deployments} == {"H100", "A100-SXM"}


BAD = [
    ("duplicate", {"deployments": [{"name": "a", "model": LLAMA}, {"name": "a", "model": LLAMA}]},
     ["deployments[1].name", "duplicate"]),
    ("zero instances", two(instances=0), ["deployments[1].instances", "[1, 65536]"]),
    ("two block sizes", {"deployments": [{"name": "a", "model": LLAMA},
                                         {"name": "b", "model": LLAMA, "block_size_in_tokens": 32}]},
     ["deployments[1].block_size", "must agree", "prefix-cache keys are per block"]),
    ("empty", {"deployments": []}, ["deployments:", "at least one"]),
    ("no coefficients", two(model=LLAMA, hardware="H100", tp=8), ["deployments[1].latency_model", "roofline"]),
    ("unknown GPU", two(hardware="Z100"), ["deployments[1].hardware", "unknown GPU"]),
    ("bad tp", two(tp=3), ["deployments[1].tp"]),
    ("too many", {"deployments": [{"name": f"d{i}", "model": LLAMA} for i in range(65)]},
     ["deployments:", "at most 64"]),
    ("too many instances", {"deployments": [{"name": f"d{i}", "model": LLAMA, "instances": 40000}
                                            for i in range(2)]}, ["deployments:", "65536"]),
    ("unknown key", two(gpus=2), ["deployments[1].gpus", "unknown key"]),
    ("missing model", {"deployments": [{"name": "a"}]}, ["deployments[0].model", "required"]),
    ("given twice", two(max_num_seqs=4, max_num_running_reqs=8), ["deployments[1].max_num_running_reqs", "twice"]),
    ("top-level model", {**two(), "model": LLAMA}, ["model:", "deployments[i].model"]),
    ("top-level engine", {**two(), "engine": {"max_num_seqs": 8}}, ["engine.max_num_seqs", "deployments[i]"]),
    ("one model two names", {"deployments": [{"name": "a", "model": LLAMA, "served_model_name": "m"},
                                             {"name": "b", "model": QWEN, "served_model_name": "m"}]},
     ["deployments[1].model", "served_model_name"]),
]


@pytest.mark.parametrize("data,needles", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_deployments_give_one_line(tmp_path, data, needles):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    assert_clean_error(*cli_in_process("run", "--config", path), needles)
    field = needles[0].rstrip(":")
    with pytest.raises(ConfigError) as info:
        simulate(data)
    assert info.value.field == field


def test_flag_for_a_per_deployment_setting_is_refused(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(two()))
    assert_clean_error(*cli_in_process("run", "--config", path, "--num-instances", "4"),
                       ["--num-instances", "deployments[i].instances"])


def test_api_keyword_runs_several_deployments():
    with pytest.raises(ConfigError) as info:
        simulate(deployments=two()["deployments"], workload="chatbot", num_requests=5)
    assert info.value.field == "workload.type"  # (two models, a preset: refused before anything runs)
    # one model on mixed GPUs: the router chooses among both deployments' instances
    result = simulate(deployments=[{"name": "h", "model": LLAMA}, {"name": "a", "model": LLAMA, "hardware": "A100-80"}],
                      num_requests=6, rate=100)
    assert len(result.state.inst) == 2 and sorted(set(result.state.reqs["instance"])) == [0, 1]


def test_a_simconfig_built_in_python_mirrors_its_first_deployment():
    from blis_fast.config.deployments import DeploymentSpec
    from blis_fast.config.engine import EngineConfig
    from blis_fast.config.sim import SimConfig

    dep = DeploymentSpec(name="q", model=QWEN, hardware="A100-80", instances=3, engine=EngineConfig(block_size=32))
    cfg = SimConfig(deployments=(dep,))
    assert (cfg.model, cfg.hardware, cfg.engine.block_size, cfg.deployment.num_instances) == (QWEN, "A100-80", 32, 3)
    with pytest.raises(ConfigError) as info:
        SimConfig(deployments=(dep, dep))
    assert info.value.field == "deployments[1].name"
