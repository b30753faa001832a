"""Settings through ``blis_fast.simulate`` (docs/semantics.md §1, §11): invalid values raise a
ConfigError naming the field, workload presets as flat overrides, instance-pool bounds
(only ``num_instances`` are active; headroom changes nothing), custom model config files."""

from __future__ import annotations

import json

import pytest

import blis_fast
from blis_fast import ConfigError
from builders import HAND_STEPS, LLAMA_8B_HF

# ============================================================================ config validity


@pytest.mark.parametrize("kw, field_part", [
    (dict(max_num_seqs=0), "max"),
    (dict(max_num_batched_tokens=0), "max"),
    (dict(tp=0), "tp"),
    (dict(gpu_memory_utilization=1.5), "gpu"),
    (dict(gpu_memory_utilization=0), "gpu"),
    (dict(block_size_in_tokens=0), "block"),
    (dict(total_kv_blocks=0), "kv"),
    (dict(rate=0), "rate"),
    (dict(rate=-1), "rate"),
    (dict(rate=float("nan")), "rate"),
    (dict(rate=float("inf")), "rate"),
    (dict(num_requests=0), "num"),
    (dict(num_instances=0), "instances"),
    (dict(horizon=-1), "horizon"),
    (dict(compat="bogus"), "compat"),
    (dict(latency_model="bogus"), "latency"),
    (dict(hardware="NOPE"), "hardware"),
    (dict(model="nope/not-a-model"), "model"),
    (dict(prompt_tokens_stdev=-1), "stdev"),
    (dict(prompt_tokens_min=50, prompt_tokens_max=10), "prompt_tokens"),
    (dict(beta_coeffs=[1, 2]), "beta"),
])
def test_invalid_config_raises_config_error(kw, field_part):
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(num_requests=kw.pop("num_requests", 5), **kw)
    assert field_part in ei.value.field.replace("-", "_")
    assert isinstance(ei.value, ValueError)


def test_invalid_workload_type():
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate({"workload": {"type": "bogus", "num_requests": 5}})
    assert "workload" in ei.value.field


def test_workload_preset_as_flat_override_readme_example():
    r = blis_fast.simulate(workload="chatbot", rate=20, num_requests=20, num_instances=4)
    assert r.cluster["completed_requests"] == 20


def test_workload_bogus_flat_override_is_config_error():
    with pytest.raises(ConfigError):
        blis_fast.simulate(workload="bogus", num_requests=5)


def test_unknown_setting_is_rejected():
    with pytest.raises(ConfigError):
        blis_fast.simulate(num_requests=5, no_such_setting=3)


@pytest.mark.parametrize("kw", [
    dict(num_instances=3, min_instances=4),
    dict(num_instances=3, max_instances=2),
    dict(num_instances=3, min_instances=3, max_instances=2),
    dict(num_instances=2, min_instances=0, max_instances=4),
])
def test_pool_bounds_violations(kw):
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(num_requests=5, **kw)
    assert "instances" in ei.value.field.replace("-", "_")


@pytest.mark.parametrize("kw", [dict(min_instances=1, max_instances=5), dict(max_instances=5), dict(min_instances=1)])
def test_pool_bounds_other_than_num_instances_are_refused(kw):
    """No autoscaler yet: bounds that differ from num_instances would change nothing."""
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(num_requests=12, rate=5, num_instances=2, **kw)
    assert ei.value.field in ("min_instances", "max_instances") and "no autoscaler" in ei.value.message  # the keyword


def test_min_equals_max_equals_num():
    r = blis_fast.simulate(num_requests=4, num_instances=3, min_instances=3, max_instances=3,
                           total_kv_blocks=100, **HAND_STEPS)
    assert len(r.instances) == 3


def test_model_config_kv_heads_exceed_heads(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**LLAMA_8B_HF, "num_key_value_heads": 64}))
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(num_requests=5, model=str(p), latency_model="roofline")
    assert "kv" in ei.value.field.lower() or "kv" in ei.value.message.lower()


# the small model leaves room for ~590K KV blocks, which the invariant check walks every step (4 s)
@pytest.mark.parametrize("check_invariants", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_model_config_valid_custom_json_runs(tmp_path, check_invariants):
    cfg = {**LLAMA_8B_HF, "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4,
           "num_hidden_layers": 8, "intermediate_size": 4096, "vocab_size": 32000}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    r = blis_fast.simulate(num_requests=10, model=str(p), latency_model="roofline", check_invariants=check_invariants)
    assert r.cluster["completed_requests"] == 10
