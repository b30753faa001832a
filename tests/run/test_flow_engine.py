"""Gateway flow control and request deadlines in the event loop, hand-computed to the µs
(kernels/engine/flow.py; docs/semantics.md §16; issue 25).

Every case runs llama-3.1-8b with blackbox step times alpha = (0, 0, 0) and beta = (1000,
10, 5): a step takes 1000 + 10 x prefill tokens + 5 x decode requests µs.  Prompts are 16
tokens, so a lone prefill step takes 1160 µs and a decode step of one request 1005 µs.
The tests read the State (``result.state``): requests, the failed-attempt log, the
gateway's decision log and the loop's counters.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import blis_fast
from blis_fast.config.sim import build_config
from blis_fast.run import RunSession, resolve
from blis_fast.workload import Workload
from blis_fast_kernels.kv.cache import kv_conserved
from blis_fast_kernels.schema import AttemptEnd, GatewayAction, RequestState

BLOCK = 16
HAND = dict(alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], check_invariants=True)
S = RequestState


def workload(arrivals_us, output_len=1, *, ttl_us=-1, sheddable=0, retries=0, backoff=(0.0, 1.0, 0.0),
             tenant=None, slo_class=None, slo_targets=None) -> Workload:
    """16-token prompts arriving at ``arrivals_us`` with distinct block keys; the deadline
    columns (scalars or one value per request) and one client whose backoff is
    ``backoff`` = (base µs, factor, jitter)."""
    n = len(arrivals_us)
    out = np.broadcast_to(np.asarray(output_len, np.int64), (n,)).copy()
    per = (16 + out) // BLOCK
    offsets = np.concatenate(([0], np.cumsum(per))).astype(np.int64)
    keys = np.arange(offsets[-1], dtype=np.int64) + 1000
    extra = {}
    if tenant is not None:
        extra["tenant"] = np.asarray(tenant, np.int32)
        extra["names"] = {"tenant": [f"t{k}" for k in range(max(tenant) + 1)]}
    if slo_class is not None:
        extra["slo_class"] = np.asarray(slo_class, np.int32)
        extra["names"] = {**extra.get("names", {}), "slo_class": list(slo_targets)}
        extra["slo_targets"] = slo_targets
    wl = Workload(np.asarray(arrivals_us, np.int64), np.full(n, 16, np.int64), out, keys, offsets, BLOCK, **extra)
    wl = dataclasses.replace(
        wl, ttl_us=np.broadcast_to(np.asarray(ttl_us, np.int64), (n,)).copy(),
        sheddable=np.broadcast_to(np.asarray(sheddable, np.uint8), (n,)).copy(),
        max_retries=np.broadcast_to(np.asarray(retries, np.int32), (n,)).copy(),
        retry_backoff=np.array([backoff], np.float64))
    wl.validate()
    return wl


def run(wl, **settings):
    """The end State of ``wl`` under HAND and ``settings``; checks that every instance's KV
    blocks are conserved and free and that nothing is left in flight."""
    st = blis_fast.simulate(workload=wl, **{**HAND, **settings}).state
    check_clean_end(st)
    return st


def check_clean_end(st):
    inst = st.inst
    assert (inst["kv_allocated"] == 0).all() and all(kv_conserved(st, i) for i in range(len(inst)))
    assert (inst["batch_len"] == 0).all() and (inst["wq_len"] == 0).all() and (inst["routed_pending"] == 0).all()
    assert st.loop[0]["gateway_depth"] == 0 and (st.flow_models["depth"] == 0).all()
    assert (st.flow_models["in_routing"] == 0).all()


def session(wl, **settings) -> RunSession:
    """A run of ``wl`` ready to be stepped with ``run_until``."""
    cfg = build_config({}, {**HAND, **settings})
    return RunSession(resolve(cfg), wl).prepare()


def attempts(st) -> list[tuple]:
    """(request, attempt, arrival, end, outcome, place, instance) of every failed attempt."""
    rows = st.attempt_log[:st.loop[0]["attempt_records"]]
    return [tuple(int(r[f]) for f in ("request", "attempt", "arrival_us", "end_us", "outcome", "place", "instance"))
            for r in rows]


def gateway(st, action=None) -> list[tuple]:
    """(time, request, tenant, action, depth, wait) of the gateway's decisions."""
    rows = st.gateway_log[:st.loop[0]["gateway_records"]]
    return [(int(r["time_us"]), int(r["request"]), int(r["tenant"]), int(r["action"]), int(r["depth"]),
             int(r["wait_us"])) for r in rows if action is None or r["action"] == action]


TO = AttemptEnd.TIMED_OUT


