"""Prefill/decode disaggregation in the event loop, hand-computed to the µs
(kernels/engine/disaggregation.py; issue 22).

Every case runs llama-3.1-8b with blackbox step times alpha = (0, 0, 0) (unless a test says
otherwise) and beta = (1000, 10, 5): a step takes 1000 + 10 x prefill tokens + 5 x decode
requests µs.  llama-3.1-8b's KV is 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 131072
bytes per token (TP 1), so a link of 13.1072 GB/s (13107.2 bytes/µs) moves one token in
exactly 10 µs; the default base latency adds 50 µs to every transfer.  Instance 0 is the
prefill instance, 1.. the decode instances.

A disaggregated request's path (the engine's):
    arrival -> routed to a decode instance, its prefill leg routed to a prefill instance at
    the same time -> leg queued after the prefill instance's queueing delay trunc(a0 + a1 L)
    -> prefill step -> at that step's end (prefill_done) the decode side reserves the
    prompt's blocks -> transfer data ceil(charged x 131072 / bytes per µs) -> + base latency
    (transfer_end) -> admitted to the decode batch with L - 1 prompt tokens computed: the
    step computing the last prompt token emits the first output token.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import blis_fast
from builders import LOADED, LOADED_HORIZON, lengths_workload
from blis_fast_kernels.kv.cache import kv_conserved
from blis_fast_kernels.schema import RequestState

KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # llama-3.1-8b, bf16, TP 1
LINK_10US_PER_TOKEN = 13.1072  # GB/s: 131072 bytes / 13107.2 bytes per µs = 10 µs per token, exactly
BASE_LATENCY_US = 50  # the default 0.05 ms
PREFILL, DECODE = 0, 1  # instance rows with one prefill and one decode instance
ROOT = Path(__file__).parents[2]

HAND = dict(alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], total_kv_blocks=100, prefill_instances=1,
            decode_instances=1, pd_decider="always", pd_transfer_bandwidth_gbps=LINK_10US_PER_TOKEN,
            check_invariants=True)
SHARED_PREFIX = list(range(1, 65))  # 64 tokens: 4 blocks of 16


def pd_run(arrivals, lens, outputs, prefixes=None, all_done=True, **settings):
    """A P/D run of a hand-made workload (distinct random prompts after the given prefixes)
    with the ``HAND`` settings, ``settings`` over them (None removes one): (Result, its full
    state).  ``all_done``: check that it ended with every request finished and every KV
    block free and conserved."""
    wl = lengths_workload(arrivals, lens, outputs, prefixes=prefixes)
    merged = {k: v for k, v in {**HAND, **settings}.items() if v is not None}  # None: leave the setting out
    res = blis_fast.simulate(workload=wl, **merged)
    st = res.full_state
    if all_done:
        finished = (RequestState.COMPLETED, RequestState.DROPPED, RequestState.DROPPED_AT_DECODE)
        assert np.isin(st.reqs["state"][: len(wl)], finished).all()
        assert (st.inst["kv_allocated"] == 0).all() and (st.blocks["ref_count"] == 0).all()
        assert all(kv_conserved(st, i) for i in range(len(st.inst)) if st.inst[i]["active"])
    return res, st


def leg(st, r):
    """Request r's prefill-leg row (rows n..2n-1)."""
    return st.reqs[r + int(st.settings[0]["pd_base"])]


def transfer(st, r):
    """(prefill_done, transfer start, data end, end, charged tokens) of request r."""
    row = st.pd_reqs[r]
    return tuple(int(row[f]) for f in ("prefill_done_us", "transfer_start_us", "transfer_data_us",
                                       "transfer_end_us", "charged_tokens"))


def tokens(st, r):
    """(first scheduled on its decode instance, first token, last token) of request r."""
    row = st.reqs[r]
    return int(row["first_scheduled_us"]), int(row["first_token_us"]), int(row["last_token_us"])


def pools_doc(pd, both=None, **entry_keys):
    """A run config with one P/D deployment (the HAND coefficients; one prefill and one
    decode instance of 10 KV blocks) as a deployments: list, ``entry_keys`` over it."""
    entry = {"name": "pd", "model": "meta-llama/llama-3.1-8b-instruct", "hardware": "H100",
             "latency_model": "blackbox", "alpha_coeffs": [0, 0, 0], "beta_coeffs": [1000, 10, 5],
             "total_kv_blocks": 10, "prefill": {"instances": 1}, "decode": {"instances": 1}, "pd": pd, **entry_keys}
    if both is not None:
        entry["both"] = both
    return {"deployments": [entry], "simulation": {"check_invariants": True}}


# ----------------------------------------------------------------------------- one request, end to end


