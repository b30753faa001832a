"""vLLM engine settings of one simulated deployment (docs/semantics.md §3, §6)."""

from __future__ import annotations

from dataclasses import dataclass

from blis_fast.config.validate import INT32_MAX, check_fields
from blis_fast.config.validate import setting as _opt


@dataclass(frozen=True)
class EngineConfig:
    """Per-instance vLLM engine configuration; validated on construction."""

    tp: int = _opt(1, "tensor parallelism: GPUs sharing each layer", lo=1, hi=64)
    pp: int = _opt(1, "pipeline parallelism: stages the layers are split into (not modelled yet: only 1 is accepted)", lo=1, hi=64)
    dp: int = _opt(1, "data parallelism (not modelled yet: only 1 is accepted; simulate replicas as instances)", lo=1, hi=1024)
    max_num_seqs: int = _opt(256, "most requests in one batch (vLLM --max-num-seqs)", lo=1, hi=1_048_576)
    max_num_batched_tokens: int = _opt(
        2048, "token budget of one step (vLLM --max-num-batched-tokens)", lo=1, hi=INT32_MAX)
    block_size: int = _opt(16, "tokens per KV-cache block", lo=1, hi=1024)
    gpu_memory_utilization: float = _opt(
        0.9, "fraction of GPU memory vLLM may use for weights + KV cache, in (0, 1]", lo=0, lo_open=True, hi=1)
    total_kv_blocks: int | None = _opt(
        None, "KV blocks per instance; None = coefficient set's value, else derived from GPU memory", lo=1)
    long_prefill_token_threshold: int = _opt(
        0, "cap on new prompt tokens one request gets per step while others wait (0 = off)", lo=0, hi=INT32_MAX)
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
        check_fields(self, "engine")
