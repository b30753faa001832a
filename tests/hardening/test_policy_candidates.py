"""Random policy candidates -- what an evolutionary search throws at the simulator: every
kind, weights from ordinary to extreme (1.7e308, 5e-324, NaN, infinities, huge integers),
wrong types and names.  Each candidate either runs to the end with finite results or is
refused by validation with a ConfigError naming the setting; nothing else.

The suite runs a few dozen candidates (more with ``-m slow``: HARDENING_VALID_CANDIDATES and
HARDENING_RANDOM_CANDIDATES, default 100 each).  For a long campaign:

    HARDENING_CANDIDATES=10000 HARDENING_REPORT=/tmp/candidates.json \\
        python -m pytest -q -m slow tests/hardening/test_policy_candidates.py -k campaign

writes the outcome counts and the time taken to HARDENING_REPORT.
"""

from __future__ import annotations

import collections
import json
import math
import os
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blis_fast
from blis_fast.config.policy import (ADMISSION_POLICIES, PRIORITY_AGE_WEIGHT, ROUTING_POLICIES, SCHEDULERS, SCORERS,
                                     SORT_ATTRIBUTES, VICTIMS)
from blis_fast.errors import ConfigError
from blis_fast_kernels import schema as S

SPEC = """\
seed: 11
duration_s: 3
slo_classes: {gold: {ttft_ms: 300}, silver: {ttft_ms: 1000}, bronze: {}}
prefix_groups:
  sys: {count: 3, length: 200}
clients:
  - {name: a, rate: 12, tenant: t1, slo_class: gold, prompt_tokens: {type: uniform, min: 20, max: 600},
     output_tokens: {type: exponential, mean: 40, max: 300}, prefix: {group: sys}}
  - {name: b, rate: 6, tenant: t2, slo_class: silver, prompt_tokens: 300, output_tokens: 80,
     session: {turns: 3, think_time_s: 0.2}, prefix: {group: sys, reuse_probability: 0.5}}
  - {name: c, rate: 4, tenant: t3, slo_class: bronze, prompt_tokens: 1200, output_tokens: 150}
"""
SCENARIO = dict(num_instances=3, max_num_running_reqs=6, total_kv_blocks=300, max_num_scheduled_tokens=512)

EXTREMES = [1.7976931348623157e308, 1.7e308, 1e308, 2.0**1000, 1e300, 1e101, 1e100, 1e12, 3.0, 1.0, 0.5, 1e-12,
            1e-300, 2.2250738585072014e-308, 5e-324, 0.0, -0.0, -1.0, -1e100, -1.7e308]
JUNK = st.sampled_from([math.nan, math.inf, -math.inf, "1e5", "x", None, True, [1.0], {"a": 1}, 2**70, -2**70])
WEIGHT = st.one_of(  # mostly valid numbers, extremes included; a quarter junk
    st.sampled_from(EXTREMES),
    st.floats(min_value=-1e6, max_value=1e6),
    st.floats(min_value=1e-300, max_value=1.7e308),
    JUNK,
)
POSITIVE = st.one_of(st.sampled_from([x for x in EXTREMES if x > 0]), st.floats(min_value=1e-300, max_value=1.7e308),
                     st.floats(min_value=1e-3, max_value=1e3), JUNK)
INTERVAL = st.one_of(st.integers(min_value=0, max_value=10**7), st.integers(min_value=-3, max_value=2**60),
                     st.sampled_from([2**53, 2**53 + 1, 2**70, 1.5]), JUNK)


def names(choices, weight: int = 6):
    """A valid name most of the time, else a wrong one."""
    return st.sampled_from(sorted(choices) * weight + ["", "bogus", "ROUND-ROBIN"])


# slot's policy setting -> (its program setting, valid expressions, a valid tree)
PROGRAMS = {
    "admission_policy": ("admission_program", ["1", "prompt_tokens < 2000", "waiting < 5*instances or slo_class == 0",
                                               "exp(time_s) > 1e300 * prompt_tokens"],
                         {"feature": "tenant", "threshold": 0, "left": 1, "right": "kv_utilization < 0.8"}),
    "routing_policy": ("routing_program", ["-load", "hit_blocks**2 - 0.3*queue/(1 + kv_free)", "1/0", "1e300*1e300*load",
                                           "log1p(-load) + sqrt(-queue)", "(exp(load) ** 4) ** 4 if max_hit else -load"],
                       {"feature": "max_hit", "threshold": 0, "left": "-load", "right": "hit_blocks - queue"}),
    "priority_policy": ("priority_program", ["1e-6*age_us", "-prompt_tokens", "age_us * 1e300 * 1e300 - age_us * 1e308"],
                        {"feature": "slo_class", "threshold": 0, "left": 2, "right": "generated"}),
    "scheduler": ("scheduler_program", ["prompt_tokens", "-priority", "priority / (age_us - age_us)"],
                  {"feature": "prompt_tokens", "threshold": 500, "left": 0, "right": 1}),
    "preemption_victim": ("victim_program", ["generated", "-priority", "exp(1000) * exp(1000) * prompt_tokens"],
                          {"feature": "generated", "threshold": 10, "left": 1, "right": 0}),
}


