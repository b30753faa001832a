"""The event-skipping engine (kernels/engine/calendar.py) against the path that visits every
running request every step (``build_state(..., event_skipping=False)``): identical results,
byte for byte, on random workloads and configurations -- KV pressure and preemption,
chunked prefill and tight token budgets (the steps where event skipping does not apply),
priority schedulers and victims, closed-loop sessions, compat mode, the roofline model,
horizons, several block sizes.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import COMPAT, random_prompts, prompts_workload

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def random_workload(seed: int, bs: int, sessions: bool):
    """Up to 40 requests with shared prefix families and exact repeats (cache hits), outputs
    of 0..60 tokens, bursty arrivals; with ``sessions`` some requests release a follower
    when they complete (closed loop)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 41))
    prompts = random_prompts(rng, n, bs, n_families=3, vocab=50, max_suffix=8 * bs, p_family=0.6)
    outputs = rng.integers(0, 61, n)
    arrivals = np.sort(rng.integers(0, 400_000, n)) * (rng.random() < 0.7)  # sometimes all at t = 0
    wl = prompts_workload(arrivals, prompts, outputs, bs)
    if sessions and n >= 2:
        nxt = np.full(n, -1, np.int64)
        follows = rng.random(n) < 0.4
        for i in range(n - 1):
            if follows[i] and nxt[i] < 0:
                j = i + 1
                if j not in nxt:
                    nxt[i] = j
        dep = np.zeros(n, bool)
        dep[nxt[nxt >= 0]] = True
        arrival = np.where(dep, -1, wl.arrival_us).astype(np.int64)
        wl = dataclasses.replace(wl, next_request=nxt, arrival_us=arrival,
                                 follow_delay_us=rng.integers(0, 50_000, n).astype(np.int64))
        wl.validate()
    return wl


def run_both(wl, **overrides):
    """Results document (JSON text) and request table of the run, skipping and visiting all."""
    from blis_fast.config.sim import build_config
    from blis_fast.results import Result
    from blis_fast.run import build_state, resolve, run_to_end

    cfg = build_config({}, overrides)
    setup = resolve(cfg)
    out = []
    for skipping in (True, False):
        state = run_to_end(build_state(setup, wl, event_skipping=skipping))
        doc = json.dumps(Result(setup, wl, state).results_document(), sort_keys=True)
        out.append((doc, state))
    return out


config = st.fixed_dictionaries({
    "num_instances": st.integers(1, 3),
    "total_kv_blocks": st.sampled_from([12, 20, 40, 400]),
    "max_num_running_reqs": st.sampled_from([1, 3, 8, 64]),
    "max_num_scheduled_tokens": st.sampled_from([8, 40, 128, 2048]),
    "long_prefill_token_threshold": st.sampled_from([0, 0, 16, 50]),
    "scheduler": st.sampled_from(["fcfs", "fcfs", "priority-fcfs", "sjf"]),
    "priority_policy": st.sampled_from(["constant", "slo-based"]),
    "preemption_victim": st.sampled_from(["last", "lowest-priority"]),
    "routing_policy": st.sampled_from(["round-robin", "least-loaded", "weighted"]),
    "enable_prefix_caching": st.booleans(),
    "compat": st.sampled_from([None, COMPAT]),
    "alpha_coeffs": st.sampled_from([[0, 0, 0], [100, 1, 40]]),
    "beta_coeffs": st.sampled_from([[1000, 10, 5], [3000, 3, 700]]),
    "horizon": st.sampled_from([None, None, 300_000, 900_000]),
})


def check_same(wl, cfg):
    (doc_a, a), (doc_b, b) = run_both(wl, check_invariants=True, **cfg)
    assert doc_a == doc_b
    for f in ("computed", "generated", "blocks_held", "itl_sum_us", "last_token_us", "last_token_step",
              "run_start_step", "state", "preemptions", "cached_tokens", "first_token_us"):
        assert np.array_equal(a.reqs[f], b.reqs[f]), f
    for f in ("steps", "busy_us", "prefill_tokens", "decode_tokens", "kv_allocated", "kv_peak_allocated",
              "prefix_hit_tokens", "preemptions"):
        assert np.array_equal(a.inst[f], b.inst[f]), f
    # (the free list itself may differ: with event skipping an instance whose blocks no key
    # can find only counts them, kernels/kv/cache.py; kv_allocated says how many are free)
    la, lb = a.loop[0], b.loop[0]
    assert la["steps"] == lb["steps"] and la["events"] == lb["events"]
    n_steps = int(la["steps"])
    assert np.array_equal(a.step_log[:n_steps], b.step_log[:n_steps])
    n_irr = int(la["irregular_records"])
    assert n_irr == int(lb["irregular_records"])
    assert np.array_equal(a.irr_log[:n_irr], b.irr_log[:n_irr])
    return la


def check_random_case(seed, bs, sessions, cfg):
    check_same(random_workload(seed, bs, sessions), dict(cfg, block_size_in_tokens=bs))


