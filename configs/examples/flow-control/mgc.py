"""The M/M/4 validation of docs/flow-control.md: free-slot flow control over 4 instances
with one running slot each (mgc.yaml: Poisson arrivals, exponential service times of mean
100 ms) is the FCFS queue with 4 servers.  For each load it runs ``--seeds`` seeds and
prints, per load, the measured mean wait in the queue (arrival to the start of service),
Erlang C's mean wait for the measured arrival rate and mean service time, their ratio, and
whether every request's wait equals the exact FCFS c-server recursion (the k-th arrival
starts at max(its arrival, the earliest time a server frees), on that server).  Run from
the repository root:

    python configs/examples/flow-control/mgc.py --seeds 10 --num-requests 100000

A run's mean wait scatters by several percent at load 0.8 (the queue's long busy periods):
the seeds' pooled mean is the figure to compare, with its standard error over seeds.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

import blis_fast
from blis_fast.config.validate import as_int
from blis_fast.errors import ConfigError
from blis_fast.studies.script import OneLineParser

SPEC = Path(__file__).parent / "mgc.yaml"
SERVERS = 4
MEAN_SERVICE_S = 0.1  # mgc.yaml's mean output length (100 tokens) x 1 ms per step
LOADS = (0.5, 0.8)
# one running slot per instance, steps of exactly 1 ms, no queueing overhead
SETTINGS = dict(num_instances=SERVERS, max_num_seqs=1, alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 0, 0],
                total_kv_blocks=200_000, flow_control="free-slot")


def erlang_c_wait(servers: int, arrival_rate: float, mean_service: float) -> float:
    """Erlang C: the M/M/c queue's mean wait before service (same unit as mean_service)."""
    a = arrival_rate * mean_service  # offered load in servers
    rho = a / servers
    top = a ** servers / math.factorial(servers) / (1 - rho)
    p_wait = top / (sum(a ** k / math.factorial(k) for k in range(servers)) + top)
    return p_wait * mean_service / (servers * (1 - rho))


def fcfs_starts(arrivals: np.ndarray, services: np.ndarray, servers: int) -> np.ndarray:
    """Start times of the FCFS c-server queue: in arrival order, each request starts at
    max(its arrival, the earliest time a server frees) on that server."""
    free = np.zeros(servers, np.int64)
    starts = np.empty_like(arrivals)
    for k in np.argsort(arrivals, kind="stable"):
        j = int(np.argmin(free))
        starts[k] = max(arrivals[k], free[j])
        free[j] = starts[k] + services[k]
    return starts


def run_load(rho: float, seed: int, num_requests: int) -> dict:
    """One run at load rho: arrivals, waits and services (µs), and the recursion's check."""
    rate = rho * SERVERS / MEAN_SERVICE_S
    res = blis_fast.simulate(workload_spec=str(SPEC), rate_scale=rate / 32, seed=seed,
                             num_requests=num_requests, **SETTINGS)
    reqs = res.state.reqs
    arrival = reqs["arrival_us"].astype(np.int64)
    start = reqs["first_scheduled_us"].astype(np.int64)
    service = reqs["last_token_us"].astype(np.int64) - start  # its output length x 1 ms
    exact = bool(np.array_equal(start, fcfs_starts(arrival, service, SERVERS)))
    return {"arrival": arrival, "wait": start - arrival, "service": service, "exact": exact}


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="10", help="runs per load, seeds 1..N (default 10)")
    parser.add_argument("--num-requests", default="100000", help="requests per run (default 100000)")
    args = parser.parse_args(argv)
    try:
        seeds = as_int(args.seeds, "--seeds", 1, 100)
        num_requests = as_int(args.num_requests, "--num-requests", 2, 1_000_000)
    except ConfigError as exc:
        print(f"error: {exc.field}: {exc.message}", file=sys.stderr)
        sys.exit(2)
    print("| load | requests | mean service (ms) | measured wait (ms) | standard error (ms) | Erlang C (ms) | "
          "measured / Erlang C | every wait = FCFS recursion |")
    print("|---|---|---|---|---|---|---|---|")
    for rho in LOADS:
        runs = [run_load(rho, seed, num_requests) for seed in range(1, seeds + 1)]
        n = sum(len(r["wait"]) for r in runs)
        span_s = sum((r["arrival"].max() - r["arrival"].min()) / 1e6 for r in runs)
        rate = sum(len(r["arrival"]) - 1 for r in runs) / span_s
        service_ms = np.concatenate([r["service"] for r in runs]).mean() / 1e3
        wait_ms = np.concatenate([r["wait"] for r in runs]).mean() / 1e3
        per_seed = np.array([r["wait"].mean() / 1e3 for r in runs])
        error_ms = per_seed.std(ddof=1) / math.sqrt(seeds) if seeds > 1 else float("nan")
        analytic_ms = erlang_c_wait(SERVERS, rate, service_ms / 1e3) * 1e3
        print(f"| {rate * service_ms / 1e3 / SERVERS:.3f} | {n} | {service_ms:.2f} | {wait_ms:.2f} | {error_ms:.2f} | "
              f"{analytic_ms:.2f} | {wait_ms / analytic_ms:.4f} | {all(r['exact'] for r in runs)} |")


if __name__ == "__main__":
    main()
