"""The whole configuration of one run: YAML file + CLI flags -> validated ``SimConfig``.

A YAML file (``--config``) may use the nested sections (``engine:``, ``deployment:``,
``workload:``, ``simulation:``) or the flat BLIS flag names at top level
(``max_num_running_reqs: 128``); explicitly given CLI flags override both.  Unknown keys
and bad values raise ``ConfigError`` naming the YAML path (or the flag).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Collection

from blis_fast.config import effective
from blis_fast.config.autoscale import (
    AUTOSCALE_ENTRY_KEYS,
    AUTOSCALE_SHORTHAND_ENTRY_KEYS,
    AutoscaleConfig,
    check_bounds,
    parse_autoscale_entry,
)
from blis_fast.config.deployments import (
    ENTRY_KEYS,
    PER_DEPLOYMENT_SECTIONS,
    PER_DEPLOYMENT_SETTINGS,
    DeploymentSpec,
    check_deployments,
    served_models,
)
from blis_fast.config.disaggregation import (
    PD_ENTRY_KEYS,
    POOL_KEYS,
    PDConfig,
    PDSpec,
    PoolSpec,
    TransferSpec,
    unused_with_decider,
)
from blis_fast.config.kv_tiers import (
    KV_ENTRY_KEYS,
    KV_SHORTHAND_ENTRY_KEYS,
    TIER_NAMES,
    KvTiersConfig,
    KvTiersSpec,
    TierSpec,
    check_prefix_caching,
    entry_field,
)
from blis_fast.config.flow_control import MAX_TTL_S, MIN_TTL_S
from blis_fast.config.latency import AUTO, LATENCY_MODELS
from blis_fast.config.memory import parse_bytes
from blis_fast.config.policy import (AUTOSCALE_FIELDS, FLOW_CONTROL_FIELDS, PROGRAM_FIELDS, PolicyConfig, check_flow_models,
                                     check_routing_models, parse_weights)
from blis_fast.config.validate import (
    INT64_MAX,
    MAX_INSTANCES,
    MAX_REQUEST_TOKENS,
    MAX_REQUESTS,
    MAX_TIME_US,
    as_int,
    as_list,
    as_mapping,
    check_fields,
    check_value,
    key_name,
    show,
)
from blis_fast.config.validate import setting as _opt
from blis_fast.config.yamlfile import read_yaml_mapping
from blis_fast.errors import ConfigError

from .engine import EngineConfig

COMPAT_MODES = ("blis-2026.02",)
TRACE_LEVELS = ("none", "decisions", "full")
MAX_REPLAYED = 100  # counterfactual_k
WORKLOAD_TYPES = ("distribution", "chatbot", "contentgen", "summarization", "multidoc", "traces")
ARRIVAL_PROCESSES = ("poisson", "constant")
LATENCY_CHOICES = LATENCY_MODELS + (AUTO,)  # (blis_fast.config.latency.resolve_latency_model)
MAX_RATE = 1e12  # requests per second
MAX_LATENCY_US = 10**12
MAX_COEFF = 1e9  # each α / β coefficient, µs (per token / request for α1, α2, β1, β2)
MAX_WINDOW_S = MAX_TIME_US / 1e6  # warm-up / cool-down, seconds of simulated time
MAX_STEP_US = 2**53  # a full step (β0 + β1·max_num_batched_tokens + β2·max_num_seqs) must stay below this
TOKENS = MAX_REQUEST_TOKENS
DEFAULT_NUM_REQUESTS = 100  # requests of a generated distribution or preset without --num-requests


@dataclass(frozen=True)
class WorkloadConfig:
    """What requests arrive (docs/semantics.md §7).  Defaults are BLIS's ``distribution`` defaults."""

    type: str = _opt("distribution", "distribution | chatbot | contentgen | summarization | multidoc | traces",
                     choices=WORKLOAD_TYPES)
    rate: float = _opt(1.0, "arrival rate, requests per second (> 0) of the distribution and presets (a spec: "
                            "--rate-scale)", lo=0, lo_open=True, hi=MAX_RATE,
                       unit="requests/s")
    rate_scale: float = _opt(1.0, "multiplies the arrival rate: --rate, or every rate-driven client's rate of a "
                                  "workload spec (session follow-ups and trace timestamps keep their timing); for "
                                  "load sweeps and capacity searches on specs", lo=0, lo_open=True, hi=1e6)
    num_requests: int | None = _opt(None, "number of requests (>= 1): generated from the distribution or a preset "
                                          "(default 100); given with a workload spec, it replaces the spec's "
                                          "num_requests (a cap); given with a trace, only its first N requests (file "
                                          "order) are replayed", lo=1, hi=MAX_REQUESTS)
    arrival: str | None = _opt(None, "arrival process: poisson | constant (default poisson; constant in compat mode)",
                               choices=ARRIVAL_PROCESSES)
    prefix_tokens: int | None = _opt(None, "shared-prefix tokens prepended to every prompt (preset value, else 0)",
                                     lo=0, hi=TOKENS)
    prompt_tokens: float | None = _opt(None, "mean prompt tokens (preset value, else 512)", lo=0, hi=TOKENS)
    prompt_tokens_stdev: float | None = _opt(None, "stdev of prompt tokens (preset value, else 256)", lo=0, hi=1e12)
    prompt_tokens_min: int | None = _opt(None, "min prompt tokens (preset value, else 2)", lo=1, hi=TOKENS)
    prompt_tokens_max: int | None = _opt(None, "max prompt tokens (preset value, else 7000)", lo=1, hi=TOKENS)
    output_tokens: float | None = _opt(None, "mean output tokens (preset value, else 512)", lo=0, hi=TOKENS)
    output_tokens_stdev: float | None = _opt(None, "stdev of output tokens (preset value, else 256)", lo=0, hi=1e12)
    output_tokens_min: int | None = _opt(None, "min output tokens (preset value, else 2)", lo=0, hi=TOKENS)
    output_tokens_max: int | None = _opt(None, "max output tokens (preset value, else 7000)", lo=0, hi=TOKENS)
    traces_filepath: str | None = _opt(None, "trace to replay (type: traces): a BLIS trace CSV or a blis-fast rich "
                                              "trace (.parquet, or CSV starting with '# blis-fast-trace')")
    spec_filepath: str | None = _opt(None, "workload spec YAML (clients, tenants, SLO classes, prefix groups, sessions, "
                                           "load profile; docs/workloads.md); replaces the workload type and its "
                                           "settings; seed from the file unless --seed is given")
    request_ttl_s: float | None = _opt(None, "time to live of every request without one of its own (a spec's SLO "
                                             "class or client ttl_s): cancelled when not completed that long after "
                                             "its arrival", lo=MIN_TTL_S, hi=MAX_TTL_S, unit="s")

    def __post_init__(self) -> None:
        if self.num_requests is None and not self.spec_filepath and self.type != "traces":
            # a generated distribution always has a length; a spec or a trace has its own unless one is given
            object.__setattr__(self, "num_requests", DEFAULT_NUM_REQUESTS)
        check_fields(self, "workload")


