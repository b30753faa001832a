"""Analytic validation: one instance with max_num_seqs = 1 and a constant step time is a
FIFO single server.  A request with N output tokens is served in N steps (one prefill step
that emits the first token, N - 1 decode steps), so its service time is N·β0 µs, and its
scheduling delay is its wait in queue.

- Per request, the waits equal Lindley's recursion W_i = max(0, W_{i-1} + S_{i-1} - A_i)
  exactly (integer µs), for any arrival and service sequence.
- Over long runs, the mean wait matches Pollaczek–Khinchine, W = λ·E[S²] / (2(1 − ρ)), for
  Poisson arrivals from blis-fast's own generator: M/D/1 (constant N), M/G/1 (N drawn from a
  Gaussian) and M/M/1 (N exponential: a geometric service time, E[S²] ≈ 2·E[S]²).
- Little's law over the busy server: utilization = λ·E[S].
"""

from __future__ import annotations

import numpy as np
import pytest

import blis_fast
from builders import ONE_TOKEN_PROMPTS, SINGLE_SERVER as SERVER, constant_outputs, lengths_workload


def lindley_waits(arrival_us, service_us):
    waits = np.zeros(len(arrival_us), np.int64)
    free = 0
    for i, (a, s) in enumerate(zip(arrival_us.tolist(), service_us.tolist())):
        start = max(a, free)
        waits[i] = start - a
        free = start + s
    return waits


@pytest.mark.parametrize("seed", [1, 2])
def test_single_server_waits_equal_lindley_recursion(seed):
    rng = np.random.default_rng(seed)
    n = 3000
    arrival = np.cumsum(rng.exponential(1e6 / 80, n)).astype(np.int64)
    arrival[rng.random(n) < 0.05] -= 1  # a few ties and near-ties: same µs, FIFO by request order
    arrival = np.maximum.accumulate(np.maximum(arrival, 0))
    n_out = rng.geometric(0.1, n)
    beta0 = 997
    r = blis_fast.simulate(workload=lengths_workload(arrival, np.ones(n, int), n_out, seed=seed),
                           beta_coeffs=[beta0, 0, 0], **SERVER)
    c = r.request_columns()
    assert np.array_equal(c["scheduling_delay_us"], lindley_waits(arrival, n_out * beta0))
    assert np.array_equal(c["e2e_us"], c["scheduling_delay_us"] + n_out * beta0)


def pk_ratio(result, beta0):
    """Simulated mean wait / the Pollaczek–Khinchine mean, with the run's own realized arrival
    rate and service moments (at rho = 0.8 a 1 % rate error moves the mean wait by 5 %)."""
    s = np.maximum(result.workload.output_len, 1).astype(np.float64) * beta0
    arrival = result.workload.arrival_us
    lam = (len(s) - 1) / ((arrival.max() - arrival.min()) / 1e6)
    rho = lam * s.mean() / 1e6
    want = lam * (s ** 2).mean() / 1e6 / (2 * (1 - rho))
    return result.request_columns()["scheduling_delay_us"].mean() / want


LENGTHS = {
    "M/D/1": constant_outputs(10),
    "M/G/1": dict(output_tokens=10, output_tokens_stdev=4, output_tokens_min=1, output_tokens_max=40),
}


@pytest.mark.slow
@pytest.mark.parametrize("rho", [0.5, 0.8])
@pytest.mark.parametrize("queue", sorted(LENGTHS))
def test_mean_wait_matches_pollaczek_khinchine(queue, rho):
    beta0, n = 1000, (150_000 if rho == 0.5 else 400_000)
    ratios = []
    for seed in (11, 12, 13):
        r = blis_fast.simulate(**SERVER, beta_coeffs=[beta0, 0, 0], num_requests=n // 3, seed=seed,
                               arrival="poisson", rate=rho * 1e6 / (beta0 * LENGTHS[queue]["output_tokens"]),
                               **ONE_TOKEN_PROMPTS, **LENGTHS[queue])
        ratios.append(pk_ratio(r, beta0))
    assert abs(np.mean(ratios) - 1) < 0.02, ratios


