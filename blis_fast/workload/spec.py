"""Workload spec files (``--workload-spec FILE``): strict YAML parsing into dataclasses.

A spec describes an aggregate rate and a list of clients (ServeGen-style), each with its
arrival process, length distributions, tenant / SLO class / priority class, optional
shared-prefix group and multi-turn sessions, plus a load profile over time.  The full
reference is ``docs/workloads.md``; examples live in ``configs/workloads/``.

Every problem raises ``WorkloadError(field, message)`` whose field is the YAML path of the
offending value (``clients[2].prompt_tokens.p90``); unknown keys are rejected with their
path.  Nothing is random here: ``blis_fast.workload.generate`` draws the requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from blis_fast.config.validate import (
    INT64_MAX,
    MAX_REQUEST_TOKENS,
    MAX_REQUESTS,
    MAX_TIME_US,
    as_float,
    as_int,
    as_list,
    as_mapping,
    as_str,
    key_name,
    parse_float_text,
    show,
)
from blis_fast.errors import WorkloadError
from blis_fast.config.flow_control import CLASS_KEYS, CLIENT_KEYS, DeadlineSpec, parse_deadline
from blis_fast.workload import sampling as S

DIST_TYPES = ("constant", "gaussian", "exponential", "uniform", "lognormal", "pareto_lognormal", "empirical")
ARRIVAL_TYPES = ("poisson", "gamma", "weibull", "constant", "bursty", "trace")
PROFILE_TYPES = ("constant", "step", "ramp", "diurnal", "spike", "piecewise")
_ARRIVAL_KEYS = {"poisson": (), "gamma": ("cv",), "weibull": ("cv",), "constant": (),
                 "bursty": ("burst_size", "burst_interval_s", "burst_gap_s"), "trace": ("file", "time_scale")}
_PROFILE_KEYS = {"constant": ("multiplier",), "step": ("steps",), "ramp": ("start_s", "end_s", "from", "to"),
                 "diurnal": ("period_s", "amplitude", "peak_s"), "spike": ("at_s", "duration_s", "multiplier", "base"),
                 "piecewise": ("segments",)}
REQUEST_PROFILES = ("chat", "reasoning", "agentic")
POPULARITY_TYPES = ("uniform", "zipf", "weights")
DEFAULT_SEED = 42
MAX_CV = 1000.0
MAX_PARAM = 1e15  # magnitude of any number in a spec (rates, durations, distribution parameters)
MAX_SECONDS = 1e9  # durations and times, s (~31 years): µs values stay far from int64 overflow
MAX_RATE = 1e12  # requests per second
MAX_LOG_PARAM = 100.0  # |mu| and sigma of a lognormal (log space): exp(100) exceeds every cap
MAX_NAME_LEN = 256  # client, tenant, class, group names
MAX_CLIENTS = 100_000
MAX_CLASSES = 100_000  # priority classes, SLO classes, prefix groups
MAX_NUMBERS_FILE_BYTES = 256 * 2**20
TOKEN_CAP = MAX_REQUEST_TOKENS  # largest token count a length distribution may produce

# Request-type presets: the fields a client inherits unless it sets them (docs/workloads.md).
PROFILE_DEFAULTS: dict[str, dict] = {
    "chat": {
        "prompt_tokens": {"type": "lognormal", "p50": 256, "p90": 1024, "max": 8192},
        "output_tokens": {"type": "lognormal", "p50": 200, "p90": 600, "max": 4096},
    },
    "reasoning": {  # short questions, long chains of thought
        "prompt_tokens": {"type": "lognormal", "p50": 300, "p90": 1500, "max": 16384},
        "output_tokens": {"type": "lognormal", "p50": 2000, "p90": 8000, "min": 16, "max": 32768},
    },
    "agentic": {  # a chain of calls: big tool-laden first prompt, short outputs, tool latency between
        "prompt_tokens": {"type": "lognormal", "p50": 2000, "p90": 6000, "max": 32768},
        "output_tokens": {"type": "lognormal", "p50": 150, "p90": 500, "max": 4096},
        "session": {
            "turns": {"type": "empirical", "values": [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]},
            "think_time_s": {"type": "lognormal", "p50": 0.5, "p90": 3.0, "max": 60},
            "user_tokens": {"type": "lognormal", "p50": 300, "p90": 2000, "max": 16384},
            "max_prompt_tokens": 65536,
        },
    },
}


# ----------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True, eq=False)
class Distribution:
    """A length (tokens) or duration (seconds) distribution, clamped to [min, max].

    type: constant (value) | gaussian (mean, std) | exponential (mean) | uniform (min, max)
    | lognormal (mu, sigma after conversion) | pareto_lognormal (pareto_weight, alpha,
    scale, mu, sigma) | empirical (values + probs = CDF points, or values + weights, or
    values = samples from a file).
    """

    type: str
    path: str
    value: float = 0.0
    mean: float = 0.0
    std: float = 0.0
    mu: float = 0.0
    sigma: float = 0.0
    pareto_weight: float = 0.0
    alpha: float = 0.0
    scale: float = 0.0
    values: np.ndarray | None = None
    probs: np.ndarray | None = None  # empirical CDF probabilities (with values)
    weights: np.ndarray | None = None  # empirical discrete weights (with values)
    min: float | None = None
    max: float | None = None

    def approx_mean(self) -> float:
        """The mean before clamping (clamped to [min, max]); for sizing, not sampling."""
        t = self.type
        if t == "constant":
            m = self.value
        elif t in ("gaussian", "exponential"):
            m = self.mean
        elif t == "uniform":
            m = 0.5 * (self.min + self.max)
        elif t == "lognormal":
            m = math.exp(min(self.mu + self.sigma**2 / 2, 700.0))
        elif t == "pareto_lognormal":
            par = self.alpha * self.scale / (self.alpha - 1) if self.alpha > 1 else 10 * self.scale
            m = self.pareto_weight * par + (1 - self.pareto_weight) * math.exp(min(self.mu + self.sigma**2 / 2, 700.0))
        elif self.probs is not None:
            m = float(np.sum(np.diff(self.probs) * 0.5 * (self.values[1:] + self.values[:-1]))
                      + self.probs[0] * self.values[0])
        elif self.weights is not None:
            m = float(np.sum(self.weights * self.values) / np.sum(self.weights))
        else:
            m = float(np.mean(self.values))
        lo = -math.inf if self.min is None else self.min
        hi = math.inf if self.max is None else self.max
        return float(min(max(m, lo), hi))


@dataclass(frozen=True, eq=False)
class ArrivalSpec:
    """How a client's independent requests (session starts) arrive."""

    type: str  # poisson | gamma | weibull | constant | bursty | trace
    path: str
    cv: float = 1.0  # gamma, weibull
    burst_size: Distribution | None = None  # bursty: requests per burst (>= 1)
    burst_interval_s: Distribution | None = None  # bursty: between burst starts (default: from rate)
    burst_gap_s: Distribution | None = None  # bursty: between requests of one burst (default 0)
    times_s: np.ndarray | None = None  # trace: timestamps (s), sorted, already scaled
    file: str | None = None  # trace: the file they came from

    @property
    def needs_rate(self) -> bool:
        """True if the process needs the client's rate."""
        return self.type in ("poisson", "gamma", "weibull", "constant") or (
            self.type == "bursty" and self.burst_interval_s is None)


