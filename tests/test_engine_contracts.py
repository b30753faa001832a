"""Phase-1 behavioural contracts of the engine, through the Python API (SEMANTICS §1-2, §7, §9, §11).

Config validity and pool bounds, instance isolation, clock monotonicity and event ordering,
request lifecycle / conservation / causality, batch and KV invariants, bounded event heap,
the worked single-request case (exact µs), horizon semantics, compat vs normal reporting,
summary field names/order and percentile definitions, no NaN, round-robin routing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

import blis_fast
from blis_fast import ConfigError
from blis_fast.workload import Workload, write_blis_trace
from naive import SUMMARY_HEAD
from kernels import dtypes as D

ROOT = Path(__file__).resolve().parent.parent
COMPAT = "blis-2026.02"


# A loaded 3-instance run: shared prefix (cache hits), KV pressure (preemptions), batch cap,
# zero-length outputs, alpha overheads; the kernel verifies BC-12/BC-13 after every step.
LOADED = dict(
    num_requests=300, rate=40, num_instances=3, total_kv_blocks=80,
    prompt_tokens=300, prompt_tokens_stdev=200, prompt_tokens_min=1, prompt_tokens_max=1500,
    output_tokens=60, output_tokens_stdev=40, output_tokens_min=0, output_tokens_max=300,
    prefix_tokens=64, alpha_coeffs=[100, 1, 50], beta_coeffs=[5000, 20, 100], max_num_seqs=8,
    check_invariants=True,
)
LOADED_HORIZON = 4_000_000  # mid-run: requests pending, queued, running and completed


# ----------------------------------------------------------------------------- helpers


def make_workload(arrival_us, prompt_lens, output_lens, *, block_size=16, prefixes=None, seed=0):
    """Explicit workload: request i has a prompt of prompt_lens[i] tokens (prefixes[i] + random
    unique ids) and output_lens[i] output tokens."""
    rng = np.random.default_rng(seed)
    prompts = []
    for i, L in enumerate(prompt_lens):
        pre = np.asarray(prefixes[i] if prefixes is not None else [], dtype=np.int64)
        body = rng.integers(0, 128_000, size=int(L) - len(pre))
        prompts.append(np.concatenate([pre, body]).astype(np.int64))
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in prompts])]).astype(np.int64)
    tokens = np.concatenate(prompts) if prompts else np.zeros(0, np.int64)
    return Workload.from_tokens(np.asarray(arrival_us, np.int64), tokens, offsets,
                                np.asarray(output_lens, np.int64), block_size)


def sim(workload=None, **kw):
    kw.setdefault("check_invariants", True)
    return blis_fast.simulate(workload=workload, **kw)


def single(L, N, alpha, beta, arrival=0, **kw):
    """One request, blackbox coefficients given explicitly."""
    wl = make_workload([arrival], [L], [N])
    return sim(wl, alpha_coeffs=list(alpha), beta_coeffs=list(beta), **kw)


def trace_sim(path, **kw):
    """Simulate a BLIS trace file (workload type given through the config dict: the flat
    ``workload=`` keyword is taken by simulate()'s Workload parameter)."""
    return blis_fast.simulate({"workload": {"type": "traces", "traces_filepath": str(path)}}, **kw)


def trunc(x: float) -> int:
    return int(x)  # float -> int toward zero


def llama_h100_tp1_coeffs():
    """The first llama-3.1-8b-instruct / H100 / TP1 coefficient set of configs/defaults.yaml."""
    data = yaml.safe_load((ROOT / "configs" / "defaults.yaml").read_text())
    for m in data["models"]:
        if (m["id"] == "meta-llama/llama-3.1-8b-instruct" and m["GPU"] == "H100"
                and m["tensor_parallelism"] == 1):
            return m["alpha_coeffs"], m["beta_coeffs"]
    raise AssertionError("no llama-3.1-8b H100 TP1 coefficients in configs/defaults.yaml")


def walk_numbers(obj, path="$"):
    """Yield (path, value) of every number inside a JSON-like object."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from walk_numbers(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from walk_numbers(v, f"{path}[{i}]")
    elif isinstance(obj, (int, float, np.integer, np.floating)) and not isinstance(obj, bool):
        yield path, obj


def assert_no_nan(obj):
    bad = [(p, v) for p, v in walk_numbers(obj) if not math.isfinite(float(v))]
    assert not bad, bad[:5]


def pct(values_us, p):
    return float(np.percentile(values_us, p)) / 1000.0 if len(values_us) else 0.0


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def loaded():
    return blis_fast.simulate(**LOADED)


@pytest.fixture(scope="module")
def loaded_cut():
    return blis_fast.simulate(horizon=LOADED_HORIZON, **LOADED)


@pytest.fixture(scope="module", params=["full", "horizon"])
def any_loaded(request, loaded, loaded_cut):
    return loaded if request.param == "full" else loaded_cut


# ============================================================================ config validity


@pytest.mark.parametrize("kw, field_part", [
    (dict(max_num_seqs=0), "max"),
    (dict(max_num_batched_tokens=0), "max"),
    (dict(tp=0), "tp"),
    (dict(gpu_memory_utilization=1.5), "gpu"),
    (dict(gpu_memory_utilization=0), "gpu"),
    (dict(block_size_in_tokens=0), "block"),
    (dict(total_kv_blocks=0), "kv"),
    (dict(rate=0), "rate"),
    (dict(rate=-1), "rate"),
    (dict(rate=float("nan")), "rate"),
    (dict(rate=float("inf")), "rate"),
    (dict(num_requests=0), "num"),
    (dict(num_instances=0), "instances"),
    (dict(horizon=-1), "horizon"),
    (dict(compat="bogus"), "compat"),
    (dict(latency_model="bogus"), "latency"),
    (dict(hardware="NOPE"), "hardware"),
    (dict(model="nope/not-a-model"), "model"),
    (dict(prompt_tokens_stdev=-1), "stdev"),
    (dict(prompt_tokens_min=50, prompt_tokens_max=10), "prompt_tokens"),
    (dict(beta_coeffs=[1, 2]), "beta"),
])
def test_invalid_config_raises_config_error(kw, field_part):
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(num_requests=kw.pop("num_requests", 5), **kw)
    assert field_part in ei.value.field.replace("-", "_")
    assert isinstance(ei.value, ValueError)


def test_invalid_workload_type():
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate({"workload": {"type": "bogus", "num_requests": 5}})
    assert "workload" in ei.value.field


def test_workload_preset_as_flat_override_readme_example():
    r = blis_fast.simulate(workload="chatbot", rate=20, num_requests=20, num_instances=4)
    assert r.cluster["completed_requests"] == 20


def test_workload_bogus_flat_override_is_config_error():
    with pytest.raises(ConfigError):
        blis_fast.simulate(workload="bogus", num_requests=5)


def test_unknown_setting_is_rejected():
    with pytest.raises(ConfigError):
        blis_fast.simulate(num_requests=5, no_such_setting=3)


@pytest.mark.parametrize("kw", [
    dict(num_instances=3, min_instances=4),
    dict(num_instances=3, max_instances=2),
    dict(num_instances=3, min_instances=3, max_instances=2),
    dict(num_instances=2, min_instances=0, max_instances=4),
])
def test_pool_bounds_violations(kw):
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(num_requests=5, **kw)
    assert "instances" in ei.value.field.replace("-", "_")


def test_pool_bounds_ok_only_num_instances_active():
    r = blis_fast.simulate(num_requests=12, rate=5, num_instances=2, min_instances=1, max_instances=5,
                           alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], total_kv_blocks=100)
    assert r.cluster["num_instances"] == 2
    assert [s["instance_id"] for s in r.instances] == ["instance_0", "instance_1"]
    assert set(r.state.reqs["instance"].tolist()) == {0, 1}
    assert r.cluster["completed_requests"] + r.cluster["dropped_unservable"] == 12


def test_max_instances_headroom_does_not_change_cluster_metrics():
    kw = dict(num_requests=12, rate=5, num_instances=2, alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5],
              total_kv_blocks=1000)
    a = blis_fast.simulate(**kw).cluster
    b = blis_fast.simulate(min_instances=1, max_instances=5, **kw).cluster
    assert a == b


def test_min_equals_max_equals_num():
    r = blis_fast.simulate(num_requests=4, num_instances=3, min_instances=3, max_instances=3,
                           alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], total_kv_blocks=100)
    assert len(r.instances) == 3


def test_model_config_kv_heads_exceed_heads(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 64, "num_hidden_layers": 32, "intermediate_size": 14336,
           "torch_dtype": "bfloat16", "vocab_size": 128256}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(num_requests=5, model=str(p), latency_model="roofline")
    assert "kv" in ei.value.field.lower() or "kv" in ei.value.message.lower()


def test_model_config_valid_custom_json_runs(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 1024, "num_attention_heads": 16,
           "num_key_value_heads": 4, "num_hidden_layers": 8, "intermediate_size": 4096,
           "torch_dtype": "bfloat16", "vocab_size": 32000}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    r = blis_fast.simulate(num_requests=10, model=str(p), latency_model="roofline", check_invariants=True)
    assert r.cluster["completed_requests"] == 10


# ============================================================================ worked single request


@pytest.mark.parametrize("L", [1, 15, 16, 17, 500, 2048])
@pytest.mark.parametrize("N", [1, 2, 37])
def test_single_request_real_llama_coefficients(L, N):
    alpha, beta = llama_h100_tp1_coeffs()
    arrival = 1_234_567
    wl = make_workload([arrival], [L], [N])
    r = sim(wl, model="meta-llama/llama-3.1-8b-instruct", hardware="H100", tp=1)
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
    assert req["state"] == D.REQ_COMPLETED and req["generated"] == N
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
    wl = make_workload([0, 0], [100, 100], [0, 1])
    r = sim(wl, alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], num_instances=2)
    a, b = r.state.reqs
    assert a["state"] == b["state"] == D.REQ_COMPLETED
    assert a["first_token_us"] == b["first_token_us"] == 2000
    assert a["generated"] == b["generated"] == 1


# ============================================================================ event ordering, clock


def test_same_microsecond_burst_forms_one_step_chain():
    """5 requests queued at the same µs: one batch, one step chain (the reference's time-only
    heap created duplicate chains)."""
    wl = make_workload([1000] * 5, [100] * 5, [3] * 5)
    r = sim(wl, alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5])
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
    wl = make_workload([0, 2000], [100, 50], [5, 1])
    r = sim(wl, alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5])
    a, b = r.state.reqs
    assert a["first_token_us"] == 2000
    assert b["first_scheduled_us"] == 2000  # scheduling delay 0
    assert b["first_token_us"] == 2000 + 1000 + 10 * 50 + 5 * 1
    assert r.request_records()[1]["scheduling_delay_ms"] == 0.0


def test_queued_while_busy_waits_for_step_end_normal_vs_compat():
    """Normal mode: a request queued at an idle-but-busy instance starts at the end of the last
    step.  Compat: at its Queued time (the reference's overlap)."""
    wl = make_workload([0, 500], [100, 100], [1, 1])
    kw = dict(alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5])
    normal = sim(wl, **kw)
    compat = sim(wl, compat=COMPAT, **kw)
    b = normal.state.reqs[1]
    assert b["first_scheduled_us"] == 2000 and b["first_token_us"] == 4000
    assert normal.cluster["vllm_estimated_duration_s"] == 0.004
    assert normal.cluster["busy_fraction"] <= 1.0
    b = compat.state.reqs[1]
    assert b["first_scheduled_us"] == 500 and b["first_token_us"] == 2500
    assert compat.cluster["vllm_estimated_duration_s"] == 0.0025


def test_clock_is_monotone_and_steps_do_not_overlap(any_loaded):
    r = any_loaded
    st = r.state.stats[0]
    assert st["status"] == D.STATUS_OK
    inst = r.state.inst
    # non-overlapping steps: busy time within [0, last step end] per instance
    assert (inst["busy_us"] <= inst["last_step_end_us"]).all()
    for s in r.instances:
        assert 0.0 <= s["busy_fraction"] <= 1.0
    horizon = r.setup.config.simulation.horizon
    if horizon is not None:
        assert st["clock_us"] <= horizon
    # the last event processed is no earlier than any step start or routing decision
    reqs = r.state.reqs
    assert st["clock_us"] >= reqs["routed_us"].max()
    assert st["clock_us"] >= reqs["first_scheduled_us"].max()


def test_routing_and_admission_latency_shift_times():
    wl = make_workload([1000], [64], [3])
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
    wl = make_workload([0, H, H + 1], [100, 100, 100], [2, 2, 2])
    r = sim(wl, alpha_coeffs=[10, 0, 0], beta_coeffs=[1000, 10, 5], horizon=H)
    s = r.state.reqs["state"].tolist()
    assert s[0] == D.REQ_COMPLETED
    assert s[1] == D.REQ_ROUTED  # arrival, admission, routing at H ran; Queued at H+10 did not
    assert r.state.reqs[1]["routed_us"] == H
    assert s[2] == D.REQ_PENDING
    assert r.state.stats[0]["clock_us"] == H
    assert r.cluster["arrived_requests"] == 2
    assert r.cluster["still_in_flight"] == 1
    assert r.cluster["injected_requests"] == 1
    ids = [rec["requestID"] for rec in r.request_records()]
    assert "request_2" not in ids


def test_horizon_zero_alpha_request_at_horizon_reaches_instance():
    H = 1_000_000
    wl = make_workload([0, H, H + 1], [100, 100, 100], [2, 2, 2])
    r = sim(wl, alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], horizon=H)
    reqs = r.state.reqs
    assert reqs[1]["queued_us"] == H and reqs[1]["first_scheduled_us"] == H
    assert reqs[2]["state"] == D.REQ_PENDING and reqs[2]["instance"] == -1


