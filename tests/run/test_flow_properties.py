"""Flow control and deadlines' invariants on random workloads, TTLs, retries and detectors
(kernels/engine/flow.py; issue 25): every request ends in one place (completed, rejected,
dropped, timed out or shed -- unfinished only at a horizon), every KV block is free and the
gateway empty at the end, the clock never goes back, an attempt count never exceeds
1 + retries, the reference path that visits every running request every step gives the
same run, and the same run twice is the same bytes.  (The hand-computed cases are
tests/run/test_flow_engine.py.)"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from blis_fast.config.sim import build_config
from blis_fast.results import Result
from blis_fast.run import build_state, resolve, run_to_end
from blis_fast_kernels.kv.cache import kv_conserved
from blis_fast_kernels.schema import RequestState, Status
from builders import lengths_workload

S = RequestState
REQ_FIELDS = ("state", "arrival_us", "instance", "computed", "generated", "blocks_held", "itl_sum_us", "first_token_us",
              "last_token_us", "last_token_step", "run_start_step", "preemptions", "cached_tokens", "queued_us",
              "first_scheduled_us")
ENDED = (S.COMPLETED, S.REJECTED, S.DROPPED, S.TIMED_OUT, S.SHED)


def random_workload(p):
    """``p["n"]`` requests: random arrivals, prompts, outputs, tenants, SLO classes and
    deadline columns (TTLs, sheddable only with a detector, retries with a backoff)."""
    rng = np.random.default_rng(p["seed"])
    n = p["n"]
    arrival = np.sort(rng.integers(0, p["span_us"], n)).astype(np.int64)
    wl = lengths_workload(arrival, rng.integers(1, 120, n), rng.integers(1, 30, n), seed=p["seed"],
                          tenant=rng.integers(0, 2, n), slo_class=rng.integers(0, 2, n))
    wl = dataclasses.replace(wl, names={"tenant": ["a", "b"], "slo_class": ["fast", "slow"]},
                             slo_targets={"fast": {"ttft_ms": 5.0}, "slow": {"ttft_ms": 500.0}})
    ttl = np.where(rng.random(n) < p["ttl_share"], rng.integers(1, p["ttl_max_us"], n), -1).astype(np.int64)
    shed = (rng.random(n) < 0.3) & (p["flow_control"] != "never")
    retries = np.where((ttl > 0) | shed, rng.integers(0, 3, n), 0).astype(np.int32)
    return dataclasses.replace(wl, ttl_us=ttl, sheddable=shed.astype(np.uint8), max_retries=retries,
                               retry_backoff=np.array([[p["backoff_us"], 2.0, p["jitter"]]]))


flow_settings = hs.fixed_dictionaries({
    "seed": hs.integers(0, 1000),
    "n": hs.integers(1, 40),
    "span_us": hs.sampled_from([1, 20_000, 200_000]),
    "ttl_share": hs.sampled_from([0.0, 0.5, 1.0]),
    "ttl_max_us": hs.sampled_from([2_000, 30_000, 300_000]),
    "backoff_us": hs.sampled_from([0.0, 1_000.0, 20_000.0]),
    "jitter": hs.sampled_from([0.0, 0.5]),
    "flow_control": hs.sampled_from(["never", "concurrency", "utilization", "free-slot"]),
    "dispatch_order": hs.sampled_from(["fifo", "deadline"]),
    "gateway_fairness": hs.sampled_from(["strict", "round-robin"]),
    "num_instances": hs.integers(1, 3),
    "max_num_seqs": hs.sampled_from([1, 2, 8]),
    "total_kv_blocks": hs.sampled_from([12, 40, 400]),
    "routing_latency": hs.sampled_from([0, 0, 700]),
    "admission_latency": hs.sampled_from([0, 300]),
    "alpha_coeffs": hs.sampled_from([[0, 0, 0], [100, 1, 40]]),
    "horizon": hs.sampled_from([None, None, None, 20_000]),
    "enable_prefix_caching": hs.booleans(),
})


def overrides(p) -> dict:
    out = {k: p[k] for k in ("num_instances", "max_num_seqs", "total_kv_blocks", "routing_latency",
                             "admission_latency", "alpha_coeffs", "enable_prefix_caching")}
    out.update(beta_coeffs=[1000, 10, 5], check_invariants=True, trace_level="decisions")
    if p["horizon"] is not None:
        out["horizon"] = p["horizon"]
    if p["flow_control"] != "never":
        out.update(flow_control=p["flow_control"], dispatch_order=p["dispatch_order"],
                   gateway_fairness=p["gateway_fairness"])
        if p["flow_control"] == "concurrency":
            out["flow_concurrency_limit"] = 2
        elif p["flow_control"] == "utilization":
            out["flow_queue_threshold"] = 1
    return out


def runs(wl, settings_, skipping):
    setup = resolve(build_config({}, settings_))
    state = run_to_end(build_state(setup, wl, event_skipping=skipping))
    return state, json.dumps(Result(setup, wl, state).results_document(), sort_keys=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flow_settings)
def test_requests_and_blocks_are_conserved_and_runs_repeat(p):
    wl = random_workload(p)
    kw = overrides(p)
    st, doc = runs(wl, kw, True)
    reqs, fr, lp = st.reqs, st.flow_reqs, st.loop[0]
    assert lp["status"] == Status.OK  # (a clock going back stops the run with CLOCK_BACKWARDS)
    horizon = p["horizon"] is not None
    ended = np.isin(reqs["state"], ENDED)
    assert ended.all() or horizon, reqs["state"][~ended]
    assert all(kv_conserved(st, i) for i in range(len(st.inst)))
    if not horizon:
        assert (st.inst["kv_allocated"] == 0).all() and (st.inst["batch_len"] == 0).all()
        assert lp["gateway_depth"] == 0 and (st.flow_models["depth"] == 0).all()
        assert (st.flow_models["in_routing"] == 0).all() and lp["injected"] == len(wl)
    # attempts: at most 1 + retries each; every failed one logged once, in time order
    assert (fr["attempt"] <= fr["max_retries"]).all()
    log = st.attempt_log[:lp["attempt_records"]]
    assert (np.bincount(log["request"], minlength=len(wl)) <= 1 + fr["max_retries"]).all()
    assert (np.diff(log["end_us"]) >= 0).all() and (log["end_us"] >= log["arrival_us"]).all()
    assert lp["timeouts"] == fr["timeouts"].sum() and lp["sheds"] == fr["sheds"].sum()
    assert lp["attempt_records"] == lp["timeouts"] + lp["sheds"] and lp["retries"] == fr["attempt"].sum()
    assert (reqs["state"] != S.SHED).all() or p["flow_control"] != "never"
    assert not fr["sheddable"][fr["sheds"] > 0].size or fr["sheddable"][fr["sheds"] > 0].all()
    gw = st.gateway_log[:lp["gateway_records"]]
    assert (np.diff(gw["time_us"]) >= 0).all()
    assert (reqs["arrival_us"] >= fr["first_arrival_us"]).all()
    # the reference path (every running request visited every step) and a second run agree
    ref, ref_doc = runs(wl, kw, False)
    assert ref_doc == doc
    for f in REQ_FIELDS:  # (the calendar's own fields differ by design: tests/run/test_event_skipping.py)
        assert np.array_equal(ref.reqs[f], reqs[f]), f
    for name in ("flow_reqs", "attempt_log", "gateway_log", "flow_models"):
        assert getattr(ref, name).tobytes() == getattr(st, name).tobytes(), name
    again, again_doc = runs(wl, kw, True)
    assert again_doc == doc
    for name in ("reqs", "flow_reqs", "attempt_log", "gateway_log", "flow_models", "inst", "loop"):
        assert getattr(again, name).tobytes() == getattr(st, name).tobytes(), name