@dataclass(frozen=True, eq=False)
class LoadProfileSpec:
    """A load profile (rate multiplier over time), built into a ``sampling.LoadProfile``."""

    type: str
    path: str
    params: dict = field(default_factory=dict)

    def build(self) -> S.LoadProfile:
        """The profile as knots (sampling.LoadProfile)."""
        p = self.params
        if self.type == "constant":
            return S.constant_profile(p["multiplier"])
        if self.type == "step":
            return S.step_profile(p["times"], p["multipliers"])
        if self.type == "ramp":
            return S.ramp_profile(p["start_s"], p["end_s"], p["from"], p["to"])
        if self.type == "diurnal":
            return S.diurnal_profile(p["period_s"], p["amplitude"], p["peak_s"])
        if self.type == "spike":
            return S.spike_profile(p["at_s"], p["duration_s"], p["multiplier"], p["base"])
        return S.piecewise_profile(p["durations"], p["starts"], p["ends"])


@dataclass(frozen=True, eq=False)
class PrefixGroupSpec:
    """A set of ``count`` shared prefixes (system prompts, documents): each prefix's length
    is drawn once from ``length``; requests pick prefix k with probability popularity[k]."""

    name: str
    path: str
    stream: str  # rng stream prefix of its lengths and token ids
    count: int
    length: Distribution
    popularity: np.ndarray  # probabilities, sum 1


@dataclass(frozen=True, eq=False)
class SessionSpec:
    """Multi-turn sessions (closed loop): turn t+1's prompt = turn t's prompt + its output +
    user_tokens new tokens, arriving think_time_s after turn t's last token."""

    path: str
    turns: Distribution
    think_time_s: Distribution
    user_tokens: Distribution | None  # None: the client's prompt_tokens
    max_prompt_tokens: int | None  # a session ends before a turn whose prompt would exceed it


@dataclass(frozen=True, eq=False)
class ClientSpec:
    """One client of the spec (see docs/workloads.md for every field)."""

    name: str
    index: int
    path: str
    rate: float | None  # resolved independent arrivals per second (None: not rate-driven)
    tenant: str
    slo_class: str
    priority_class: str
    profile: str | None
    arrival: ArrivalSpec
    prompt_tokens: Distribution
    output_tokens: Distribution
    prefix_group: str | None  # name of the PrefixGroupSpec used, or None
    reuse_probability: float
    session: SessionSpec | None
    start_s: float
    end_s: float | None
    load_profile: LoadProfileSpec | None  # overrides the spec's
    model: str | None = None  # the served model its requests ask for (None: the first deployment's)
    deadline: DeadlineSpec = field(default_factory=DeadlineSpec)  # its own ttl_s / retries (config/flow_control.py)

    @property
    def stream(self) -> str:
        """Prefix of this client's random stream names."""
        return f"workload.client.{self.name}"


