"""Statistical tests of the workload samplers (fixed seeds, large samples): every length
distribution and arrival process matches its theory (mean / cv and a KS test), the
lognormal parametrizations reproduce their defining moments / percentiles, and load
profiles shape per-window rates as the multiplier says."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from blis_fast.workload import generate_requests, parse_spec
from blis_fast.workload import sampling as S
from blis_fast.workload.generate import Streams, arrival_times, sample
from blis_fast.workload.spec import parse_distribution

N = 200_000
P_MIN = 0.001  # KS p-value floor (fixed seeds: deterministic)


def draw(d: dict, n: int = N, integer: bool = False, seed: int = 1) -> np.ndarray:
    return sample(parse_distribution(d, "x"), n, Streams(seed, "test"), "q", integer)


def ks(x, cdf) -> float:
    return stats.kstest(x, cdf).pvalue


# ----------------------------------------------------------------------------- lengths


def test_gaussian():
    x = draw({"type": "gaussian", "mean": 500, "std": 120})
    assert x.mean() == pytest.approx(500, abs=1.5) and x.std() == pytest.approx(120, rel=0.01)
    assert ks(x, stats.norm(500, 120).cdf) > P_MIN


def test_exponential():
    x = draw({"type": "exponential", "mean": 300})
    assert x.mean() == pytest.approx(300, rel=0.01) and x.std() / x.mean() == pytest.approx(1, abs=0.01)
    assert ks(x, stats.expon(scale=300).cdf) > P_MIN


def test_uniform():
    x = draw({"type": "uniform", "min": 10, "max": 90})
    assert ks(x, stats.uniform(10, 80).cdf) > P_MIN


@pytest.mark.parametrize("params", [
    {"mu": 6.0, "sigma": 0.7},
    {"mean": 800.0, "std": 600.0},
    {"p50": 500.0, "p90": 2000.0},
])
def test_lognormal_three_parametrizations(params):
    dist = parse_distribution({"type": "lognormal", **params}, "x")
    x = draw({"type": "lognormal", **params})
    ref = stats.lognorm(s=dist.sigma, scale=math.exp(dist.mu))
    assert ks(x, ref.cdf) > P_MIN
    if "mean" in params:
        assert ref.mean() == pytest.approx(800.0, rel=1e-12) and ref.std() == pytest.approx(600.0, rel=1e-12)
        assert x.mean() == pytest.approx(800, rel=0.01) and x.std() == pytest.approx(600, rel=0.03)
    if "p50" in params:
        assert ref.ppf(0.5) == pytest.approx(500.0, rel=1e-12) and ref.ppf(0.9) == pytest.approx(2000.0, rel=1e-12)
        assert np.percentile(x, 50) == pytest.approx(500, rel=0.01)
        assert np.percentile(x, 90) == pytest.approx(2000, rel=0.02)


def test_p50_p90_spec_reproduces_percentiles_of_integer_lengths():
    x = draw({"type": "lognormal", "p50": 800, "p90": 3000}, integer=True)
    assert x.dtype == np.int64
    assert abs(np.percentile(x, 50) - 800) <= 10 and abs(np.percentile(x, 90) - 3000) <= 40


def test_pareto_lognormal_mixture():
    w, alpha, scale, mu, sigma = 0.2, 1.8, 2000.0, 6.0, 0.5
    x = draw({"type": "pareto_lognormal", "pareto_weight": w, "alpha": alpha, "scale": scale, "mu": mu,
              "sigma": sigma})
    par = stats.pareto(b=alpha, scale=scale)
    logn = stats.lognorm(s=sigma, scale=math.exp(mu))
    assert ks(x, lambda v: w * par.cdf(v) + (1 - w) * logn.cdf(v)) > P_MIN
    assert np.mean(x >= scale) == pytest.approx(w + (1 - w) * logn.sf(scale), abs=0.005)


def test_empirical_cdf_is_piecewise_linear():
    pts = [[100, 0.1], [500, 0.6], [2000, 1.0]]  # atom of 0.1 at 100
    x = draw({"type": "empirical", "cdf": pts})
    assert np.mean(x == 100) == pytest.approx(0.1, abs=0.004)

    def cdf(v):
        return np.interp(v, [100, 500, 2000], [0.1, 0.6, 1.0], left=0.0)

    cont = x[x > 100]  # the continuous part, conditioned
    assert ks(cont, lambda v: (cdf(v) - 0.1) / 0.9) > P_MIN


def test_empirical_values_weights_and_samples(tmp_path):
    x = draw({"type": "empirical", "values": [1, 2, 5], "weights": [1, 2, 7]}, integer=True)
    freq = np.array([np.mean(x == v) for v in (1, 2, 5)])
    assert np.allclose(freq, [0.1, 0.2, 0.7], atol=0.004)
    (tmp_path / "s.txt").write_text("\n".join(map(str, [3, 3, 3, 9])))
    d = parse_distribution({"type": "empirical", "file": "s.txt"}, "x", base=tmp_path)
    y = sample(d, N, Streams(1, "t"), "q", True)
    assert np.mean(y == 3) == pytest.approx(0.75, abs=0.004)


def test_clamping_puts_the_tails_at_the_bounds():
    x = draw({"type": "gaussian", "mean": 100, "std": 50, "min": 50, "max": 200}, integer=True)
    assert x.min() == 50 and x.max() == 200
    assert np.mean(x == 50) == pytest.approx(stats.norm(100, 50).cdf(50.5), abs=0.004)
    assert np.mean(x == 200) == pytest.approx(stats.norm(100, 50).sf(199.5), abs=0.003)


def test_constant():
    assert np.all(draw(42, n=10, integer=True) == 42)


def test_samplers_are_prefix_stable():
    for d in ({"type": "pareto_lognormal", "pareto_weight": 0.3, "alpha": 1.2, "scale": 10, "p50": 5, "p90": 9},
              {"type": "gaussian", "mean": 1, "std": 1}, {"type": "empirical", "cdf": [[0, 0], [1, 1]]}):
        assert np.array_equal(draw(d, 1000), draw(d, 5000)[:1000])


# ----------------------------------------------------------------------------- arrivals


def client(arrival, rate=50.0):
    data = {"duration_s": 1, "clients": [{"name": "c", "rate": rate, "arrival": arrival, "prompt_tokens": 1,
                                          "output_tokens": 1}]}
    return parse_spec(data).clients[0]


def gaps(arrival, rate=50.0, span=4000.0):
    c = client(arrival, rate)
    t = arrival_times(c, Streams(3, c.stream), 0.0, span, None)
    return np.diff(np.concatenate(([0.0], t)))


def test_poisson_gaps():
    g = gaps("poisson")
    assert g.mean() == pytest.approx(1 / 50, rel=0.01) and g.std() / g.mean() == pytest.approx(1, abs=0.01)
    assert ks(g, stats.expon(scale=1 / 50).cdf) > P_MIN


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_gaps(cv):
    g = gaps({"type": "gamma", "cv": cv})
    assert g.mean() == pytest.approx(1 / 50, rel=0.03) and g.std() / g.mean() == pytest.approx(cv, rel=0.03)
    k = 1 / cv**2
    # KS on the sampler itself: differences of absolute times lose gaps below the float
    # resolution of t (~1e-12 s at t = 4000 s), which a cv-4 gamma produces often
    raw = S.gamma_gaps(np.random.default_rng(2), N, 50.0, cv)
    assert ks(raw, stats.gamma(k, scale=1 / (50 * k)).cdf) > P_MIN


@pytest.mark.parametrize("cv", [0.3, 1.0, 2.5])
def test_weibull_gaps(cv):
    k = S.weibull_shape(cv)
    assert math.sqrt(math.gamma(1 + 2 / k) / math.gamma(1 + 1 / k) ** 2 - 1) == pytest.approx(cv, rel=1e-9)
    g = gaps({"type": "weibull", "cv": cv})
    assert g.mean() == pytest.approx(1 / 50, rel=0.03) and g.std() / g.mean() == pytest.approx(cv, rel=0.04)
    raw = S.weibull_gaps(np.random.default_rng(2), N, 50.0, cv)
    assert ks(raw, stats.weibull_min(k, scale=1 / (50 * math.gamma(1 + 1 / k))).cdf) > P_MIN


def test_constant_gaps_exact():
    c = client("constant", rate=4)
    t = arrival_times(c, Streams(3, c.stream), 0.0, 10.0, None)
    assert np.allclose(t, np.arange(1, 40) / 4)


def test_bursty_long_run_rate_and_bursts():
    arrival = {"type": "bursty", "burst_size": {"type": "gaussian", "mean": 20, "std": 5, "min": 1}}
    c = client(arrival, rate=10)
    t = arrival_times(c, Streams(3, c.stream), 0.0, 5000.0, None)
    assert len(t) / 5000 == pytest.approx(10, rel=0.05)
    burst_starts = np.concatenate(([True], np.diff(t) > 0))
    sizes = np.diff(np.flatnonzero(np.concatenate((burst_starts, [True]))))
    assert sizes.mean() == pytest.approx(20, rel=0.05)  # all of a burst at one instant (gap 0)
    arrival |= {"burst_interval_s": {"type": "constant", "value": 2.0}, "burst_gap_s": 0.01}
    c = client(arrival, rate=None)
    t = arrival_times(c, Streams(3, c.stream), 0.0, 100.0, None)
    assert np.allclose(np.diff(t)[np.diff(t) < 1.0], 0.01)
    assert np.allclose(t[np.concatenate(([True], np.diff(t) > 1.0))], np.arange(1, 50) * 2.0)


# ----------------------------------------------------------------------------- load profiles


def window_counts(profile: dict, rate: float, duration: float, width: float, arrival="poisson", seed=5):
    data = {"seed": seed, "duration_s": duration, "load_profile": profile,
            "clients": [{"name": "c", "rate": rate, "arrival": arrival, "prompt_tokens": 1, "output_tokens": 0}]}
    s = parse_spec(data)
    r = generate_requests(s)
    t = r["arrival_us"] / 1e6
    edges = np.arange(0, duration + 1e-9, width)
    counts, _ = np.histogram(t, edges)
    prof = s.load_profile.build()
    expected = rate * np.diff(prof.integral(edges))
    return counts, expected


@pytest.mark.parametrize("profile", [
    {"type": "constant", "multiplier": 2},
    {"type": "step", "steps": [{"at_s": 0, "multiplier": 0.5}, {"at_s": 100, "multiplier": 3},
                               {"at_s": 200, "multiplier": 0}, {"at_s": 250, "multiplier": 1}]},
    {"type": "ramp", "start_s": 50, "end_s": 250, "from": 0.2, "to": 4},
    {"type": "diurnal", "period_s": 120, "amplitude": 0.9, "peak_s": 30},
    {"type": "spike", "at_s": 150, "duration_s": 20, "multiplier": 8},
    {"type": "piecewise", "segments": [{"duration_s": 60, "from": 1, "to": 3}, {"duration_s": 60, "multiplier": 0.3},
                                       {"duration_s": 60, "from": 0, "to": 2}]},
])
def test_per_window_rates_follow_the_multiplier(profile):
    counts, expected = window_counts(profile, rate=200, duration=300, width=10)
    z = (counts - expected) / np.sqrt(np.maximum(expected, 1))
    assert np.abs(z).max() < 4.5, (counts, expected)
    chi2 = float(np.sum((counts - expected) ** 2 / np.maximum(expected, 1)))
    assert stats.chi2(len(counts)).sf(chi2) > P_MIN
    assert np.all(counts[expected == 0] == 0)


def test_renewal_process_keeps_its_cv_under_a_profile():
    counts, expected = window_counts({"type": "ramp", "start_s": 0, "end_s": 300, "from": 1, "to": 3}, rate=100,
                                     duration=300, width=30, arrival={"type": "gamma", "cv": 0.2})
    assert np.allclose(counts, expected, rtol=0.02)  # cv 0.2: far less noise than Poisson


def test_profile_integral_and_inverse_roundtrip():
    rng = np.random.default_rng(0)
    profiles = [S.step_profile([10, 20, 30], [2, 0, 3]), S.ramp_profile(5, 15, 0, 2),
                S.diurnal_profile(60, 1.0, 10), S.spike_profile(5, 3, 10),
                S.piecewise_profile([5, 5, 5], [0, 1, 0], [1, 1, 4])]
    for p in profiles:
        t = np.sort(rng.uniform(0, 200, 1000))
        lam = p.integral(t)
        assert np.all(np.diff(lam) >= -1e-9)
        back = p.invert(lam)
        assert np.allclose(p.integral(back), lam, rtol=1e-9, atol=1e-9)
        m = p.multiplier(t)
        assert np.all(np.isclose(back, t, atol=1e-6) | (m == 0) | np.isclose(p.multiplier(back), 0))
    d = S.diurnal_profile(60, 0.5, 10)
    assert d.integral(60.0) == pytest.approx(60.0, rel=1e-12)
    assert d.multiplier(10.0) == pytest.approx(1.5) and d.multiplier(40.0) == pytest.approx(0.5)
