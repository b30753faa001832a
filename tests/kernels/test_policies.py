"""Kernel-level tests of the control policies (kernels/policies/): each policy helper
against its literal reference in tests/naive/policies.py on random inputs with many exact
ties -- token-bucket admission, the router snapshot, every routing kind and scorer, request
priority, the wait-queue sort and the preemption victim -- plus "switching policies never
recompiles the event loop".  Template behaviour through ``blis_fast.simulate`` is in
test_policy_behaviour.py; the router's prefix index in test_prefix_index.py."""

from __future__ import annotations

import numpy as np
import pytest

import entry as E
from builders import lengths_workload, seeds
from blis_fast_kernels.schema import (
    INSTANCE_DT,
    N_SNAP,
    POLICY_WIDTH,
    SNAPSHOT_FIELD_NAMES,
    AdmissionKind,
    AdmissionParam,
    PriorityParam,
    RoutingKind,
    SnapField,
    VictimKind,
)
from naive.policies import (
    ROUTING,
    SNAP_FIELDS,
    NaiveSnapshot,
    NaiveTokenBuckets,
    naive_priority,
    naive_queue_order,
    naive_route,
    naive_snapshot_row,
    naive_victim,
)
from states import make_state

ROUTING_KIND = {"round-robin": RoutingKind.ROUND_ROBIN, "least-loaded": RoutingKind.LEAST_LOADED,
                "weighted": RoutingKind.WEIGHTED, "prefix-affinity": RoutingKind.PREFIX_AFFINITY,
                "always-busiest": RoutingKind.ALWAYS_BUSIEST}


def test_names_cover_the_schema():
    assert set(ROUTING_KIND) == set(ROUTING) and sorted(ROUTING_KIND.values()) == sorted(RoutingKind)[:-1]
    assert RoutingKind.EXPRESSION == max(RoutingKind)  # (test_expression_routing_matches_naive)
    assert SNAP_FIELDS == SNAPSHOT_FIELD_NAMES and len(SNAP_FIELDS) == N_SNAP


# ============================================================================ admission


@pytest.mark.parametrize("seed", range(8))
def test_token_bucket_matches_naive(seed):
    rng = np.random.default_rng(seed)
    n_tenants = int(rng.integers(1, 4))
    cap = float(rng.choice([0, 1, 500, 1000, 2500.5]))
    rate = float(rng.choice([0, 1, 1000, 333.3, 1e6]))
    params = np.zeros(POLICY_WIDTH)
    params[AdmissionParam.CAPACITY] = cap
    params[AdmissionParam.REFILL_PER_S] = rate
    tokens = np.full(n_tenants, cap)  # buckets start full (build_state)
    last = np.zeros(n_tenants, np.int64)
    naive = NaiveTokenBuckets(cap, rate)
    now = 0
    admitted = 0
    for _ in range(300):
        now += int(rng.choice([0, 0, 1, 1000, 250_000]))  # many decisions at the same µs
        tenant = int(rng.integers(n_tenants))
        cost = int(rng.choice([0, 1, 100, 600, 1000, 3000]))
        got = bool(E.admit(AdmissionKind.TOKEN_BUCKET, params, tokens, last, tenant, cost, now))
        assert got == naive.admit(tenant, cost, now)
        admitted += got
        assert tokens[tenant] == naive.tokens[tenant] and last[tenant] == naive.last[tenant]
    assert 0 < admitted or cap == 0


def test_always_and_reject_all_touch_no_bucket():
    params = np.zeros(POLICY_WIDTH)
    params[AdmissionParam.CAPACITY] = 10
    tokens, last = np.zeros(2), np.zeros(2, np.int64)
    for cost in (0, 5, 10**9):
        assert E.admit(AdmissionKind.ALWAYS, params, tokens, last, 1, cost, 123)
        assert not E.admit(AdmissionKind.REJECT_ALL, params, tokens, last, 1, cost, 123)
    assert not tokens.any() and not last.any()