@dataclass(frozen=True)
class DeploymentConfig:
    """The replica pool: N identical instances, with the autoscaler's bounds
    (blis_fast.config.autoscale)."""

    num_instances: int = _opt(1, "instances serving at start (>= 1)", lo=1, hi=MAX_INSTANCES)
    min_instances: int | None = _opt(None, "the autoscaler's lower bound of the pool (with --autoscaler; default "
                                           "num_instances)", lo=1, hi=MAX_INSTANCES)
    max_instances: int | None = _opt(None, "the autoscaler's upper bound of the pool (with --autoscaler; default "
                                           "num_instances)", lo=1, hi=MAX_INSTANCES)

    def __post_init__(self) -> None:
        check_fields(self, "deployment")

    def bounds(self) -> tuple[int, int]:
        """(min, max) with defaults applied."""
        lo = self.num_instances if self.min_instances is None else self.min_instances
        hi = self.num_instances if self.max_instances is None else self.max_instances
        return lo, hi


DEFAULT_SEED = 42


@dataclass(frozen=True)
class SimulationConfig:
    """The simulation key and run controls."""

    seed: int | None = _opt(None, "workload seed: with the config it fully determines the run (>= 0; default 42, "
                                  "or the workload spec's own seed; a trace takes none)", lo=0, hi=INT64_MAX)
    simulation_seed: int | None = _opt(None, "seed of the autoscaler's delay draws (provisioning or loading delays given as mean:M,std:S; default: the workload seed); refused when nothing draws",
                                       lo=0, hi=INT64_MAX)
    horizon: int | None = _opt(None, "simulated time limit in µs: events at t > horizon are not executed (default: none)",
                               lo=0, hi=MAX_TIME_US, unit="µs")
    compat: str | None = _opt(None, "reporting conventions of a reference version: blis-2026.02", choices=COMPAT_MODES)
    admission_latency: int = _opt(0, "µs from cluster arrival to the admission decision (>= 0)", lo=0,
                                  hi=MAX_LATENCY_US, unit="µs")
    routing_latency: int = _opt(0, "µs from admission to the routing decision (>= 0)", lo=0, hi=MAX_LATENCY_US,
                                unit="µs")
    warmup_s: float = _opt(0.0, "statistics leave out requests arriving in the first warmup_s seconds of simulated "
                                "time (the start-up transient); 0: none", lo=0, hi=MAX_WINDOW_S, unit="s")
    cooldown_s: float = _opt(0.0, "statistics leave out requests arriving in the last cooldown_s seconds before the "
                                  "last arrival (the drain, when the load falls off); 0: none", lo=0,
                             hi=MAX_WINDOW_S, unit="s")
    check_invariants: bool = _opt(False, "verify KV conservation and batch limits after every step (slow; tests)")
    max_events: int | None = _opt(None, "safety limit on processed events (default: generous bound from the workload)",
                                  lo=1, hi=MAX_TIME_US, cli=False)
    trace_level: str | None = _opt(None, "decision trace: none | decisions (admission, routing and preemption "
                                         "records) | full (also the instance schedulers' records: admissions to the "
                                         "batch, blocked wait-queue heads, preemption context); default none, "
                                         "decisions when --trace-out, --counterfactual-k or --summarize-trace needs "
                                         "it)", choices=TRACE_LEVELS)
    sample_interval_ms: float | None = _opt(None, "time-series sampling interval on the simulated clock, ms "
                                                  "(default: no time series; 100 with --timeseries-out)",
                                            lo=0.001, hi=MAX_TIME_US / 1e3, unit="ms")
    counterfactual_k: int = _opt(0, "replay the K routing decisions with the highest estimated regret under each "
                                    "traced alternative (exact counterfactuals; 0 = none)", lo=0, hi=MAX_REPLAYED)
    max_memory: int | None = _opt(None, "memory budget of the run in bytes, e.g. 4GB, 512MiB or 2000000000: inputs "
                                        "whose tables would need more are refused before allocating (default: half "
                                        "the machine's RAM)", lo=2**20, hi=2**62, unit="bytes", parse=parse_bytes)

    def __post_init__(self) -> None:
        check_fields(self, "simulation")

    @property
    def workload_seed(self) -> int:
        """The seed in force (explicit, else 42)."""
        return DEFAULT_SEED if self.seed is None else self.seed


