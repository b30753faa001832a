"""Resolve a validated SimConfig against the shipped data (model facts, GPU, latency
model, KV blocks) and build the workload it describes."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

from blis_fast.config import memory
from blis_fast.config import (
    HardwareConfig,
    LatencyModel,
    ModelConfig,
    load_hardware,
    load_model_config,
    resolve_latency_model,
)
from blis_fast.config.sim import SimConfig, build_config, flag_for
from blis_fast.config.validate import INT32_MAX, show
from blis_fast.errors import ConfigError
from blis_fast.workload import DistributionSpec, Workload, generate_distribution, load_blis_trace, load_preset
from blis_fast.workload.spec import load_spec
from blis_fast.workload.generate import generate_from_spec
from blis_fast.workload.formats.rich_trace import is_rich_trace, load_trace
from blis_fast.workload import distribution, generate
from blis_fast.run.tables import check_kv_blocks, describe_estimate, estimate_state_bytes
from blis_fast.policy import compile_policies

MAX_MODEL_FILE_BYTES = 16 * 2**20
MAX_WEIGHT_STREAM_US = 1e9  # one roofline step streaming the weights once must take less (~17 minutes)

@dataclass(frozen=True, eq=False)
class Setup:
    """A SimConfig resolved against the shipped data: model facts, GPU, latency model."""

    config: SimConfig
    model: ModelConfig
    hardware: HardwareConfig
    latency: LatencyModel

    @property
    def compat(self) -> bool:
        """True in blis-2026.02 compatibility mode."""
        return self.config.simulation.compat is not None


def _load_model(name: str) -> ModelConfig:
    """load_model_config with the file checked first: size, and nesting (no RecursionError)."""
    p = Path(name)
    try:
        f = p / "config.json" if p.is_dir() else p
        if f.is_file() and f.stat().st_size > MAX_MODEL_FILE_BYTES:
            raise ConfigError("model", f"{show(str(f))} is larger than {MAX_MODEL_FILE_BYTES // 2**20} MiB")
    except OSError as exc:
        raise ConfigError("model", f"cannot read {show(name)}: {exc.strerror or exc}") from None
    try:
        return load_model_config(name)
    except RecursionError:
        raise ConfigError("model", f"{show(name)}: the JSON is nested too deeply") from None
    except OSError as exc:
        raise ConfigError("model", f"cannot read {show(name)}: {exc.strerror or exc}") from None


def check_model_fits(model: ModelConfig, hardware: HardwareConfig, tp: int) -> None:
    """The model's shape is one vLLM can serve at this TP, and small enough for the
    arithmetic: every dimension <= 2^31-1, attention heads divisible by TP (KV heads
    divisible by TP or TP by them), weights streamed once per step in < 1e9 µs."""
    for f in fields(model):
        v = getattr(model, f.name)
        if isinstance(v, int) and not isinstance(v, bool) and v > INT32_MAX:
            raise ConfigError(f"model.{f.name}", f"must be <= {INT32_MAX}, got {show(v)}")
    if model.num_heads % tp:
        raise ConfigError("engine.tp", f"must divide the model's {model.num_heads} attention heads "
                                       f"(num_attention_heads of {model.name}), got {tp}")
    kv = model.num_kv_heads
    if kv % tp and tp % kv:
        raise ConfigError("engine.tp", f"must divide the model's {kv} KV heads or be a multiple of them "
                                       f"(num_key_value_heads of {model.name}), got {tp}")
    stream_us = float(model.layer_weight_bytes) / tp / hardware.bandwidth_bytes_per_s * 1e6
    if not math.isfinite(stream_us) or stream_us > MAX_WEIGHT_STREAM_US:
        raise ConfigError("model", f"{model.name} is too large to simulate: one step would stream "
                                   f"{float(model.layer_weight_bytes) / 2**30:.3g} GiB of weights "
                                   f"({stream_us:.3g} µs on {hardware.name} at TP={tp})")


def resolve(config: SimConfig) -> Setup:
    """Resolve model, hardware and latency model (ConfigError on anything unknown or
    beyond what can be simulated)."""
    model = _load_model(config.model)
    hardware = load_hardware(config.hardware)
    check_model_fits(model, hardware, config.engine.tp)
    latency = resolve_latency_model(
        model, hardware, config.engine, config.model,
        latency_model=config.latency_model, alpha_coeffs=config.alpha_coeffs,
        beta_coeffs=config.beta_coeffs, vllm_version=config.vllm_version,
    )
    return Setup(config, model, hardware, latency)


def distribution_spec(config: SimConfig) -> DistributionSpec:
    """The DistributionSpec of a non-trace workload: preset values, then explicit settings."""
    w = config.workload
    params = load_preset(w.type) if w.type != "distribution" else {}
    for f in fields(DistributionSpec):
        value = getattr(w, f.name, None)
        if value is not None:
            params[f.name] = value
    params["rate"] = w.rate * w.rate_scale
    params["num_requests"] = w.num_requests
    params["arrival"] = w.arrival or ("constant" if config.simulation.compat else "poisson")
    try:
        return DistributionSpec(**params).validate("workload")
    except ConfigError as exc:  # name the flag too: the value may come from a preset or a flag
        raise ConfigError(f"{exc.field} ({flag_for(exc.field)})", exc.message) from None


def workload_spec(config: SimConfig):
    """The config's workload spec, its rates multiplied by ``workload.rate_scale``."""
    return load_spec(config.workload.spec_filepath).scaled(config.workload.rate_scale)