def test_one_request_through_prefill_transfer_and_decode():
    """Prompt 100, 3 output tokens, arriving at 1000, alpha = (200, 1, 0):
    leg queued at 1000 + trunc(200 + 100) = 1300; prefill step 1000 + 10 x 100 = 2000 µs ->
    prefill_done 3300; transfer 100 tokens x 10 µs: data 4300, end 4350; decode step with the
    last prompt token 1000 + 10 = 1010 -> first token 5360; two decode steps of 1005 -> 6365,
    7370."""
    res, st = pd_run([1000], [100], [3], alpha_coeffs=[200, 1, 0])
    assert float(st.pd_models[0]["kv_bytes_per_token"]) == KV_BYTES_PER_TOKEN
    req, lg = st.reqs[0], leg(st, 0)
    assert int(req["routed_us"]) == int(lg["routed_us"]) == 1000
    assert int(lg["instance"]) == PREFILL and int(req["instance"]) == DECODE
    assert int(st.pd_reqs[0]["prefill_instance"]) == PREFILL
    assert int(lg["queued_us"]) == 1300 and int(lg["first_scheduled_us"]) == 1300
    assert int(lg["first_token_us"]) == 3300 and int(lg["state"]) == RequestState.COMPLETED
    assert transfer(st, 0) == (3300, 3300, 4300, 4350, 100)
    assert int(st.pd_reqs[0]["wait_start_us"]) == -1
    # the decode instance pays no queueing delay: the request joins at transfer end
    assert int(req["queued_us"]) == 4350
    assert tokens(st, 0) == (4350, 5360, 7370)
    assert int(req["state"]) == RequestState.COMPLETED and int(req["generated"]) == 3
    assert int(req["computed"]) == 100 + 2 and int(req["cached_tokens"]) == 0
    cols = res.request_columns()
    assert int(cols["ttft_us"][0]) == 5360 - 1000 and int(cols["e2e_us"][0]) == 7370 - 1000
    assert float(cols["itl_mean_us"][0]) == 1005.0
    assert int(cols["scheduling_delay_us"][0]) == 4350 - 1000  # (its admission on the decode side)
    assert int(cols["instance"][0]) == DECODE
    inst = st.inst
    assert list(st.pd_inst["pd_prefills"]) == [1, 0] and list(st.pd_inst["pd_transfers_in"]) == [0, 1]
    assert list(inst["completed"]) == [0, 1] and list(st.pd_inst["held_outside"]) == [0, 0]
    # prefill side: one step of 100 prompt tokens; decode side: 1 prompt token + 2 decode steps
    assert list(inst["steps"]) == [1, 3] and list(inst["busy_us"]) == [2000, 1010 + 2 * 1005]
    assert list(inst["prefill_tokens"]) == [100, 1]


def test_the_decode_step_with_other_requests_in_its_batch():
    """A transfer that ends while its decode instance is busy is admitted at the next step,
    before the instance's wait queue (here empty), and shares the batch: A (prompt 300) is
    prefilled 0..4000 and transferred 4000..7050; B (prompt 50, arriving at 1) is prefilled
    4000..5500 and transferred 5500..6050 (contention none).  Decode: B's last prompt token
    6050..7060; A joins at 7060 with B decoding: 1000 + 10 + 5 -> 8075 (A's first token, B's
    second and last); A's second token 8075 + 1005 = 9080."""
    _, st = pd_run([0, 1], [300, 50], [2, 2])
    assert transfer(st, 0) == (4000, 4000, 7000, 7050, 300)
    assert transfer(st, 1) == (5500, 5500, 6000, 6050, 50)
    assert tokens(st, 1) == (6050, 7060, 8075)
    assert tokens(st, 0) == (7060, 8075, 9080)
    assert int(st.inst[DECODE]["steps"]) == 3


# ----------------------------------------------------------------------------- the link


def two_transfers(contention, arrivals, lens):
    return pd_run(arrivals, lens, [1, 1], pd_transfer_contention=contention, decode_instances=2)[1]


def test_two_transfers_starting_together_share_the_link():
    """A (prompt 300) and B (prompt 100) arrive at 0 and are prefilled in one step: 1000 +
    10 x 400 -> 5000.  Their transfers (3000 and 1000 µs at full bandwidth) start at 5000;
    at half the bandwidth each, B's data is through at 5000 + 2 x 1000 = 7000; A, then
    alone, has 3000 - 1000 = 2000 µs left: 9000.  Without contention: 8000 and 6000."""
    st = two_transfers("link", [0, 0], [300, 100])
    assert transfer(st, 0) == (5000, 5000, 9000, 9050, 300)
    assert transfer(st, 1) == (5000, 5000, 7000, 7050, 100)
    assert int(st.pd_inst[PREFILL]["link_peak"]) == 2 and int(st.pd_inst[PREFILL]["link_len"]) == 0
    st = two_transfers("none", [0, 0], [300, 100])
    assert transfer(st, 0) == (5000, 5000, 8000, 8050, 300)
    assert transfer(st, 1) == (5000, 5000, 6000, 6050, 100)