def with_programs(cand: dict) -> dict:
    """A slot whose policy is expression or tree gets a program of that kind; others none."""
    out = dict(cand)
    for policy, (program, _, tree) in PROGRAMS.items():
        kind = out.get(policy)
        if kind == "tree":
            out[program] = tree
        elif kind != "expression":
            out.pop(program, None)
        elif program not in out:
            out[program] = PROGRAMS[policy][1][0]
    return out


def without_inert(cand: dict) -> dict:
    """The candidate without parameters of policies it does not select (refused as
    settings that would change nothing: blis_fast.config.effective)."""
    out = with_programs(cand)
    if out.get("admission_policy") != "token-bucket":
        out.pop("token_bucket_capacity", None)
        out.pop("token_bucket_refill_rate", None)
    if out.get("routing_policy") != "weighted":
        out.pop("routing_scorers", None)
    if out.get("priority_policy", "constant") in ("constant", "expression", "tree"):
        out.pop("slo_class_weights", None)
    if out.get("scheduler") in ("expression", "tree"):
        out.pop("scheduler_weights", None)
    return out


# candidates whose every value is valid, extremes included (they must all run)
VALID_WEIGHT = st.one_of(st.sampled_from([1e100, -1e100, 1e99, 1e-300, -1e-300, 2.2250738585072014e-308, 0.0, -0.0,
                                          1.0, -1.0, 3.0, 1e12]),
                         st.floats(min_value=-1e100, max_value=1e100, allow_subnormal=False))
VALID_POSITIVE = st.one_of(st.sampled_from([1.7976931348623157e308, 1e308, 2.0**1000, 1e-300, 1.0, 3.0]),
                           st.floats(min_value=1e-300, max_value=1.7976931348623157e308, allow_subnormal=False))
VALID_CANDIDATE = st.fixed_dictionaries({
    "routing_policy": st.sampled_from(sorted(ROUTING_POLICIES) + ["weighted"] * 3),
}, optional={
    "admission_policy": st.sampled_from(sorted(ADMISSION_POLICIES)),
    "token_bucket_capacity": st.floats(min_value=0, max_value=1e100, allow_subnormal=False),
    "token_bucket_refill_rate": st.floats(min_value=0, max_value=1e100, allow_subnormal=False),
    "routing_scorers": st.dictionaries(st.sampled_from(sorted(SCORERS)), VALID_POSITIVE, min_size=1, max_size=4),
    "priority_policy": st.sampled_from(sorted(PRIORITY_AGE_WEIGHT)),
    "slo_class_weights": st.lists(VALID_WEIGHT, max_size=63),
    "scheduler": st.sampled_from(sorted(SCHEDULERS)),
    "scheduler_weights": st.dictionaries(st.sampled_from(SORT_ATTRIBUTES), VALID_WEIGHT, max_size=4),
    "preemption_victim": st.sampled_from(sorted(VICTIMS)),
    "snapshot_refresh_interval": st.one_of(st.integers(0, 10**7), st.just(2**53)),
    "snapshot_intervals": st.dictionaries(st.sampled_from(S.SNAPSHOT_FIELD_NAMES),
                                          st.one_of(st.integers(0, 10**7), st.just(2**53)), max_size=4),
    "prefix_index_capacity": st.one_of(st.integers(1, 5000), st.just(1)),
    **{program: st.sampled_from(texts) for program, texts, _ in PROGRAMS.values()},
}).map(lambda cand: without_inert(cand))
HOSTILE_PROGRAMS = st.one_of(
    st.sampled_from(["load.__class__", "__import__('os')", "(" * 500 + "1" + ")" * 500, "x" * 10**6, "1 % 0",
                     "load ** load", "[1]", 3, None, {"feature": "nope"}, "lambda: 0", "1e999"]),
    st.text(max_size=40), st.sampled_from([t for _, texts, _ in PROGRAMS.values() for t in texts]))
ANY_CANDIDATE = st.fixed_dictionaries({}, optional={
    "admission_policy": names(ADMISSION_POLICIES),
    "token_bucket_capacity": WEIGHT,
    "token_bucket_refill_rate": WEIGHT,
    "routing_policy": st.one_of(st.just("weighted"), names(ROUTING_POLICIES)),
    "routing_scorers": st.dictionaries(names(SCORERS), POSITIVE, max_size=5),
    "priority_policy": names(PRIORITY_AGE_WEIGHT),
    "slo_class_weights": st.lists(WEIGHT, max_size=5) | st.lists(st.floats(-10, 10), min_size=62, max_size=64),
    "scheduler": names(SCHEDULERS),
    "scheduler_weights": st.dictionaries(names(SORT_ATTRIBUTES), WEIGHT, max_size=4),
    "preemption_victim": names(VICTIMS),
    "snapshot_refresh_interval": INTERVAL,
    "snapshot_intervals": st.dictionaries(names(S.SNAPSHOT_FIELD_NAMES), INTERVAL, max_size=4),
    "prefix_index_capacity": st.one_of(st.integers(min_value=1, max_value=5000), st.integers(min_value=-2, max_value=0),
                                       st.sampled_from([10**7, 10**8])),
    **{program: HOSTILE_PROGRAMS for program, _, _ in PROGRAMS.values()},
})
CANDIDATE = st.one_of(VALID_CANDIDATE, ANY_CANDIDATE)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    from blis_fast.config.sim import build_config
    from blis_fast.run import build_workload

    spec = tmp_path_factory.mktemp("cand") / "spec.yaml"
    spec.write_text(SPEC)
    cfg = build_config({}, {"workload_spec": str(spec), **SCENARIO})
    wl = build_workload(cfg)
    assert 50 < len(wl) < 400
    return cfg, wl


