"""The engine step (kernels/engine/step.py: batch formation, chunked prefill, preemption,
admission) through ``blis_fast.simulate`` (docs/semantics.md §1-4), with tiny configs whose step
times are easy to compute by hand, plus a comparison with tests/naive/engine.py's
``naive_simulate_instance`` on random small workloads.

Step time: beta "1000,10,5" -> 1000 + 10 per prefill token + 5 per decode request (µs).
"""

from __future__ import annotations

import numpy as np
import pytest

import blis_fast
from blis_fast_kernels.schema import REQUEST_STATE_NAMES
from builders import engine_overrides, prompts_workload, random_prompts, seeds
from naive import naive_simulate_instance

COMPAT = "blis-2026.02"
BETA = [1000, 10, 5]
ZERO = [0, 0, 0]


def make_workload(prompts, outputs, arrivals=None, bs=16):
    """prompts[i]: a token list, or an int L (L tokens unique to request i)."""
    toks = [list(range(1_000_000 * (i + 1), 1_000_000 * (i + 1) + int(p))) if isinstance(p, (int, np.integer))
            else p for i, p in enumerate(prompts)]
    arrivals = np.zeros(len(toks), np.int64) if arrivals is None else arrivals
    return prompts_workload(arrivals, toks, outputs, bs)


def run(prompts, outputs, arrivals=None, *, bs=16, alpha=ZERO, beta=BETA, **overrides):
    wl = make_workload(prompts, outputs, arrivals, bs)
    overrides.setdefault("total_kv_blocks", 1000)
    return blis_fast.simulate(workload=wl, block_size_in_tokens=bs, alpha_coeffs=list(alpha),
                              beta_coeffs=list(beta), check_invariants=True, **overrides)


def col(res, name):
    return [int(x) for x in res.state.reqs[name]]


def states(res):
    return [REQUEST_STATE_NAMES[int(s)] for s in res.state.reqs["state"]]


# ----------------------------------------------------------------------------- chunked prefill


def test_chunked_prefill_splits_prompt_into_budget_sized_chunks():
    # q = trunc(200 + 1*100) = 300, a2 = 50.  Chunks 64 and 36 tokens:
    # step 1 [300, 1940) = 1000 + 640, step 2 [1940, 3300) = 1000 + 360 -> first token 3350;
    # decodes [3300, 4305), [4305, 5310) -> tokens at 4355 and 5360.
    res = run([100], [3], alpha=[200, 1, 50], max_num_scheduled_tokens=64)
    r = res.state.reqs[0]
    assert int(r["queued_us"]) == 300
    assert int(r["first_scheduled_us"]) == 300
    assert int(r["first_token_us"]) == 300 + 1640 + 1360 + 50
    assert int(r["last_token_us"]) == 5360
    assert int(r["itl_sum_us"]) == 2 * 1005
    c = res.cluster
    assert c["ttft_mean_ms"] == pytest.approx(3.35)
    assert c["e2e_mean_ms"] == pytest.approx(5.36)
    assert c["itl_mean_ms"] == pytest.approx(1.005)
    assert c["engine_steps"] == 4
    assert c["prefill_tokens_computed"] == 100 and c["decode_tokens_computed"] == 2
    assert c["vllm_estimated_duration_s"] == pytest.approx(5310e-6)


def test_alpha_and_beta_are_truncated():
    # q = trunc(0.9 + 0.0099*100) = trunc(1.89) = 1; a2 = trunc(0.99) = 0;
    # step = trunc(1000.9 + 10.01*100) = trunc(2001.9) = 2001
    res = run([100], [1], alpha=[0.9, 0.0099, 0.99], beta=[1000.9, 10.01, 5])
    r = res.state.reqs[0]
    assert int(r["queued_us"]) == 1
    assert int(r["first_token_us"]) == 1 + 2001


