"""Exact microseconds (docs/semantics.md §2, §7): the worked single-request cases (shipped and
hand-picked coefficients), event ordering at equal times, admission/routing latencies, and
horizon semantics (an event at t == H runs, one after it does not)."""

from __future__ import annotations

import functools

import pytest
import yaml

import blis_fast
from builders import (
    COMPAT,
    HAND_STEPS,
    LLAMA,
    ROOT,
    assert_no_nan,
    lengths_workload,
    prompts_workload,
    sim,
    single,
    trunc,
)
from blis_fast_kernels.schema import RequestState


@functools.cache  # read once: parsing the 40 KB YAML takes 0.2 s
def llama_h100_tp1_coeffs():
    """The first llama-3.1-8b-instruct / H100 / TP1 coefficient set of configs/defaults.yaml."""
    data = yaml.safe_load((ROOT / "configs" / "defaults.yaml").read_text())
    for m in data["models"]:
        if m["id"] == LLAMA and m["GPU"] == "H100" and m["tensor_parallelism"] == 1:
            return m["alpha_coeffs"], m["beta_coeffs"]
    raise AssertionError("no llama-3.1-8b H100 TP1 coefficients in configs/defaults.yaml")


# ============================================================================ worked single request


@pytest.mark.parametrize("L", [1, 15, 16, 17, 500, 2048])
@pytest.mark.parametrize("N", [1, 2, 37])
def test_single_request_real_llama_coefficients(L, N):
    alpha, beta = llama_h100_tp1_coeffs()
    arrival = 1_234_567
    wl = lengths_workload([arrival], [L], [N])
    r = sim(wl, model=LLAMA, hardware="H100", tp=1)
    # the run really used the shipped coefficient set
    assert r.run_info()["alpha_coeffs"] == pytest.approx(alpha, rel=0, abs=0)
    assert r.run_info()["beta_coeffs"] == pytest.approx(beta, rel=0, abs=0)
    q = trunc(alpha[0] + alpha[1] * float(L))
    step = trunc(beta[0] + beta[1] * float(L) + beta[2] * 0.0)
    a2 = trunc(alpha[2])
    dec = trunc(beta[0] + beta[1] * 0.0 + beta[2] * 1.0)
    req = r.state.reqs[0]
    assert req["queued_us"] == arrival + q
    assert req["first_scheduled_us"] == arrival + q
    assert req["first_token_us"] - arrival == q + step + a2
    assert req["state"] == RequestState.COMPLETED and req["generated"] == N
    e2e = q + step + a2 + (N - 1) * dec
    rec = r.request_records()[0]
    assert rec["ttft_ms"] == (q + step + a2) / 1000.0
    assert rec["e2e_ms"] == e2e / 1000.0
    assert rec["scheduling_delay_ms"] == q / 1000.0
    assert rec["itl_ms"] == (dec / 1000.0 if N > 1 else 0.0)
    c = r.cluster
    assert c["ttft_mean_ms"] == c["ttft_p99_ms"] == (q + step + a2) / 1000.0
    assert c["e2e_mean_ms"] == c["e2e_p90_ms"] == e2e / 1000.0
    assert c["vllm_estimated_duration_s"] == (arrival + q + step + (N - 1) * dec) / 1e6
    assert c["total_output_tokens"] == N and c["total_input_tokens"] == L
    assert req["cached_tokens"] == 0
    assert c["engine_steps"] == N


@pytest.mark.parametrize("alpha, beta", [
    ([100.7, 0.5, 50.9], [1000.9, 3.3, 7.7]),
    ([0.0, 0.0, 0.0], [1.0, 0.0, 0.0]),
    ([999.99, 1.999, 0.999], [12345.678, 0.001, 0.999]),
])
@pytest.mark.parametrize("L, N", [(200, 5), (33, 1), (2048, 12)])
def test_single_request_hand_picked_coefficients(alpha, beta, L, N):
    arrival = 5000
    r = single(L, N, alpha, beta, arrival=arrival)
    q = trunc(alpha[0] + alpha[1] * L)
    step = trunc(beta[0] + beta[1] * L)
    a2 = trunc(alpha[2])
    dec = trunc(beta[0] + beta[2] * 1.0)
    ttft = q + step + a2
    e2e = ttft + (N - 1) * dec
    req = r.state.reqs[0]
    assert req["first_token_us"] - arrival == ttft
    assert req["last_token_us"] - arrival == e2e
    assert req["itl_sum_us"] == (N - 1) * dec
    c = r.cluster
    assert c["ttft_mean_ms"] == ttft / 1000.0
    assert c["e2e_mean_ms"] == e2e / 1000.0
    if N > 1:
        assert c["itl_mean_ms"] == c["itl_p99_ms"] == dec / 1000.0
    else:
        assert c["itl_mean_ms"] == 0.0