# ----------------------------------------------------------------------------- expiry in each place


def test_expiry_in_the_running_batch_frees_its_slot_and_blocks_and_the_instance_serves_on():
    # r0 (TTL 5 ms) and r1 (10 tokens) prefill together [0, 1320), then decode at 1010 µs a
    # step: [1320, 2330), [2330, 3340), [3340, 4350), [4350, 5360).  r0 expires at 5000, in
    # that step: its slot and blocks go at once; r1 decodes alone from 5360 (1005 µs a step).
    wl = workload([0, 0], output_len=[100, 10], ttl_us=[5000, -1])
    s = session(wl).run_until(4999)
    st = s.state
    assert st.reqs["state"].tolist() == [S.RUNNING, S.RUNNING] and st.inst[0]["batch_len"] == 2
    held = int(st.reqs[0]["blocks_held"])
    before = int(st.inst[0]["kv_allocated"])
    assert held > 0
    st = s.run_until(5000).state
    assert st.reqs["state"].tolist() == [S.TIMED_OUT, S.RUNNING]
    assert st.inst[0]["batch_len"] == 1 and st.inst[0]["kv_allocated"] == before - held
    assert st.reqs[0]["blocks_held"] == 0 and kv_conserved(st, 0)
    st = s.run().state
    check_clean_end(st)
    assert st.reqs["state"].tolist() == [S.TIMED_OUT, S.COMPLETED]
    assert st.reqs[1]["last_token_us"] == 5360 + 5 * 1005
    assert attempts(st) == [(0, 0, 0, 5000, TO, S.RUNNING, 0)]
    assert (st.loop[0]["timeouts"], st.loop[0]["injected"], st.loop[0]["retries"]) == (1, 2, 0)
    assert st.flow_reqs["timeouts"].tolist() == [1, 0]


def test_expiry_in_the_wait_queue_leaves_the_queue_to_the_next():
    # one slot: r0 runs [0, 1160) + 4 decode steps -> 5180; r1 (TTL 2 ms) and r2 wait behind it
    wl = workload([0, 0, 100], output_len=[5, 1, 1], ttl_us=[-1, 2000, -1])
    s = session(wl, max_num_seqs=1).run_until(1999)
    assert s.state.inst[0]["wq_len"] == 2
    st = s.run_until(2000).state
    assert st.inst[0]["wq_len"] == 1 and st.inst[0]["wq_head"] == 2 and st.reqs[1]["state"] == S.TIMED_OUT
    st = s.run().state
    check_clean_end(st)
    assert st.reqs["state"].tolist() == [S.COMPLETED, S.TIMED_OUT, S.COMPLETED]
    assert st.reqs[2]["first_token_us"] == 5180 + 1160
    assert attempts(st) == [(1, 0, 0, 2000, TO, S.QUEUED, 0)]


def test_expiry_while_routed_frees_the_routed_slot_and_its_queued_event_is_stale():
    # alpha0 = 5 ms between routing and the wait queue: r0 (TTL 1 ms) expires on its way
    wl = workload([0, 0], ttl_us=[1000, -1])
    s = session(wl, alpha_coeffs=[5000, 0, 0]).run_until(999)
    assert s.state.inst[0]["routed_pending"] == 2
    st = s.run_until(1000).state
    assert st.inst[0]["routed_pending"] == 1 and st.reqs[0]["state"] == S.TIMED_OUT
    st = s.run().state
    check_clean_end(st)
    # r1 prefills alone (16 tokens, not 32): r0 never reached the instance
    assert st.reqs["state"].tolist() == [S.TIMED_OUT, S.COMPLETED]
    assert st.inst[0]["steps"] == 1 and st.reqs[0]["first_token_us"] == -1
    assert attempts(st) == [(0, 0, 0, 1000, TO, S.ROUTED, 0)]


def test_expiry_while_admitting_ends_the_request_and_its_admission_is_stale():
    wl = workload([0, 0], ttl_us=[1000, -1])
    st = run(wl, admission_latency=3000)
    assert st.reqs["state"].tolist() == [S.TIMED_OUT, S.COMPLETED]
    assert st.reqs[1]["first_token_us"] == 3000 + 1160 and st.inst[0]["steps"] == 1
    assert attempts(st) == [(0, 0, 0, 1000, TO, S.ADMITTING, -1)]