def test_a_transfer_joining_a_busy_link_shares_it_from_then_on():
    """A (prompt 300, at 0) is prefilled 0..4000, its transfer starts alone (3000 µs of
    data); B (prompt 50, at 1) is prefilled 4000..5500.  At 5500 A has 3000 - 1500 = 1500 µs
    left and B 500: sharing, B is through at 5500 + 2 x 500 = 6500 and A, with 1000 left,
    at 7500 (all 3500 µs of data since 4000).  Without contention: 7000 and 6000."""
    st = two_transfers("link", [0, 1], [300, 50])
    assert transfer(st, 0) == (4000, 4000, 7500, 7550, 300)
    assert transfer(st, 1) == (5500, 5500, 6500, 6550, 50)
    st = two_transfers("none", [0, 1], [300, 50])
    assert transfer(st, 0) == (4000, 4000, 7000, 7050, 300)
    assert transfer(st, 1) == (5500, 5500, 6000, 6050, 50)


def test_processor_sharing_rounds_each_finish_up_to_the_microsecond():
    """At 25 GB/s a token takes 5.24288 µs.  A (prompt 300: 1572.864 µs) and B (prompt 100:
    524.288 µs) start together at 5000: B finishes at 5000 + ceil(2 x 524.288) = 6049; A
    has 1572.864 - 1049 / 2 = 1048.364 µs left: 6049 + ceil(1048.364) = 7098."""
    _, st = pd_run([0, 0], [300, 100], [1, 1], pd_transfer_contention="link", pd_transfer_bandwidth_gbps=25,
                   decode_instances=2)
    assert transfer(st, 1) == (5000, 5000, 6049, 6099, 100)
    assert transfer(st, 0) == (5000, 5000, 7098, 7148, 300)


def test_transfers_of_different_prefill_instances_do_not_share_a_link():
    """With two prefill instances (round-robin), A and B are prefilled on one each: their
    links are their own, so both run at the full bandwidth under contention link."""
    _, st = pd_run([0, 0], [300, 100], [1, 1], pd_transfer_contention="link", prefill_instances=2)
    assert [int(st.pd_reqs[r]["prefill_instance"]) for r in (0, 1)] == [0, 1]
    assert transfer(st, 0) == (4000, 4000, 7000, 7050, 300)
    assert transfer(st, 1) == (2000, 2000, 3000, 3050, 100)


def test_each_tp_rank_of_the_prefill_pool_sends_its_share_on_its_own_link():
    """Prefill pool TP 2: 65536 KV bytes per token per rank, 5 µs per token: 100 tokens'
    data take 500 µs (2000..2500, end 2550)."""
    doc = pools_doc({"decider": "always", "transfer": {"bandwidth_gbps": LINK_10US_PER_TOKEN}},
                    prefill={"instances": 1, "tp": 2})
    st = blis_fast.simulate(doc, workload=lengths_workload([0], [100], [2])).full_state
    assert float(st.pd_models[0]["kv_bytes_per_token"]) == KV_BYTES_PER_TOKEN / 2
    assert transfer(st, 0) == (2000, 2000, 2500, 2550, 100)


# ----------------------------------------------------------------------------- what a transfer charges


@pytest.mark.parametrize("charge, charged", [("destination-missing", 36), ("full-prompt", 100)])
def test_destination_missing_charges_only_the_blocks_the_decode_instance_lacks(charge, charged):
    """A and B share a 64-token prefix (4 blocks); A (at 0) leaves its blocks cached on the
    decode instance.  B (at 10000) is prefilled with those 4 blocks cached on the prefill
    instance too: 1000 + 10 x 36 -> 11360.  destination-missing charges 100 - 64 = 36 tokens
    (360 µs: data 11720, end 11770), full-prompt all 100 (1000 µs: 12360, 12410).  B's
    first token: one decode step of its last prompt token (1010 µs) after the transfer."""
    _, st = pd_run([0, 10_000], [100, 100], [2, 2], prefixes=[SHARED_PREFIX, SHARED_PREFIX],
                   pd_transfer_charge=charge)
    assert transfer(st, 0) == (2000, 2000, 3000, 3050, 100)
    assert tokens(st, 0) == (3050, 4060, 5065)
    end = 11360 + 10 * charged + BASE_LATENCY_US
    assert transfer(st, 1) == (11360, 11360, 11360 + 10 * charged, end, charged)
    assert int(leg(st, 1)["cached_tokens"]) == 64  # the prefill instance's cache
    assert int(st.reqs[1]["cached_tokens"]) == 64  # the decode instance's cache
    assert tokens(st, 1) == (end, end + 1010, end + 1010 + 1005)


# ----------------------------------------------------------------------------- no room on the decode instance

# 10 blocks per instance: A (prompt 100, 20 outputs) holds 7-8 blocks on the decode
# instance from 2000 to its last token; B (prompt 100, at 5000) needs 7 when its prefill
# ends at 7000.  A: prefill 0..2000, transfer 2000..3050, first token 4060, then 19 decode
# steps of 1005 µs: completed at 4060 + 19 x 1005 = 23155.
FULL = dict(arrivals=[0, 5000], lens=[100, 100], outputs=[20, 2], total_kv_blocks=10)
A_DONE = 4060 + 19 * 1005