@dataclass(frozen=True, eq=False)
class WorkloadSpec:
    """A validated workload spec."""

    seed: int | None
    rate: float | None
    duration_s: float | None
    num_requests: int | None
    load_profile: LoadProfileSpec | None
    slo_classes: dict[str, dict[str, float | None]]
    priority_classes: list[str]
    prefix_groups: dict[str, PrefixGroupSpec]
    clients: list[ClientSpec]
    raw: dict
    source: str | None = None
    # SLO class -> its ttl_s / sheddable / retries (only the classes that give some; config/flow_control.py)
    class_deadlines: dict[str, DeadlineSpec] = field(default_factory=dict)

    @property
    def effective_seed(self) -> int:
        """The spec's seed, else 42."""
        return DEFAULT_SEED if self.seed is None else self.seed

    @property
    def total_rate(self) -> float:
        """The summed rate of the rate-driven clients, requests/s (0 if none)."""
        return math.fsum(c.rate for c in self.clients if c.rate is not None)

    @property
    def request_rate(self) -> float:
        """The requests per second the rate-driven clients offer with every turn of their
        sessions counted -- a session's start rate times its mean number of turns (the
        distribution's mean; ``max_prompt_tokens`` may end sessions sooner) -- where
        ``total_rate`` counts session starts only."""
        return math.fsum(c.rate * (max(c.session.turns.approx_mean(), 1.0) if c.session is not None else 1.0)
                         for c in self.clients if c.rate is not None)

    def scaled(self, factor: float) -> "WorkloadSpec":
        """This spec with every rate-driven client's rate (and the aggregate ``rate``)
        multiplied by ``factor``; trace timestamps, explicit burst intervals and session
        follow-ups keep their timing (``workload.rate_scale``)."""
        if factor == 1:
            return self
        clients = [replace(c, rate=None if c.rate is None else c.rate * factor) for c in self.clients]
        return replace(self, rate=None if self.rate is None else self.rate * factor, clients=clients)

    def expected_size(self) -> tuple[float, float]:
        """(requests, prompt + output tokens) the spec is expected to generate, from its
        parameters (distribution means; nothing is drawn): for sizing and the memory
        budget, not exact."""
        rows = []  # (requests per second of operational time, tokens per request, sessions per request)
        for c in self.clients:
            a = c.arrival
            if a.type == "bursty" and a.burst_interval_s is not None:
                r = a.burst_size.approx_mean() / max(a.burst_interval_s.approx_mean(), 1e-9)
            elif a.type == "trace":
                r = 0.0
            else:
                r = c.rate or 0.0
            sess = c.session
            turns = max(sess.turns.approx_mean(), 1.0) if sess is not None else 1.0
            p0 = c.prompt_tokens.approx_mean()
            if c.prefix_group is not None:
                p0 += c.reuse_probability * self.prefix_groups[c.prefix_group].length.approx_mean()
            o = c.output_tokens.approx_mean()
            u = (sess.user_tokens or c.prompt_tokens).approx_mean() if sess is not None else 0.0
            per_session = turns * (p0 + o) + (o + u) * turns * (turns - 1) / 2
            if sess is not None and sess.max_prompt_tokens is not None:
                per_session = min(per_session, turns * (sess.max_prompt_tokens + o))
            if a.type == "trace":
                window = self.duration_s if self.duration_s is not None else math.inf
                sessions = float(np.count_nonzero(a.times_s + c.start_s < window))
            elif self.duration_s is not None:
                end = self.duration_s if c.end_s is None else min(c.end_s, self.duration_s)
                span = max(end - c.start_s, 0.0)
                lp = c.load_profile or self.load_profile
                if lp is not None and span > 0:
                    prof = lp.build()
                    span = float(prof.integral(end) - prof.integral(c.start_s))
                sessions = r * span
            else:
                sessions = None
            rows.append((r * turns, per_session / turns, sessions, turns))
        if self.duration_s is not None or all(row[2] is not None for row in rows):
            requests = sum(row[2] * row[3] for row in rows if row[2] is not None)
            tokens = sum(row[2] * row[3] * row[1] for row in rows if row[2] is not None)
            if self.num_requests is not None and requests > self.num_requests:
                tokens *= self.num_requests / requests
                requests = float(self.num_requests)
            return requests, tokens
        fixed = [row for row in rows if row[2] is not None]  # trace clients: their own count
        req_fixed = sum(row[2] * row[3] for row in fixed)
        tok_fixed = sum(row[2] * row[3] * row[1] for row in fixed)
        rated = [row for row in rows if row[2] is None]
        total_rate = sum(row[0] for row in rated)
        rest = max(float(self.num_requests) - req_fixed, 0.0)
        if total_rate > 0:
            tok_rest = rest * sum(row[0] * row[1] for row in rated) / total_rate
        else:
            tok_rest = rest * max((row[1] for row in rated), default=0.0)
        requests = min(req_fixed + rest, float(self.num_requests))
        return requests, tok_fixed + tok_rest


# ----------------------------------------------------------------------------- helpers


def _err(path: str, msg: str) -> WorkloadError:
    return WorkloadError(path or "spec", msg)


def _join(path: str, key: str) -> str:
    return f"{path}.{key_name(key)}" if path else key_name(key)


def _mapping(value: Any, path: str, allowed: tuple[str, ...] | set[str]) -> dict:
    return as_mapping(value, path, allowed, error=WorkloadError)


def _number(d: dict, key: str, path: str, *, default: Any = None, required: bool = False,
            lo: float | None = -MAX_PARAM, lo_open: bool = False, hi: float | None = MAX_PARAM) -> float | None:
    p = _join(path, key)
    if key not in d or d[key] is None:
        if required:
            raise _err(p, "is required")
        return default
    return as_float(d[key], p, lo, hi, lo_open=lo_open, error=WorkloadError, text=False)


def _integer(d: dict, key: str, path: str, *, default: Any = None, required: bool = False, lo: int = 0,
             hi: int = MAX_TIME_US) -> int | None:
    p = _join(path, key)
    if key not in d or d[key] is None:
        if required:
            raise _err(p, "is required")
        return default
    return as_int(d[key], p, lo, hi, error=WorkloadError, text=False)


def _name(v: Any, path: str) -> str:
    if isinstance(v, bool) or not isinstance(v, (str, int)) or (isinstance(v, int) and abs(v) > INT64_MAX):
        raise _err(path, f"must be a non-empty name, got {show(v)}")
    return as_str(str(v), path, error=WorkloadError, max_len=MAX_NAME_LEN)


def _string(d: dict, key: str, path: str, default: str | None = None) -> str | None:
    if key not in d or d[key] is None:
        return default
    return _name(d[key], _join(path, key))


def _numbers(value: Any, path: str, *, lo: float | None = -MAX_PARAM, hi: float | None = MAX_PARAM) -> np.ndarray:
    items = as_list(value, path, error=WorkloadError, min_len=1, what="a non-empty list of numbers")
    out = [as_float(x, f"{path}[{k}]", lo, hi, error=WorkloadError, text=False) for k, x in enumerate(items)]
    return np.array(out, dtype=np.float64)


