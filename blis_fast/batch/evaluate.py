"""``evaluate_many``: every candidate on every scenario, on every core, one row each.

    candidates ──load/validate──► Candidate (settings, or an error row)
    scenarios  ──prepare (once)──► PreparedScenario (Setup + workload arrays + objectives)
    (candidate, scenario) ──merge + compile (once per distinct policy)──► Task
    Task ──evaluate_task (thread, process or Dask worker)──► EvaluationResult
    results ──► pyarrow Table (one row per pair, candidate-major order)

Parallelism: the event loop is ``njit(nogil=True)``, so by default tasks run on a thread
pool that shares the prepared scenarios in memory (nothing is copied or pickled).  Any
``concurrent.futures.Executor`` may be passed instead (a process pool, a Dask
``Client.get_executor()``); it receives tasks grouped by scenario -- the prepared
scenario (arrays) plus a list of compiled candidates -- and a Dask executor gets each
prepared scenario scattered to its workers once.  An evaluation depends only on its task,
so the rows are the same, byte for byte, serial or parallel, local or distributed.

A candidate that cannot be evaluated -- bad YAML, an unknown scorer, a NaN weight, a
program that fails, a run over its budget -- gets a row with score 0, a ``status`` and a
one-line ``message``; ``evaluate_many`` raises only for bad arguments (ConfigError).
"""

from __future__ import annotations

import os
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait, FIRST_COMPLETED
from typing import Any, Callable, NamedTuple, Sequence

from blis_fast.batch.budget import Budget
from blis_fast.batch.candidates import INVALID, Candidate, candidate_ids, load_candidate, merged_policy
from blis_fast.batch.program import check_timeout
from blis_fast.batch.cohorts import evaluate_cohort, form_cohorts
from blis_fast.batch.scenarios import PreparedScenario, as_scenarios, prepare
from blis_fast.config.policy import check_routing_models
from blis_fast.config.validate import as_int, as_str, show
from blis_fast.errors import ConfigError
from blis_fast.batch.task import Task, evaluate_task, failed, release_thread_arrays
from blis_fast.run.runner import default_workers
from blis_fast.batch.candidates import PROGRAM_SUFFIXES
from blis_fast.batch.program import allow_programs, stop_all_programs
from blis_fast.policy import compile_policies

MAX_WORKERS = 1024
MAX_EVALUATIONS = 1_000_000  # candidates x scenarios of one batch
GROUP_SIZE = 8  # candidates per task handed to an external executor


class BatchResult(NamedTuple):
    """What ``evaluate_many`` returns (unpacks as ``table, results``)."""

    table: Any  # pyarrow.Table
    results: list  # EvaluationResult, in row order


def evaluate_many(candidates, scenarios, objectives=None, budget: Budget | dict | None = None,
                  workers: int | None = None, executor: Executor | None = None, *, summarize: bool = False,
                  include_wall_time: bool = False, progress: Callable[[int, int], None] | None = None,
                  program_timeout_s: float | None = None) -> BatchResult:
    """Evaluate every candidate on every scenario; returns ``BatchResult(table, results)``.

    ``candidates``: a list of candidates -- bundle YAML text, a bundle dict, a file path
    (``.yaml``/``.yml`` bundle or ``.py`` program with ``get_policy()``) -- or a mapping
    {candidate id: candidate}.  ``scenarios``: a scenarios file, or Scenario objects /
    mappings shaped like its entries (``blis_fast.batch.scenarios``).  ``objectives``: the
    default objectives of scenarios that set none (spec text or list; None = the
    project default).  ``budget``: per evaluation (``Budget`` or a mapping; None = the
    default wall-clock cap).  ``workers``: threads (None = all cores, 1 = serial in this
    thread); ``executor``: any ``concurrent.futures.Executor`` instead.  ``summarize``
    adds each run's trace summary text; ``include_wall_time`` adds a wall_time_s column
    (which makes the table differ run to run).  ``progress(done, total)`` is called in
    this thread as evaluations finish.  ``program_timeout_s``: seconds each ``.py``
    program may take to return its policy (default 10; a number in (0, 3600]).
    """
    budget = Budget.parse(budget)
    if executor is not None and not isinstance(executor, Executor):
        raise ConfigError("executor", f"must be a concurrent.futures.Executor (e.g. a Dask client's get_executor()), "
                                      f"got {type(executor).__name__}")
    n_workers = default_workers() if workers is None else as_int(workers, "workers", 1, MAX_WORKERS, text=False)
    if program_timeout_s is not None:
        program_timeout_s = check_timeout(program_timeout_s)
    ids, sources = _named(candidates)
    scens = as_scenarios(scenarios)
    if len(sources) * len(scens) > MAX_EVALUATIONS:  # refused before any program runs or workload is built
        raise ConfigError("candidates", f"{len(sources)} candidates x {len(scens)} scenarios is "
                                        f"{len(sources) * len(scens)} evaluations, more than the {MAX_EVALUATIONS} "
                                        f"of one batch; split it")
    # the scenarios first: a bad one (its objectives, its workload) is refused before any program runs
    prepared = [prepare(s, objectives) for s in scens]
    cands = load_candidates(ids, sources, n_workers, program_timeout_s)
    results = evaluate_prepared(cands, prepared, budget, n_workers, executor, summarize, progress)
    return BatchResult(results_table(results, cands, prepared, summarize, include_wall_time), results)