@pytest.mark.parametrize("H, steps", [(3004, 2), (3005, 3), (3006, 3), (0, 1), (1999, 1), (2000, 2)])
def test_horizon_step_exactly_at_horizon_executes(H, steps):
    """Steps start at 0, 2000, 3005, 4010, ...: a Step at t == H runs, one at t > H does not."""
    wl = make_workload([0], [100], [10])
    r = sim(wl, alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], horizon=H)
    assert r.cluster["engine_steps"] == steps
    assert r.state.stats[0]["clock_us"] <= H


def test_horizon_zero_no_nan_empty_stats():
    r = blis_fast.simulate(num_requests=20, rate=5, num_instances=2, horizon=0,
                           alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], total_kv_blocks=100)
    assert r.cluster["completed_requests"] == 0
    for k in ("e2e_mean_ms", "ttft_p99_ms", "itl_mean_ms", "responses_per_sec", "tokens_per_sec"):
        assert r.cluster[k] == 0.0
    assert_no_nan(r.summary())
    assert_no_nan(r.results_document())


# ============================================================================ lifecycle, conservation, causality


def test_request_conservation(any_loaded):
    r = any_loaded
    reqs = r.state.reqs
    n = len(reqs)
    counts = np.bincount(reqs["state"], minlength=len(D.REQUEST_STATE_NAMES))
    assert counts.sum() == n
    c = r.cluster
    assert c["completed_requests"] == counts[D.REQ_COMPLETED]
    assert c["still_queued"] == counts[D.REQ_QUEUED]
    assert c["still_running"] == counts[D.REQ_RUNNING]
    assert c["dropped_unservable"] == counts[D.REQ_DROPPED]
    assert c["injected_requests"] == (c["completed_requests"] + c["still_queued"] + c["still_running"]
                                      + c["dropped_unservable"])
    assert c["arrived_requests"] == n - counts[D.REQ_PENDING]
    assert c["arrived_requests"] == c["rejected_requests"] + c["injected_requests"] + c["still_in_flight"]
    # per-instance sums add up to the cluster
    for k in ("completed_requests", "still_queued", "still_running", "injected_requests",
              "total_input_tokens", "total_output_tokens", "preemption_count", "dropped_unservable"):
        assert sum(s[k] for s in r.instances) == c[k], k
    # completed requests produced exactly N tokens, others fewer
    done = reqs["state"] == D.REQ_COMPLETED
    assert (reqs["generated"][done] == reqs["output_len"][done]).all()
    assert (reqs["generated"][~done] < reqs["output_len"][~done]).all()
    # output tokens are not double-counted after preemption
    assert c["total_output_tokens"] == int(reqs["generated"].sum())


