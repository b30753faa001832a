"""Synthetic workloads: clamped-Gaussian lengths, shared prefix, Poisson or constant
arrivals (docs/semantics.md §7), and the named presets of ``configs/defaults.yaml``.

Each random quantity has its own stream (docs/semantics.md §10): ``workload.arrivals``,
``workload.prompt_lengths``, ``workload.output_lengths``, ``workload.tokens`` (the shared
prefix's token ids), ``workload.content`` (one 64-bit content seed per request); changing
the output-length parameters therefore changes neither arrivals nor prompts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

from blis_fast.config import memory
from blis_fast.config.validate import (
    MAX_REQUEST_TOKENS,
    MAX_REQUESTS,
    MAX_TIME_US,
    as_choice,
    as_float,
    as_int,
    show,
)
from blis_fast.errors import ConfigError
from blis_fast.rng import subsystem_rng
from blis_fast.workload.workload import KEY_BYTES, Workload, charge_keys
from blis_fast.config.coefficients import load_document

MAX_TOKEN_ID = 128000  # token ids are uniform in [0, MAX_TOKEN_ID)
PRESETS = ("chatbot", "contentgen", "summarization", "multidoc")
WORKLOAD_KINDS = PRESETS + ("distribution", "traces")
ARRIVALS = ("poisson", "constant")
_MAX_ARRIVAL_US = MAX_TIME_US  # refuse workloads whose clock would approach int64 overflow
MAX_RATE = 1e12  # requests per second
GEN_BYTES_PER_REQUEST = 160  # arrivals, lengths, content seeds and their temporaries, per request


@dataclass
class DistributionSpec:
    """Parameters of a ``distribution`` workload (BLIS flag names, minus the dashes)."""

    rate: float = 1.0  # mean arrival rate, requests per second
    num_requests: int = 100  # requests generated
    prefix_tokens: int = 0  # shared prefix (identical token ids) prepended to every prompt
    prompt_tokens: float = 512  # mean sampled prompt length, tokens (excluding the prefix)
    prompt_tokens_stdev: float = 256  # its standard deviation, tokens
    prompt_tokens_min: int = 2  # clamp, tokens (>= 1)
    prompt_tokens_max: int = 7000  # clamp, tokens
    output_tokens: float = 512  # mean output length, tokens
    output_tokens_stdev: float = 256  # its standard deviation, tokens
    output_tokens_min: int = 2  # clamp, tokens (>= 0)
    output_tokens_max: int = 7000  # clamp, tokens
    arrival: str = "poisson"  # "poisson" (exponential gaps) | "constant" (BLIS spacing)

    def validate(self, path: str = "workload") -> "DistributionSpec":
        """Raise ConfigError naming ``<path>.<field>`` and its allowed range; returns self
        (shared checkers of blis_fast.config.validate: int64-safe, finite, normal)."""

        def real(name: str, lo: float, hi: float, lo_open: bool = False) -> float:
            return as_float(getattr(self, name), f"{path}.{name}", lo, hi, lo_open=lo_open, text=False)

        def integer(name: str, lo: int) -> int:
            v = getattr(self, name)
            return as_int(v, f"{path}.{name}", lo, MAX_REQUEST_TOKENS, text=False)

        real("rate", 0.0, MAX_RATE, lo_open=True)
        as_int(self.num_requests, f"{path}.num_requests", 1, MAX_REQUESTS, text=False)
        prefix = integer("prefix_tokens", 0)
        top = {}
        for kind, lo in (("prompt", 1), ("output", 0)):
            vmin = integer(f"{kind}_tokens_min", lo)
            vmax = integer(f"{kind}_tokens_max", lo)
            if vmin > vmax:
                raise ConfigError(f"{path}.{kind}_tokens_min", f"must be <= {kind}_tokens_max ({vmax}), got {vmin}")
            mean = real(f"{kind}_tokens", 0.0, MAX_REQUEST_TOKENS)
            if not vmin <= mean <= vmax:
                raise ConfigError(f"{path}.{kind}_tokens", f"must lie in [{kind}_tokens_min, {kind}_tokens_max] = "
                                                           f"[{vmin}, {vmax}], got {show(getattr(self, f'{kind}_tokens'))}")
            real(f"{kind}_tokens_stdev", 0.0, 1e12)
            top[kind] = vmax
        if prefix + top["prompt"] + top["output"] > MAX_REQUEST_TOKENS:
            biggest = max((prefix, "prefix_tokens"), (top["prompt"], "prompt_tokens_max"),
                          (top["output"], "output_tokens_max"))[1]
            raise ConfigError(f"{path}.{biggest}", f"prefix_tokens + prompt_tokens_max + output_tokens_max must be "
                                                       f"<= {MAX_REQUEST_TOKENS} tokens per request, got "
                                                       f"{prefix} + {top['prompt']} + {top['output']}")
        as_choice(self.arrival, f"{path}.arrival", ARRIVALS)
        return self

    def expected_tokens(self) -> tuple[float, float]:
        """(expected prompt + output tokens over all requests, an upper bound that holds
        with overwhelming probability: + 6 standard deviations)."""
        n = int(self.num_requests)
        mean = float(self.prefix_tokens)
        sd = 0.0
        for kind in ("prompt", "output"):
            m, s = _clipped_normal_moments(float(getattr(self, f"{kind}_tokens")),
                                           float(getattr(self, f"{kind}_tokens_stdev")),
                                           float(getattr(self, f"{kind}_tokens_min")),
                                           float(getattr(self, f"{kind}_tokens_max")))
            mean += m + 0.5
            sd += s
        return n * mean, n * mean + 6.0 * math.sqrt(n) * sd


def _clipped_normal_moments(mu: float, sigma: float, lo: float, hi: float) -> tuple[float, float]:
    """(mean, a bound on the standard deviation) of clip(N(mu, sigma), lo, hi)."""
    if hi <= lo or sigma == 0:
        return min(max(mu, lo), hi), 0.0
    a, b = (lo - mu) / sigma, (hi - mu) / sigma
    cdf = lambda z: 0.5 * math.erfc(-z / math.sqrt(2.0))  # noqa: E731
    pdf = lambda z: math.exp(-0.5 * min(z * z, 1400.0)) / math.sqrt(2.0 * math.pi)  # noqa: E731
    mean = lo * cdf(a) + hi * (1.0 - cdf(b)) + mu * (cdf(b) - cdf(a)) + sigma * (pdf(a) - pdf(b))
    return min(max(mean, lo), hi), min(sigma, (hi - lo) / 2.0)


def round_half_away(x: np.ndarray) -> np.ndarray:
    """Round to the nearest integer, halves away from zero (Go's math.Round), exactly."""
    t = np.trunc(x)
    return t + np.sign(x) * (np.abs(x - t) >= 0.5)


def sample_lengths(rng: np.random.Generator, n: int, mean: float, stdev: float, lo: int, hi: int) -> np.ndarray:
    """n lengths ~ Normal(mean, stdev) clamped to [lo, hi], rounded half away from zero
    (int64 tokens).  min == max or stdev == 0 gives a constant and draws nothing."""
    if lo == hi:
        return np.full(n, lo, dtype=np.int64)
    if stdev == 0:
        return np.full(n, round_half_away(np.float64(min(max(mean, lo), hi))), dtype=np.int64)
    x = rng.standard_normal(n) * float(stdev) + float(mean)
    return round_half_away(np.clip(x, lo, hi)).astype(np.int64)


def constant_gap_us(rate: float) -> int:
    """BLIS's constant spacing: ``int64(1 / (rate / 1e6))`` µs (at least 1).  Computed the
    way BLIS does because it is not always trunc(1e6 / rate): rate 10 gives 99999 µs.
    ConfigError for a rate whose gap does not fit the µs clock."""
    per_us = float(rate) / 1e6
    if not (per_us > 0 and math.isfinite(per_us)) or 1.0 / per_us > _MAX_ARRIVAL_US:
        raise ConfigError("workload.rate", f"{show(rate)} requests/s is too small: one gap would exceed 2^62 µs")
    return max(1, int(1.0 / per_us))


def sample_arrivals(spec: DistributionSpec, seed: int) -> np.ndarray:
    """Arrival times in µs (int64, non-decreasing).  poisson: cumulative sum of
    exponential gaps, each truncated to whole µs and at least 1 µs, first request at the
    first gap (as BLIS's PoissonSampler); constant: i * constant_gap_us(rate), first at 0
    (as BLIS's legacy distribution generator)."""
    n = int(spec.num_requests)
    rate_per_us = float(spec.rate) / 1e6
    if spec.arrival == "constant":
        gap = constant_gap_us(float(spec.rate))
        if gap * (n - 1) > _MAX_ARRIVAL_US:
            raise ConfigError("workload.rate", f"too small for {n} requests (arrivals overflow the µs clock)")
        return np.arange(n, dtype=np.int64) * np.int64(gap)
    if not rate_per_us > 0 or n / rate_per_us > 64 * _MAX_ARRIVAL_US:
        raise ConfigError("workload.rate", f"too small for {n} requests (arrivals overflow the µs clock)")
    with np.errstate(over="ignore"):
        gaps = np.trunc(subsystem_rng(seed, "workload.arrivals").standard_exponential(n) / rate_per_us)
    if not gaps.sum() <= _MAX_ARRIVAL_US:
        raise ConfigError("workload.rate", f"too small for {n} requests (arrivals overflow the µs clock)")
    return np.cumsum(np.maximum(gaps, 1.0).astype(np.int64))


def _sequence_keys(prefix_ids, prompt_len, output_len, content_seed, block_size):
    """(keys, key_offsets, key_shared) of every request's sequence blocks: the leading
    floor(P/bs) blocks of the shared prefix (identical ids in every request) are hashed
    once from its ids and shared by all requests; every other block -- the one straddling
    prefix and body, the body, the output -- holds tokens drawn for this request alone, so
    it gets a fresh key from the request's content seed (kernels/workload/keys.py): the
    keys of the real random token sequences up to 2^-64 collisions, without drawing or
    hashing the ~10^3 token ids per request."""
    from blis_fast_kernels.native import chain_sequence_keys, hash_chain_states  # deferred: blis_fast_kernels.native

    n = prompt_len.shape[0]
    bs = np.int64(block_size)
    with np.errstate(over="ignore"):  # uint64 wrap-around is intended (NUMBA_DISABLE_JIT)
        g_states, g_offs = hash_chain_states(prefix_ids, np.array([0, prefix_ids.shape[0]], np.int64), bs)
        key_offsets = np.zeros(n + 1, np.int64)
        np.cumsum((prompt_len + output_len) // bs, out=key_offsets[1:])
        keys = np.empty(int(key_offsets[-1]), np.int64)
        shared = np.empty(keys.shape[0], np.uint8)
        group = np.zeros(n, np.int64) if g_states.shape[0] else np.full(n, -1, np.int64)
        chain_sequence_keys(key_offsets, prompt_len // bs, np.full(n, -1, np.int64), group, content_seed,
                            np.arange(n, dtype=np.int64), g_states, g_offs, keys, shared)
    return keys, key_offsets, shared


def generate_distribution(spec: DistributionSpec, seed: int, block_size: int) -> Workload:
    """A ``distribution`` workload: spec.num_requests requests, prompt L = prefix_tokens +
    clamped-Gaussian length, output N clamped-Gaussian; the prefix's token ids (uniform in
    [0, 128000)) are drawn once and shared, every other token is unique to its request
    (keys: ``_sequence_keys``); keys for ``block_size``."""
    spec.validate()
    bs = as_int(block_size, "block_size", 1, 1024, text=False)
    n, prefix = int(spec.num_requests), int(spec.prefix_tokens)
    check_expected_size(spec, bs)
    memory.charge(n * GEN_BYTES_PER_REQUEST + prefix * 16, f"generating {n} requests")
    arrival = sample_arrivals(spec, seed)
    body = sample_lengths(
        subsystem_rng(seed, "workload.prompt_lengths"), n, spec.prompt_tokens,
        spec.prompt_tokens_stdev, int(spec.prompt_tokens_min), int(spec.prompt_tokens_max),
    )
    output = sample_lengths(
        subsystem_rng(seed, "workload.output_lengths"), n, spec.output_tokens,
        spec.output_tokens_stdev, int(spec.output_tokens_min), int(spec.output_tokens_max),
    )
    prefix_ids = subsystem_rng(seed, "workload.tokens").integers(0, MAX_TOKEN_ID, size=prefix, dtype=np.int64)
    content = subsystem_rng(seed, "workload.content").bit_generator.random_raw(n).view(np.int64)
    prompt_len = body + prefix
    charge_keys(int(((prompt_len + output) // bs).sum()), bs)
    keys, key_offsets, shared = _sequence_keys(prefix_ids, prompt_len, output, content, int(block_size))
    wl = Workload(
        arrival_us=arrival,
        prompt_len=prompt_len,
        output_len=output,
        block_keys=keys,
        key_offsets=key_offsets,
        block_size=int(block_size),
        description={"kind": "distribution", "seed": int(seed), **asdict(spec)},
        key_shared=shared,
    )
    wl.validate()
    return wl


def expected_size(spec: DistributionSpec, block_size: int) -> tuple[int, float]:
    """(requests, an upper bound on their block keys) of a distribution workload, from its
    parameters (nothing is drawn)."""
    _, tokens_hi = spec.expected_tokens()
    return int(spec.num_requests), tokens_hi / block_size


def check_expected_size(spec: DistributionSpec, block_size: int) -> None:
    """Refuse, before drawing anything, a distribution workload whose expected arrays
    exceed the memory budget (requests and block keys from the length parameters)."""
    n, keys = expected_size(spec, block_size)
    memory.check(n * GEN_BYTES_PER_REQUEST + keys * KEY_BYTES + int(spec.prefix_tokens) * 16,
                 f"the workload ({n} requests, about {keys:.3g} KV block keys)",
                 "use fewer or shorter requests or a larger block size")


def load_preset(name: str) -> dict:
    """The parameters of preset ``name`` from ``configs/defaults.yaml`` (``workloads:``),
    with a missing ``prefix_tokens`` read as 0."""
    if name not in PRESETS:
        raise ConfigError("workload", f"unknown workload {show(name)}; known: {', '.join(WORKLOAD_KINDS)}")
    # the file's pre-parsed copy, once per process (pure-Python YAML parsing took ~0.35 s a run)
    presets = (load_document() or {}).get("workloads") or {}
    if name not in presets:
        raise ConfigError("workload", f"preset {show(name)} missing from defaults.yaml workloads:")
    params = dict(presets[name])
    allowed = {f.name for f in fields(DistributionSpec)} - {"rate", "num_requests", "arrival"}
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ConfigError(f"workloads.{name}", f"unknown fields {unknown}; allowed: {sorted(allowed)}")
    params.setdefault("prefix_tokens", 0)
    return params


def preset_spec(name: str, rate: float, num_requests: int, arrival: str = "poisson") -> DistributionSpec:
    """The DistributionSpec of preset ``name`` at ``rate`` req/s and ``num_requests``."""
    spec = DistributionSpec(rate=rate, num_requests=num_requests, arrival=arrival, **load_preset(name))
    return spec.validate()
