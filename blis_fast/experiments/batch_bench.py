"""``blis-fast bench`` batch scenarios: evaluations per second of ``blis_fast.batch`` --
64 policy candidates on one standard scenario (``experiments.scenarios.SCENARIOS``), serial
(one thread) and on every core (a thread per core; the event loop releases the GIL).

The candidates are evaluated as ``evaluate_prepared`` evaluates them: those that differ
only in routing parameters as cohorts, one run while they route alike (batch/cohorts.py);
"runs" is the number of runs a serial pass judged (64 when every candidate ran alone).

Untimed: the scenario is prepared once (workload, resolved config), the candidates are
compiled, one evaluation loads the kernels.  Timed: ``repeats`` rounds of all candidates
serially, then all on every core (alternating, so that both see the same machine); the
best pass of each is reported, as for the other scenarios, and the speed-up is their
ratio.  Every pass's rows must equal the first serial pass's and every evaluation be
``ok`` (a fast wrong batch is no result).  The serial passes also split each
evaluation's time into building the state, the event loop and judging the result
(metrics, objectives, ids; the best pass's split); one bare kernel run of the scenario
with its default policy (best of 3) is reported beside.  "busy cores" = CPU seconds /
wall seconds of the best parallel pass: about ``workers`` on an idle machine; less means
other processes held the cores, and the speed-up says little.  "kernel scaling" = the
same ratio for bare event loops (no Python work; ``kernel_scaling``), measured beside: what
the machine's cores allowed at the time, the ceiling of the batch's speed-up.
"""

from __future__ import annotations

import time

import numpy as np
from concurrent.futures import ThreadPoolExecutor

from blis_fast.errors import BlisFastError
from blis_fast.experiments.scenarios import scenario_overrides, text_table

N_CANDIDATES = 64
# batch scenario -> the standard scenario it evaluates on, and whether the serial pass runs
BATCH_SCENARIOS = {"batch-10k": ("10k", True), "batch-100k": ("100k", False)}
SCORERS = ("queue-depth", "kv-utilization", "load-balance", "prefix-affinity")


