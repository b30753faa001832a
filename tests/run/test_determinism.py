"""Determinism (docs/semantics.md §10): the configuration alone fixes the run.

Same config twice in one process -> identical documents and bytes; no dependence on the
wall clock (time functions patched to jump around, in-process and in a fresh process);
different seeds -> different workloads; deployment/engine settings never change the
generated workload; subsystem streams are independent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import blis_fast
from blis_fast.workload import write_blis_trace
from builders import COMPAT, same_workload

SCENARIOS = {
    "loaded": dict(num_requests=250, rate=40, num_instances=3, total_kv_blocks=80, prompt_tokens=300,
                   prompt_tokens_stdev=200, prompt_tokens_min=1, prompt_tokens_max=1200, output_tokens=60,
                   output_tokens_stdev=40, output_tokens_min=0, output_tokens_max=300, prefix_tokens=64,
                   alpha_coeffs=[100, 1, 50], beta_coeffs=[5000, 20, 100], max_num_seqs=8),
    "chatbot-4": dict(workload="chatbot", rate=30, num_requests=300, num_instances=4, seed=7),
    "compat": dict(num_requests=150, rate=20, num_instances=2, compat=COMPAT, total_kv_blocks=500),
    "horizon": dict(num_requests=200, rate=50, num_instances=2, horizon=2_500_000, total_kv_blocks=300),
    "roofline": dict(model="qwen/qwen3-14b", latency_model="roofline", tp=2, num_requests=60, rate=5,
                     num_instances=2),
}


def doc_bytes(result) -> bytes:
    return json.dumps(result.results_document(), indent=2, allow_nan=False).encode()


@pytest.fixture(scope="module")
def baselines():
    return {name: blis_fast.simulate(**kw) for name, kw in SCENARIOS.items()}


# ============================================================================ same process


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_same_config_twice_identical(baselines, name, tmp_path):
    first = baselines[name]
    second = blis_fast.simulate(**SCENARIOS[name])
    assert first.results_document() == second.results_document()
    assert first.summary() == second.summary()
    assert doc_bytes(first) == doc_bytes(second)
    first.write_results(tmp_path / "a.json")
    second.write_results(tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    # the raw tables too
    assert np.array_equal(first.state.reqs, second.state.reqs)
    assert np.array_equal(first.state.inst, second.state.inst)


def test_parquet_bytes_identical(baselines, tmp_path):
    pytest.importorskip("pyarrow")
    r = baselines["loaded"]
    r.write_parquet(tmp_path / "a.parquet")
    blis_fast.simulate(**SCENARIOS["loaded"]).write_parquet(tmp_path / "b.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_interleaved_runs_do_not_share_state(baselines):
    """Running other configurations in between does not change a run (no hidden global state)."""
    order = ["roofline", "loaded", "compat", "chatbot-4", "horizon", "loaded"]
    for name in order:
        assert doc_bytes(blis_fast.simulate(**SCENARIOS[name])) == doc_bytes(baselines[name]), name


def test_config_object_and_flat_overrides_agree(baselines):
    cfg = blis_fast.build_config({}, SCENARIOS["loaded"])
    assert doc_bytes(blis_fast.simulate(cfg)) == doc_bytes(baselines["loaded"])


def test_run_info_has_no_wall_clock_fields(baselines):
    info = baselines["loaded"].run_info()
    text = json.dumps(info).lower()
    for word in ("elapsed", "wall", "timestamp", "hostname", "date"):
        assert word not in text, word


# ============================================================================ wall clock


class JumpyClock:
    """Replacement time functions that jump forwards and backwards by large amounts."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def seconds(self) -> float:
        return float(self.rng.uniform(-1e9, 4e9))

    def nanos(self) -> int:
        return int(self.rng.integers(0, 2**62))


@pytest.mark.parametrize("clock_seed", [0, 1])
@pytest.mark.parametrize("name", ["loaded", "chatbot-4", "compat"])
def test_no_wall_clock_dependence(baselines, monkeypatch, name, clock_seed):
    clock = JumpyClock(clock_seed)
    for fn in ("time", "perf_counter", "monotonic", "process_time"):
        monkeypatch.setattr(time, fn, clock.seconds)
    for fn in ("time_ns", "perf_counter_ns", "monotonic_ns", "process_time_ns"):
        monkeypatch.setattr(time, fn, clock.nanos)
    again = blis_fast.simulate(**SCENARIOS[name])
    monkeypatch.undo()
    assert doc_bytes(again) == doc_bytes(baselines[name])


