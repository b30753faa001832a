"""Times the agent fair-share kernel (kernels/agents/fairshare.py, ``run_tool_dags``) on
100K requests of 5-tool DAGs (tools only), in both share modes.

    python bench/agents_fairshare.py [--requests 100000] [--rho 0.7] [--repeats 3] [--seed 42]

DAG of every request: t0 -> (t1, t2) -> t3 -> t4.  Resources (the founding scenarios'
capacities): cpu 1000/s, npu 256/s, memory 1024000 MB/s, network 10000 MB/s, disk
5000 MB/s; each tool loads two or three of them with exponential work (means below).
Poisson arrivals at the rate that puts the busiest resource at ``--rho``.  Prints the
best kernel time of ``--repeats`` (after a compiling warm-up), the events handled
(arrivals + resource finish events) and events per second.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from blis_fast_kernels.agents.fairshare import DYNAMIC, STATIC, run_tool_dags

CAPACITY = np.array([1000.0, 256.0, 1_024_000.0, 10_000.0, 5_000.0])  # cpu, npu, memory, network, disk
# mean work per tool and resource (0 = the tool does not load it)
MEAN_WORK = np.array([
    [20.0, 0.0, 2_000.0, 100.0, 0.0],  # t0: plan (cpu, memory, network)
    [10.0, 0.0, 0.0, 400.0, 0.0],  # t1: search (cpu, network)
    [5.0, 0.0, 0.0, 0.0, 200.0],  # t2: read cache (cpu, disk)
    [0.0, 8.0, 4_000.0, 0.0, 0.0],  # t3: rank (npu, memory)
    [15.0, 0.0, 0.0, 50.0, 100.0],  # t4: answer (cpu, network, disk)
])
EDGES = [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4)]


def generate(n_requests: int, rho: float, seed: int):
    rng = np.random.default_rng(seed)
    per_request = MEAN_WORK.sum(axis=0) / CAPACITY  # busy seconds per request on each resource
    rate = rho / per_request.max()
    arrival = np.cumsum(np.round(rng.exponential(1e6 / rate, n_requests))).astype(np.int64)
    k = MEAN_WORK.shape[0]
    req_ptr = np.arange(n_requests + 1, dtype=np.int64) * k
    preds = np.zeros(k, np.int64)
    for _, j in EDGES:
        preds[j] += 1
    pending = np.tile(preds, n_requests)
    weight = np.ones(n_requests * k, np.int64)
    res_of_tool = [np.flatnonzero(MEAN_WORK[i]) for i in range(k)]
    loads_per_tool = np.array([len(r) for r in res_of_tool])
    load_ptr = np.concatenate(([0], np.cumsum(np.tile(loads_per_tool, n_requests)))).astype(np.int64)
    load_res = np.tile(np.concatenate(res_of_tool), n_requests).astype(np.int64)
    means = np.tile(np.concatenate([MEAN_WORK[i][res_of_tool[i]] for i in range(k)]), n_requests)
    load_work = rng.exponential(1.0, means.shape[0]) * means
    succ_of = [[j for i2, j in EDGES if i2 == i] for i in range(k)]
    succ_ptr = np.concatenate(([0], np.cumsum(np.tile([len(s) for s in succ_of], n_requests)))).astype(np.int64)
    succ = (np.tile(np.concatenate([np.array(s, np.int64) for s in succ_of]), n_requests)
            + np.repeat(np.arange(n_requests, dtype=np.int64) * k, len(EDGES)))
    return (arrival, req_ptr, pending, weight, load_ptr, load_res, load_work, succ_ptr, succ.astype(np.int64),
            CAPACITY, np.zeros(len(CAPACITY), np.int64))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rho", type=float, default=0.7)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    args = generate(a.requests, a.rho, a.seed)
    span_us = None
    for name, mode in (("dynamic", DYNAMIC), ("static", STATIC)):
        run_tool_dags(*generate(10, a.rho, a.seed), mode)  # compile (or load the cache)
        best = float("inf")
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            start, finish, busy, work, events, status = run_tool_dags(*args, mode)
            best = min(best, time.perf_counter() - t0)
        assert status == 0 and (finish >= 0).all()
        span_us = int(finish.max())
        k = MEAN_WORK.shape[0]
        latency = (finish.reshape(-1, k).max(axis=1) - args[0]) / 1e6
        util = ", ".join(f"{u:.2f}" for u in work / (args[9] * span_us / 1e6))
        print(f"{name}: {a.requests} requests, {len(args[5])} loads: kernel {best:.3f} s, {events} events, "
              f"{events / best / 1e6:.2f} M events/s; mean latency {latency.mean():.4f} s, "
              f"utilization [{util}]")


if __name__ == "__main__":
    main()
