"""Random building blocks of workload specs: length / duration distributions, arrival
processes and load profiles.  Each function is small, vectorized and states its formula.

Conventions
- ``rng`` is a ``numpy.random.Generator`` owned by one quantity of one client (see
  ``blis_fast.workload.generate``).  Every sampler draws its variates *sequentially* from
  its stream(s), so drawing n values gives the first n of the values drawn for any n' > n
  (prefix-stable): generating a longer window never changes the earlier requests.
- Distributions with several random ingredients (the pareto/lognormal mixture) take one
  stream per ingredient (``streams(suffix)``) for the same reason.
- Arrival processes produce *gaps in operational time* at multiplier 1: the load profile
  turns operational time into wall-clock time by time rescaling (``LoadProfile.invert``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

Z90 = 1.2815515655446004  # standard normal 0.9-quantile, Φ⁻¹(0.9)


# ----------------------------------------------------------------------------- lengths


def sample_gaussian(rng: np.random.Generator, n: int, mean: float, std: float) -> np.ndarray:
    """x = mean + std·Z, Z ~ N(0, 1)."""
    return mean + std * rng.standard_normal(n)


def sample_exponential(rng: np.random.Generator, n: int, mean: float) -> np.ndarray:
    """x = mean·E, E ~ Exp(1): density e^{-x/mean}/mean, mean = std = ``mean``."""
    return mean * rng.standard_exponential(n)


def sample_uniform(rng: np.random.Generator, n: int, low: float, high: float) -> np.ndarray:
    """x = low + (high − low)·U, U ~ U[0, 1)."""
    return low + (high - low) * rng.random(n)


def sample_lognormal(rng: np.random.Generator, n: int, mu: float, sigma: float) -> np.ndarray:
    """x = exp(mu + sigma·Z): median e^mu, mean e^{mu + sigma²/2}."""
    return np.exp(mu + sigma * rng.standard_normal(n))


def lognormal_from_mean_std(mean: float, std: float) -> tuple[float, float]:
    """Real-space (mean, std) -> log-space (mu, sigma):
    sigma² = ln(1 + std²/mean²), mu = ln(mean) − sigma²/2 (exact inverse of
    mean = e^{mu+sigma²/2}, std² = (e^{sigma²} − 1)·e^{2mu+sigma²})."""
    r = std / mean
    s2 = math.log1p(r * r) if r < 1e100 else 2.0 * math.log(r)  # (no overflow for extreme ratios)
    return math.log(mean) - s2 / 2, math.sqrt(s2)


def lognormal_from_percentiles(p50: float, p90: float) -> tuple[float, float]:
    """(p50, p90) -> (mu, sigma): mu = ln p50, sigma = (ln p90 − ln p50)/Φ⁻¹(0.9)."""
    return math.log(p50), (math.log(p90) - math.log(p50)) / Z90


def sample_pareto(rng: np.random.Generator, n: int, alpha: float, scale: float) -> np.ndarray:
    """Pareto type I: x = scale·e^{E/alpha}, E ~ Exp(1) (= scale·U^{-1/alpha});
    P(X > x) = (scale/x)^alpha for x >= scale, mean alpha·scale/(alpha − 1) if alpha > 1."""
    return scale * np.exp(rng.standard_exponential(n) / alpha)


def sample_pareto_lognormal(streams: Callable[[str], np.random.Generator], n: int, pareto_weight: float,
                            alpha: float, scale: float, mu: float, sigma: float) -> np.ndarray:
    """Mixture: with probability ``pareto_weight`` a Pareto(alpha, scale) value, else a
    lognormal(mu, sigma) one (the ServeGen fit of prompt lengths: a lognormal body with a
    heavy Pareto tail).  One stream each for the choice, the Pareto and the lognormal."""
    pick = streams("mix").random(n) < pareto_weight
    return np.where(pick, sample_pareto(streams("pareto"), n, alpha, scale),
                    sample_lognormal(streams("lognormal"), n, mu, sigma))


def sample_empirical_cdf(rng: np.random.Generator, n: int, values: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Inverse transform of a piecewise-linear CDF through the points (values[k], probs[k])
    (values and probs non-decreasing, probs[-1] = 1): u ~ U[0,1), k = first index with
    probs[k] >= u, x = values[k-1] + (u − probs[k-1])/(probs[k] − probs[k-1])·(values[k] − values[k-1]);
    u <= probs[0] gives values[0] (an atom of mass probs[0])."""
    u = rng.random(n)
    k = np.searchsorted(probs, u, side="left")
    k0 = np.maximum(k - 1, 0)
    k = np.minimum(k, len(probs) - 1)
    dp = probs[k] - probs[k0]
    frac = np.divide(u - probs[k0], dp, out=np.zeros(n), where=dp > 0)
    return np.where(k == 0, values[0], values[k0] + frac * (values[k] - values[k0]))


