"""Autoscaling in the event loop, hand-computed to the µs (kernels/engine/autoscale.py;
docs/semantics.md §15; issue 24).

Every case runs llama-3.1-8b with blackbox step times alpha = (0, 0, 0) and beta = (1000,
10, 5): a step takes 1000 + 10 x prefill tokens + 5 x decode requests µs.  The autoscaler
ticks every 10 ms (interval 0.01 s), a decision acts 5 ms later (metrics delay 0.005 s), a
new instance is provisioned in 20 ms and loads its model in 30 ms -- so a tick at T that
scales up has the new instance serving at T + 55 ms.
"""

from __future__ import annotations

import numpy as np
import pytest

import blis_fast
from blis_fast.errors import ConfigError
from blis_fast.workload import Workload
from blis_fast_kernels.kv.cache import kv_conserved
from blis_fast_kernels.schema import LifeState, RequestState, ScaleReason

BLOCK = 16
MS = 1000  # µs
TICKS = dict(autoscale_interval_s=0.01, autoscale_metrics_delay_s=0.005, provisioning_delay_s=0.02,
             loading_delay_s=0.03, stabilization_down_s=1)
HAND = dict(alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], check_invariants=True, **TICKS)
TINY_US = 1000 + 10 * 16  # a 16-token prompt, one output token: one prefill step


def workload(arrivals_us, prompt_len=16, output_len=1) -> Workload:
    """Requests arriving at ``arrivals_us`` with distinct block keys (nothing shared)."""
    n = len(arrivals_us)
    per = (prompt_len + output_len) // BLOCK
    keys = np.arange(n * per, dtype=np.int64) + 1000
    offsets = np.arange(n + 1, dtype=np.int64) * per
    wl = Workload(np.asarray(arrivals_us, np.int64), np.full(n, prompt_len, np.int64), np.full(n, output_len, np.int64),
                  keys, offsets, BLOCK)
    wl.validate()
    return wl


def run(wl, **settings):
    """(Result, state) of ``wl`` under HAND and ``settings``; checks that every request
    completed and every instance's KV blocks are conserved and free."""
    res = blis_fast.simulate(workload=wl, **{**HAND, **settings})
    st = res.full_state
    assert (st.reqs["state"] == RequestState.COMPLETED).all()
    assert (st.inst["kv_allocated"] == 0).all()
    assert all(kv_conserved(st, i) for i in range(len(st.inst)))
    return res, st


def life_log(st) -> list[tuple[int, int, int]]:
    """(time µs, instance, state entered) of every lifecycle change."""
    rows = st.life_log[:st.loop[0]["life_records"]]
    return [(int(r["time_us"]), int(r["instance"]), int(r["state"])) for r in rows]


def ticks(st) -> list[tuple]:
    """(time µs, reason, current, ready, wish, target) of every tick."""
    rows = st.scale_log[:st.loop[0]["scale_records"]]
    return [(int(r["time_us"]), int(r["reason"]), int(r["current"]), int(r["ready"]), int(r["wish"]),
             int(r["target"])) for r in rows]


P, L, W, A, D, T = (LifeState.PROVISIONING, LifeState.LOADING, LifeState.WARMING, LifeState.ACTIVE,
                    LifeState.DRAINING, LifeState.TERMINATED)
RATE = dict(autoscaler="threshold", autoscale_signal="arrival_rate", routing_policy="round-robin")


# ----------------------------------------------------------------------------- scale-up


def two_per_tick(until_ms=120):
    """Two tiny requests 1 ms and 6 ms after each 10 ms tick: 200 requests/s."""
    return workload([t * MS + off for t in range(0, until_ms, 10) for off in (1 * MS, 6 * MS)])