@pytest.mark.slow  # a second of sleep; test_no_wall_clock_dependence (fast) jumps the clocks instead
def test_real_time_passing_does_not_matter(baselines):
    time.sleep(1.1)  # crosses at least one whole-second boundary
    assert doc_bytes(blis_fast.simulate(**SCENARIOS["horizon"])) == doc_bytes(baselines["horizon"])


_CHILD = r"""
import sys, time, random
mode = sys.argv[1]
if mode == "jumpy":
    rng = random.Random(int(sys.argv[3]))
    f = lambda: rng.uniform(-1e9, 4e9)
    g = lambda: rng.randrange(0, 2**62)
    for n in ("time", "perf_counter", "monotonic", "process_time"):
        setattr(time, n, f)
    for n in ("time_ns", "perf_counter_ns", "monotonic_ns", "process_time_ns"):
        setattr(time, n, g)
import blis_fast
r = blis_fast.simulate(num_requests=200, rate=25, num_instances=3, total_kv_blocks=120, prefix_tokens=32,
                       prompt_tokens=200, prompt_tokens_stdev=100, output_tokens=40, output_tokens_stdev=20,
                       alpha_coeffs=[100, 1, 50], beta_coeffs=[5000, 20, 100], seed=11)
r.write_results(sys.argv[2])
"""


@pytest.mark.slow
def test_fresh_processes_with_patched_clocks_byte_identical(tmp_path):
    outs = []
    for k, mode in enumerate(["plain", "jumpy", "jumpy"]):
        f = tmp_path / f"r{k}.json"
        env = {**os.environ, "TZ": ["UTC", "Asia/Kolkata", "America/Los_Angeles"][k], "PYTHONHASHSEED": str(k + 1)}
        p = subprocess.run([sys.executable, "-c", _CHILD, mode, str(f), str(k)], capture_output=True, text=True,
                           timeout=300, env=env)
        assert p.returncode == 0, p.stderr
        outs.append(f.read_bytes())
    assert outs[0] == outs[1] == outs[2]


