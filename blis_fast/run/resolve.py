"""Resolve a validated SimConfig against the shipped data (model facts, GPU, latency
model, KV blocks) and build the workload it describes."""

from __future__ import annotations

from dataclasses import dataclass, fields

from blis_fast.config import (
    HardwareConfig,
    LatencyModel,
    ModelConfig,
    load_hardware,
    load_model_config,
    resolve_latency_model,
)
from blis_fast.config.sim import SimConfig, build_config, flag_for
from blis_fast.errors import ConfigError
from blis_fast.workload import DistributionSpec, Workload, generate_distribution, load_blis_trace, load_preset

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


def resolve(config: SimConfig) -> Setup:
    """Resolve model, hardware and latency model (ConfigError on anything unknown)."""
    model = load_model_config(config.model)
    hardware = load_hardware(config.hardware)
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
    params["rate"] = w.rate
    params["num_requests"] = w.num_requests
    params["arrival"] = w.arrival or ("constant" if config.simulation.compat else "poisson")
    try:
        return DistributionSpec(**params).validate("workload")
    except ConfigError as exc:  # name the flag too: the value may come from a preset or a flag
        raise ConfigError(f"{exc.field} ({flag_for(exc.field)})", exc.message) from None


def build_workload(config: SimConfig) -> Workload:
    """Generate or load the workload the config describes."""
    w = config.workload
    bs = config.engine.block_size
    if w.spec_filepath:  # a workload spec replaces the workload type (docs/workloads.md)
        from blis_fast.workload.generate import generate_from_spec
        from blis_fast.workload.spec import load_spec

        spec = load_spec(w.spec_filepath)
        seed = config.simulation.seed if config.simulation.seed is not None else spec.effective_seed
        return generate_from_spec(spec, seed, bs)
    if w.type == "traces":
        from blis_fast.workload.formats.rich_trace import is_rich_trace, load_trace

        if is_rich_trace(w.traces_filepath):
            return load_trace(w.traces_filepath, bs)
        rounding = "trunc" if config.simulation.compat else "round"
        return load_blis_trace(w.traces_filepath, bs, arrival_rounding=rounding)
    return generate_distribution(distribution_spec(config), config.simulation.workload_seed, bs)
