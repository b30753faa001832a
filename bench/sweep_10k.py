"""A 20-point rate sweep of the ``10k`` scenario (blis_fast.experiments.bench.SCENARIOS:
10,000 chatbot requests with a 256-token shared prefix on 4 instances), rates 30..600 req/s:
the study the studies' speed target is stated for (docs/studies.md).

    python bench/sweep_10k.py [--repeats 3] [--jobs 1,2]

Prints, per --jobs value, the best wall time and the process CPU time of that repeat
(``time.process_time``: all threads).  One untimed sweep first loads the compiled kernels.
"""

from __future__ import annotations

import argparse
import time

import blis_fast
from blis_fast.experiments.bench import scenario_overrides

GRID = "rate=30:600:30"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--jobs", default="1,2", help="comma-separated --jobs values to time")
    args = ap.parse_args()
    settings = scenario_overrides("10k")
    settings.pop("rate")
    blis_fast.sweep("rate=30,600", **settings)  # untimed: numba loads the kernels
    for jobs in (int(j) for j in args.jobs.split(",")):
        best = None
        for _ in range(args.repeats):
            w0, c0 = time.perf_counter(), time.process_time()
            s = blis_fast.sweep(GRID, jobs=jobs, **settings)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            assert len(s.points) == 20 and all(st["completed_requests"].mean == 10_000 for st in s.stats)
            if best is None or wall < best[0]:
                best = (wall, cpu)
        print(f"jobs={jobs}: 20 points, best wall {best[0]:.2f} s (CPU {best[1]:.2f} s)")


if __name__ == "__main__":
    main()
