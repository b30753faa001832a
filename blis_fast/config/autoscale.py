"""Autoscaling, the configuration side (docs/architecture.md "Autoscaling: configuration",
docs/limits.md; issue 24): what each pool's autoscaler may do and how slowly the cluster
follows it.  The policy that decides (``threshold``, ``target``, ...) is a policy setting
(``policy.autoscaler``, the bundle's ``autoscale:`` section; blis_fast.config.policy).

- ``Delay``: a delay in seconds, a constant or a seeded normal(mean, std) truncated at 0.
- ``WarmupSpec``: a new instance's step times x ``factor``, decaying to 1 by ``curve``
  over ``requests`` requests or ``seconds`` seconds.
- ``AutoscaleSpec``: one pool's bounds and delays, warm-up, stabilization windows, change
  per tick, drain mode, scale-down pick and GPU-hour cost.  A deployments: entry gives it
  with the keys ``min_instances``, ``max_instances`` and ``autoscale:`` (of the entry, or of
  each prefill/decode/both pool of a disaggregated one).
- ``AutoscaleConfig``: the single-deployment shorthand, the run config's top-level
  ``autoscale`` section and its flags (``--autoscale-interval-s``, ``--drain``, ...); the
  bounds of that deployment are ``--min-instances`` / ``--max-instances``.
- ``ResolvedAutoscale``: one pool's spec with every time in integer µs, its cost and the
  compiled policy row (``resolve_autoscale``, called by blis_fast.run.resolve).

Every field is declared with ``setting(...)``, so its range, choices and one-line error
come from the shared checkers (``blis_fast.config.validate.check_fields``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from blis_fast.config.policy import parse_weights
from blis_fast.config.validate import MAX_INSTANCES, as_float, as_mapping, check_fields, check_value, fmt_num, show
from blis_fast.config.validate import setting as _opt
from blis_fast.errors import ConfigError
from blis_fast_kernels import schema as S

MAX_AUTOSCALE_S = 1e7  # seconds: every autoscaling time and delay (mean and std); about 115 days
MIN_INTERVAL_S = 1e-3  # the shortest tick interval, seconds
MAX_WARMUP_FACTOR = 100.0  # a warming instance's step times x at most this
MAX_WARMUP_REQUESTS = 10**9
MAX_COST_PER_GPU_HOUR = 1e6  # currency units per GPU-hour

# typical on-demand cloud prices per GPU-hour (illustrative, not measured; give cost_per_gpu_hour
# for yours): the hardware_config.json names (blis_fast.config.hardware)
DEFAULT_COST_PER_GPU_HOUR = {"H100": 4.0, "A100-SXM": 2.5}

DELAY_DEFAULTS = {"provisioning_delay_s": 120.0, "loading_delay_s": 240.0}  # the reference's phase-2 example

_BOUND_HELP = ("bound of the pool's instance count under the autoscaler (the initial count lies within; "
               "default: the initial count)")
_INTERVAL_HELP = "seconds between two autoscaler ticks (each collects the signals and decides)"
_METRICS_HELP = "seconds from a tick's decision to its action (the metrics scrape delay)"
_PROVISIONING_HELP = ("seconds to provision a new instance's node: a number, or mean:M,std:S (a seeded normal "
                      "truncated at 0)")
_LOADING_HELP = "seconds to load the model on a new instance after provisioning: a number, or mean:M,std:S"
_STAB_UP_HELP = "seconds a scale-up wish must hold on every tick before it acts (0: act on the first tick)"
_STAB_DOWN_HELP = "seconds a scale-down wish must hold on every tick before it acts (Kubernetes HPA: 300)"
_MAX_CHANGE_HELP = "instances added or removed per tick at most (default: no limit)"
_DRAIN_HELP = ("how a scaled-down instance is drained: wait (no new requests; its requests finish) | redirect "
               "(waiting requests are routed again; running ones finish) | immediate (all its requests are routed "
               "again, their computed KV lost)")
_DRAIN_TIMEOUT_HELP = "drain wait only: seconds after which a draining instance's remaining requests are redirected"
_SCALE_DOWN_HELP = "which instance a scale-down drains: least-loaded | newest | oldest"
_COST_HELP = ("cost of one GPU for one hour, for the run's cost (default per GPU: H100 4.0, A100 2.5; illustrative "
              "prices)")
_FACTOR_HELP = "a warming instance's step times x this factor, decaying to 1 (1: no warm-up)"
_CURVE_HELP = "how the warm-up factor decays to 1: step (all of it, then 1) | linear | exponential"
_WARM_REQUESTS_HELP = "the warm-up lasts this many requests of the new instance (or give seconds)"
_WARM_SECONDS_HELP = "the warm-up lasts this many seconds after the instance is loaded (or give requests)"


def _us(seconds: float) -> int:
    """Seconds as whole µs, rounded to the nearest (30 -> 30000000, 0.1 -> 100000)."""
    return int(round(seconds * 1e6))


@dataclass(frozen=True)
class Delay:
    """A delay in seconds: ``mean`` when ``std`` is 0, else a seeded normal(mean, std)
    truncated at 0.  Given as a number or as ``{mean, std}`` (a flag: ``mean:120,std:30``)."""

    mean: float = _opt(0.0, "mean delay, seconds", lo=0, hi=MAX_AUTOSCALE_S, unit="s")
    std: float = _opt(0.0, "standard deviation, seconds (0: the constant mean)", lo=0, hi=MAX_AUTOSCALE_S, unit="s")

    def __post_init__(self) -> None:
        check_fields(self, "")

    def entry(self) -> float | dict:
        """As a run-config file writes it: the number, or ``{mean, std}``."""
        return self.mean if self.std == 0 else {"mean": self.mean, "std": self.std}


def parse_delay(value: Any, where: str) -> Delay:
    """A delay from YAML, a flag or the API: a number (``120``), a mapping ``{mean, std}``,
    the text ``mean:120,std:30``, or a Delay; the mean is required with a std."""
    if isinstance(value, Delay):
        return value
    if isinstance(value, dict) or (isinstance(value, str) and ":" in value):
        parts = parse_weights(as_mapping(value, where, ("mean", "std")) if isinstance(value, dict) else value, where)
        as_mapping(parts, where, ("mean", "std"))  # (the text form's names)
        if "mean" not in parts:
            raise ConfigError(f"{where}.mean", "is required (a std needs its mean: mean:M,std:S)")
        return Delay(**{k: as_float(v, f"{where}.{k}", 0, MAX_AUTOSCALE_S, unit="s") for k, v in parts.items()})
    return Delay(as_float(value, where, 0, MAX_AUTOSCALE_S, unit="s"))


@dataclass(frozen=True)
class WarmupSpec:
    """A new instance's warm-up: step times x ``factor``, decaying to 1 by ``curve`` over
    ``requests`` requests or ``seconds`` seconds (exactly one when factor > 1)."""

    factor: float = _opt(1.0, _FACTOR_HELP, lo=1, hi=MAX_WARMUP_FACTOR)
    curve: str = _opt("step", _CURVE_HELP, choices=S.WARMUP_CURVE_NAMES)
    requests: int | None = _opt(None, _WARM_REQUESTS_HELP, lo=1, hi=MAX_WARMUP_REQUESTS, unit="requests")
    seconds: float | None = _opt(None, _WARM_SECONDS_HELP, lo=0, lo_open=True, hi=MAX_AUTOSCALE_S, unit="s")

    def __post_init__(self) -> None:
        check_fields(self, "")
        if self.requests is not None and self.seconds is not None:
            raise ConfigError("seconds", "is given with requests: the warm-up lasts requests or seconds, not both")
        if self.factor > 1 and self.requests is None and self.seconds is None:
            raise ConfigError("factor", f"is {fmt_num(self.factor)} but the warm-up has no length: give requests or "
                                        "seconds (one of them)")
        if self.factor == 1:
            for name in ("requests", "seconds", "curve"):
                if getattr(self, name) != getattr(WarmupSpec, name, None):
                    raise ConfigError(name, "has no effect with factor 1 (no warm-up): give a factor > 1, or "
                                            "leave it out")

    def entry(self) -> dict:
        """The keys that differ from the defaults (a run-config file's ``warmup:``)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != f.default}


def _delay_field(name: str, help_text: str):
    return field(default_factory=lambda: Delay(DELAY_DEFAULTS[name]),
                 metadata={"help": help_text + f" (default {fmt_num(DELAY_DEFAULTS[name])})",
                           "parse": parse_delay})


@dataclass(frozen=True)
class AutoscaleSpec:
    """The autoscaling settings of one pool (module docstring).  ``min_instances`` /
    ``max_instances`` None: the pool's initial count (checked against it by
    ``check_bounds``)."""

    min_instances: int | None = _opt(None, "lower " + _BOUND_HELP, lo=1, hi=MAX_INSTANCES)
    max_instances: int | None = _opt(None, "upper " + _BOUND_HELP + "; the instance table holds this many rows",
                                     lo=1, hi=MAX_INSTANCES)
    interval_s: float = _opt(30.0, _INTERVAL_HELP, lo=MIN_INTERVAL_S, hi=MAX_AUTOSCALE_S, unit="s")
    metrics_delay_s: float = _opt(15.0, _METRICS_HELP, lo=0, hi=MAX_AUTOSCALE_S, unit="s")
    provisioning_delay_s: Delay = _delay_field("provisioning_delay_s", _PROVISIONING_HELP)
    loading_delay_s: Delay = _delay_field("loading_delay_s", _LOADING_HELP)
    warmup: WarmupSpec = field(default_factory=WarmupSpec, metadata={"help": "a new instance's warm-up"})
    stabilization_up_s: float = _opt(0.0, _STAB_UP_HELP, lo=0, hi=MAX_AUTOSCALE_S, unit="s")
    stabilization_down_s: float = _opt(300.0, _STAB_DOWN_HELP, lo=0, hi=MAX_AUTOSCALE_S, unit="s")
    max_change: int | None = _opt(None, _MAX_CHANGE_HELP, lo=1, hi=MAX_INSTANCES, unit="instances")
    drain: str = _opt("wait", _DRAIN_HELP, choices=S.DRAIN_NAMES)
    drain_timeout_s: float | None = _opt(None, _DRAIN_TIMEOUT_HELP, lo=0, lo_open=True, hi=MAX_AUTOSCALE_S, unit="s")
    scale_down: str = _opt("least-loaded", _SCALE_DOWN_HELP, choices=S.SCALE_DOWN_NAMES)
    cost_per_gpu_hour: float | None = _opt(None, _COST_HELP, lo=0, hi=MAX_COST_PER_GPU_HOUR)

    def __post_init__(self) -> None:
        check_fields(self, "")
        for name in ("provisioning_delay_s", "loading_delay_s"):
            if not isinstance(getattr(self, name), Delay):
                raise ConfigError(name, f"must be a Delay, got {show(getattr(self, name))}")
        if not isinstance(self.warmup, WarmupSpec):
            raise ConfigError("warmup", f"must be a WarmupSpec, got {show(self.warmup)}")
        if self.min_instances is not None and self.max_instances is not None \
                and self.min_instances > self.max_instances:
            raise ConfigError("min_instances", f"must be <= max_instances ({self.max_instances}), got "
                                               f"{self.min_instances}")
        if self.drain_timeout_s is not None and self.drain != "wait":
            raise ConfigError("drain_timeout_s", f"applies only to drain wait, not {self.drain}: {self.drain} "
                                                 "never waits for a draining instance's requests")
        for name in ("stabilization_up_s", "stabilization_down_s"):
            window = getattr(self, name)
            if 0 < window < self.interval_s:
                raise ConfigError(name, f"is {fmt_num(window)} s, shorter than interval_s ({fmt_num(self.interval_s)} "
                                        "s): a window holds whole ticks; give 0 (no window) or at least the interval")
            if window > (S.MAX_WINDOW_TICKS - 1) * self.interval_s:
                raise ConfigError(name, f"is {fmt_num(window)} s, more than {S.MAX_WINDOW_TICKS - 1} ticks of interval_s "
                                        f"({fmt_num(self.interval_s)} s): give at most "
                                        f"{fmt_num((S.MAX_WINDOW_TICKS - 1) * self.interval_s)} s or a longer interval")
        if self.metrics_delay_s > (S.MAX_WINDOW_TICKS - 1) * self.interval_s:
            raise ConfigError("metrics_delay_s", f"is {fmt_num(self.metrics_delay_s)} s, more than "
                                                 f"{S.MAX_WINDOW_TICKS - 1} ticks of interval_s ({fmt_num(self.interval_s)} "
                                                 f"s): give at most {fmt_num((S.MAX_WINDOW_TICKS - 1) * self.interval_s)} s "
                                                 "or a longer interval")

    def bounds(self, initial: int) -> tuple[int, int]:
        """(min, max) with the initial count for the bounds not given."""
        return (initial if self.min_instances is None else self.min_instances,
                initial if self.max_instances is None else self.max_instances)

    def neutral(self, initial: int) -> bool:
        """True when the spec changes nothing by itself: bounds (given or not) equal to the
        initial count and every other setting at its default."""
        return self.bounds(initial) == (initial, initial) and not set(self.entry()) - {"min_instances",
                                                                                       "max_instances"}

    def first_effective_key(self, initial: int) -> str:
        """The first key of an entry that makes this spec do something (a bound other than
        ``initial``, else ``autoscale.<key>``), for messages; ``autoscale`` when none does."""
        for name in ("min_instances", "max_instances"):
            if getattr(self, name) not in (None, initial):
                return name
        section = self.entry().get("autoscale", {})
        return f"autoscale.{next(iter(section))}" if section else "autoscale"

    def check_bounds(self, initial: int, prefix: str = "") -> None:
        """The initial count lies within the bounds (``check_bounds``)."""
        check_bounds(self.min_instances, self.max_instances, initial, prefix)

    def entry(self) -> dict:
        """The keys of a deployments: entry (or pool entry) giving this spec:
        ``min_instances`` / ``max_instances`` when set and ``autoscale:`` with the other
        settings that differ from their defaults (what ``SimConfig.to_dict`` writes)."""
        out: dict = {name: getattr(self, name) for name in ("min_instances", "max_instances")
                     if getattr(self, name) is not None}
        section: dict = {}
        default = AutoscaleSpec()
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in out or f.name in ("min_instances", "max_instances") or value == getattr(default, f.name):
                continue
            section[f.name] = value.entry() if isinstance(value, (Delay, WarmupSpec)) else value
        if section:
            out["autoscale"] = section
        return out


def check_bounds(min_instances: int | None, max_instances: int | None, initial: int, prefix: str = "") -> None:
    """Bounds in order and the initial count within them (a bound not given is the initial
    count); ConfigError naming ``<prefix>min_instances`` or ``<prefix>max_instances``."""
    if min_instances is not None and max_instances is not None and min_instances > max_instances:
        raise ConfigError(f"{prefix}min_instances", f"must be <= max_instances ({max_instances}), got {min_instances}")
    if min_instances is not None and min_instances > initial:
        raise ConfigError(f"{prefix}min_instances", f"must be <= the initial instance count ({initial}), got "
                                                    f"{min_instances}")
    if max_instances is not None and max_instances < initial:
        raise ConfigError(f"{prefix}max_instances", f"must be >= the initial instance count ({initial}), got "
                                                    f"{max_instances}")


# the keys of a deployments: entry (or pool entry) that give its AutoscaleSpec
AUTOSCALE_ENTRY_KEYS = ("min_instances", "max_instances", "autoscale")
# the keys of an entry's ``autoscale:`` mapping (and of a ``warmup:`` in it)
AUTOSCALE_SECTION_KEYS = tuple(f.name for f in fields(AutoscaleSpec) if f.name not in ("min_instances",
                                                                                       "max_instances"))
WARMUP_KEYS = tuple(f.name for f in fields(WarmupSpec))


def _parse_settings(cls, entry: dict, path: str) -> dict:
    """The keyword arguments of settings dataclass ``cls`` from a mapping of its fields
    (keys already checked), each converted and range-checked as YAML text, errors naming
    ``<path>.<key>``."""
    by_name = {f.name: f for f in fields(cls)}
    out = {}
    for key, value in entry.items():
        f, where = by_name[key], f"{path}.{key}"
        parse = f.metadata.get("parse")
        out[key] = parse(value, where) if parse is not None and value is not None else check_value(
            value, f.type, f.metadata.get("limits"), where, text=True)
    return out


def parse_warmup(value: Any, where: str) -> WarmupSpec:
    """A ``warmup:`` mapping (factor, curve, requests, seconds) -> WarmupSpec."""
    if isinstance(value, WarmupSpec):
        return value
    entry = as_mapping(value, where, WARMUP_KEYS, what="a mapping of warm-up settings (" + ", ".join(WARMUP_KEYS)
                                                       + ")")
    try:
        return WarmupSpec(**_parse_settings(WarmupSpec, entry, where))
    except ConfigError as exc:
        raise ConfigError(exc.field if exc.field.startswith(where) else f"{where}.{exc.field}", exc.message) \
            from None


def parse_autoscale_entry(entry: dict, path: str) -> AutoscaleSpec | None:
    """The AutoscaleSpec of a deployments: entry or pool entry (its ``min_instances``,
    ``max_instances`` and ``autoscale:`` mapping), None when it gives none of them.  Errors
    name the key as written (``deployments[0].decode.autoscale.drain``)."""
    given = {key: entry[key] for key in AUTOSCALE_ENTRY_KEYS if entry.get(key) is not None}
    if not given:
        return None
    kwargs = _parse_settings(AutoscaleSpec, {k: v for k, v in given.items() if k != "autoscale"}, path)
    where = f"{path}.autoscale"
    section = as_mapping(given.get("autoscale", {}), where, AUTOSCALE_SECTION_KEYS,
                         what="a mapping of autoscaling settings (" + ", ".join(AUTOSCALE_SECTION_KEYS) + ")")
    if "warmup" in section:
        kwargs["warmup"] = parse_warmup(section["warmup"], f"{where}.warmup")
    kwargs.update(_parse_settings(AutoscaleSpec, {k: v for k, v in section.items() if k != "warmup"}, where))
    try:
        return AutoscaleSpec(**kwargs)
    except ConfigError as exc:
        key = exc.field.partition(".")[0]
        raise ConfigError(f"{path}.{exc.field}" if key in ("min_instances", "max_instances")
                          else f"{where}.{exc.field}", exc.message) from None


@dataclass(frozen=True)
class AutoscaleConfig:
    """The single-deployment shorthand: the run config's ``autoscale`` section and its flags
    (the bounds are ``deployment.min_instances`` / ``max_instances``, ``--min-instances`` /
    ``--max-instances``).  None = the default of ``AutoscaleSpec``."""

    interval_s: float | None = _opt(None, _INTERVAL_HELP + " (default 30)", lo=MIN_INTERVAL_S, hi=MAX_AUTOSCALE_S,
                                    unit="s")
    metrics_delay_s: float | None = _opt(None, _METRICS_HELP + " (default 15)", lo=0, hi=MAX_AUTOSCALE_S, unit="s")
    provisioning_delay_s: Delay | None = field(default=None, metadata={
        "help": _PROVISIONING_HELP + " (default 120)", "parse": parse_delay, "metavar": "SECONDS"})
    loading_delay_s: Delay | None = field(default=None, metadata={
        "help": _LOADING_HELP + " (default 240)", "parse": parse_delay, "metavar": "SECONDS"})
    warmup_factor: float | None = _opt(None, _FACTOR_HELP + " (default 1)", lo=1, hi=MAX_WARMUP_FACTOR)
    warmup_curve: str | None = _opt(None, _CURVE_HELP + " (default step)", choices=S.WARMUP_CURVE_NAMES)
    warmup_requests: int | None = _opt(None, _WARM_REQUESTS_HELP, lo=1, hi=MAX_WARMUP_REQUESTS, unit="requests")
    warmup_seconds: float | None = _opt(None, _WARM_SECONDS_HELP, lo=0, lo_open=True, hi=MAX_AUTOSCALE_S, unit="s")
    stabilization_up_s: float | None = _opt(None, _STAB_UP_HELP + " (default 0)", lo=0, hi=MAX_AUTOSCALE_S, unit="s")
    stabilization_down_s: float | None = _opt(None, _STAB_DOWN_HELP + " (default 300)", lo=0, hi=MAX_AUTOSCALE_S,
                                              unit="s")
    max_change: int | None = _opt(None, _MAX_CHANGE_HELP, lo=1, hi=MAX_INSTANCES, unit="instances")
    drain: str | None = _opt(None, _DRAIN_HELP + " (default wait)", choices=S.DRAIN_NAMES)
    drain_timeout_s: float | None = _opt(None, _DRAIN_TIMEOUT_HELP, lo=0, lo_open=True, hi=MAX_AUTOSCALE_S, unit="s")
    scale_down: str | None = _opt(None, _SCALE_DOWN_HELP + " (default least-loaded)", choices=S.SCALE_DOWN_NAMES)
    cost_per_gpu_hour: float | None = _opt(None, _COST_HELP, lo=0, hi=MAX_COST_PER_GPU_HOUR)

    def __post_init__(self) -> None:
        for name in ("provisioning_delay_s", "loading_delay_s"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Delay):
                raise ConfigError(f"autoscale.{name}", f"must be a Delay or None, got {show(value)}")
        if not self.given():
            return
        check_fields(self, "autoscale")
        self.spec(None, None)  # (the spec's own rules, named as this section's keys)

    def given(self) -> tuple[str, ...]:
        """The names of the fields that are set (not None), in field order."""
        return tuple(f.name for f in fields(self) if getattr(self, f.name) is not None)

    def spec(self, min_instances: int | None, max_instances: int | None) -> AutoscaleSpec:
        """The AutoscaleSpec of these settings with the deployment's bounds; a rule's error
        names this section's key (``autoscale.warmup_requests``)."""
        warm = {name: getattr(self, f"warmup_{name}") for name in WARMUP_KEYS
                if getattr(self, f"warmup_{name}") is not None}
        try:
            warmup = WarmupSpec(**warm)
        except ConfigError as exc:
            raise ConfigError(f"autoscale.warmup_{exc.field}", exc.message) from None
        values = {name: getattr(self, name) for name in self.given() if not name.startswith("warmup_")}
        try:
            return AutoscaleSpec(min_instances=min_instances, max_instances=max_instances, warmup=warmup, **values)
        except ConfigError as exc:
            raise ConfigError(exc.field if exc.field.endswith("_instances") else f"autoscale.{exc.field}",
                              exc.message) from None


# an AutoscaleConfig field -> the key of a deployments: entry that sets the same thing
AUTOSCALE_SHORTHAND_ENTRY_KEYS = {
    **{f.name: f"autoscale.{f.name}" for f in fields(AutoscaleConfig) if not f.name.startswith("warmup_")},
    **{f"warmup_{name}": f"autoscale.warmup.{name}" for name in WARMUP_KEYS}}


# ----------------------------------------------------------------------------- checks across the config


def check_pool_autoscale(spec: AutoscaleSpec | None, initial: int, prefix: str = "") -> None:
    """A pool's AutoscaleSpec (or None) and its initial count: the type, and the count
    within the bounds."""
    if spec is None:
        return
    if not isinstance(spec, AutoscaleSpec):
        raise ConfigError(f"{prefix}autoscale", f"must be an AutoscaleSpec or None, got {show(spec)}")
    spec.check_bounds(initial, prefix)


def autoscaled_pools(deployments) -> list[tuple[str, AutoscaleSpec, int]]:
    """(field prefix as an entry names it, spec, initial count) of every pool with an
    AutoscaleSpec, in instance-row order (``deployments``: DeploymentSpecs)."""
    out = []
    for i, dep in enumerate(deployments):
        if dep.autoscale is not None:
            out.append((f"deployments[{i}].", dep.autoscale, dep.instances))
        for role, pool in dep.pools:
            if pool.autoscale is not None:
                out.append((f"deployments[{i}].{role}.", pool.autoscale, pool.instances))
    return out


def instance_rows(dep) -> int:
    """The instance-table rows a DeploymentSpec needs: each pool's max_instances (its
    initial count without an autoscaler)."""
    if not dep.pools:
        return dep.instances if dep.autoscale is None else dep.autoscale.bounds(dep.instances)[1]
    return sum(pool.instances if pool.autoscale is None else pool.autoscale.bounds(pool.instances)[1]
               for _, pool in dep.pools)


# ----------------------------------------------------------------------------- resolved


@dataclass(frozen=True, eq=True)
class ResolvedAutoscale:
    """One autoscaled pool resolved: bounds, every time in whole µs (rounded to the
    nearest), the warm-up, the choices as enum codes (blis_fast_kernels.schema), the cost
    of one of its instances per hour (GPUs = TP) and the compiled policy (``kind``, an
    AutoscaleKind; ``params``: the AUTOSCALE row, AutoscaleParam columns).
    ``max_change`` 0: no limit; ``drain_timeout_us`` -1: none; ``warmup_requests`` /
    ``warmup_us`` 0 when the warm-up is not counted that way."""

    min_instances: int
    max_instances: int
    initial: int
    interval_us: int
    metrics_delay_us: int
    provisioning_mean_us: int
    provisioning_std_us: int
    loading_mean_us: int
    loading_std_us: int
    warmup_factor: float
    warmup_curve: int
    warmup_requests: int
    warmup_us: int
    stabilization_up_us: int
    stabilization_down_us: int
    max_change: int
    drain: int
    drain_timeout_us: int
    scale_down: int
    cost_per_gpu_hour: float
    gpus_per_instance: int
    kind: int
    params: tuple[float, ...]

    @property
    def cost_per_instance_hour(self) -> float:
        """What one instance costs per hour: its GPUs x the GPU-hour cost."""
        return self.gpus_per_instance * self.cost_per_gpu_hour


def default_cost_per_gpu_hour(gpu: str) -> float:
    """The default GPU-hour cost of a hardware_config.json GPU name (ConfigError when the
    table has none: give cost_per_gpu_hour)."""
    if gpu not in DEFAULT_COST_PER_GPU_HOUR:
        raise ConfigError("autoscale.cost_per_gpu_hour", f"has no default for GPU {show(gpu)} (defaults: "
                                               f"{', '.join(DEFAULT_COST_PER_GPU_HOUR)}); give it")
    return DEFAULT_COST_PER_GPU_HOUR[gpu]


def resolve_autoscale(spec: AutoscaleSpec | None, initial: int, gpu: str, tp: int,
                      policy: tuple[int, np.ndarray]) -> ResolvedAutoscale | None:
    """A pool's AutoscaleSpec resolved (None without one, or when ``policy``'s kind is
    NONE: no autoscaler); ``gpu``: its hardware_config.json name, ``tp``: GPUs per
    instance; ``policy``: (kind, AUTOSCALE row) from blis_fast.policy.compile."""
    kind, row = policy
    if spec is None or kind == S.AutoscaleKind.NONE:
        return None
    lo, hi = spec.bounds(initial)
    warm = spec.warmup
    cost = spec.cost_per_gpu_hour if spec.cost_per_gpu_hour is not None else default_cost_per_gpu_hour(gpu)
    return ResolvedAutoscale(
        min_instances=lo, max_instances=hi, initial=initial, interval_us=_us(spec.interval_s),
        metrics_delay_us=_us(spec.metrics_delay_s),
        provisioning_mean_us=_us(spec.provisioning_delay_s.mean), provisioning_std_us=_us(spec.provisioning_delay_s.std),
        loading_mean_us=_us(spec.loading_delay_s.mean), loading_std_us=_us(spec.loading_delay_s.std),
        warmup_factor=float(warm.factor), warmup_curve=S.WARMUP_CURVE_NAMES.index(warm.curve),
        warmup_requests=warm.requests or 0, warmup_us=0 if warm.seconds is None else _us(warm.seconds),
        stabilization_up_us=_us(spec.stabilization_up_s), stabilization_down_us=_us(spec.stabilization_down_s),
        max_change=spec.max_change or 0, drain=S.DRAIN_NAMES.index(spec.drain),
        drain_timeout_us=-1 if spec.drain_timeout_s is None else _us(spec.drain_timeout_s),
        scale_down=S.SCALE_DOWN_NAMES.index(spec.scale_down), cost_per_gpu_hour=float(cost),
        gpus_per_instance=int(tp), kind=int(kind), params=tuple(float(x) for x in row))


def draws_delays(cfg) -> bool:
    """True if the run draws random numbers: an autoscaler with a pool whose provisioning or
    loading delay has a std (``simulation.simulation_seed`` seeds them)."""
    if cfg.policy.autoscaler == "none":
        return False
    return any(spec.provisioning_delay_s.std > 0 or spec.loading_delay_s.std > 0
               for _, spec, _ in autoscaled_pools(cfg.deployment_list()))


def check_pool_support(pool, where: str) -> None:
    """What an autoscaled pool cannot have yet (``pool``: a run.resolve.ResolvedPool):
    KV tiers (a terminated instance's queued tier writes), and for a prefill/decode pool a
    drain other than wait without a timeout (its requests hold KV blocks across two
    instances)."""
    a = pool.autoscale
    if a is None:
        return
    if pool.kv_tiers is not None:
        raise ConfigError(f"{where}kv_tiers", "is not supported with an autoscaler yet (a scaled-down instance's tier "
                                             "contents and queued writes): leave out kv_tiers or the autoscaler")
    if pool.role != "mono" and (a.drain != S.DrainMode.WAIT or a.drain_timeout_us >= 0):
        raise ConfigError(f"{where}autoscale.drain", f"of a {pool.role} pool must be wait without drain_timeout_s: a "
                                                     "disaggregated request holds KV blocks on two instances, so only "
                                                     "waiting for it is supported")


__all__ = ["AUTOSCALE_ENTRY_KEYS", "AUTOSCALE_SECTION_KEYS", "AUTOSCALE_SHORTHAND_ENTRY_KEYS", "AutoscaleConfig",
           "AutoscaleSpec", "DEFAULT_COST_PER_GPU_HOUR", "DELAY_DEFAULTS", "Delay", "MAX_AUTOSCALE_S",
           "MAX_COST_PER_GPU_HOUR", "MAX_WARMUP_FACTOR", "MAX_WARMUP_REQUESTS", "MIN_INTERVAL_S", "ResolvedAutoscale",
           "WARMUP_KEYS", "WarmupSpec", "autoscaled_pools", "check_bounds", "check_pool_autoscale", "default_cost_per_gpu_hour",
           "instance_rows", "parse_autoscale_entry", "parse_delay", "parse_warmup", "draws_delays", "check_pool_support",
           "resolve_autoscale"]