# ============================================================================ router snapshot


def _random_instances(rng, n_inst):
    inst = np.zeros(n_inst, INSTANCE_DT)
    inst["active"] = rng.random(n_inst) < 0.8
    inst["kv_total"] = rng.choice([4, 10, 100], n_inst)
    inst["kv_offset"] = np.r_[0, np.cumsum(inst["kv_total"])[:-1]]
    _refill_instances(rng, inst)
    return inst


def _refill_instances(rng, inst):
    n = len(inst)
    inst["wq_len"] = rng.integers(0, 4, n)
    inst["batch_len"] = rng.integers(0, 4, n)
    inst["routed_pending"] = rng.integers(0, 3, n)
    inst["kv_allocated"] = [int(rng.integers(0, t + 1)) for t in inst["kv_total"]]
    # blocks ever used = allocated + released (free list); the rest are never used
    inst["kv_virgin_next"] = [int(o + rng.integers(a, t + 1)) for o, a, t in
                              zip(inst["kv_offset"], inst["kv_allocated"], inst["kv_total"])]
    inst["free_len"] = inst["kv_virgin_next"] - inst["kv_offset"] - inst["kv_allocated"]
    inst["prefix_query_tokens"] = rng.choice([0, 16, 100], n)
    inst["prefix_hit_tokens"] = [int(rng.integers(0, q + 1)) for q in inst["prefix_query_tokens"]]


@pytest.mark.parametrize("seed", range(6))
def test_refresh_snapshot_matches_naive(seed):
    rng = np.random.default_rng(seed)
    n_inst = int(rng.integers(1, 6))
    inst = _random_instances(rng, n_inst)
    intervals = rng.choice([0, 0, 1, 1000, 50_000], N_SNAP).astype(np.float64)
    snap = np.zeros((n_inst, N_SNAP))
    refreshed = np.full(N_SNAP, -1, np.int64)
    naive = NaiveSnapshot(n_inst, intervals.tolist())
    now = 0
    for _ in range(60):
        now += int(rng.choice([0, 1, 999, 1000, 40_000]))
        _refill_instances(rng, inst)  # the instances moved on since the last decision
        E.refresh_snapshot(inst, snap, refreshed, intervals, now)
        naive.refresh(inst, now)
        for i in range(n_inst):
            assert snap[i].tolist() == [naive.view[i][f] for f in SNAP_FIELDS]
        assert refreshed.tolist() == [naive.refreshed.get(f, -1) for f in SNAP_FIELDS]
    # live fields equal the instance table's current values
    for i in range(n_inst):
        live = naive_snapshot_row(inst[i])
        for f, iv in zip(SNAP_FIELDS, intervals, strict=True):
            if iv == 0:
                assert snap[i, SNAP_FIELDS.index(f)] == live[f]


# ============================================================================ routing


def _view(snap, i):
    return {f: float(snap[i, k]) for k, f in enumerate(SNAP_FIELDS)}


@pytest.mark.parametrize("policy", ROUTING)
@pytest.mark.parametrize("seed", seeds(4))
def test_choose_instance_matches_naive(policy, seed):
    rng = np.random.default_rng(100 * seed + ROUTING.index(policy))
    kind = ROUTING_KIND[policy]
    for _ in range(150):
        n_inst = int(rng.integers(1, 7))
        inst = np.zeros(n_inst, INSTANCE_DT)
        inst["active"] = rng.random(n_inst) < (0.85 if rng.random() < 0.9 else 0.0)  # sometimes none
        snap = np.zeros((n_inst, N_SNAP))
        for f in (SnapField.QUEUE_DEPTH, SnapField.BATCH_SIZE, SnapField.PENDING):
            snap[:, f] = rng.integers(0, 3, n_inst)  # small integers: many equal loads
        snap[:, SnapField.KV_UTILIZATION] = rng.choice([0.0, 0.25, 0.5, 1.0, 1.25, -0.5], n_inst)  # clamped
        n_keys = int(rng.integers(0, 5))
        affinity = rng.integers(0, n_keys + 1, n_inst).astype(np.int64)
        weights = np.zeros(POLICY_WIDTH)
        weights[:4] = rng.choice([0.0, 0.0, 0.5, 1.0, 2.0, 3.0], 4)
        rr = int(rng.integers(0, n_inst))
        got = tuple(int(x) for x in E.choose_instance(kind, weights, inst, snap, affinity, n_keys, rr))
        want = naive_route(policy, weights[:4].tolist(), inst["active"].tolist(),
                           [_view(snap, i) for i in range(n_inst)], affinity.tolist(), n_keys, rr)
        assert got == want, (policy, inst["active"], snap[:, :3], affinity, weights[:4], rr)