def test_wait_holds_a_prefilled_request_until_blocks_free():
    """B waits from 7000 in the decode instance's transfer queue; the step that completes
    A frees its blocks and B's transfer starts at that step's end."""
    _, st = pd_run(**FULL, pd_on_decode_full="wait")
    assert tokens(st, 0) == (3050, 4060, A_DONE)
    assert int(st.pd_reqs[1]["wait_start_us"]) == 7000
    assert transfer(st, 1) == (7000, A_DONE, A_DONE + 1000, A_DONE + 1050, 100)
    assert tokens(st, 1) == (A_DONE + 1050, A_DONE + 1050 + 1010, A_DONE + 1050 + 1010 + 1005)
    assert int(st.reqs[1]["state"]) == RequestState.COMPLETED
    inst = st.inst[DECODE]
    pdi = st.pd_inst[DECODE]
    assert int(pdi["pd_waits"]) == 1 and int(pdi["xq_peak"]) == 1 and int(pdi["pd_drops"]) == 0
    assert int(pdi["xq_len"]) == 0 and int(inst["completed"]) == 2


def test_the_transfer_queue_is_served_in_order():
    """C (prompt 10: one block, at 6000) is prefilled 7000..8100, after B.  Its block would
    be free, but B waits at the head of the transfer queue: C waits behind it.  A's last
    step frees the blocks at 23155 and both start, in order: B's data 23155..24155 (end
    24205), C's 23155..23255 (end 23305).  Decode: C's last prompt token 23305..24315; then
    C's second token with B's last prompt token, 1000 + 10 + 5 -> 25330; B's second token
    26335."""
    _, st = pd_run([0, 5000, 6000], [100, 100, 10], [20, 2, 2], total_kv_blocks=10)
    assert tokens(st, 0)[2] == A_DONE
    assert [int(st.pd_reqs[r]["wait_start_us"]) for r in (1, 2)] == [7000, 8100]
    assert transfer(st, 1) == (7000, A_DONE, A_DONE + 1000, A_DONE + 1050, 100)
    assert transfer(st, 2) == (8100, A_DONE, A_DONE + 100, A_DONE + 150, 10)
    assert tokens(st, 2) == (23305, 24315, 25330)
    assert tokens(st, 1) == (24315, 25330, 26335)
    assert int(st.pd_inst[DECODE]["xq_peak"]) == 2 and int(st.pd_inst[DECODE]["pd_waits"]) == 2


def test_drop_drops_a_prefilled_request_that_finds_no_room_and_counts_it():
    """With drop, B ends at 7000: dropped at decode, nothing transferred, its leg's blocks
    freed on the prefill instance; A runs as alone."""
    res, st = pd_run(**FULL, pd_on_decode_full="drop")
    assert tokens(st, 0) == (3050, 4060, A_DONE)
    assert int(st.reqs[1]["state"]) == RequestState.DROPPED_AT_DECODE
    assert int(st.pd_reqs[1]["prefill_done_us"]) == 7000
    assert [int(st.pd_reqs[1][f]) for f in ("wait_start_us", "transfer_start_us", "transfer_end_us")] == [-1] * 3
    assert int(st.reqs[1]["generated"]) == 0 and int(st.reqs[1]["first_token_us"]) == -1
    assert int(leg(st, 1)["state"]) == RequestState.COMPLETED
    inst = st.inst
    assert int(st.pd_inst[DECODE]["pd_drops"]) == 1 and int(st.pd_inst[DECODE]["pd_waits"]) == 0
    assert int(inst[DECODE]["completed"]) == 1 and int(st.pd_inst[DECODE]["pd_transfers_in"]) == 1
    assert int(st.pd_inst[PREFILL]["pd_prefills"]) == 2
    assert int(res.cluster["completed_requests"]) == 1


def test_a_request_that_can_never_fit_on_its_decode_instance_is_dropped_unservable():
    """A prompt of 200 tokens (13 blocks) on decode instances of 12 blocks, prefilled on a
    prefill instance of 20 (YAML pools): dropped unservable at prefill_done, whatever
    on_decode_full says."""
    wl = lengths_workload([0], [200], [2])
    doc = pools_doc({"decider": "always", "transfer": {"bandwidth_gbps": LINK_10US_PER_TOKEN}},
                    prefill={"instances": 1, "total_kv_blocks": 20}, decode={"instances": 1, "total_kv_blocks": 12})
    st = blis_fast.simulate(doc, workload=wl).full_state
    assert list(st.inst["kv_total"]) == [20, 12]
    assert int(st.reqs[0]["state"]) == RequestState.DROPPED
    assert int(st.pd_reqs[0]["prefill_done_us"]) == 1000 + 10 * 200
    assert int(st.pd_reqs[0]["transfer_start_us"]) == -1
    assert int(st.inst[DECODE]["dropped"]) == 1 and (st.inst["kv_allocated"] == 0).all()


