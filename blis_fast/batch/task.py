"""One evaluation of ``evaluate_many`` (``batch/evaluate.py``) and of a cohort
(``batch/cohorts.py``): a ``Task`` (a candidate's compiled policy), ``evaluate_task``
(one candidate on one prepared scenario -> EvaluationResult, never raising), the rows of
evaluations that could not run, and each thread's reused state arrays."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from blis_fast.batch.budget import Budget, BudgetExceeded, run_within
from blis_fast.batch.scenarios import PreparedScenario
from blis_fast.config import memory
from blis_fast.errors import ConfigError, SimulationError
from blis_fast.results.evaluation import EvaluationResult, policy_id
from blis_fast.run.disaggregation import routing_group_rows
from blis_fast.run.session import RunSession
from blis_fast.run.tables import StateArrays

BUDGET_EXCEEDED = "budget_exceeded"
SIMULATION_FAILED = "simulation_error"  # the kernel stopped with an error status
RUN_REFUSED = "config_error"  # e.g. the candidate's tables exceed the scenario's memory budget
INTERNAL = "internal_error"  # a bug of ours: reported in the row, never raised


@dataclass(frozen=True, eq=False)
class Task:
    """One evaluation: a candidate's merged policy, compiled (or the error of doing so)."""

    index: int  # position of the row
    candidate_id: str
    policy: Any = None  # PolicyConfig
    compiled: Any = None  # CompiledPolicies
    error: tuple[str, str] | None = None


def evaluate_task(ps: PreparedScenario, task: Task, budget: Budget, summarize: bool = False,
                  timings: dict | None = None):
    """One candidate on one scenario -> EvaluationResult (never raises).  ``timings``
    (optional) accumulates wall seconds per phase: ``build_s`` (the state), ``kernel_s``
    (the event loop), ``judge_s`` (metrics, objectives, summary), and ``runs``, the runs
    judged."""
    t0 = time.perf_counter()
    deadline = time.monotonic() + budget.max_wall_s if budget.max_wall_s is not None else None
    cfg = replace(ps.setup.config, policy=task.policy)
    setup = replace(ps.setup, config=cfg)
    try:
        with memory.memory_budget(cfg.simulation.max_memory):
            arrays = thread_arrays()
            session = RunSession(setup, ps.workload, task.compiled, scenario=ps.tables, arrays=arrays).prepare()
            t_run = time.perf_counter()
            run_within(session, budget, deadline)
            arrays.keep("step_log", session.state.step_log)  # (grown or not: the next run starts with it)
            t_judge = time.perf_counter()
            result = session.finish(wall_time_s=t_judge - t_run)
            ev = result.evaluate(objectives=ps.objectives, summarize=summarize)
            if timings is not None:
                for key, dt in (("build_s", t_run - t0), ("kernel_s", t_judge - t_run),
                                ("judge_s", time.perf_counter() - t_judge), ("runs", 1)):
                    timings[key] = timings.get(key, 0.0) + dt
    except Exception as exc:  # noqa: BLE001 -- one broken evaluation must not sink the batch
        return failed(ps, task, *failure(exc), t0)
    ev.wall_time_s = time.perf_counter() - t0
    return ev


def failure(exc: Exception) -> tuple[str, str]:
    """(status, message) of the row of an evaluation that raised ``exc``."""
    if isinstance(exc, BudgetExceeded):
        return BUDGET_EXCEEDED, str(exc)
    if isinstance(exc, SimulationError):
        return SIMULATION_FAILED, str(exc)
    if isinstance(exc, ConfigError):
        return RUN_REFUSED, str(exc)
    if isinstance(exc, MemoryError):
        return RUN_REFUSED, "the machine ran out of memory; lower simulation.max_memory so that such runs are " \
                            "refused up front"
    return INTERNAL, f"{type(exc).__name__}: {exc} (a blis-fast bug; please report)"


_ARRAYS = threading.local()


def thread_arrays():
    """This thread's ``StateArrays`` (reused from one evaluation to the next): an
    evaluation's state lives only inside ``evaluate_task`` (the EvaluationResult keeps
    numbers), so each thread can build the next state in the last one's arrays."""
    arrays = getattr(_ARRAYS, "arrays", None)
    if arrays is None:
        arrays = _ARRAYS.arrays = StateArrays(reuse=True)
    return arrays


def release_thread_arrays() -> None:
    """Let this thread's kept arrays go (at the end of a batch: a state's worth of memory)."""
    _ARRAYS.__dict__.pop("arrays", None)


def failed(ps: PreparedScenario, task: Task, status: str, message: str, t0: float | None = None):
    """The row of an evaluation that could not run: score 0, every objective 0."""
    pid = ""
    if task.compiled is not None:
        c = task.compiled
        routing = routing_group_rows(c, ps.setup) if c.per_model or c.prefill_routing is not None else (None, None)
        flow = c.flow_rows(ps.setup.served_models) if c.flow_per_model else (None, None)
        pid = policy_id(task.compiled.kinds, task.compiled.params, task.policy.prefix_index_capacity, *routing,
                        task.policy.pd_decider, task.policy.pd_threshold, *flow)
    ev = EvaluationResult.failed(status, " ".join(str(message).split()), policy_id=pid,
                                 workload_id=ps.workload_id, seed=ps.seed,
                                 wall_time_s=None if t0 is None else time.perf_counter() - t0)
    ev.objectives = {o.name: 0.0 for o in ps.objectives}
    return ev