def test_a_step_load_scales_up_after_exactly_metrics_plus_provisioning_plus_loading_delay():
    # 200 req/s on one ready instance > up 150: the tick at 10 ms wants 2 -> acts at 15 ms ->
    # provisioning 15-35 ms -> loading 35-65 ms -> active at 65 ms.  The tick at 20 ms counts
    # the pending instance as current (2) and, with still one ready, wants 3: active at 75 ms;
    # from 30 ms on the pool is at its max (3).
    res, st = run(two_per_tick(), num_instances=1, min_instances=1, max_instances=3, autoscale_up=150,
                  autoscale_down=1, **RATE)
    assert life_log(st) == [(15 * MS, 1, P), (25 * MS, 2, P), (35 * MS, 1, L), (45 * MS, 2, L), (65 * MS, 1, A),
                            (75 * MS, 2, A)]
    tk = ticks(st)
    assert tk[0] == (10 * MS, ScaleReason.UP, 1, 1, 2, 2)
    assert tk[1] == (20 * MS, ScaleReason.UP, 2, 1, 3, 3)
    assert tk[2] == (30 * MS, ScaleReason.AT_MAX, 3, 1, 3, 3)
    # a request reaches a new instance only once it serves
    routed = st.reqs["instance"]
    arrivals = st.reqs["arrival_us"]
    assert arrivals[routed == 1].min() > 65 * MS and arrivals[routed == 2].min() > 75 * MS
    assert res.state.scale_pools[0]["scale_ups"] == 2
    # the run ends with its last request's step (it starts at its arrival, 116 ms): the ticks
    # due later do not keep it alive
    assert st.loop[0]["clock_us"] == 116 * MS and ticks(st)[-1][0] == 110 * MS


def test_the_warm_up_multiplies_exactly_the_first_requests_steps():
    # warm-up factor 2 over 2 requests (curve step): the new instance's steps take 2 x 1160 µs
    # until 2 requests have completed there, then 1160 µs; it is active from the step after
    res, st = run(two_per_tick(), num_instances=1, min_instances=1, max_instances=2, autoscale_up=150,
                  autoscale_down=1, instance_warmup_factor=2, instance_warmup_requests=2, **RATE)
    reqs = st.reqs
    on_new = np.flatnonzero(reqs["instance"] == 1)
    took = (reqs["first_token_us"] - reqs["arrival_us"])[on_new]
    assert len(on_new) >= 3 and took[:2].tolist() == [2 * TINY_US, 2 * TINY_US]
    assert set(took[2:].tolist()) == {TINY_US}
    assert set((reqs["first_token_us"] - reqs["arrival_us"])[reqs["instance"] == 0].tolist()) == {TINY_US}
    warm = [row for row in life_log(st) if row[1] == 1 and row[2] in (W, A)]
    assert warm == [(65 * MS, 1, W), (int(reqs["arrival_us"][on_new[2]]), 1, A)]


def test_a_warm_up_counted_in_seconds_ends_at_its_time():
    _, st = run(two_per_tick(), num_instances=1, min_instances=1, max_instances=2, autoscale_up=150,
                autoscale_down=1, instance_warmup_factor=3, instance_warmup_seconds=0.02,
                instance_warmup_curve="linear", **RATE)
    assert [row for row in life_log(st) if row[2] in (W, A)] == [(65 * MS, 1, W), (85 * MS, 1, A)]
    reqs = st.reqs
    first = np.flatnonzero(reqs["instance"] == 1)[0]
    # linear: factor 3 - 2 x (elapsed / 20 ms) at the step's start
    x = (reqs["arrival_us"][first] - 65 * MS) / (20 * MS)
    assert reqs["first_token_us"][first] - reqs["arrival_us"][first] == int(TINY_US * (3 - 2 * x))


# ----------------------------------------------------------------------------- scale-down


def one_per_tick(until_ms=120):
    """One tiny request 1 ms after each 10 ms tick: 100 requests/s."""
    return workload([t * MS + 1 * MS for t in range(0, until_ms, 10)])


def test_scale_down_waits_for_every_tick_of_the_stabilization_window():
    # 100 req/s on 2 ready instances = 50 < down 60: every tick wants 1.  A 30 ms window spans
    # 4 ticks; the ticks before the first count as wishing the initial 2, so the tick at 40 ms
    # is the first whose window wants 1 throughout -> drains at 45 ms (idle: terminated at once)
    _, st = run(one_per_tick(), num_instances=2, min_instances=1, max_instances=2, autoscale_up=150,
                autoscale_down=60, **{**RATE, **TICKS, "stabilization_down_s": 0.03})
    reasons = [row[1] for row in ticks(st)]
    assert reasons[:4] == [ScaleReason.DOWN_HELD] * 3 + [ScaleReason.DOWN]
    assert life_log(st) == [(45 * MS, 1, D), (45 * MS, 1, T)]  # the newest of two idle instances
    after = st.reqs["arrival_us"] > 45 * MS
    assert (st.reqs["instance"][after] == 0).all()


