"""Coefficient-file lookups, GPU aliases, and latency-model resolution."""

import numpy as np
import pytest

from blis_fast.config import (EngineConfig, canonical_gpu, coefficient_gpu_name, coefficient_sets,
                              default_deployment, derive_kv_blocks, find_coefficients, load_hardware,
                              load_model_config, resolve_latency_model)
from blis_fast.errors import ConfigError
from builders import LLAMA


def test_llama_h100_tp1():
    cs = find_coefficients(LLAMA, "H100", 1)
    assert cs is not None
    assert cs.beta == pytest.approx((5752.705191348184, 17.25086436834028, 5.999143920128404), abs=0)
    assert cs.alpha[0] == pytest.approx(232.46191091038054)
    assert cs.total_kv_blocks == 29205
    assert cs.vllm_version == "vllm/vllm-openai:v0.8.4"


@pytest.mark.parametrize("model_id", ["meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b-instruct"])
def test_id_case_and_short_name(model_id):
    assert find_coefficients(model_id, "h100", 1) == find_coefficients(LLAMA, "H100", 1)


def test_version_filter():
    assert find_coefficients(LLAMA, "H100", 1, "vllm/vllm-openai:v0.8.4") is not None
    assert find_coefficients(LLAMA, "H100", 1, "v0.8.4") is not None
    assert find_coefficients(LLAMA, "H100", 1, "v9.9.9") is None


def test_no_match():
    assert find_coefficients(LLAMA, "H100", 3) is None
    assert find_coefficients("acme/unknown", "H100", 1) is None


@pytest.mark.parametrize("alias", ["A100", "a100-80", "A100-SXM", "a100-sxm"])
def test_a100_aliases(alias):
    assert canonical_gpu(alias) == "A100-SXM"
    assert coefficient_gpu_name(alias) == "A100-80"
    cs = find_coefficients(LLAMA, alias, 1)
    assert cs is not None and cs.gpu == "A100-80"
    assert load_hardware(alias).name == "A100-SXM"


def test_unknown_gpu():
    with pytest.raises(ConfigError) as e:
        canonical_gpu("B200")
    assert e.value.field == "hardware"
    assert "H100" in str(e.value) and "A100-SXM" in str(e.value)


def test_hardware_memory_added():
    assert load_hardware("H100").memory_gib == 80
    assert load_hardware("H100").bandwidth_bytes_per_s == pytest.approx(3.35e12 * 0.72)


def test_first_match_wins_in_shipped_file():
    seen = set()
    for cs in coefficient_sets():
        key = (cs.model_id, cs.gpu, cs.tp)
        if key in seen:
            continue
        seen.add(key)
        assert find_coefficients(cs.model_id, cs.gpu, cs.tp) is cs


def test_first_match_wins(tmp_path):
    p = tmp_path / "coeffs.yaml"
    p.write_text("""
models:
- {id: org/m, GPU: H100, tensor_parallelism: 1, vllm_version: a, alpha_coeffs: [1, 2, 3],
   beta_coeffs: [10, 20, 30], total_kv_blocks: 100}
- {id: org/m, GPU: H100, tensor_parallelism: 1, vllm_version: b, alpha_coeffs: [4, 5, 6],
   beta_coeffs: [40, 50, 60], total_kv_blocks: 200}
defaults:
  org/m: {GPU: A100-80, tensor_parallelism: 2, vllm_version: b}
""")
    assert find_coefficients("org/m", "H100", 1, path=p).total_kv_blocks == 100
    assert find_coefficients("M", "H100", 1, vllm_version="b", path=p).total_kv_blocks == 200
    d = default_deployment("m", path=p)
    assert (d.gpu, d.tp, d.vllm_version) == ("A100-80", 2, "b")


def test_malformed_coefficient_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("models:\n- {id: x, GPU: H100, tensor_parallelism: 1, alpha_coeffs: [1, 2], "
                 "beta_coeffs: [1, 2, 3], total_kv_blocks: 1}\n")
    with pytest.raises(ConfigError, match="alpha_coeffs"):
        find_coefficients("x", "H100", 1, path=p)


