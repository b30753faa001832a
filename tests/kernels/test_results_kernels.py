"""The judge's kernels (kernels/results/) against straightforward numpy or quadratic
counts, and the cohort split of the event loop (engine/handlers.py on_routing,
engine/loop.py): the routing event goes back unprocessed, each member's choice is kept."""

from __future__ import annotations

import numpy as np
import pytest

from blis_fast_kernels.schema import PolicySlot, RouteWeight, Status
from naive.sort import quadratic_inversion_pairs


def test_gather_words_copies_the_chosen_words_of_every_row():
    from blis_fast_kernels.native import gather_words

    rng = np.random.default_rng(3)
    rows = rng.integers(0, 2**62, (57, 9)).astype(np.uint64)
    words = np.array([8, 0, 3, 3], np.int64)
    out = np.zeros((4, 57), np.uint64)
    gather_words(rows, words, out)
    assert np.array_equal(out, rows[:, words].T)


@pytest.mark.parametrize("seed", range(10))
def test_count_inversions_matches_quadratic_per_group(seed):
    from blis_fast_kernels.native import count_inversions

    rng = np.random.default_rng(seed)

    def count(values, groups, factor):  # groups: contiguous labels in element order
        starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]]) if len(groups) else np.zeros(0, np.int64)
        group_start = np.repeat(starts, np.diff(np.r_[starts, len(groups)])).astype(np.int64)
        return int(count_inversions(values, group_start, np.argsort(values).astype(np.int64), factor))

    def want(values, groups, factor):
        return sum(quadratic_inversion_pairs(values[groups == g].tolist(), factor) for g in np.unique(groups))

    v = rng.choice([0.0, 1.0, 2.0, 3.0, 4.5, 9.0, 1e6], int(rng.integers(0, 120)))
    groups = np.sort(rng.integers(0, 4, len(v)))
    for factor in (0.0, 0.5, 1.0, 2.0, 3.0):
        assert count(v, np.zeros(len(v), np.int64), factor) == quadratic_inversion_pairs(v.tolist(), factor)
        assert count(v, groups, factor) == want(v, groups, factor)
    n = int(rng.integers(0, 130))  # negative values and ties too
    k1 = (rng.choice([-2.5, -1.0, 0.0, 0.5, 1.0, 3.0, 1e9], n) * rng.choice([1, 1, 7], n)).astype(np.float64)
    for factor in (0.5, 1.0, 2.0):
        assert count(k1[:n], np.zeros(n, np.int64), factor) == quadratic_inversion_pairs(k1[:n].tolist(), factor)
    assert count(np.zeros(0), np.zeros(0, np.int64), 2.0) == 0


def test_steps_grouped_by_instance_and_run_cover_equal_the_numpy_formulas():
    from blis_fast_kernels.native import group_steps, run_cover

    rng = np.random.default_rng(5)
    for n_inst, n in ((1, 0), (1, 7), (4, 300), (9, 1000)):
        inst = rng.integers(0, n_inst, n).astype(np.int64)
        position, starts = group_steps(inst, n_inst)
        order = np.argsort(inst, kind="stable")
        assert np.array_equal(order[position], np.arange(n))  # position is the inverse of the stable order
        assert np.array_equal(starts, np.concatenate(([0], np.cumsum(np.bincount(inst, minlength=n_inst)))))
        if n == 0:
            continue
        # runs: (first, last) step pairs of one instance, first <= last
        first, last = [], []
        for _ in range(50):
            i = int(rng.integers(0, n_inst))
            steps = np.flatnonzero(inst == i)
            if len(steps):
                a, b = sorted(rng.choice(steps, 2))
                first.append(a)
                last.append(b)
        first, last = np.array(first, np.int64), np.array(last, np.int64)
        want = np.cumsum(np.bincount(position[first] + 1, minlength=n + 1)
                         - np.bincount(position[last] + 1, minlength=n + 1))[:n]
        assert np.array_equal(run_cover(position, first, last), want)


def test_a_cohort_that_routes_differently_stops_before_the_decision():
    from blis_fast.run import build_state, build_workload, resolve, run_to_end
    from blis_fast.config.sim import build_config

    cfg = build_config({}, {"num_instances": 3, "workload": "chatbot", "rate": 150, "num_requests": 60,
                            "routing_policy": "weighted", "routing_scorers": "queue-depth:1"})
    setup, workload = resolve(cfg), build_workload(cfg)

    def state(rows):
        return build_state(setup, workload)._replace(cohort=rows, cohort_choice=np.zeros(len(rows), np.int64))

    lone = run_to_end(build_state(setup, workload))
    rows = np.zeros((2, lone.policy_param.shape[1]))
    rows[0] = lone.policy_param[PolicySlot.ROUTING]
    rows[1, RouteWeight.KV_UTILIZATION] = 1.0  # another view of the load: they part at some request
    done = run_to_end(state(np.repeat(rows[:1], 2, axis=0)))  # members that always agree: the run of either
    assert int(done.loop[0]["status"]) == Status.OK
    assert done.reqs.tobytes() == lone.reqs.tobytes()
    split = run_to_end(state(rows))
    lp = split.loop[0]
    assert int(lp["status"]) == Status.COHORT_SPLIT
    r = int(lp["error_request"])
    assert split.cohort_choice[0] != split.cohort_choice[1] and split.reqs[r]["instance"] == -1
    heap = split.heap[: int(lp["heap_size"])]
    assert r in heap["request"].tolist()  # the routing event is back, as it was
    assert int(lp["events"]) < int(lone.loop[0]["events"])
