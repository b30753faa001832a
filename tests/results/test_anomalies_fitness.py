"""Anomaly counters and fitness (docs/semantics.md §8, docs/policies.md "Anomaly counters",
"Fitness") recomputed independently from the run's per-request and per-instance state:

- priority inversions = brute-force O(n²) count over completed requests (same instance and
  SLO class, i arrived before j, E2E_i > 2·E2E_j); 0 under the constant priority;
- HOL blocking = active instances whose sum_wq_len/steps exceeds twice the mean over the
  instances (>= 2 instances);
- fitness components from the summary values; score = Σ w·component.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from blis_fast.results.anomalies import hol_blocking_instances, priority_inversions
from blis_fast.config.policy import FITNESS_KEYS
from blis_fast.results.fitness import fitness
from builders import lengths_workload, sim_base
from naive.anomalies import brute_force_hol, brute_force_inversions
from naive.sort import quadratic_inversion_pairs
from blis_fast_kernels.schema import PoolRole, INSTANCE_DT, REQUEST_DT, RequestState


def random_workload(seed, n=50, distinct_arrivals=True, n_classes=2):
    rng = np.random.default_rng(seed)
    if distinct_arrivals:
        arrivals = np.sort(rng.choice(400_000, n, replace=False))
    else:
        arrivals = np.sort(rng.integers(0, 15, n)) * 20_000  # many same-µs arrivals
    return lengths_workload(arrivals, rng.integers(10, 400, n), rng.integers(1, 40, n), seed=seed,
                            slo_class=rng.integers(0, n_classes, n))


# ============================================================================ priority inversions


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("priority,scheduler", [("inverted-slo", "priority-fcfs"), ("slo-based", "priority-fcfs"),
                                                ("slo-based", "reverse-priority"), ("slo-based", "sjf")])
def test_priority_inversions_match_brute_force(seed, priority, scheduler):
    wl = random_workload(seed)
    r = sim_base(wl, num_instances=2, max_num_seqs=3, priority_policy=priority, scheduler=scheduler,
            routing_policy="round-robin" if seed % 2 else "least-loaded")
    expect = brute_force_inversions(r)
    assert r.cluster["priority_inversions"] == expect
    if priority == "inverted-slo":
        assert expect > 0  # the pathological template does produce them


def test_priority_inversions_zero_under_constant_priority():
    wl = random_workload(1)
    r = sim_base(wl, num_instances=2, max_num_seqs=3, priority_policy="constant", scheduler="reverse-priority")
    assert brute_force_inversions(r) > 0  # there are such pairs ...
    assert r.cluster["priority_inversions"] == 0  # ... but the counter is defined as 0


def test_priority_inversions_grouped_by_instance_and_class():
    """Identical requests in a burst on one instance: pairs across SLO classes never count."""
    n = 10
    wl = lengths_workload(np.arange(n) * 10, [100] * n, [3] * n, slo_class=[0, 1] * 5)
    kw = dict(max_num_seqs=1, priority_policy="inverted-slo", scheduler="priority-fcfs")
    r = sim_base(wl, **kw)
    assert r.cluster["priority_inversions"] == brute_force_inversions(r) > 0
    one_class = sim_base(dataclasses.replace(wl, slo_class=None), **kw)
    assert one_class.cluster["priority_inversions"] == brute_force_inversions(one_class)
    assert one_class.cluster["priority_inversions"] > r.cluster["priority_inversions"]
    # spread over instances: only same-instance pairs count
    spread = sim_base(dataclasses.replace(wl, slo_class=None), num_instances=5, routing_policy="round-robin", **kw)
    assert spread.cluster["priority_inversions"] == brute_force_inversions(spread)
    assert spread.cluster["priority_inversions"] < one_class.cluster["priority_inversions"]


def test_priority_inversions_ignore_incomplete_requests():
    wl = random_workload(2)
    r = sim_base(wl, num_instances=1, max_num_seqs=2, priority_policy="inverted-slo", scheduler="priority-fcfs",
            horizon=150_000)
    assert np.any(r.state.reqs["state"] != RequestState.COMPLETED)
    assert r.cluster["priority_inversions"] == brute_force_inversions(r)


def test_priority_inversions_same_arrival_ordered_by_request_id():
    """Requests arriving in the same µs are ordered by request id (docs/semantics.md §8:
    "ties by request index"; BLIS sorts by arrival with an unstable sort).  Pins that
    convention: r0 (long) and r1 (short) both arrive at t=0 -> one pair counted."""
    wl = lengths_workload([0, 0], [100, 100], [50, 1])
    r = sim_base(wl, priority_policy="slo-based")
    e2e = r.request_columns()["e2e_us"]
    assert e2e[0] > 2 * e2e[1]
    assert brute_force_inversions(r) == 0  # strict "earlier": no pair
    assert r.cluster["priority_inversions"] == 1


def test_count_inversions_kernel_matches_quadratic():
    from blis_fast_kernels.native import count_inversions

    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 3, 7, 64, 200):
        v = rng.integers(1, 50, n).astype(np.float64)
        one_group = np.zeros(n, np.int64)
        assert count_inversions(v, one_group, np.argsort(v).astype(np.int64), 2.0) == quadratic_inversion_pairs(v)
    v = np.array([4.0, 2.0, 2.0, 1.9, 8.0, 1.0])  # boundaries: 4 > 2·2 is false
    assert count_inversions(v, np.zeros(6, np.int64), np.argsort(v).astype(np.int64), 2.0) \
        == quadratic_inversion_pairs(v)


def test_priority_inversions_function_directly():
    reqs = np.zeros(5, REQUEST_DT)
    reqs["arrival_us"] = [0, 10, 20, 30, 40]
    reqs["instance"] = [0, 0, 1, 0, 0]
    reqs["slo_class"] = [0, 0, 0, 0, 1]
    e2e = np.array([100, 40, 1, 49, 1], np.int64)
    done = np.array([True, True, True, True, True])
    # same instance+class: (0,1): 100 > 80 yes; (0,3): 100 > 98 yes; (1,3): 40 > 98 no
    assert priority_inversions(reqs, e2e, done, "slo-based") == 2
    assert priority_inversions(reqs, e2e, done, "constant") == 0
    done[3] = False
    assert priority_inversions(reqs, e2e, done, "inverted-slo") == 1


# ============================================================================ HOL blocking


@pytest.mark.parametrize("routing", ["always-busiest", "round-robin", "least-loaded", "weighted", "prefix-affinity"])
@pytest.mark.parametrize("n_inst", [1, 2, 4])
def test_hol_blocking_matches_definition(routing, n_inst):
    rng = np.random.default_rng(n_inst)
    n = 60
    wl = lengths_workload(np.sort(rng.integers(0, 100_000, n)), rng.integers(10, 500, n), rng.integers(1, 30, n))
    r = sim_base(wl, num_instances=n_inst, routing_policy=routing, max_num_seqs=4)
    assert r.cluster["hol_blocking_instances"] == brute_force_hol(r)
    if routing == "always-busiest" and n_inst > 2:
        assert r.cluster["hol_blocking_instances"] == 1


def test_hol_blocking_never_fires_with_two_instances():
    """With 2 instances, q_a > 2·(q_a + q_b)/2 is impossible for q_b >= 0: even everything
    on one instance counts 0 (a property of the definition, also in BLIS)."""
    wl = lengths_workload(np.zeros(20), [300] * 20, [10] * 20)
    r = sim_base(wl, num_instances=2, routing_policy="always-busiest", max_num_seqs=2)
    assert r.state.inst["sum_wq_len"][0] > 0 and r.state.inst["steps"][1] == 0
    assert r.cluster["hol_blocking_instances"] == 0
    three = sim_base(wl, num_instances=3, routing_policy="always-busiest", max_num_seqs=2)
    assert three.cluster["hol_blocking_instances"] == 1


def test_hol_blocking_with_skewed_round_robin():
    """Round-robin over 3 instances where every third request is huge: instance 0 queues."""
    n = 30
    lens = [1500 if k % 3 == 0 else 20 for k in range(n)]
    wl = lengths_workload(np.arange(n) * 2000, lens, [60 if k % 3 == 0 else 1 for k in range(n)])
    r = sim_base(wl, num_instances=3, routing_policy="round-robin", max_num_seqs=1)
    assert r.cluster["hol_blocking_instances"] == brute_force_hol(r) == 1


def test_hol_blocking_function_directly():
    inst = np.zeros(4, INSTANCE_DT)
    inst["active"] = 1
    inst["steps"] = [10, 10, 10, 0]
    inst["sum_wq_len"] = [100, 10, 0, 0]  # means 10, 1, 0, 0 -> overall 2.75 -> only instance 0 > 5.5
    assert hol_blocking_instances(inst) == 1
    inst["sum_wq_len"] = [0, 0, 0, 0]
    assert hol_blocking_instances(inst) == 0
    assert hol_blocking_instances(inst[:1]) == 0
    # P/D pools compare among themselves: a busy prefill pool (0) next to idle decode ones
    inst["sum_wq_len"] = [100, 10, 0, 0]
    inst["pool"] = [0, 1, 1, 1]
    roles = np.array([PoolRole.PREFILL, PoolRole.DECODE, PoolRole.DECODE, PoolRole.DECODE], np.int32)
    assert hol_blocking_instances(inst, roles) == 1  # (decode instance 1: mean 1 > 2 x 1/3)
    inst["sum_wq_len"] = [100, 10, 10, 10]
    assert hol_blocking_instances(inst, roles) == 0


# ============================================================================ fitness


def test_fitness_components_match_formulas_from_summary():
    rng = np.random.default_rng(5)
    n = 60
    wl = lengths_workload(np.sort(rng.integers(0, 500_000, n)), rng.integers(10, 500, n), rng.integers(1, 30, n))
    weights = {k: float(w) for k, w in zip(FITNESS_KEYS, [0.5, 0.25, 0.3, 0.1, 0.2, 0.7, 0.05, 1.5])}
    r = sim_base(wl, num_instances=2, fitness_weights=",".join(f"{k}:{w}" for k, w in weights.items()))
    f = r.fitness
    c = r.cluster
    cols = r.request_columns()
    done = r.state.reqs["state"] == RequestState.COMPLETED
    ttft = cols["ttft_us"][cols["ttft_us"] >= 0].astype(float)
    e2e = cols["e2e_us"][done].astype(float)
    rps, tps = c["responses_per_sec"], c["tokens_per_sec"]
    expect = {
        "throughput": rps / (rps + 100),
        "tokens_per_sec": tps / (tps + 10_000),
        # the summary reports ms: 1 / (1 + value_µs / 1000) = 1 / (1 + value_ms)
        "p99_ttft": 1 / (1 + c["ttft_p99_ms"]),
        "mean_ttft": 1 / (1 + c["ttft_mean_ms"]),
        "p99_e2e": 1 / (1 + c["e2e_p99_ms"]),
        "mean_e2e": 1 / (1 + c["e2e_mean_ms"]),
        "p50_ttft": 1 / (1 + np.percentile(ttft, 50) / 1000),
        "p50_e2e": 1 / (1 + np.percentile(e2e, 50) / 1000),
    }
    assert set(f["components"]) == set(weights)
    for k in weights:
        assert f["components"][k] == pytest.approx(expect[k], rel=1e-9), k
        assert 0 < f["components"][k] <= 1
    assert f["values"]["throughput"] == rps and f["values"]["tokens_per_sec"] == tps
    assert f["values"]["p99_ttft"] == pytest.approx(c["ttft_p99_ms"] * 1000, rel=1e-12)
    assert f["values"]["mean_e2e"] == pytest.approx(c["e2e_mean_ms"] * 1000, rel=1e-12)
    assert f["score"] == pytest.approx(sum(w * expect[k] for k, w in weights.items()), rel=1e-9)
    assert f["weights"] == weights
    assert r.summary()["fitness"] == f


def test_fitness_absent_without_weights():
    wl = lengths_workload([0, 1000], [50, 50], [2, 2])
    r = sim_base(wl)
    assert r.fitness is None and "fitness" not in r.summary()


def test_fitness_zero_weights_and_single_key():
    wl = lengths_workload(np.arange(5) * 1000, [50] * 5, [2] * 5)
    r = sim_base(wl, fitness_weights="throughput:0,mean_ttft:2")
    f = r.fitness
    assert f["score"] == pytest.approx(2 * f["components"]["mean_ttft"], rel=1e-12)
    assert f["components"]["mean_ttft"] == pytest.approx(1 / (1 + r.cluster["ttft_mean_ms"]), rel=1e-12)


def test_fitness_nothing_completed_gives_no_latency_credit():
    wl = lengths_workload(np.arange(5) * 1000, [50] * 5, [2] * 5)
    r = sim_base(wl, admission_policy="reject-all", fitness_weights="throughput:1,p99_ttft:1,mean_e2e:1")
    f = r.fitness
    assert f["components"] == {"throughput": 0.0, "p99_ttft": 0.0, "mean_e2e": 0.0}
    assert f["score"] == 0.0


def test_fitness_function_directly():
    ttft = np.array([1000.0, 3000.0])
    e2e = np.array([2000.0, 4000.0, 9000.0])
    f = fitness({"throughput": 2.0, "p50_ttft": 1.0, "p99_e2e": 0.5, "tokens_per_sec": 1.0},
                responses_per_sec=100.0, tokens_per_sec=30_000.0, ttft_us=ttft, e2e_us=e2e)
    p99 = np.percentile(e2e, 99)
    assert f["components"]["throughput"] == 0.5
    assert f["components"]["tokens_per_sec"] == 0.75
    assert f["components"]["p50_ttft"] == pytest.approx(1 / 3)
    assert f["components"]["p99_e2e"] == pytest.approx(1 / (1 + p99 / 1000))
    assert f["score"] == pytest.approx(2 * 0.5 + 1 / 3 + 0.5 / (1 + p99 / 1000) + 0.75)


def test_anomaly_fields_in_summary_json():
    wl = lengths_workload(np.zeros(12), [200] * 12, [8] * 12)
    r = sim_base(wl, num_instances=3, routing_policy="always-busiest", priority_policy="inverted-slo",
            scheduler="priority-fcfs", max_num_seqs=2, admission_policy="token-bucket",
            token_bucket_capacity=2000, token_bucket_refill_rate=0)
    c = r.summary()["cluster"]
    assert c["rejected_requests"] == 2  # 10 × 200 tokens fit the bucket
    assert c["hol_blocking_instances"] == 1
    assert isinstance(c["priority_inversions"], int) and c["priority_inversions"] == brute_force_inversions(r)
