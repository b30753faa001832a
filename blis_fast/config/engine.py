"""vLLM engine settings of one simulated deployment (docs/semantics.md §3, §6)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields

from blis_fast.errors import ConfigError

INT32_MAX = 2**31 - 1


def _opt(default, help_text: str, lo=None, hi=None):
    """A dataclass field with help text and (for integers) its inclusive range."""
    return field(default=default, metadata={"help": help_text, "range": (lo, hi)})


@dataclass(frozen=True)
class EngineConfig:
    """Per-instance vLLM engine configuration; validated on construction."""

    tp: int = _opt(1, "tensor parallelism: GPUs sharing each layer", 1, 64)
    pp: int = _opt(1, "pipeline parallelism: stages the layers are split into", 1, 64)
    dp: int = _opt(1, "data parallelism: engine replicas (MoE experts are spread over dp·tp GPUs)", 1, 1024)
    max_num_seqs: int = _opt(256, "most requests in one batch (vLLM --max-num-seqs)", 1, 1_048_576)
    max_num_batched_tokens: int = _opt(
        2048, "token budget of one step (vLLM --max-num-batched-tokens)", 1, INT32_MAX)
    block_size: int = _opt(16, "tokens per KV-cache block", 1, 1024)
    gpu_memory_utilization: float = _opt(
        0.9, "fraction of GPU memory vLLM may use for weights + KV cache, in (0, 1]")
    total_kv_blocks: int | None = _opt(
        None, "KV blocks per instance; None = coefficient set's value, else derived from GPU memory", 1, None)
    long_prefill_token_threshold: int = _opt(
        0, "cap on new prompt tokens one request gets per step while others wait (0 = off)", 0, INT32_MAX)
    enable_prefix_caching: bool = _opt(True, "reuse cached KV blocks of identical prompt prefixes")

    def __post_init__(self) -> None:
        self.validate()

    @property
    def total_gpus(self) -> int:
        """GPUs one deployment uses: tp·pp·dp."""
        return self.tp * self.pp * self.dp

    @property
    def expert_parallelism(self) -> int:
        """GPUs the MoE experts are spread over: dp·tp."""
        return self.dp * self.tp

    def validate(self) -> None:
        """Raise ConfigError (``engine.<field>``, with the allowed range) on the first bad value."""
        for f in fields(self):
            value = getattr(self, f.name)
            name = f"engine.{f.name}"
            if f.name == "gpu_memory_utilization":
                if (isinstance(value, bool) or not isinstance(value, numbers.Real)
                        or not math.isfinite(value) or not 0 < value <= 1):
                    raise ConfigError(name, f"must be a number in (0, 1], got {value!r}")
            elif f.name == "enable_prefix_caching":
                if not isinstance(value, bool):
                    raise ConfigError(name, f"must be true or false, got {value!r}")
            elif f.name == "total_kv_blocks" and value is None:
                continue
            else:
                lo, hi = f.metadata["range"]
                if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lo or (
                        hi is not None and value > hi):
                    allowed = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
                    none = " (or null)" if f.name == "total_kv_blocks" else ""
                    raise ConfigError(name, f"must be an integer {allowed}{none}, got {value!r}")