def load_candidates(ids: list[str], sources: list, workers: int, program_timeout_s: float | None) -> list[Candidate]:
    """Load every candidate; ``.py`` programs (a sandbox each) on ``workers`` threads.  If
    this thread is interrupted (Ctrl-C, SIGTERM through blis_fast.cli.feedback), every
    running program is killed before the interrupt goes on."""
    def load(pair):
        return load_candidate(pair[1], pair[0], program_timeout_s)

    pairs = list(zip(ids, sources))
    programs = sum(1 for _, src in pairs if isinstance(src, (str, os.PathLike)) and str(src).endswith(PROGRAM_SUFFIXES))
    if workers <= 1 or programs <= 1:
        return [load(p) for p in pairs]
    pool = ThreadPoolExecutor(workers, thread_name_prefix="blis-fast-load")
    try:
        return list(pool.map(load, pairs))
    except BaseException:
        stop_all_programs()  # the threads' programs end now, not at their time limit
        try:
            pool.shutdown(wait=True, cancel_futures=True)
        finally:
            allow_programs()
        raise
    finally:
        pool.shutdown(wait=True)


def _named(candidates) -> tuple[list[str], list]:
    if isinstance(candidates, dict):
        ids = [as_str(k, "candidates", numbers_ok=True) for k in candidates]  # (ids of a bounded size)
        sources = list(candidates.values())
    elif isinstance(candidates, (list, tuple)):
        sources = list(candidates)
        ids = candidate_ids(sources)
    else:
        raise ConfigError("candidates", "must be a list of candidates (YAML text, dicts or file paths) or a mapping "
                                        "{id: candidate}")
    if not sources:
        raise ConfigError("candidates", "needs at least one candidate")
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ConfigError("candidates", f"two candidates are named {show(dup)}; give each its own id")
    return ids, sources


