"""ModelConfig: loading shipped HF configs, derived sizes, MoE counts, validation."""

import json

import pytest

from blis_fast.config import ModelConfig, known_models, load_model_config
from blis_fast.errors import ConfigError
from builders import LLAMA_8B_HF


def build(**overrides):
    cfg = dict(LLAMA_8B_HF)
    cfg.update(overrides)
    return ModelConfig.from_hf_dict(cfg, "test")


@pytest.mark.parametrize("name", known_models())
def test_every_shipped_model_loads(name):
    m = load_model_config(name)
    assert m.name == name
    assert m.active_params <= m.total_params
    assert m.kv_bytes_per_token == 2 * m.num_layers * m.num_kv_heads * m.head_dim * m.dtype_bytes


def test_shipped_models_include_reference_set():
    assert {"llama-3.1-8b-instruct", "mixtral-8x7b-v0.1", "qwen3-30b-a3b", "deepseek-v2-lite"} <= set(known_models())


def test_llama_8b_sizes():
    m = load_model_config("llama-3.1-8b-instruct")
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim) == (32, 4096, 32, 8, 128)
    assert m.dtype_bytes == 2
    assert m.kv_dim == 1024
    assert m.kv_bytes_per_token == 131072 == 2 * 32 * 8 * 128 * 2
    assert m.total_params == pytest.approx(8.03e9, rel=0.01)
    assert m.active_params == m.total_params
    assert m.weight_bytes == 2 * m.total_params
    assert not m.is_moe


@pytest.mark.parametrize("spelling", ["meta-llama/llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct",
                                      "LLAMA-3.1-8B-INSTRUCT", "llama-3.1-8b-instruct"])
def test_id_spellings(spelling):
    assert load_model_config(spelling).name == "llama-3.1-8b-instruct"


def test_load_by_path(tmp_path):
    d = tmp_path / "my-model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA_8B_HF))
    assert load_model_config(d).name == "my-model"
    assert load_model_config(d / "config.json").kv_bytes_per_token == 131072
    assert load_model_config(str(d / "config.json")).total_params == build().total_params


def test_mixtral_moe_counts():
    m = load_model_config("mistralai/Mixtral-8x7B-v0.1")
    assert m.is_moe and m.num_experts == 8 and m.experts_per_token == 2
    assert m.expert_intermediate_size == 14336  # falls back to intermediate_size
    assert m.active_params < m.total_params
    assert m.total_params == pytest.approx(46.7e9, rel=0.03)
    assert m.active_params == pytest.approx(12.9e9, rel=0.03)


def test_qwen3_moe_active_params():
    m = load_model_config("qwen3-30b-a3b")
    assert (m.num_experts, m.experts_per_token, m.expert_intermediate_size) == (128, 8, 768)
    assert m.head_dim == 128 and m.q_dim == 4096  # explicit head_dim wins over hidden/heads = 64
    assert m.active_params == pytest.approx(3.3e9, rel=0.03)
    assert m.total_params == pytest.approx(30.5e9, rel=0.03)


def test_deepseek_shared_experts():
    m = load_model_config("deepseek-v2-lite")
    assert m.num_experts == 64 and m.experts_per_token == 6
    assert m.shared_expert_intermediate_size == 2 * 1408
    assert m.mlp_width_active == 6 * 1408 + 2 * 1408


def test_defaults_kv_heads_and_intermediate():
    m = build(num_key_value_heads=0, intermediate_size=0)
    assert m.num_kv_heads == 32 and m.intermediate_size == 4 * 4096
    cfg = dict(LLAMA_8B_HF)
    del cfg["num_key_value_heads"], cfg["intermediate_size"]
    m2 = ModelConfig.from_hf_dict(cfg, "x")
    assert m2.num_kv_heads == 32 and m2.intermediate_size == 4 * 4096


def test_text_config_overrides_top_level():
    m = build(text_config={"num_hidden_layers": 4, "torch_dtype": "float32"})
    assert m.num_layers == 4 and m.dtype_bytes == 4


@pytest.mark.parametrize("dtype,b", [("float32", 4), ("float16", 2), ("bfloat16", 2), ("int8", 1),
                                     ("float8_e4m3fn", 1), ("fp8", 1), ("int4", 1)])
def test_dtype_bytes(dtype, b):
    assert build(torch_dtype=dtype).dtype_bytes == b


def test_quantization_config_fp8():
    assert build(quantization_config={"quant_method": "fp8"}).dtype_bytes == 1
    assert build(quantization_config={"quant_method": "gptq", "bits": 4}).dtype_bytes == 1


@pytest.mark.parametrize("overrides,field", [
    ({"num_key_value_heads": 48}, "num_kv_heads"),
    ({"num_key_value_heads": 5}, "num_kv_heads"),          # 32 heads not divisible by 5
    ({"hidden_size": 4100}, "hidden_size"),                # not divisible by 32 heads
    ({"torch_dtype": "float13"}, "torch_dtype"),
    ({"num_hidden_layers": 0}, "num_layers"),
    ({"num_local_experts": 4, "num_experts_per_tok": 8}, "experts_per_token"),
    ({"num_local_experts": 4}, "experts_per_token"),       # MoE without num_experts_per_tok
])
def test_invalid_hf_configs(overrides, field):
    with pytest.raises(ConfigError) as e:
        build(**overrides)
    assert field in e.value.field
    assert field in str(e.value)


def test_explicit_head_dim_allows_indivisible_hidden():
    assert build(hidden_size=4100, head_dim=128).q_dim == 4096


def test_dtype_bytes_three_rejected():
    base = build()
    with pytest.raises(ConfigError, match="dtype_bytes"):
        ModelConfig(**{**base.__dict__, "dtype_bytes": 3})


def test_unknown_model_lists_known():
    with pytest.raises(ConfigError) as e:
        load_model_config("acme/not-a-model")
    assert e.value.field == "model"
    msg = str(e.value)
    assert "not-a-model" in msg
    for name in known_models():
        assert name in msg


def test_malformed_json_names_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(ConfigError) as e:
        load_model_config(p)
    assert str(p) in str(e.value)
