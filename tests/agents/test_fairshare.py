"""The exact fair share of tool nodes (kernels/agents/fairshare.py, ``run_tool_dags``):
the issue's exact cases, equality with the naive recompute-everything reference
(tests/naive/agents_reference.py) on random DAG workloads in both modes, weights, the
per-resource cap, and M/M/1 processor sharing against 1 / (mu - lambda)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_fast_kernels.agents.fairshare import DYNAMIC, STATIC, run_tool_dags
from naive.agents_reference import reference_run

MODES = [DYNAMIC, STATIC]
S = 1_000_000  # µs per second


def build(requests, n_res):
    """Kernel arrays from ``requests``: a list of (arrival_us, nodes, edges), a node being
    ``{"work": {res: units}, "weight": w}`` and an edge (i, j) = node i before node j
    (indices inside the request).  Returns the argument tuple of run_tool_dags without
    the resources."""
    arrival, req_ptr, pending, weight, load_ptr, load_res, load_work, succ_ptr, succ = [], [0], [], [], [0], [], [], [0], []
    base = 0
    for arr, nodes, edges in requests:
        arrival.append(arr)
        succs = [[] for _ in nodes]
        preds = [0] * len(nodes)
        for i, j in edges:
            succs[i].append(base + j)
            preds[j] += 1
        for k, node in enumerate(nodes):
            pending.append(preds[k])
            weight.append(node.get("weight", 1))
            for r, w in sorted((int(r), w) for r, w in node["work"].items()):  # int: JSON keys are strings
                assert 0 <= r < n_res
                load_res.append(r)
                load_work.append(w)
            load_ptr.append(len(load_res))
            succ.extend(succs[k])
            succ_ptr.append(len(succ))
        base += len(nodes)
        req_ptr.append(base)
    i64 = lambda a: np.array(a, np.int64)  # noqa: E731
    return (i64(arrival), i64(req_ptr), i64(pending), i64(weight), i64(load_ptr), i64(load_res),
            np.array(load_work, np.float64), i64(succ_ptr), i64(succ))


def run(requests, capacity, mode=DYNAMIC, max_members=None):
    cap = np.array(capacity, np.float64)
    mm = np.zeros(len(capacity), np.int64) if max_members is None else np.array(max_members, np.int64)
    start, finish, busy, work, events, status = run_tool_dags(*build(requests, len(capacity)), cap, mm, mode)
    assert status == 0
    return start, finish, busy, work


def both(requests, capacity, mode=DYNAMIC, max_members=None):
    """The kernel's (start, finish, busy, work done), asserted equal to the reference's."""
    out = run(requests, capacity, mode, max_members)
    mm = [0] * len(capacity) if max_members is None else max_members
    ref = reference_run(*build(requests, len(capacity)), capacity, mm, mode)
    assert [list(map(int, out[0])), list(map(int, out[1])), list(map(int, out[2]))] == [list(ref[0]), list(ref[1]), list(ref[2])]
    assert list(out[3]) == ref[3]
    return out


def tool(**work):
    return {"work": {int(k[1:]): v for k, v in work.items()}}


@pytest.mark.parametrize("mode", MODES)
def test_a_tool_alone_takes_work_over_capacity(mode):
    _, finish, busy, work = both([(7, [tool(r0=5.0)], [])], [2.0], mode)
    assert finish[0] == 7 + 2_500_000
    assert busy[0] == 2_500_000 and work[0] == 5.0


@pytest.mark.parametrize("mode", MODES)
def test_two_identical_tools_take_twice_the_solo_time(mode):
    _, finish, _, _ = both([(0, [tool(r0=3.0)], []), (0, [tool(r0=3.0)], [])], [1.5], mode)
    assert list(finish) == [4 * S, 4 * S]


def test_the_bottleneck_resource_decides():
    # cpu: 1 unit at 1/s = 1 s; net: 10 units at 2/s = 5 s
    _, finish, busy, _ = both([(0, [tool(r0=1.0, r1=10.0)], [])], [1.0, 2.0])
    assert finish[0] == 5 * S and list(busy) == [S, 5 * S]


@pytest.mark.parametrize("mode", MODES)
def test_a_chain_of_two_adds_up(mode):
    start, finish, _, _ = both([(0, [tool(r0=1.0), tool(r1=4.0)], [(0, 1)])], [1.0, 2.0], mode)
    assert list(start) == [0, S] and list(finish) == [S, 3 * S]


@pytest.mark.parametrize("mode", MODES)
def test_a_join_starts_at_the_later_predecessor(mode):
    start, finish, _, _ = both([(0, [tool(r0=1.0), tool(r1=3.0), tool(r0=1.0)], [(0, 2), (1, 2)])], [1.0, 1.0], mode)
    assert list(finish[:2]) == [S, 3 * S]
    assert start[2] == 3 * S and finish[2] == 4 * S


def test_a_50_node_chain():
    nodes = [tool(r0=0.25) for _ in range(50)]
    start, finish, _, _ = both([(0, nodes, [(k, k + 1) for k in range(49)])], [2.5])
    assert list(start) == [k * 100_000 for k in range(50)]
    assert list(finish) == [(k + 1) * 100_000 for k in range(50)]


@pytest.mark.parametrize("mode", MODES)
def test_1500_tools_at_once_share_one_resource(mode):
    start, finish, busy, _ = run([(0, [tool(r0=1.0)], []) for _ in range(1500)], [1.0], mode)
    assert (start == 0).all() and (finish == 1500 * S).all() and busy[0] == 1500 * S


def test_1200_tools_of_two_sizes_finish_in_processor_sharing_order():
    # 600 of work 1 and 600 of work 3 on capacity 1: the small ones end when each tool
    # has done 1 unit (1200 s), the large ones 600 x 2 units later (2400 s)
    _, finish, _, _ = run([(0, [tool(r0=1.0 + 2.0 * (k % 2))], []) for k in range(1200)], [1.0])
    assert (finish[0::2] == 1200 * S).all() and (finish[1::2] == 2400 * S).all()


def test_static_mode_keeps_a_node_on_its_finished_resources():
    # A: cpu 1, net 10; B: cpu 3.  dynamic: A leaves cpu at 2 s, B alone then: 4 s.
    # static: A holds its cpu share until its net work ends (10 s): B at 1/2 the whole time: 6 s
    reqs = [(0, [tool(r0=1.0, r1=10.0)], []), (0, [tool(r0=3.0)], [])]
    _, dyn, dyn_busy, _ = both(reqs, [1.0, 1.0], DYNAMIC)
    _, sta, sta_busy, _ = both(reqs, [1.0, 1.0], STATIC)
    assert list(dyn) == [10 * S, 4 * S] and list(sta) == [10 * S, 6 * S]
    assert dyn_busy[0] == 4 * S and sta_busy[0] == 10 * S


def test_weights_split_the_capacity():
    # weights 1 and 3 on capacity 1: the heavy one runs at 3/4 and ends at 4/3 s (rounded up
    # to the µs); the light one has 2/3 unit left then, alone: total work 2 -> 2 s
    heavy = {"work": {0: 1.0}, "weight": 3}
    _, finish, _, _ = both([(0, [tool(r0=1.0)], []), (0, [heavy], [])], [1.0])
    assert finish[1] == 1_333_334
    assert abs(int(finish[0]) - 2 * S) <= 1


@pytest.mark.parametrize("mode", MODES)
def test_a_cap_queues_the_rest_in_order(mode):
    # cap 2 on capacity 1: tools 0 and 1 run at 1/2 (2 s), then 2 and 3
    start, finish, busy, _ = both([(0, [tool(r0=1.0)], []) for _ in range(4)], [1.0], mode, max_members=[2])
    assert list(start) == [0] * 4 and list(finish) == [2 * S, 2 * S, 4 * S, 4 * S] and busy[0] == 4 * S


def test_a_node_without_work_passes_through():
    start, finish, _, _ = both([(5, [tool(), tool(r0=0.0), tool(r0=1.0)], [(0, 1), (1, 2)])], [1.0])
    assert list(start) == [5, 5, 5] and list(finish) == [5, 5, 5 + S]


@pytest.mark.parametrize("mode", MODES)
def test_a_join_at_the_instant_of_the_last_leave_does_not_depend_on_order(mode):
    # a and b leave cpu at the same µs at which c (a's successor) joins it: the clock must
    # not restart in between (it would if c joined after the last leave, not before)
    a = {"work": {0: 1.0}, "weight": 2}
    b = {"work": {0: 1.0, 1: 1e-7}, "weight": 2}
    c = {"work": {0: 0.1, 1: 0.1}, "weight": 2}
    for order in ([(0, [a, c], [(0, 1)]), (0, [b], [])], [(0, [b], []), (0, [a, c], [(0, 1)])]):
        start, finish, _, _ = both(order, [1000.0, 1000.0], mode, max_members=[0, 2])
        c_row = 1 if order[0][1][0] is a else 2
        assert start[c_row] == 2000 and finish[c_row] - start[c_row] in (100, 101)


# ----------------------------------------------------------------------------- random DAGs vs the reference


@st.composite
def workloads(draw):
    n_res = draw(st.integers(1, 3))
    capacity = [draw(st.sampled_from([1.0, 3.0, 0.7, 1000.0, 12.5])) for _ in range(n_res)]
    caps = [draw(st.sampled_from([0, 0, 1, 2])) for _ in range(n_res)]
    work = st.one_of(st.sampled_from([0.0, 1.0, 2.0, 0.5, 1e-9]), st.floats(0.001, 20.0))
    requests = []
    for _ in range(draw(st.integers(1, 8))):
        arrival = draw(st.sampled_from([0, 0, 1, 500_000, 1_000_000, 1_234_567, 3_000_000]))
        k = draw(st.integers(1, 5))
        nodes = []
        for _ in range(k):
            loaded = draw(st.sets(st.integers(0, n_res - 1), max_size=n_res))
            nodes.append({"work": {r: draw(work) for r in sorted(loaded)}, "weight": draw(st.integers(1, 3))})
        edges = [(i, j) for j in range(k) for i in range(j) if draw(st.booleans())]
        requests.append((arrival, nodes, edges))
    requests.sort(key=lambda q: q[0])
    return requests, capacity, caps


@settings(max_examples=60, deadline=None)
@given(workloads(), st.sampled_from(MODES))
def test_random_dags_equal_the_naive_reference(case, mode):
    requests, capacity, caps = case
    _, finish, _, _ = both(requests, capacity, mode, caps)
    assert (finish >= 0).all()  # every node of an acyclic workload finishes


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(workloads(), st.sampled_from(MODES))
def test_random_dags_equal_the_naive_reference_breadth(case, mode):
    requests, capacity, caps = case
    both(requests, capacity, mode, caps)


# ----------------------------------------------------------------------------- M/M/1


def mm1_mean_latency_s(rho, n, seed):
    """Mean sojourn of n Poisson arrivals (rate lambda = rho / s) of single-tool requests
    with exponential work (mean 1 unit) on capacity 1 unit/s: processor sharing."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(np.round(rng.exponential(S / rho, n))).astype(np.int64)
    work = rng.exponential(1.0, n)
    ar = np.arange(n + 1, dtype=np.int64)
    start, finish, _, _, _, status = run_tool_dags(arrival, ar, np.zeros(n, np.int64), np.ones(n, np.int64), ar,
                                                   np.zeros(n, np.int64), work, np.zeros(n + 1, np.int64),
                                                   np.zeros(0, np.int64), np.array([1.0]), np.zeros(1, np.int64),
                                                   DYNAMIC)
    assert status == 0 and (start == arrival).all()
    return float(np.mean(finish - arrival)) / S


