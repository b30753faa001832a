"""Every model with a fitted coefficient set runs out of the box in blackbox mode (α, β
and KV blocks from its set; no architecture config needed), the features that read a
model's architecture say so in one line when it has no config and run with a config
path, and ``blis-fast models`` lists what is known (blis_fast.config.catalog)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blis_fast.config.catalog import find_known_model, known_model_list
from blis_fast.config.coefficients import coefficient_sets, find_coefficients
from blis_fast.config.model import known_models
from blis_fast.errors import ConfigError
from blis_fast.run.api import simulate
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
GRANITE = "ibm-granite/granite-3.1-8b-instruct"  # coefficient sets, no shipped config
PHI = "microsoft/phi-4"  # coefficient sets and a shipped config
TINY = {"num_requests": 3, "rate": 10.0}
NEEDS = "needs the architecture of"
HOW = "--model path/to/config.json"


def _deployments() -> list[tuple[str, str, int, str]]:
    """Every distinct (model id, GPU, TP, vLLM version) of the coefficient file."""
    return list(dict.fromkeys((s.model_id, s.gpu, s.tp, s.vllm_version) for s in coefficient_sets()))


def test_every_coefficient_set_runs_in_blackbox_mode():
    runs = _deployments()
    assert len(runs) > 60  # (the file's 20-odd models on their GPUs and TPs)
    without_config = 0
    for model_id, gpu, tp, version in runs:
        expected = find_coefficients(model_id, gpu, tp, version)
        result = simulate(model=model_id, hardware=gpu, tp=tp, vllm_version=version, **TINY)
        lat = result.setup.latency
        where = (model_id, gpu, tp, version)
        assert lat.kind == "blackbox", where
        assert np.array_equal(lat.alpha, expected.alpha) and np.array_equal(lat.beta, expected.beta), where
        assert lat.total_kv_blocks == expected.total_kv_blocks, where
        assert result.cluster["kv_total_blocks"] == expected.total_kv_blocks, where
        assert result.cluster["completed_requests"] == TINY["num_requests"], where
        without_config += result.setup.model is None
    assert without_config > 40  # (phi-4, granite, gpt-oss, ... run without any architecture)


def test_a_model_without_anything_runs_from_the_explicit_flags():
    result = simulate(model="acme/house-model", alpha_coeffs=[100.0, 1.0, 50.0], beta_coeffs=[5000.0, 20.0, 10.0],
                      total_kv_blocks=4000, **TINY)
    assert result.setup.model is None and result.setup.latency.kind == "blackbox"
    assert result.setup.latency.total_kv_blocks == 4000
    assert result.cluster["completed_requests"] == TINY["num_requests"]
    assert repr(result).startswith("<Result acme/house-model on H100")


@pytest.mark.parametrize("settings, feature", [
    ({"latency_model": "roofline"}, "the roofline latency model"),
    ({"prefill_instances": 1, "decode_instances": 1}, "prefill/decode disaggregation"),
    ({"kv_cpu_bytes": 10**9}, "a KV cache tier"),
])
def test_a_feature_reading_the_architecture_names_what_it_needs(settings, feature):
    with pytest.raises(ConfigError) as exc:
        simulate(model=GRANITE, **TINY, **settings)
    assert exc.value.field == "model"
    message = exc.value.message
    assert message.startswith(feature) and f"{NEEDS} '{GRANITE}'" in message and HOW in message
    assert "no config is shipped for it" in message


def test_derived_kv_blocks_need_the_architecture():
    with pytest.raises(ConfigError) as exc:
        simulate(model="acme/house-model", alpha_coeffs=[0, 0, 0], beta_coeffs=[5000.0, 20.0, 10.0], **TINY)
    assert exc.value.field == "model" and "deriving the KV blocks from GPU memory" in exc.value.message


def test_an_unknown_model_suggests_the_close_ones():
    with pytest.raises(ConfigError) as exc:
        simulate(model="microsoft/phi-5", **TINY)
    assert "the roofline latency model" in exc.value.message
    assert "an unknown model (did you mean microsoft/phi-4?)" in exc.value.message
    with pytest.raises(ConfigError) as exc:
        simulate(model="acme/nothing-like-it", **TINY)
    assert "an unknown model (shipped configs: codellama-34b-instruct-hf, " in exc.value.message


def test_a_missing_set_of_a_model_without_config_does_not_point_at_the_roofline_flag():
    with pytest.raises(ConfigError) as exc:
        simulate(model=GRANITE, tp=8, **TINY)
    assert exc.value.field == "latency_model" and "sets exist for: A100-80 TP1" in exc.value.message
    assert "--latency-model roofline" not in exc.value.message and HOW in exc.value.message
    assert "--total-kv-blocks" in exc.value.message


def test_a_deployments_entry_names_its_model_key():
    with pytest.raises(ConfigError) as exc:
        simulate({"deployments": [{"name": "granite", "model": GRANITE, "hardware": "H100",
                                   "latency_model": "roofline"}]},
                 **TINY)
    assert exc.value.field == "deployments[0].model"


def test_roofline_and_pd_runs_from_the_cli_without_and_with_a_config():
    config = CONFIGS / "models" / "yi-34b" / "config.json"
    for extra in (["--latency-model", "roofline"], ["--prefill-instances", "1", "--decode-instances", "1"]):
        common = ["run", "--hardware", "H100", "--tp", "2", "--num-requests", "3", "--json", *extra]
        assert_clean_error(*cli_in_process(*common, "--model", GRANITE), needles=("error: model: ", NEEDS, HOW))
        code, out, err = cli_in_process(*common, "--model", config)
        assert code == 0, err[-500:]
        assert json.loads(out)["cluster"]["completed_requests"] == 3


# ----------------------------------------------------------------------------- blis-fast models


def test_the_catalog_is_the_union_of_the_coefficient_ids_and_the_shipped_configs():
    names = {m.name for m in known_model_list()}
    assert {s.model_id for s in coefficient_sets()} <= names
    shipped = {m.config.parent.name for m in known_model_list() if m.config is not None}
    assert shipped == set(known_models())
    assert {"llama-2-7b-hf", "llama-4-scout-17b-16e-instruct-fp8-dynamic", "mistral-nemo-instruct-2407", "yi-34b",
            "phi-4", "llama-3.3-70b-instruct"} <= shipped  # (the reference's configs, and two popular ones)
    sources = (CONFIGS / "README.md").read_text(encoding="utf-8")
    for folder in shipped:  # (each with its HuggingFace source)
        assert f"| `{folder}` | [" in sources, folder
    both = find_known_model("llama-3.1-8b-instruct")
    assert both.name == "meta-llama/llama-3.1-8b-instruct" and both.latency_models == ("blackbox", "roofline")
    assert find_known_model("PHI-4").latency_models == ("blackbox", "roofline")
    assert find_known_model("granite-3.1-8b-instruct").latency_models == ("blackbox",)
    assert find_known_model("yi-34b").latency_models == ("roofline",)


def test_models_table():
    code, out, err = cli_in_process("models")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["model", "config", "latency", "models", "GPU", "TP", "vLLM", "KV", "blocks"]
    phi = next(line for line in lines if line.startswith(PHI + " "))
    assert phi.split()[1:7] == ["yes", "blackbox,", "roofline", "A100-80", "1", "v0.8.4"] and phi.endswith("14,645")
    granite = next(line for line in lines if line.startswith(GRANITE + " "))
    assert granite.split()[1:3] == ["no", "blackbox"] and granite.endswith("23,257")
    yi = next(line for line in lines if line.startswith("yi-34b "))
    assert yi.split()[1:3] == ["yes", "roofline"]
    n = len(known_model_list())
    assert lines[-1].startswith(f"{n} models: ")


def test_models_one_and_json():
    code, out, _ = cli_in_process("models", "phi-4")
    assert code == 0 and out.splitlines()[0].split()[-2:] == ["alpha", "beta"]
    assert len(out.splitlines()) == 1 + len(find_known_model(PHI).sets)
    code, out, _ = cli_in_process("models", "--json")
    assert code == 0
    listed = json.loads(out)
    assert [m["model"] for m in listed] == [m.name for m in known_model_list()]
    code, out, _ = cli_in_process("models", PHI, "--json")
    (phi,) = json.loads(out)
    assert phi["config"] == "phi-4" and phi["latency_models"] == ["blackbox", "roofline"]
    first = phi["coefficient_sets"][0]
    assert (first["gpu"], first["tp"], first["vllm_version"], first["total_kv_blocks"]) == \
        ("A100-80", 1, "vllm/vllm-openai:v0.8.4", 14645)
    code, out, _ = cli_in_process("models", "Granite-3.1-8B-Instruct", "--json")
    (granite,) = json.loads(out)
    assert granite["config"] is None and granite["latency_models"] == ["blackbox"]


def test_models_unknown_name_is_one_line():
    assert_clean_error(*cli_in_process("models", "phi5"),
                       needles=("error: model: unknown model 'phi5' (did you mean microsoft/phi-4?)",))


@pytest.mark.parametrize("name", ["a/b" * 40000, "phi\x1b[31m-4x", ""])
def test_models_hostile_name_is_one_short_escaped_line(name):
    line = assert_clean_error(*cli_in_process("models", name), needles=("error: model: unknown model '",))
    assert "\x1b" not in line and len(line) < 600