@pytest.mark.parametrize("policy", ROUTING)
def test_choose_instance_ranks_only_the_requests_models_instances(policy):
    """Several deployments (and P/D pools): an instance of another routing group is never a
    candidate -- the decision is the naive one over the active instances of the request's
    group (its served model's, or a prefill leg's: ``route_id``, or a `both` instance's
    second group ``route_alt``)."""
    rng = np.random.default_rng(7 + ROUTING.index(policy))
    kind = ROUTING_KIND[policy]
    for _ in range(100):
        n_inst = int(rng.integers(1, 7))
        inst = np.zeros(n_inst, INSTANCE_DT)
        inst["active"] = rng.random(n_inst) < 0.85
        inst["route_id"] = rng.integers(0, 3, n_inst)
        inst["route_alt"] = np.where(rng.random(n_inst) < 0.3, rng.integers(0, 3, n_inst), -1)
        model = int(rng.integers(0, 3))
        snap = np.zeros((n_inst, N_SNAP))
        for f in (SnapField.QUEUE_DEPTH, SnapField.BATCH_SIZE, SnapField.PENDING):
            snap[:, f] = rng.integers(0, 3, n_inst)
        snap[:, SnapField.KV_UTILIZATION] = rng.choice([0.0, 0.25, 0.5, 1.0], n_inst)
        n_keys = int(rng.integers(0, 5))
        affinity = rng.integers(0, n_keys + 1, n_inst).astype(np.int64)  # other models' matches too
        weights = np.zeros(POLICY_WIDTH)
        weights[:4] = rng.choice([0.0, 0.5, 1.0, 2.0], 4)
        rr = int(rng.integers(0, n_inst))
        best, rr_after, scores, _ = E.choose_instance_scores(kind, weights, inst, snap, affinity, n_keys, rr, model)
        candidates = (inst["active"] != 0) & ((inst["route_id"] == model) | (inst["route_alt"] == model))
        want = naive_route(policy, weights[:4].tolist(), candidates.astype(int).tolist(),
                           [_view(snap, i) for i in range(n_inst)], affinity.tolist(), n_keys, rr)
        assert (int(best), int(rr_after)) == want
        assert np.isneginf(scores[~candidates]).all()