def test_expiry_while_released_to_routing_gives_the_routing_place_back():
    # free-slot, routing 3 ms: r0 is released at once and expires before its routing decision
    wl = workload([0, 0], ttl_us=[1000, -1])
    s = session(wl, flow_control="free-slot", routing_latency=3000).run_until(999)
    assert s.state.flow_models[0]["in_routing"] == 1 and s.state.loop[0]["gateway_depth"] == 1
    st = s.run_until(1000).state
    # its place went to r1 at once: r1 left the gateway queue and is the one released now
    assert st.reqs["state"].tolist() == [S.TIMED_OUT, S.ADMITTING] and st.flow_reqs[1]["gw_leave_us"] == 1000
    assert st.flow_models[0]["in_routing"] == 1 and st.loop[0]["gateway_depth"] == 0
    assert st.flow_reqs["routing"].tolist() == [0, 1]
    st = s.run().state
    check_clean_end(st)
    # r1 waited at the gateway until r0's place freed at 1000, then routing took 3 ms
    assert st.reqs["state"].tolist() == [S.TIMED_OUT, S.COMPLETED]
    assert st.reqs[1]["first_token_us"] == 1000 + 3000 + 1160
    assert attempts(st) == [(0, 0, 0, 1000, TO, S.ADMITTING, -1)]


def test_expiry_in_the_gateway_queue_takes_it_out_of_the_queue():
    # concurrency limit 1: r0 runs [0, 1160) + 9 decodes -> 10205; r1 (TTL 2 ms) and r2 wait
    wl = workload([0, 0, 100], output_len=[10, 1, 1], ttl_us=[-1, 2000, -1])
    s = session(wl, flow_control="concurrency", flow_concurrency_limit=1).run_until(1999)
    assert s.state.flow_models[0]["depth"] == 2 and s.state.loop[0]["gateway_depth"] == 2
    st = s.run_until(2000).state
    assert st.flow_models[0]["depth"] == 1 and st.loop[0]["gateway_depth"] == 1
    st = s.run().state
    check_clean_end(st)
    assert st.reqs["state"].tolist() == [S.COMPLETED, S.TIMED_OUT, S.COMPLETED]
    assert st.reqs[2]["first_token_us"] == 10205 + 1160
    assert attempts(st) == [(1, 0, 0, 2000, TO, S.GATEWAY, -1)]
    assert st.attempt_log[0]["gw_wait_us"] == 2000 and st.flow_reqs[1]["gw_wait_total_us"] == 2000
    assert st.flow_reqs[2]["gw_wait_us"] == 10205 - 100 and st.loop[0]["gateway_peak"] == 2


# ----------------------------------------------------------------------------- retries


def test_retries_arrive_after_base_times_factor_to_the_k():
    # every attempt times out while admitting (TTL 1 ms, admission 3 ms); backoff 10 ms x 2^k
    wl = workload([0], ttl_us=1000, retries=3, backoff=(10_000.0, 2.0, 0.0))
    st = run(wl, admission_latency=3000)
    arrivals = [0, 1000 + 10_000, 12_000 + 20_000, 33_000 + 40_000]
    assert attempts(st) == [(0, k, a, a + 1000, TO, S.ADMITTING, -1) for k, a in enumerate(arrivals)]
    assert st.reqs[0]["state"] == S.TIMED_OUT and st.reqs[0]["arrival_us"] == arrivals[-1]
    fr = st.flow_reqs[0]
    assert (fr["attempt"], fr["first_arrival_us"], fr["timeouts"]) == (3, 0, 4)
    lp = st.loop[0]
    assert (lp["retries"], lp["timeouts"], lp["injected"]) == (3, 4, 1)


def test_retries_of_attempts_cancelled_on_their_way_fit_the_event_heap():
    # each attempt times out while admitting and retries at once: the stale admissions of
    # the failed attempts (due at 300, 400, 500) are still in the heap with the retry's own
    wl = workload([0] * 12, ttl_us=100, retries=2, backoff=(0.0, 1.0, 0.0))
    st = run(wl, admission_latency=300)
    assert (st.reqs["state"] == S.TIMED_OUT).all() and st.loop[0]["timeouts"] == 36
    assert sorted(attempts(st)) == sorted((r, k, 100 * k, 100 * k + 100, TO, S.ADMITTING, -1)
                                          for r in range(12) for k in range(3))


def test_a_retry_that_completes_keeps_its_last_attempt_on_the_row():
    # TTL 3 ms: the first attempt queues behind a 10-token request and times out at 3000;
    # the retry arrives at 3000 + 500 and waits again... r0 finishes at 10205, so a 12 ms
    # backoff makes the second attempt arrive at 15000 to an idle instance
    wl = workload([0, 0], output_len=[10, 1], ttl_us=[-1, 3000], retries=[0, 1], backoff=(12_000.0, 1.0, 0.0))
    st = run(wl, max_num_seqs=1)
    assert st.reqs["state"].tolist() == [S.COMPLETED, S.COMPLETED]
    assert attempts(st) == [(1, 0, 0, 3000, TO, S.QUEUED, 0)]
    assert st.reqs[1]["arrival_us"] == 15_000 and st.reqs[1]["first_token_us"] == 15_000 + 1160
    assert st.flow_reqs[1]["first_arrival_us"] == 0 and st.flow_reqs[1]["attempt"] == 1


