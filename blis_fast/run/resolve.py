"""Resolve a validated SimConfig against the shipped data (model facts, GPU, latency
model, KV blocks) and build the workload it describes."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from blis_fast.config import memory
from blis_fast.config import (
    HardwareConfig,
    LatencyModel,
    ModelConfig,
    load_hardware,
    load_model_config,
    resolve_latency_model,
)
from blis_fast.config.catalog import architecture_needed
from blis_fast.config.model import names_a_file, shipped_config_path
from blis_fast.config.deployments import DeploymentSpec, model_block_sizes, served_models
from blis_fast.config.engine import EngineConfig
from blis_fast.config.policy import any_flow_control
from blis_fast.config.flow_control import ClientDeadlines, deadline_columns, resolve_deadlines
from blis_fast.config.disaggregation import PDSpec, PoolSpec
from blis_fast.config.autoscale import ResolvedAutoscale, check_pool_support, resolve_autoscale
from blis_fast.config.kv_tiers import ResolvedKvTiers, resolve_kv_tiers, shorthand_field
from blis_fast.config.sim import SimConfig, flag_for
from blis_fast.config.validate import INT32_MAX, show
from blis_fast.errors import ConfigError
from blis_fast.workload import DistributionSpec, Workload, generate_distribution, load_blis_trace, load_preset
from blis_fast.workload.spec import load_spec
from blis_fast.workload.generate import generate_from_spec
from blis_fast.workload.formats.blis_csv import read_trace_models
from blis_fast.workload.formats.rich_trace import is_rich_trace, load_trace
from blis_fast.workload import distribution, generate
from blis_fast.run.tables import check_kv_blocks, describe_estimate, estimate_state_bytes
from blis_fast.policy import compile_policies
from blis_fast.policy.compile import autoscale_row

MAX_MODEL_FILE_BYTES = 16 * 2**20
MAX_WEIGHT_STREAM_US = 1e9  # one roofline step streaming the weights once must take less (~17 minutes)

@dataclass(frozen=True, eq=False)
class ResolvedPool:
    """One pool of a resolved deployment: its GPU, engine, latency model (with its KV
    blocks) and its instances' rows ``first_instance`` .. ``first_instance + instances - 1``.
    ``role`` is "mono" for a deployment of one pool, else "prefill", "decode" or "both".
    ``kv_tiers``: its KV cache tiers in blocks of its block bytes (the pool's own tier
    setting, else the deployment's; None when no tier holds anything).  ``autoscale``: its
    autoscaling settings in µs with the compiled autoscaler (None without an autoscaler or
    without settings of its own: it keeps its ``instances``)."""

    role: str
    hardware: HardwareConfig
    engine: EngineConfig
    latency: LatencyModel
    instances: int
    first_instance: int
    kv_tiers: ResolvedKvTiers | None = None
    autoscale: ResolvedAutoscale | None = None

    @property
    def rows(self) -> int:
        """Its instance-table rows: max_instances when autoscaled, else its instances."""
        return self.instances if self.autoscale is None else self.autoscale.max_instances


@dataclass(frozen=True, eq=False)
class ResolvedDeployment:
    """One deployment resolved: its model facts (None for a model id without a config: a
    blackbox deployment reading none -- catalog.architecture_needed), GPU, engine, latency
    model (with its KV blocks), and its instances' rows ``first_instance`` .. ``first_instance + instances - 1``
    of the run's instance table (deployments in list order).  ``pools``: one "mono" pool
    with the same values, or a disaggregated deployment's prefill, decode (and both)
    pools, their rows consecutive from ``first_instance``; ``pd`` its P/D settings (None
    for one pool); ``kv_tiers`` its own KV tier setting resolved at its engine's TP
    (each pool's, which a pool may replace, is the pool's ``kv_tiers``)."""

    name: str
    served_model_name: str
    model: ModelConfig | None
    hardware: HardwareConfig
    engine: EngineConfig
    latency: LatencyModel
    instances: int
    first_instance: int
    pools: tuple[ResolvedPool, ...] = ()
    pd: PDSpec | None = None
    kv_tiers: ResolvedKvTiers | None = None

    @property
    def rows(self) -> int:
        """Its instance-table rows, ``first_instance`` on: its pools' (``instances`` at the
        start; an autoscaled pool holds max_instances rows)."""
        return sum(p.rows for p in self.pools) if self.pools else self.instances


@dataclass(frozen=True, eq=False)
class Setup:
    """A SimConfig resolved against the shipped data: model facts, GPU, latency model --
    those of the first deployment (single-deployment code reads them), and every
    deployment's in ``deployments``.  ``model`` is None for a model without a config (as
    ResolvedDeployment.model)."""

    config: SimConfig
    model: ModelConfig | None
    hardware: HardwareConfig
    latency: LatencyModel
    deployments: tuple[ResolvedDeployment, ...] = ()

    @property
    def served_models(self) -> tuple[str, ...]:
        """The distinct served model names, in order of first appearance."""
        return served_models(self.config.deployment_list())

    @property
    def pools(self) -> tuple[ResolvedPool, ...]:
        """Every pool of every deployment, in instance-row order."""
        return tuple(pool for dep in self.deployments for pool in dep.pools)

    @property
    def compat(self) -> bool:
        """True in blis-2026.02 compatibility mode."""
        return self.config.simulation.compat is not None


def _load_model(name: str) -> ModelConfig | None:
    """load_model_config with the file checked first: size, and nesting (no RecursionError);
    None for a model id (not a path) without a shipped config -- a blackbox run needs no
    architecture, and each feature that does says so (catalog.architecture_needed)."""
    p = Path(name)
    try:
        if not names_a_file(name) and shipped_config_path(name) is None:
            return None
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
    """Resolve every deployment's model, hardware and latency model (ConfigError on
    anything unknown or beyond what can be simulated, naming ``deployments[i].<key>``
    when the config has a deployments: list)."""
    resolved = []
    first_instance = 0
    autoscaler = autoscale_row(config.policy)
    for i, dep in enumerate(config.deployment_list()):
        try:
            resolved.append(_resolve_deployment(dep, first_instance, autoscaler))
        except ConfigError as exc:
            if config.deployments is None:
                path = shorthand_field(exc.field, dep.kv_tiers) if dep.kv_tiers is not None else None
                if path is None:
                    raise
                # (the kv_tiers section's key, and its flag: the value may come from either)
                raise ConfigError(f"{path} ({flag_for(path)})", exc.message) from None
            raise ConfigError(_entry_field(i, exc.field), exc.message) from None
        first_instance += resolved[-1].rows
    first = resolved[0]
    return Setup(config, first.model, first.hardware, first.latency, tuple(resolved))


def _resolve_deployment(dep: DeploymentSpec, first_instance: int, autoscaler) -> ResolvedDeployment:
    """One deployment resolved; ``autoscaler``: the compiled (kind, AUTOSCALE row)."""
    model = _load_model(dep.model)
    hardware = load_hardware(dep.hardware)
    if model is not None:
        check_model_fits(model, hardware, dep.engine.tp)
    latency = resolve_latency_model(
        model, hardware, dep.engine, dep.model,
        latency_model=dep.latency_model, alpha_coeffs=dep.alpha_coeffs,
        beta_coeffs=dep.beta_coeffs, vllm_version=dep.vllm_version,
    )
    if model is None and dep.disaggregated:
        raise architecture_needed(dep.model, "prefill/decode disaggregation (its KV transfer sizes)")
    kv_tiers = _resolve_tiers(dep.kv_tiers, model, dep.model, dep.engine)
    if not dep.disaggregated:
        autoscale = resolve_autoscale(dep.autoscale, dep.instances, hardware.name, dep.engine.tp, autoscaler)
        pools = (ResolvedPool("mono", hardware, dep.engine, latency, dep.instances, first_instance, kv_tiers,
                              autoscale),)
        check_pool_support(pools[0], "")
    else:
        pools, first = [], first_instance
        for role, pool in dep.pools:
            try:
                resolved = _resolve_pool(role, pool, dep, model, hardware, latency, first)
            except ConfigError as exc:  # (named as the pool's key: decode.tp, decode.hardware)
                raise ConfigError(f"{role}.{_entry_key(exc.field)}", exc.message) from None
            try:
                autoscale = resolve_autoscale(pool.autoscale, pool.instances, resolved.hardware.name,
                                              resolved.engine.tp, autoscaler)
            except ConfigError as exc:
                raise ConfigError(f"{role}.{exc.field}", exc.message) from None
            pools.append(replace(resolved, kv_tiers=_resolve_pool_tiers(role, pool, dep, model, resolved.engine),
                                 autoscale=autoscale))
            check_pool_support(pools[-1], f"{role}.")
            first += pools[-1].rows
    return ResolvedDeployment(dep.name, dep.served_name, model, hardware, dep.engine, latency, dep.instances,
                              first_instance, tuple(pools), dep.pd, kv_tiers)


def _resolve_tiers(spec, model: ModelConfig | None, model_id: str, engine: EngineConfig) -> ResolvedKvTiers | None:
    """resolve_kv_tiers at ``engine``'s block size and TP; tiers holding something need
    the model's KV bytes per token (its architecture)."""
    if spec is None or not spec.enabled:
        return None
    if model is None:
        raise architecture_needed(model_id, "a KV cache tier (its block bytes)")
    return resolve_kv_tiers(spec, model.kv_bytes_per_token, engine.block_size, engine.tp)


