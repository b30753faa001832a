"""Regression: a lowest-priority victim chosen *after* it was served in the step must not
leave the prefix keys of its un-computed chunk in the cache (kv_forget_chunk)."""

import dataclasses

import numpy as np

import blis_fast
import entry as E
from blis_fast.workload import Workload
from blis_fast_kernels.schema import RequestState


def test_victim_served_this_step_forgets_its_chunk_keys():
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 1000, 160), rng.integers(1000, 2000, 160)
    wl = Workload.from_tokens(np.array([0, 0]), np.concatenate([a, b]), np.array([0, 160, 320]),
                              np.array([4, 4]), 16)
    wl = dataclasses.replace(wl, slo_class=np.array([1, 0], np.int32))
    # 1000 µs steps at t = 0, 1000, 2000 (the horizon stops after the third).  Chunks of 48
    # tokens: in step 3, A (batch slot 0, low priority) gets blocks 6..8 and registers their
    # keys, then B's allocation fails (17 blocks: 2 left) and A is preempted.  B's retry
    # takes the 2 never-used blocks and A's block 8 (released first); A's blocks 6 and 7
    # stay free -- their keys must be gone, since their KV was never computed.
    r = blis_fast.simulate(workload=wl, alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 0, 0], total_kv_blocks=17,
                           long_prefill_token_threshold=48, max_num_scheduled_tokens=96,
                           priority_policy="slo-based", slo_class_weights=[0, -100],
                           preemption_victim="lowest-priority", horizon=2000, check_invariants=True)
    st = r.state
    assert st.reqs[0]["preemptions"] == 1 and st.reqs[0]["state"] == RequestState.QUEUED  # A queued again
    assert st.reqs[1]["preemptions"] == 0 and st.reqs[1]["computed"] == 144
    q0 = int(st.reqs[0]["key_start"])
    found = [int(E.key_lookup(st, 0, q0 + j)) >= 0 for j in range(9)]
    assert found == [True] * 6 + [False] * 3
    # A's content is its own: its keys live in direct slots, not in the hash table
    assert not st.key_shared[q0: q0 + 9].any()
    assert [int(st.kv_slot[q0 + j]) > 0 for j in range(9)] == found
    assert int(st.reqs[0]["blocks_held"]) == 0  # the preempted request released everything
