"""KV cache tiers over random workloads and configurations (kernels/kv/tiers.py; issue 23):

- block conservation on the GPU and entry conservation in every tier after every step
  (``check_invariants``: ``kv_conserved`` and ``tiers_conserved``), a key at most once per
  tier, every GPU block free at the end;
- the event-skipping engine and the path visiting every request every step give byte-
  identical results with tiers (stores, demotions, loads and pins included);
- a run repeated gives the same bytes (determinism);
- every request ends (completed or dropped): no instance idles with work waiting for blocks
  a store holds (P/D pools with tiers included).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blis_fast_kernels.schema import RequestState
from test_event_skipping import random_workload

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)

tiers = st.fixed_dictionaries({
    "kv_cpu_blocks": st.sampled_from([1, 3, 10, 100]),
    "kv_cpu_read_gbps": st.sampled_from([0.05, 1.0, 50.0]),
    "kv_cpu_write_gbps": st.sampled_from([0.02, 1.0, 50.0]),
    "kv_cpu_latency_us": st.sampled_from([0, 10, 1000]),
    "kv_disk_blocks": st.sampled_from([0, 0, 2, 5, 200]),
    "kv_disk_read_gbps": st.sampled_from([0.05, 5.0]),
    "kv_disk_write_gbps": st.sampled_from([0.01, 5.0]),
    "kv_disk_latency_us": st.sampled_from([0, 100]),
    "kv_store": st.sampled_from(["prompt-only", "all"]),
    "kv_load": st.sampled_from(["async", "async", "step"]),
})
engine = st.fixed_dictionaries({
    "num_instances": st.integers(1, 2),
    "total_kv_blocks": st.sampled_from([12, 20, 40, 400]),
    "max_num_running_reqs": st.sampled_from([1, 3, 8, 64]),
    "max_num_scheduled_tokens": st.sampled_from([8, 40, 128, 2048]),
    "long_prefill_token_threshold": st.sampled_from([0, 16]),
    "scheduler": st.sampled_from(["fcfs", "sjf"]),
    "routing_policy": st.sampled_from(["round-robin", "weighted"]),
    "alpha_coeffs": st.sampled_from([[0, 0, 0], [100, 1, 40]]),
    "beta_coeffs": st.sampled_from([[1000, 10, 5], [3000, 3, 700]]),
})


def run(wl, overrides, skipping: bool = True):
    """(results document as JSON text, kv_tiers summary group, state) of one run."""
    from blis_fast.config.sim import build_config
    from blis_fast.results import Result
    from blis_fast.run import build_state, resolve, run_to_end

    setup = resolve(build_config({}, {**overrides, "check_invariants": True}))
    state = run_to_end(build_state(setup, wl, event_skipping=skipping))
    res = Result(setup, wl, state)
    return json.dumps(res.results_document(), sort_keys=True), json.dumps(res.summary()["kv_tiers"]), state


PD = dict(prefill_instances=1, decode_instances=1, pd_decider="always")  # (both pools take the tiers)


def check(seed, sessions, bs, tier_settings, engine_settings, pd=False):
    wl = random_workload(seed, bs, sessions)
    overrides = {**engine_settings, **tier_settings, "block_size_in_tokens": bs}
    if pd:
        overrides = {**{k: v for k, v in overrides.items() if k != "num_instances"}, **PD}
    if overrides["kv_disk_blocks"] == 0:  # (no disk tier: its link settings would be refused)
        overrides = {k: v for k, v in overrides.items() if not k.startswith("kv_disk")}
    doc, group, state = run(wl, overrides)
    # every GPU block free once every request has finished; a key once per tier
    # (a pending one: the follower of a dropped request, never released)
    finished = (RequestState.PENDING, RequestState.COMPLETED, RequestState.DROPPED, RequestState.DROPPED_AT_DECODE)
    assert np.isin(state.reqs["state"][:len(wl)], finished).all()
    assert (state.inst["kv_allocated"] == 0).all() and (state.blocks["ref_count"] == 0).all()
    for row in range(len(state.tiers)):
        t = state.tiers[row]
        keys = state.tier_slots["key"][t["slot_offset"]:t["slot_offset"] + t["used"]]
        assert len(np.unique(keys)) == len(keys) and t["used"] <= t["capacity"]
    assert (state.tier_slots["pins"] == 0).all() and (state.tier_src == 0).all()
    assert run(wl, overrides, skipping=False)[:2] == (doc, group)
    assert run(wl, overrides)[:2] == (doc, group)


@settings(max_examples=25, **SETTINGS)
@given(st.integers(0, 2**31), st.booleans(), st.sampled_from([4, 16]), tiers, engine, st.booleans())
def test_tiers_conserve_blocks_and_event_skipping_is_exact(seed, sessions, bs, tier_settings, engine_settings, pd):
    check(seed, sessions, bs, tier_settings, engine_settings, pd)


@pytest.mark.slow
@settings(max_examples=250, **SETTINGS)
@given(st.integers(0, 2**31), st.booleans(), st.sampled_from([4, 16]), tiers, engine, st.booleans())
def test_tiers_conserve_blocks_and_event_skipping_is_exact_many(seed, sessions, bs, tier_settings, engine_settings,
                                                                 pd):
    check(seed, sessions, bs, tier_settings, engine_settings, pd)