def _resolve_pool_tiers(role: str, pool: PoolSpec, dep: DeploymentSpec, model: ModelConfig,
                        engine: EngineConfig) -> ResolvedKvTiers | None:
    """A pool's KV tiers (its own setting, else the deployment's) in blocks of the pool's
    block bytes (its TP); an error names the pool's key when the setting is its own."""
    own = pool.kv_tiers is not None
    try:
        return resolve_kv_tiers(pool.kv_tiers if own else dep.kv_tiers, model.kv_bytes_per_token, engine.block_size,
                                engine.tp)
    except ConfigError as exc:
        if own:
            raise ConfigError(f"{role}.{exc.field}", exc.message) from None
        raise ConfigError(exc.field, f"{exc.message} (in the {role} pool, at its TP {engine.tp})") from None


def _resolve_pool(role: str, pool: PoolSpec, dep: DeploymentSpec, model: ModelConfig, dep_hardware: HardwareConfig,
                  dep_latency: LatencyModel, first_instance: int) -> ResolvedPool:
    """One pool of a disaggregated deployment: its own GPU, engine and latency model (the
    deployment's where the pool sets nothing; the same LatencyModel when it sets nothing
    the latency model depends on)."""
    def own(name: str):
        value = getattr(pool, name)
        return getattr(dep, name) if value is None else value

    engine = dep.engine if pool.engine is None else pool.engine
    settings = {name: own(name) for name in ("hardware", "latency_model", "alpha_coeffs", "beta_coeffs",
                                             "vllm_version")}
    if engine == dep.engine and all(settings[name] == getattr(dep, name) for name in settings):
        return ResolvedPool(role, dep_hardware, engine, dep_latency, pool.instances, first_instance)
    hardware = dep_hardware if settings["hardware"] == dep.hardware else load_hardware(settings["hardware"])
    check_model_fits(model, hardware, engine.tp)  # (a disaggregated deployment has a model config)
    latency = resolve_latency_model(
        model, hardware, engine, dep.model,
        latency_model=settings["latency_model"], alpha_coeffs=settings["alpha_coeffs"],
        beta_coeffs=settings["beta_coeffs"], vllm_version=settings["vllm_version"],
    )
    return ResolvedPool(role, hardware, engine, latency, pool.instances, first_instance)