@pytest.mark.slow
@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_mm1_mean_wait(tmp_path, rho):
    """Exponential output lengths (a workload spec): geometric service times, so E[S²] is
    about 2·E[S]² and the mean wait is M/M/1's ρ/(μ − λ) within a per cent; checked against
    Pollaczek–Khinchine with the sample's moments, and against the M/M/1 formula loosely."""
    beta0, mean_n = 250, 40
    rate = rho * 1e6 / (beta0 * mean_n)
    ratios, mm1 = [], []
    for seed in (21, 22, 23):
        spec = tmp_path / f"mm1_{seed}.yaml"
        spec.write_text(
            f"seed: {seed}\nnum_requests: {(150_000 if rho == 0.5 else 400_000) // 3}\n"
            "clients:\n"
            f"  - name: c\n    rate: {rate}\n    arrival: {{type: poisson}}\n"
            "    prompt_tokens: {type: constant, value: 1}\n"
            f"    output_tokens: {{type: exponential, mean: {mean_n}, min: 1}}\n")
        r = blis_fast.simulate(**SERVER, beta_coeffs=[beta0, 0, 0], workload_spec=str(spec))
        ratios.append(pk_ratio(r, beta0))
        s_mean = beta0 * mean_n / 1e6
        mm1.append(r.request_columns()["scheduling_delay_us"].mean() / 1e6 / (rho * s_mean / (1 - rho)))
    assert abs(np.mean(ratios) - 1) < 0.02, ratios
    assert abs(np.mean(mm1) - 1) < 0.06, mm1


def test_utilization_is_offered_load():
    """Little's law on the server: the busy fraction equals λ·E[S] (a long run at ρ = 0.6)."""
    beta0 = 1000
    r = blis_fast.simulate(**SERVER, beta_coeffs=[beta0, 0, 0], num_requests=20_000, seed=5, arrival="poisson",
                           rate=60, **ONE_TOKEN_PROMPTS, **LENGTHS["M/D/1"])
    busy = int(r.state.inst[0]["busy_us"])
    span = int(r.state.inst[0]["last_step_end_us"]) - int(r.workload.arrival_us.min())
    s = np.maximum(r.workload.output_len, 1) * beta0
    assert busy == int(s.sum())  # every step is one token of one request
    lam = (len(s) - 1) / ((r.workload.arrival_us.max() - r.workload.arrival_us.min()) / 1e6)
    assert abs(busy / span - lam * s.mean() / 1e6) < 0.01


@pytest.mark.parametrize("k", [2, 3])
def test_round_robin_cluster_is_its_analytic_split(k):
    """Round-robin over k single-request servers: request i goes to instance i mod k, so
    each instance is a FIFO single server fed every k-th arrival, and every wait equals
    Lindley's recursion on that sub-stream (exact, per request)."""
    rng = np.random.default_rng(k)
    n = 1500
    arrival = np.cumsum(rng.exponential(1e6 / (60 * k), n)).astype(np.int64)
    n_out = rng.geometric(0.1, n)
    beta0 = 1000
    r = blis_fast.simulate(workload=lengths_workload(arrival, np.ones(n, int), n_out, seed=k),
                           beta_coeffs=[beta0, 0, 0], **{**SERVER, "num_instances": k}, routing_policy="round-robin")
    c = r.request_columns()
    assert np.array_equal(c["instance"], np.arange(n) % k)
    for i in range(k):
        sub = np.arange(i, n, k)
        assert np.array_equal(c["scheduling_delay_us"][sub], lindley_waits(arrival[sub], n_out[sub] * beta0))
    # and each instance's busy time is its own offered work
    assert [int(b) for b in r.state.inst["busy_us"][:k]] == [int(n_out[i::k].sum()) * beta0 for i in range(k)]


@pytest.mark.parametrize("settings", [
    dict(SERVER, beta_coeffs=[1000, 0, 0], rate=70, num_requests=400, **ONE_TOKEN_PROMPTS, **constant_outputs(10)),
    dict(num_instances=3, rate=30, num_requests=300, workload="chatbot", max_num_seqs=16, total_kv_blocks=400),
], ids=["single-server", "batched-cluster"])
def test_littles_law_on_the_time_series(settings):
    """L = λW on a whole run, from the time series: the time-average number of requests in
    the system (cluster and each instance) equals the arrival rate times the mean time in
    the system (the end-to-end time), within 0.5 % (sampling every 1 ms; a request in its
    last step counts until its last token is visible).  The batch never exceeds its cap."""
    step_ms = 1.0
    r = blis_fast.simulate(**settings, sample_interval_ms=step_ms)
    cols = r.timeseries.columns()
    lat = r.request_columns()
    assert (lat["e2e_us"] >= 0).all()  # every request completed: the system empties
    span_s = cols["time_s"].max()
    for inst in [-1, *range(settings["num_instances"])]:
        rows = cols["instance"] == inst
        L = cols["in_system"][rows].sum() * step_ms / 1e3 / span_s  # time-average requests in the system
        mine = lat["e2e_us"] if inst < 0 else lat["e2e_us"][lat["instance"] == inst]
        lam, W = len(mine) / span_s, mine.mean() / 1e6
        assert L == pytest.approx(lam * W, rel=0.005)
        if inst >= 0:
            assert cols["running"][rows].max() <= settings.get("max_num_seqs", 1)