def test_mm1_processor_sharing_mean_latency():
    assert mm1_mean_latency_s(0.5, 100_000, 1) == pytest.approx(1 / (1 - 0.5), rel=0.02)


@pytest.mark.slow
@pytest.mark.parametrize("rho, n", [(0.5, 1_000_000), (0.8, 2_000_000)])
def test_mm1_processor_sharing_mean_latency_breadth(rho, n):
    assert mm1_mean_latency_s(rho, n, 7) == pytest.approx(1 / (1 - rho), rel=0.02)


# ----------------------------------------------------------------------------- interpreted kernels


_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[2])
from test_fairshare import run
out = [[list(map(int, a)) for a in run(*c)[:3]] for c in json.loads(sys.argv[1])]
print(json.dumps(out))
"""


@pytest.mark.slow  # a subprocess, interpreted kernels
def test_interpreted_kernel_matches_compiled():
    cases = [([(0, [tool(r0=1.0, r1=2.5), tool(r0=0.3)], [(0, 1)]), (3, [tool(r1=1.0)], [])], [1.0, 2.0], m, [0, 1])
             for m in (0, 1)]
    compiled = [[list(map(int, a)) for a in run(*c)[:3]] for c in cases]
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    here = os.path.dirname(__file__)
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(cases), here], env=env, capture_output=True,
                          text=True, timeout=300, cwd=os.path.dirname(here))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == compiled