def test_long_prefill_threshold_caps_per_request_chunks():
    # one request: chunks 30, 30, 30, 10 -> 1300 * 3 + 1100 = 5000
    res = run([100], [1], max_num_scheduled_tokens=64, long_prefill_token_threshold=30)
    assert col(res, "first_token_us") == [5000]
    assert res.cluster["engine_steps"] == 4
    # two requests share the budget of 64: step 1: 30 + 30 (1600); step 2: 30 + 20 (1500,
    # request 1 done); step 3: 30 (1300); step 4: 10 (1100)
    res = run([100, 50], [1, 1], max_num_scheduled_tokens=64, long_prefill_token_threshold=30)
    assert col(res, "first_token_us") == [1600 + 1500 + 1300 + 1100, 1600 + 1500]


def test_budget_limits_admission_chunk_of_second_request():
    # budget 64: request 0 takes 40, request 1 gets the remaining 24 tokens of its 50
    res = run([40, 50], [1, 1], max_num_scheduled_tokens=64)
    # step 1: 40 + 24 = 64 tokens (1640), request 0 done; step 2: 26 tokens (1260)
    assert col(res, "first_token_us") == [1640, 1640 + 1260]
    assert col(res, "first_scheduled_us") == [0, 0]


# ----------------------------------------------------------------------------- batch limits


def test_max_num_seqs_caps_the_batch():
    # three 10-token requests, at most two running: step 1 admits 0 and 1 (P=20, 1200);
    # step 2 is their decode (D=2, 1010): the batch is still full while forming, so 2 waits;
    # step 3 admits 2 (1100), step 4 its decode (1005)
    res = run([10, 10, 10], [2, 2, 2], max_num_running_reqs=2)
    assert col(res, "first_scheduled_us") == [0, 0, 2210]
    assert col(res, "first_token_us") == [1200, 1200, 3310]
    assert col(res, "last_token_us") == [2210, 2210, 4315]
    assert res.cluster["batch_size_peak"] == 2
    assert res.cluster["engine_steps"] == 4


def test_strict_head_of_line_blocks_small_follower():
    # 10 blocks of 16: request 0 (100 tokens) holds 7; request 1 (80 tokens, 5 blocks) does
    # not fit, and request 2 (16 tokens, 1 block) -- which would fit -- must wait behind it
    res = run([100, 80, 16], [2, 1, 1], total_kv_blocks=10)
    # step 1 [0, 2000): request 0's prefill; step 2 [2000, 3005): its decode, then release;
    # step 3 [3005, 4965): requests 1 and 2 (96 tokens)
    assert col(res, "first_scheduled_us") == [0, 3005, 3005]
    assert col(res, "first_token_us") == [2000, 4965, 4965]
    assert states(res) == ["completed"] * 3
    # without the blocked head, request 2 is admitted at once
    res = run([100, 16], [2, 1], total_kv_blocks=10)
    assert col(res, "first_scheduled_us") == [0, 0]


def test_queued_at_step_end_joins_that_step_and_busy_instance_waits():
    # request 1 arrives exactly when step 1 ends (1100): Queued runs before the Step at the
    # same µs, so it is admitted in step 2 together with request 0's decode (P=10, D=1)
    res = run([10, 10], [2, 1], [0, 1100])
    assert col(res, "first_scheduled_us") == [0, 1100]
    assert col(res, "first_token_us") == [1100, 1100 + 1105]
    # request 1 arrives at 500 while the instance is busy until 1100 with an empty batch
    # afterwards: the next step starts at 1100, not 500 (docs/semantics.md §1 fix) ...
    res = run([10, 10], [1, 1], [0, 500])
    assert col(res, "first_scheduled_us") == [0, 1100]
    # ... except in compat mode, which reproduces the reference's overlapping step
    res = run([10, 10], [1, 1], [0, 500], compat=COMPAT)
    assert col(res, "first_scheduled_us") == [0, 500]
    assert col(res, "first_token_us") == [1100, 1600]


# ----------------------------------------------------------------------------- preemption


