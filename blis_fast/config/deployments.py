"""Deployments: pools of identical instances, each with its own model, GPU, engine settings
and latency model (docs/architecture.md "Deployments").

A run-config's ``deployments:`` list holds one ``DeploymentSpec`` per pool; without it, the
top-level settings (model, hardware, engine, num_instances, latency model, coefficients)
are the shorthand for one deployment.  ``blis_fast.config.sim.SimConfig.deployment_list``
returns the list in both cases, so every consumer reads one shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from blis_fast.config.autoscale import AUTOSCALE_ENTRY_KEYS, AutoscaleSpec, check_pool_autoscale, instance_rows
from blis_fast.config.disaggregation import POOL_ROLES, PDSpec, PoolSpec, check_coefficients, check_pools
from blis_fast.config.engine import EngineConfig
from blis_fast.config.kv_tiers import KV_ENTRY_KEYS, KvTiersSpec, check_deployment_tiers
from blis_fast.config.latency import AUTO, LATENCY_MODELS, MAX_COEFF
from blis_fast.config.validate import MAX_INSTANCES, check_fields, show
from blis_fast.config.validate import setting as _opt
from blis_fast.errors import ConfigError

MAX_DEPLOYMENTS = 64  # entries of a deployments: list
MAX_NAME_LEN = 256  # deployment and served model names
LATENCY_CHOICES = LATENCY_MODELS + (AUTO,)

# the keys of one entry besides the engine settings (which use the flags' YAML names,
# blis_fast.config.sim.DEPLOYMENT_ENGINE_KEYS)
ENTRY_KEYS = ("name", "model", "served_model_name", "hardware", "latency_model", "alpha_coeffs", "beta_coeffs",
              "vllm_version", "instances", "engine", "prefill", "decode", "both", "pd", *KV_ENTRY_KEYS,
              *AUTOSCALE_ENTRY_KEYS)
# top-level settings a deployments: list replaces (each belongs in every entry instead)
PER_DEPLOYMENT_SETTINGS = ("model", "hardware", "vllm_version", "latency_model", "alpha_coeffs", "beta_coeffs")
PER_DEPLOYMENT_SECTIONS = ("engine", "deployment", "pd", "kv_tiers", "autoscale")


@dataclass(frozen=True)
class DeploymentSpec:
    """One deployment: ``instances`` identical instances of ``model`` on ``hardware``."""

    name: str = _opt("default", "deployment name, unique in the run (results are grouped by it)", max_len=MAX_NAME_LEN)
    model: str = _opt("meta-llama/llama-3.1-8b-instruct", "model id or path to a HuggingFace config.json")
    served_model_name: str | None = _opt(None, "the model name requests ask for (default: the model id)",
                                         max_len=MAX_NAME_LEN)
    hardware: str = _opt("H100", "GPU: H100 | A100 | ...", max_len=256)
    vllm_version: str | None = _opt(None, "coefficient-set vLLM version (default: first match)", max_len=256)
    latency_model: str | None = _opt(None, "blackbox | roofline | auto (as the top-level latency_model)",
                                     choices=LATENCY_CHOICES)
    alpha_coeffs: list[float] | None = _opt(None, "α0,α1,α2 (µs)", lo=0, hi=MAX_COEFF, max_len=3, unit="µs")
    beta_coeffs: list[float] | None = _opt(None, "β0,β1,β2 (µs)", lo=0, hi=MAX_COEFF, max_len=3, unit="µs")
    instances: int = _opt(1, "instances of this deployment (>= 1); with prefill and decode pools, their sum "
                             "(set each pool's instances instead)", lo=1, hi=MAX_INSTANCES)
    engine: EngineConfig = field(default_factory=EngineConfig)
    # prefill/decode disaggregation (blis_fast.config.disaggregation): all None for one pool
    prefill: PoolSpec | None = field(default=None, metadata={"help": "the prefill pool (with decode)"})
    decode: PoolSpec | None = field(default=None, metadata={"help": "the decode pool (with prefill)"})
    both: PoolSpec | None = field(default=None, metadata={"help": "a pool whose instances prefill or decode "
                                                                  "(with prefill and decode)"})
    pd: PDSpec | None = field(default=None, metadata={"help": "the P/D decider and KV transfer (default PDSpec() "
                                                              "with pools)"})
    # KV cache tiers beyond the GPU (blis_fast.config.kv_tiers): None = none; a pool's own replaces it
    kv_tiers: KvTiersSpec | None = field(default=None, metadata={"help": "KV cache tiers beyond the GPU (the entry's "
                                                                         "kv_tiers, kv_store and kv_load)"})
    # autoscaling (blis_fast.config.autoscale): None = the pool keeps its instances; with prefill and
    # decode pools each pool has its own (PoolSpec.autoscale) and this stays None
    autoscale: AutoscaleSpec | None = field(default=None, metadata={
        "help": "the autoscaling bounds and delays of a deployment of one pool (the entry's min_instances, "
                "max_instances and autoscale keys)"})

    def __post_init__(self) -> None:
        check_fields(self, "")
        if not isinstance(self.engine, EngineConfig):
            raise ConfigError("engine", f"must be an EngineConfig, got {show(self.engine)}")
        check_coefficients(self)
        check_pools(self.prefill, self.decode, self.both, self.pd, self.engine)
        check_deployment_tiers(self.kv_tiers, self.pools, self.engine)
        if self.disaggregated and self.autoscale is not None:
            raise ConfigError("min_instances" if self.autoscale.min_instances is not None else "autoscale",
                              "belongs to each pool with prefill and decode pools (each scales on its own): set "
                              "prefill.min_instances, decode.max_instances, decode.autoscale, ... instead")
        check_pool_autoscale(self.autoscale, self.instances)
        for role, pool in self.pools:
            check_pool_autoscale(pool.autoscale, pool.instances, f"{role}.")
        if self.disaggregated:
            total = sum(pool.instances for _, pool in self.pools)
            if self.instances not in (1, total):  # (1: the default; total: a copy, dataclasses.replace)
                raise ConfigError("instances", f"is the sum of the pools' instances ({total}) with prefill and "
                                               f"decode pools: leave it out, got {show(self.instances)}")
            if total > MAX_INSTANCES:
                raise ConfigError(f"{self.pools[-1][0]}.instances", f"the pools have {total} instances in all, more "
                                                                    f"than {MAX_INSTANCES}")
            # the deployment's instance count is its pools' sum: code that sums instances keeps working
            object.__setattr__(self, "instances", total)
            if self.pd is None:
                object.__setattr__(self, "pd", PDSpec())

    @property
    def disaggregated(self) -> bool:
        """True when the deployment has prefill and decode pools (prefill/decode disaggregation)."""
        return self.prefill is not None

    @property
    def pools(self) -> tuple[tuple[str, PoolSpec], ...]:
        """(role, pool) of a disaggregated deployment's pools, in the order of their instance
        rows (prefill, decode, then both when given); () for one pool."""
        return tuple((role, getattr(self, role)) for role in POOL_ROLES if getattr(self, role) is not None)

    @property
    def served_name(self) -> str:
        """The model name requests ask for: served_model_name, else the model id."""
        return self.model if self.served_model_name is None else self.served_model_name


def check_deployments(deployments: tuple[DeploymentSpec, ...], where: str = "deployments") -> None:
    """The cross-entry rules of a deployments: list (each entry's own fields are checked by
    DeploymentSpec): 1..MAX_DEPLOYMENTS entries, unique names, at most MAX_INSTANCES
    instances in all, and the deployments serving one model name agree on the model and
    the KV block size (a request's prefix-cache keys are computed per block, once, for
    every instance it may be routed to), and are all disaggregated or none, with one
    ``pd`` (the decider and the transfer are per model).  Every pool's instances count
    towards the total (``DeploymentSpec.instances`` is their sum)."""
    if not deployments:
        raise ConfigError(where, "must list at least one deployment (or leave it out: the top-level model, hardware "
                                 "and engine settings are one deployment)")
    if len(deployments) > MAX_DEPLOYMENTS:
        raise ConfigError(where, f"must list at most {MAX_DEPLOYMENTS} deployments, got {len(deployments)}")
    seen: dict[str, int] = {}
    served: dict[str, int] = {}
    total = 0
    for i, d in enumerate(deployments):
        if d.name in seen:
            raise ConfigError(f"{where}[{i}].name", f"duplicate deployment name {show(d.name)} "
                                                    f"(also {where}[{seen[d.name]}])")
        seen[d.name] = i
        total += instance_rows(d)  # (an autoscaled pool holds a row for each of its max_instances)
        first = served.setdefault(d.served_name, i)
        other = deployments[first]
        if other.model != d.model:
            raise ConfigError(f"{where}[{i}].model", f"{show(d.model)} differs from {where}[{first}].model "
                                                     f"{show(other.model)}, which serves the same model name "
                                                     f"{show(d.served_name)}; give one of them another "
                                                     "served_model_name")
        if other.engine.block_size != d.engine.block_size:
            raise ConfigError(f"{where}[{i}].block_size",
                              f"is {d.engine.block_size} but {where}[{first}] serves the same model "
                              f"{show(d.served_name)} with {other.engine.block_size}: deployments of one model must "
                              "agree on the block size (a request's prefix-cache keys are per block, and it may be "
                              "routed to either)")
        if other.disaggregated != d.disaggregated:
            how = ("has prefill and decode pools, but {0} serves the same model {1} with one pool" if d.disaggregated
                   else "is missing: {0} serves the same model {1} with prefill and decode pools")
            raise ConfigError(f"{where}[{i}].prefill",
                              how.format(f"{where}[{first}]", show(d.served_name)) + "; the deployments of one model "
                              "are all disaggregated or none (the P/D decider is per model)")
        if other.pd != d.pd:
            raise ConfigError(f"{where}[{i}].pd", f"differs from {where}[{first}].pd, which serves the same model "
                                                  f"{show(d.served_name)}: the deployments of one model agree on "
                                                  "pd (the decider and the transfer are per model)")
    if total > MAX_INSTANCES:
        raise ConfigError(where, f"the deployments have {total} instances in all (max_instances of an autoscaled "
                                 f"pool), more than {MAX_INSTANCES}")


def served_models(deployments) -> tuple[str, ...]:
    """The distinct served model names, in order of first appearance."""
    return tuple(dict.fromkeys(d.served_name for d in deployments))


def model_block_sizes(deployments) -> tuple[int, ...]:
    """The KV block size of each served model (``served_models`` order): its deployments
    agree on it (``check_deployments``); different models may differ."""
    sizes = {}
    for d in deployments:
        sizes.setdefault(d.served_name, int(d.engine.block_size))
    return tuple(sizes.values())


__all__ = ["DeploymentSpec", "MAX_DEPLOYMENTS", "ENTRY_KEYS", "PER_DEPLOYMENT_SETTINGS", "PER_DEPLOYMENT_SECTIONS",
           "check_deployments", "model_block_sizes", "served_models"]