def _resolve_file(value: Any, path: str, base: Path | None) -> Path:
    if not isinstance(value, str) or not value:
        raise _err(path, f"must be a file path, got {show(value)}")
    as_str(value, path, error=WorkloadError)
    p = Path(value).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    if not p.is_file():
        raise _err(path, f"file not found: {show(str(p))}")
    return p


def _read_numbers_file(p: Path, path: str) -> np.ndarray:
    """Numbers from a text file: one or more per line (comma / whitespace separated), ``#``
    comments and a non-numeric first line (a header) skipped; numbers written plainly
    (``1_0`` is not a number).  At most MAX_NUMBERS_FILE_BYTES."""
    from blis_fast.config.yamlfile import read_text_limited  # deferred: yaml

    text = read_text_limited(p, path, WorkloadError, max_bytes=MAX_NUMBERS_FILE_BYTES)
    vals: list[float] = []
    content_lines = 0
    for ln, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        content_lines += 1
        first = line.replace(",", " ").split()[0]
        v = parse_float_text(first)
        if v is None:
            if content_lines == 1:
                continue  # a header row
            raise _err(path, f"{show(str(p))} line {ln}: {show(first)} is not a number")
        vals.append(v)
    arr = np.array(vals, dtype=np.float64)
    if arr.size == 0:
        raise _err(path, f"{show(str(p))} holds no numbers")
    if not np.all(np.isfinite(arr)) or np.abs(arr).max() > MAX_PARAM:
        raise _err(path, f"{show(str(p))} holds numbers that are not finite or beyond {MAX_PARAM:g}")
    return arr


# ----------------------------------------------------------------------------- distributions

_LOGN_KEYS = (("mu", "sigma"), ("mean", "std"), ("p50", "p90"))
_DIST_KEYS = {
    "constant": ("value",),
    "gaussian": ("mean", "std"),
    "exponential": ("mean",),
    "uniform": (),
    "lognormal": ("mu", "sigma", "mean", "std", "p50", "p90"),
    "pareto_lognormal": ("pareto_weight", "alpha", "scale", "mu", "sigma", "mean", "std", "p50", "p90"),
    "empirical": ("cdf", "values", "weights", "file"),
}


def _lognormal_params(d: dict, path: str) -> tuple[float, float]:
    given = [pair for pair in _LOGN_KEYS if any(d.get(k) is not None for k in pair)]
    if len(given) != 1:
        raise _err(path, "give exactly one lognormal parametrization: mu+sigma (log space), "
                         "mean+std (real space) or p50+p90")
    a, b = given[0]
    for k in (a, b):
        if d.get(k) is None:
            raise _err(_join(path, k), f"is required with {a}/{b}")
    if a == "mu":
        mu = _number(d, "mu", path, required=True, lo=-MAX_LOG_PARAM, hi=MAX_LOG_PARAM)
        sigma = _number(d, "sigma", path, required=True, lo=0, hi=MAX_LOG_PARAM)
        return mu, sigma
    if a == "mean":
        mean = _number(d, "mean", path, required=True, lo=0, lo_open=True)
        std = _number(d, "std", path, required=True, lo=0)
        mu, sigma = S.lognormal_from_mean_std(mean, std)
        if not (abs(mu) <= MAX_LOG_PARAM and sigma <= MAX_LOG_PARAM):
            raise _err(_join(path, "std"), f"std/mean too extreme (log-space mu={mu:.3g}, sigma={sigma:.3g}; "
                                           f"both must be within {MAX_LOG_PARAM:g})")
        return mu, sigma
    p50 = _number(d, "p50", path, required=True, lo=0, lo_open=True)
    p90 = _number(d, "p90", path, required=True, lo=0, lo_open=True)
    if p90 < p50:
        raise _err(_join(path, "p90"), f"must be >= p50 ({p50:g}), got {p90:g}")
    return S.lognormal_from_percentiles(p50, p90)


def _typed_mapping(value: Any, path: str, keys_by_type: dict[str, tuple[str, ...]], what: str,
                   extra: tuple[str, ...] = (), bare_name: bool = True, alternative: str = "") -> tuple[str, dict]:
    """(type, checked mapping) of a ``{type: NAME, ...}`` spec entry (or a bare NAME when
    ``bare_name``); the allowed keys are ``type`` + ``extra`` + the type's own."""
    if bare_name and isinstance(value, str):
        value = {"type": value}
    if not isinstance(value, dict):
        also = alternative or (f"a {what} name" if bare_name else "")
        raise _err(path, f"must be {also + ' or ' if also else ''}a mapping with 'type' "
                         f"({', '.join(keys_by_type)}), got {show(value)}")
    t = value.get("type")
    if not isinstance(t, str) or t not in keys_by_type:
        raise _err(_join(path, "type"), f"unknown {what} {show(t)}; known: {', '.join(keys_by_type)}")
    return t, _mapping(value, path, ("type",) + extra + keys_by_type[t])