def test_jittered_backoff_is_deterministic_and_within_its_range():
    wl = workload([0, 0, 0, 0], ttl_us=1000, retries=4, backoff=(10_000.0, 3.0, 0.5))

    def gaps(seed):
        st = run(wl, admission_latency=3000, seed=seed)
        rows = attempts(st)
        assert len(rows) == 4 * 5
        ends = {(r, k): end for r, k, _, end, *_ in rows}
        # the gap between an attempt's end and the next attempt's arrival, per (request, k)
        return {(r, k - 1): arrival - ends[(r, k - 1)] for r, k, arrival, *_ in rows if k > 0}

    first = gaps(7)
    assert gaps(7) == first
    for (r, k), gap in first.items():
        mid = 10_000 * 3 ** k
        assert int(mid * 0.5) <= gap <= int(mid * 1.5), (r, k, gap)
    assert len(set(first.values())) > 1  # (each request and retry has its own draw)
    assert gaps(8) != first


# ----------------------------------------------------------------------------- shedding and dispatch


def test_shedding_hits_only_sheddable_requests_and_only_while_saturated():
    # concurrency limit 1: r0 runs until 1160 + 4 x 1005 = 5180; r1 (sheddable) is shed,
    # r2 (not) waits; r3 (sheddable) arrives at 20 ms to an idle instance and is served
    wl = workload([0, 100, 200, 20_000], output_len=[5, 1, 1, 1], sheddable=[1, 1, 0, 1])
    st = run(wl, flow_control="concurrency", flow_concurrency_limit=1, trace_level="decisions")
    assert st.reqs["state"].tolist() == [S.COMPLETED, S.SHED, S.COMPLETED, S.COMPLETED]
    assert attempts(st) == [(1, 0, 100, 100, AttemptEnd.SHED, S.GATEWAY, -1)]
    assert (st.loop[0]["sheds"], st.flow_models[0]["sheds"], st.loop[0]["rejected"]) == (1, 1, 0)
    assert gateway(st) == [(100, 1, 0, GatewayAction.SHED, 0, 0), (200, 2, 0, GatewayAction.QUEUED, 1, 0),
                           (5180, 2, 0, GatewayAction.DISPATCHED, 0, 4980)]


def test_round_robin_fairness_alternates_tenants():
    # one slot at a time; tenant 0 queues four requests before tenant 1 queues four
    arrivals = [0, 10, 20, 30, 40, 50, 60, 70, 80]
    tenant = [0, 0, 0, 0, 0, 1, 1, 1, 1]
    wl = workload(arrivals, tenant=tenant)
    base = dict(flow_control="concurrency", flow_concurrency_limit=1, trace_level="decisions")
    fair = run(wl, gateway_fairness="round-robin", **base)
    assert [row[2] for row in gateway(fair, GatewayAction.DISPATCHED)] == [0, 1, 0, 1, 0, 1, 0, 1]
    assert [row[1] for row in gateway(fair, GatewayAction.DISPATCHED)] == [1, 5, 2, 6, 3, 7, 4, 8]
    strict = run(wl, **base)
    assert [row[1] for row in gateway(strict, GatewayAction.DISPATCHED)] == [1, 2, 3, 4, 5, 6, 7, 8]


TARGETS = {"relaxed": {"ttft_ms": 1000.0}, "urgent": {"ttft_ms": 10.0}}


def test_deadline_dispatch_releases_the_earliest_ttft_deadline_first():
    # r0 occupies the slot; r1, r2 (relaxed: deadline + 1 s) queue before r3 (urgent: + 10 ms)
    wl = workload([0, 10, 20, 30], slo_class=[0, 0, 0, 1], slo_targets=TARGETS)
    base = dict(flow_control="concurrency", flow_concurrency_limit=1, trace_level="decisions")
    st = run(wl, dispatch_order="deadline", **base)
    assert [row[1] for row in gateway(st, GatewayAction.DISPATCHED)] == [3, 1, 2]
    fifo = run(wl, **base)
    assert [row[1] for row in gateway(fifo, GatewayAction.DISPATCHED)] == [1, 2, 3]