EXPRESSIONS = ("-load", "hit_blocks**2 - 0.3*queue/(1 + kv_free)", "load if max_hit > 0 else -queue",
               "(max_load - load) / (max_load - min_load) + kv_utilization * candidates - pending",
               "1e300 * 1e300 * (load - 1)", "running - prompt_tokens * tenant + slo_class * request_blocks")


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_expression_routing_matches_naive(text):
    """The kernel's pick is the argmax (ties to the lowest index) of the expression over the
    candidates' features, as evaluated straight from its syntax tree; a value that is not
    finite ranks last and is counted."""
    from blis_fast.config.expression import compile_expression
    from naive.expression import evaluate

    row = compile_expression(text, "routing", "x")
    rng = np.random.default_rng(len(text))
    for _ in range(60):
        n_inst = int(rng.integers(1, 7))
        inst = np.zeros(n_inst, INSTANCE_DT)
        inst["active"] = rng.random(n_inst) < 0.85
        inst["route_id"] = rng.integers(0, 2, n_inst)
        inst["route_alt"] = -1
        snap = np.zeros((n_inst, N_SNAP))
        for f in (SnapField.QUEUE_DEPTH, SnapField.BATCH_SIZE, SnapField.PENDING):
            snap[:, f] = rng.integers(0, 3, n_inst)
        snap[:, SnapField.KV_UTILIZATION] = rng.choice([0.0, 0.25, 0.5, 1.0], n_inst)
        n_keys = int(rng.integers(0, 5))
        affinity = rng.integers(0, n_keys + 1, n_inst).astype(np.int64)
        request = dict(prompt_tokens=float(rng.integers(1, 500)), slo_class=float(rng.integers(0, 3)),
                       tenant=float(rng.integers(0, 3)))
        best, _, scores, faults = E.choose_instance_scores(RoutingKind.EXPRESSION, row, inst, snap, affinity, n_keys,
                                                           0, 0, request["prompt_tokens"], request["slo_class"],
                                                           request["tenant"])
        cands = [i for i in range(n_inst) if inst["active"][i] and inst["route_id"][i] == 0]
        loads = {i: snap[i, SnapField.QUEUE_DEPTH] + snap[i, SnapField.BATCH_SIZE] + snap[i, SnapField.PENDING]
                 for i in cands}
        want, bad = {}, 0
        for i in cands:
            v = evaluate(text, dict(load=loads[i], queue=snap[i, SnapField.QUEUE_DEPTH],
                                    running=snap[i, SnapField.BATCH_SIZE], pending=snap[i, SnapField.PENDING],
                                    kv_utilization=snap[i, SnapField.KV_UTILIZATION],
                                    kv_free=1 - snap[i, SnapField.KV_UTILIZATION], hit_blocks=affinity[i],
                                    request_blocks=n_keys, min_load=min(loads.values()), max_load=max(loads.values()),
                                    max_hit=max(affinity[c] for c in cands), candidates=len(cands), **request))
            if not np.isfinite(v):
                v, bad = -np.inf, bad + 1
            want[i] = v
        expected = max(cands, key=lambda i: (want[i], -i)) if cands else -1
        if cands and all(np.isneginf(v) for v in want.values()):
            expected = cands[0]
        assert int(best) == expected
        assert int(faults) == bad
        for i in cands:
            assert scores[i] == want[i]


def test_round_robin_skips_inactive_instances_and_wraps():
    inst = np.zeros(4, INSTANCE_DT)
    inst["active"] = [1, 0, 1, 0]
    snap, aff, w = np.zeros((4, N_SNAP)), np.zeros(4, np.int64), np.zeros(POLICY_WIDTH)
    picks, rr = [], 1
    for _ in range(5):
        i, rr = E.choose_instance(RoutingKind.ROUND_ROBIN, w, inst, snap, aff, 0, rr)
        picks.append(int(i))
    assert picks == [2, 0, 2, 0, 2]
    inst["active"] = 0
    assert tuple(int(x) for x in E.choose_instance(RoutingKind.ROUND_ROBIN, w, inst, snap, aff, 0, 3)) == (-1, 3)
    for kind in RoutingKind:
        assert int(E.choose_instance(kind, w, inst, snap, aff, 0, 0)[0]) == -1


# ============================================================================ priority


@pytest.mark.parametrize("seed", range(4))
def test_request_priority_matches_naive(seed):
    rng = np.random.default_rng(seed)
    params = np.zeros(POLICY_WIDTH)
    params[PriorityParam.AGE_WEIGHT] = rng.choice([0.0, 1e-6, -1e-6, 3.0])
    n_cls = int(rng.integers(0, 5))
    params[PriorityParam.CLASS_WEIGHTS:PriorityParam.CLASS_WEIGHTS + n_cls] = rng.choice([-100, -1, 0, 0.5, 5], n_cls)
    classes = params[PriorityParam.CLASS_WEIGHTS:].tolist()
    st, _ = _queue_state(rng, 1)
    for _ in range(100):
        arrival, now = sorted(int(x) for x in rng.integers(0, 10**7, 2))
        cls = int(rng.choice([-1, 0, 1, 2, 5, POLICY_WIDTH - 2, POLICY_WIDTH - 1, 10**6]))
        st.reqs[0]["arrival_us"], st.reqs[0]["slo_class"] = arrival, cls
        got = float(E.request_priority(st, params, 0, now))
        assert got == naive_priority(float(params[PriorityParam.AGE_WEIGHT]), classes, arrival, cls, now)