def test_full_run_completes_everything(loaded):
    c = loaded.cluster
    assert c["completed_requests"] + c["dropped_unservable"] == LOADED["num_requests"]
    assert c["still_queued"] == c["still_running"] == c["still_in_flight"] == 0
    assert c["preemption_count"] > 0  # the fixture really exercises KV pressure
    assert c["prefix_cache_hit_rate"] > 0


def test_timestamp_causality(any_loaded):
    reqs = any_loaded.state.reqs
    cfg = any_loaded.setup.config.simulation
    reached = reqs["instance"] >= 0
    assert (reqs["routed_us"][reached] >= reqs["arrival_us"][reached]
            + cfg.admission_latency + cfg.routing_latency).all()
    q = reqs["queued_us"] >= 0
    assert (reqs["queued_us"][q] >= reqs["routed_us"][q]).all()
    s = reqs["first_scheduled_us"] >= 0
    assert (reqs["first_scheduled_us"][s] >= reqs["queued_us"][s]).all()
    f = reqs["first_token_us"] >= 0
    assert (reqs["first_token_us"][f] > reqs["first_scheduled_us"][f]).all()
    assert (reqs["last_token_us"][f] >= reqs["first_token_us"][f]).all()
    assert (reqs["first_scheduled_us"][f] >= 0).all()
    done = reqs["state"] == D.REQ_COMPLETED
    assert (reqs["first_token_us"][done] >= 0).all()
    # E2E = TTFT + Σ ITL; every non-negative; sched delay <= TTFT <= E2E
    cols = any_loaded.request_columns()
    assert (cols["e2e_us"][done] == cols["ttft_us"][done] + reqs["itl_sum_us"][done]).all()
    assert (cols["e2e_us"][done] == reqs["last_token_us"][done] - reqs["arrival_us"][done]).all()
    assert (cols["scheduling_delay_us"][f] < cols["ttft_us"][f]).all()
    assert (cols["ttft_us"][done] <= cols["e2e_us"][done]).all()
    # never-routed requests have no timestamps
    for fld in ("routed_us", "queued_us", "first_scheduled_us", "first_token_us"):
        assert (reqs[fld][~reached] == -1).all()