def test_single_request_worked_numbers():
    """The hand computation, spelled out: α = (100.7, 0.5, 50.9), β = (1000.9, 3.3, 7.7), L = 200, N = 5."""
    r = single(200, 5, [100.7, 0.5, 50.9], [1000.9, 3.3, 7.7])
    rec = r.request_records()[0]
    # q = trunc(200.7) = 200; prefill step = trunc(1660.9) = 1660; a2 = 50; decode = trunc(1008.6) = 1008
    assert rec["ttft_ms"] == 1.910
    assert rec["e2e_ms"] == 5.942  # 1910 + 4·1008
    assert rec["itl_ms"] == 1.008
    assert rec["scheduling_delay_ms"] == 0.2


def test_zero_output_tokens_behaves_as_one():
    wl = lengths_workload([0, 0], [100, 100], [0, 1])
    r = sim(wl, **HAND_STEPS, num_instances=2)
    a, b = r.state.reqs
    assert a["state"] == b["state"] == RequestState.COMPLETED
    assert a["first_token_us"] == b["first_token_us"] == 2000
    assert a["generated"] == b["generated"] == 1


# ============================================================================ event ordering


def test_same_microsecond_burst_forms_one_step_chain():
    """5 requests queued at the same µs: one batch, one step chain (the reference's time-only
    heap created duplicate chains)."""
    wl = lengths_workload([1000] * 5, [100] * 5, [3] * 5)
    r = sim(wl, **HAND_STEPS)
    reqs = r.state.reqs
    assert r.cluster["engine_steps"] == 3
    assert (reqs["first_token_us"] == 1000 + 6000).all()  # 1000 + 10·500
    assert (reqs["last_token_us"] == 1000 + 6000 + 2 * 1025).all()
    assert (reqs["first_scheduled_us"] == 1000).all()
    assert r.cluster["vllm_estimated_duration_s"] == (1000 + 8050) / 1e6
    assert r.cluster["batch_size_peak"] == 5


def test_arrival_at_step_end_joins_that_step():
    """Cluster events run before instance events at equal times, and Queued before Step:
    a request arriving exactly when a step ends is in the next step."""
    wl = lengths_workload([0, 2000], [100, 50], [5, 1])
    r = sim(wl, **HAND_STEPS)
    a, b = r.state.reqs
    assert a["first_token_us"] == 2000
    assert b["first_scheduled_us"] == 2000  # scheduling delay 0
    assert b["first_token_us"] == 2000 + 1000 + 10 * 50 + 5 * 1
    assert r.request_records()[1]["scheduling_delay_ms"] == 0.0


def test_queued_while_busy_waits_for_step_end_normal_vs_compat():
    """Normal mode: a request queued at an idle-but-busy instance starts at the end of the last
    step.  Compat: at its Queued time (the reference's overlap)."""
    wl = lengths_workload([0, 500], [100, 100], [1, 1])
    normal = sim(wl, **HAND_STEPS)
    compat = sim(wl, compat=COMPAT, **HAND_STEPS)
    b = normal.state.reqs[1]
    assert b["first_scheduled_us"] == 2000 and b["first_token_us"] == 4000
    assert normal.cluster["vllm_estimated_duration_s"] == 0.004
    assert normal.cluster["busy_fraction"] <= 1.0
    b = compat.state.reqs[1]
    assert b["first_scheduled_us"] == 500 and b["first_token_us"] == 2500
    assert compat.cluster["vllm_estimated_duration_s"] == 0.0025