def _queue_state(rng, n, n_inst=2):
    """A State of n requests (arrivals, lengths, outputs and SLO classes with ties), with a
    random subset threaded into instance 1's wait queue in random order and the rest
    partly into instance 0's."""
    lens = rng.choice([16, 32, 100], n)
    outs = rng.choice([1, 5, 9], n)
    arrivals = rng.choice([0, 10, 10, 500], n)  # not in id order: ties by arrival differ from ties by id
    st = make_sort_state(lens, outs, arrivals, n_inst)
    st.reqs["slo_class"] = rng.integers(-1, 3, n)
    st.reqs["priority"] = rng.choice([-1.0, 0.0, 0.0, 2.5], n)
    queues = {0: [], 1: []}
    for r in rng.permutation(n).tolist():
        o = int(rng.choice([0, 1, 1, -1]))
        if o >= 0:
            E.dl_push_back(st.reqs["queue_prev"], st.reqs["queue_next"], st.inst["wq_head"], st.inst["wq_tail"],
                           st.inst["wq_len"], o, r)
            queues[o].append(r)
    return st, queues


def make_sort_state(lens, outs, arrivals, n_inst):
    wl = lengths_workload(np.asarray(arrivals, np.int64), list(lens), list(outs), bs=16)
    st = make_state(wl, num_instances=n_inst, scheduler="sjf")  # a sorting scheduler: scratch for n
    assert st.sort_ids.shape == (len(lens),)
    return st


def _walk(st, o):
    out, r = [], int(st.inst[o]["wq_head"])
    while r >= 0:
        out.append(r)
        r = int(st.reqs[r]["queue_next"])
    assert len(out) == int(st.inst[o]["wq_len"])
    return out


@pytest.mark.parametrize("seed", range(6))
def test_update_wait_queue_priorities_sets_exactly_the_queue(seed):
    rng = np.random.default_rng(seed)
    st, queues = _queue_state(rng, int(rng.integers(1, 30)))
    params = np.zeros(POLICY_WIDTH)
    params[:4] = [1e-6, 0.0, -100.0, 5.0]
    before = st.reqs["priority"].copy()
    now = 10_000
    E.update_wait_queue_priorities(st, 1, params, now)
    for r in range(len(st.reqs)):
        if r in queues[1]:
            want = naive_priority(1e-6, params[1:].tolist(), int(st.reqs[r]["arrival_us"]),
                                  int(st.reqs[r]["slo_class"]), now)
            assert float(st.reqs[r]["priority"]) == want
        else:
            assert st.reqs[r]["priority"] == before[r]