def test_dropped_unservable_counted_not_cycled():
    # 10 blocks of 16 tokens: a 200-token prompt can never fit
    wl = make_workload([0, 10, 20], [50, 200, 50], [4, 4, 4])
    r = sim(wl, alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5], total_kv_blocks=10)
    s = r.state.reqs["state"].tolist()
    assert s == [D.REQ_COMPLETED, D.REQ_DROPPED, D.REQ_COMPLETED]
    assert r.cluster["dropped_unservable"] == 1
    assert r.cluster["injected_requests"] == 3 and r.cluster["completed_requests"] == 2


# ============================================================================ invariants


def test_batch_size_never_exceeds_max_num_seqs():
    r = blis_fast.simulate(num_requests=200, rate=200, num_instances=2, max_num_seqs=3,
                           alpha_coeffs=[0, 0, 0], beta_coeffs=[2000, 5, 20], total_kv_blocks=2000,
                           prompt_tokens=100, prompt_tokens_stdev=20, output_tokens=50,
                           output_tokens_stdev=10, check_invariants=True)
    assert r.cluster["completed_requests"] == 200
    for s in r.instances:
        assert s["batch_size_peak"] <= 3
    assert r.cluster["batch_size_peak"] == 3  # the cap binds
    assert r.cluster["wait_queue_peak"] > 0
    assert (r.state.inst["batch_peak"] <= 3).all()


def _kv_accounting_ok(r):
    """Independent recount of every instance's KV blocks (BC-13) from the tables."""
    st = r.state
    blocks, inst, reqs = st.blocks, st.inst, st.reqs
    for i in range(len(inst)):
        lo, tot = int(inst[i]["kv_offset"]), int(inst[i]["kv_total"])
        ref = blocks["ref_count"][lo:lo + tot]
        assert (ref >= 0).all()
        used = int((ref > 0).sum())
        assert used == inst[i]["kv_allocated"]
        virgin = lo + tot - int(inst[i]["kv_virgin_next"])
        assert used + int(inst[i]["kv_lru_len"]) + virgin == tot
        mine = reqs["instance"] == i
        # each held block reference belongs to one request
        assert int(ref.sum()) == int(reqs["blocks_held"][mine].sum())
        assert inst[i]["kv_peak_allocated"] <= tot


def test_kv_conservation_at_end_of_full_run(loaded):
    _kv_accounting_ok(loaded)
    assert (loaded.state.inst["kv_allocated"] == 0).all()
    assert (loaded.state.reqs["blocks_held"] == 0).all()