def test_a_scale_down_without_window_acts_on_the_first_tick():
    _, st = run(one_per_tick(), num_instances=2, min_instances=1, max_instances=2, autoscale_up=150,
                autoscale_down=60, **{**RATE, **TICKS, "stabilization_down_s": 0})
    assert life_log(st)[:2] == [(15 * MS, 1, D), (15 * MS, 1, T)]


# ----------------------------------------------------------------------------- drain modes

# Two instances (max_num_seqs 1, round-robin) each run one long request and hold one waiting:
# a request of 160 prompt tokens and 50 outputs takes a 2600 µs prefill step and 49 decode
# steps of 1005 µs = 51845 µs.  r0 (t=0) and r2 (2 ms) go to instance 0, r1 (1 ms) and r3
# (3 ms) to instance 1.  The oscillator (period 1 tick) wants 3 at 10 ms (at max) and 1 at
# 20 ms: instance 1 (the newest) drains at 25 ms; a 1 s scale-up window keeps it from coming back.
LONG = 2600 + 49 * 1005
DRAIN = dict(num_instances=2, min_instances=1, max_instances=2, autoscaler="oscillator", autoscale_period_ticks=1,
             stabilization_up_s=1, scale_down="newest", routing_policy="round-robin", max_num_seqs=1)


def drain_run(mode, **extra):
    wl = workload([0, 1 * MS, 2 * MS, 3 * MS], prompt_len=160, output_len=50)
    return run(wl, **{**HAND, **DRAIN, "stabilization_down_s": 0, "drain": mode, **extra})


def test_drain_wait_lets_the_instance_finish_everything():
    res, st = drain_run("wait")
    ends = st.reqs["last_token_us"]
    assert st.reqs["instance"].tolist() == [0, 1, 0, 1]
    assert ends.tolist() == [LONG, 1 * MS + LONG, 2 * LONG, 1 * MS + 2 * LONG]
    assert life_log(st) == [(25 * MS, 1, D), (1 * MS + 2 * LONG, 1, T)]
    assert st.scale_pools[0]["redirected"] == 0 and st.scale_pools[0]["lost_tokens"] == 0


def test_drain_redirect_sends_the_waiting_request_back_through_routing():
    res, st = drain_run("redirect")
    ends = st.reqs["last_token_us"]
    # r3 leaves instance 1 at 25 ms and queues on instance 0 behind r2; r1 finishes on 1
    assert st.reqs["instance"].tolist() == [0, 1, 0, 0]
    assert ends.tolist() == [LONG, 1 * MS + LONG, 2 * LONG, 3 * LONG]
    assert life_log(st) == [(25 * MS, 1, D), (1 * MS + LONG, 1, T)]
    assert st.scale_pools[0]["redirected"] == 1 and st.scale_pools[0]["lost_tokens"] == 0


def test_drain_immediate_sends_everything_back_and_counts_the_lost_work():
    res, st = drain_run("immediate")
    # r1's prefill ran [1000, 3600], then decode steps of 1005: the one in progress at 25 ms
    # ends at 3600 + 22 x 1005 = 25710.  r3 went back at 25 ms, r1 at 25710 with 182 tokens
    # computed (160 + 22) and 23 generated: on instance 0 after r2 and r3, it recomputes 183
    # tokens (1000 + 1830 µs, emitting its 24th token) and decodes 26 more.
    evicted = 3600 + 22 * 1005
    assert st.reqs["instance"].tolist() == [0, 0, 0, 0]
    ends = st.reqs["last_token_us"].tolist()
    assert ends[:3] == [LONG, 3 * LONG + 2830 + 26 * 1005, 2 * LONG] and ends[3] == 3 * LONG
    assert life_log(st) == [(25 * MS, 1, D), (evicted, 1, T)]
    assert st.scale_pools[0]["redirected"] == 2 and st.scale_pools[0]["lost_tokens"] == 182
    assert st.reqs["generated"].tolist() == [50] * 4 and st.reqs["preemptions"].sum() == 0


