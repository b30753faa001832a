"""Property-based tests of whole runs (hypothesis): random tiny clusters with KV pressure,
small budgets, shared prefixes, zero/one-token outputs, compat on/off and horizons, run
with ``check_invariants=True`` (the kernel then checks batch size <= max_num_seqs and
allocated + free KV blocks = total after every step).

Properties: request conservation, per-request causality, exact output counts, TTFT lower
bound, batch/KV peaks within limits, all KV blocks free after a full run, determinism, and
per-instance agreement with tests/naive's reference engine (round-robin routing makes
instances independent).  The two long properties run 400 examples (slow) and a quick
40-example variant.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blis_fast
from builders import COMPAT, engine_overrides, prompts_workload, random_prompts
from blis_fast_kernels.schema import REQUEST_STATE_NAMES, RequestState
from naive import naive_simulate_instance

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@st.composite
def scenarios(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    bs = draw(st.sampled_from([1, 2, 4, 8, 16]))
    n = draw(st.integers(1, 24))
    rng = np.random.default_rng(seed)
    prompts = random_prompts(rng, n, bs, n_families=3, vocab=4, max_suffix=40, p_family=0.6)
    outputs = [int(x) for x in rng.choice([0, 1, 1, 2, 3, 5, 8, 13], n)]
    spacing = draw(st.sampled_from([0, 1, 300, 3000]))
    arrivals = [int(x) * spacing for x in rng.integers(0, 12, n)]
    caps = [-(-(len(p) + max(o, 1) - 1) // bs) for p, o in zip(prompts, outputs, strict=True)]
    total = draw(st.integers(max(1, max(caps) // 2), max(caps) + 8))
    alpha = draw(st.tuples(st.sampled_from([0.0, 50.0, 333.3]), st.sampled_from([0.0, 0.5, 1.75]),
                           st.sampled_from([0.0, 10.0, 99.9])))
    beta = draw(st.tuples(st.sampled_from([1.0, 700.0, 2500.5]), st.sampled_from([0.0, 2.5, 10.0]),
                          st.sampled_from([0.0, 5.0, 40.0])))
    cfg = dict(
        num_instances=draw(st.integers(1, 4)),
        block_size=bs,
        total_kv_blocks=total,
        max_num_seqs=draw(st.integers(1, 4)),
        max_batched_tokens=draw(st.integers(1, 64)),
        long_prefill_threshold=draw(st.sampled_from([0, 0, 1, 7, 32])),
        alpha=list(alpha),
        beta=list(beta),
        prefix_caching=draw(st.booleans()),
        compat=draw(st.booleans()),
        horizon=draw(st.one_of(st.none(), st.none(), st.integers(0, 40_000))),
        admission_latency=draw(st.sampled_from([0, 0, 5, 200])),
        routing_latency=draw(st.sampled_from([0, 0, 3, 150])),
    )
    return prompts, outputs, arrivals, cfg


def simulate(prompts, outputs, arrivals, cfg):
    wl = prompts_workload(arrivals, prompts, outputs, cfg["block_size"])
    res = blis_fast.simulate(workload=wl, num_instances=cfg["num_instances"], **engine_overrides(cfg, COMPAT))
    return res, wl


def count(reqs, *names):
    codes = [REQUEST_STATE_NAMES.index(s) for s in names]
    return int(np.isin(reqs["state"], codes).sum())


def check_conservation_causality_counts_and_limits(sc):
    prompts, outputs, arrivals, cfg = sc
    res, wl = simulate(*sc)
    reqs, inst, c = res.state.reqs, res.state.inst, res.cluster
    n = len(prompts)

    # --- request conservation (counted from the per-request states and kernel counters)
    arrived = n - count(reqs, "pending")
    in_flight = count(reqs, "admitting", "routed")
    assert c["arrived_requests"] == arrived == int(res.state.loop[0]["injected"])
    assert c["rejected_requests"] == count(reqs, "rejected") == 0  # always-admit
    assert c["still_in_flight"] == in_flight
    injected = int(inst["injected"].sum())
    assert c["injected_requests"] == injected
    assert arrived == injected + c["rejected_requests"] + in_flight
    assert c["completed_requests"] == count(reqs, "completed") == int(inst["completed"].sum())
    assert c["still_queued"] == count(reqs, "queued")
    assert c["still_running"] == count(reqs, "running")
    assert c["dropped_unservable"] == count(reqs, "dropped_unservable") == int(inst["dropped"].sum())
    assert injected == c["completed_requests"] + c["still_queued"] + c["still_running"] + c["dropped_unservable"]
    if cfg["horizon"] is None:
        assert c["completed_requests"] + c["dropped_unservable"] == n

    # --- causality and exact latencies of the cluster hops
    lat = cfg["admission_latency"] + cfg["routing_latency"]
    a2 = int(cfg["alpha"][2])
    completed = reqs["state"] == RequestState.COMPLETED
    for r in range(n):
        row = reqs[r]
        q = int(cfg["alpha"][0] + cfg["alpha"][1] * int(row["prompt_len"]))
        chain = [int(row[f]) for f in ("arrival_us", "routed_us", "queued_us", "first_scheduled_us",
                                       "first_token_us", "last_token_us")]
        have = [t for t in chain if t >= 0]
        assert chain[: len(have)] == have, f"request {r}: a later timestamp without an earlier one"
        assert have == sorted(have), f"request {r}: {chain}"
        if chain[1] >= 0:
            assert chain[1] == chain[0] + lat
        if chain[2] >= 0:
            assert chain[2] == chain[1] + q
        if chain[4] >= 0:
            assert chain[4] - chain[0] >= lat + q + a2  # TTFT >= queueing overhead (+ hops, a2)
        need = max(outputs[r], 1)
        if completed[r]:
            assert int(row["generated"]) == need
            if not cfg["compat"]:
                assert int(row["itl_sum_us"]) == chain[5] - chain[4]  # E2E = TTFT + sum(ITL)
        else:
            assert int(row["generated"]) < need
        if chain[3] < 0:  # never scheduled: never preempted
            assert int(row["preemptions"]) == 0
    gen = reqs["generated"]
    assert c["total_output_tokens"] == int((np.maximum(gen - 1, 0) if cfg["compat"] else gen).sum())

    # --- limits
    assert (inst["batch_peak"] <= cfg["max_num_seqs"]).all()
    assert (inst["kv_peak_allocated"] <= inst["kv_total"]).all()
    assert c["batch_size_peak"] <= cfg["max_num_seqs"]
    assert c["kv_peak_used_blocks"] <= cfg["total_kv_blocks"]
    # --- preemptions: the instance counters are the per-request sums; an instance whose
    # requests all fit in its KV cache at once never preempts
    assert int(c["preemption_count"]) == int(reqs["preemptions"].sum())
    caps = -(-(reqs["prompt_len"] + np.maximum(reqs["output_len"], 1) - 1) // cfg["block_size"])
    for i in range(cfg["num_instances"]):
        mine = reqs["instance"] == i
        assert int(inst["preemptions"][i]) == int(reqs["preemptions"][mine].sum())
        if int(caps[mine].sum()) <= cfg["total_kv_blocks"]:
            assert int(inst["preemptions"][i]) == 0

    # --- after a full run every block is free (ref 0), on every instance
    if c["completed_requests"] + c["dropped_unservable"] == n:
        assert (res.state.blocks["ref_count"] == 0).all()
        assert (inst["kv_allocated"] == 0).all()
        assert (inst["batch_len"] == 0).all() and (inst["wq_len"] == 0).all()

    # --- round-robin: the j-th routing decision (arrival order) goes to instance j mod N
    order = np.argsort(reqs["arrival_us"], kind="stable")
    routed = [r for r in order if reqs[r]["instance"] >= 0]
    assert [int(reqs[r]["instance"]) for r in routed] == [j % cfg["num_instances"] for j in range(len(routed))]


@settings(max_examples=40, **SETTINGS)
@given(scenarios())
def test_conservation_causality_counts_and_limits_quick(sc):
    check_conservation_causality_counts_and_limits(sc)


@pytest.mark.slow
@settings(max_examples=400, **SETTINGS)
@given(scenarios())
def test_conservation_causality_counts_and_limits(sc):
    check_conservation_causality_counts_and_limits(sc)


def test_kv_starved_instance_preempts_like_the_naive_engine():
    """4 requests at t = 0 whose decodes outgrow a 10-block cache (each alone needs 7 blocks):
    running requests must be preempted, every preemption is counted once per request and per
    instance, and all of it matches the naive engine."""
    rng = np.random.default_rng(7)
    prompts = [rng.integers(0, 128_000, 64).tolist() for _ in range(4)]
    outputs, arrivals = [40] * 4, [0] * 4
    cfg = dict(num_instances=1, block_size=16, total_kv_blocks=10, max_num_seqs=4, max_batched_tokens=512,
               long_prefill_threshold=0, alpha=[0.0, 0.0, 0.0], beta=[1000.0, 10.0, 5.0], prefix_caching=True,
               compat=False, horizon=None, admission_latency=0, routing_latency=0)
    res, wl = simulate(prompts, outputs, arrivals, cfg)
    reqs, c = res.state.reqs, res.cluster
    assert c["preemption_count"] > 0
    assert c["preemption_count"] == int(reqs["preemptions"].sum()) == int(res.state.inst["preemptions"][0])
    assert c["completed_requests"] == 4 and (reqs["generated"] == 40).all()
    assert c["total_output_tokens"] == 160  # re-prefilled tokens are not counted twice
    want = naive_simulate_instance(arrivals, [64] * 4, outputs, [[int(x) for x in wl.keys_of(r)] for r in range(4)],
                                   **{k: v for k, v in cfg.items() if k != "num_instances"})
    assert reqs["preemptions"].tolist() == want["preemptions"]
    assert reqs["last_token_us"].tolist() == want["last_token_us"]
    assert int(res.state.inst["preemptions"][0]) == want["instance"]["preemptions"]


def check_deterministic(sc):
    a, _ = simulate(*sc)
    b, _ = simulate(*sc)
    assert a.results_document() == b.results_document()
    assert np.array_equal(a.state.reqs, b.state.reqs)


@settings(max_examples=20, **SETTINGS)
@given(scenarios())
def test_deterministic_quick(sc):
    check_deterministic(sc)


@pytest.mark.slow
@settings(max_examples=100, **SETTINGS)
@given(scenarios())
def test_deterministic(sc):
    check_deterministic(sc)


def check_each_instance_matches_naive_engine(sc):
    """Round-robin makes instances independent: instance i serves the requests whose routing
    decision (in arrival order) has index = i mod N; each must match the naive engine run on
    exactly those requests."""
    prompts, outputs, arrivals, cfg = sc
    res, wl = simulate(*sc)
    reqs = res.state.reqs
    k = cfg["num_instances"]
    order = [int(r) for r in np.argsort(np.asarray(arrivals), kind="stable")]
    naive_cfg = {f: v for f, v in cfg.items() if f != "num_instances"}
    for i in range(k):
        mine = order[i::k]
        if not mine:
            continue
        keys = [[int(x) for x in wl.keys_of(r)] for r in mine]
        want = naive_simulate_instance([arrivals[r] for r in mine], [len(prompts[r]) for r in mine],
                                       [outputs[r] for r in mine], keys, **naive_cfg)
        assert [REQUEST_STATE_NAMES[int(reqs[r]["state"])] for r in mine] == want["state"]
        for f in ("routed_us", "queued_us", "first_scheduled_us", "first_token_us", "last_token_us", "generated",
                  "preemptions", "cached_tokens", "itl_sum_us"):
            assert [int(reqs[r][f]) for r in mine] == want[f], (i, f)
        routed = [r for r, s in zip(mine, want["state"], strict=True) if s not in ("pending", "admitting")]
        assert all(int(reqs[r]["instance"]) == i for r in routed)
        row = res.state.inst[i]
        for f in ("steps", "preemptions", "injected", "dropped", "prefill_tokens", "decode_tokens",
                  "prefix_query_tokens", "prefix_hit_tokens", "batch_peak", "kv_peak_allocated", "last_step_end_us"):
            assert int(row[f]) == want["instance"][f], (i, f)


@settings(max_examples=40, **SETTINGS)
@given(scenarios())
def test_each_instance_matches_naive_engine_quick(sc):
    check_each_instance_matches_naive_engine(sc)


@pytest.mark.slow
@settings(max_examples=400, **SETTINGS)
@given(scenarios())
def test_each_instance_matches_naive_engine(sc):
    check_each_instance_matches_naive_engine(sc)
