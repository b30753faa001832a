"""KV cache tiers in the event loop, hand-computed to the µs (kernels/kv/tiers.py,
kernels/engine/tiers.py; docs/semantics.md §14; issue 23).

Every case runs llama-3.1-8b with blackbox step times alpha = (0, 0, 0) and beta = (1000,
10, 5): a step takes 1000 + 10 x prefill tokens + 5 x decode requests µs, on one instance
with blocks of 16 tokens.  A block is 16 x 131072 = 2,097,152 bytes (TP 1), so a tier link
of 20.97152 GB/s (20971.52 bytes/µs) moves one block in exactly 100 µs; the tiers' latency
is 50 µs unless a case says otherwise.

Keys are made by hand (``keyed_workload``): request i's blocks carry the given key values,
so which blocks are shared -- and found again -- is explicit.
"""

from __future__ import annotations

import numpy as np
import pytest

import blis_fast
from blis_fast.workload import Workload
from blis_fast_kernels.kv.cache import kv_conserved
from blis_fast_kernels.kv.tiers import tiers_conserved
from blis_fast_kernels.schema import N_TIERS, RequestState

BLOCK = 16
GBPS_100US_PER_BLOCK = 20.97152  # GB/s: 2,097,152 bytes / 20971.52 bytes per µs = 100 µs
LATENCY_US = 50
HAND = dict(alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], num_instances=1, check_invariants=True,
            kv_cpu_read_gbps=GBPS_100US_PER_BLOCK, kv_cpu_write_gbps=GBPS_100US_PER_BLOCK,
            kv_cpu_latency_us=LATENCY_US)
DISK = dict(kv_disk_read_gbps=GBPS_100US_PER_BLOCK, kv_disk_write_gbps=GBPS_100US_PER_BLOCK,
            kv_disk_latency_us=LATENCY_US)


