"""Cohorts (blis_fast/batch/cohorts.py): candidates that differ only in routing parameters
run as one state while they route alike.  Every row equals the row of the candidate's
own run, byte for byte -- whether the cohort splits or not, within budgets, when a
split's copy does not fit the memory budget, on threads and on an executor; and a split
state continued with one side's members is, array for array, that side's own run."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest

from blis_fast.batch import Budget
from blis_fast.batch.candidates import load_candidate
from blis_fast.batch.cohorts import MAX_MEMBERS, cohort_key, form_cohorts
from blis_fast.batch.evaluate import evaluate_prepared, make_task
from blis_fast.batch.scenarios import Scenario, prepare
from blis_fast.config.sim import build_config
from blis_fast.errors import ConfigError
from blis_fast.run import run_to_end
from blis_fast.run.tables import build_state
from blis_fast_kernels.schema import PolicySlot, Status

SCENARIO = {"num_instances": 3, "workload": "chatbot", "rate": 150, "num_requests": 300}
OBJECTIVES = "slo_attainment:max,ttft_p99_ms:min:300,e2e_p99_ms:min"


def weighted(**w) -> dict:
    return {"routing": {"type": "weighted", "params": {"scorers": {k.replace("_", "-"): v for k, v in w.items()}}}}


# "qd" and "qd2" always decide alike (the same weights, scaled); "kv" and "mix" part from them
CANDIDATES = {
    "qd": weighted(queue_depth=1.0),
    "qd2": weighted(queue_depth=2.0),
    "kv": weighted(kv_utilization=1.0),
    "mix": weighted(queue_depth=1.0, kv_utilization=2.0, load_balance=0.5, prefix_affinity=3.0),
    "pa": weighted(prefix_affinity=5.0, queue_depth=0.1),
    "lb": weighted(load_balance=1.0),
}


@pytest.fixture(scope="module")
def scenario():
    return prepare(Scenario("chat", build_config({}, SCENARIO)), OBJECTIVES)


def cands(names=tuple(CANDIDATES)):
    return [load_candidate(CANDIDATES[n], n) for n in names]


def rows(results) -> list:
    return [r.to_dict() for r in results]


def count_copies(monkeypatch) -> list:
    from blis_fast.run.session import RunSession

    copies = [0]
    copy = RunSession.copy

    def counted(session):
        copies[0] += 1
        return copy(session)
    monkeypatch.setattr(RunSession, "copy", counted)  # the copies a cohort makes at its splits
    return copies


def test_a_cohort_gives_each_member_the_row_of_its_own_run(scenario, monkeypatch):
    copies = count_copies(monkeypatch)
    alone = evaluate_prepared(cands(), [scenario], Budget(max_wall_s=None), 1, cohorts=False)
    assert copies[0] == 0
    together = evaluate_prepared(cands(), [scenario], Budget(max_wall_s=None), 1, cohorts=True)
    assert rows(together) == rows(alone)
    assert copies[0] >= 2  # it did split (at least three distinct runs) ...
    distinct = {tuple(sorted(r.metrics.items())) for r in together}
    assert 3 <= len(distinct) < len(CANDIDATES)  # ... and some members shared a run
    assert together[0].metrics == together[1].metrics and together[0].policy_id != together[1].policy_id
    assert len({r.policy_id for r in together}) == len(CANDIDATES)
    # on threads, and on an executor (whole cohorts per submission)
    assert rows(evaluate_prepared(cands(), [scenario], Budget(max_wall_s=None), 2)) == rows(alone)
    with ThreadPoolExecutor(2) as pool:
        assert rows(evaluate_prepared(cands(), [scenario], Budget(max_wall_s=None), executor=pool)) == rows(alone)


def test_budgets_end_each_member_where_its_own_run_would(scenario):
    for budget in (Budget(max_events=1500), Budget(max_simulated_s=1.5), Budget(max_events=10**6)):
        alone = evaluate_prepared(cands(), [scenario], budget, 1, cohorts=False)
        assert rows(evaluate_prepared(cands(), [scenario], budget, 1)) == rows(alone)
    statuses = {r.status for r in evaluate_prepared(cands(), [scenario], Budget(max_events=1500), 1)}
    assert statuses == {"budget_exceeded"}


def test_a_split_copy_over_the_memory_budget_runs_its_members_alone(scenario, monkeypatch):
    from blis_fast.config import memory

    alone = evaluate_prepared(cands(), [scenario], Budget(max_wall_s=None), 1, cohorts=False)
    charge = memory.MemoryBudget.charge

    def no_copies(self, nbytes, what, hint=""):
        if "cohort" in what:
            raise ConfigError("simulation.max_memory", "no room for a copy")
        return charge(self, nbytes, what, hint)
    monkeypatch.setattr(memory.MemoryBudget, "charge", no_copies)
    assert rows(evaluate_prepared(cands(), [scenario], Budget(max_wall_s=None), 1)) == rows(alone)


def test_a_split_state_continued_by_one_side_is_that_sides_own_run(scenario):
    a, b = (make_task(i, c, scenario, {}) for i, c in enumerate(cands(["qd", "kv"])))

    def own_run(task):
        setup = replace(scenario.setup, config=replace(scenario.setup.config, policy=task.policy))
        return run_to_end(build_state(setup, scenario.workload, task.compiled))

    def with_members(st, *members):
        return st._replace(cohort=np.array([m.compiled.params[PolicySlot.ROUTING] for m in members]),
                           cohort_choice=np.zeros(len(members), np.int64),
                           policy_param=members[0].compiled.params.copy(),
                           routing_param=np.tile(members[0].compiled.params[PolicySlot.ROUTING],
                                                 (st.routing_param.shape[0], 1)))

    setup = replace(scenario.setup, config=replace(scenario.setup.config, policy=a.policy))
    st = with_members(build_state(setup, scenario.workload, a.compiled), a, b)
    st = run_to_end(st)
    lp = st.loop[0]
    assert int(lp["status"]) == Status.COHORT_SPLIT
    r = int(lp["error_request"])
    assert st.cohort_choice[0] != st.cohort_choice[1] and st.reqs[r]["instance"] == -1  # not routed yet
    assert int(lp["heap_size"]) >= 1 and r in st.heap["request"][: int(lp["heap_size"])].tolist()
    from blis_fast_kernels.schema.state import copy_state

    for task in (b, a):
        branch = with_members(copy_state(st), task)
        branch.loop["status"] = Status.OK
        branch.loop["error_request"] = -1
        got, want = run_to_end(branch), own_run(task)
        for name in got._fields:
            if name in ("cohort", "cohort_choice"):
                continue
            x, y = getattr(got, name), getattr(want, name)
            if name in ("step_log", "irr_log"):  # (grown logs: compare the rows written)
                n = int(got.loop[0]["steps"] if name == "step_log" else got.loop[0]["irregular_records"])
                x, y = x[:n], y[:n]
            assert x.tobytes() == y.tobytes(), name


def test_cohort_keys_group_only_candidates_alike_but_for_routing_parameters(scenario):
    tasks = [make_task(i, c, scenario, {}) for i, c in enumerate(cands())]
    # a prefix-affinity weight makes the router keep its prefix index: another state
    with_index = [t for t in tasks if t.compiled.uses_prefix_index]
    assert [t.candidate_id for t in with_index] == ["mix", "pa"]
    assert len({cohort_key(t) for t in tasks}) == 2
    others = [load_candidate(src, n) for n, src in (("sjf", {**CANDIDATES["qd"], "scheduler": "sjf"}),
                                                    ("ll", {"routing": "least-loaded"}),
                                                    ("cap", {**CANDIDATES["qd"], "prefix_index_capacity": 7}),
                                                    ("bad", "routing: [x\n"))]
    more = [make_task(len(tasks) + i, c, scenario, {}) for i, c in enumerate(others)]
    keys = [cohort_key(t) for t in more]
    assert keys[-1] is None  # an error row runs alone
    assert len(set(keys[:-1]) | {cohort_key(tasks[0])}) == 4
    groups = form_cohorts(tasks + more)
    assert [[t.candidate_id for t in g] for g in groups] == [["qd", "qd2", "kv", "lb"], ["mix", "pa"], ["sjf"], ["ll"],
                                                             ["cap"], ["bad"]]
    assert [len(g) for g in form_cohorts(tasks, enabled=False)] == [1] * len(tasks)
    many = [make_task(i, cands(["qd"])[0], scenario, {}) for i in range(MAX_MEMBERS + 3)]
    assert [len(g) for g in form_cohorts(many)] == [MAX_MEMBERS, 3]


def test_candidates_with_routing_per_model_run_alone(scenario):
    """A candidate that routes its model by ``routing.per_model`` forms no cohort (a
    cohort's routing rows are one per member, the same for every model): two candidates
    that share the per-model routing but differ in the default's weights -- a cohort key
    made of the default would join them -- each get the row of their own run, which is
    the per-model routing's."""
    model = scenario.setup.served_models[0]
    per_model = {model: {"type": "weighted", "scorers": {"kv-utilization": 1.0}}}
    sources = {"pm-qd": weighted(queue_depth=1.0), "pm-lb": weighted(load_balance=1.0)}
    for bundle in sources.values():
        bundle["routing"]["params"]["per_model"] = per_model
    per_model_cands = [load_candidate(b, n) for n, b in sources.items()]
    assert all(cohort_key(make_task(0, c, scenario, {})) is None for c in per_model_cands)
    plain = cands(("qd", "kv", "lb"))
    mixed = per_model_cands + plain
    assert [len(g) for g in form_cohorts([make_task(k, c, scenario, {}) for k, c in enumerate(mixed)])] == [1, 1, 3]
    together = evaluate_prepared(mixed, [scenario], Budget(max_wall_s=None), 1, cohorts=True)
    alone = evaluate_prepared(mixed, [scenario], Budget(max_wall_s=None), 1, cohorts=False)
    assert rows(together) == rows(alone)
    kv = together[3]
    assert together[0].metrics == together[1].metrics == kv.metrics
    assert len({together[0].policy_id, together[1].policy_id, kv.policy_id}) == 3


def test_a_candidate_routing_an_unserved_model_is_an_invalid_row(scenario):
    bad = load_candidate({"routing": {"per_model": {"nobody/unknown": "least-loaded"}}}, "bad")
    [row] = evaluate_prepared([bad], [scenario], Budget(max_wall_s=None), 1)
    assert row.status == "invalid_policy" and "no deployment serves" in row.message
    assert scenario.setup.served_models[0] in row.message