@pytest.mark.slow
def test_fresh_process_matches_in_process(tmp_path):
    f = tmp_path / "child.json"
    p = subprocess.run([sys.executable, "-c", _CHILD, "plain", str(f)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    here = blis_fast.simulate(num_requests=200, rate=25, num_instances=3, total_kv_blocks=120, prefix_tokens=32,
                              prompt_tokens=200, prompt_tokens_stdev=100, output_tokens=40, output_tokens_stdev=20,
                              alpha_coeffs=[100, 1, 50], beta_coeffs=[5000, 20, 100], seed=11)
    here.write_results(tmp_path / "here.json")
    assert f.read_bytes() == (tmp_path / "here.json").read_bytes()


# ============================================================================ seeds and workload independence


def _wl(**kw):
    """The workload a configuration generates (via simulate's result)."""
    return blis_fast.simulate(**{"num_requests": 80, "rate": 10, "total_kv_blocks": 2000, **kw}).workload


@pytest.mark.parametrize("workload", ["distribution", "chatbot", "summarization"])
def test_different_seeds_different_workloads(workload):
    a, b, a2 = _wl(seed=1, workload=workload), _wl(seed=2, workload=workload), _wl(seed=1, workload=workload)
    assert same_workload(a, a2)
    assert not np.array_equal(a.arrival_us, b.arrival_us)
    assert not np.array_equal(a.prompt_len, b.prompt_len)
    assert not np.array_equal(a.output_len, b.output_len)
    assert not np.array_equal(a.block_keys[: min(a.block_keys.size, b.block_keys.size)],
                              b.block_keys[: min(a.block_keys.size, b.block_keys.size)])


def test_different_seeds_different_results():
    a = blis_fast.simulate(num_requests=50, rate=10, seed=1)
    b = blis_fast.simulate(num_requests=50, rate=10, seed=2)
    assert a.cluster["ttft_mean_ms"] != b.cluster["ttft_mean_ms"]
    assert a.cluster["total_input_tokens"] != b.cluster["total_input_tokens"]


def test_seed_zero_and_large_seed_valid_and_distinct():
    a, b = _wl(seed=0), _wl(seed=2**63 - 1)
    assert not np.array_equal(a.prompt_len, b.prompt_len)


@pytest.mark.parametrize("change", [
    dict(num_instances=2), dict(num_instances=5), dict(num_instances=3, max_instances=3),
    dict(max_num_seqs=4), dict(max_num_batched_tokens=512), dict(total_kv_blocks=300),
    dict(enable_prefix_caching=False), dict(alpha_coeffs=[0, 0, 0], beta_coeffs=[100, 1, 1]),
    dict(latency_model="roofline"), dict(hardware="A100-SXM", latency_model="roofline"),
    dict(horizon=1_000_000), dict(admission_latency=500, routing_latency=700),
    dict(long_prefill_token_threshold=64),
])
def test_deployment_and_engine_settings_do_not_change_workload(change):
    base = _wl(seed=5, prefix_tokens=32)
    other = _wl(seed=5, prefix_tokens=32, **change)
    assert same_workload(base, other)


def test_num_instances_does_not_change_workload_of_trace(tmp_path):
    p = tmp_path / "t.csv"
    rng = np.random.default_rng(0)
    write_blis_trace(p, np.sort(rng.uniform(0, 5, 30)), [rng.integers(0, 1000, 50) for _ in range(30)],
                     [rng.integers(0, 1000, 5) for _ in range(30)])
    cfg = {"workload": {"type": "traces", "traces_filepath": str(p)}}
    a = blis_fast.simulate(cfg, num_instances=1).workload
    b = blis_fast.simulate(cfg, num_instances=4).workload
    assert same_workload(a, b)


def test_workload_subsystems_independent():
    """Each quantity has its own stream: changing one parameter leaves the others' draws alone."""
    base = _wl(seed=3)
    faster = _wl(seed=3, rate=55)
    assert np.array_equal(base.prompt_len, faster.prompt_len)
    assert np.array_equal(base.output_len, faster.output_len)
    assert np.array_equal(base.block_keys, faster.block_keys)
    assert not np.array_equal(base.arrival_us, faster.arrival_us)
    longer_out = _wl(seed=3, output_tokens=900)
    assert np.array_equal(base.arrival_us, longer_out.arrival_us)
    assert np.array_equal(base.prompt_len, longer_out.prompt_len)
    # the prompts are the same; the output blocks (more of them) are the outputs' own
    prompt_keys = [np.concatenate([w.prompt_keys_of(i) for i in range(len(w))]) for w in (base, longer_out)]
    assert np.array_equal(*prompt_keys)
    assert not np.array_equal(base.output_len, longer_out.output_len)


def test_more_requests_extends_prefix_of_workload():
    """Requests are drawn in order: the first n of a longer workload are the n-request workload
    (arrivals, lengths)."""
    short, long_ = _wl(seed=4, num_requests=40), _wl(seed=4, num_requests=120)
    assert np.array_equal(short.arrival_us, long_.arrival_us[:40])
    assert np.array_equal(short.prompt_len, long_.prompt_len[:40])
    assert np.array_equal(short.output_len, long_.output_len[:40])


def test_permuting_instance_count_is_only_routing(baselines):
    """The same workload on 1 vs 3 instances: the per-request inputs in the results are equal."""
    kw = dict(SCENARIOS["loaded"])
    one = blis_fast.simulate(**{**kw, "num_instances": 1}).request_records()
    three = baselines["loaded"].request_records()
    key = lambda r: (r["requestID"], r["arrived_at"], r["num_prefill_tokens"], r["num_decode_tokens"])  # noqa: E731
    assert [key(r) for r in one] == [key(r) for r in three]
    assert {r["handled_by"] for r in one} == {"instance_0"}


def test_repeated_runs_identical_many_times():
    kw = dict(num_requests=60, rate=30, num_instances=2, total_kv_blocks=60, prefix_tokens=48,
              alpha_coeffs=[10, 1, 5], beta_coeffs=[2000, 10, 50])
    docs = {doc_bytes(blis_fast.simulate(**kw)) for _ in range(5)}
    assert len(docs) == 1