def test_default_deployment():
    d = default_deployment("Llama-3.1-8B-Instruct")
    assert (d.gpu, d.tp) == ("H100", 2)
    assert default_deployment("acme/unknown") is None


# ---- resolve_latency_model -------------------------------------------------------------

def resolve(model_id=LLAMA, gpu="H100", engine=None, **kw):
    return resolve_latency_model(load_model_config(model_id), load_hardware(gpu), engine or EngineConfig(),
                                 model_id, **kw)


def test_auto_picks_blackbox_from_file():
    lm = resolve()
    assert lm.kind == "blackbox"
    np.testing.assert_array_equal(lm.beta, [5752.705191348184, 17.25086436834028, 5.999143920128404])
    assert lm.alpha.dtype == np.float64 and lm.alpha.shape == (3,)
    assert lm.total_kv_blocks == 29205
    assert "defaults.yaml" in lm.source


def test_auto_falls_back_to_roofline():
    lm = resolve("qwen/qwen3-30b-a3b")
    assert lm.kind == "roofline"
    np.testing.assert_array_equal(lm.alpha, [0, 0, 0])
    assert lm.total_kv_blocks > 0
    assert "derived" in lm.source


def test_explicit_coefficients_win():
    lm = resolve(alpha_coeffs=[1, 2, 3], beta_coeffs=[100.0, 2.0, 3.0])
    assert lm.kind == "blackbox"
    np.testing.assert_array_equal(lm.beta, [100, 2, 3])
    np.testing.assert_array_equal(lm.alpha, [1, 2, 3])
    assert lm.total_kv_blocks == 29205  # still from the matching set
    assert "--beta-coeffs" in lm.source


def test_explicit_coefficients_without_set():
    lm = resolve("qwen3-30b-a3b", alpha_coeffs=[1, 2, 3], beta_coeffs=[4, 5, 6])
    assert lm.kind == "blackbox"


def test_blackbox_without_coefficients_errors():
    with pytest.raises(ConfigError) as e:
        resolve("qwen3-30b-a3b", latency_model="blackbox")
    assert e.value.field == "latency_model"
    with pytest.raises(ConfigError, match="alpha"):
        resolve("qwen3-30b-a3b", latency_model="blackbox", beta_coeffs=[1, 2, 3])


def test_forced_roofline():
    lm = resolve(latency_model="roofline")
    assert lm.kind == "roofline"
    np.testing.assert_array_equal(lm.alpha, [0, 0, 0])
    assert resolve(latency_model="roofline", alpha_coeffs=[5, 0, 7]).alpha[2] == 7
    with pytest.raises(ConfigError, match="beta"):
        resolve(latency_model="roofline", beta_coeffs=[1, 2, 3])
    with pytest.raises(ConfigError, match="latency_model"):
        resolve(latency_model="magic")


@pytest.mark.parametrize("bad", [[1, 2], [1, 2, float("nan")], [1, -2, 3], [1, 2, float("inf")], "abc",
                                 [True, 1, 2]])
def test_bad_user_coefficients(bad):
    with pytest.raises(ConfigError, match="--beta-coeffs"):
        resolve(alpha_coeffs=[1, 2, 3], beta_coeffs=bad)
    with pytest.raises(ConfigError, match="--alpha-coeffs"):
        resolve(alpha_coeffs=bad, beta_coeffs=[1, 2, 3])


def test_engine_kv_blocks_win():
    assert resolve(engine=EngineConfig(total_kv_blocks=1234)).total_kv_blocks == 1234


def test_derived_kv_blocks_llama_h100():
    blocks = derive_kv_blocks(load_model_config(LLAMA), load_hardware("H100"), EngineConfig())
    assert 20_000 <= blocks <= 40_000
    tp2 = derive_kv_blocks(load_model_config(LLAMA), load_hardware("H100"), EngineConfig(tp=2))
    assert tp2 > 2 * blocks  # weights shrink per GPU too


def test_model_too_big_errors():
    with pytest.raises(ConfigError) as e:
        resolve("mixtral-8x7b-v0.1", latency_model="roofline")
    assert "does not fit" in str(e.value)
    assert resolve("mixtral-8x7b-v0.1", engine=EngineConfig(tp=2)).total_kv_blocks > 0