@dataclass(frozen=True)
class SimConfig:
    """Everything that determines a run (with the workload's own inputs)."""

    model: str = _opt("meta-llama/llama-3.1-8b-instruct", "model id or path to a HuggingFace config.json")
    hardware: str = _opt("H100", "GPU: H100 | A100", max_len=256)
    vllm_version: str | None = _opt(None, "coefficient-set vLLM version (default: first match)", max_len=256)
    latency_model: str | None = _opt(None, "blackbox | roofline | auto (default: blackbox when a coefficient set "
                                           "exists for the model, GPU and TP; an error if the model has sets but "
                                           "not this one; auto: then roofline)",
                                     choices=LATENCY_CHOICES)
    alpha_coeffs: list[float] | None = _opt(None, "α0,α1,α2 (µs): queueing overhead α0+α1·L, output-token overhead α2",
                                            lo=0, hi=MAX_COEFF, max_len=3, unit="µs")
    beta_coeffs: list[float] | None = _opt(None, "β0,β1,β2 (µs): step time β0 + β1·prefill tokens + β2·decode requests",
                                           lo=0, hi=MAX_COEFF, max_len=3, unit="µs")
    engine: EngineConfig = field(default_factory=EngineConfig)
    deployment: DeploymentConfig = field(default_factory=DeploymentConfig)
    pd: PDConfig = field(default_factory=PDConfig)
    kv_tiers: KvTiersConfig = field(default_factory=KvTiersConfig)
    autoscale: AutoscaleConfig = field(default_factory=AutoscaleConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    simulation: SimulationConfig = field(default_factory=SimulationConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    objectives: list | None = _opt(None, "objectives of Result.evaluate() and --evaluation-out: "
                                         "metric[:min|max[:target[:weight]]],... e.g. ttft_p99_ms:min:200,"
                                         "slo_attainment[class=realtime]:max (README 'Evaluation'); default "
                                         "slo_attainment, goodput_rps, ttft_p99_ms, e2e_p99_ms",
                                   parse=lambda value, where: _objectives(value, where), metavar="SPEC")
    deployments: tuple[DeploymentSpec, ...] | None = field(default=None, metadata={
        "help": "the run's deployments (blis_fast.config.deployments); None: the top-level model, hardware, engine "
                "and deployment settings are the one deployment.  When given, those top-level settings mirror "
                "the first deployment's"})

    def __post_init__(self) -> None:
        check_fields(self, "")
        for name, cls in _section_classes().items():
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(name, f"must be a {cls.__name__}, got {show(getattr(self, name))}")
        if self.deployments is not None:
            if not isinstance(self.deployments, tuple) or not all(isinstance(d, DeploymentSpec)
                                                                  for d in self.deployments):
                raise ConfigError("deployments", f"must be a tuple of DeploymentSpec, got {show(self.deployments)}")
            check_deployments(self.deployments)
            # the top-level settings mirror the first deployment (single-deployment code reads them)
            first = self.deployments[0]
            for name in PER_DEPLOYMENT_SETTINGS:
                object.__setattr__(self, name, getattr(first, name))
            object.__setattr__(self, "engine", first.engine)
            object.__setattr__(self, "deployment", DeploymentConfig(num_instances=first.instances))
        self._check_pd_shorthand()
        self._check_kv_tiers_shorthand()
        self._check_autoscale_shorthand()
        if self.policy.routing_per_model:
            check_routing_models(self.policy, served_models(self.deployment_list()))
        if self.policy.flow_per_model:
            check_flow_models(self.policy, served_models(self.deployment_list()))

    def _check_pd_shorthand(self) -> None:
        """The ``pd`` section (P/D pools of the one top-level deployment): only without a
        deployments: list, only with both pool sizes, and then the instance count is
        their sum (mirrored in ``deployment``, which single-deployment code reads)."""
        given = self.pd.given()
        if not given:
            return
        if self.deployments is not None:
            raise ConfigError(f"pd.{given[0]}", f"is a per-deployment setting: with a deployments: list, set it in "
                                                f"each entry (deployments[i].{PD_ENTRY_KEYS[given[0]]}) instead")
        if not self.pd.pools:
            name = next((g for g in given if not g.endswith("_instances")), None)
            if name is not None:
                raise ConfigError(f"pd.{name}", "needs --prefill-instances and --decode-instances "
                                                "(pd.prefill_instances and pd.decode_instances): P/D settings apply to "
                                                "a deployment with prefill and decode pools")
            given_role, missing = ("prefill", "decode") if self.pd.decode_instances is None else ("decode", "prefill")
            raise ConfigError(f"pd.{given_role}_instances", f"needs --{missing}-instances too (pd.{missing}_instances): "
                                                            "a disaggregated deployment has a prefill and a decode pool")
        total = self.pd.prefill_instances + self.pd.decode_instances
        if total > MAX_INSTANCES:
            raise ConfigError("pd.decode_instances", f"the prefill and decode pools have {total} instances in all, "
                                                     f"more than {MAX_INSTANCES}")
        if self.deployment not in (DeploymentConfig(), DeploymentConfig(num_instances=total)):
            raise ConfigError("deployment.num_instances", f"is the sum of the prefill and decode pools' instances "
                                                          f"({total}) with P/D pools: leave it out")
        object.__setattr__(self, "deployment", DeploymentConfig(num_instances=total))

    def _check_kv_tiers_shorthand(self) -> None:
        """The ``kv_tiers`` section (KV tiers of the one top-level deployment): only without
        a deployments: list, and with prefix caching (a tier finds blocks by their keys)."""
        given = self.kv_tiers.given()
        if not given:
            return
        if self.deployments is not None:
            key = KV_SHORTHAND_ENTRY_KEYS[given[0]]
            raise ConfigError(f"kv_tiers.{given[0]}", f"is a per-deployment setting: with a deployments: list, set it "
                                                      f"in each entry (deployments[i].{key}) instead")
        check_prefix_caching(self.kv_tiers.spec(), self.engine.enable_prefix_caching, self.kv_tiers.first_size(),
                             " (--disable-prefix-caching)")

    def _check_autoscale_shorthand(self) -> None:
        """The ``autoscale`` section (autoscaling of the one top-level deployment): only
        without a deployments: list and without the pd section's pools (each pool of a
        disaggregated deployment scales on its own, in a deployments: entry)."""
        given = self.autoscale.given()
        if not given:
            return
        if self.deployments is not None or self.pd.pools:
            key = AUTOSCALE_SHORTHAND_ENTRY_KEYS[given[0]]
            where = "deployments[i]." if self.deployments is not None else "deployments[i].decode."
            raise ConfigError(f"autoscale.{given[0]}", f"is a per-pool setting: with a deployments: list or P/D pools, "
                                                       f"set it in each entry or pool ({where}{key}) instead")

    def autoscale_spec(self):
        """The top-level deployment's AutoscaleSpec: None unless the ``autoscale`` section is
        given or a bound differs from num_instances (bounds equal to it are neutral)."""
        d = self.deployment
        bounds = (d.min_instances, d.max_instances)
        if not self.autoscale.given() and all(b is None or b == d.num_instances for b in bounds):
            return None
        return self.autoscale.spec(*bounds)

    def to_dict(self) -> dict:
        """Plain nested dict (for the results JSON), shaped like a run-config file: with a
        deployments list, the top-level settings that mirror its first entry are left out
        (read back, they would be refused next to the list), and so is an unset
        ``policy.routing_per_model``.  The ``pd`` section appears only when set (then
        ``deployment``, the pools' sum, is left out), and a deployment entry's pool keys
        only when it has pools: a run without P/D has the same keys as before them.  So
        do the ``kv_tiers`` section and an entry's ``kv_tiers`` keys: only when set."""
        out = _to_dict(self)
        for key in ("routing_per_model", "flow_per_model", "prefill_routing", "pd_decider", "pd_threshold",
                    "flow_recheck", *PROGRAM_FIELDS):
            if getattr(self.policy, key) is None:  # (set only by YAML, a bundle or the API: left out unset)
                out["policy"].pop(key, None)
        if self.pd.pools:
            del out["deployment"]
        elif not self.pd.given():
            del out["pd"]
        if not self.kv_tiers.given():
            del out["kv_tiers"]
        if not self.autoscale.given():
            del out["autoscale"]
        else:
            for name in ("provisioning_delay_s", "loading_delay_s"):
                if getattr(self.autoscale, name) is not None:  # (a number, or {mean, std})
                    out["autoscale"][name] = getattr(self.autoscale, name).entry()
        if self.policy.autoscaler == "none":  # (a run without an autoscaler: the keys it had before them)
            for key in ("autoscaler",) + AUTOSCALE_FIELDS:
                out["policy"].pop(key, None)
        if self.policy.flow_control == "never":  # (a run without flow control: the keys it had before it)
            for key in ("flow_control",) + FLOW_CONTROL_FIELDS:
                out["policy"].pop(key, None)
        if self.workload.request_ttl_s is None:  # (a run without a TTL: the keys it had before it)
            del out["workload"]["request_ttl_s"]
        if self.deployments is None:
            del out["deployments"]
        else:
            for key in PER_DEPLOYMENT_SETTINGS + PER_DEPLOYMENT_SECTIONS:
                out.pop(key, None)
            out["deployments"] = [deployment_dict(d) for d in self.deployments]
        return out

    def deployment_list(self) -> tuple[DeploymentSpec, ...]:
        """The run's deployments: the ``deployments`` list, else the one deployment the
        top-level settings describe (named by its model id).  Every consumer reads this."""
        if self.deployments is not None:
            return self.deployments
        pools = {}
        if self.pd.pools:  # (the pd section's P/D pools)
            pools = {"prefill": PoolSpec(self.pd.prefill_instances), "decode": PoolSpec(self.pd.decode_instances),
                     "pd": self.pd.spec()}
        return (DeploymentSpec(name=self.model, model=self.model, hardware=self.hardware,
                               vllm_version=self.vllm_version, latency_model=self.latency_model,
                               alpha_coeffs=self.alpha_coeffs, beta_coeffs=self.beta_coeffs,
                               instances=self.deployment.num_instances, engine=self.engine,
                               kv_tiers=self.kv_tiers.spec(), autoscale=self.autoscale_spec(), **pools),)


def deployment_dict(dep: DeploymentSpec) -> dict:
    """One deployments: entry as a run-config file writes it (``SimConfig.to_dict``): the
    pool keys only when it has pools (then no ``instances``, their sum), each pool with
    the engine keys that differ from the deployment's."""
    out = _to_dict(dep)
    for role in ("prefill", "decode", "both", "pd"):
        if out[role] is None:
            del out[role]
    del out["kv_tiers"]  # (written as the entry's kv_tiers, kv_store and kv_load keys)
    if dep.kv_tiers is not None:
        out.update(dep.kv_tiers.entry())
    del out["autoscale"]  # (written as the entry's min_instances, max_instances and autoscale keys)
    if dep.autoscale is not None:
        out.update(dep.autoscale.entry())
    if dep.disaggregated:
        del out["instances"]
        for role, pool in dep.pools:
            entry = {k: v for k, v in out[role].items() if v is not None and k not in ("kv_tiers", "autoscale")}
            if pool.kv_tiers is not None:
                entry.update(pool.kv_tiers.entry())
            if pool.autoscale is not None:
                entry.update(pool.autoscale.entry())
            if pool.engine is not None:
                engine = {f.name: getattr(pool.engine, f.name) for f in fields(EngineConfig)
                          if getattr(pool.engine, f.name) != getattr(dep.engine, f.name)}
                if engine:
                    entry["engine"] = engine
                else:
                    del entry["engine"]
            out[role] = entry
    return out


# Flat names (BLIS flags with '_' for '-') -> nested path.  Also the YAML top-level aliases,
# and the table ``blis-fast run``'s setting options are built from (blis_fast/cli/setting_flags.py):
# in help order, a path's first name is its flag and the later ones its aliases
# (--max-num-running-reqs / --max-num-seqs); a field with ``cli=False`` is YAML-only.
FLAG_PATHS: dict[str, str] = {
    "model": "model",
    "hardware": "hardware",
    "tp": "engine.tp",
    "pp": "engine.pp",
    "dp": "engine.dp",
    "vllm_version": "vllm_version",
    "latency_model": "latency_model",
    "alpha_coeffs": "alpha_coeffs",
    "beta_coeffs": "beta_coeffs",
    "seed": "simulation.seed",
    "simulation_seed": "simulation.simulation_seed",
    "horizon": "simulation.horizon",
    "workload": "workload.type",
    "workload_traces_filepath": "workload.traces_filepath",
    "workload_spec": "workload.spec_filepath",
    "rate": "workload.rate",
    "rate_scale": "workload.rate_scale",
    "num_requests": "workload.num_requests",
    "request_ttl_s": "workload.request_ttl_s",
    "arrival": "workload.arrival",
    "prefix_tokens": "workload.prefix_tokens",
    "prompt_tokens": "workload.prompt_tokens",
    "prompt_tokens_stdev": "workload.prompt_tokens_stdev",
    "prompt_tokens_min": "workload.prompt_tokens_min",
    "prompt_tokens_max": "workload.prompt_tokens_max",
    "output_tokens": "workload.output_tokens",
    "output_tokens_stdev": "workload.output_tokens_stdev",
    "output_tokens_min": "workload.output_tokens_min",
    "output_tokens_max": "workload.output_tokens_max",
    "num_instances": "deployment.num_instances",
    "min_instances": "deployment.min_instances",
    "max_instances": "deployment.max_instances",
    "autoscaler": "policy.autoscaler",
    "autoscale_signal": "policy.autoscale_signal",
    "autoscale_up": "policy.autoscale_up",
    "autoscale_down": "policy.autoscale_down",
    "autoscale_target": "policy.autoscale_target",
    "autoscale_kv_up": "policy.autoscale_kv_up",
    "autoscale_kv_down": "policy.autoscale_kv_down",
    "autoscale_period_ticks": "policy.autoscale_period_ticks",
    "autoscale_program": "policy.autoscale_program",
    "autoscale_interval_s": "autoscale.interval_s",
    "autoscale_metrics_delay_s": "autoscale.metrics_delay_s",
    "provisioning_delay_s": "autoscale.provisioning_delay_s",
    "loading_delay_s": "autoscale.loading_delay_s",
    "instance_warmup_factor": "autoscale.warmup_factor",
    "instance_warmup_curve": "autoscale.warmup_curve",
    "instance_warmup_requests": "autoscale.warmup_requests",
    "instance_warmup_seconds": "autoscale.warmup_seconds",
    "stabilization_up_s": "autoscale.stabilization_up_s",
    "stabilization_down_s": "autoscale.stabilization_down_s",
    "autoscale_max_change": "autoscale.max_change",
    "drain": "autoscale.drain",
    "drain_timeout_s": "autoscale.drain_timeout_s",
    "scale_down": "autoscale.scale_down",
    "cost_per_gpu_hour": "autoscale.cost_per_gpu_hour",
    "prefill_instances": "pd.prefill_instances",
    "decode_instances": "pd.decode_instances",
    "pd_decider": "pd.decider",
    "pd_threshold": "pd.threshold",
    "pd_transfer_bandwidth_gbps": "pd.transfer_bandwidth_gbps",
    "pd_transfer_base_latency_ms": "pd.transfer_base_latency_ms",
    "pd_transfer_charge": "pd.transfer_charge",
    "pd_transfer_contention": "pd.transfer_contention",
    "pd_first_token": "pd.first_token",
    "pd_on_decode_full": "pd.on_decode_full",
    **{f"kv_{tier}_{name}": f"kv_tiers.{tier}_{name}" for tier in TIER_NAMES
       for name in ("blocks", "bytes", "read_gbps", "write_gbps", "latency_us")},
    "kv_store": "kv_tiers.store",
    "kv_load": "kv_tiers.load",
    "total_kv_blocks": "engine.total_kv_blocks",
    "block_size_in_tokens": "engine.block_size",
    "max_num_running_reqs": "engine.max_num_seqs",
    "max_num_seqs": "engine.max_num_seqs",
    "max_num_scheduled_tokens": "engine.max_num_batched_tokens",
    "max_num_batched_tokens": "engine.max_num_batched_tokens",
    "long_prefill_token_threshold": "engine.long_prefill_token_threshold",
    "gpu_memory_utilization": "engine.gpu_memory_utilization",
    "enable_prefix_caching": "engine.enable_prefix_caching",
    "admission_latency": "simulation.admission_latency",
    "routing_latency": "simulation.routing_latency",
    "compat": "simulation.compat",
    "admission_policy": "policy.admission",
    "admission_program": "policy.admission_program",
    "token_bucket_capacity": "policy.token_bucket_capacity",
    "token_bucket_refill_rate": "policy.token_bucket_refill_rate",
    "routing_policy": "policy.routing",
    "routing_scorers": "policy.routing_scorers",
    "routing_program": "policy.routing_program",
    "priority_policy": "policy.priority",
    "slo_class_weights": "policy.slo_class_weights",
    "priority_program": "policy.priority_program",
    "scheduler": "policy.scheduler",
    "scheduler_weights": "policy.scheduler_weights",
    "scheduler_program": "policy.scheduler_program",
    "preemption_victim": "policy.preemption_victim",
    "victim_program": "policy.victim_program",
    "snapshot_refresh_interval": "policy.snapshot_refresh_interval",
    "snapshot_intervals": "policy.snapshot_intervals",
    "prefix_index_capacity": "policy.prefix_index_capacity",
    "fitness_weights": "policy.fitness_weights",
    "routing_per_model": "policy.routing_per_model",
    "flow_per_model": "policy.flow_per_model",
    "flow_control": "policy.flow_control",
    "flow_concurrency_limit": "policy.flow_concurrency_limit",
    "flow_queue_threshold": "policy.flow_queue_threshold",
    "flow_kv_threshold": "policy.flow_kv_threshold",
    "dispatch_order": "policy.dispatch_order",
    "gateway_fairness": "policy.gateway_fairness",
    "dispatch_program": "policy.dispatch_program",
    "flow_instance_program": "policy.flow_instance_program",
    "flow_saturated_program": "policy.flow_saturated_program",
    "flow_recheck": "policy.flow_recheck",
    "objectives": "objectives",
    "trace_level": "simulation.trace_level",
    "counterfactual_k": "simulation.counterfactual_k",
    "sample_interval_ms": "simulation.sample_interval_ms",
    "check_invariants": "simulation.check_invariants",
    "max_events": "simulation.max_events",
    "max_memory": "simulation.max_memory",
    "warmup_s": "simulation.warmup_s",
    "cooldown_s": "simulation.cooldown_s",
}
_PATH_FLAG = {}
for _flag, _path in FLAG_PATHS.items():
    _PATH_FLAG.setdefault(_path, _flag)
_SECTIONS = {"engine": EngineConfig, "deployment": DeploymentConfig, "pd": PDConfig, "kv_tiers": KvTiersConfig,
             "autoscale": AutoscaleConfig, "workload": WorkloadConfig, "simulation": SimulationConfig, "policy": PolicyConfig}
# what a section that is not a mapping may have been meant as
_SECTION_HINTS = {"kv_tiers": " (cpu_blocks, cpu_bytes, ..., store, load; the list form of kv_tiers belongs in a "
                              "deployments: entry)"}
# a section's field -> the key of a deployments: entry that sets the same thing (for messages)
_SECTION_ENTRY_KEYS = {"pd": PD_ENTRY_KEYS, "kv_tiers": KV_SHORTHAND_ENTRY_KEYS,
                       "autoscale": AUTOSCALE_SHORTHAND_ENTRY_KEYS, "deployment": {"num_instances": "instances"}}


def _section_classes() -> dict:
    return _SECTIONS


def flat_name(path: str) -> str | None:
    """The flat setting name of a config path (``kv_tiers.cpu_blocks`` -> ``kv_cpu_blocks``),
    None if it has none."""
    return _PATH_FLAG.get(path)


def flag_for(path: str) -> str:
    """The CLI flag of a config path (``engine.max_num_seqs`` -> ``--max-num-running-reqs``)."""
    flag = _PATH_FLAG.get(path)
    return "--" + flag.replace("_", "-") if flag else path


def load_yaml(path: str | Path, name: str = "--config") -> dict:
    """Read a run-config YAML file into a dict (errors name ``name``: the flag or keyword
    that gave the file)."""
    return read_yaml_mapping(path, name)


def build_config(yaml_data: dict | None = None, overrides: dict[str, Any] | None = None,
                 policy_settings: dict[str, Any] | None = None, policy_origin: str = "--policy-config",
                 *, keywords: bool = False, settled: Collection[str] = ()) -> SimConfig:
    """Defaults <- YAML data <- policy bundle settings <- CLI overrides (flat flag names;
    None = not given).  ``policy_settings`` are PolicyConfig fields (blis_fast.config.policy.load_policy_bundle).
    Errors name an override as its flag (``--num-instances``), or with ``keywords`` as the
    Python keyword argument it came from (``num_instances``).  ``settled``: the nested
    paths of ``yaml_data`` copied from a config already checked (``with_overrides``), which
    blis_fast.config.effective does not refuse again.
    Every value is converted and range-checked by the shared checkers
    (``blis_fast.config.validate``); errors name the YAML path or flag as the user spelled it."""
    nested: dict[str, Any] = {}
    origin: dict[str, str] = {}  # path -> how the user spelled it (for messages)
    layer: dict[str, int] = {}  # path -> which layer set it (blis_fast.config.effective)
    yaml_data = dict(as_mapping({} if yaml_data is None else yaml_data, "config", what="a mapping of settings"))
    overrides = dict(overrides or {})
    deployments, deployments_where = yaml_data.pop("deployments", None), "deployments"
    if overrides.get("deployments") is not None:  # (the API keyword simulate(deployments=[...]))
        deployments, deployments_where = overrides["deployments"], "deployments"
    overrides.pop("deployments", None)
    for key, value in yaml_data.items():
        if key in _SECTIONS and not (key in FLAG_PATHS and not isinstance(value, dict)):
            # (``workload: chatbot`` is the flat BLIS flag; ``workload: {...}`` the section)
            if not isinstance(value, dict):
                raise ConfigError(key, f"must be a mapping, got {show(value)}{_SECTION_HINTS.get(key, '')}")
            names = {f.name for f in fields(_SECTIONS[key])}
            for sub, v in value.items():
                if sub not in names:
                    raise ConfigError(f"{key}.{key_name(sub)}",
                                      f"unknown key; known: {', '.join(sorted(names))}")
                nested[f"{key}.{sub}"] = v
                origin[f"{key}.{sub}"] = f"{key}.{sub}"
                layer[f"{key}.{sub}"] = effective.YAML
        elif key in FLAG_PATHS:
            nested[FLAG_PATHS[key]] = value
            origin[FLAG_PATHS[key]] = key
            layer[FLAG_PATHS[key]] = effective.YAML
        else:
            known = sorted(set(FLAG_PATHS) | set(_SECTIONS) | {"deployments"})
            raise ConfigError(key_name(key), f"unknown key; known: {', '.join(known)}")
    for path in settled:
        if layer.get(path) == effective.YAML:
            layer[path] = effective.SETTLED
    for name, value in (policy_settings or {}).items():
        nested[f"policy.{name}"] = value
        origin[f"policy.{name}"] = f"{policy_origin} ({name})"
        layer[f"policy.{name}"] = effective.BUNDLE
    for flag, value in overrides.items():
        if value is None:
            continue
        if not isinstance(flag, str) or flag not in FLAG_PATHS:
            raise ConfigError(key_name(flag), "unknown setting")
        nested[FLAG_PATHS[flag]] = value
        origin[FLAG_PATHS[flag]] = flag if keywords else "--" + flag.replace("_", "-")
        layer[FLAG_PATHS[flag]] = effective.FLAGS

    def where(path: str) -> str:
        if path in origin:
            return origin[path]
        for p, o in origin.items():  # e.g. policy.routing_scorers.queue-depth under --routing-scorers
            if path.startswith(p + ".") or path.startswith(p + "["):
                return o + path[len(p):]
        return path

    effective.drop_switched_slot_parameters(nested, layer, where)
    deps = None
    if deployments is not None:
        deps = parse_deployments(deployments, deployments_where)
        _refuse_single_deployment_settings(nested, layer, where)
    sections = {}
    for name, cls in _SECTIONS.items():
        kwargs = {}
        for f in fields(cls):
            path = f"{name}.{f.name}"
            if path in nested:
                kwargs[f.name] = _coerce(nested[path], f, where(path))
        try:
            sections[name] = cls(**kwargs)
        except ConfigError as exc:
            raise ConfigError(where(exc.field), exc.message) from None
    if sections["pd"].pools and deps is None:
        _refuse_instance_count_with_pools(nested, layer, where)
    top = {}
    for f in fields(SimConfig):
        if f.name in _SECTIONS or f.name not in nested:
            continue
        top[f.name] = _coerce(nested[f.name], f, where(f.name))
    try:
        cfg = SimConfig(**top, **sections, deployments=deps)
        validate(cfg)
    except ConfigError as exc:
        raise ConfigError(where(exc.field), exc.message) from None
    # every given setting changes the run, or is refused (or, in compat mode, ignored with a warning)
    return effective.check_effective(cfg, layer, where)


# the engine keys of a deployments: entry: the flags' YAML names (and the field names)
DEPLOYMENT_ENGINE_KEYS: dict[str, str] = {
    **{flag: path.split(".", 1)[1] for flag, path in FLAG_PATHS.items()
       if path.startswith("engine.") and flag not in ("pp", "dp")},
    "block_size": "block_size",
}


def parse_deployments(value: Any, where: str = "deployments") -> tuple[DeploymentSpec, ...]:
    """A ``deployments:`` list (YAML or the API keyword) -> checked DeploymentSpecs; errors
    name the entry's key as the user spelled it (``deployments[1].tp``)."""
    entries = as_list(value, where, what="a list of deployments")
    deps = tuple(_parse_deployment(entry, f"{where}[{i}]") for i, entry in enumerate(entries))
    check_deployments(deps, where)
    return deps


def _parse_deployment(entry: Any, path: str) -> DeploymentSpec:
    entry = as_mapping(entry, path, set(ENTRY_KEYS) | set(DEPLOYMENT_ENGINE_KEYS),
                       what="a mapping of deployment settings (name, model, hardware, tp, instances, ...)")
    for key in ("name", "model"):
        if key not in entry:
            raise ConfigError(f"{path}.{key}", "is required")
    engine = _parse_engine(entry, path, EngineConfig())
    pools = {role: _parse_pool(entry[role], f"{path}.{role}", engine)
             for role in ("prefill", "decode", "both") if entry.get(role) is not None}
    if "instances" in entry and pools:
        raise ConfigError(f"{path}.instances", "is the sum of the pools' instances with prefill and decode pools: "
                                               "set prefill.instances and decode.instances (and both.instances) "
                                               "instead")
    if entry.get("pd") is not None:
        pools["pd"] = _parse_pd(entry["pd"], f"{path}.pd")
    kwargs = {f.name: _coerce(entry[f.name], f, f"{path}.{f.name}")
              for f in fields(DeploymentSpec) if f.name in entry and f.name in _ENTRY_SETTINGS}
    kv_tiers = _parse_kv_tiers(entry, path)
    autoscale = parse_autoscale_entry(entry, path)
    try:
        return DeploymentSpec(**kwargs, engine=engine, kv_tiers=kv_tiers, autoscale=autoscale, **pools)
    except ConfigError as exc:
        raise ConfigError(f"{path}.{exc.field}", exc.message) from None


# the keys of a deployments: entry that are plain settings (the others are parsed as sections)
_ENTRY_SETTINGS = ("name", "model", "served_model_name", "hardware", "latency_model", "alpha_coeffs", "beta_coeffs",
                   "vllm_version", "instances")


def _parse_engine(entry: dict, path: str, base: EngineConfig) -> EngineConfig:
    """The engine of a deployments: entry or of one of its pools: ``base`` with the
    entry's engine keys (the flags' YAML names, or an ``engine:`` mapping) over it;
    errors name the key as the user spelled it (``deployments[0].decode.tp``)."""
    engine_names = {f.name for f in fields(EngineConfig)}
    given: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if entry.get("engine") is not None:  # (the nested shape SimConfig.to_dict writes)
        for k, v in as_mapping(entry["engine"], f"{path}.engine", engine_names).items():
            given[k], origin[k] = v, f"{path}.engine.{k}"
    for key, v in entry.items():
        name = DEPLOYMENT_ENGINE_KEYS.get(key)
        if name is None:
            continue
        if name in given:
            raise ConfigError(f"{path}.{key}", f"is given twice (also as {origin[name]})")
        given[name], origin[name] = v, f"{path}.{key}"
    engine_kwargs = {f.name: _coerce(given[f.name], f, origin[f.name]) for f in fields(EngineConfig) if f.name in given}
    for name in ("pp", "dp"):
        if engine_kwargs.get(name, 1) != 1:
            raise ConfigError(origin[name], "is not modelled yet: only 1 is accepted")
    try:
        return replace(base, **engine_kwargs)
    except ConfigError as exc:
        name = exc.field.rpartition(".")[2]
        raise ConfigError(origin.get(name, f"{path}.{name}"), exc.message) from None


def _parse_pool(value: Any, path: str, engine: EngineConfig) -> PoolSpec:
    """One pool of a deployments: entry (``prefill: {instances: 2, hardware: A100}``): its
    engine is the deployment's with the pool's engine keys over it; a block size other
    than the deployment's is refused naming the pool's key."""
    entry = as_mapping(value, path, set(POOL_KEYS) | set(DEPLOYMENT_ENGINE_KEYS) | set(KV_ENTRY_KEYS)
                       | set(AUTOSCALE_ENTRY_KEYS),
                       what="a mapping of pool settings (instances, hardware, tp, kv_tiers, min_instances, ...)")
    if "instances" not in entry:
        raise ConfigError(f"{path}.instances", "is required (the pool's instance count, >= 1)")
    pool_engine = _parse_engine(entry, path, engine)
    if pool_engine.block_size != engine.block_size:
        key = next((k for k in ("block_size_in_tokens", "block_size") if k in entry), "engine.block_size")
        raise ConfigError(f"{path}.{key}", f"is {pool_engine.block_size} but the deployment's block size is "
                                           f"{engine.block_size}: a pool may not change it (one per model: a "
                                           "request's prefix-cache keys are per block, and its KV moves between "
                                           "the pools)")
    kwargs = _parse_settings(PoolSpec, {k: v for k, v in entry.items() if k in POOL_KEYS and k != "engine"}, path)
    has_engine = "engine" in entry or any(k in DEPLOYMENT_ENGINE_KEYS for k in entry)
    kv_tiers = _parse_kv_tiers(entry, path)
    autoscale = parse_autoscale_entry(entry, path)
    try:
        return PoolSpec(**kwargs, engine=pool_engine if has_engine else None, kv_tiers=kv_tiers, autoscale=autoscale)
    except ConfigError as exc:
        raise ConfigError(f"{path}.{exc.field}", exc.message) from None


def _parse_pd(value: Any, path: str) -> PDSpec:
    """A deployments: entry's ``pd:`` mapping (with its ``transfer:`` mapping)."""
    names = [f.name for f in fields(PDSpec)]
    entry = as_mapping(value, path, names, what="a mapping of P/D settings (" + ", ".join(names) + ")")
    kwargs = _parse_settings(PDSpec, {k: v for k, v in entry.items() if k != "transfer"}, path)
    transfer = {}
    if entry.get("transfer") is not None:
        transfer_names = [f.name for f in fields(TransferSpec)]
        transfer = as_mapping(entry["transfer"], f"{path}.transfer", transfer_names,
                              what="a mapping of transfer settings (" + ", ".join(transfer_names) + ")")
        kwargs["transfer"] = TransferSpec(**_parse_settings(TransferSpec, transfer, f"{path}.transfer"))
    spec = PDSpec(**kwargs)
    for key in entry:  # (every given setting changes the run, or is refused: blis_fast.config.effective)
        why = unused_with_decider(key, spec.decider) if key != "transfer" or transfer else None
        if why:
            raise ConfigError(f"{path}.{key}", why)
    return spec


_TIER_KEYS = tuple(f.name for f in fields(TierSpec))


def _parse_kv_tiers(entry: dict, path: str) -> KvTiersSpec | None:
    """The KV tiers of a deployments: entry or pool entry: its ``kv_tiers`` list (of
    mappings with name, blocks or bytes, read_gbps, write_gbps, latency_us), ``kv_store``
    and ``kv_load``; None when it gives none of them.  Errors name the key as written
    (``deployments[0].kv_tiers[1].bytes``, ``deployments[0].decode.kv_store``)."""
    given = {key: entry[key] for key in KV_ENTRY_KEYS if entry.get(key) is not None}
    if not given:
        return None
    what = "a list of tiers ({name: cpu or disk, blocks or bytes, read_gbps, write_gbps, latency_us})"
    items = as_list(given.get("kv_tiers", []), f"{path}.kv_tiers", max_len=len(TIER_NAMES), what=what)
    tiers = []
    for i, item in enumerate(items):
        where = f"{path}.kv_tiers[{i}]"
        item = as_mapping(item, where, _TIER_KEYS, what=f"a mapping of tier settings ({', '.join(_TIER_KEYS)})")
        if "name" not in item:
            raise ConfigError(f"{where}.name", f"is required ({' or '.join(TIER_NAMES)})")
        kwargs = _parse_settings(TierSpec, item, where)
        try:
            tiers.append(TierSpec(**kwargs))
        except ConfigError as exc:
            raise ConfigError(f"{where}.{exc.field}", exc.message) from None
    by_name = {f.name: f for f in fields(KvTiersSpec)}
    modes = {name: _coerce(given[f"kv_{name}"], by_name[name], f"{path}.kv_{name}")
             for name in ("store", "load") if f"kv_{name}" in given}
    try:
        return KvTiersSpec(tuple(tiers), **modes)
    except ConfigError as exc:
        raise ConfigError(f"{path}.{entry_field(exc.field)}", exc.message) from None


def _parse_settings(cls, entry: dict, path: str) -> dict:
    """The keyword arguments of settings dataclass ``cls`` from a mapping of its fields
    (keys already checked), each converted and range-checked (``_coerce``), errors
    naming ``<path>.<key>``."""
    by_name = {f.name: f for f in fields(cls)}
    return {key: _coerce(v, by_name[key], f"{path}.{key}") for key, v in entry.items()}


def _refuse_single_deployment_settings(nested: dict, layer: dict, where) -> None:
    """With a deployments: list, the top-level model, hardware, latency-model and engine
    settings and the instance count belong in the entries: refuse any given explicitly
    (not those of a config already checked, which mirror its first deployment)."""
    for path in nested:
        if layer.get(path) == effective.SETTLED:
            continue
        section, _, name = path.rpartition(".")
        if path in PER_DEPLOYMENT_SETTINGS or section in PER_DEPLOYMENT_SECTIONS:
            key = _SECTION_ENTRY_KEYS.get(section, {}).get(name, name)
            raise ConfigError(where(path), f"is a per-deployment setting: with a deployments: list, set it in each "
                                           f"entry (deployments[i].{key}) instead")


def _refuse_instance_count_with_pools(nested: dict, layer: dict, where) -> None:
    """With the pd section's P/D pools, the deployment's instance count is the pools' sum:
    refuse ``num_instances`` (and the pool bounds) given explicitly (not those of a config
    already checked)."""
    for path, value in nested.items():
        if path.startswith("deployment.") and value is not None and layer.get(path) != effective.SETTLED:
            raise ConfigError(where(path), "is the sum of --prefill-instances and --decode-instances with P/D pools "
                                           "(pd.prefill_instances, pd.decode_instances): leave it out")


def _objectives(value: Any, where: str) -> list[dict]:
    from blis_fast.results.objectives import objectives_setting  # deferred: blis_fast_kernels.native -- (results load numpy: only when used)

    return objectives_setting(value, where)


def check_ready_workload(keywords: dict) -> None:
    """Refuse keyword settings describing a workload when a ready-made Workload replaces
    the one the config describes (``blis_fast.simulate(workload=wl, rate=...)``)."""
    for name, value in keywords.items():
        if value is not None and FLAG_PATHS.get(name) in effective.WORKLOAD_SETTINGS:
            raise ConfigError(name, "has no effect with a Workload passed in (workload=): it describes the "
                                    "workload the config would build; build the Workload with it instead, or "
                                    "leave workload= out")


def validate(cfg: SimConfig) -> None:
    """Cross-field checks (each field's own range is checked by its dataclass)."""
    w, d = cfg.workload, cfg.deployment
    if cfg.objectives is not None:
        _objectives(cfg.objectives, "objectives")
    if cfg.simulation.counterfactual_k and cfg.simulation.trace_level == "none":
        raise ConfigError("simulation.counterfactual_k", "needs the decision trace: drop trace_level none "
                                                         "(or set it to decisions or full)")
    for name in ("alpha_coeffs", "beta_coeffs"):
        v = getattr(cfg, name)
        if v is not None and len(v) != 3:
            raise ConfigError(name, f"must be 3 finite numbers in [0, {MAX_COEFF:g}] µs, got {show(v)}")
    if cfg.deployments is None:
        _check_full_step(cfg.beta_coeffs, cfg.engine, "beta_coeffs")
    else:
        for i, dep in enumerate(cfg.deployments):
            _check_full_step(dep.beta_coeffs, dep.engine, f"deployments[{i}].beta_coeffs")
            for role, pool in dep.pools:  # (a pool's own coefficients or engine, else the deployment's)
                _check_full_step(dep.beta_coeffs if pool.beta_coeffs is None else pool.beta_coeffs,
                                 pool.engine or dep.engine, f"deployments[{i}].{role}.beta_coeffs")
    if w.type == "traces" and not w.traces_filepath and not w.spec_filepath:
        raise ConfigError("workload.traces_filepath", "is required with workload type 'traces'")
    check_bounds(d.min_instances, d.max_instances, d.num_instances, "deployment.")


def _check_full_step(beta: list[float] | None, engine: EngineConfig, where: str) -> None:
    if beta is not None:
        b0, b1, b2 = beta
        step = b0 + b1 * engine.max_num_batched_tokens + b2 * engine.max_num_seqs
        if step > MAX_STEP_US:
            raise ConfigError(where, f"a full step (β0 + β1·max_num_batched_tokens + β2·max_num_seqs) would "
                                     f"take {step:.3g} µs, more than 2^53 µs; lower the coefficients")


def with_overrides(cfg: SimConfig, **flat: Any) -> SimConfig:
    """A copy of ``cfg`` with flat-named settings changed (API convenience), re-validated."""
    data = cfg.to_dict()
    for flag, value in flat.items():
        if flag not in FLAG_PATHS:
            raise ConfigError(key_name(flag), "unknown setting")
        section, _, name = FLAG_PATHS[flag].rpartition(".")
        (data.setdefault(section, {}) if section else data)[name] = value
    changed = {FLAG_PATHS[flag] for flag in flat}
    return build_config(data, settled=[p for p in section_paths(data) if p not in changed])


def section_paths(data: dict) -> list[str]:
    """The nested paths (``workload.rate``) of a dict shaped like a run-config file."""
    return [f"{section}.{name}" for section, values in data.items() if isinstance(values, dict) for name in values]


# ----------------------------------------------------------------------------- helpers


def _coerce(value: Any, f, where: str) -> Any:
    """A YAML/CLI/API value converted to field ``f``'s type (text parsed strictly) and
    checked against its limits (blis_fast.config.validate)."""
    parse = f.metadata.get("parse")
    if parse is not None and value is not None:
        return parse(value, where)
    base = str(f.type).replace(" | None", "").strip()
    if base.startswith("dict[str, "):
        if value is None:
            return None
        weights = parse_weights(value, where)
        if base == "dict[str, int]":
            return {k: as_int(v, f"{where}.{k}") for k, v in weights.items()}
        return weights
    return check_value(value, f.type, f.metadata.get("limits"), where, text=True)


def _to_dict(obj: Any) -> Any:
    if is_dataclass(obj):
        return {f.name: _to_dict(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_to_dict(x) for x in obj]
    return obj


__all__ = [
    "SimConfig", "EngineConfig", "WorkloadConfig", "DeploymentConfig", "SimulationConfig", "DeploymentSpec",
    "parse_deployments",
    "FLAG_PATHS", "build_config", "check_ready_workload", "load_yaml", "validate", "with_overrides", "flag_for", "replace",
]