# ----------------------------------------------------------------------------- the decider


@pytest.mark.parametrize("threshold, disaggregated", [(100, True), (101, False)])
def test_prefix_threshold_disaggregates_from_the_threshold_on(threshold, disaggregated):
    """Nothing cached: uncached = the whole prompt (100).  Disaggregated: the path of
    test_one_request_...; not: the request runs on its decode instance as a monolithic one
    (queued at arrival, one step of 1000 + 10 x 100 -> first token 2000)."""
    _, st = pd_run([0], [100], [2], pd_decider="prefix-threshold", pd_threshold=threshold)
    assert int(st.reqs[0]["instance"]) == DECODE
    if disaggregated:
        assert int(st.pd_reqs[0]["prefill_instance"]) == PREFILL
        assert transfer(st, 0) == (2000, 2000, 3000, 3050, 100)
        assert tokens(st, 0) == (3050, 4060, 5065)
    else:
        assert int(st.pd_reqs[0]["prefill_instance"]) == -1 and transfer(st, 0)[0] == -1
        assert int(leg(st, 0)["state"]) == RequestState.PENDING  # (its leg row is never used)
        assert tokens(st, 0) == (0, 2000, 3005)
        assert int(st.inst[PREFILL]["steps"]) == 0
    assert int(st.reqs[0]["state"]) == RequestState.COMPLETED


@pytest.mark.parametrize("threshold, disaggregated", [(36, True), (37, False)])
def test_prefix_threshold_counts_the_blocks_cached_on_the_decode_instance(threshold, disaggregated):
    """A (disaggregated: 100 uncached tokens) leaves the shared 64-token prefix cached on
    the decode instance; B's uncached tokens are 100 - 4 x 16 = 36.  Not disaggregated, B
    runs on the decode instance with its prefix cached: 1000 + 10 x 36 -> first token at
    11360."""
    _, st = pd_run([0, 10_000], [100, 100], [2, 2], prefixes=[SHARED_PREFIX, SHARED_PREFIX],
                   pd_decider="prefix-threshold", pd_threshold=threshold)
    assert int(st.pd_reqs[0]["prefill_instance"]) == PREFILL
    assert int(st.reqs[1]["cached_tokens"]) == 64
    if disaggregated:
        assert transfer(st, 1) == (11360, 11360, 11720, 11770, 36)
    else:
        assert int(st.pd_reqs[1]["prefill_instance"]) == -1
        assert tokens(st, 1) == (10_000, 11360, 12365)


def test_decider_never_runs_every_request_on_the_decode_pool():
    _, st = pd_run([0, 0], [100, 50], [2, 2], pd_decider="never", decode_instances=2,
                   pd_transfer_bandwidth_gbps=None)  # (refused with never: it would change nothing)
    assert (st.pd_reqs["prefill_instance"] == -1).all() and int(st.inst[PREFILL]["steps"]) == 0
    assert [int(st.reqs[r]["instance"]) for r in (0, 1)] == [1, 2]
    assert tokens(st, 0) == (0, 2000, 3005) and tokens(st, 1) == (0, 1500, 2505)


# ----------------------------------------------------------------------------- first token from the prefill side


def test_first_token_prefill():
    """alpha2 = 7 µs on every token.  The prefill step ends at 2000: the first token is the
    leg's, visible at 2007 (TTFT 2007), and the handover follows it.  The decode side
    reserves the prompt and that token, receives 100 tokens (2007..3057) with the prompt
    computed, and computes token 2 in a step with one token of work (1010 µs -> 4067 + 7),
    token 3 in a decode step (5072 + 7)."""
    res, st = pd_run([0], [100], [3], alpha_coeffs=[0, 0, 7], pd_first_token="prefill")
    assert int(leg(st, 0)["first_token_us"]) == 2007
    assert int(st.pd_reqs[0]["prefill_done_us"]) == 2000
    assert transfer(st, 0) == (2000, 2007, 3007, 3057, 100)
    assert tokens(st, 0) == (3057, 2007, 5079)
    assert int(res.request_columns()["ttft_us"][0]) == 2007
    assert int(st.reqs[0]["itl_sum_us"]) == 5079 - 2007 and int(st.reqs[0]["generated"]) == 3


def test_first_token_prefill_with_one_output_token_completes_on_the_prefill_side():
    _, st = pd_run([0], [100], [1], pd_first_token="prefill")
    req = st.reqs[0]
    assert int(req["state"]) == RequestState.COMPLETED and int(req["instance"]) == PREFILL
    assert int(req["first_token_us"]) == int(req["last_token_us"]) == 2000
    assert transfer(st, 0)[1:4] == (-1, -1, -1)
    assert list(st.inst["completed"]) == [1, 0] and int(st.inst[DECODE]["steps"]) == 0


# ----------------------------------------------------------------------------- decider never = monolithic

INSTANCE_COUNTERS = ("steps", "busy_us", "prefill_tokens", "decode_tokens", "preemptions", "injected", "completed",
                     "dropped", "kv_peak_allocated", "batch_peak", "prefix_hit_tokens")