def build_workload(config: SimConfig) -> Workload:
    """Generate or load the workload the config describes."""
    w = config.workload
    bs = config.engine.block_size
    if w.spec_filepath:  # a workload spec replaces the workload type (docs/workloads.md)
        spec = workload_spec(config)
        seed = config.simulation.seed if config.simulation.seed is not None else spec.effective_seed
        return generate_from_spec(spec, seed, bs)
    if w.type == "traces":
        if is_rich_trace(w.traces_filepath):
            return load_trace(w.traces_filepath, bs)
        rounding = "trunc" if config.simulation.compat else "round"
        return load_blis_trace(w.traces_filepath, bs, arrival_rounding=rounding)
    return generate_distribution(distribution_spec(config), config.simulation.workload_seed, bs)


def expected_workload_size(config: SimConfig) -> tuple[int, float, float, float] | None:
    """(requests, block keys, shared block keys, bytes) the config's workload is expected
    to take, from its parameters, without generating it; None for a trace (its size is
    charged while it is read)."""
    w = config.workload
    bs = config.engine.block_size
    if w.spec_filepath:
        spec = workload_spec(config)
        n, tokens = spec.expected_size()
        keys = tokens / bs
        return int(n), keys, keys, n * generate.GEN_BYTES_PER_REQUEST + keys * generate.KEY_BYTES
    if w.type == "traces":
        return None
    spec = distribution_spec(config)
    n, keys = distribution.expected_size(spec, bs)
    shared = n * (int(spec.prefix_tokens) // bs)  # only the shared prefix's blocks repeat
    return (n, keys, shared,
            n * distribution.GEN_BYTES_PER_REQUEST + keys * distribution.KEY_BYTES + int(spec.prefix_tokens) * 16)


def check_expected_size(config: SimConfig, setup: Setup, per_request: int = 0) -> None:
    """Refuse, before generating anything, a run whose expected workload, tables and
    results exceed the memory budget in force (``simulation.max_memory``)."""
    check_kv_blocks(config, setup.latency)
    size = expected_workload_size(config)
    if size is None:
        n, keys, shared, wl_bytes = 0, 0.0, 0.0, 0.0
    else:
        n, keys, shared, wl_bytes = size
    pol = compile_policies(config.policy)
    parts = estimate_state_bytes(config, setup.latency, n, int(keys), int(keys) + n, pol.uses_prefix_index,
                                 pol.scheduler_kind, n_shared=int(shared))
    parts["workload arrays"] = int(wl_bytes)
    parts["results"] = n * per_request
    memory.check(sum(parts.values()), describe_estimate(parts, config, setup.latency, n, keys),
                 _hint(parts, config))


def _hint(parts: dict, config: SimConfig) -> str:
    big = max(parts, key=parts.get)
    if big == "KV block table":
        return "lower deployment.num_instances / max_instances or engine.total_kv_blocks"
    if big in ("batch tables",):
        return "lower deployment.num_instances or engine.max_num_seqs"
    if big == "router prefix index":
        return "lower policy.prefix_index_capacity or the instance count"
    return "use fewer or shorter requests"
