"""Cohorts: candidates that differ only in their routing parameters, simulated as one run
for as long as they route alike.

A search proposes many candidates that differ in a few weights, and on a given scenario
many of them pick the same instance for every request: their runs are identical, byte
for byte (on the bench's 10K x 4 scenario, 52 weighted candidates make 12 distinct runs).
A cohort runs once with every member's routing parameters in the state
(``State.cohort``); at each routing decision the kernel asks every member
(``kernels/engine/handlers.py`` ``on_routing``) and, when they disagree, stops before
deciding (``Status.COHORT_SPLIT``).  The cohort then splits: a copy of the state for each
distinct choice, each going on with the members that made it.  Every run that ends is
judged once, and its members' rows differ only in their policy ids.

Nothing is approximated: a member's row equals the row of its own run (tests/batch/
test_cohorts.py), and its budget counts the events, simulated time and wall time of its
own path through the splits.  Members share everything but the routing parameters (the
``cohort_key``): the routing kind, every other policy, the settings a policy implies.
A candidate that sets routing or flow control per model (``policy.routing_per_model``,
``flow_per_model``) runs alone, and so
does every candidate of a scenario with prefill/decode disaggregation.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from blis_fast_kernels.schema import PolicySlot, Status
from blis_fast.batch.budget import BudgetExceeded, run_within
from blis_fast.config import memory
from blis_fast.errors import ConfigError, SimulationError
from blis_fast.batch.task import evaluate_task, failed, failure, thread_arrays
from blis_fast.config.disaggregation import any_disaggregated
from blis_fast.run.session import RunSession

# at most this many candidates per cohort: each split keeps a copy of the state for every
# branch not yet run, so a cohort's memory is up to ``MAX_MEMBERS`` states
MAX_MEMBERS = 16


def cohort_key(task):
    """What a task shares with the members of its cohort: its compiled policy but the
    routing parameters, and every other setting of its policy; None for a task that runs
    alone: an error row, or a policy that routes some model by its own routing (the
    members' rows in ``State.cohort`` are one routing row each, the same for every model)."""
    if task.compiled is None or task.policy is None or task.compiled.per_model or task.compiled.flow_per_model:
        return None
    params = task.compiled.params.copy()
    params[PolicySlot.ROUTING] = 0.0
    return (task.compiled.kinds.tobytes(), params.tobytes(), bool(task.compiled.uses_prefix_index),
            repr(replace(task.policy, routing_scorers=None)))


def form_cohorts(tasks: list, enabled: bool = True, setup=None) -> list[list]:
    """The tasks of one scenario (``setup``) as cohorts (lists of tasks, in order of first
    appearance, at most MAX_MEMBERS each); every task alone when not ``enabled`` -- or when
    the scenario disaggregates prefill and decode: a prefill leg's routing (by its model's
    routing parameters) is not asked of the members."""
    if not enabled or (setup is not None and any_disaggregated(setup.deployments)):
        return [[t] for t in tasks]
    groups: dict = {}
    out: list[list] = []
    for t in tasks:
        key = cohort_key(t)
        group = groups.get(key) if key is not None else None
        if group is None or len(group) >= MAX_MEMBERS:
            group = [t]
            out.append(group)
            if key is not None:
                groups[key] = group
        else:
            group.append(t)
    return out


def _as_cohort(session: RunSession, members: list) -> RunSession:
    """``session``'s state set up for ``members``: their routing rows, member 0's parameters
    as the state's own (a copy: a compiled policy's arrays are shared by its tasks)."""
    rows = np.array([m.compiled.params[PolicySlot.ROUTING] for m in members], np.float64)
    n_models = session.state.routing_param.shape[0]  # (members set no routing per model: one row for all)
    session.state = session.state._replace(cohort=rows, cohort_choice=np.zeros(len(members), np.int64),
                                           policy_param=np.array(members[0].compiled.params, np.float64),
                                           routing_param=np.tile(rows[0], (n_models, 1)))
    return session


def evaluate_cohort(ps, members: list, budget, timings: dict | None = None) -> list:
    """[(row index, EvaluationResult)] of the members of one cohort on a prepared scenario
    (never raises).  ``timings`` as ``evaluate_task``'s, summed over the cohort's branches."""
    from blis_fast.results.evaluation import policy_id  # deferred: blis_fast_kernels.native

    head = members[0]
    setup = replace(ps.setup, config=replace(ps.setup.config, policy=head.policy))
    out: list = []
    alone: list = []  # members left to run by themselves (their branch's copy did not fit the memory budget)
    timings = {} if timings is None else timings

    def add(key: str, seconds: float) -> None:
        timings[key] = timings.get(key, 0.0) + seconds

    def fail(group, exc, spent):
        for m in group:
            ev = failed(ps, m, *failure(exc))
            ev.wall_time_s = spent
            out.append((m.index, ev))

    t0 = time.perf_counter()
    try:
        with memory.memory_budget(setup.config.simulation.max_memory) as mem:
            arrays = thread_arrays()
            session = RunSession(setup, ps.workload, head.compiled, scenario=ps.tables, arrays=arrays).prepare()
            add("build_s", time.perf_counter() - t0)
            branches = [(session, members, time.perf_counter() - t0)]  # (session, its members, wall s of its path)
            while branches:
                session, group, spent = branches.pop()
                state = _as_cohort(session, group).state
                start = time.perf_counter()
                deadline = None
                if budget.max_wall_s is not None:
                    deadline = time.monotonic() + float(budget.max_wall_s) - spent
                try:
                    state = run_within(session, budget, deadline).state
                except (BudgetExceeded, SimulationError) as exc:  # (this branch's members only)
                    fail(group, exc, spent + time.perf_counter() - start)
                    continue
                t_judge = time.perf_counter()
                add("kernel_s", t_judge - start)
                spent += t_judge - start
                if int(state.loop[0]["status"]) == Status.COHORT_SPLIT:
                    state.loop["status"] = Status.OK
                    state.loop["error_request"] = -1
                    parts: dict = {}
                    for m, choice in zip(group, state.cohort_choice[: len(group)].tolist()):
                        parts.setdefault(choice, []).append(m)
                    first, *others = parts.values()
                    for part in reversed(others):  # a copy each (kept until its turn); the first goes on in this one
                        try:
                            mem.charge(session.state_bytes(), "a copy of a cohort's state at a split")
                        except ConfigError:
                            alone.extend(part)
                            continue
                        branches.append((session.copy(), part, spent))
                    branches.append((session, first, spent))
                    continue
                arrays.keep("step_log", state.step_log)  # (as evaluate_task does)
                ev = session.finish(wall_time_s=t_judge - start).evaluate(objectives=ps.objectives)
                done = time.perf_counter()
                add("judge_s", done - t_judge)
                add("runs", 1)
                for m in group:  # the same run: the same row, but for the policy id
                    own = replace(ev, objectives=dict(ev.objectives), metrics=dict(ev.metrics),
                                  details=[dict(d) for d in ev.details],
                                  counterfactuals=[dict(c) for c in ev.counterfactuals],
                                  policy_id=policy_id(m.compiled.kinds, m.compiled.params,
                                                      m.policy.prefix_index_capacity),
                                  wall_time_s=spent + done - t_judge)
                    out.append((m.index, own))
    except Exception as exc:  # noqa: BLE001 -- e.g. the first state does not fit (nor would any member's)
        fail(_without(members, out, alone), exc, None)
    for m in alone:
        out.append((m.index, evaluate_task(ps, m, budget, timings=timings)))
    return out


def _without(members: list, out: list, alone: list) -> list:
    """The members with no row in ``out`` and not left to run alone."""
    taken = {i for i, _ in out} | {m.index for m in alone}
    return [m for m in members if m.index not in taken]