def sample_discrete(rng: np.random.Generator, n: int, values: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """values[k] with probability weights[k]/Σweights (uniform over values if no weights;
    a file of samples is resampled this way, with replacement)."""
    if weights is None:
        return values[rng.integers(0, len(values), n)]
    cdf = np.cumsum(weights, dtype=np.float64)
    cdf /= cdf[-1]
    idx = np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), len(values) - 1)
    return values[idx]


# ----------------------------------------------------------------------------- arrivals


def poisson_gaps(rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    """Exponential gaps E/rate: a Poisson process of ``rate`` per second (cv = 1)."""
    return rng.standard_exponential(n) / rate


def gamma_gaps(rng: np.random.Generator, n: int, rate: float, cv: float) -> np.ndarray:
    """Gamma gaps of mean 1/rate and coefficient of variation cv: shape k = 1/cv²,
    scale θ = 1/(rate·k) (mean kθ = 1/rate, std √k·θ = cv/rate)."""
    k = 1.0 / (cv * cv)
    return rng.standard_gamma(k, n) / (rate * k)


def weibull_shape(cv: float) -> float:
    """Weibull shape k with coefficient of variation cv: the root of
    Γ(1 + 2/k)/Γ(1 + 1/k)² − 1 = cv² (decreasing in k), by bisection on ln k."""
    target = math.log1p(cv * cv)

    def excess(log_k: float) -> float:
        k = math.exp(log_k)
        return math.lgamma(1 + 2 / k) - 2 * math.lgamma(1 + 1 / k) - target

    lo, hi = math.log(1e-3), math.log(1e6)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
    return math.exp(0.5 * (lo + hi))


def weibull_gaps(rng: np.random.Generator, n: int, rate: float, cv: float) -> np.ndarray:
    """Weibull gaps of mean 1/rate and coefficient of variation cv: shape k = weibull_shape(cv),
    scale λ = 1/(rate·Γ(1 + 1/k)) (mean λΓ(1+1/k) = 1/rate); x = λ·E^{1/k}, E ~ Exp(1)."""
    k = weibull_shape(cv)
    lam = 1.0 / (rate * math.gamma(1 + 1 / k))
    return lam * rng.standard_exponential(n) ** (1.0 / k)


def constant_gaps(n: int, rate: float) -> np.ndarray:
    """Deterministic gaps 1/rate (cv = 0)."""
    return np.full(n, 1.0 / rate)


# ----------------------------------------------------------------------------- load profiles


@dataclass(frozen=True, eq=False)
class LoadProfile:
    """A rate multiplier m(t) >= 0, piecewise linear through the knots (t_k, m_k), t_0 = 0,
    constant m_last after the last knot -- or, with ``period``, the knots cover one period
    [0, period] and m repeats (m(t) = m(t mod period)).

    Time rescaling: with Λ(t) = ∫₀ᵗ m(s) ds, a process generated in *operational time* τ at
    multiplier 1 is mapped to wall-clock time t = Λ⁻¹(τ).  A Poisson process of rate r
    becomes exactly the inhomogeneous Poisson process of intensity r·m(t); a renewal
    process keeps its gap distribution in operational time (its gaps stretch where m < 1).
    Λ is piecewise quadratic, inverted in closed form per segment.
    """

    t: np.ndarray  # knot times, s (t[0] = 0, non-decreasing; equal times = a jump)
    m: np.ndarray  # multiplier at each knot (>= 0)
    period: float | None = None  # repeat the knots every period seconds (t[-1] == period)

    def __post_init__(self):
        t = np.asarray(self.t, np.float64)
        m = np.asarray(self.m, np.float64)
        object.__setattr__(self, "t", t)
        object.__setattr__(self, "m", m)
        dt = np.diff(t)
        object.__setattr__(self, "_lam", np.concatenate(([0.0], np.cumsum(0.5 * (m[1:] + m[:-1]) * dt))))

    def multiplier(self, t) -> np.ndarray:
        """m(t) (linear interpolation between knots, constant outside / periodic)."""
        t = np.asarray(t, np.float64)
        if self.period is not None:
            t = np.mod(t, self.period)
        return np.interp(t, self.t, self.m)

    def _segments(self, k, d):
        k1 = np.minimum(k + 1, len(self.t) - 1)
        seg = self.t[k1] - self.t[k]
        return np.divide(self.m[k1] - self.m[k], seg, out=np.zeros_like(d), where=seg > 0)

    def _integral(self, t: np.ndarray) -> np.ndarray:
        k = np.clip(np.searchsorted(self.t, t, side="right") - 1, 0, len(self.t) - 1)
        d = t - self.t[k]
        return self._lam[k] + self.m[k] * d + 0.5 * self._segments(k, d) * d * d

    def _invert(self, tau: np.ndarray) -> np.ndarray:
        k = np.clip(np.searchsorted(self._lam, tau, side="right") - 1, 0, len(self.t) - 1)
        d = tau - self._lam[k]
        slope = self._segments(k, d)
        den = self.m[k] + np.sqrt(np.maximum(self.m[k] ** 2 + 2 * slope * d, 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            delta = np.where(d <= 0, 0.0, np.where(den > 0, 2 * d / den, np.inf))
        return self.t[k] + delta

    def integral(self, t) -> np.ndarray:
        """Λ(t) = ∫₀ᵗ m(s) ds (t >= 0)."""
        t = np.asarray(t, np.float64)
        if self.period is None:
            return self._integral(t)
        q = np.floor(t / self.period)
        return q * self._lam[-1] + self._integral(t - q * self.period)

    def invert(self, tau) -> np.ndarray:
        """Λ⁻¹(τ): t with Λ(t) = τ (where m = 0 on an interval, its end), +inf where τ
        exceeds Λ(∞).  Per segment k (Λ_k <= τ): Δ = 2(τ − Λ_k)/(m_k + √(m_k² + 2·s_k·(τ − Λ_k))),
        s_k = the segment's slope (the stable root of m_k·Δ + s_k·Δ²/2 = τ − Λ_k)."""
        tau = np.asarray(tau, np.float64)
        if self.period is None:
            return self._invert(tau)
        q = np.floor(tau / self._lam[-1])
        return q * self.period + self._invert(tau - q * self._lam[-1])


def constant_profile(multiplier: float = 1.0) -> LoadProfile:
    """m(t) = multiplier."""
    return LoadProfile(np.array([0.0]), np.array([float(multiplier)]))


def step_profile(times: list[float], multipliers: list[float]) -> LoadProfile:
    """m(t) = multipliers[k] for times[k] <= t < times[k+1], 1 before times[0] (a jump is
    two knots at the same time)."""
    t, m = [0.0], [1.0]
    for tk, mk in zip(times, multipliers):
        t += [tk, tk]
        m += [m[-1], mk]
    return _knots(t, m)


def ramp_profile(start_s: float, end_s: float, m_from: float, m_to: float) -> LoadProfile:
    """m(t) = m_from before start_s, linear from m_from to m_to on [start_s, end_s], m_to after."""
    return _knots([0.0, start_s, end_s], [m_from, m_from, m_to])


def spike_profile(at_s: float, duration_s: float, height: float, base: float = 1.0) -> LoadProfile:
    """m(t) = base, except height on [at_s, at_s + duration_s)."""
    return _knots([0.0, at_s, at_s, at_s + duration_s, at_s + duration_s], [base, base, height, height, base])


def diurnal_profile(period_s: float, amplitude: float, peak_s: float, knots_per_period: int = 4096) -> LoadProfile:
    """m(t) = 1 + amplitude·cos(2π(t − peak_s)/period_s): mean 1 over a period, maximum at
    peak_s.  One period sampled at knots_per_period equal steps and repeated; the linear
    interpolation error is below amplitude·(2π/knots)²/8 (3e-7·amplitude at 4096), and the
    trapezoid integral over a period is exactly period_s."""
    t = np.linspace(0.0, period_s, knots_per_period + 1)
    m = 1.0 + amplitude * np.cos(2 * np.pi * (t - peak_s) / period_s)
    m[-1] = m[0]
    return LoadProfile(t, m, period=period_s)


def piecewise_profile(durations: list[float], starts: list[float], ends: list[float]) -> LoadProfile:
    """Consecutive segments from t = 0: segment j lasts durations[j] and goes linearly from
    starts[j] to ends[j] (a jump where ends[j] != starts[j+1]); m stays at ends[-1] after."""
    t, m, now = [], [], 0.0
    for d, a, b in zip(durations, starts, ends):
        t += [now, now + d]
        m += [a, b]
        now += d
    return _knots(t, m)


def _knots(t: list[float], m: list[float]) -> LoadProfile:
    """A LoadProfile from non-decreasing knot times (equal times = a jump; the later knot
    wins at that instant), with repeated identical knots dropped."""
    out_t, out_m = [float(t[0])], [float(m[0])]
    for tk, mk in zip(t[1:], m[1:]):
        if tk == out_t[-1] and mk == out_m[-1]:
            continue
        out_t.append(float(tk))
        out_m.append(float(mk))
    return LoadProfile(np.array(out_t), np.array(out_m))
