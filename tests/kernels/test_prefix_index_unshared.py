"""The router index keeps keys that only one request carries as place-holders only
(kernels/policies/prefix_index.py ``index_insert_unshared``): routing must be identical to
inserting them for real, also when the index overflows and evicts."""

import dataclasses

import numpy as np
import pytest

from blis_fast.config.sim import build_config
from blis_fast.run import build_state, build_workload, resolve, run_to_end
from blis_fast.workload import Workload
from blis_fast_kernels.structs import keycount


def _run(cfg, wl, all_shared, monkeypatch=None):
    setup = resolve(cfg)
    if all_shared:  # every key inserted for real (and the tables sized for that)
        state = build_state(setup, dataclasses.replace(wl, key_shared=np.ones(len(wl.block_keys), np.uint8)))
        assert state.key_shared.all()
    else:
        state = build_state(setup, wl)
        assert not state.key_shared.all()
    return run_to_end(state)


def _prefix_groups_workload(n=400, groups=6, prefix=96, body=40, seed=3):
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, 50_000, prefix) for _ in range(groups)]
    toks, offs = [], [0]
    for i in range(n):
        p = np.concatenate([prompts[rng.integers(groups)], rng.integers(0, 50_000, body)])
        toks.append(p)
        offs.append(offs[-1] + len(p))
    arrival = np.cumsum(rng.integers(1_000, 20_000, n))
    return Workload.from_tokens(arrival, np.concatenate(toks), np.array(offs), np.full(n, 8), 16)


@pytest.mark.parametrize("capacity", [4, 9, 40, 10_000])
@pytest.mark.parametrize("routing", ["weighted", "prefix-affinity"])
def test_unshared_keys_route_like_real_keys(capacity, routing, monkeypatch):
    wl = _prefix_groups_workload()
    scorers = {"routing_scorers": "prefix-affinity:3,queue-depth:1"} if routing == "weighted" else {}
    cfg = build_config({}, {"num_instances": 4, "routing_policy": routing, "prefix_index_capacity": capacity,
                            **scorers})
    fast = _run(cfg, wl, all_shared=False)
    real = _run(cfg, wl, all_shared=True, monkeypatch=monkeypatch)
    assert np.array_equal(fast.reqs["instance"], real.reqs["instance"])
    assert np.array_equal(fast.reqs["first_token_us"], real.reqs["first_token_us"])
    assert np.array_equal(fast.pi_state[:, 0], real.pi_state[:, 0])  # same index sizes


def test_unshared_flags_follow_the_workload():
    cfg = build_config({}, {"workload": "chatbot", "prefix_tokens": 64, "num_requests": 50,
                            "routing_policy": "weighted", "num_instances": 2})
    wl = build_workload(cfg)
    state = build_state(resolve(cfg), wl)
    shared = state.key_shared.astype(bool)
    # the 4 prefix blocks are shared by everyone, random bodies by no one
    for i in range(len(wl)):
        ks = slice(wl.key_offsets[i], wl.key_offsets[i + 1])
        assert shared[ks][:4].all() and not shared[ks][4:].any()