OUTCOMES: collections.Counter = collections.Counter()


def evaluate(scenario, cand: dict) -> str:
    """Run one candidate: 'ok' (finite results) or 'config_error' (refused up front)."""
    cfg, wl = scenario
    try:
        r = blis_fast.simulate(cfg, workload=wl, **cand)
    except ConfigError as exc:
        msg = str(exc)
        assert "\n" not in msg and len(msg) < 500, msg
        return "config_error"
    summary = r.summary()
    json.dumps(summary, allow_nan=False)  # every figure finite
    st_ = r.state
    assert int(st_.loop[0]["status"]) == S.Status.OK
    states = st_.reqs["state"]
    finished = np.isin(states, [S.RequestState.COMPLETED, S.RequestState.REJECTED, S.RequestState.DROPPED])
    never_released = (states == S.RequestState.PENDING) & scenario[1].is_dependent  # after a rejected turn
    assert np.all(finished | never_released)
    routed = st_.reqs["instance"][states == S.RequestState.COMPLETED]
    assert routed.size == 0 or (routed.min() >= 0 and routed.max() < cfg.deployment.num_instances)
    assert all(math.isfinite(v) for v in r.state.snap.ravel())
    return "ok"


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(CANDIDATE)
def test_random_candidates_run_or_are_refused(scenario, cand):
    OUTCOMES[evaluate(scenario, cand)] += 1


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(VALID_CANDIDATE)
def test_valid_extreme_candidates_all_run(scenario, cand):
    assert evaluate(scenario, cand) == "ok", cand


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("HARDENING_VALID_CANDIDATES", "100")), deadline=None,
          suppress_health_check=list(HealthCheck), database=None)
@given(VALID_CANDIDATE)
def test_valid_extreme_candidates_all_run_more(scenario, cand):
    assert evaluate(scenario, cand) == "ok", cand


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("HARDENING_RANDOM_CANDIDATES", "100")), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(CANDIDATE)
def test_random_candidates_more(scenario, cand):
    evaluate(scenario, cand)


@pytest.mark.slow
def test_campaign(scenario):
    """HARDENING_CANDIDATES candidates (default 200) with one hypothesis run; outcome counts
    and time to HARDENING_REPORT (if set)."""
    n = int(os.environ.get("HARDENING_CANDIDATES", "200"))
    counts: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()

    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(CANDIDATE)
    def one(cand):
        out = evaluate(scenario, cand)
        counts[out] += 1
        if out == "ok":
            kinds[cand.get("routing_policy", "round-robin")] += 1

    t0 = time.monotonic()
    one()
    seconds = time.monotonic() - t0
    report = {"candidates": sum(counts.values()), "outcomes": dict(counts), "ok_by_routing": dict(kinds),
              "seconds": round(seconds, 1), "requests_per_run": len(scenario[1])}
    if os.environ.get("HARDENING_REPORT"):
        with open(os.environ["HARDENING_REPORT"], "w") as f:
            json.dump(report, f, indent=1)
    assert counts["ok"] > 0 and set(counts) <= {"ok", "config_error"}


@pytest.mark.parametrize("weights, spread", [
    ({"queue-depth": 1.0, "kv-utilization": 1.0, "load-balance": 1.0, "prefix-affinity": 1.0}, True),
    ({"queue-depth": 1.0, "load-balance": 2.0**-20}, True),
    ({"prefix-affinity": 1.0, "queue-depth": 2.0**-4, "kv-utilization": 2.0**-30}, None),
])
@pytest.mark.parametrize("scale", [2.0**1023, pytest.param(2.0**1000, marks=pytest.mark.slow),
                                   pytest.param(2.0**-900, marks=pytest.mark.slow)])
def test_extreme_routing_weights_route_like_ordinary_ones(scenario, weights, spread, scale):
    """Weights scaled by a power of two up to the float maximum (or down to tiny) route
    exactly like the unscaled ones: the weighted score never overflows."""
    ref = blis_fast.simulate(scenario[0], workload=scenario[1], routing_policy="weighted", routing_scorers=weights)
    big = blis_fast.simulate(scenario[0], workload=scenario[1], routing_policy="weighted",
                             routing_scorers={k: v * scale for k, v in weights.items()})
    assert np.array_equal(big.state.reqs["instance"], ref.state.reqs["instance"])
    used = np.unique(big.state.reqs["instance"][big.state.reqs["instance"] >= 0])
    if spread:
        assert used.size == 3, used