def test_priority_dispatch_releases_the_highest_priority_first():
    wl = workload([0, 10, 20, 30], slo_class=[0, 0, 0, 1], slo_targets=TARGETS)
    st = run(wl, flow_control="concurrency", flow_concurrency_limit=1, trace_level="decisions",
             dispatch_order="priority", priority_policy="slo-based", slo_class_weights=[0, 1000])
    assert [row[1] for row in gateway(st, GatewayAction.DISPATCHED)] == [3, 1, 2]


# ----------------------------------------------------------------------------- the detectors


def test_the_concurrency_limit_holds_back_what_exceeds_it():
    # limit 2 on one instance: r0, r1 prefill together [0, 1320); r2 waits for a slot
    wl = workload([0, 0, 0])
    st = run(wl, flow_control="concurrency", flow_concurrency_limit=2)
    assert st.loop[0]["gateway_peak"] == 1 and st.flow_models[0]["dispatched"] == 1
    assert st.reqs["first_token_us"].tolist() == [1320, 1320, 1320 + 1160]
    assert st.flow_reqs["gw_wait_us"].tolist() == [0, 0, 1320]


def test_the_utilization_detector_saturates_at_its_queue_threshold():
    # one slot, queue threshold 1: r1 waiting at the instance saturates it; r2 stays at the gateway
    wl = workload([0, 10, 20])
    st = run(wl, flow_control="utilization", flow_queue_threshold=1, max_num_seqs=1)
    assert st.loop[0]["gateway_peak"] == 1 and st.flow_reqs["gw_enter_us"].tolist() == [-1, -1, 20]
    assert st.reqs["first_token_us"].tolist() == [1160, 2320, 3480]
    loose = run(wl, flow_control="utilization", flow_queue_threshold=2, max_num_seqs=1)
    assert loose.loop[0]["gateway_peak"] == 0


def test_the_utilization_detector_saturates_at_its_kv_threshold():
    # 40 KV blocks; r0 (a 100-token prompt, 10 tokens out) holds 7 of them (> 10 % of 40)
    # while it runs: r1 waits at the gateway until r0 is done
    wl = workload([0, 10], output_len=[10, 1])
    wl = dataclasses.replace(wl, prompt_len=np.array([100, 16], np.int64),
                             block_keys=np.arange(7, dtype=np.int64) + 1000, key_offsets=np.array([0, 6, 7]))
    wl.validate()
    st = run(wl, flow_control="utilization", flow_kv_threshold=0.1, total_kv_blocks=40)
    assert st.loop[0]["gateway_peak"] == 1 and st.flow_reqs[1]["gw_enter_us"] == 10
    assert st.reqs[1]["first_token_us"] > st.reqs[0]["last_token_us"]
    plain = run(wl, flow_control="utilization", total_kv_blocks=40)  # (threshold 0.8)
    assert plain.loop[0]["gateway_peak"] == 0 and plain.reqs[1]["first_token_us"] < plain.reqs[0]["last_token_us"]


def test_free_slot_dispatches_to_free_instances_only():
    # two one-slot instances, four requests at once: two run, two wait at the gateway
    wl = workload([0, 0, 0, 0], output_len=[3, 1, 1, 1])
    st = run(wl, flow_control="free-slot", max_num_seqs=1, num_instances=2)
    assert st.loop[0]["gateway_peak"] == 2
    # r0 keeps one instance until 1160 + 2 x 1005; r2 and r3 follow r1 on the other
    assert st.reqs["first_token_us"].tolist() == [1160, 1160, 2320, 3480]
    assert st.reqs["instance"][1:].tolist() == [st.reqs["instance"][1]] * 3
    assert (st.reqs["queued_us"] == st.reqs["first_scheduled_us"]).all()  # (nobody waits at an instance)


@pytest.mark.parametrize("routing_latency", [0, 700, 2500])
def test_free_slot_with_routing_latency_never_over_dispatches(routing_latency):
    # 20 requests on three one-slot instances: a released request always finds a free slot
    rng = np.random.default_rng(routing_latency)
    arrivals = np.sort(rng.integers(0, 20_000, 20))
    wl = workload(arrivals, output_len=rng.integers(1, 6, 20))
    st = run(wl, flow_control="free-slot", max_num_seqs=1, num_instances=3, routing_latency=routing_latency)
    reqs = st.reqs
    assert (reqs["state"] == S.COMPLETED).all()
    assert (reqs["queued_us"] == reqs["first_scheduled_us"]).all()
    assert st.flow_models[0]["dispatched"] + np.count_nonzero(st.flow_reqs["gw_enter_us"] < 0) >= 20