def _entry_field(i: int, field: str) -> str:
    """A resolution error's field (named as the top-level setting or flag: ``engine.tp``,
    ``--alpha-coeffs``, ``model.num_layers``) as the key of deployments[i]."""
    return f"deployments[{i}].{_entry_key(field)}"


def _entry_key(field: str) -> str:
    """A resolution error's field as the key of a deployments: entry (or of its pool):
    ``engine.tp`` -> ``tp``, ``--alpha-coeffs`` -> ``alpha_coeffs``, ``model.num_layers`` ->
    ``model``; a pool's key (``decode.tp``) stays as it is."""
    key = field.lstrip("-").replace("-", "_")
    if key.startswith("engine."):
        key = key[len("engine."):]
    elif key.startswith("model."):  # a fact of the model's config.json: the entry's model key names the file
        key = "model"
    return key


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
    """The config's workload spec, its rates multiplied by ``workload.rate_scale``, its
    ``num_requests`` (the cap on generated requests) replaced by ``workload.num_requests``
    when that is given (as the reference's --num-requests does)."""
    spec = load_spec(config.workload.spec_filepath).scaled(config.workload.rate_scale)
    if config.workload.num_requests is not None:
        spec = replace(spec, num_requests=config.workload.num_requests)
    return spec


def build_workload(config: SimConfig) -> Workload:
    """Generate or load the workload the config describes, each request's served model
    assigned (``assign_models``) and its prefix-cache keys computed for its model's block
    size (``Workload.with_model_keys``, when the models' block sizes differ)."""
    sizes = model_block_sizes(config.deployment_list())
    workload = _build_workload(config, sizes[0])
    if len(set(sizes)) > 1:
        # the same requests keyed for each other block size (only spec and BLIS-trace workloads
        # carry several models: generated distributions and rich traces are refused by assign_models)
        keyed = {sizes[0]: workload}
        for bs in sorted(set(sizes[1:])):
            keyed[bs] = _build_workload(config, bs)
        workload = workload.with_model_keys(sizes, keyed)
    return with_deadlines(workload, config_deadlines(config))