def keyed_workload(arrivals, prompt_lens, outputs, keys) -> Workload:
    """A workload whose request i has ``keys[i]`` as its block keys (one per full block of
    prompt + output: floor((L + N) / 16) of them; equal values = the same content)."""
    counts = [(p + o) // BLOCK for p, o in zip(prompt_lens, outputs)]
    assert [len(k) for k in keys] == counts, counts
    flat = np.array([k for ks in keys for k in ks], np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    wl = Workload(np.asarray(arrivals, np.int64), np.asarray(prompt_lens, np.int64), np.asarray(outputs, np.int64),
                  flat, offsets, BLOCK)
    wl.validate()
    return wl


def distinct(start: int, n: int) -> list[int]:
    """n key values nobody else uses (from ``start``)."""
    return list(range(start, start + n))


def tier_run(wl, **settings):
    """(Result, full state) of a run of ``wl`` with the HAND settings and ``settings`` over
    them; checks that every request completed and every GPU block and tier entry is
    conserved, the GPU blocks all free."""
    res = blis_fast.simulate(workload=wl, **{**HAND, **settings})
    st = res.full_state
    assert (st.reqs["state"] == RequestState.COMPLETED).all()
    assert (st.inst["kv_allocated"] == 0).all() and (st.blocks["ref_count"] == 0).all()
    assert kv_conserved(st, 0) and tiers_conserved(st, 0)
    return res, st


def tier(st, k):
    """Instance 0's tier k row."""
    return st.tiers[k]


def entries(st, k) -> set[int]:
    """The key values tier k of instance 0 holds."""
    t = st.tiers[k]
    lo = int(t["slot_offset"])
    return set(st.tier_slots["key"][lo:lo + int(t["used"])].tolist())


# ----------------------------------------------------------------------------- found and loaded


P = [1, 2, 3, 4]  # a 4-block prefix (64 tokens) two requests share


def evicted_prefix_workload(arrival2=5_000):
    """Request 0 (t = 0): the prefix P + 1 output token.  Request 1 (t = 2000): 96 tokens of
    its own, which take all 6 GPU blocks -- P is evicted from the GPU.  Request 2: P + 16
    tokens of its own, 1 output token: it finds P only in the CPU tier."""
    return keyed_workload([0, 2000, arrival2], [64, 96, 80], [1, 1, 1],
                          [P, distinct(100, 6), P + distinct(200, 1)])


def test_a_prefix_evicted_from_the_gpu_is_loaded_from_the_cpu_tier_in_latency_plus_bytes_over_bandwidth():
    """Request 0's prompt blocks are keyed at t = 0 and stored one after another (FIFO):
    they land at 100, 200, 300, 400 µs.  Request 1 evicts them from the GPU at t = 2000.
    Request 2 (t = 5000) finds the 4 blocks in the CPU tier: it takes 4 blocks + 1 for its
    next token and loads 4 x 100 µs of data, then the 50 µs latency: loaded at 5450, it
    computes its last 16 prompt tokens in 1000 + 160 = 1160 µs: first token at 6610."""
    res, st = tier_run(evicted_prefix_workload(), total_kv_blocks=6, kv_cpu_blocks=100)
    r2 = st.reqs[2]
    assert int(st.tier_reqs[2]["load_start_us"]) == 5000
    assert int(st.tier_reqs[2]["load_end_us"]) == 5000 + 4 * 100 + LATENCY_US
    assert int(r2["first_scheduled_us"]) == 5450
    assert int(r2["first_token_us"]) == 5450 + 1000 + 10 * 16
    assert int(r2["cached_tokens"]) == 64
    assert int(st.tier_reqs[2]["hit_blocks_0"]) == 4
    c = res.summary()["cluster"]
    assert (c["prefix_hit_tokens_gpu"], c["prefix_hit_tokens_cpu"], c["prefix_hit_tokens_disk"]) == (0, 64, 0)
    g = res.summary()["kv_tiers"]
    assert g["tiers"]["cpu"]["stored_blocks"] == 4 and g["tiers"]["cpu"]["loads"] == 1
    assert g["load_requests"] == 1 and g["load_wait_mean_ms"] == pytest.approx(0.45)
    assert g["gpu_evictions"] == 4 and g["thrashing_rate"] == 1.0
    rec = res.requests_table().to_pylist()[2]
    assert rec["loaded_tokens_cpu"] == 64 and rec["load_wait_ms"] == pytest.approx(0.45)


def test_without_tiers_the_prefix_is_computed_again():
    """The same workload without a tier: request 2 computes all 80 prompt tokens."""
    res = blis_fast.simulate(workload=evicted_prefix_workload(), total_kv_blocks=6,
                             **{k: v for k, v in HAND.items() if not k.startswith("kv_")})
    r2 = res.state.reqs[2]
    assert int(r2["first_token_us"]) == 5000 + 1000 + 10 * 80
    assert "kv_tiers" not in res.summary() and "prefix_hit_tokens_cpu" not in res.summary()["cluster"]


def test_load_step_charges_the_load_to_the_admitting_step():
    """load: step -- request 2 is admitted at once; its step takes the load's 50 + 400 µs
    on top of 1000 + 160: first token at 5000 + 1610."""
    _, st = tier_run(evicted_prefix_workload(), total_kv_blocks=6, kv_cpu_blocks=100, kv_load="step")
    assert int(st.reqs[2]["first_scheduled_us"]) == 5000
    assert int(st.reqs[2]["first_token_us"]) == 5000 + 1000 + 10 * 16 + 450
    assert int(st.tier_reqs[2]["load_start_us"]) == -1  # (nothing waited)


def test_two_loads_share_the_link_by_processor_sharing():
    """Requests 3 and 4 (t = 10000) find 2 and 4 blocks in the CPU tier (evicted from the
    GPU by request 2): their loads start together and share the read link.  Each progresses
    at half the bandwidth while both run: request 3's 200 µs of data is through at +400;
    request 4 then has 200 µs left at the full bandwidth: through at +600.  Each is loaded
    50 µs later."""
    p1, p2 = [11, 12], [21, 22, 23, 24]
    wl = keyed_workload([0, 0, 3000, 10_000, 10_000], [48, 80, 160, 48, 80], [1, 1, 1, 1, 1],
                        [p1 + distinct(300, 1), p2 + distinct(310, 1), distinct(400, 10),
                         p1 + distinct(500, 1), p2 + distinct(510, 1)])
    _, st = tier_run(wl, total_kv_blocks=10, kv_cpu_blocks=100)
    assert (int(st.tier_reqs[3]["hit_blocks_0"]), int(st.tier_reqs[4]["hit_blocks_0"])) == (2, 4)
    assert int(st.tier_reqs[3]["load_end_us"]) == 10_000 + 400 + LATENCY_US
    assert int(st.tier_reqs[4]["load_end_us"]) == 10_000 + 600 + LATENCY_US
    assert int(tier(st, 0)["link_peak"]) == 2


# ----------------------------------------------------------------------------- the chain and demotion


def test_the_chain_continues_into_the_disk_tier_and_a_cpu_eviction_demotes():
    """A CPU tier of 2 blocks and a disk tier: request 0's prefix blocks 1..4 are stored to
    the CPU at 100, 200, 300, 400 µs; the stores of 3 and 4 evict 1 and 2 (least recently
    stored), which are demoted to the disk (written at 400 and 500).  Request 2 then finds
    1, 2 on the disk and 3, 4 in the CPU: two loads, one per tier, in parallel (each 200 µs
    of data + 50 µs): loaded at +250."""
    _, st = tier_run(evicted_prefix_workload(), total_kv_blocks=6, kv_cpu_blocks=2, kv_disk_blocks=10, **DISK)
    assert entries(st, 0) == {3, 4} and entries(st, 1) == {1, 2}
    assert int(tier(st, 0)["evictions"]) == 2 and int(tier(st, 1)["stored"]) == 2
    tr = st.tier_reqs[2]
    assert (int(tr["hit_blocks_0"]), int(tr["hit_blocks_1"])) == (2, 2)
    assert int(tr["load_end_us"]) == 5000 + 200 + LATENCY_US
    assert int(st.reqs[2]["cached_tokens"]) == 64


def test_the_chain_stops_at_the_first_key_found_nowhere():
    """As above, with a disk tier of 1 block: the demotion of 2 evicts 1 from the disk (the
    last tier: gone).  Request 2's first key is found nowhere, so the chain stops there --
    although 2, 3 and 4 are in the tiers -- and it computes its whole prompt."""
    _, st = tier_run(evicted_prefix_workload(), total_kv_blocks=6, kv_cpu_blocks=2, kv_disk_blocks=1, **DISK)
    assert int(tier(st, 1)["evictions"]) >= 1  # (request 2's own stores move the tiers on afterwards)
    assert int(st.tier_reqs[2]["hit_blocks_0"]) == 0 and int(st.tier_reqs[2]["hit_blocks_1"]) == 0
    assert int(st.reqs[2]["cached_tokens"]) == 0
    assert int(st.reqs[2]["first_token_us"]) == 5000 + 1000 + 10 * 80


# ----------------------------------------------------------------------------- copies in flight


def test_a_gpu_block_being_stored_cannot_be_evicted():
    """A slow CPU writer (one block per 1 s): request 0's 4 prompt blocks land at 1, 2, 3 and
    4 s, pinned on the GPU until then.  Request 1 (t = 2000) needs all 6 GPU blocks: it
    waits until the last of them is free, at 4 s, and is admitted then."""
    _, st = tier_run(evicted_prefix_workload(arrival2=10_000_000), total_kv_blocks=6, kv_cpu_blocks=100,
                     kv_cpu_write_gbps=GBPS_100US_PER_BLOCK / 10_000)
    assert int(st.reqs[1]["first_scheduled_us"]) == 4_000_000


def test_an_entry_being_loaded_cannot_be_evicted():
    """A CPU tier of 4 blocks holding P, and a slow read link (1 s per block): request 2
    loads P from t = 5000 to 4 s later (request 1 took all 10 GPU blocks at t = 2000).
    Meanwhile request 3 (t = 6000, 4 prompt blocks shared with request 4) stores 4 blocks
    into the full tier: every entry is pinned by the load, so the writes are dropped and P
    stays."""
    wl = keyed_workload([0, 2000, 5000, 6000, 9_000_000], [64, 160, 80, 80, 80], [1, 1, 1, 1, 1],
                        [P, distinct(100, 10), P + distinct(200, 1), distinct(600, 4) + [700],
                         distinct(600, 4) + [701]])
    _, st = tier_run(wl, total_kv_blocks=10, kv_cpu_blocks=4, kv_cpu_read_gbps=GBPS_100US_PER_BLOCK / 10_000)
    assert int(st.tier_reqs[2]["hit_blocks_0"]) == 4
    assert int(tier(st, 0)["write_drops"]) == 4
    assert int(st.tier_reqs[2]["load_end_us"]) == 5000 + 4 * 1_000_000 + LATENCY_US


# ----------------------------------------------------------------------------- what is stored


def session_workload():
    """Turn 0: 32 prompt tokens (keys 1, 2) and 32 output tokens (keys 3, 4); turn 1 (t = 1 s)
    re-sends all 64 and 16 more (keys 1..5), 1 output token."""
    return keyed_workload([0, 1_000_000], [32, 80], [32, 1], [[1, 2, 3, 4], [1, 2, 3, 4, 5]])


@pytest.mark.parametrize("store, stored", [("prompt-only", {1, 2, 4}), ("all", {1, 2, 3, 4})])
def test_prompt_only_stores_no_generated_block(store, stored):
    """Turn 0's prompt blocks (keys 1, 2) are stored either way; its generated block 3 only
    with store: all (its block 4 never fills: the last output token's KV is never
    computed).  Turn 1 finds 1..3 on the GPU and computes block 4 as a prompt block of its
    own: stored either way; key 5 is its own (never stored)."""
    _, st = tier_run(session_workload(), total_kv_blocks=20, kv_cpu_blocks=100, kv_store=store)
    assert int(tier(st, 0)["stored"]) == len(stored)
    assert entries(st, 0) == stored


def test_a_run_without_tiers_has_no_tier_rows_in_use():
    _, st = blis_fast.simulate(workload=session_workload(), total_kv_blocks=20), None
    full = _.full_state
    assert (full.kv_tier_inst["n_tiers"] == 0).all() and len(full.tier_reqs) == 1
    assert len(full.tiers) == N_TIERS * len(full.inst)


# ----------------------------------------------------------------------------- trace and summary


def test_the_full_trace_records_each_load():
    """At trace level full, request 2's load is a ``load`` record: when it left the queue,
    the tokens it loads, those found in all (GPU and tiers) and when the load was done."""
    res, _ = tier_run(evicted_prefix_workload(), total_kv_blocks=6, kv_cpu_blocks=100, trace_level="full")
    rows = [r for r in res.decision_table().to_pylist() if r["record"] == "load"]
    assert len(rows) == 1
    row = rows[0]
    assert (row["request"], row["time_us"], row["instance"], row["tokens"], row["hit_tokens"],
            row["load_done_us"]) == (2, 5000, 0, 64, 64, 5450)


def test_a_trace_without_tiers_has_no_load_column():
    res = blis_fast.simulate(workload=evicted_prefix_workload(), total_kv_blocks=6, trace_level="full",
                             **{k: v for k, v in HAND.items() if not k.startswith("kv_")})
    assert "load_done_us" not in res.decision_table().column_names


@pytest.mark.parametrize("read_gbps, bound", [(GBPS_100US_PER_BLOCK, False), (GBPS_100US_PER_BLOCK / 1000, True)])
def test_the_trace_summary_names_a_load_bound_run(read_gbps, bound):
    """Request 2 waits 450 µs for its load of a 1610 µs TTFT at 100 µs per block (0.28: not
    load-bound); at 1000 times less bandwidth, 400 ms of ~401 ms."""
    res, _ = tier_run(evicted_prefix_workload(), total_kv_blocks=6, kv_cpu_blocks=100, kv_cpu_read_gbps=read_gbps)
    text = res.summary_text()
    assert "KV tiers: prefix hits by where they were found" in text
    assert ("**load-bound**" in text) == bound
    assert ("(not load-bound)" in text) == (not bound)


def test_a_prefill_pool_loads_through_the_prefill_legs():
    """P/D with tiers: every request is prefilled on the prefill instance (row 0) by its
    prefill leg; request 2's leg finds P in that instance's CPU tier (request 1's leg
    evicted it from its GPU) and loads it there; the results count the load as request 2's."""
    res = blis_fast.simulate(workload=evicted_prefix_workload(), total_kv_blocks=6, kv_cpu_blocks=100,
                             prefill_instances=1, decode_instances=1, pd_decider="always",
                             **{k: v for k, v in HAND.items() if k != "num_instances"})
    st = res.full_state
    base = int(st.settings[0]["pd_base"])
    assert int(st.reqs[2 + base]["instance"]) == 0 and int(st.tier_reqs[2 + base]["hit_blocks_0"]) == 4
    assert int(st.tier_reqs[2 + base]["load_end_us"]) == int(st.tier_reqs[2 + base]["load_start_us"]) + 450
    rec = res.requests_table().to_pylist()[2]
    assert rec["loaded_tokens_cpu"] == 64 and rec["load_wait_ms"] == pytest.approx(0.45)
    assert res.summary()["kv_tiers"]["load_requests"] == 1
    assert all(kv_conserved(st, i) and tiers_conserved(st, i) for i in range(len(st.inst)))


# ----------------------------------------------------------------------------- metrics for studies and objectives


def test_tier_metrics_are_study_and_objective_metrics():
    """The hit split, the loads and the thrashing rate can be named by objectives and study
    metrics; a run without tiers has every hit on the GPU and nothing loaded."""
    from blis_fast.results.objectives import metric_value

    res, _ = tier_run(evicted_prefix_workload(), total_kv_blocks=6, kv_cpu_blocks=100)
    assert metric_value(res, "prefix_hit_rate_cpu") == res.summary()["cluster"]["prefix_hit_rate_cpu"] > 0
    assert metric_value(res, "load_wait_mean_ms") == pytest.approx(0.45)
    assert metric_value(res, "thrashing_rate") == 1.0
    ev = res.evaluate("thrashing_rate:min:1,ttft_p99_ms:min:1")
    assert ev.metrics["thrashing_rate"] == 1.0
    plain = blis_fast.simulate(workload=evicted_prefix_workload(), total_kv_blocks=6,
                               **{k: v for k, v in HAND.items() if not k.startswith("kv_")})
    assert metric_value(plain, "prefix_hit_rate_cpu") == 0.0 and metric_value(plain, "load_requests") == 0.0
    assert metric_value(plain, "prefix_hit_rate_gpu") == plain.summary()["cluster"]["prefix_cache_hit_rate"]
    assert "prefix_hit_rate_cpu" not in plain.evaluation_metrics  # (a run without tiers keeps its tables)