def evaluate_prepared(cands: Sequence[Candidate], prepared: Sequence[PreparedScenario], budget: Budget,
                      workers: int = 1, executor: Executor | None = None, summarize: bool = False,
                      progress: Callable[[int, int], None] | None = None, cohorts: bool = True) -> list:
    """The rows of every (candidate, scenario) pair, candidate-major; the engine room of
    ``evaluate_many`` (the adapters call it with scenarios prepared once).  ``cohorts``:
    run candidates that differ only in routing parameters together while they route alike
    (batch/cohorts.py; the rows are the same either way)."""
    from blis_fast.results.evaluation import EvaluationResult  # deferred: blis_fast_kernels.native

    n_s = len(prepared)
    results: list = [None] * (len(cands) * n_s)
    by_scenario: list[list[Task]] = [[] for _ in prepared]
    compiled: dict = {}  # one compilation per distinct merged policy
    for c_i, cand in enumerate(cands):
        for s_i, ps in enumerate(prepared):
            task = make_task(c_i * n_s + s_i, cand, ps, compiled)
            if task.error is not None:
                results[task.index] = failed(ps, task, *task.error)
            else:
                by_scenario[s_i].append(task)
    pending = sum(len(t) for t in by_scenario)
    total = len(results)
    done = total - pending
    if progress is not None:
        progress(done, total)

    def record(batch: list) -> None:
        nonlocal done
        for index, ev in batch:
            results[index] = ev
        done += len(batch)
        if progress is not None:
            progress(done, total)

    # candidates that differ only in routing parameters run as one while they route alike
    # (batch/cohorts.py); a summary text describes each candidate's own policy
    share = cohorts and not summarize
    if executor is not None:
        _run_on_executor(executor, prepared, by_scenario, budget, summarize, record, share)
    else:
        units = [(s_i, c) for s_i, tasks in enumerate(by_scenario)
                 for c in form_cohorts(tasks, share, prepared[s_i].setup)]
        if workers <= 1 or len(units) <= 1:
            for s_i, c in units:
                record(evaluate_unit(prepared[s_i], c, budget, summarize))
        else:
            # larger cohorts first, so that the threads finish together (stable)
            units.sort(key=lambda u: -len(u[1]))
            if not _kernels_loaded():  # JIT: the smallest unit compiles or loads them here, before any fan-out
                s_i, c = units.pop()
                record(evaluate_unit(prepared[s_i], c, budget, summarize))
            pool = ThreadPoolExecutor(workers, thread_name_prefix="blis-fast-eval")
            try:
                futures = {pool.submit(evaluate_unit, prepared[s_i], c, budget, summarize): None
                           for s_i, c in units}
                _collect(futures, lambda f, _: record(f.result()))
            finally:  # on Ctrl-C: drop what has not started; what runs ends within its budget
                pool.shutdown(wait=True, cancel_futures=True)
    release_thread_arrays()  # (the pool's threads took theirs with them)
    assert all(isinstance(r, EvaluationResult) for r in results)
    return results


def _kernels_loaded() -> bool:
    """True if the kernels' calls go to the ahead-of-time compiled module, now loaded (a
    JIT kernel compiles or loads on its first call)."""
    from blis_fast_kernels import native  # deferred: blis_fast_kernels.native

    return native.mode() != "jit" and native.compiled_module() is not None


def _collect(futures: dict, on_done) -> None:
    """Call ``on_done(future, key)`` in this thread as futures finish (any order); on an
    exception (Ctrl-C included) the futures not yet started are cancelled."""
    left = set(futures)
    try:
        while left:
            finished, left = wait(left, return_when=FIRST_COMPLETED)
            for f in finished:
                on_done(f, futures[f])
    except BaseException:
        for f in left:
            f.cancel()
        raise


def _run_on_executor(executor: Executor, prepared, by_scenario, budget, summarize, record, share: bool) -> None:
    futures: dict[Future, None] = {}
    for s_i, tasks in enumerate(by_scenario):
        if not tasks:
            continue
        shared = _share(executor, prepared[s_i])
        # whole cohorts, about GROUP_SIZE candidates per submission
        group: list = []
        for c in form_cohorts(tasks, share, prepared[s_i].setup):
            group.append(c)
            if sum(len(x) for x in group) >= GROUP_SIZE:
                futures[executor.submit(evaluate_group, shared, group, budget, summarize)] = None
                group = []
        if group:
            futures[executor.submit(evaluate_group, shared, group, budget, summarize)] = None
    _collect(futures, lambda f, _: record(f.result()))


def _share(executor: Executor, ps: PreparedScenario):
    """The prepared scenario as the executor's tasks should receive it: scattered once to
    the workers of a Dask executor (its tasks then get a reference), as is otherwise."""
    client = getattr(executor, "_client", None)
    if client is not None and hasattr(client, "scatter"):
        return client.scatter(ps, broadcast=False)
    return ps