def config_deadlines(config: SimConfig) -> list[ClientDeadlines] | None:
    """Each workload client's deadlines in force (config.flow_control.resolve_deadlines:
    a spec's SLO classes and clients, ``--request-ttl-s``), None when no request has any."""
    spec = workload_spec(config) if config.workload.spec_filepath else None
    # (sheddable classes need a detector somewhere: the run-wide one or a model's own)
    flow = "per-model" if any_flow_control(config.policy) else "never"
    return resolve_deadlines(flow, config.workload.request_ttl_s, spec)


def with_deadlines(workload: Workload, per_client: list[ClientDeadlines] | None) -> Workload:
    """``workload`` with its deadline columns (Workload.ttl_us, ...): per client of a spec,
    or one entry for every request of a trace or distribution; unchanged for None."""
    if per_client is None:
        return workload
    client = workload.column("client")
    if len(per_client) == 1 and len(client):  # (a trace's or distribution's: the same for every client id)
        per_client = per_client * (int(client.max()) + 1)
    out = replace(workload, **deadline_columns(per_client, client))
    out.validate()
    return out


def _build_workload(config: SimConfig, bs: int) -> Workload:
    """The workload the config describes, its models assigned, keyed for block size ``bs``."""
    w = config.workload
    if w.spec_filepath:  # a workload spec replaces the workload type (docs/workloads.md)
        spec = workload_spec(config)
        seed = config.simulation.seed if config.simulation.seed is not None else spec.effective_seed
        return assign_models(config, generate_from_spec(spec, seed, bs), spec)
    if w.type == "traces":
        rich = is_rich_trace(w.traces_filepath)
        if rich:
            trace = load_trace(w.traces_filepath, bs)
        else:
            rounding = "trunc" if config.simulation.compat else "round"
            trace = load_blis_trace(w.traces_filepath, bs, arrival_rounding=rounding)
        # --num-requests replays the first N requests (file order), as the reference caps its replay
        trace = trace if w.num_requests is None else trace.first(w.num_requests)
        return assign_models(config, trace, blis_trace=None if rich else w.traces_filepath)
    return assign_models(config, generate_distribution(distribution_spec(config), config.simulation.workload_seed, bs))