def test_no_admission_in_a_step_with_a_preemption():
    # block size 4, 6 blocks; requests 0 and 1 have the same 8-token prompt (request 1 hits
    # block 0, its 2nd block is its own).  Step 6: request 0 takes the last free block,
    # request 1 needs one, nothing is free -> request 1 (the last) is preempted and frees 2
    # blocks.  Re-admitting it right away would fit (it hits both of request 0's prompt
    # blocks and needs 2 new ones), but no admission happens in a step with a preemption:
    # it is re-admitted in step 7.
    prompt = list(range(8))
    res = run([prompt, prompt], [7, 6], bs=4, total_kv_blocks=6)
    # step 1: P = 8 + 4 (1120); steps 2-5: D=2 (1010 each); step 6: D=1 (1005);
    # step 7: request 1 re-prefills 13 tokens (prompt + 5 generated) of which 12 are cached --
    # request 0's prompt block, its own prompt block and the block its outputs 1-4 filled in
    # step 5 (generated blocks are keyed too) -- so 1 token + request 0's decode (1015)
    ends = np.cumsum([1120, 1010, 1010, 1010, 1010, 1005, 1015])
    assert col(res, "preemptions") == [0, 1]
    assert col(res, "first_token_us") == [ends[0], ends[0]]  # TTFT kept
    assert col(res, "last_token_us") == [ends[6], ends[6]]
    assert col(res, "itl_sum_us") == [ends[6] - ends[0]] * 2
    assert col(res, "generated") == [7, 6]
    c = res.cluster
    assert c["engine_steps"] == 7
    assert c["preemption_count"] == 1
    assert c["total_output_tokens"] == 13
    assert c["prefill_tokens_computed"] == 8 + 4 + 1
    assert c["decode_tokens_computed"] == 4 * 2 + 1 + 1
    assert col(res, "cached_tokens") == [0, 4]  # first admission only


def test_preemption_victim_is_last_admitted_and_recomputes():
    # block size 4, 7 blocks; three 4-token prompts, 7 outputs each.  Step 2 gives each a 2nd
    # block (6 used).  Step 6: request 0 takes the last block; request 1 needs one -> the
    # victim is request 2 (the last admitted), not request 1.
    res = run([4, 4, 4], [7, 7, 7], bs=4, total_kv_blocks=7)
    # steps: 1 P=12 (1120); 2-5 D=3 (1015); 6-7 D=2 (1010); request 2 cannot come back before
    # 0 and 1 finish (its recompute needs 2 new blocks, 1 is free); 8: re-prefill of
    # 4 + 5 generated = 9 tokens, 4 cached -> P=5 (1050) emits its 6th token; 9: D=1 (1005)
    ends = np.cumsum([1120, 1015, 1015, 1015, 1015, 1010, 1010, 1050, 1005])
    assert col(res, "preemptions") == [0, 0, 1]
    assert col(res, "first_token_us") == [ends[0]] * 3  # TTFT not changed by the preemption
    assert col(res, "last_token_us") == [ends[6], ends[6], ends[8]]
    assert col(res, "generated") == [7, 7, 7]
    assert col(res, "first_scheduled_us") == [0, 0, 0]
    c = res.cluster
    assert c["total_output_tokens"] == 21  # recomputed tokens are not counted twice
    assert c["engine_steps"] == 9
    assert c["prefill_tokens_computed"] == 12 + 5
    assert c["decode_tokens_computed"] == 4 * 3 + 2 + 2 + 1
    assert c["prefix_cache_hit_rate"] == pytest.approx(4 / (4 + 4 + 4 + 9))
    # E2E of request 2 = its last token - arrival; its ITL samples include the long gap
    assert int(res.state.reqs[2]["itl_sum_us"]) == ends[8] - ends[0]


def test_dropped_unservable_when_request_can_never_fit():
    # 4 blocks of 16: 100 + 0 tokens -> 7 blocks: dropped; 64 + 1 - 1 -> 4 blocks: served;
    # 64 tokens + 2 outputs -> KV of 65 tokens -> 5 blocks: dropped although the prompt fits
    res = run([100, 64, 64], [1, 1, 2], total_kv_blocks=4)
    assert states(res) == ["dropped_unservable", "completed", "dropped_unservable"]
    c = res.cluster
    assert c["dropped_unservable"] == 2
    assert c["completed_requests"] == 1
    assert c["injected_requests"] == 3
    assert col(res, "first_token_us") == [-1, 1640, -1]


