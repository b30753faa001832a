"""Choose and compile the step-time model of a deployment (docs/semantics.md §5) and its KV budget (§6)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, fields

import numpy as np

from blis_fast.config.catalog import architecture_needed
from blis_fast.config.coefficients import CoefficientSet, coefficient_sets, find_coefficients, model_id_matches
from blis_fast.config.engine import EngineConfig
from blis_fast.config.hardware import HardwareConfig
from blis_fast.config.model import ModelConfig
from blis_fast.config.validate import as_float, show
from blis_fast.errors import ConfigError
from blis_fast_kernels.schema import N_ROOFLINE, Roofline as R  # the layout only: no numba

LATENCY_MODELS = ("blackbox", "roofline")
AUTO = "auto"  # blackbox where a coefficient set exists, else roofline (what an unset choice does for models
#                without any set)

logger = logging.getLogger("blis_fast.config")
MAX_COEFF = 1e9  # each α / β coefficient, µs (as blis_fast.config.sim)


@dataclass(frozen=True, eq=False)
class LatencyModel:
    """Everything the engine kernel needs to time steps and α delays."""

    kind: str = field(metadata={"help": "'blackbox' (β coefficients) or 'roofline' (analytical)"})
    alpha: np.ndarray = field(metadata={"help": "float64[3]: α0 + α1·L queueing µs, α2 µs per output token"})
    beta: np.ndarray = field(metadata={"help": "float64[3]: β0 + β1·prefill tokens + β2·decodes, µs (blackbox)"})
    roofline: np.ndarray = field(metadata={"help": "float64[N_ROOFLINE] roofline parameters (blis_fast_kernels.schema.Roofline)"})
    total_kv_blocks: int = field(metadata={"help": "KV-cache blocks per instance"})
    source: str = field(metadata={"help": "where coefficients and the KV budget came from (for results)"})


def roofline_params(model: ModelConfig, hardware: HardwareConfig, tp: int) -> np.ndarray:
    """The roofline parameter vector (layout: ``blis_fast_kernels.schema.Roofline``) for ``model`` on ``hardware`` at TP ``tp``."""
    p = np.zeros(N_ROOFLINE, dtype=np.float64)
    layers = model.num_layers
    p[R.LAYERS] = layers
    p[R.HIDDEN] = model.hidden_size
    p[R.HEADS] = model.num_heads
    p[R.HEAD_DIM] = model.head_dim
    p[R.Q_DIM] = model.q_dim
    p[R.KV_DIM] = model.kv_dim
    p[R.MLP_WIDTH_ACTIVE] = model.mlp_width_active
    p[R.KV_BYTES_PER_TOKEN] = model.kv_bytes_per_token
    p[R.ACT_BYTES_PER_TOKEN] = layers * model.hidden_size * model.dtype_bytes
    p[R.WEIGHT_BYTES] = model.layer_weight_bytes
    p[R.TP] = tp
    p[R.PEAK_FLOPS] = hardware.peak_flops
    p[R.VECTOR_PEAK_FLOPS] = 0.1 * hardware.peak_flops
    p[R.BANDWIDTH] = hardware.bandwidth_bytes_per_s
    p[R.MFU_PREFILL] = hardware.mfu_prefill
    p[R.MFU_DECODE] = hardware.mfu_decode
    p[R.LAYER_OVERHEAD_US] = layers * hardware.per_layer_overhead_us
    p[R.ALLREDUCE_US] = 2 * layers * hardware.all_reduce_latency_us if tp > 1 else 0.0
    p[R.STEP_OVERHEAD_US] = hardware.t_overhead_us
    return p


def derive_kv_blocks(model: ModelConfig, hardware: HardwareConfig, engine: EngineConfig) -> int:
    """floor((GPU memory·utilisation − weights/TP) / (block_size·KV bytes per token/TP)); ConfigError if ≤ 0."""
    tp = engine.tp
    free = hardware.memory_bytes * engine.gpu_memory_utilization - model.weight_bytes / tp
    per_block = engine.block_size * model.kv_bytes_per_token / tp
    blocks = math.floor(free / per_block)
    if blocks <= 0:
        gib = 2.0**30
        raise ConfigError(
            "engine.total_kv_blocks",
            f"model {model.name} does not fit: {model.weight_bytes / tp / gib:.1f} GiB of weights per GPU at "
            f"TP={tp} vs {hardware.memory_bytes * engine.gpu_memory_utilization / gib:.1f} GiB usable on "
            f"{hardware.name} (memory_gib·gpu_memory_utilization); raise tp or gpu_memory_utilization, "
            "or set total_kv_blocks")
    return blocks


def _coeffs(values, flag: str) -> np.ndarray | None:
    """Validate a user-given coefficient triple (``--alpha-coeffs`` / ``--beta-coeffs``):
    3 finite numbers in [0, 1e9] µs (the shared checkers, as for the config)."""
    if values is None:
        return None
    if isinstance(values, np.ndarray):
        values = values.tolist()
    if not isinstance(values, (list, tuple)) or len(values) != 3:
        raise ConfigError(flag, f"must be 3 finite numbers in [0, {MAX_COEFF:g}] µs, got {show(values)}")
    return np.array([as_float(x, f"{flag}[{k}]", 0.0, MAX_COEFF, text=False, unit="µs")
                     for k, x in enumerate(values)], dtype=np.float64)


_DEFAULT_GPU_MEMORY_UTILIZATION = next(f.default for f in fields(EngineConfig) if f.name == "gpu_memory_utilization")


def _describe(cs: CoefficientSet) -> str:
    return f"defaults.yaml[{cs.model_id} | {cs.gpu} | TP{cs.tp} | {cs.vllm_version}]"


def resolve_latency_model(model: ModelConfig | None, hardware: HardwareConfig, engine: EngineConfig, model_id: str,
                          latency_model: str | None = None, alpha_coeffs=None, beta_coeffs=None,
                          vllm_version: str | None = None) -> LatencyModel:
    """Pick blackbox or roofline, its coefficients and the KV-block budget (rules in docs/latency-models.md).

    Explicit α/β win over the coefficient file.  ``latency_model`` None or ``"auto"`` means
    blackbox if a coefficient set exists for (model, GPU, TP[, version]) or β is given, else
    roofline -- except that, unset, a model that *has* coefficient sets (for another GPU,
    TP or version) is an error rather than a silent switch to the roofline model (its KV
    budget and step times differ widely); ``"auto"`` or ``"roofline"`` accepts that.

    ``model`` None (a model id without a config): blackbox runs need nothing more; the
    roofline model and KV blocks derived from GPU memory raise the one-line error of
    ``catalog.architecture_needed``.
    """
    alpha = _coeffs(alpha_coeffs, "--alpha-coeffs")
    beta = _coeffs(beta_coeffs, "--beta-coeffs")
    auto = False
    if latency_model is not None:
        latency_model = str(latency_model).strip().lower()
        if latency_model not in LATENCY_MODELS + (AUTO,):
            raise ConfigError("latency_model", f"must be one of {', '.join(LATENCY_MODELS + (AUTO,))} (or unset), "
                                               f"got {show(latency_model)}")
        if latency_model == AUTO:
            latency_model, auto = None, True
    cs = find_coefficients(model_id, hardware.name, engine.tp, vllm_version)
    kind = latency_model or ("blackbox" if (cs is not None or beta is not None) else "roofline")
    if latency_model is None and kind == "roofline":
        where = f"{model_id} on {hardware.name} TP={engine.tp}" + (f", vLLM {vllm_version}" if vllm_version else "")
        others = sorted({f"{s.gpu} TP{s.tp}" + (f" {s.vllm_version}" if vllm_version else "")
                         for s in coefficient_sets() if model_id_matches(model_id, s.model_id)})
        if others and not auto:
            if model is not None:
                how = ("choose --latency-model roofline (analytical) or auto (blackbox where a set exists, else "
                       "roofline), or give --alpha-coeffs and --beta-coeffs")
            else:  # (the roofline model would need the architecture: say so rather than send the user there)
                how = ("give --alpha-coeffs, --beta-coeffs and --total-kv-blocks, or, for the roofline latency "
                       "model, its HuggingFace config.json as the model (--model path/to/config.json: no config "
                       "is shipped for it)")
            raise ConfigError("latency_model", f"no blackbox coefficient set for {where} (sets exist for: "
                                               f"{', '.join(others[:6])}{' ...' if len(others) > 6 else ''}); "
                                               + how)
        logger.info("blis-fast: no coefficient set for %s: using the roofline latency model", where)
    sources = []
    if kind == "blackbox":
        if beta is None and cs is None:
            version = f", vLLM {vllm_version}" if vllm_version else ""
            raise ConfigError("latency_model", f"no blackbox coefficients for {model_id} on {hardware.name} "
                                               f"TP={engine.tp}{version}; pass --alpha-coeffs and --beta-coeffs, "
                                               "or use the roofline latency model")
        if alpha is None and cs is None:
            raise ConfigError("alpha_coeffs", "the blackbox model needs --alpha-coeffs as well as --beta-coeffs "
                                              f"(no coefficient set for {model_id} on {hardware.name} TP={engine.tp})")
        sources.append("beta: " + ("--beta-coeffs" if beta is not None else _describe(cs)))
        sources.append("alpha: " + ("--alpha-coeffs" if alpha is not None else _describe(cs)))
        beta = beta if beta is not None else np.array(cs.beta, dtype=np.float64)
        alpha = alpha if alpha is not None else np.array(cs.alpha, dtype=np.float64)
    else:
        if beta is not None:
            raise ConfigError("beta_coeffs", "--beta-coeffs applies only to the blackbox latency model")
        if model is None:
            raise architecture_needed(model_id, "the roofline latency model")
        sources.append("step time: roofline (" + hardware.name + ")")
        sources.append("alpha: " + ("--alpha-coeffs" if alpha is not None else "zeros (roofline)"))
        alpha = alpha if alpha is not None else np.zeros(3, dtype=np.float64)
        beta = np.zeros(3, dtype=np.float64)
    if engine.total_kv_blocks is not None or cs is not None:
        if engine.gpu_memory_utilization != _DEFAULT_GPU_MEMORY_UTILIZATION:  # (every setting changes the run)
            given = ("--total-kv-blocks" if engine.total_kv_blocks is not None
                     else f"the coefficient set {_describe(cs)}")
            raise ConfigError("gpu_memory_utilization", f"has no effect: the KV blocks come from {given}; it sizes "
                                                        "the KV cache only when the blocks are derived from GPU "
                                                        "memory (no coefficient set, no --total-kv-blocks); to "
                                                        "change the KV cache, set --total-kv-blocks")
    if engine.total_kv_blocks is not None:
        blocks = engine.total_kv_blocks
        sources.append("total_kv_blocks: engine config")
    elif cs is not None:
        blocks = cs.total_kv_blocks
        sources.append("total_kv_blocks: " + _describe(cs))
    else:
        if model is None:
            raise architecture_needed(model_id, "deriving the KV blocks from GPU memory (no coefficient set for "
                                                f"{hardware.name} TP={engine.tp}, no --total-kv-blocks)")
        blocks = derive_kv_blocks(model, hardware, engine)
        sources.append(f"total_kv_blocks: derived from {hardware.memory_gib:g} GiB x "
                       f"{engine.gpu_memory_utilization:g} ({hardware.name})")
    # (a blackbox step never reads the roofline row: zeros when the architecture is unknown)
    roofline = roofline_params(model, hardware, engine.tp) if model is not None else np.zeros(N_ROOFLINE, np.float64)
    return LatencyModel(kind=kind, alpha=alpha, beta=beta, roofline=roofline,
                        total_kv_blocks=int(blocks), source="; ".join(sources))