@pytest.mark.parametrize("k, routing, horizon", [(1, "round-robin", None), (3, "least-loaded", None),
                                                 (3, "prefix-affinity", LOADED_HORIZON)])
def test_decider_never_with_one_prefill_and_k_decode_instances_is_the_k_instance_monolithic_run(k, routing, horizon):
    """The loaded run (shared prefixes, KV pressure, preemptions, alpha overheads): P 1 +
    D k with decider never gives every request the results of the monolithic run on k
    instances -- on the instance one row later (the idle prefill instance is row 0) -- and
    each decode instance the counters of its monolithic twin."""
    kw = {**{key: v for key, v in LOADED.items() if key != "num_instances"}, "routing_policy": routing,
          "horizon": horizon}
    mono = blis_fast.simulate(num_instances=k, **kw)
    pd = blis_fast.simulate(prefill_instances=1, decode_instances=k, pd_decider="never", **kw)
    a, b = mono.request_columns(), pd.request_columns()
    assert int(mono.state.inst["preemptions"].sum()) > 0
    a["instance"] = np.where(a["instance"] >= 0, a["instance"] + 1, -1)  # (-1: not routed by the horizon)
    for col in a:
        assert np.array_equal(a[col], b[col]), col
    for f in INSTANCE_COUNTERS:
        assert np.array_equal(mono.state.inst[f][:k], pd.state.inst[f][1:]), f
    assert int(pd.state.inst["steps"][0]) == 0 and (pd.full_state.pd_reqs["prefill_instance"] == -1).all()


# ----------------------------------------------------------------------------- with other models

PD_POOLS = {"prefill": {"instances": 1}, "decode": {"instances": 2},
            "pd": {"decider": "prefix-threshold", "threshold": 256, "transfer": {"contention": "link"}}}


def two_models_run(tmp_path, clients, disaggregated):
    """configs/examples/two-models.yaml (20 s of its spec) with the deployments of
    ``disaggregated`` split into 1 prefill + 2 decode instances, only ``clients``' deployments
    and clients kept: (Result, the kept deployments' indices)."""
    import yaml

    doc = yaml.safe_load((ROOT / "configs" / "examples" / "two-models.yaml").read_text())
    spec = yaml.safe_load((ROOT / "configs" / "workloads" / "two-models.yaml").read_text())
    spec["duration_s"] = 20
    spec["clients"] = [spec["clients"][k] for k in clients]
    for k in disaggregated:
        del doc["deployments"][k]["instances"]
        doc["deployments"][k].update(PD_POOLS)
    doc["deployments"] = [doc["deployments"][k] for k in clients]
    path = tmp_path / f"spec-{'-'.join(map(str, clients))}.yaml"
    path.write_text(yaml.safe_dump(spec))
    doc["workload"]["spec_filepath"] = str(path)
    doc["simulation"]["check_invariants"] = True
    return blis_fast.simulate(doc)


@pytest.mark.parametrize("disaggregated", [(0,), (0, 1)])
def test_each_model_runs_as_its_deployment_alone(tmp_path, disaggregated):
    """llama (P/D) beside qwen (monolithic, or P/D too): each model's requests get the
    results of its deployment run alone with its own client (each model has its own
    routing groups, prefill legs and links)."""
    both = two_models_run(tmp_path, (0, 1), disaggregated)
    st, wl = both.full_state, both.workload
    assert (st.reqs["state"][: len(wl)] == RequestState.COMPLETED).all()
    cols = both.request_columns()
    for k, dep in enumerate(both.setup.deployments):
        mine = wl.model == k
        split = (st.pd_reqs["prefill_instance"] >= 0) & mine
        assert split.any() == (k in disaggregated) and (split != mine).any()  # (some requests, not all)
        alone = two_models_run(tmp_path, (k,), disaggregated)
        a = alone.request_columns()
        assert len(alone.workload) == int(mine.sum()) > 0
        for col in ("arrival_us", "ttft_us", "e2e_us", "completion_us", "generated_tokens", "cached_prompt_tokens"):
            assert np.array_equal(cols[col][mine], a[col]), (k, col)
        assert np.array_equal(cols["instance"][mine] - dep.first_instance, a["instance"])
        if k in disaggregated:  # (a run without P/D pools has a one-row, unused P/D table)
            legs = st.pd_reqs["prefill_instance"][mine]
            assert np.array_equal(np.where(legs >= 0, legs - dep.first_instance, -1),
                                  alone.full_state.pd_reqs["prefill_instance"])


# ----------------------------------------------------------------------------- engine bugs found (fixed; each pinned)