def parse_distribution(value: Any, path: str, *, floor: float = 0.0, cap: float = MAX_PARAM,
                       base: Path | None = None) -> Distribution:
    """A distribution from YAML: a number (constant) or a mapping with ``type``.  ``floor``
    is the smallest meaningful value (1 for prompts and turns, 0 otherwise): the default
    ``min`` and a lower bound for it.  ``cap`` is the largest value the quantity may take
    (TOKEN_CAP tokens, MAX_SECONDS, MAX_REQUESTS turns): ``max`` defaults to it, and a
    constant, a mean, a bound or an empirical value beyond it is an error, so that draws
    can never overflow an integer."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = {"type": "constant", "value": value}
    t, d = _typed_mapping(value, path, _DIST_KEYS, "distribution", extra=("min", "max"), bare_name=False,
                          alternative="a number")
    vmin = _number(d, "min", path, default=None, lo=floor, hi=cap)
    vmax = _number(d, "max", path, default=None, lo=floor, hi=cap)
    vmin = floor if vmin is None else vmin
    if vmax is not None and vmax < vmin:
        raise _err(_join(path, "max"), f"must be >= min ({vmin:g}), got {vmax:g}")
    kw: dict[str, Any] = {"type": t, "path": path, "min": vmin, "max": cap if vmax is None else vmax}
    if t == "constant":
        kw["value"] = _number(d, "value", path, required=True, hi=cap)
    elif t == "gaussian":
        kw["mean"] = _number(d, "mean", path, required=True, hi=cap)
        kw["std"] = _number(d, "std", path, required=True, lo=0)
    elif t == "exponential":
        kw["mean"] = _number(d, "mean", path, required=True, lo=0, lo_open=True, hi=cap)
    elif t == "uniform":
        if "max" not in d or d["max"] is None:
            raise _err(_join(path, "max"), "is required for a uniform distribution (support [min, max])")
    elif t == "lognormal":
        kw["mu"], kw["sigma"] = _lognormal_params(d, path)
    elif t == "pareto_lognormal":
        kw["pareto_weight"] = _number(d, "pareto_weight", path, required=True, lo=0, hi=1)
        kw["alpha"] = _number(d, "alpha", path, required=True, lo=0, lo_open=True)
        kw["scale"] = _number(d, "scale", path, required=True, lo=0, lo_open=True)
        kw["mu"], kw["sigma"] = _lognormal_params(d, path)
    else:  # empirical
        forms = [k for k in ("cdf", "values", "file") if k in d]
        if len(forms) != 1:
            raise _err(path, "an empirical distribution needs exactly one of cdf, values, file")
        if "weights" in d and forms != ["values"]:
            raise _err(_join(path, "weights"), "only goes with values")
        if forms == ["cdf"]:
            pts = d["cdf"]
            if not isinstance(pts, list) or not pts:
                raise _err(_join(path, "cdf"), "must be a non-empty list of [value, cumulative probability] pairs")
            xs, ps = [], []
            for k, pt in enumerate(pts):
                pp = f"{path}.cdf[{k}]"
                if not (isinstance(pt, (list, tuple)) and len(pt) == 2):
                    raise _err(pp, f"must be a [value, cumulative probability] pair, got {show(pt)}")
                x, q = _numbers(list(pt), pp, hi=cap)
                if not 0 <= q <= 1:
                    raise _err(pp, f"cumulative probability must be in [0, 1], got {q:g}")
                if xs and (x < xs[-1] or q < ps[-1]):
                    raise _err(pp, "values and probabilities must be non-decreasing")
                xs.append(x)
                ps.append(q)
            if abs(ps[-1] - 1.0) > 1e-9:
                raise _err(f"{path}.cdf[{len(ps) - 1}]", f"the last cumulative probability must be 1, got {ps[-1]:g}")
            ps[-1] = 1.0
            kw["values"], kw["probs"] = np.array(xs), np.array(ps)
        elif forms == ["values"]:
            kw["values"] = _numbers(d["values"], _join(path, "values"), hi=cap)
            if "weights" in d:
                w = _numbers(d["weights"], _join(path, "weights"), lo=0)
                if len(w) != len(kw["values"]):
                    raise _err(_join(path, "weights"), f"needs {len(kw['values'])} entries (one per value), got {len(w)}")
                if w.sum() <= 0:
                    raise _err(_join(path, "weights"), "must not all be 0")
                kw["weights"] = w
        else:
            fp = _resolve_file(d["file"], _join(path, "file"), base)
            kw["values"] = _read_numbers_file(fp, _join(path, "file"))
            if kw["values"].max() > cap:
                raise _err(_join(path, "file"), f"{show(str(fp))} holds values beyond {cap:g}")
    return Distribution(**kw)


# ----------------------------------------------------------------------------- parts


def _parse_arrival(value: Any, path: str, base: Path | None) -> ArrivalSpec:
    t, d = _typed_mapping("poisson" if value is None else value, path, _ARRIVAL_KEYS, "arrival process")
    kw: dict[str, Any] = {"type": t, "path": path}
    if t in ("gamma", "weibull"):
        kw["cv"] = _number(d, "cv", path, required=True, lo=0, lo_open=True, hi=MAX_CV)
    elif t == "bursty":
        if "burst_size" not in d:
            raise _err(_join(path, "burst_size"), "is required for a bursty process")
        kw["burst_size"] = parse_distribution(d["burst_size"], _join(path, "burst_size"), floor=1, cap=MAX_REQUESTS,
                                              base=base)
        if d.get("burst_interval_s") is not None:
            kw["burst_interval_s"] = parse_distribution(d["burst_interval_s"], _join(path, "burst_interval_s"),
                                                        cap=MAX_SECONDS, base=base)
        if d.get("burst_gap_s") is not None:
            kw["burst_gap_s"] = parse_distribution(d["burst_gap_s"], _join(path, "burst_gap_s"), cap=MAX_SECONDS,
                                                   base=base)
    elif t == "trace":
        if "file" not in d:
            raise _err(_join(path, "file"), "is required for a trace process")
        fp = _resolve_file(d["file"], _join(path, "file"), base)
        scale = _number(d, "time_scale", path, default=1.0, lo=0, lo_open=True)
        times = _read_numbers_file(fp, _join(path, "file"))
        if times.min() < 0:
            raise _err(_join(path, "file"), f"{show(str(fp))}: timestamps must be >= 0 s")
        if times.max() * scale > MAX_SECONDS:
            raise _err(_join(path, "file"), f"{show(str(fp))}: scaled timestamps must be <= {MAX_SECONDS:g} s")
        kw["times_s"] = np.sort(times * scale, kind="stable")
        kw["file"] = str(fp)
    return ArrivalSpec(**kw)


def _parse_load_profile(value: Any, path: str) -> LoadProfileSpec:
    t, d = _typed_mapping(value, path, _PROFILE_KEYS, "load profile")
    p: dict[str, Any] = {}
    if t == "constant":
        p["multiplier"] = _number(d, "multiplier", path, default=1.0, lo=0)
    elif t == "step":
        steps = d.get("steps")
        if not isinstance(steps, list) or not steps:
            raise _err(_join(path, "steps"), "must be a non-empty list of {at_s, multiplier}")
        times, mults = [], []
        for k, st in enumerate(steps):
            sp = f"{path}.steps[{k}]"
            st = _mapping(st, sp, ("at_s", "multiplier"))
            at = _number(st, "at_s", sp, required=True, lo=0)
            if times and at <= times[-1]:
                raise _err(_join(sp, "at_s"), f"must be > the previous step's at_s ({times[-1]:g})")
            times.append(at)
            mults.append(_number(st, "multiplier", sp, required=True, lo=0))
        p["times"], p["multipliers"] = times, mults
    elif t == "ramp":
        p["start_s"] = _number(d, "start_s", path, default=0.0, lo=0)
        p["end_s"] = _number(d, "end_s", path, required=True, lo=0)
        if p["end_s"] <= p["start_s"]:
            raise _err(_join(path, "end_s"), f"must be > start_s ({p['start_s']:g}), got {p['end_s']:g}")
        p["from"] = _number(d, "from", path, required=True, lo=0)
        p["to"] = _number(d, "to", path, required=True, lo=0)
    elif t == "diurnal":
        p["period_s"] = _number(d, "period_s", path, default=86400.0, lo=0, lo_open=True)
        p["amplitude"] = _number(d, "amplitude", path, required=True, lo=0, hi=1)
        p["peak_s"] = _number(d, "peak_s", path, default=p["period_s"] / 2)
    elif t == "spike":
        p["at_s"] = _number(d, "at_s", path, required=True, lo=0)
        p["duration_s"] = _number(d, "duration_s", path, required=True, lo=0, lo_open=True)
        p["multiplier"] = _number(d, "multiplier", path, required=True, lo=0)
        p["base"] = _number(d, "base", path, default=1.0, lo=0)
    else:
        segs = d.get("segments")
        if not isinstance(segs, list) or not segs:
            raise _err(_join(path, "segments"), "must be a non-empty list of {duration_s, from, to} or {duration_s, multiplier}")
        durs, starts, ends = [], [], []
        for k, sg in enumerate(segs):
            sp = f"{path}.segments[{k}]"
            sg = _mapping(sg, sp, ("duration_s", "from", "to", "multiplier"))
            durs.append(_number(sg, "duration_s", sp, required=True, lo=0, lo_open=True))
            if "multiplier" in sg:
                if "from" in sg or "to" in sg:
                    raise _err(_join(sp, "multiplier"), "give either multiplier or from/to")
                m = _number(sg, "multiplier", sp, required=True, lo=0)
                starts.append(m)
                ends.append(m)
            else:
                starts.append(_number(sg, "from", sp, required=True, lo=0))
                ends.append(_number(sg, "to", sp, required=True, lo=0))
        p["durations"], p["starts"], p["ends"] = durs, starts, ends
    return LoadProfileSpec(t, path, p)


def _parse_popularity(value: Any, path: str, count: int) -> np.ndarray:
    if value is None:
        value = "uniform"
    if isinstance(value, str):
        value = {"type": value}
    if not isinstance(value, dict):
        raise _err(path, f"must be uniform, {{type: zipf, s}} or {{type: weights, weights}}, got {show(value)}")
    t = value.get("type")
    if t not in POPULARITY_TYPES:
        raise _err(_join(path, "type"), f"unknown popularity {show(t)}; known: {', '.join(POPULARITY_TYPES)}")
    d = _mapping(value, path, ("type", "s", "weights"))
    if t == "uniform":
        w = np.ones(count)
    elif t == "zipf":
        s = _number(d, "s", path, default=1.0, lo=0)
        w = np.arange(1, count + 1, dtype=np.float64) ** -s
    else:
        w = _numbers(d.get("weights"), _join(path, "weights"), lo=0)
        if len(w) != count:
            raise _err(_join(path, "weights"), f"needs {count} entries (one per prefix), got {len(w)}")
        if w.sum() <= 0:
            raise _err(_join(path, "weights"), "must not all be 0")
    return w / w.sum()


_GROUP_KEYS = ("count", "length", "popularity")


def _parse_group(value: Any, path: str, name: str, stream: str, base: Path | None,
                 extra: tuple[str, ...] = ()) -> PrefixGroupSpec:
    d = _mapping(value, path, _GROUP_KEYS + extra)
    count = _integer(d, "count", path, default=1, lo=1, hi=1_000_000)
    if "length" not in d:
        raise _err(_join(path, "length"), "is required (tokens of each shared prefix)")
    length = parse_distribution(d["length"], _join(path, "length"), floor=1, cap=TOKEN_CAP, base=base)
    return PrefixGroupSpec(name, path, stream, count, length, _parse_popularity(d.get("popularity"),
                                                                             _join(path, "popularity"), count))


def parse_prefix_group(value: Any, path: str, name: str, stream: str, base: Path | None) -> PrefixGroupSpec:
    """A ``{count, length, popularity}`` prefix group at YAML path ``path`` whose draws use
    the random streams under ``stream`` (also the agent scenarios' ``prefix_groups``)."""
    return _parse_group(value, path, name, stream, base)


def _parse_session(value: Any, path: str, base: Path | None, defaults: dict | None) -> SessionSpec:
    _mapping(value or {}, path, ("turns", "think_time_s", "user_tokens", "max_prompt_tokens"))
    d = {**(defaults or {}), **(value or {})}
    for k in ("turns", "think_time_s"):
        if k not in d:
            raise _err(_join(path, k), "is required for sessions")
    return SessionSpec(
        path=path,
        turns=parse_distribution(d["turns"], _join(path, "turns"), floor=1, cap=MAX_REQUESTS, base=base),
        think_time_s=parse_distribution(d["think_time_s"], _join(path, "think_time_s"), cap=MAX_SECONDS, base=base),
        user_tokens=(parse_distribution(d["user_tokens"], _join(path, "user_tokens"), cap=TOKEN_CAP, base=base)
                     if d.get("user_tokens") is not None else None),
        max_prompt_tokens=_integer(d, "max_prompt_tokens", path, default=None, lo=1, hi=TOKEN_CAP),
    )


_CLIENT_KEYS = ("name", "rate", "rate_fraction", "tenant", "slo_class", "priority_class", "profile", "arrival",
                "prompt_tokens", "output_tokens", "prefix", "session", "start_s", "end_s", "load_profile",
                "description", "model") + CLIENT_KEYS
_TOP_KEYS = ("seed", "rate", "duration_s", "num_requests", "load_profile", "slo_classes", "priority_classes",
             "prefix_groups", "clients", "name", "description")


def _parse_slo_classes(d: dict) -> dict[str, dict[str, float | None]]:
    """The spec's ``slo_classes``: class name -> its ttft_ms / tpot_ms / e2e_ms targets."""
    slo_classes: dict[str, dict[str, float | None]] = {}
    raw_slo = d.get("slo_classes") or {}
    if not isinstance(raw_slo, dict) or len(raw_slo) > MAX_CLASSES:
        raise _err("slo_classes", f"must be a mapping {{class name: {{ttft_ms, tpot_ms, e2e_ms}}}} of at most "
                                  f"{MAX_CLASSES} classes, got {show(raw_slo)}")
    for name, targets in raw_slo.items():
        sp = f"slo_classes.{key_name(name)}"
        name = _name(name, sp)
        t = _mapping(targets or {}, sp, ("ttft_ms", "tpot_ms", "e2e_ms") + CLASS_KEYS)
        slo_classes[name] = {k: _number(t, k, sp, lo=0, lo_open=True) for k in ("ttft_ms", "tpot_ms", "e2e_ms")}
    return slo_classes


def _parse_class_deadlines(d: dict) -> dict[str, DeadlineSpec]:
    """The deadline keys of the spec's SLO classes (``ttl_s``, ``sheddable``, ``retries``):
    class name -> DeadlineSpec, for the classes that give some (after ``_parse_slo_classes``
    checked the mapping's shape)."""
    out: dict[str, DeadlineSpec] = {}
    for name, targets in (d.get("slo_classes") or {}).items():
        spec = parse_deadline(targets or {}, f"slo_classes.{key_name(name)}", CLASS_KEYS)
        if spec.given():
            out[_name(name, f"slo_classes.{key_name(name)}")] = spec
    return out


def _parse_priority_classes(d: dict) -> list[str] | None:
    """The spec's ``priority_classes`` (id = position), or None when not given."""
    prio = d.get("priority_classes")
    if prio is not None:
        if not isinstance(prio, list) or not prio or len(prio) > MAX_CLASSES:
            raise _err("priority_classes", f"must be a non-empty list of at most {MAX_CLASSES} names (id = position), "
                                           f"got {show(prio)}")
        prio = [_name(x, f"priority_classes[{k}]") for k, x in enumerate(prio)]
        if len(set(prio)) != len(prio):
            raise _err("priority_classes", "names must be unique")
    return prio


def parse_spec(data: Any, base_dir: str | Path | None = None, source: str | None = None) -> WorkloadSpec:
    """Validate a spec given as a dict (the parsed YAML).  Relative file paths inside it are
    resolved against ``base_dir``."""
    base = Path(base_dir) if base_dir is not None else None
    d = _mapping(data, "", _TOP_KEYS)
    seed = _integer(d, "seed", "", default=None, lo=0, hi=INT64_MAX)
    rate = _number(d, "rate", "", default=None, lo=0, lo_open=True, hi=MAX_RATE)
    duration = _number(d, "duration_s", "", default=None, lo=0, lo_open=True, hi=MAX_SECONDS)
    num_requests = _integer(d, "num_requests", "", default=None, lo=1, hi=MAX_REQUESTS)
    if duration is None and num_requests is None:
        raise _err("duration_s", "give duration_s (generation window, s) and/or num_requests (total cap)")
    profile = _parse_load_profile(d["load_profile"], "load_profile") if d.get("load_profile") is not None else None

    slo_classes = _parse_slo_classes(d)
    class_deadlines = _parse_class_deadlines(d)
    prio = _parse_priority_classes(d)

    groups: dict[str, PrefixGroupSpec] = {}
    raw_groups = d.get("prefix_groups") or {}
    if not isinstance(raw_groups, dict) or len(raw_groups) > MAX_CLASSES:
        raise _err("prefix_groups", f"must be a mapping {{group name: {{count, length, popularity}}}} of at most "
                                    f"{MAX_CLASSES} groups, got {show(raw_groups)}")
    for name, g in raw_groups.items():
        gp = f"prefix_groups.{key_name(name)}"
        name = _name(name, gp)
        groups[name] = _parse_group(g, gp, name, f"workload.prefix_group.{name}", base)

    raw_clients = d.get("clients")
    if not isinstance(raw_clients, list) or not raw_clients or len(raw_clients) > MAX_CLIENTS:
        raise _err("clients", f"must be a non-empty list of at most {MAX_CLIENTS} clients, got {show(raw_clients)}")
    clients: list[ClientSpec] = []
    fractions: list[tuple[int, float]] = []
    names: set[str] = set()
    for i, rc in enumerate(raw_clients):
        cp = f"clients[{i}]"
        c = _mapping(rc, cp, _CLIENT_KEYS)
        name = _string(c, "name", cp, default=f"client{i}")
        if name in names:
            raise _err(_join(cp, "name"), f"duplicate client name {show(name)}")
        names.add(name)
        prof = c.get("profile")
        if prof is not None and prof not in REQUEST_PROFILES:
            raise _err(_join(cp, "profile"), f"unknown request profile {show(prof)}; known: {', '.join(REQUEST_PROFILES)}")
        defaults = PROFILE_DEFAULTS.get(prof, {})
        arrival = _parse_arrival(c.get("arrival"), _join(cp, "arrival"), base)
        if c.get("rate") is not None and c.get("rate_fraction") is not None:
            raise _err(_join(cp, "rate_fraction"), "give either rate or rate_fraction, not both")
        crate = _number(c, "rate", cp, default=None, lo=0, lo_open=True, hi=MAX_RATE)
        frac = _number(c, "rate_fraction", cp, default=None, lo=0)
        if frac is not None:
            if rate is None:
                raise _err("rate", f"is required: {cp}.rate_fraction is a fraction of it")
            fractions.append((i, frac))
        elif crate is None and arrival.needs_rate:
            raise _err(_join(cp, "rate"), f"the {arrival.type} process needs rate (req/s) or rate_fraction")
        lengths = {}
        for k in ("prompt_tokens", "output_tokens"):
            v = c.get(k, defaults.get(k))
            if v is None:
                raise _err(_join(cp, k), "is required (or set profile: chat | reasoning | agentic)")
            lengths[k] = parse_distribution(v, _join(cp, k), floor=1 if k == "prompt_tokens" else 0, cap=TOKEN_CAP,
                                            base=base)
        slo = _string(c, "slo_class", cp, default="default")
        if c.get("slo_class") is not None and slo not in slo_classes:
            raise _err(_join(cp, "slo_class"), f"unknown SLO class {show(slo)}; defined under slo_classes: "
                                               f"{', '.join(slo_classes) or 'none'}")
        pc = _string(c, "priority_class", cp, default=prio[0] if prio else "default")
        if prio is not None and pc not in prio:
            raise _err(_join(cp, "priority_class"), f"unknown priority class {show(pc)}; defined: {', '.join(prio)}")
        group, reuse = None, 0.0
        if c.get("prefix") is not None:
            pp = _join(cp, "prefix")
            pr = c["prefix"]
            if isinstance(pr, dict) and "group" in pr:
                pr = _mapping(pr, pp, ("group", "reuse_probability"))
                group = _name(pr["group"], _join(pp, "group"))
                if group not in groups:
                    raise _err(_join(pp, "group"), f"unknown prefix group {show(group)}; defined: {', '.join(groups) or 'none'}")
            else:
                group = f"{name}/prefix"
                groups[group] = _parse_group(pr, pp, group, f"{'workload.client.' + name}.prefix", base,
                                             extra=("reuse_probability",))
            reuse = _number(pr, "reuse_probability", pp, default=1.0, lo=0, hi=1)
        sess_val = c.get("session", None)
        sess_def = defaults.get("session")
        session = None
        if sess_val is not None or sess_def is not None:
            if sess_val is not None and not isinstance(sess_val, dict):
                raise _err(_join(cp, "session"), f"must be a mapping, got {show(sess_val)}")
            session = _parse_session(sess_val, _join(cp, "session"), base, sess_def)
        start = _number(c, "start_s", cp, default=0.0, lo=0, hi=MAX_SECONDS)
        end = _number(c, "end_s", cp, default=None, lo=0, hi=MAX_SECONDS)
        if end is not None and end <= start:
            raise _err(_join(cp, "end_s"), f"must be > start_s ({start:g}), got {end:g}")
        lp = _parse_load_profile(c["load_profile"], _join(cp, "load_profile")) if c.get("load_profile") is not None else None
        clients.append(ClientSpec(
            name=name, index=i, path=cp, rate=crate, tenant=_string(c, "tenant", cp, default=name),
            slo_class=slo, priority_class=pc, profile=prof, arrival=arrival,
            prompt_tokens=lengths["prompt_tokens"], output_tokens=lengths["output_tokens"],
            prefix_group=group, reuse_probability=reuse, session=session, start_s=start, end_s=end,
            load_profile=lp, model=_name(c["model"], _join(cp, "model")) if c.get("model") is not None else None,
            deadline=parse_deadline(c, cp, CLIENT_KEYS),
        ))
    if fractions:
        total = math.fsum(f for _, f in fractions)
        if total <= 0:
            raise _err("clients[*].rate_fraction", "the rate fractions sum to 0: at least one must be > 0")
        for i, f in fractions:
            r = rate * (f / total)
            if r != 0 and r < 1e-300:
                raise _err(f"clients[{i}].rate_fraction", f"gives a rate of {r:g} req/s, too small to represent")
            clients[i] = replace(clients[i], rate=r)
    return WorkloadSpec(seed=seed, rate=rate, duration_s=duration, num_requests=num_requests, load_profile=profile,
                        slo_classes=slo_classes, priority_classes=prio or [], prefix_groups=groups, clients=clients,
                        raw=data, source=source, class_deadlines=class_deadlines)


def load_spec(path: str | Path) -> WorkloadSpec:
    """Read and validate a workload spec YAML file (files it names are relative to it)."""
    from blis_fast.config.yamlfile import read_yaml_mapping  # deferred: yaml

    p = Path(path)
    data = read_yaml_mapping(p, "--workload-spec", WorkloadError)
    return parse_spec(data, base_dir=p.resolve().parent, source=str(p))