def test_output_zero_behaves_as_one():
    res = run([10, 10], [0, 1])
    assert col(res, "generated") == [1, 1]
    assert states(res) == ["completed", "completed"]
    assert res.cluster["engine_steps"] == 1


# ----------------------------------------------------------------------------- horizon


def test_event_exactly_at_horizon_is_executed():
    # Events with time > H are not executed; an event at exactly H is.  Requests arriving at
    # H and H + 1 with no overheads: the first is routed, queued and scheduled (its step
    # starts at H); the second never arrives.
    H = 5000
    res = run([10, 10], [1, 1], [H, H + 1], horizon=H)
    assert col(res, "routed_us") == [H, -1]
    assert col(res, "queued_us") == [H, -1]
    assert col(res, "first_scheduled_us") == [H, -1]
    assert states(res)[1] == "pending"
    assert res.cluster["arrived_requests"] == 1
    # with a queueing overhead q = L µs the Queued event falls after H: the request stays
    # routed (never reaches the instance); with admission latency 1 it stays admitting
    res = run([10, 10], [1, 1], [H, H], alpha=[0, 1, 0], horizon=H)
    assert states(res) == ["routed", "routed"]
    assert col(res, "queued_us") == [-1, -1]
    res = run([10], [1], [H], horizon=H, admission_latency=1)
    assert states(res) == ["admitting"]
    assert res.cluster["still_in_flight"] == 1


# ----------------------------------------------------------------------------- vs naive


KERNEL_FIELDS = ("routed_us", "queued_us", "first_scheduled_us", "first_token_us", "last_token_us", "generated",
                 "preemptions", "cached_tokens", "itl_sum_us")
INSTANCE_FIELDS = ("steps", "preemptions", "injected", "dropped", "prefill_tokens", "decode_tokens",
                   "prefix_query_tokens", "prefix_hit_tokens", "batch_peak", "wq_peak", "kv_peak_allocated",
                   "last_step_end_us")