def test_a_waiting_transfer_never_starts_before_its_prefill_is_done():
    """As FULL on a 1 µs-per-token link, B arriving at 20500: A is transferred 2000..2150
    and completes at 3160 + 19 x 1005 = 22255 (its last step 21250..22255).  B's prefill
    step 20500..22500 is processed at 20500, while A holds the blocks; B is handed over at
    22500 (the LegDone event), when A's blocks are free: no wait, data 22600, end 22650,
    first token 23660, second 24665 (once, B waited and the engine started its transfer at
    22255: its KV arrived at 22405, 95 µs before its prompt was computed)."""
    _, st = pd_run(**{**FULL, "arrivals": [0, 20_500]}, pd_transfer_bandwidth_gbps=131.072)
    assert transfer(st, 0) == (2000, 2000, 2100, 2150, 100)
    assert tokens(st, 0) == (2150, 3160, 22255)
    assert int(st.pd_reqs[1]["wait_start_us"]) == -1  # (A's blocks are free by then: no wait)
    assert transfer(st, 1) == (22500, 22500, 22600, 22650, 100)
    assert tokens(st, 1) == (22650, 23660, 24665)


def test_a_received_request_is_admitted_when_the_batch_frees():
    """max_num_seqs 1.  A and B (prompt 100, 3 outputs) arrive at 0; A is prefilled 0..2000
    and decoded 3050..6070 (tokens 4060, 5065, 6070); B is prefilled 2000..4000 and
    received at 5050, while A fills the batch.  B is admitted by the step at 6070: tokens
    7080, 8085, 9090 (once, the engine scheduled no step after A's last -- its batch and
    wait queue were empty -- and B stayed queued forever, holding 7 blocks)."""
    _, st = pd_run([0, 0], [100, 100], [3, 3], all_done=False, max_num_seqs=1)
    assert tokens(st, 0) == (3050, 4060, 6070)
    assert transfer(st, 1) == (4000, 4000, 5000, 5050, 100)
    assert int(st.reqs[1]["state"]) == RequestState.COMPLETED
    assert tokens(st, 1) == (6070, 7080, 9090)


def test_a_workload_with_a_single_block_key_and_no_prefix_caching_runs():
    """One request of 8 prompt tokens and 3 outputs with blocks of 8: one block key in all
    (once, building its state failed: "State.key_shared: built as uint8(2,), declared
    uint8(1,)")."""
    from builders import prompts_workload

    wl = prompts_workload([0], [list(range(8))], [3], bs=8)
    res = blis_fast.simulate(workload=wl, **{**HAND, "block_size_in_tokens": 8, "enable_prefix_caching": False})
    assert int(res.state.reqs[0]["state"]) == RequestState.COMPLETED


def test_a_request_whose_prefill_routing_picks_its_decode_instance_runs_there():
    """Round-robin over decode [1, both 2] and prefill [0, both 2]: A goes to 1 by way of
    0; B's decode and prefill choices are both the both instance 2, so B runs there
    undisaggregated (once, its leg and its reservation both needed 7 of that instance's 10
    blocks and it waited forever for blocks only its own transfer would free)."""
    wl = lengths_workload([0, 0], [100, 100], [2, 2])
    doc = pools_doc({"decider": "always", "on_decode_full": "drop", "transfer": {"bandwidth_gbps": LINK_10US_PER_TOKEN}},
                    both={"instances": 1}, enable_prefix_caching=False)
    st = blis_fast.simulate(doc, workload=wl).full_state
    assert [int(st.pd_reqs[r]["prefill_instance"]) for r in (0, 1)] == [0, -1]
    assert [int(st.reqs[r]["instance"]) for r in (0, 1)] == [1, 2]
    assert [int(st.reqs[r]["state"]) for r in (0, 1)] == [RequestState.COMPLETED] * 2


def test_a_both_pool_needs_drop_when_the_decode_side_is_full():
    """Two both instances could each hold prefill legs' blocks while their transfers wait
    for the other's blocks: with a both pool, on_decode_full wait (the default) is refused."""
    from blis_fast.errors import ConfigError

    doc = pools_doc({"decider": "always"}, both={"instances": 1})
    with pytest.raises(ConfigError) as err:
        blis_fast.simulate(doc, workload=lengths_workload([0], [100], [2]))
    assert err.value.field == "deployments[0].pd.on_decode_full"


def test_first_token_prefill_tokens_stay_in_order_with_a_slow_prefill_side_alpha2():
    """The prefill pool's alpha2 is 2000 µs, the decode pool's 0; a 1 µs-per-token link.
    Prompt 100, 2 outputs: the prefill step ends at 2000, the first token is visible at
    4000; the handover follows it: the transfer runs 4000..4150 and the decode step
    computing token 2 ends at 5160 (once, the transfer started at 2000 and token 2 showed
    at 3160, before token 1: ITL -840)."""
    wl = lengths_workload([0], [100], [2])
    doc = pools_doc({"decider": "always", "first_token": "prefill", "transfer": {"bandwidth_gbps": 131.072}},
                    prefill={"instances": 1, "alpha_coeffs": [0, 0, 2000]})
    st = blis_fast.simulate(doc, workload=wl).full_state
    req = st.reqs[0]
    assert int(req["first_token_us"]) == 4000 and int(st.pd_reqs[0]["transfer_end_us"]) == 4150
    assert int(req["last_token_us"]) == 5160
    assert int(req["itl_sum_us"]) >= 0