def assign_models(config: SimConfig, wl: Workload, spec=None, blis_trace: str | None = None) -> Workload:
    """``wl`` with each request's served model (``Workload.model``, ids into
    ``Workload.models`` = the deployments' served model names).  With one deployment every
    request is its, whatever a trace's model column or a spec client's ``model:`` says (as
    BLIS, which ignores the column; the same spec runs against one deployment or several).
    With several: a
    spec client's ``model:`` (default: the first deployment's), a BLIS or rich trace's
    model column; a model no deployment serves is refused before the run.  A generated
    distribution or a rich trace without a model column is refused when the deployments serve
    several models.  docs/semantics.md "Requests carry a model"."""
    deployments = config.deployment_list()
    served = served_models(deployments)
    index = {name: k for k, name in enumerate(served)}
    n = len(wl)
    if len(deployments) == 1:
        model = np.zeros(n, np.int32)
    elif spec is not None:
        for c in spec.clients:
            if c.model is not None and c.model not in index:
                raise ConfigError(f"{c.path}.model", f"model {show(c.model)} is served by no deployment; served: "
                                                     f"{', '.join(served)}")
        per_client = np.array([index[c.model if c.model is not None else served[0]] for c in spec.clients], np.int32)
        model = per_client[wl.column("client")] if n else np.zeros(0, np.int32)
    elif blis_trace is not None:
        model = _trace_models(blis_trace, wl, served, index)
    elif wl.model is not None:  # a rich trace's model column ("" = the first deployment's model)
        model = _known_models(wl.models, wl.model, served, index)
    elif len(served) == 1:
        model = np.zeros(n, np.int32)
    else:
        what = "a rich trace" if config.workload.type == "traces" else f"a generated {config.workload.type} workload"
        raise ConfigError("workload.type" if config.workload.type != "traces" else "workload.traces_filepath",
                          f"{what} has no per-request model, and the deployments serve {len(served)} models "
                          f"({', '.join(served)}); use a workload spec with one client per model "
                          "(clients[i].model, docs/workloads.md)")
    return replace(wl, model=np.ascontiguousarray(model, np.int32), models=served)


def _trace_models(path: str, wl: Workload, served: tuple[str, ...], index: dict) -> np.ndarray:
    """The served-model ids of a BLIS trace's requests, from its model column; refused
    with a count per model no deployment serves."""
    names, ids = read_trace_models(path, len(wl))
    return _known_models(names, ids, served, index)


def _known_models(names, ids: np.ndarray, served: tuple[str, ...], index: dict) -> np.ndarray:
    """Served-model ids of a trace's requests from (column names, id per request);
    refused with a count per model no deployment serves ("" = the first deployment's)."""
    index = {"": 0, **index}
    counts = np.bincount(ids, minlength=len(names)) if ids.size else np.zeros(len(names), np.int64)
    unknown = [(name, int(counts[k])) for k, name in enumerate(names) if name not in index]
    if unknown:
        listed = "; ".join(f"trace model {show(name)} ({count} requests)" for name, count in unknown[:5])
        more = f" and {len(unknown) - 5} more models" if len(unknown) > 5 else ""
        raise ConfigError("workload.traces_filepath", f"{listed}{more} served by no deployment; served: "
                                                      f"{', '.join(served)}")
    return np.array([index[name] for name in names], np.int32)[ids] if ids.size else np.zeros(0, np.int32)


def expected_workload_size(config: SimConfig) -> tuple[int, float, float, float] | None:
    """(requests, block keys, shared block keys, bytes) the config's workload is expected
    to take, from its parameters, without generating it; None for a trace (its size is
    charged while it is read)."""
    w = config.workload
    bs = min(model_block_sizes(config.deployment_list()))  # (the smallest block size gives the most keys)
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
    check_kv_blocks(config, setup.latency, setup.deployments)
    size = expected_workload_size(config)
    if size is None:
        n, keys, shared, wl_bytes = 0, 0.0, 0.0, 0.0
    else:
        n, keys, shared, wl_bytes = size
    pol = compile_policies(config.policy)
    parts = estimate_state_bytes(config, setup.latency, n, int(keys), int(keys) + n, pol.uses_prefix_index,
                                 pol.scheduler_kind, n_shared=int(shared), deployments=setup.deployments)
    parts["workload arrays"] = int(wl_bytes)
    parts["results"] = n * per_request
    memory.check(sum(parts.values()), describe_estimate(parts, config, setup.latency, n, keys, setup.deployments),
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
