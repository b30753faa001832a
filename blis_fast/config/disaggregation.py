"""Prefill/decode disaggregation: the settings of a deployment split into a prefill pool,
a decode pool and optionally a pool doing both (docs/architecture.md "Prefill/decode
pools"; issue 22).

- ``PoolSpec``: one pool of a disaggregated deployment (``DeploymentSpec.prefill``,
  ``.decode``, ``.both``); its ``None`` fields take the deployment's value.
- ``PDSpec`` and ``TransferSpec``: the P/D decider, where the first token comes from,
  what happens when the decode instance is full, and the KV transfer's link
  (``DeploymentSpec.pd``; one per served model).
- ``PDConfig``: the single-deployment shorthand, the run config's top-level ``pd``
  section and its flags (``--prefill-instances``, ``--decode-instances``, ``--pd-*``).

Every field is declared with ``setting(...)``, so its range, choices and one-line error
come from the shared checkers (``blis_fast.config.validate.check_fields``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from blis_fast.config.engine import EngineConfig
from blis_fast.config.latency import AUTO, LATENCY_MODELS, MAX_COEFF
from blis_fast.config.validate import MAX_INSTANCES, Limits, check_fields, show
from blis_fast.config.validate import setting as _opt
from blis_fast.errors import ConfigError

if TYPE_CHECKING:  # (config.kv_tiers imports this module's bandwidth limits; DeploymentSpec checks the type)
    from blis_fast.config.autoscale import AutoscaleSpec
    from blis_fast.config.kv_tiers import KvTiersSpec

PD_DECIDERS = ("never", "always", "prefix-threshold")
TRANSFER_CHARGES = ("destination-missing", "full-prompt")
TRANSFER_CONTENTIONS = ("none", "link")
FIRST_TOKEN_SIDES = ("decode", "prefill")
ON_DECODE_FULL = ("wait", "drop")
POOL_ROLES = ("prefill", "decode", "both")  # in the order of their instance rows

MAX_THRESHOLD = 10**9  # tokens (the decider's threshold)
MAX_BANDWIDTH_GBPS = 1e6  # GB/s (1e9 bytes/s) per link
# ... and at least 1 kB/s: a transfer's time (bytes / bandwidth) then stays a number of µs the
# simulated clock holds (1e-300 GB/s would make it overflow int64)
MIN_BANDWIDTH_GBPS = 1e-6
MAX_BASE_LATENCY_MS = 1e6  # ms

# the keys of a pool entry besides the engine settings (the flags' YAML names, as a deployment entry takes)
POOL_KEYS = ("instances", "hardware", "latency_model", "alpha_coeffs", "beta_coeffs", "vllm_version", "engine")

_THRESHOLD_HELP = ("disaggregate a request when its prompt tokens not cached on the chosen decode instance are at "
                   "least this many (decider prefix-threshold)")
_BANDWIDTH_HELP = "KV transfer bandwidth per link (each TP rank on its own link), GB/s = 1e9 bytes/s"
_LATENCY_HELP = "fixed latency of every KV transfer, ms"
_CHARGE_HELP = ("KV tokens a transfer moves: destination-missing (only the blocks the decode instance does not "
                "hold in its prefix cache) | full-prompt")
_CONTENTION_HELP = ("none (every transfer at the full bandwidth) | link (the transfers leaving one prefill instance "
                    "share its bandwidth)")
_DECIDER_HELP = "which requests are disaggregated: never | always | prefix-threshold"
_FIRST_TOKEN_HELP = ("the instance that emits the first output token (TTFT ends there): decode (vLLM, llm-d) | "
                     "prefill (systems that stream it from the prefill side)")
_ON_FULL_HELP = ("a transfer finding no room on the decode instance: wait (in that instance's transfer queue, in "
                 "order, until blocks free) | drop (the request is dropped and counted)")


def check_coefficients(obj) -> None:
    """``alpha_coeffs`` and ``beta_coeffs`` of a settings object hold 3 numbers when given
    (each number's range is checked by its ``setting``)."""
    for name in ("alpha_coeffs", "beta_coeffs"):
        v = getattr(obj, name)
        if v is not None and len(v) != 3:
            raise ConfigError(name, f"must be 3 finite numbers in [0, {MAX_COEFF:g}] µs, got {show(v)}")


def _check_type(obj, name: str, cls: type, optional: bool = False) -> None:
    value = getattr(obj, name)
    if not (isinstance(value, cls) or (optional and value is None)):
        raise ConfigError(name, f"must be a {cls.__name__}{' or None' if optional else ''}, got {show(value)}")


@dataclass(frozen=True)
class TransferSpec:
    """The KV transfer from a prefill instance to a decode instance: it takes
    ``base_latency_ms + charged tokens x KV bytes per token / bandwidth``."""

    bandwidth_gbps: float = _opt(25.0, _BANDWIDTH_HELP, lo=MIN_BANDWIDTH_GBPS, hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
    base_latency_ms: float = _opt(0.05, _LATENCY_HELP, lo=0, hi=MAX_BASE_LATENCY_MS, unit="ms")
    charge: str = _opt("destination-missing", _CHARGE_HELP, choices=TRANSFER_CHARGES)
    contention: str = _opt("none", _CONTENTION_HELP, choices=TRANSFER_CONTENTIONS)

    def __post_init__(self) -> None:
        check_fields(self, "")


@dataclass(frozen=True)
class PDSpec:
    """How one served model's requests are disaggregated (the decider and the transfer)."""

    decider: str = _opt("prefix-threshold", _DECIDER_HELP, choices=PD_DECIDERS)
    threshold: int = _opt(16, _THRESHOLD_HELP, lo=0, hi=MAX_THRESHOLD, unit="tokens")
    first_token: str = _opt("decode", _FIRST_TOKEN_HELP, choices=FIRST_TOKEN_SIDES)
    on_decode_full: str = _opt("wait", _ON_FULL_HELP, choices=ON_DECODE_FULL)
    transfer: TransferSpec = field(default_factory=TransferSpec, metadata={"help": "the KV transfer's link"})

    def __post_init__(self) -> None:
        check_fields(self, "")
        _check_type(self, "transfer", TransferSpec)


@dataclass(frozen=True)
class PoolSpec:
    """One pool of a disaggregated deployment; None fields = the deployment's value."""

    instances: int = field(metadata={"help": "instances of this pool (>= 1)",  # (required: no default)
                                     "limits": Limits(lo=1, hi=MAX_INSTANCES)})
    hardware: str | None = _opt(None, "GPU of this pool (default: the deployment's)", max_len=256)
    latency_model: str | None = _opt(None, "blackbox | roofline | auto (default: the deployment's)",
                                     choices=LATENCY_MODELS + (AUTO,))
    alpha_coeffs: list[float] | None = _opt(None, "α0,α1,α2 (µs; default: the deployment's)", lo=0, hi=MAX_COEFF,
                                            max_len=3, unit="µs")
    beta_coeffs: list[float] | None = _opt(None, "β0,β1,β2 (µs; default: the deployment's)", lo=0, hi=MAX_COEFF,
                                           max_len=3, unit="µs")
    vllm_version: str | None = _opt(None, "coefficient-set vLLM version (default: the deployment's)", max_len=256)
    engine: EngineConfig | None = field(default=None, metadata={
        "help": "the whole engine of this pool: the deployment's engine with the pool's engine keys over it "
                "(None: the deployment's)"})
    kv_tiers: KvTiersSpec | None = field(default=None, metadata={
        "help": "the KV cache tiers of this pool, replacing the deployment's whole tier setting (None: the "
                "deployment's)"})
    autoscale: AutoscaleSpec | None = field(default=None, metadata={
        "help": "the autoscaling bounds and delays of this pool (its min_instances, max_instances and autoscale "
                "keys; None: it keeps its instances); DeploymentSpec checks it"})

    def __post_init__(self) -> None:
        check_fields(self, "")
        _check_type(self, "engine", EngineConfig, optional=True)
        check_coefficients(self)


def check_pools(prefill: PoolSpec | None, decode: PoolSpec | None, both: PoolSpec | None, pd: PDSpec | None,
                engine: EngineConfig) -> None:
    """The pool rules of one deployment (fields named relative to it: ``decode.instances``):
    prefill and decode come together, ``both`` and ``pd`` only with them, and no pool
    changes the KV block size (one per model: a request's prefix-cache keys are per block)."""
    for name, value, cls in (("prefill", prefill, PoolSpec), ("decode", decode, PoolSpec),
                             ("both", both, PoolSpec), ("pd", pd, PDSpec)):
        if value is not None and not isinstance(value, cls):
            raise ConfigError(name, f"must be a {cls.__name__} or None, got {show(value)}")
    if (prefill is None) != (decode is None):
        given, missing = ("prefill", "decode") if decode is None else ("decode", "prefill")
        raise ConfigError(missing, f"is required with {given}: a disaggregated deployment has a prefill and a "
                                   "decode pool (leave both out for one pool)")
    if prefill is None:
        if both is not None:
            raise ConfigError("both", "needs prefill and decode pools (a both pool serves next to them)")
        if pd is not None:
            raise ConfigError("pd", "pd settings need prefill and decode pools (set prefill.instances and "
                                    "decode.instances)")
        return
    spec = pd if pd is not None else PDSpec()
    if both is not None and spec.decider != "never" and spec.on_decode_full == "wait":
        # a both instance holds prefill legs' blocks while transfers wait for its blocks: two of them can
        # wait for each other forever (pure prefill and decode pools cannot)
        raise ConfigError("pd.on_decode_full", "must be drop with a both pool (default wait): a both instance "
                                               "holds prefill legs' blocks while transfers may wait for its blocks, "
                                               "so two of them could wait for each other forever")
    for role, pool in (("prefill", prefill), ("decode", decode), ("both", both)):
        if pool is not None and pool.engine is not None and pool.engine.block_size != engine.block_size:
            raise ConfigError(f"{role}.block_size",
                              f"is {pool.engine.block_size} but the deployment's is {engine.block_size}: a pool may "
                              "not change the KV block size (one per model: a request's prefix-cache keys are per "
                              "block, and its KV moves between the pools)")


def any_disaggregated(deployments) -> bool:
    """True if one of ``deployments`` (DeploymentSpecs or resolved deployments) has prefill
    and decode pools."""
    return any(d.pd is not None for d in deployments)


@dataclass(frozen=True)
class PDConfig:
    """The single-deployment shorthand of P/D pools: the run config's ``pd`` section and
    its flags.  With ``prefill_instances`` and ``decode_instances`` both set, the
    top-level deployment has a prefill and a decode pool of these sizes
    (``SimConfig.deployment_list``); None = the default of ``PDSpec`` / ``TransferSpec``."""

    prefill_instances: int | None = _opt(None, "prefill/decode disaggregation: instances of the prefill pool "
                                               "(with --decode-instances; replaces --num-instances)",
                                         lo=1, hi=MAX_INSTANCES)
    decode_instances: int | None = _opt(None, "prefill/decode disaggregation: instances of the decode pool "
                                              "(with --prefill-instances; replaces --num-instances)",
                                        lo=1, hi=MAX_INSTANCES)
    decider: str | None = _opt(None, _DECIDER_HELP + " (default prefix-threshold)", choices=PD_DECIDERS)
    threshold: int | None = _opt(None, _THRESHOLD_HELP + " (default 16)", lo=0, hi=MAX_THRESHOLD, unit="tokens")
    first_token: str | None = _opt(None, _FIRST_TOKEN_HELP + " (default decode)", choices=FIRST_TOKEN_SIDES)
    on_decode_full: str | None = _opt(None, _ON_FULL_HELP + " (default wait)", choices=ON_DECODE_FULL)
    transfer_bandwidth_gbps: float | None = _opt(None, _BANDWIDTH_HELP + " (default 25)", lo=MIN_BANDWIDTH_GBPS,
                                                 hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
    transfer_base_latency_ms: float | None = _opt(None, _LATENCY_HELP + " (default 0.05)", lo=0,
                                                  hi=MAX_BASE_LATENCY_MS, unit="ms")
    transfer_charge: str | None = _opt(None, _CHARGE_HELP + " (default destination-missing)", choices=TRANSFER_CHARGES)
    transfer_contention: str | None = _opt(None, _CONTENTION_HELP + " (default none)", choices=TRANSFER_CONTENTIONS)

    def __post_init__(self) -> None:
        check_fields(self, "pd")

    def given(self) -> tuple[str, ...]:
        """The names of the fields that are set (not None), in field order."""
        return tuple(f.name for f in fields(self) if getattr(self, f.name) is not None)

    @property
    def pools(self) -> bool:
        """True when both instance counts are set: the deployment is disaggregated."""
        return self.prefill_instances is not None and self.decode_instances is not None

    def spec(self) -> PDSpec:
        """The PDSpec these settings give (unset ones at PDSpec's and TransferSpec's defaults)."""
        def some(names: dict[str, str]) -> dict:
            return {spec_name: getattr(self, name) for name, spec_name in names.items()
                    if getattr(self, name) is not None}

        transfer = TransferSpec(**some({"transfer_bandwidth_gbps": "bandwidth_gbps",
                                        "transfer_base_latency_ms": "base_latency_ms",
                                        "transfer_charge": "charge", "transfer_contention": "contention"}))
        return PDSpec(**some({"decider": "decider", "threshold": "threshold", "first_token": "first_token",
                              "on_decode_full": "on_decode_full"}), transfer=transfer)


# the deciders under which a PDSpec key changes a run: only prefix-threshold reads the
# threshold, and with ``never`` no request is disaggregated (no transfer, no decode leg)
PD_KEY_DECIDERS = {"threshold": ("prefix-threshold",), "first_token": ("always", "prefix-threshold"),
                   "on_decode_full": ("always", "prefix-threshold"), "transfer": ("always", "prefix-threshold")}


def unused_with_decider(key: str, decider: str) -> str | None:
    """Why PDSpec key ``key`` (``threshold``, ``transfer``, ...) changes nothing with
    ``decider``, else None (blis_fast.config.effective: a given setting changes the run
    or is refused)."""
    if decider in PD_KEY_DECIDERS.get(key, PD_DECIDERS):
        return None
    if key == "threshold":
        return (f"has no effect with decider {decider}: only the prefix-threshold decider reads the threshold; "
                "leave it out or choose decider prefix-threshold")
    return (f"has no effect with decider never: no request is disaggregated, so nothing is transferred or "
            "decoded apart; leave it out or choose decider always or prefix-threshold")


# a PDConfig field -> the key of a deployments: entry that sets the same thing
PD_ENTRY_KEYS = {"prefill_instances": "prefill.instances", "decode_instances": "decode.instances",
                 "decider": "pd.decider", "threshold": "pd.threshold", "first_token": "pd.first_token",
                 "on_decode_full": "pd.on_decode_full", "transfer_bandwidth_gbps": "pd.transfer.bandwidth_gbps",
                 "transfer_base_latency_ms": "pd.transfer.base_latency_ms", "transfer_charge": "pd.transfer.charge",
                 "transfer_contention": "pd.transfer.contention"}


__all__ = ["PD_DECIDERS", "TRANSFER_CHARGES", "TRANSFER_CONTENTIONS", "FIRST_TOKEN_SIDES", "ON_DECODE_FULL",
           "POOL_ROLES", "POOL_KEYS", "PD_ENTRY_KEYS", "MAX_THRESHOLD", "MAX_BANDWIDTH_GBPS", "MAX_BASE_LATENCY_MS",
           "PD_KEY_DECIDERS", "TransferSpec", "PDSpec", "PoolSpec", "PDConfig", "check_pools", "check_coefficients",
           "unused_with_decider"]