def test_a_drain_timeout_redirects_what_is_still_waiting():
    _, st = drain_run("wait", drain_timeout_s=0.01)  # times out at 35 ms
    assert st.reqs["instance"].tolist() == [0, 1, 0, 0]
    assert st.scale_pools[0]["redirected"] == 1
    assert life_log(st) == [(25 * MS, 1, D), (1 * MS + LONG, 1, T)]


def test_a_terminated_row_comes_back_with_an_empty_cache():
    # the oscillator without windows: down at 20 ms (acts 25), up at 30 (acts 35: the same row,
    # a new life), down at 40 ...; every life of row 1 starts with nothing cached
    arrivals = [t * MS for t in range(0, 200, 3)]
    n = len(arrivals)
    prefix = np.tile(np.arange(1, 5, dtype=np.int64), (n, 1))  # every request shares a 4-block prefix
    keys = np.concatenate([prefix, np.arange(n, dtype=np.int64)[:, None] + 100], axis=1).ravel()
    wl = Workload(np.asarray(arrivals, np.int64), np.full(n, 80, np.int64), np.full(n, 1, np.int64), keys,
                  np.arange(n + 1, dtype=np.int64) * 5, BLOCK)
    res, st = run(wl, num_instances=2, min_instances=1, max_instances=2, autoscaler="oscillator",
                  autoscale_period_ticks=1, scale_down="newest", routing_policy="round-robin",
                  **{**TICKS, "stabilization_down_s": 0, "provisioning_delay_s": 0.001, "loading_delay_s": 0.001})
    log = life_log(st)
    lives = [t for t, i, s in log if i == 1 and s == A]
    assert len(lives) >= 3
    reqs = st.reqs
    for start in lives:  # the first request of each life finds no cached prefix there
        mine = np.flatnonzero((reqs["instance"] == 1) & (reqs["arrival_us"] >= start))
        if mine.size:
            assert reqs["cached_tokens"][mine[0]] == 0
    assert (reqs["cached_tokens"][reqs["instance"] == 0][1:] == 64).all()


# ----------------------------------------------------------------------------- the run's end and safety


def test_without_requests_left_the_ticks_stop():
    _, st = run(workload([0]), num_instances=1, min_instances=1, max_instances=2, autoscale_up=150,
                autoscale_down=1, **RATE)
    assert st.loop[0]["scale_records"] == 0  # the request ended before the first tick
    assert st.loop[0]["clock_us"] == 0  # (its one step started at 0)


def test_delays_drawn_from_a_normal_are_seeded_and_truncated_at_zero():
    common = dict(num_instances=1, min_instances=1, max_instances=3, autoscale_up=150, autoscale_down=1,
                  provisioning_delay_s="mean:0.02,std:0.05", **RATE)
    _, a = run(two_per_tick(300), **common)
    _, b = run(two_per_tick(300), **common)
    _, c = run(two_per_tick(300), simulation_seed=7, **common)
    assert life_log(a) == life_log(b) != life_log(c)
    starts = {i: t for t, i, s in life_log(a) if s == P}
    loaded = {i: t for t, i, s in life_log(a) if s == L}
    assert all(loaded[i] >= starts[i] for i in loaded)


def test_autoscaling_with_kv_tiers_is_refused():
    with pytest.raises(ConfigError, match="kv_tiers"):
        blis_fast.simulate(num_instances=1, max_instances=2, autoscaler="threshold", kv_cpu_blocks=100)


def test_a_traced_request_sent_back_is_logged_at_each_routing():
    res, st = drain_run("immediate", trace_level="decisions")
    log = st.route_log[:st.loop[0]["route_records"]]
    assert st.loop[0]["route_records"] == 6  # 4 requests, 2 of them routed again
    assert log["request"].tolist()[-2:] == [3, 1] and log["chosen_instance"].tolist()[-2:] == [0, 0]
