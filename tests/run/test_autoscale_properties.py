"""Autoscaling's invariants on random settings (kernels/engine/autoscale.py; issue 24):
instance counts within the bounds at every lifecycle change, requests and KV blocks
conserved through scale events in every drain mode, a request routed only to a serving
instance, the same run twice byte for byte -- and a P/D deployment's pools scaling apart.
(The hand-computed cases are tests/run/test_autoscale_engine.py.)"""

from __future__ import annotations

import blis_fast
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from blis_fast_kernels.kv.cache import kv_conserved
from blis_fast_kernels.schema import LifeState, RequestState

from tests.run.test_autoscale_engine import TICKS, life_log

SERVING = (LifeState.WARMING, LifeState.ACTIVE)
CURRENT = (LifeState.PROVISIONING, LifeState.LOADING, LifeState.WARMING, LifeState.ACTIVE)


def replay(st, first, rows, initial):
    """[(time, states of the pool's rows after every change at that time)], from the start."""
    states = [LifeState.ACTIVE] * initial + [LifeState.OFF] * (rows - initial)
    out = [(0, list(states))]
    for t, i, s in life_log(st):
        if first <= i < first + rows:
            states[i - first] = s
            if out[-1][0] == t:
                out[-1] = (t, list(states))
            else:
                out.append((t, list(states)))
    return out


scaler_settings = hs.fixed_dictionaries({
    "autoscaler": hs.sampled_from(["threshold", "target", "saturation", "oscillator"]),
    "num_instances": hs.integers(1, 3),
    "extra_max": hs.integers(1, 3),
    "drain": hs.sampled_from(["wait", "redirect", "immediate"]),
    "scale_down": hs.sampled_from(["least-loaded", "newest", "oldest"]),
    "stabilization_down_s": hs.sampled_from([0, 0.01, 0.05]),
    "max_change": hs.sampled_from([None, 1, 2]),
    "warm": hs.booleans(),
    "prefix_caching": hs.booleans(),
    "seed": hs.integers(0, 50),
})


def random_run(p):
    n0 = p["num_instances"]
    kw = dict(num_instances=n0, min_instances=1, max_instances=n0 + p["extra_max"], autoscaler=p["autoscaler"],
              drain=p["drain"], scale_down=p["scale_down"], workload="chatbot", num_requests=150, rate=400,
              seed=p["seed"], max_num_seqs=8, total_kv_blocks=400, enable_prefix_caching=p["prefix_caching"],
              **{**TICKS, "stabilization_down_s": p["stabilization_down_s"], "provisioning_delay_s": 0.005,
                 "loading_delay_s": "mean:0.01,std:0.01"})
    if p["autoscaler"] in ("threshold", "target"):
        kw.update(autoscale_signal="in_flight")
        kw.update(dict(autoscale_up=6, autoscale_down=2) if p["autoscaler"] == "threshold" else dict(autoscale_target=4))
    elif p["autoscaler"] == "oscillator":
        kw.update(autoscale_period_ticks=1)
    if p["max_change"] is not None:
        kw["autoscale_max_change"] = p["max_change"]
    if p["warm"]:
        kw.update(instance_warmup_factor=1.5, instance_warmup_requests=3)
    return kw


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scaler_settings)
def test_counts_stay_within_bounds_requests_and_blocks_are_conserved_and_runs_repeat(p):
    kw = random_run(p)
    res = blis_fast.simulate(check_invariants=True, **kw)
    st = res.full_state
    reqs = st.reqs
    assert (reqs["state"] == RequestState.COMPLETED).all()  # no request lost in any drain mode
    assert (st.inst["kv_allocated"] == 0).all() and all(kv_conserved(st, i) for i in range(len(st.inst)))
    times = [t for t, _, _ in life_log(st)]
    assert times == sorted(times)
    lo, hi = 1, kw["max_instances"]
    history = replay(st, 0, hi, kw["num_instances"])
    for t, states in history:
        current = sum(s in CURRENT for s in states)
        assert lo <= current <= hi, (t, states)
        assert sum(s in SERVING for s in states) >= 1
    # a request was routed only to an instance serving at that time (its last routing)
    for r in range(len(reqs)):
        when, i = reqs["routed_us"][r], reqs["instance"][r]
        states = [s for t, s in history if t <= when][-1]
        assert states[i] in SERVING, (r, when, i)
    again = blis_fast.simulate(check_invariants=True, **kw).full_state
    for name in ("reqs", "life_log", "scale_log", "scale_pools", "inst"):
        assert getattr(again, name).tobytes() == getattr(st, name).tobytes(), name


# ----------------------------------------------------------------------------- P/D pools


def test_prefill_and_decode_pools_scale_separately():
    # every request disaggregated; each pool starts with 1 instance and may grow to 3 on its own
    # requests in flight; the decode pool's rows follow the prefill pool's 3
    pools = {"prefill": {"instances": 1, "max_instances": 3,
                         "autoscale": {"interval_s": 0.05, "metrics_delay_s": 0, "provisioning_delay_s": 0.05,
                                       "loading_delay_s": 0.05, "stabilization_down_s": 0.2}},
             "decode": {"instances": 1, "max_instances": 3,
                        "autoscale": {"interval_s": 0.05, "metrics_delay_s": 0, "provisioning_delay_s": 0.1,
                                      "loading_delay_s": 0.1, "stabilization_down_s": 0.2}}}
    dep = {"name": "pd", "model": "meta-llama/llama-3.1-8b-instruct", "hardware": "H100", "pd": {"decider": "always"},
           **pools}
    res = blis_fast.simulate({"deployments": [dep], "policy": {"autoscaler": "threshold", "autoscale_signal": "in_flight",
                                                                "autoscale_up": 4, "autoscale_down": 0.5}},
                             workload="chatbot", num_requests=1500, rate=250, seed=3, check_invariants=True)
    st = res.full_state
    assert (st.reqs["state"][:1500] == RequestState.COMPLETED).all()
    assert (st.inst["kv_allocated"] == 0).all()
    log = life_log(st)
    prefill_rows = {i for _, i, _ in log if i < 3}
    decode_rows = {i for _, i, _ in log if i >= 3}
    assert prefill_rows and decode_rows  # both pools scaled
    for first in (0, 3):
        for t, states in replay(st, first, 3, 1):
            assert 1 <= sum(s in CURRENT for s in states) <= 3
    pools = st.scale_pools
    assert pools["enabled"].tolist() == [1, 1] and pools["first"].tolist() == [0, 3]
    assert (pools["scale_ups"] > 0).all()