def evaluate_group(ps: PreparedScenario, cohorts: list, budget: Budget, summarize: bool) -> list:
    """[(row index, EvaluationResult)] of several cohorts of candidates (lists of tasks) on
    one scenario (the unit of work of an external executor)."""
    try:
        return [row for c in cohorts for row in evaluate_unit(ps, c, budget, summarize)]
    finally:  # a worker's threads outlive the batch: they keep no state arrays
        release_thread_arrays()


def evaluate_unit(ps: PreparedScenario, cohort: list, budget: Budget, summarize: bool = False,
                  timings: dict | None = None) -> list:
    """[(row index, EvaluationResult)] of one cohort of tasks (batch/cohorts.py); a cohort
    of one is ``evaluate_task``."""
    if len(cohort) == 1:
        return [(cohort[0].index, evaluate_task(ps, cohort[0], budget, summarize, timings))]
    return evaluate_cohort(ps, cohort, budget, timings)


def make_task(index: int, cand: Candidate, ps: PreparedScenario, compiled: dict) -> Task:
    """The candidate merged into the scenario's policy settings and compiled (``compiled``
    caches compilations across scenarios with the same base policy)."""
    if cand.error is not None:
        return Task(index, cand.id, error=cand.error)
    try:
        policy = merged_policy(ps.setup.config.policy, cand.settings)
        check_routing_models(policy, ps.setup.served_models)  # (a per-model routing of a model not served here)
        key = repr(policy)
        if key not in compiled:
            compiled[key] = compile_policies(policy)
        return Task(index, cand.id, policy, compiled[key])
    except ConfigError as exc:
        return Task(index, cand.id, error=(INVALID, f"{exc}"))


# ----------------------------------------------------------------------------- the table

# raw metrics every row carries (beside each objective's own metric), when the run has them
KEY_METRICS = ("completed_requests", "rejected_requests", "slo_attainment", "goodput_rps", "responses_per_sec",
               "ttft_p99_ms", "e2e_p99_ms", "itl_p99_ms", "preemption_count", "utilization_imbalance")


def results_table(results: list, cands: Sequence[Candidate], prepared: Sequence[PreparedScenario],
                  summarize: bool = False, include_wall_time: bool = False):
    """One row per (candidate, scenario): candidate, scenario, seed, status, message,
    score, ``objective.<name>`` (normalized, [0, 1]), ``metric.<name>`` (raw; null when
    the run failed), simulated_duration_s, policy_id, workload_id (+ summary_text,
    wall_time_s)."""
    import pyarrow as pa  # deferred: pyarrow

    objective_names = list(dict.fromkeys(o.name for ps in prepared for o in ps.objectives))
    metric_names = list(dict.fromkeys([*KEY_METRICS, *(o.metric for ps in prepared for o in ps.objectives)]))
    n_s = len(prepared)
    rows_c = [cands[i // n_s].id for i in range(len(results))]
    rows_s = [prepared[i % n_s].name for i in range(len(results))]
    cols: dict[str, Any] = {
        "candidate": pa.array(rows_c, pa.string()),
        "scenario": pa.array(rows_s, pa.string()),
        "seed": pa.array([r.seed for r in results], pa.int64()),
        "status": pa.array([r.status for r in results], pa.string()),
        "message": pa.array([r.message for r in results], pa.string()),
        "score": pa.array([float(r.score) for r in results], pa.float64()),
    }
    for name in objective_names:
        cols[f"objective.{name}"] = pa.array([r.objectives.get(name) for r in results], pa.float64())
    for name in metric_names:
        values = [r.metrics.get(name) for r in results]
        if any(v is not None for v in values):
            cols[f"metric.{name}"] = pa.array([None if v is None else float(v) for v in values], pa.float64())
    cols["simulated_duration_s"] = pa.array([float(r.simulated_duration_s) for r in results], pa.float64())
    cols["policy_id"] = pa.array([r.policy_id for r in results], pa.string())
    cols["workload_id"] = pa.array([r.workload_id for r in results], pa.string())
    if summarize:
        cols["summary_text"] = pa.array([r.summary_text for r in results], pa.string())
    if include_wall_time:
        cols["wall_time_s"] = pa.array([r.wall_time_s for r in results], pa.float64())
    return pa.table(cols)