@settings(max_examples=40, **SETTINGS)
@given(seed=st.integers(0, 2**31), bs=st.sampled_from([1, 4, 16]), sessions=st.booleans(), cfg=config)
def test_event_skipping_equals_visiting_every_request_quick(seed, bs, sessions, cfg):
    check_random_case(seed, bs, sessions, cfg)


@pytest.mark.slow
@settings(max_examples=320, **SETTINGS)
@given(seed=st.integers(0, 2**31), bs=st.sampled_from([1, 4, 16]), sessions=st.booleans(), cfg=config)
def test_event_skipping_equals_visiting_every_request(seed, bs, sessions, cfg):
    check_random_case(seed, bs, sessions, cfg)


@settings(max_examples=25, **SETTINGS)
@given(seed=st.integers(0, 2**31), cfg=config)
def test_event_skipping_equals_visiting_every_request_roofline(seed, cfg):
    wl = random_workload(seed, 16, False)
    cfg = {k: v for k, v in cfg.items() if k not in ("alpha_coeffs", "beta_coeffs")}
    check_same(wl, dict(cfg, latency_model="roofline"))


def unique_workload(seed: int, bs: int):
    """Up to 40 requests whose content no two share (no block key occurs twice), bursty
    arrivals: with event skipping all their KV blocks are anonymous (kernels/kv/cache.py)
    until a preemption must register keys."""
    from builders import prompts_workload

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 41))
    prompts = [[int(t) for t in rng.integers(0, 2**40, int(rng.integers(1, 8 * bs + 2)))] for _ in range(n)]
    outputs = rng.integers(0, 61, n)
    arrivals = np.sort(rng.integers(0, 400_000, n)) * (rng.random() < 0.7)
    return prompts_workload(arrivals, prompts, outputs, bs)


def check_unique_case(seed, bs, cfg):
    wl = unique_workload(seed, bs)
    assert not wl.shared_keys().any()
    check_same(wl, dict(cfg, block_size_in_tokens=bs))


@settings(max_examples=25, **SETTINGS)
@given(seed=st.integers(0, 2**31), bs=st.sampled_from([1, 4, 16]), cfg=config)
def test_event_skipping_equals_visiting_every_request_counted_kv_quick(seed, bs, cfg):
    check_unique_case(seed, bs, cfg)


@pytest.mark.slow
@settings(max_examples=120, **SETTINGS)
@given(seed=st.integers(0, 2**31), bs=st.sampled_from([1, 4, 16]), cfg=config)
def test_event_skipping_equals_visiting_every_request_counted_kv(seed, bs, cfg):
    check_unique_case(seed, bs, cfg)


def test_counted_blocks_are_named_at_the_first_preemption():
    """Unique content under KV pressure: every block starts anonymous, a victim's filled
    blocks get ids when its keys must be registered, and it finds them again on
    readmission -- all as on the path that names every block from the start."""
    from builders import lengths_workload

    from blis_fast.config.sim import build_config
    from blis_fast.run import build_state, resolve

    wl = lengths_workload([0] * 6, [64] * 6, [60] * 6)
    cfg = dict(alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], total_kv_blocks=30)
    assert not build_state(resolve(build_config({}, cfg)), wl).reqs["named_upto"].any()  # all anonymous
    (doc_a, a), (doc_b, b) = run_both(wl, check_invariants=True, **cfg)
    assert doc_a == doc_b
    assert a.inst[0]["preemptions"] > 0 and a.inst[0]["kv_virgin_next"] > 0  # victims' blocks got ids
    assert a.inst[0]["prefix_hit_tokens"] == b.inst[0]["prefix_hit_tokens"] > 0  # victims found their blocks
    (doc_c, c), (doc_d, _) = run_both(wl, check_invariants=True, enable_prefix_caching=False, **cfg)
    assert doc_c == doc_d and c.inst[0]["preemptions"] > 0
    assert c.inst[0]["kv_virgin_next"] == 0  # without prefix caching nothing is ever found by key: no ids


def test_event_skipping_skips():
    """On a plain decode-heavy run almost no step visits every request, and the steps that do
    are counted: the fast path is actually taken (the equality tests would pass if not)."""
    from builders import lengths_workload

    wl = lengths_workload(np.arange(50) * 20_000, [300] * 50, [200] * 50)
    (_, a), (_, b) = run_both(wl, alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], total_kv_blocks=4000)
    assert a.loop[0]["steps"] == b.loop[0]["steps"] > 200
    assert a.loop[0]["steps_visiting_all"] == 0
    assert b.loop[0]["steps_visiting_all"] == b.loop[0]["steps"]


def test_budget_binding_steps_visit_everybody():
    """A token budget smaller than the running batch's demand forces the visiting path on
    exactly those steps; results stay equal."""
    from builders import lengths_workload

    wl = lengths_workload([0] * 12, [200] * 12, [40] * 12)
    (doc_a, a), (doc_b, _) = run_both(wl, alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5],
                                      total_kv_blocks=4000, max_num_scheduled_tokens=64)
    assert doc_a == doc_b
    assert 0 < a.loop[0]["steps_visiting_all"] < a.loop[0]["steps"]
