"""What a run reports (docs/semantics.md §9): summary field names and order, instance ids,
percentile definitions (numpy linear) for every group, ITL statistics against hand-expanded
samples, throughput, no NaN anywhere; and compat vs normal reporting (ITL samples, output
token counts, constant arrivals, truncated trace arrivals, records ordered by arrival)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import blis_fast
from blis_fast.workload import write_blis_trace
from builders import (
    COMPAT,
    HAND_STEPS,
    LOADED,
    SUMMARY_HEAD,
    assert_no_nan,
    lengths_workload,
    pct,
    sim,
    single,
    trace_sim,
)
from blis_fast_kernels.schema import RequestState


# ============================================================================ summary format, percentiles


def test_summary_field_order(any_loaded):
    for obj in [any_loaded.cluster, *any_loaded.instances]:
        assert list(obj)[: len(SUMMARY_HEAD)] == SUMMARY_HEAD
    doc = any_loaded.results_document()
    assert list(doc)[: len(SUMMARY_HEAD)] == SUMMARY_HEAD
    assert list(any_loaded.summary()) == ["cluster", "instances", "run", "adequacy"]


def test_instance_ids(loaded):
    assert loaded.cluster["instance_id"] == "cluster"
    assert [s["instance_id"] for s in loaded.instances] == ["instance_0", "instance_1", "instance_2"]


def _check_group_stats(obj, reqs, mask, cols):
    done = (reqs["state"] == RequestState.COMPLETED) & mask
    first = (reqs["first_token_us"] >= 0) & mask
    e2e = cols["e2e_us"][done]
    ttft = cols["ttft_us"][first]
    assert obj["e2e_mean_ms"] == pytest.approx(e2e.mean() / 1000.0 if e2e.size else 0.0, rel=1e-12, abs=0)
    assert obj["ttft_mean_ms"] == pytest.approx(ttft.mean() / 1000.0 if ttft.size else 0.0, rel=1e-12, abs=0)
    for p in (90, 95, 99):
        assert obj[f"e2e_p{p}_ms"] == pytest.approx(pct(e2e, p), rel=1e-12, abs=0)
        assert obj[f"ttft_p{p}_ms"] == pytest.approx(pct(ttft, p), rel=1e-12, abs=0)
    sd = cols["scheduling_delay_us"][mask]
    sd = sd[sd >= 0]
    assert obj["scheduling_delay_p99_ms"] == pytest.approx(pct(sd, 99), rel=1e-12, abs=0)


def test_percentiles_match_numpy_linear(any_loaded):
    r = any_loaded
    reqs = r.state.reqs
    cols = r.request_columns()
    _check_group_stats(r.cluster, reqs, np.ones(len(reqs), bool), cols)
    for i, s in enumerate(r.instances):
        _check_group_stats(s, reqs, reqs["instance"] == i, cols)


def _check_itl(obj, samples):
    samples = np.asarray(samples, dtype=np.int64)
    mean = samples.mean() / 1000.0 if samples.size else 0.0
    assert obj["itl_mean_ms"] == pytest.approx(mean, rel=1e-12, abs=0)
    for p in (90, 95, 99):
        assert obj[f"itl_p{p}_ms"] == pytest.approx(pct(samples, p), rel=1e-12, abs=0)


# Three requests at t = 0 on one instance (α = 0, β = (1000, 10, 100), L = 100 each, N = 3, 5, 9):
# prefill step 1000 + 10·300 = 4000; then decode steps with D = 3 (1300) ×2, D = 2 (1200) ×2,
# D = 1 (1100) ×4.  The samples, expanded by hand:
STAIR_BETA = [1000, 10, 100]
STAIR_N = [3, 5, 9]
STAIR_SAMPLES = [
    [1300, 1300],
    [1300, 1300, 1200, 1200],
    [1300, 1300, 1200, 1200, 1100, 1100, 1100, 1100],
]
STAIR_LAST_STEP = [1300, 1200, 1100]


def _stair(n_inst=1, a2=0.0, **kw):
    # instance k gets requests k, k + n_inst, ... (round robin): give each instance one copy
    arr, L, N = [], [], []
    for j in range(3):
        for _ in range(n_inst):
            arr.append(0)
            L.append(100)
            N.append(STAIR_N[j])
    wl = lengths_workload(arr, L, N)
    return sim(wl, alpha_coeffs=[0, 0, a2], beta_coeffs=STAIR_BETA, num_instances=n_inst, **kw)


@pytest.mark.parametrize("n_inst", [1, 2])
def test_itl_stats_equal_hand_expanded_samples(n_inst):
    r = _stair(n_inst)
    for j, req in enumerate(r.state.reqs[::n_inst]):
        assert req["first_token_us"] == 4000
        assert req["itl_sum_us"] == sum(STAIR_SAMPLES[j])
    flat = [x for s in STAIR_SAMPLES for x in s]
    _check_itl(r.cluster, flat * n_inst)
    for s in r.instances:
        _check_itl(s, flat)
    recs = r.request_records()
    for j in range(3):
        assert recs[j * n_inst]["itl_ms"] == pytest.approx(np.mean(STAIR_SAMPLES[j]) / 1000.0, rel=1e-12)
        assert recs[j * n_inst]["e2e_ms"] == (4000 + sum(STAIR_SAMPLES[j])) / 1000.0


def test_itl_stats_equal_hand_expanded_samples_compat():
    a2 = 70
    r = _stair(1, a2=a2, compat=COMPAT)
    samples = []
    for j in range(3):
        samples += [x + a2 for x in STAIR_SAMPLES[j]] + [STAIR_LAST_STEP[j] + a2]  # + extra at completion
    _check_itl(r.cluster, samples)
    recs = r.request_records()
    for j in range(3):
        e2e = 4000 + a2 + sum(x + a2 for x in STAIR_SAMPLES[j]) + STAIR_LAST_STEP[j] + a2
        assert recs[j]["e2e_ms"] == e2e / 1000.0
        assert recs[j]["itl_ms"] == pytest.approx((e2e - 4000 - a2) / (STAIR_N[j] - 1) / 1000.0, rel=1e-12)
    assert r.cluster["total_output_tokens"] == sum(STAIR_N) - 3


def test_itl_stats_cover_completed_requests_only_at_horizon():
    """Steps start at 0, 4000, 5300, 6600, 7800, ...; at H = 7799 request 0 is done (2 samples),
    requests 1 and 2 are running with 2 samples each.  ITL stats pool the completed request's
    samples only."""
    r = _stair(1, horizon=7799)
    states = r.state.reqs["state"].tolist()
    assert states == [RequestState.COMPLETED, RequestState.RUNNING, RequestState.RUNNING]
    assert r.state.reqs["generated"].tolist() == [3, 4, 4]
    assert r.cluster["completed_requests"] == (np.array(states) == RequestState.COMPLETED).sum()
    done_samples = [x for j in range(3) if states[j] == RequestState.COMPLETED for x in STAIR_SAMPLES[j]]
    _check_itl(r.cluster, done_samples)
    # TTFT covers every request with a first token, E2E only completed ones
    assert r.cluster["ttft_mean_ms"] == 4.0
    assert r.cluster["e2e_mean_ms"] == pytest.approx(
        np.mean([4000 + sum(STAIR_SAMPLES[j]) for j in range(3) if states[j] == RequestState.COMPLETED]) / 1000.0)


def test_itl_pooled_mean_matches_requests(any_loaded):
    """Normal mode: pooled ITL mean = Σ gaps / Σ (N−1) over completed requests."""
    reqs = any_loaded.state.reqs
    done = reqs["state"] == RequestState.COMPLETED
    count = int(np.maximum(reqs["generated"][done] - 1, 0).sum())
    total = int(reqs["itl_sum_us"][done].sum())
    assert any_loaded.cluster["itl_mean_ms"] == pytest.approx(total / count / 1000.0, rel=1e-12)
    c = any_loaded.cluster
    assert c["itl_p90_ms"] <= c["itl_p95_ms"] <= c["itl_p99_ms"]
    assert c["itl_p90_ms"] >= 5.1  # no sample below one decode step trunc(5000 + 100)
    for i, s in enumerate(any_loaded.instances):
        m = done & (reqs["instance"] == i)
        cnt = int(np.maximum(reqs["generated"][m] - 1, 0).sum())
        expect = int(reqs["itl_sum_us"][m].sum()) / cnt / 1000.0 if cnt else 0.0
        assert s["itl_mean_ms"] == pytest.approx(expect, rel=1e-12)


def test_per_request_itl_is_mean_gap(any_loaded):
    r = any_loaded
    reqs = r.state.reqs
    recs = {rec["requestID"]: rec for rec in r.request_records()}
    for i in np.flatnonzero(reqs["state"] == RequestState.COMPLETED)[:200]:
        g = int(reqs["generated"][i])
        expect = reqs["itl_sum_us"][i] / (g - 1) / 1000.0 if g > 1 else 0.0
        assert recs[f"request_{i}"]["itl_ms"] == pytest.approx(expect, rel=1e-12, abs=0)


def test_throughput_fields(loaded):
    c = loaded.cluster
    dur = c["vllm_estimated_duration_s"]
    assert dur == int(loaded.state.inst["last_step_end_us"].max()) / 1e6
    assert c["responses_per_sec"] == pytest.approx(c["completed_requests"] / dur)
    assert c["tokens_per_sec"] == pytest.approx(c["total_output_tokens"] / dur)
    assert c["total_input_tokens"] == int(loaded.state.reqs["prompt_len"][loaded.state.reqs["instance"] >= 0].sum())


def test_no_nan_anywhere(any_loaded):
    r = any_loaded
    assert_no_nan(r.summary())
    doc = r.results_document()
    assert_no_nan(doc)
    json.dumps(doc, allow_nan=False)
    t = r.requests_table()
    for name in t.column_names:
        col = t.column(name)
        if str(col.type) in ("double", "float"):
            arr = col.to_numpy(zero_copy_only=False)
            arr = arr[~np.isnan(arr)] if col.null_count else arr
            assert np.isfinite(arr).all(), name
            assert np.isnan(col.drop_null().to_numpy()).sum() == 0, name
    for k, v in r.request_columns().items():
        if v.dtype.kind == "f":
            assert np.isfinite(v).all(), k


# ============================================================================ compat mode


ALPHA, BETA = [100.7, 0.5, 50.9], [1000.9, 3.3, 7.7]  # q(200) = 200, prefill(200) = 1660, a2 = 50, decode = 1008


@pytest.mark.parametrize("N", [1, 2, 5])
def test_compat_single_request_reporting(N):
    normal = single(200, N, ALPHA, BETA)
    compat = single(200, N, ALPHA, BETA, compat=COMPAT)
    ttft = 200 + 1660 + 50
    # identical engine behaviour
    for f in ("first_token_us", "last_token_us", "generated", "first_scheduled_us"):
        assert normal.state.reqs[0][f] == compat.state.reqs[0][f]
    nrec, crec = normal.request_records()[0], compat.request_records()[0]
    assert nrec["ttft_ms"] == crec["ttft_ms"] == ttft / 1000.0
    # normal: E2E = TTFT + (N-1)·decode; ITL samples are the decode steps
    assert nrec["e2e_ms"] == (ttft + (N - 1) * 1008) / 1000.0
    assert nrec["itl_ms"] == (1.008 if N > 1 else 0.0)
    assert normal.cluster["total_output_tokens"] == N
    # compat: every sample is step + a2, plus one extra at completion (its completing step + a2)
    last_step = 1008 if N > 1 else 1660
    e2e = ttft + (N - 1) * (1008 + 50) + (last_step + 50)
    assert crec["e2e_ms"] == e2e / 1000.0
    assert crec["itl_ms"] == pytest.approx((e2e - ttft) / max(N - 1, 1) / 1000.0, rel=1e-12)
    assert compat.cluster["total_output_tokens"] == N - 1
    _check_itl(compat.cluster, [1058] * (N - 1) + [last_step + 50])
    _check_itl(normal.cluster, [1008] * (N - 1))
    assert compat.cluster["e2e_mean_ms"] == e2e / 1000.0


def test_compat_vs_normal_loaded_run():
    kw = dict(LOADED, num_requests=120)
    kw.pop("output_tokens_min")
    normal = blis_fast.simulate(arrival="constant", **kw)
    compat = blis_fast.simulate(compat=COMPAT, **kw)
    nreq, creq = normal.state.reqs, compat.state.reqs
    assert np.array_equal(nreq["arrival_us"], creq["arrival_us"])
    done = creq["state"] == RequestState.COMPLETED
    # total_output_tokens excludes each request's first token
    assert compat.cluster["total_output_tokens"] == int(np.maximum(creq["generated"] - 1, 0).sum())
    assert normal.cluster["total_output_tokens"] == int(nreq["generated"].sum())
    # per-request ITL = (E2E − TTFT) / max(N−1, 1)
    cols = compat.request_columns()
    n_out = compat.workload.output_len
    for rec in compat.request_records():
        i = int(rec["requestID"].split("_")[1])
        if done[i]:
            e2e, ttft = cols["e2e_us"][i], cols["ttft_us"][i]
            assert rec["itl_ms"] == pytest.approx((e2e - ttft) / max(n_out[i] - 1, 1) / 1000.0, rel=1e-12)
    # one extra sample per completed request: pooled mean = Σ samples / (Σ (N−1) + completed)
    count = int(np.maximum(creq["generated"][done] - 1, 0).sum()) + int(done.sum())
    assert compat.cluster["itl_mean_ms"] == pytest.approx(int(creq["itl_sum_us"][done].sum()) / count / 1000.0,
                                                          rel=1e-12)
    # normal-mode samples: pure token gaps
    ndone = nreq["state"] == RequestState.COMPLETED
    count = int(np.maximum(nreq["generated"][ndone] - 1, 0).sum())
    assert normal.cluster["itl_mean_ms"] == pytest.approx(int(nreq["itl_sum_us"][ndone].sum()) / count / 1000.0,
                                                          rel=1e-12)


def test_compat_distribution_arrivals_constant():
    rate = 7.0
    gap = int(1.0 / (rate / 1e6))
    compat = blis_fast.simulate(num_requests=30, rate=rate, compat=COMPAT)
    normal = blis_fast.simulate(num_requests=30, rate=rate)
    assert compat.state.reqs["arrival_us"].tolist() == [k * gap for k in range(30)]
    d = np.diff(normal.state.reqs["arrival_us"])
    assert len(set(d.tolist())) > 1  # Poisson by default
    # the same generated lengths
    assert np.array_equal(compat.workload.prompt_len, normal.workload.prompt_len)
    assert np.array_equal(compat.workload.output_len, normal.workload.output_len)


def test_compat_trace_arrivals_trunc_vs_round(tmp_path):
    p = tmp_path / "t.csv"
    arrival_s = [0.0000026, 0.5000007, 1.25]
    write_blis_trace(p, arrival_s, [list(range(1, 40))] * 3, [[1, 2, 3]] * 3)
    kw = HAND_STEPS
    normal = trace_sim(p, **kw)
    compat = trace_sim(p, compat=COMPAT, **kw)
    assert normal.state.reqs["arrival_us"].tolist() == [round(x * 1e6) for x in arrival_s] == [3, 500001, 1250000]
    assert compat.state.reqs["arrival_us"].tolist() == [int(x * 1e6) for x in arrival_s] == [2, 500000, 1250000]


def test_compat_records_sorted_by_arrival(tmp_path):
    p = tmp_path / "t.csv"
    write_blis_trace(p, [0.3, 0.1, 0.2], [[1, 2, 3]] * 3, [[1]] * 3)
    kw = HAND_STEPS
    compat = trace_sim(p, compat=COMPAT, **kw)
    assert [r["requestID"] for r in compat.request_records()] == ["request_1", "request_2", "request_0"]
    normal = trace_sim(p, **kw)
    assert [r["requestID"] for r in normal.request_records()] == ["request_0", "request_1", "request_2"]