@pytest.mark.parametrize("seed", range(12))
def test_reorder_wait_queue_matches_naive_sort(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    st, queues = _queue_state(rng, n)
    weights = np.zeros(POLICY_WIDTH)
    weights[:4] = rng.choice([0.0, 0.0, -1.0, 1.0, 20.0, 0.5], 4)
    q = st.reqs
    want = naive_queue_order(queues[1], weights[:4].tolist(), q["priority"].tolist(), q["arrival_us"].tolist(),
                             q["prompt_len"].tolist(), q["output_len"].tolist())
    other = _walk(st, 0)
    E.reorder_wait_queue(st, 1, weights)
    assert _walk(st, 1) == want
    assert _walk(st, 0) == other == queues[0]  # the other instance's queue is untouched
    assert int(st.inst[1]["wq_tail"]) == (want[-1] if want else -1)
    if want:
        assert int(q[want[0]]["queue_prev"]) == -1 and int(q[want[-1]]["queue_next"]) == -1


# ============================================================================ victim


@pytest.mark.parametrize("seed", range(6))
def test_choose_victim_matches_naive(seed):
    rng = np.random.default_rng(seed)
    n = 12
    st, _ = _queue_state(rng, n)
    params = np.zeros(POLICY_WIDTH)
    for _ in range(40):
        params[:3] = rng.choice([0.0, 0.0, 1e-6, -1e-6, 1.0, -100.0], 3)  # ties when all weights are 0
        k = int(rng.integers(1, min(n, st.batch.shape[1]) + 1))
        members = rng.permutation(n)[:k]
        st.batch[1, :k] = members
        st.inst[1]["batch_len"] = k
        now = int(rng.integers(500, 10**6))
        prios = [naive_priority(float(params[0]), params[1:].tolist(), int(st.reqs[r]["arrival_us"]),
                                int(st.reqs[r]["slo_class"]), now) for r in members]
        assert int(E.choose_victim(st, 1, VictimKind.LAST, params, now)) == naive_victim("last", prios) == k - 1
        assert int(E.choose_victim(st, 1, VictimKind.LOWEST_PRIORITY, params, now)) == \
            naive_victim("lowest-priority", prios)


# ============================================================================ no recompilation


def test_switching_policies_never_recompiles(monkeypatch):
    """A policy candidate is data: the JIT kernel never compiles again for one (and the
    ahead-of-time compiled one takes every candidate: tests/kernels/test_native.py)."""
    import numba

    from builders import sim
    from blis_fast_kernels.engine.loop import run_events

    if numba.config.DISABLE_JIT:
        pytest.skip("nothing is compiled with the JIT off")
    monkeypatch.setenv("BLIS_FAST_KERNELS", "jit")
    rng = np.random.default_rng(9)
    n = 40
    wl = lengths_workload(np.sort(rng.integers(0, 200_000, n)), rng.integers(10, 400, n), rng.integers(1, 20, n),
                          tenant=rng.integers(0, 2, n), slo_class=rng.integers(0, 3, n))
    base = dict(alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], total_kv_blocks=1000)
    sim(wl, num_instances=2, **base)
    n_sig = len(run_events.signatures)
    n_over = len(run_events.overloads)
    assert n_sig >= 1
    variants = [
        dict(routing_policy=p) for p in ("round-robin", "least-loaded", "weighted", "prefix-affinity", "always-busiest")
    ] + [
        dict(routing_policy="weighted", routing_scorers="kv-utilization:1"),
        dict(routing_policy="weighted", routing_scorers="load-balance:0.5,prefix-affinity:9"),
        dict(admission_policy="token-bucket", token_bucket_capacity=500, token_bucket_refill_rate=100),
        dict(admission_policy="reject-all"),
        dict(priority_policy="slo-based", slo_class_weights=[0, 1, -2], scheduler="priority-fcfs"),
        dict(priority_policy="inverted-slo", scheduler="reverse-priority"),
        dict(scheduler="sjf"),
        dict(scheduler="sort", scheduler_weights="prompt_len:-1,output_len:3"),
        dict(preemption_victim="lowest-priority", priority_policy="slo-based", total_kv_blocks=40),
        dict(snapshot_refresh_interval=1000, snapshot_intervals="queue_depth:50,pending:7"),
        dict(admission_latency=100, routing_latency=200, prefix_index_capacity=3, routing_policy="prefix-affinity"),
        dict(num_instances=70, routing_policy="prefix-affinity"),  # two mask words
    ]
    for v in variants:
        kw = {**base, "num_instances": 2, **v}
        sim(wl, **kw)
        assert len(run_events.signatures) == n_sig, f"recompiled for {v}"
        assert len(run_events.overloads) == n_over, f"recompiled for {v}"