def random_case(seed):
    """A small random single-instance scenario: shared prefixes from a tiny vocabulary, tiny
    KV (preemptions, drops), small budgets, ties in arrival times, zero-length outputs."""
    rng = np.random.default_rng(seed)
    bs = int(rng.choice([1, 2, 4, 8]))
    n = int(rng.integers(1, 13))
    prompts = random_prompts(rng, n, bs, n_families=2, vocab=3, max_suffix=30, p_family=0.7)
    outputs = [int(x) for x in rng.integers(0, 12, n)]
    step = int(rng.choice([1, 250, 2000]))
    arrivals = [int(x) * step for x in rng.integers(0, 10, n)]  # unsorted, with ties
    caps = [-(-(len(p) + max(o, 1) - 1) // bs) for p, o in zip(prompts, outputs, strict=True)]
    lo = max(1, min(caps) if rng.random() < 0.2 else max(caps) // 2 + 1)
    total = int(rng.integers(lo, max(caps) + 6))
    alpha = [float(rng.choice([0, 37.5, 300])), float(rng.choice([0, 0.5, 2.25])), float(rng.choice([0, 9.9, 100]))]
    beta = [float(rng.choice([0, 500, 1000.7])), float(rng.choice([0, 3.3, 10])), float(rng.choice([0, 5, 50.5]))]
    cfg = dict(
        block_size=bs, total_kv_blocks=total, max_num_seqs=int(rng.integers(1, 6)),
        max_batched_tokens=int(rng.integers(1, 80)),
        long_prefill_threshold=0 if rng.random() < 0.5 else int(rng.integers(1, 30)),
        alpha=alpha, beta=beta, prefix_caching=bool(rng.random() < 0.8),
        horizon=None if rng.random() < 0.7 else int(rng.integers(0, 20000)),
        compat=bool(rng.random() < 0.25),
        admission_latency=int(rng.choice([0, 0, 7, 300])), routing_latency=int(rng.choice([0, 0, 3, 250])),
    )
    return prompts, outputs, arrivals, cfg


def run_kernel_case(prompts, outputs, arrivals, cfg):
    wl = make_workload(prompts, outputs, arrivals, cfg["block_size"])
    return blis_fast.simulate(workload=wl, num_instances=1, **engine_overrides(cfg, COMPAT)), wl


def compare_with_naive(prompts, outputs, arrivals, cfg):
    res, wl = run_kernel_case(prompts, outputs, arrivals, cfg)
    keys = [[int(k) for k in wl.keys_of(i)] for i in range(len(wl))]
    want = naive_simulate_instance(arrivals, [len(p) for p in prompts], outputs, keys, **cfg)
    assert states(res) == want["state"]
    for f in KERNEL_FIELDS:
        assert col(res, f) == want[f], f
    inst = res.state.inst[0]
    for f in INSTANCE_FIELDS:
        assert int(inst[f]) == want["instance"][f], f
    assert int(inst["kv_allocated"]) == want["instance"]["kv_allocated_end"]
    return want


@pytest.mark.parametrize("block", seeds(10, fast=3))
def test_kernel_matches_naive_instance_on_random_workloads(block):
    """200 random scenarios (20 per test id, the first 60 fast) compared request by request and counter by counter."""
    for seed in range(20 * block, 20 * block + 20):
        compare_with_naive(*random_case(seed))


def test_random_scenarios_exercise_preemption_drops_hits_and_horizon():
    """The random scenarios are not vacuous: over the 200 seeds each feature occurs."""
    seen = dict(preempt=0, dropped=0, hits=0, horizon_cut=0, chunked=0)
    for seed in range(200):
        prompts, outputs, arrivals, cfg = random_case(seed)
        res, _ = run_kernel_case(prompts, outputs, arrivals, cfg)
        inst = res.state.inst[0]
        seen["preempt"] += int(inst["preemptions"]) > 0
        seen["dropped"] += int(inst["dropped"]) > 0
        seen["hits"] += int(inst["prefix_hit_tokens"]) > 0
        seen["horizon_cut"] += any(s in ("pending", "routed", "queued", "running", "admitting") for s in states(res))
        seen["chunked"] += int(inst["steps"]) > 0 and max(len(p) for p in prompts) > cfg["max_batched_tokens"]
    assert all(v >= 10 for v in seen.values()), seen


@pytest.mark.parametrize("case", ["hol", "victim", "no_admit", "chunks", "compat_overlap"])
def test_hand_computed_scenarios_also_match_naive(case):
    bs16 = dict(block_size=16, total_kv_blocks=1000, max_num_seqs=256, max_batched_tokens=2048,
                long_prefill_threshold=0, alpha=[0, 0, 0], beta=BETA, prefix_caching=True, horizon=None,
                compat=False, admission_latency=0, routing_latency=0)
    uniq = lambda i, n: list(range(1_000_000 * (i + 1), 1_000_000 * (i + 1) + n))  # noqa: E731
    if case == "hol":
        compare_with_naive([uniq(0, 100), uniq(1, 80), uniq(2, 16)], [2, 1, 1], [0, 0, 0], {**bs16, "total_kv_blocks": 10})
    elif case == "victim":
        compare_with_naive([uniq(i, 4) for i in range(3)], [7, 7, 7], [0, 0, 0],
                           {**bs16, "block_size": 4, "total_kv_blocks": 7})
    elif case == "no_admit":
        compare_with_naive([list(range(8))] * 2, [7, 6], [0, 0], {**bs16, "block_size": 4, "total_kv_blocks": 6})
    elif case == "chunks":
        compare_with_naive([uniq(0, 100), uniq(1, 50)], [3, 2], [0, 0],
                           {**bs16, "max_batched_tokens": 64, "long_prefill_threshold": 30, "alpha": [200, 1, 50]})
    else:
        compare_with_naive([uniq(0, 10), uniq(1, 10)], [1, 1], [0, 500], {**bs16, "compat": True})
