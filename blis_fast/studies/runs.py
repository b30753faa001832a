"""Run many configurations in parallel and reduce each to its metrics.

The event loop is compiled ``nogil``, so runs on threads use every core: Python-side work
(workload generation, summaries) takes turns on the GIL, the kernel does not.  Each run
keeps its own memory budget (``simulation.max_memory``: a context variable, per thread);
without an explicit one, the runs side by side share the default (half the machine's
memory) equally.
Results come back in the order of the configurations, whatever order the runs finish in,
so a study is deterministic.

``seed_stats`` reduces one metric over a point's seeds to a mean and a 95 % confidence
interval (Student's t).
"""

from __future__ import annotations

import math
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable, Sequence

from blis_fast.config.effective import TRACE, workload_source
from blis_fast.config.sim import SimConfig, with_overrides
from blis_fast.config.validate import as_int
from blis_fast.errors import ConfigError
from blis_fast.studies.measure import run_metrics
from blis_fast.config.memory import default_max_memory
from blis_fast.run.runner import default_workers
from blis_fast.workload.spec import load_spec
from blis_fast.run.api import run_config

MAX_JOBS = 256
MAX_SEEDS = 1000
MAX_SIMULATIONS = 10_000  # simulations of one study (sweep, compare, capacity search)

# two-sided 95 % Student t quantiles t_{0.975, df}, df = 1..30 (beyond: ~1.96)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


@dataclass(frozen=True)
class SeedStats:
    """A metric over a point's seeds: mean, the half-width of its 95 % confidence
    interval (0 with one seed: unknown), and the values per seed."""

    mean: float
    half_width: float
    values: tuple[float, ...]

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width


def seed_stats(values: Sequence[float]) -> SeedStats:
    """Mean and 95 % CI half-width (t · s / sqrt(n)) of ``values``."""
    xs = tuple(float(v) for v in values)
    n = len(xs)
    mean = math.fsum(xs) / n
    if n < 2:
        return SeedStats(mean, 0.0, xs)
    var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1)
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    return SeedStats(mean, t * math.sqrt(var / n), xs)


def check_jobs(jobs, field: str = "--jobs") -> int:
    """Parallel runs: ``jobs`` checked, or the machine's cores when None."""
    if jobs is None:
        return min(default_workers(), MAX_JOBS)
    return as_int(jobs, field, 1, MAX_JOBS)


def check_seeds(seeds, field: str = "--seeds") -> int:
    return as_int(seeds, field, 1, MAX_SEEDS)


def check_simulations(count: int, field: str, what: str) -> None:
    """Refuse, before anything runs, a study of more than MAX_SIMULATIONS simulations
    (``what`` says how ``count`` came about, e.g. "100 points x 1000 seeds")."""
    if count > MAX_SIMULATIONS:
        raise ConfigError(field, f"{what} is {count} simulations, more than the {MAX_SIMULATIONS} of one study; "
                                 f"sweep fewer values or seeds")


def seed_list(cfg: SimConfig, n: int, field: str = "--seeds") -> list[int]:
    """``n`` consecutive workload seeds starting at the config's seed in force (explicit,
    else the workload spec's own, else 42).  A trace draws nothing at random, so it takes
    one seed only (more would repeat the same run)."""
    if workload_source(cfg.workload) == TRACE and n > 1:
        raise ConfigError(field, f"a trace replays the same requests whatever the seed, so its {n} seeds would "
                                 f"repeat one run; use {field} 1 (or a workload spec, whose seeds differ)")
    base = cfg.simulation.seed
    if base is None and cfg.workload.spec_filepath:
        base = load_spec(cfg.workload.spec_filepath).effective_seed
    base = cfg.simulation.workload_seed if base is None else int(base)
    return [base + k for k in range(n)]


def configs_for(cfg: SimConfig, settings: dict, seeds: Sequence[int]) -> list[SimConfig]:
    """One config per seed: ``cfg`` with the flat ``settings`` (and the seed) changed; a
    trace's configs keep no seed (it uses none: blis_fast.config.effective refuses one)."""
    if workload_source(cfg.workload) == TRACE:
        return [with_overrides(cfg, **settings) for _ in seeds]
    return [with_overrides(cfg, **settings, seed=s) for s in seeds]


def run_all(configs: Sequence[SimConfig], metrics: Sequence[str], jobs: int,
            on_done: Callable[[], None] | None = None, where: Sequence[str] | None = None,
            metrics_field: str = "--metrics") -> list[dict[str, float]]:
    """Simulate every config (``jobs`` at a time) and return ``run_metrics`` of each (its
    metrics and its adequacy), in order; ``on_done()`` after each run.  The first error stops the study (runs not yet
    started are cancelled) and is raised, naming the run (``where[i]``, e.g. "rate=800").
    A metric's selector that names no group of a run's workload (or no instance) is
    refused, naming ``metrics_field``, before that run simulates anything."""
    workers = max(1, min(jobs, len(configs)))
    selectors = [(metrics_field, m) for m in metrics if "[" in m]
    shared = default_max_memory() // workers  # runs side by side share the default budget

    def one(k: int) -> dict[str, float]:
        cfg = configs[k]
        if workers > 1 and cfg.simulation.max_memory is None:
            cfg = with_overrides(cfg, max_memory=max(shared, 2**20))
        try:
            out = run_metrics(run_config(cfg, selectors=selectors), metrics)
        except ConfigError as exc:  # e.g. a warm-up that leaves no request at this point's rate
            at = f"{where[k]}, " if where else ""
            raise type(exc)(exc.field, f"{exc.message} (in the run at {at}seed {cfg.simulation.seed})") from None
        if on_done is not None:
            on_done()
        return out

    if jobs <= 1 or len(configs) <= 1:
        return [one(k) for k in range(len(configs))]
    pool = ThreadPoolExecutor(max_workers=min(jobs, len(configs)), thread_name_prefix="blis-fast-run")
    try:
        futures = [pool.submit(one, k) for k in range(len(configs))]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:
            if f.done() and f.exception() is not None:
                raise f.exception()
        return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