def test_routing_and_admission_latency_shift_times():
    wl = lengths_workload([1000], [64], [3])
    base = sim(wl, alpha_coeffs=[7, 0, 0], beta_coeffs=[1000, 10, 5])
    lat = sim(wl, alpha_coeffs=[7, 0, 0], beta_coeffs=[1000, 10, 5], admission_latency=300, routing_latency=200)
    b, l = base.state.reqs[0], lat.state.reqs[0]
    assert b["routed_us"] == 1000 and l["routed_us"] == 1500
    assert l["queued_us"] == 1507
    assert l["first_token_us"] - b["first_token_us"] == 500
    assert lat.request_records()[0]["ttft_ms"] - base.request_records()[0]["ttft_ms"] == pytest.approx(0.5)


# ============================================================================ horizon


def test_horizon_arrival_at_horizon_executes_after_does_not():
    H = 1_000_000
    wl = lengths_workload([0, H, H + 1], [100, 100, 100], [2, 2, 2])
    r = sim(wl, alpha_coeffs=[10, 0, 0], beta_coeffs=[1000, 10, 5], horizon=H)
    s = r.state.reqs["state"].tolist()
    assert s[0] == RequestState.COMPLETED
    assert s[1] == RequestState.ROUTED  # arrival, admission, routing at H ran; Queued at H+10 did not
    assert r.state.reqs[1]["routed_us"] == H
    assert s[2] == RequestState.PENDING
    assert r.state.loop[0]["clock_us"] == H
    assert r.cluster["arrived_requests"] == 2
    assert r.cluster["still_in_flight"] == 1
    assert r.cluster["injected_requests"] == 1
    ids = [rec["requestID"] for rec in r.request_records()]
    assert "request_2" not in ids


def test_horizon_zero_alpha_request_at_horizon_reaches_instance():
    H = 1_000_000
    wl = lengths_workload([0, H, H + 1], [100, 100, 100], [2, 2, 2])
    r = sim(wl, **HAND_STEPS, horizon=H)
    reqs = r.state.reqs
    assert reqs[1]["queued_us"] == H and reqs[1]["first_scheduled_us"] == H
    assert reqs[2]["state"] == RequestState.PENDING and reqs[2]["instance"] == -1


@pytest.mark.parametrize("H, steps", [(3004, 2), (3005, 3), (3006, 3), (0, 1), (1999, 1), (2000, 2)])
def test_horizon_step_exactly_at_horizon_executes(H, steps):
    """Steps start at 0, 2000, 3005, 4010, ...: a Step at t == H runs, one at t > H does not."""
    wl = lengths_workload([0], [100], [10])
    r = sim(wl, **HAND_STEPS, horizon=H)
    assert r.cluster["engine_steps"] == steps
    assert r.state.loop[0]["clock_us"] <= H


def test_horizon_zero_no_nan_empty_stats():
    r = blis_fast.simulate(num_requests=20, rate=5, num_instances=2, horizon=0, total_kv_blocks=100,
                           **HAND_STEPS)
    assert r.cluster["completed_requests"] == 0
    for k in ("e2e_mean_ms", "ttft_p99_ms", "itl_mean_ms", "responses_per_sec", "tokens_per_sec"):
        assert r.cluster[k] == 0.0
    assert_no_nan(r.summary())
    assert_no_nan(r.results_document())


# ============================================================================ compat completion conventions


def _two_turns(first_output: int):
    """Turn 1: a 24-token prompt and ``first_output`` generated tokens; turn 2 (much later,
    same instance): turn 1's prompt + its output + 16 new tokens."""
    import numpy as np

    from blis_fast.workload import Workload

    p1 = np.arange(1000, 1024, dtype=np.int64)
    out1 = np.arange(5000, 5000 + first_output, dtype=np.int64)
    p2 = np.concatenate([p1, out1, np.arange(9000, 9016)])
    tokens = np.concatenate([p1, p2])
    offsets = np.array([0, len(p1), len(p1) + len(p2)], np.int64)
    return Workload.from_tokens(np.array([0, 1_000_000], np.int64), tokens, offsets,
                                np.array([first_output, 3], np.int64), 16,
                                output_tokens=np.concatenate([out1, [7, 7, 7]]).astype(np.int64),
                                output_offsets=np.array([0, first_output, first_output + 3], np.int64))