def bench_candidates(n: int = N_CANDIDATES, seed: int = 7) -> dict[str, dict]:
    """``n`` deterministic, distinct, plausible candidates: round-robin and least-loaded
    routing under every scheduler (fcfs, sjf, priority-fcfs) and priority (constant,
    slo-based), then weighted routing with random scorer weights."""
    rng = np.random.default_rng(seed)
    schedulers, priorities = ("fcfs", "sjf", "priority-fcfs"), ("constant", "slo-based")
    plain = [(r, s, p) for r in ("round-robin", "least-loaded") for s in schedulers for p in priorities]
    out = {}
    for i in range(n):
        if i < len(plain):
            routing, sched, prio = plain[i]
        else:
            w = np.round(rng.uniform(0.1, 3.0, len(SCORERS)), 2)
            routing = {"type": "weighted", "params": {"scorers": {s: float(x) for s, x in zip(SCORERS, w)}}}
            sched, prio = schedulers[i % 3], priorities[(i // 3) % 2]
        out[f"c{i:02d}"] = {"routing": routing, "scheduler": sched, "priority": prio}
    return out


def bench_batch(name: str, workers: int | None = None, serial: bool | None = None, repeats: int = 1,
                cohorts: bool = True) -> dict:
    """Evaluations/s of a batch scenario, serial and on ``workers`` threads (default all
    cores), best of ``repeats`` passes each; see the module docstring.  ``cohorts=False``:
    every candidate runs alone (batch/cohorts.py; the rows are the same)."""
    from blis_fast.batch.budget import Budget  # deferred: yaml
    from blis_fast.batch.candidates import load_candidate  # deferred: yaml
    from blis_fast.batch.cohorts import form_cohorts  # deferred: yaml
    from blis_fast.batch.evaluate import default_workers, evaluate_prepared, evaluate_task, evaluate_unit, make_task  # deferred: yaml
    from blis_fast.batch.scenarios import Scenario, prepare  # deferred: yaml
    from blis_fast.config.sim import build_config  # deferred: yaml
    from blis_fast.run import RunSession  # deferred: yaml

    base, run_serial = BATCH_SCENARIOS[name]
    run_serial = run_serial if serial is None else serial
    workers = default_workers() if workers is None else workers
    cfg = build_config({}, scenario_overrides(base))
    t0 = time.perf_counter()
    ps = prepare(Scenario(base, cfg))
    prepare_s = time.perf_counter() - t0
    cands = [load_candidate(src, cid) for cid, src in bench_candidates().items()]
    budget = Budget(max_wall_s=None)
    warm = evaluate_task(ps, make_task(0, cands[0], ps, {}), budget)  # loads the kernels
    if warm.status != "ok":
        raise BlisFastError(f"batch {name}: the warm-up evaluation failed: {warm.message}")
    kernel = []
    for _ in range(3):
        session = RunSession(ps.setup, ps.workload).prepare()
        kernel.append(session.run().kernel_s)

    def timed(n_workers: int) -> tuple[float, float, list, dict]:
        phases: dict[str, float] = {}
        c, t = time.process_time(), time.perf_counter()
        if n_workers == 1:  # evaluate_prepared's serial path, with the time of each phase
            compiled: dict = {}
            tasks = [make_task(i, cand, ps, compiled) for i, cand in enumerate(cands)]
            results = [None] * len(tasks)
            for unit in form_cohorts(tasks, cohorts, ps.setup):
                for i, ev in evaluate_unit(ps, unit, budget, timings=phases):
                    results[i] = ev
        else:
            results = evaluate_prepared(cands, [ps], budget, n_workers, cohorts=cohorts)
        return time.perf_counter() - t, time.process_time() - c, results, phases

    serial_runs, parallel_runs, first = [], [], None
    for _ in range(max(1, repeats)):
        for runs, n_workers in ((serial_runs, 1), (parallel_runs, workers)):
            if n_workers == 1 and not run_serial:
                continue
            wall, cpu, rows, phases = timed(n_workers)
            bad = [r for r in rows if r.status != "ok"]
            if bad:
                raise BlisFastError(f"batch {name}: {len(bad)} evaluations failed, e.g. {bad[0].status}: "
                                    f"{bad[0].message}")
            dicts = [r.to_dict() for r in rows]
            if first is None:
                first = dicts
            elif dicts != first:
                raise BlisFastError(f"batch {name}: a pass's results differ from the first "
                                    f"({'serial' if n_workers == 1 else 'parallel'} pass)")
            runs.append((wall, cpu, phases))
    scaling = kernel_scaling(ps, workers, repeats) if run_serial and workers > 1 else None
    serial_s, serial_cpu, phases = min(serial_runs, key=lambda r: r[0]) if serial_runs else (None, None, {})
    runs = phases.pop("runs", None)
    parallel_s, parallel_cpu, _ = min(parallel_runs, key=lambda r: r[0])
    n = len(cands)
    return {
        "name": name,
        "scenario": base,
        "candidates": n,
        # runs judged in a serial pass: fewer than candidates when cohorts shared runs (batch/cohorts.py)
        "runs": None if runs is None else int(runs),
        "workers": workers,
        "prepare_s": prepare_s,
        "kernel_best_s": min(kernel),
        "serial_s": serial_s,
        "serial_evals_per_s": n / serial_s if serial_s else None,
        "serial_cpu_s": serial_cpu,
        "parallel_s": parallel_s,
        "parallel_cpu_s": parallel_cpu,
        # CPU seconds per wall second of the parallel pass: ~workers when the cores were free
        "parallel_busy_cores": parallel_cpu / parallel_s,
        "parallel_evals_per_s": n / parallel_s,
        "speedup": serial_s / parallel_s if serial_s else None,
        "serial_s_per_eval": serial_s / n if serial_s else None,
        # where a serial evaluation's time goes (mean seconds): state, event loop, judging
        "phase_s_per_eval": {k: v / n for k, v in phases.items()} if phases else None,
        # bare event loops (the scenario's default policy, no Python work) on ``workers``
        # threads vs one: the speed-up the machine allowed then -- a bound on the batch's
        "kernel_scaling": scaling,
        "repeats": max(1, repeats),
        "mean_score": float(np.mean([r["score"] for r in first])),
    }


def kernel_scaling(ps, workers: int, repeats: int = 1) -> float:
    """Best-of-``repeats`` time of ``4 * workers`` bare event loops of the prepared scenario
    on one thread / on ``workers`` threads (each on a fresh copy of one state)."""
    from blis_fast.run import RunSession  # deferred: yaml

    template = RunSession(ps.setup, ps.workload).prepare()
    n = 4 * workers
    best = {1: float("inf"), workers: float("inf")}
    with ThreadPoolExecutor(workers, thread_name_prefix="blis-fast-bench") as pool:
        for _ in range(max(1, repeats)):
            for k in best:
                sessions = [template.copy() for _ in range(n)]
                t = time.perf_counter()
                if k == 1:
                    for one in sessions:
                        one.run()
                else:
                    list(pool.map(RunSession.run, sessions))
                best[k] = min(best[k], time.perf_counter() - t)
    return best[1] / best[workers]


def _phases(p: dict | None) -> str:
    if not p:
        return "-"
    return "/".join(f"{p.get(k, 0.0):.4f}" for k in ("build_s", "kernel_s", "judge_s"))


def format_batch(rows: list[dict]) -> list[str]:
    """Lines of the batch table (for ``experiments.bench.format_report``)."""
    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    out = ["", f"batch evaluation ({N_CANDIDATES} candidates per scenario; blis_fast.batch.evaluate_many's engine; "
               "serial = 1 thread, parallel = a thread per core; best pass of repeats)"]
    out += text_table(
        ["batch", "scenario", "workers", "runs", "serial s", "evals/s serial", "parallel s", "evals/s parallel",
         "speed-up", "s/eval serial", "build/kernel/judge s", "busy cores", "kernel scaling"],
        [[r["name"], r["scenario"], str(r["workers"]), f(r.get("runs"), "d"), f(r["serial_s"], ".2f"),
          f(r["serial_evals_per_s"], ".2f"),
          f"{r['parallel_s']:.2f}", f"{r['parallel_evals_per_s']:.2f}", f(r["speedup"], ".2f"),
          f(r["serial_s_per_eval"], ".4f"), _phases(r.get("phase_s_per_eval")), f"{r['parallel_busy_cores']:.2f}",
          f(r.get("kernel_scaling"), ".2f")]
         for r in rows],
    )
    return out