def test_a_transfer_to_a_full_both_instance_is_dropped():
    """Round-robin, prefix-threshold 50; the prefill pool's queueing delay is 5000 µs, a
    link of 100 µs per token.  R0 (prompt 10) runs on decode instance 1 undisaggregated;
    R1 (prompt 100, at 1) goes to the both instance 2 by way of prefill instance 0; R2
    (prompt 100, at 2) to 1 by way of 2.  R2's leg holds 7 of instance 2's 10 blocks from
    2 to its transfer's end (2002..12052); R1's prefill ends at 7001 and finds no room on
    instance 2: with a both pool on_decode_full is drop, so R1 is dropped at decode (once,
    under wait, it was stranded: blocks a leg freed did not retry the waiting transfers)."""
    wl = lengths_workload([0, 1, 2], [10, 100, 100], [2, 2, 2])
    doc = pools_doc({"decider": "prefix-threshold", "threshold": 50, "on_decode_full": "drop",
                     "transfer": {"bandwidth_gbps": 1.31072}},
                    both={"instances": 1}, prefill={"instances": 1, "alpha_coeffs": [5000, 0, 0]})
    st = blis_fast.simulate(doc, workload=wl).full_state
    assert [int(st.pd_reqs[r]["prefill_instance"]) for r in range(3)] == [-1, 0, 2]
    assert [int(st.reqs[r]["instance"]) for r in range(3)] == [1, 2, 1]
    assert transfer(st, 2) == (2002, 2002, 12002, 12052, 100)
    assert int(st.reqs[1]["state"]) == RequestState.DROPPED_AT_DECODE
    assert int(st.pd_inst[2]["pd_drops"]) == 1


def traced_pd_run(**settings):
    """Four requests of prompt 100 on P 1 + D 2 (least-loaded), every one disaggregated,
    with the decision trace on."""
    wl = lengths_workload([0, 0, 0, 0], [100] * 4, [2] * 4)
    return blis_fast.simulate(workload=wl, **{**HAND, "decode_instances": 2, "routing_policy": "least-loaded",
                                              "trace_level": "decisions", **settings})


def test_the_decision_trace_of_a_pd_run_has_the_decode_and_prefill_routing_of_each_request():
    """Every request is routed twice: to its decode instance and (its leg) to a prefill
    instance; the engine's log has 8 records (legs as rows 4..7), the decision table 4
    routing and 4 prefill_routing records, named by their requests."""
    res = traced_pd_run()
    assert int(res.full_state.loop[0]["route_records"]) == 8
    table = res.decision_table()
    records = table["record"].to_pylist()
    assert records.count("routing") == 4 and records.count("prefill_routing") == 4
    assert sorted(r for r, k in zip(table["request"].to_pylist(), records) if k == "prefill_routing") == [0, 1, 2, 3]


def test_counterfactual_replays_of_a_pd_run_run_or_are_refused():
    """``counterfactual_k`` with P/D pools either replays decisions or is refused as a
    ConfigError (once, simulate() raised IndexError from results/regret.py)."""
    from blis_fast.errors import ConfigError

    try:
        res = traced_pd_run(counterfactual_k=2)
    except ConfigError:
        return
    assert isinstance(res.counterfactuals, list)


def test_a_batch_cohort_gives_each_member_its_own_pd_run():
    """Two weighted-routing candidates (queue depth vs KV utilization) on P 3 + D 1: they
    always pick the one decode instance but not the same prefill instances.  Evaluated as a
    cohort, each row must equal the candidate's own run (batch/cohorts.py: "nothing is
    approximated"; a P/D scenario runs every candidate alone: once, the second candidate got
    the first one's metrics)."""
    from blis_fast.batch import Budget
    from blis_fast.batch.candidates import load_candidate
    from blis_fast.batch.evaluate import evaluate_prepared
    from blis_fast.batch.scenarios import Scenario, prepare
    from blis_fast.config.sim import build_config

    def weighted(scorer):
        return {"routing": {"type": "weighted", "params": {"scorers": {scorer: 1.0}}}}

    scenario = prepare(Scenario("pd", build_config({}, {"prefill_instances": 3, "decode_instances": 1,
                                                        "pd_decider": "always", "workload": "chatbot", "rate": 150,
                                                        "num_requests": 300})), "ttft_p99_ms:min")
    cands = [load_candidate(weighted("queue-depth"), "qd"), load_candidate(weighted("kv-utilization"), "kv")]
    alone = [r.to_dict() for r in evaluate_prepared(cands, [scenario], Budget(max_wall_s=None), 1, cohorts=False)]
    assert alone[0]["metrics"] != alone[1]["metrics"]  # (their own runs differ)
    together = [r.to_dict() for r in evaluate_prepared(cands, [scenario], Budget(max_wall_s=None), 1, cohorts=True)]
    assert together == alone