def test_compat_last_token_kv_is_written_and_keyed_at_completion():
    """L + N = 32: the last output token completes turn 1's second block.  Its KV is never
    computed in normal mode (turn 2 reuses one block); the reference writes it at completion,
    so in compat mode turn 2 reuses both blocks (16 fewer prefill tokens)."""
    wl = _two_turns(8)
    normal = sim(wl, **HAND_STEPS)
    compat = sim(wl, compat=COMPAT, **HAND_STEPS)
    assert normal.state.reqs[1]["cached_tokens"] == 16
    assert compat.state.reqs[1]["cached_tokens"] == 32
    # one output token fewer leaves the block partial: no difference
    wl7 = _two_turns(7)
    assert sim(wl7, compat=COMPAT, **HAND_STEPS).state.reqs[1]["cached_tokens"] == 16


def test_compat_zero_output_request_has_no_extra_itl_sample():
    """N = 0 runs as one token; the reference adds its completion ITL sample only when N > 0."""
    wl = lengths_workload([0, 0], [40, 40], [0, 1])
    reqs = sim(wl, compat=COMPAT, **HAND_STEPS).state.reqs
    assert reqs[0]["itl_sum_us"] == 0
    assert reqs[1]["itl_sum_us"] > 0


@pytest.mark.parametrize("H, normal_s, compat_s", [
    (2500, 0.003005, 0.002),  # the step [2000, 3005) started by H: compat counts its start
    (3005, 0.00401, 0.003005),  # the step ending at H: its end; the next step starts at H
    (10_000_000, 0.011045, 0.011045),  # no cut: both the end of the last step
])
def test_duration_compat_is_the_clock_of_the_last_processed_event(H, normal_s, compat_s):
    """Steps at 0, 2000, 3005, ..., 10040, ending at 11045 (one request, 10 outputs).  Normal mode: the end
    of the last step that ran.  Compat: the reference's clock -- its last processed event,
    at most H (docs/semantics.md §11.7)."""
    wl = lengths_workload([0], [100], [10])
    normal = sim(wl, **HAND_STEPS, horizon=H)
    compat = sim(wl, **HAND_STEPS, horizon=H, compat=COMPAT)
    assert normal.cluster["vllm_estimated_duration_s"] == normal_s
    assert compat.cluster["vllm_estimated_duration_s"] == compat_s
    assert compat.instances[0]["vllm_estimated_duration_s"] == compat_s


def test_duration_compat_counts_a_queue_entry_after_the_last_step():
    """A request queued (at 2600) while the instance's cut step runs: compat's clock is that
    event, later than the step's start."""
    wl = lengths_workload([0, 2600], [100, 100], [10, 10])
    compat = sim(wl, alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], horizon=2700, compat=COMPAT)
    reqs = compat.state.reqs
    assert reqs[1]["queued_us"] == 2600
    assert compat.cluster["vllm_estimated_duration_s"] == 0.0026


def test_compat_fully_cached_block_aligned_prompt_computes_nothing():
    """A repeated 64-token prompt (4 full blocks, all cached): normal mode recomputes its last
    block (the last prompt token is always computed, as in vLLM); the reference reuses all
    four and admits it with nothing to compute -- its first step costs β0 alone."""
    import numpy as np

    prompt = np.arange(100, 164)
    wl = prompts_workload([0, 1_000_000], [prompt, prompt], [2, 2])
    normal = sim(wl, **HAND_STEPS).state.reqs[1]
    compat = sim(wl, compat=COMPAT, **HAND_STEPS).state.reqs[1]
    assert normal["cached_tokens"] == 48 and compat["cached_tokens"] == 64
    assert normal["first_token_us"] - normal["first_scheduled_us"] == 1000 + 10 * 16
    assert compat["first_token_us"] - compat["first_scheduled_us"] == 1000
    assert compat["state"] == RequestState.COMPLETED
    # a prompt one token longer is not block-aligned: both modes reuse 4 blocks
    longer = np.arange(100, 165)
    wl = prompts_workload([0, 1_000_000], [longer, longer], [2, 2])
    assert sim(wl, compat=COMPAT, **HAND_STEPS).state.reqs[1]["cached_tokens"] == 64
    assert sim(wl, **HAND_STEPS).state.reqs[1]["cached_tokens"] == 64
