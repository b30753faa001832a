"""EngineConfig defaults, derived counts and range validation."""

import math

import numpy as np
import pytest

from blis_fast.config import EngineConfig
from blis_fast.errors import ConfigError


def test_defaults():
    e = EngineConfig()
    assert (e.tp, e.pp, e.dp) == (1, 1, 1)
    assert e.max_num_seqs == 256
    assert e.max_num_batched_tokens == 2048
    assert e.block_size == 16
    assert e.gpu_memory_utilization == 0.9
    assert e.total_kv_blocks is None
    assert e.long_prefill_token_threshold == 0
    assert e.enable_prefix_caching is True


def test_derived_counts():
    e = EngineConfig(tp=4, pp=2, dp=3)
    assert e.total_gpus == 24
    assert e.expert_parallelism == 12


def test_numpy_ints_accepted():
    assert EngineConfig(tp=np.int64(2)).tp == 2


@pytest.mark.parametrize("kwargs,field,allowed", [
    ({"tp": 0}, "engine.tp", "[1, 64]"),
    ({"tp": 65}, "engine.tp", "[1, 64]"),
    ({"pp": 0}, "engine.pp", "[1, 64]"),
    ({"dp": 1025}, "engine.dp", "[1, 1024]"),
    ({"max_num_seqs": 0}, "engine.max_num_seqs", "[1, 1048576]"),
    ({"max_num_seqs": 1_048_577}, "engine.max_num_seqs", "[1, 1048576]"),
    ({"max_num_batched_tokens": 2**31}, "engine.max_num_batched_tokens", "[1, 2147483647]"),
    ({"block_size": 0}, "engine.block_size", "[1, 1024]"),
    ({"block_size": 16.0}, "engine.block_size", "[1, 1024]"),
    ({"block_size": 2.5}, "engine.block_size", "[1, 1024]"),
    ({"max_num_seqs": True}, "engine.max_num_seqs", "[1, 1048576]"),
    ({"tp": "2"}, "engine.tp", "[1, 64]"),
    ({"total_kv_blocks": 0}, "engine.total_kv_blocks", ">= 1"),
    ({"long_prefill_token_threshold": -1}, "engine.long_prefill_token_threshold", "[0,"),
    ({"gpu_memory_utilization": 1.5}, "engine.gpu_memory_utilization", "(0, 1]"),
    ({"gpu_memory_utilization": 0.0}, "engine.gpu_memory_utilization", "(0, 1]"),
    ({"gpu_memory_utilization": math.nan}, "engine.gpu_memory_utilization", "(0, 1]"),
    ({"gpu_memory_utilization": math.inf}, "engine.gpu_memory_utilization", "(0, 1]"),
    ({"gpu_memory_utilization": True}, "engine.gpu_memory_utilization", "(0, 1]"),
    ({"enable_prefix_caching": 1}, "engine.enable_prefix_caching", "true or false"),
])
def test_invalid_values(kwargs, field, allowed):
    with pytest.raises(ConfigError) as e:
        EngineConfig(**kwargs)
    assert e.value.field == field
    assert allowed in str(e.value)


def test_nan_as_integer_rejected():
    with pytest.raises(ConfigError, match="engine.max_num_seqs"):
        EngineConfig(max_num_seqs=math.nan)


def test_edges_accepted():
    e = EngineConfig(tp=64, pp=64, dp=1024, max_num_seqs=1_048_576, max_num_batched_tokens=2**31 - 1,
                     block_size=1024, gpu_memory_utilization=1.0, total_kv_blocks=1,
                     long_prefill_token_threshold=0, enable_prefix_caching=False)
    e.validate()