@pytest.mark.parametrize("H", [250_000, 1_000_000, 2_345_678, 5_000_000, 9_000_001])
def test_kv_conservation_at_horizon_snapshots(H):
    r = blis_fast.simulate(horizon=H, **LOADED)
    _kv_accounting_ok(r)
    running = r.state.reqs["state"] == D.REQ_RUNNING
    assert (r.state.reqs["blocks_held"][running] > 0).all()


@pytest.mark.parametrize("check", [True, False])
def test_check_invariants_is_live(check):
    """The per-step KV check really runs: a corrupted counter is caught only with check_invariants."""
    from blis_fast.config.sim import build_config
    from blis_fast.errors import SimulationError
    from blis_fast.simulator import build_state, build_workload, resolve, run_kernel

    cfg = build_config({}, dict(num_requests=20, rate=5, check_invariants=check, total_kv_blocks=100,
                                alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5]))
    state = build_state(resolve(cfg), build_workload(cfg))
    state.inst["kv_allocated"][0] = 1  # one phantom allocated block
    if check:
        with pytest.raises(SimulationError, match="KV"):
            run_kernel(state)
    else:
        run_kernel(state)
        assert state.stats[0]["status"] == D.STATUS_OK


def test_event_heap_bounded(loaded):
    st = loaded.state
    n, n_inst = len(st.reqs), len(st.inst)
    assert st.stats[0]["heap_peak"] <= n + 4 * n_inst + 64
    assert st.stats[0]["heap_peak"] <= n // 10


def test_event_heap_small_for_large_run():
    r = blis_fast.simulate(num_requests=5000, rate=50, num_instances=4,
                           alpha_coeffs=[232, 1.75, 3357], beta_coeffs=[5752, 17.25, 6],
                           prompt_tokens=200, prompt_tokens_stdev=50, output_tokens=20, output_tokens_stdev=5)
    peak = int(r.state.stats[0]["heap_peak"])
    assert peak <= 5000 + 4 * 4 + 64
    assert peak < 100  # ≪ n: only in-flight control events + one Step per instance


# ============================================================================ instance isolation, routing


def test_round_robin_routing(loaded):
    reqs = loaded.state.reqs
    order = np.argsort(reqs["arrival_us"], kind="stable")
    assert (order == np.arange(len(reqs))).all()  # generated arrivals are in index order
    reached = reqs["instance"] >= 0
    assert (reqs["instance"][reached] == (np.arange(len(reqs)) % 3)[reached]).all()
    by = {rec["requestID"]: rec["handled_by"] for rec in loaded.request_records()}
    assert by["request_0"] == "instance_0" and by["request_4"] == "instance_1" and by["request_299"] == "instance_2"
    inj = [s["injected_requests"] for s in loaded.instances]
    assert max(inj) - min(inj) <= 1


def test_round_robin_more_instances_than_requests():
    r = blis_fast.simulate(num_requests=3, num_instances=5, alpha_coeffs=[0, 0, 0],
                           beta_coeffs=[1000, 10, 5], total_kv_blocks=1000)
    assert r.state.reqs["instance"].tolist() == [0, 1, 2]
    assert [s["completed_requests"] for s in r.instances] == [1, 1, 1, 0, 0]
    assert_no_nan(r.summary())


