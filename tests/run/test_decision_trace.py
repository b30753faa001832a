"""Decision logs (settings.trace_level = TraceLevel.DECISIONS) and forced routing decisions
(settings.forced_request / forced_instance), at the level of the run's tables."""

from __future__ import annotations

import json

import numpy as np
import pytest

from blis_fast.config.sim import build_config
from blis_fast.results import Result
from blis_fast.run import build_state, build_workload, resolve, run_to_end
from blis_fast_kernels.schema import N_TRACE_ALTERNATIVES, RequestState, TraceLevel

LOADED = dict(num_requests=300, rate=60, num_instances=4, workload="chatbot", prefix_tokens=64, total_kv_blocks=120,
              max_num_seqs=16, seed=3)


def run(trace_level=0, forced=None, **kw):
    cfg = build_config({}, {**LOADED, **kw})
    setup = resolve(cfg)
    wl = build_workload(cfg)
    st = build_state(setup, wl, trace_level=trace_level)
    if forced is not None:
        st.settings["forced_request"], st.settings["forced_instance"] = forced
    st = run_to_end(st)
    return setup, wl, st


def doc(setup, wl, st):
    return json.dumps(Result(setup, wl, st).results_document(), sort_keys=True)


@pytest.mark.parametrize("routing", ["round-robin", "least-loaded", "weighted", "prefix-affinity"])
def test_tracing_changes_no_result_and_logs_every_decision(routing):
    plain = run(routing_policy=routing)
    traced = run(TraceLevel.DECISIONS, routing_policy=routing)
    assert doc(*plain) == doc(*traced)
    st = traced[2]
    lp = st.loop[0]
    routed = st.reqs["instance"] >= 0
    log = st.route_log[: int(lp["route_records"])]
    assert len(log) == int(routed.sum())
    assert np.array_equal(st.reqs["instance"][log["request"]], log["chosen_instance"])
    assert (np.diff(log["time_us"]) >= 0).all()
    assert (log["forced"] == 0).all()
    # the chosen instance has the policy's best score; alternatives follow in score order
    best_alt = log["alt_score"][:, 0]
    assert (log["chosen_score"] >= best_alt).all()
    alts = log["alt_instance"]
    assert alts.shape[1] == N_TRACE_ALTERNATIVES
    valid = alts >= 0
    assert (valid.sum(1) == np.minimum(log["candidates"] - 1, N_TRACE_ALTERNATIVES)).all()
    scores = np.where(valid, log["alt_score"], -np.inf)
    assert (np.diff(scores, axis=1) <= 0).all()
    assert not (alts == log["chosen_instance"][:, None]).any()
    admits = st.admit_log[: int(lp["admit_records"])]
    assert len(admits) == int(lp["injected"]) and admits["admitted"].all()
    pre = st.preempt_log[: int(lp["preempt_records"])]
    assert len(pre) == int(st.inst["preemptions"].sum()) > 0
    assert np.array_equal(np.bincount(pre["victim"], minlength=len(st.reqs)), st.reqs["preemptions"])


def test_untraced_run_allocates_no_decision_logs():
    st = run()[2]
    assert len(st.route_log) == len(st.admit_log) == len(st.preempt_log) == 1
    assert st.loop[0]["route_records"] == 0


def test_token_bucket_rejections_are_logged():
    st = run(TraceLevel.DECISIONS, admission_policy="token-bucket", token_bucket_capacity=3000,
             token_bucket_refill_rate=2000)[2]
    log = st.admit_log[: int(st.loop[0]["admit_records"])]
    rejected = log["request"][log["admitted"] == 0]
    assert len(rejected) == int(st.loop[0]["rejected"]) > 0
    assert (st.reqs["state"][rejected] == RequestState.REJECTED).all()
    assert (log["bucket_tokens"] >= 0).all() and (log["bucket_tokens"] <= 3000).all()


def test_forcing_one_decision_changes_only_that_decision():
    base = run(TraceLevel.DECISIONS, routing_policy="least-loaded")[2]
    r = 120
    was = int(base.reqs[r]["instance"])
    other = (was + 1) % LOADED["num_instances"]
    forced = run(TraceLevel.DECISIONS, forced=(r, other), routing_policy="least-loaded")[2]
    assert int(forced.reqs[r]["instance"]) == other
    log_b = base.route_log[: int(base.loop[0]["route_records"])]
    log_f = forced.route_log[: int(forced.loop[0]["route_records"])]
    k = int(np.flatnonzero(log_f["request"] == r)[0])
    assert log_f["forced"][k] == 1 and log_f["forced"].sum() == 1
    # everything decided before it is identical
    assert np.array_equal(log_b[:k], log_f[:k])
    assert not np.array_equal(base.reqs["first_token_us"], forced.reqs["first_token_us"])
