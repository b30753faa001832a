"""Requests carry a model (run.resolve.assign_models): a spec client's ``model:``, a BLIS
trace's model column, a distribution's single model; unknown models refused before the
run with the served ones (and counts, for a trace); one deployment takes every request."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from blis_fast.config.sim import build_config
from blis_fast.errors import ConfigError
from blis_fast.run.resolve import build_workload
from blis_fast.workload.generate import generate_from_spec
from blis_fast.workload.spec import parse_spec
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

ROOT = Path(__file__).resolve().parents[2]
LLAMA = "meta-llama/llama-3.1-8b-instruct"
QWEN = "qwen/qwen2.5-7b-instruct"
TWO_MODELS = [{"name": "llama", "model": LLAMA, "instances": 2},
              {"name": "qwen", "model": QWEN, "hardware": "A100-80", "instances": 2}]


def client(name: str, rate: float, model: str | None = None) -> dict:
    c = {"name": name, "rate": rate, "prompt_tokens": {"type": "uniform", "min": 10, "max": 400},
         "output_tokens": {"type": "uniform", "min": 1, "max": 100}}
    return c if model is None else {**c, "model": model}


def spec_file(tmp_path: Path, clients: list[dict]) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"seed": 7, "duration_s": 20, "clients": clients}))
    return path


def config(deployments, **workload):
    return build_config({"deployments": deployments, "workload": workload})


def test_spec_clients_name_their_model(tmp_path):
    spec = spec_file(tmp_path, [client("chat", 3, QWEN), client("code", 2), client("sum", 1, LLAMA)])
    wl = build_workload(config(TWO_MODELS, spec_filepath=str(spec)))
    assert wl.models == (LLAMA, QWEN)
    # client 1 names none: the first deployment's model
    assert np.array_equal(wl.model, np.array([1, 0, 0], np.int32)[wl.client])
    assert set(np.unique(wl.client)) == {0, 1, 2}


def test_shipped_two_model_spec(tmp_path):
    cfg = build_config({"deployments": TWO_MODELS,
                        "workload": {"spec_filepath": str(ROOT / "configs" / "workloads" / "two-models.yaml")}})
    wl = build_workload(cfg)
    assert np.array_equal(wl.model, wl.client) and np.bincount(wl.model).min() > 0


def test_a_clients_requests_do_not_depend_on_the_other_clients():
    # each client draws from its own streams (workload.client.<name>.*): with a generation
    # window (duration_s), its requests are the same alone or next to others
    alone = generate_from_spec(parse_spec({"seed": 3, "duration_s": 30, "clients": [client("a", 2, LLAMA)]}))
    both = generate_from_spec(parse_spec({"seed": 3, "duration_s": 30,
                                          "clients": [client("b", 5, QWEN), client("a", 2, LLAMA)]}))
    mine = both.client == 1
    for name in ("arrival_us", "prompt_len", "output_len"):
        assert np.array_equal(getattr(alone, name), getattr(both, name)[mine]), name


def test_one_deployment_takes_every_request_whatever_the_spec_says(tmp_path):
    spec = spec_file(tmp_path, [client("a", 2), client("b", 1, QWEN)])
    wl = build_workload(config(TWO_MODELS[:1], spec_filepath=str(spec)))
    assert wl.models == (LLAMA,) and not wl.model.any()


def trace_file(tmp_path: Path, models: list[str]) -> Path:
    path = tmp_path / "trace.csv"
    rows = ["arrival_time,request_id,model,prefill_tokens,decode_tokens"]
    rows += [f'{0.1 * i},r{i},{m},"[{i + 1}, 2, 3]","[4]"' for i, m in enumerate(models)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_trace_model_column(tmp_path):
    path = trace_file(tmp_path, [QWEN, LLAMA, QWEN, QWEN])
    wl = build_workload(config(TWO_MODELS, type="traces", traces_filepath=str(path)))
    assert wl.models == (LLAMA, QWEN) and wl.model.tolist() == [1, 0, 1, 1]
    first = build_workload(config(TWO_MODELS, type="traces", traces_filepath=str(path), num_requests=2))
    assert first.model.tolist() == [1, 0]


def test_one_deployment_ignores_the_trace_model_column(tmp_path):
    # compat: BLIS ignores the column; with one deployment every request is that deployment's
    path = trace_file(tmp_path, ["foo", "bar", "foo"])
    wl = build_workload(config(TWO_MODELS[:1], type="traces", traces_filepath=str(path)))
    assert wl.models == (LLAMA,) and wl.model.tolist() == [0, 0, 0]


def test_unknown_trace_models_are_refused_with_counts(tmp_path):
    path = trace_file(tmp_path, ["foo", LLAMA, "foo", "bar", "foo"])
    cfg_path = tmp_path / "run.yaml"
    cfg_path.write_text(yaml.safe_dump({"deployments": TWO_MODELS,
                                        "workload": {"type": "traces", "traces_filepath": str(path)}}))
    assert_clean_error(*cli_in_process("run", "--config", cfg_path),
                       ["workload.traces_filepath", "trace model 'foo' (3 requests)", "trace model 'bar' (1 requests)",
                        f"served: {LLAMA}, {QWEN}"])


def test_unknown_spec_model_is_refused(tmp_path):
    spec = spec_file(tmp_path, [client("a", 2, LLAMA), client("b", 1, "mistral")])
    cfg_path = tmp_path / "run.yaml"
    cfg_path.write_text(yaml.safe_dump({"deployments": TWO_MODELS, "workload": {"spec_filepath": str(spec)}}))
    assert_clean_error(*cli_in_process("run", "--config", cfg_path),
                       ["clients[1].model", "'mistral'", f"served: {LLAMA}, {QWEN}"])
    with pytest.raises(ConfigError) as info:
        build_workload(config(TWO_MODELS, spec_filepath=str(spec)))
    assert info.value.field == "clients[1].model"
    # with one deployment every request is its, whatever the spec names (as a trace's model column)
    wl = build_workload(config(TWO_MODELS[:1], spec_filepath=str(spec)))
    assert wl.models == (LLAMA,) and not wl.model.any()


def test_spec_model_must_be_a_name(tmp_path):
    spec = spec_file(tmp_path, [client("a", 2, LLAMA), {**client("b", 1), "model": [1]}])
    assert_clean_error(*cli_in_process("run", "--workload-spec", spec), ["clients[1].model", "name"])


def test_distribution_needs_one_model():
    with pytest.raises(ConfigError) as info:
        build_workload(config(TWO_MODELS, type="chatbot", num_requests=10))
    assert info.value.field == "workload.type" and "one client per model" in info.value.message
    # one model on two deployments (mixed GPUs): every request asks for it
    fleet = [TWO_MODELS[0], {"name": "a100", "model": LLAMA, "hardware": "A100-80"}]
    wl = build_workload(config(fleet, type="chatbot", num_requests=10))
    assert wl.models == (LLAMA,) and not wl.model.any()