def test_instance_isolation():
    """Each instance of a round-robin cluster behaves exactly like a lone instance fed only its
    own requests: no KV, prefix-cache, queue or clock state leaks between instances."""
    rng = np.random.default_rng(11)
    n, k = 60, 3
    arrivals = np.cumsum(rng.integers(1000, 40_000, n))
    prompt = rng.integers(20, 400, n)
    output = rng.integers(1, 80, n)
    shared = rng.integers(0, 128_000, 64)
    prefixes = [shared if i % 2 == 0 else [] for i in range(n)]
    wl = make_workload(arrivals, prompt + 64 * (np.arange(n) % 2 == 0), output, prefixes=prefixes, seed=5)
    kw = dict(alpha_coeffs=[100, 1, 50], beta_coeffs=[5000, 20, 100], total_kv_blocks=40, max_num_seqs=4)
    cluster = sim(wl, num_instances=k, **kw)
    assert cluster.cluster["preemption_count"] > 0
    fields_ = ["first_token_us", "last_token_us", "first_scheduled_us", "queued_us", "itl_sum_us",
               "preemptions", "cached_tokens", "generated", "state"]
    for i in range(k):
        idx = np.arange(i, n, k)
        sub = make_workload(arrivals[idx], (prompt + 64 * (np.arange(n) % 2 == 0))[idx], output[idx],
                            prefixes=[prefixes[j] for j in idx], seed=5)
        # same token contents for the same requests: rebuild from the cluster workload's keys
        assert np.array_equal(sub.prompt_len, wl.prompt_len[idx])
        sub = Workload(arrival_us=wl.arrival_us[idx].copy(), prompt_len=wl.prompt_len[idx].copy(),
                       output_len=wl.output_len[idx].copy(),
                       block_keys=np.concatenate([wl.keys_of(j) for j in idx]).astype(np.int64),
                       key_offsets=np.concatenate([[0], np.cumsum(wl.prompt_len[idx] // 16)]).astype(np.int64),
                       block_size=16)
        sub.validate()
        alone = sim(sub, num_instances=1, **kw)
        for f in fields_:
            assert np.array_equal(cluster.state.reqs[f][idx], alone.state.reqs[f]), (i, f)
        a = dict(cluster.instances[i])
        b = dict(alone.instances[0])
        a.pop("instance_id")
        b.pop("instance_id")
        assert a == b


# ============================================================================ summary format, percentiles


def test_summary_field_order(any_loaded):
    for obj in [any_loaded.cluster, *any_loaded.instances]:
        assert list(obj)[: len(SUMMARY_HEAD)] == SUMMARY_HEAD
    doc = any_loaded.results_document()
    assert list(doc)[: len(SUMMARY_HEAD)] == SUMMARY_HEAD
    assert list(any_loaded.summary()) == ["cluster", "instances", "run"]


def test_instance_ids(loaded):
    assert loaded.cluster["instance_id"] == "cluster"
    assert [s["instance_id"] for s in loaded.instances] == ["instance_0", "instance_1", "instance_2"]


def _check_group_stats(obj, reqs, mask, cols):
    done = (reqs["state"] == D.REQ_COMPLETED) & mask
    first = (reqs["first_token_us"] >= 0) & mask
    e2e = cols["e2e_us"][done]
    ttft = cols["ttft_us"][first]
    assert obj["e2e_mean_ms"] == pytest.approx(e2e.mean() / 1000.0 if e2e.size else 0.0, rel=1e-12, abs=0)
    assert obj["ttft_mean_ms"] == pytest.approx(ttft.mean() / 1000.0 if ttft.size else 0.0, rel=1e-12, abs=0)
    for p in (90, 95, 99):
        assert obj[f"e2e_p{p}_ms"] == pytest.approx(pct(e2e, p), rel=1e-12, abs=0)
        assert obj[f"ttft_p{p}_ms"] == pytest.approx(pct(ttft, p), rel=1e-12, abs=0)
    sd = cols["scheduling_delay_us"][mask]
    sd = sd[sd >= 0]
    assert obj["scheduling_delay_p99_ms"] == pytest.approx(pct(sd, 99), rel=1e-12, abs=0)


def test_percentiles_match_numpy_linear(any_loaded):
    r = any_loaded
    reqs = r.state.reqs
    cols = r.request_columns()
    _check_group_stats(r.cluster, reqs, np.ones(len(reqs), bool), cols)
    for i, s in enumerate(r.instances):
        _check_group_stats(s, reqs, reqs["instance"] == i, cols)


def _check_itl(obj, samples):
    samples = np.asarray(samples, dtype=np.int64)
    mean = samples.mean() / 1000.0 if samples.size else 0.0
    assert obj["itl_mean_ms"] == pytest.approx(mean, rel=1e-12, abs=0)
    for p in (90, 95, 99):
        assert obj[f"itl_p{p}_ms"] == pytest.approx(pct(samples, p), rel=1e-12, abs=0)


# Three requests at t = 0 on one instance (α = 0, β = (1000, 10, 100), L = 100 each, N = 3, 5, 9):
# prefill step 1000 + 10·300 = 4000; then decode steps with D = 3 (1300) ×2, D = 2 (1200) ×2,
# D = 1 (1100) ×4.  The samples, expanded by hand:
STAIR_BETA = [1000, 10, 100]
STAIR_N = [3, 5, 9]
STAIR_SAMPLES = [
    [1300, 1300],
    [1300, 1300, 1200, 1200],
    [1300, 1300, 1200, 1200, 1100, 1100, 1100, 1100],
]
STAIR_LAST_STEP = [1300, 1200, 1100]


def _stair(n_inst=1, a2=0.0, **kw):
    # instance k gets requests k, k + n_inst, ... (round robin): give each instance one copy
    arr, L, N = [], [], []
    for j in range(3):
        for _ in range(n_inst):
            arr.append(0)
            L.append(100)
            N.append(STAIR_N[j])
    wl = make_workload(arr, L, N)
    return sim(wl, alpha_coeffs=[0, 0, a2], beta_coeffs=STAIR_BETA, num_instances=n_inst, **kw)


@pytest.mark.parametrize("n_inst", [1, 2])
def test_itl_stats_equal_hand_expanded_samples(n_inst):
    r = _stair(n_inst)
    for j, req in enumerate(r.state.reqs[::n_inst]):
        assert req["first_token_us"] == 4000
        assert req["itl_sum_us"] == sum(STAIR_SAMPLES[j])
    flat = [x for s in STAIR_SAMPLES for x in s]
    _check_itl(r.cluster, flat * n_inst)
    for s in r.instances:
        _check_itl(s, flat)
    recs = r.request_records()
    for j in range(3):
        assert recs[j * n_inst]["itl_ms"] == pytest.approx(np.mean(STAIR_SAMPLES[j]) / 1000.0, rel=1e-12)
        assert recs[j * n_inst]["e2e_ms"] == (4000 + sum(STAIR_SAMPLES[j])) / 1000.0


def test_itl_stats_equal_hand_expanded_samples_compat():
    a2 = 70
    r = _stair(1, a2=a2, compat=COMPAT)
    samples = []
    for j in range(3):
        samples += [x + a2 for x in STAIR_SAMPLES[j]] + [STAIR_LAST_STEP[j] + a2]  # + extra at completion
    _check_itl(r.cluster, samples)
    recs = r.request_records()
    for j in range(3):
        e2e = 4000 + a2 + sum(x + a2 for x in STAIR_SAMPLES[j]) + STAIR_LAST_STEP[j] + a2
        assert recs[j]["e2e_ms"] == e2e / 1000.0
        assert recs[j]["itl_ms"] == pytest.approx((e2e - 4000 - a2) / (STAIR_N[j] - 1) / 1000.0, rel=1e-12)
    assert r.cluster["total_output_tokens"] == sum(STAIR_N) - 3


def test_itl_stats_cover_completed_requests_only_at_horizon():
    """Steps start at 0, 4000, 5300, 6600, 7800, ...; at H = 7799 request 0 is done (2 samples),
    requests 1 and 2 are running with 2 samples each.  ITL stats pool the completed request's
    samples only."""
    r = _stair(1, horizon=7799)
    states = r.state.reqs["state"].tolist()
    assert states == [D.REQ_COMPLETED, D.REQ_RUNNING, D.REQ_RUNNING]
    assert r.state.reqs["generated"].tolist() == [3, 4, 4]
    assert r.cluster["completed_requests"] == (np.array(states) == D.REQ_COMPLETED).sum()
    done_samples = [x for j in range(3) if states[j] == D.REQ_COMPLETED for x in STAIR_SAMPLES[j]]
    _check_itl(r.cluster, done_samples)
    # TTFT covers every request with a first token, E2E only completed ones
    assert r.cluster["ttft_mean_ms"] == 4.0
    assert r.cluster["e2e_mean_ms"] == pytest.approx(
        np.mean([4000 + sum(STAIR_SAMPLES[j]) for j in range(3) if states[j] == D.REQ_COMPLETED]) / 1000.0)


def test_itl_pooled_mean_matches_requests(any_loaded):
    """Normal mode: pooled ITL mean = Σ gaps / Σ (N−1) over completed requests."""
    reqs = any_loaded.state.reqs
    done = reqs["state"] == D.REQ_COMPLETED
    count = int(np.maximum(reqs["generated"][done] - 1, 0).sum())
    total = int(reqs["itl_sum_us"][done].sum())
    assert any_loaded.cluster["itl_mean_ms"] == pytest.approx(total / count / 1000.0, rel=1e-12)
    c = any_loaded.cluster
    assert c["itl_p90_ms"] <= c["itl_p95_ms"] <= c["itl_p99_ms"]
    assert c["itl_p90_ms"] >= 5.1  # no sample below one decode step trunc(5000 + 100)
    for i, s in enumerate(any_loaded.instances):
        m = done & (reqs["instance"] == i)
        cnt = int(np.maximum(reqs["generated"][m] - 1, 0).sum())
        expect = int(reqs["itl_sum_us"][m].sum()) / cnt / 1000.0 if cnt else 0.0
        assert s["itl_mean_ms"] == pytest.approx(expect, rel=1e-12)


def test_per_request_itl_is_mean_gap(any_loaded):
    r = any_loaded
    reqs = r.state.reqs
    recs = {rec["requestID"]: rec for rec in r.request_records()}
    for i in np.flatnonzero(reqs["state"] == D.REQ_COMPLETED)[:200]:
        g = int(reqs["generated"][i])
        expect = reqs["itl_sum_us"][i] / (g - 1) / 1000.0 if g > 1 else 0.0
        assert recs[f"request_{i}"]["itl_ms"] == pytest.approx(expect, rel=1e-12, abs=0)


def test_throughput_fields(loaded):
    c = loaded.cluster
    dur = c["vllm_estimated_duration_s"]
    assert dur == int(loaded.state.inst["last_step_end_us"].max()) / 1e6
    assert c["responses_per_sec"] == pytest.approx(c["completed_requests"] / dur)
    assert c["tokens_per_sec"] == pytest.approx(c["total_output_tokens"] / dur)
    assert c["total_input_tokens"] == int(loaded.state.reqs["prompt_len"][loaded.state.reqs["instance"] >= 0].sum())


def test_no_nan_anywhere(any_loaded):
    r = any_loaded
    assert_no_nan(r.summary())
    doc = r.results_document()
    assert_no_nan(doc)
    json.dumps(doc, allow_nan=False)
    t = r.requests_table()
    for name in t.column_names:
        col = t.column(name)
        if str(col.type) in ("double", "float"):
            arr = col.to_numpy(zero_copy_only=False)
            arr = arr[~np.isnan(arr)] if col.null_count else arr
            assert np.isfinite(arr).all(), name
            assert np.isnan(col.drop_null().to_numpy()).sum() == 0, name
    for k, v in r.request_columns().items():
        if v.dtype.kind == "f":
            assert np.isfinite(v).all(), k


# ============================================================================ compat mode


ALPHA, BETA = [100.7, 0.5, 50.9], [1000.9, 3.3, 7.7]  # q(200) = 200, prefill(200) = 1660, a2 = 50, decode = 1008


@pytest.mark.parametrize("N", [1, 2, 5])
def test_compat_single_request_reporting(N):
    normal = single(200, N, ALPHA, BETA)
    compat = single(200, N, ALPHA, BETA, compat=COMPAT)
    ttft = 200 + 1660 + 50
    # identical engine behaviour
    for f in ("first_token_us", "last_token_us", "generated", "first_scheduled_us"):
        assert normal.state.reqs[0][f] == compat.state.reqs[0][f]
    nrec, crec = normal.request_records()[0], compat.request_records()[0]
    assert nrec["ttft_ms"] == crec["ttft_ms"] == ttft / 1000.0
    # normal: E2E = TTFT + (N-1)·decode; ITL samples are the decode steps
    assert nrec["e2e_ms"] == (ttft + (N - 1) * 1008) / 1000.0
    assert nrec["itl_ms"] == (1.008 if N > 1 else 0.0)
    assert normal.cluster["total_output_tokens"] == N
    # compat: every sample is step + a2, plus one extra at completion (its completing step + a2)
    last_step = 1008 if N > 1 else 1660
    e2e = ttft + (N - 1) * (1008 + 50) + (last_step + 50)
    assert crec["e2e_ms"] == e2e / 1000.0
    assert crec["itl_ms"] == pytest.approx((e2e - ttft) / max(N - 1, 1) / 1000.0, rel=1e-12)
    assert compat.cluster["total_output_tokens"] == N - 1
    _check_itl(compat.cluster, [1058] * (N - 1) + [last_step + 50])
    _check_itl(normal.cluster, [1008] * (N - 1))
    assert compat.cluster["e2e_mean_ms"] == e2e / 1000.0


def test_compat_vs_normal_loaded_run():
    kw = dict(LOADED, num_requests=120)
    kw.pop("output_tokens_min")
    normal = blis_fast.simulate(arrival="constant", **kw)
    compat = blis_fast.simulate(compat=COMPAT, **kw)
    nreq, creq = normal.state.reqs, compat.state.reqs
    assert np.array_equal(nreq["arrival_us"], creq["arrival_us"])
    done = creq["state"] == D.REQ_COMPLETED
    # total_output_tokens excludes each request's first token
    assert compat.cluster["total_output_tokens"] == int(np.maximum(creq["generated"] - 1, 0).sum())
    assert normal.cluster["total_output_tokens"] == int(nreq["generated"].sum())
    # per-request ITL = (E2E − TTFT) / max(N−1, 1)
    cols = compat.request_columns()
    n_out = compat.workload.output_len
    for rec in compat.request_records():
        i = int(rec["requestID"].split("_")[1])
        if done[i]:
            e2e, ttft = cols["e2e_us"][i], cols["ttft_us"][i]
            assert rec["itl_ms"] == pytest.approx((e2e - ttft) / max(n_out[i] - 1, 1) / 1000.0, rel=1e-12)
    # one extra sample per completed request: pooled mean = Σ samples / (Σ (N−1) + completed)
    count = int(np.maximum(creq["generated"][done] - 1, 0).sum()) + int(done.sum())
    assert compat.cluster["itl_mean_ms"] == pytest.approx(int(creq["itl_sum_us"][done].sum()) / count / 1000.0,
                                                          rel=1e-12)
    # normal-mode samples: pure token gaps
    ndone = nreq["state"] == D.REQ_COMPLETED
    count = int(np.maximum(nreq["generated"][ndone] - 1, 0).sum())
    assert normal.cluster["itl_mean_ms"] == pytest.approx(int(nreq["itl_sum_us"][ndone].sum()) / count / 1000.0,
                                                          rel=1e-12)


def test_compat_distribution_arrivals_constant():
    rate = 7.0
    gap = int(1.0 / (rate / 1e6))
    compat = blis_fast.simulate(num_requests=30, rate=rate, compat=COMPAT)
    normal = blis_fast.simulate(num_requests=30, rate=rate)
    assert compat.state.reqs["arrival_us"].tolist() == [k * gap for k in range(30)]
    d = np.diff(normal.state.reqs["arrival_us"])
    assert len(set(d.tolist())) > 1  # Poisson by default
    # the same generated lengths
    assert np.array_equal(compat.workload.prompt_len, normal.workload.prompt_len)
    assert np.array_equal(compat.workload.output_len, normal.workload.output_len)


def test_compat_trace_arrivals_trunc_vs_round(tmp_path):
    p = tmp_path / "t.csv"
    arrival_s = [0.0000026, 0.5000007, 1.25]
    write_blis_trace(p, arrival_s, [list(range(1, 40))] * 3, [[1, 2, 3]] * 3)
    kw = dict(alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5])
    normal = trace_sim(p, **kw)
    compat = trace_sim(p, compat=COMPAT, **kw)
    assert normal.state.reqs["arrival_us"].tolist() == [round(x * 1e6) for x in arrival_s] == [3, 500001, 1250000]
    assert compat.state.reqs["arrival_us"].tolist() == [int(x * 1e6) for x in arrival_s] == [2, 500000, 1250000]


def test_round_robin_follows_arrival_order_not_file_order(tmp_path):
    p = tmp_path / "t.csv"
    write_blis_trace(p, [0.3, 0.1, 0.2, 0.05], [[1, 2, 3]] * 4, [[1]] * 4)
    r = trace_sim(p, num_instances=2, alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5])
    # arrival order: request_3, request_1, request_2, request_0 -> instances 0, 1, 0, 1
    assert r.state.reqs["instance"].tolist() == [1, 1, 0, 0]


def test_compat_records_sorted_by_arrival(tmp_path):
    p = tmp_path / "t.csv"
    write_blis_trace(p, [0.3, 0.1, 0.2], [[1, 2, 3]] * 3, [[1]] * 3)
    kw = dict(alpha_coeffs=[0, 0, 0], beta_coeffs=[1000, 10, 5])
    compat = trace_sim(p, compat=COMPAT, **kw)
    assert [r["requestID"] for r in compat.request_records()] == ["request_1", "request_2", "request_0"]
    normal = trace_sim(p, **kw)
    assert [r["requestID"] for r in normal.request_records()] == ["request_0", "request_1", "request_2"]
