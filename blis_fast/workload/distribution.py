"""Synthetic workloads: clamped-Gaussian lengths, shared prefix, Poisson or constant
arrivals (SEMANTICS §7), and the named presets of ``configs/defaults.yaml``.

Each random quantity has its own stream (SEMANTICS §10): ``workload.arrivals``,
``workload.prompt_lengths``, ``workload.output_lengths``, ``workload.tokens`` (the shared
prefix's token ids), ``workload.content`` (one 64-bit content seed per request); changing
the output-length parameters therefore changes neither arrivals nor prompts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

from blis_fast.errors import ConfigError
from blis_fast.rng import subsystem_rng
from blis_fast.workload.workload import Workload

MAX_TOKEN_ID = 128000  # token ids are uniform in [0, MAX_TOKEN_ID)
PRESETS = ("chatbot", "contentgen", "summarization", "multidoc")
WORKLOAD_KINDS = PRESETS + ("distribution", "traces")
ARRIVALS = ("poisson", "constant")
_MAX_ARRIVAL_US = 2**62  # refuse workloads whose clock would approach int64 overflow


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
        """Raise ConfigError naming ``<path>.<field>`` and its allowed range; returns self."""

        def err(name: str, msg: str) -> ConfigError:
            return ConfigError(f"{path}.{name}", f"{msg}, got {getattr(self, name)!r}")

        def real(name: str) -> float:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise err(name, "must be a number")
            if not math.isfinite(float(v)):
                raise err(name, "must be finite")
            return float(v)

        def integer(name: str, lo: int) -> int:
            v = getattr(self, name)
            ok = isinstance(v, (int, np.integer)) or (isinstance(v, (float, np.floating)) and float(v).is_integer())
            if isinstance(v, bool) or not ok:
                raise err(name, f"must be an integer >= {lo}")
            if int(v) < lo:
                raise err(name, f"must be >= {lo}")
            return int(v)

        if real("rate") <= 0:
            raise err("rate", "must be > 0 requests/s")
        integer("num_requests", 1)
        integer("prefix_tokens", 0)
        for kind, lo in (("prompt", 1), ("output", 0)):
            vmin = integer(f"{kind}_tokens_min", lo)
            vmax = integer(f"{kind}_tokens_max", lo)
            if vmin > vmax:
                raise err(f"{kind}_tokens_min", f"must be <= {kind}_tokens_max ({vmax})")
            mean = real(f"{kind}_tokens")
            if not vmin <= mean <= vmax:
                raise err(f"{kind}_tokens", f"must lie in [{kind}_tokens_min, {kind}_tokens_max] = [{vmin}, {vmax}]")
            if real(f"{kind}_tokens_stdev") < 0:
                raise err(f"{kind}_tokens_stdev", "must be >= 0")
        if self.arrival not in ARRIVALS:
            raise err("arrival", f"must be one of {', '.join(ARRIVALS)}")
        return self


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
    way BLIS does because it is not always trunc(1e6 / rate): rate 10 gives 99999 µs."""
    return max(1, int(1.0 / (rate / 1e6)))


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
    gaps = np.trunc(subsystem_rng(seed, "workload.arrivals").standard_exponential(n) / rate_per_us)
    if gaps.sum() > _MAX_ARRIVAL_US:
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
    from kernels.workload.keys import chain_sequence_keys, hash_chain_states  # numba imported lazily

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
    if isinstance(block_size, bool) or int(block_size) < 1:
        raise ConfigError("block_size", f"must be an integer >= 1, got {block_size!r}")
    n, prefix = int(spec.num_requests), int(spec.prefix_tokens)
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


def load_preset(name: str) -> dict:
    """The parameters of preset ``name`` from ``configs/defaults.yaml`` (``workloads:``),
    with a missing ``prefix_tokens`` read as 0."""
    import yaml

    from blis_fast.paths import configs_dir

    if name not in PRESETS:
        raise ConfigError("workload", f"unknown workload {name!r}; known: {', '.join(WORKLOAD_KINDS)}")
    with open(configs_dir() / "defaults.yaml", encoding="utf-8") as f:
        presets = (yaml.safe_load(f) or {}).get("workloads") or {}
    if name not in presets:
        raise ConfigError("workload", f"preset {name!r} missing from defaults.yaml workloads:")
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
