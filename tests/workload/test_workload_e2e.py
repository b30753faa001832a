"""Workload specs end to end: through ``blis_fast.simulate`` and the CLI (``run
--workload-spec``, ``workload generate`` / ``stats``): sessions raise the prefix-cache hit
rate, the example specs run, the closed loop and the attributes reach the engine, traces
replay identically, and bad specs exit 2 with one line naming the YAML path."""

from __future__ import annotations

import json

import numpy as np
import pytest

import blis_fast
from builders import ROOT, assert_one_error_line, cli, expect_cli_error, run_cli, write
from builders import WORKLOAD_EXAMPLES as EXAMPLES
from blis_fast_kernels.schema import RequestState
FAST = ["--alpha-coeffs", "0,0,0", "--beta-coeffs", "2000,5,20"]  # quick, deterministic step times

SESSIONS = {
    "seed": 1, "duration_s": 60,
    "clients": [{"name": "chat", "rate": 2, "prompt_tokens": 200, "output_tokens": 100,
                 "session": {"turns": 4, "think_time_s": {"type": "exponential", "mean": 2}, "user_tokens": 100}}],
}
# the same prompt / output lengths (200, 400, 600, 800 tokens), four times the arrivals, no sessions
NO_SESSIONS = {
    "seed": 1, "duration_s": 60,
    "clients": [{"name": "chat", "rate": 8, "output_tokens": 100,
                 "prompt_tokens": {"type": "empirical", "values": [200, 400, 600, 800]}}],
}


def test_sessions_raise_the_prefix_cache_hit_rate_end_to_end(tmp_path, capsys):
    rates = {}
    for name, data in (("sessions", SESSIONS), ("flat", NO_SESSIONS)):
        code, out, err = run_cli(capsys, "run", "--workload-spec", write(tmp_path, f"{name}.yaml", data),
                                 "--num-instances", "2", *FAST)
        assert code == 0, err
        c = json.loads(out)["cluster"]
        assert c["completed_requests"] == c["injected_requests"] > 300
        rates[name] = c["prefix_cache_hit_rate"]
    assert rates["flat"] < 0.01
    assert rates["sessions"] > 0.3  # turn t+1 re-uses turn t's prompt blocks


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_run_from_the_cli(path, capsys):
    code, out, err = run_cli(capsys, "run", "--workload-spec", path, "--num-instances", "4")
    assert code == 0, err
    c = json.loads(out)["cluster"]
    assert c["completed_requests"] > 100
    assert json.loads(out)["run"]["workload"]["kind"] == "spec"


def test_readme_lists_every_example():
    readme = (ROOT / "README.md").read_text()
    for p in EXAMPLES:
        assert f"configs/workloads/{p.name}" in readme


def test_closed_loop_and_attributes_reach_the_engine(tmp_path):
    spec = {
        "seed": 2, "duration_s": 20,
        "slo_classes": {"a": {"ttft_ms": 100}, "b": {"e2e_ms": 1000}},
        "clients": [
            {"name": "x", "rate": 3, "tenant": "tx", "slo_class": "b", "prompt_tokens": 100, "output_tokens": 20,
             "session": {"turns": 3, "think_time_s": 0.25, "user_tokens": 10}},
            {"name": "y", "rate": 3, "tenant": "ty", "slo_class": "a", "prompt_tokens": 50, "output_tokens": 5},
        ],
    }
    r = blis_fast.simulate(workload_spec=str(write(tmp_path, "s.yaml", spec)), alpha_coeffs=[0, 0, 0],
                           beta_coeffs=[2000, 5, 20])
    reqs, wl = r.state.reqs, r.workload
    assert np.all(reqs["state"] == RequestState.COMPLETED)
    assert np.array_equal(reqs["tenant"], wl.tenant) and np.array_equal(reqs["slo_class"], wl.slo_class)
    assert wl.names["tenant"] == ["tx", "ty"] and wl.names["slo_class"] == ["a", "b"]
    linked = np.flatnonzero(wl.next_request >= 0)
    assert linked.size > 20
    nxt = wl.next_request[linked]
    assert np.all(reqs["arrival_us"][nxt] == reqs["last_token_us"][linked] + 250_000)
    assert np.all(reqs["cached_tokens"][nxt] >= 96)  # a turn finds its predecessor's 6 prompt blocks


def test_seed_flag_overrides_the_spec_seed(tmp_path):
    p = str(write(tmp_path, "s.yaml", SESSIONS))
    kw = dict(workload_spec=p, alpha_coeffs=[0, 0, 0], beta_coeffs=[2000, 5, 20])
    a = blis_fast.simulate(**kw)
    b = blis_fast.simulate(seed=1, **kw)
    c = blis_fast.simulate(seed=2, **kw)
    assert np.array_equal(a.workload.arrival_us, b.workload.arrival_us)
    assert not np.array_equal(a.workload.arrival_us, c.workload.arrival_us)
    assert a.run_info()["workload"]["seed"] == 1 and c.run_info()["workload"]["seed"] == 2


# configs/workloads/rag.yaml in small: two clients sharing a few documents (the example's 30
# long documents make its trace header 600 KB of YAML, seconds to write and read: slow)
SMALL_RAG = {
    "seed": 7, "rate": 12, "duration_s": 20,
    "prefix_groups": {"documents": {"count": 5, "length": {"type": "gaussian", "mean": 400, "std": 100, "min": 100,
                                                           "max": 800}, "popularity": {"type": "zipf", "s": 1.0}}},
    "clients": [
        {"name": "search", "rate_fraction": 0.7, "prompt_tokens": {"type": "lognormal", "p50": 40, "p90": 150},
         "output_tokens": 50, "prefix": {"group": "documents", "reuse_probability": 0.9}},
        {"name": "support-bot", "rate_fraction": 0.3, "prompt_tokens": 60, "output_tokens": {"type": "exponential",
                                                                                          "mean": 40, "max": 200},
         "prefix": {"group": "documents", "reuse_probability": 0.6}},
    ],
}


@pytest.mark.parametrize("which", ["small", pytest.param("rag", marks=pytest.mark.slow)])
def test_generate_stats_and_replay(tmp_path, capsys, which):
    spec = write(tmp_path, "small.yaml", SMALL_RAG) if which == "small" else EXAMPLES[[p.stem for p in EXAMPLES].index("rag")]
    outs = []
    for name in ("a.parquet", "b.parquet", "c.csv"):
        code, out, err = run_cli(capsys, "workload", "generate", "--spec", spec, "--out", tmp_path / name)
        assert code == 0, err
        assert json.loads(out)["num_requests"] > 100
        outs.append(tmp_path / name)
    assert outs[0].read_bytes() == outs[1].read_bytes()
    code, out, _ = run_cli(capsys, "workload", "generate", "--spec", spec, "--out", tmp_path / "d.parquet",
                           "--seed", "123")
    assert code == 0 and (tmp_path / "d.parquet").read_bytes() != outs[0].read_bytes()
    code, out, err = run_cli(capsys, "workload", "stats", outs[0])
    assert code == 0, err
    st = json.loads(out)
    assert set(st["clients"]) == {"search", "support-bot"} and st["ideal_prefix_hit_rate"] > 0.5
    code, out2, _ = run_cli(capsys, "workload", "stats", outs[2])
    assert {k: v for k, v in json.loads(out2).items() if k != "file"} == {k: v for k, v in st.items() if k != "file"}
    runs = []
    for args in (["--workload-spec", spec], ["--workload", "traces", "--workload-traces-filepath", outs[0]],
                 ["--workload", "traces", "--workload-traces-filepath", outs[2]]):
        code, out, err = run_cli(capsys, "run", *args, "--num-instances", "2", *FAST)
        assert code == 0, err
        c = json.loads(out)["cluster"]
        runs.append({k: c[k] for k in ("completed_requests", "ttft_p99_ms", "e2e_mean_ms", "prefix_cache_hit_rate")})
    assert runs[0] == runs[1] == runs[2]


BAD = [
    ({"rate": 5, "duration_s": 10, "clients": [
        {"name": "a", "rate_fraction": 0, "prompt_tokens": 5, "output_tokens": 5}]}, "clients[*].rate_fraction"),
    ({"duration_s": 10, "clients": [{"name": "a", "rate": 1, "arrival": {"type": "gamma", "cv": -2},
                                     "prompt_tokens": 5, "output_tokens": 5}]}, "clients[0].arrival.cv"),
    ({"duration_s": 10, "clients": [{"name": "a", "rate": 1, "output_tokens": 5,
                                     "prompt_tokens": {"type": "lognormal", "p50": 900, "p90": 100}}]},
     "clients[0].prompt_tokens.p90"),
    ({"duration_s": 10, "clients": [{"name": "a", "rate": 1, "output_tokens": 5,
                                     "prompt_tokens": {"type": "poisson", "mean": 9}}]}, "clients[0].prompt_tokens.type"),
    ({"duration_s": 10, "clients": [{"name": "a", "arrival": {"type": "trace", "file": "absent.txt"},
                                     "prompt_tokens": 5, "output_tokens": 5}]}, "clients[0].arrival.file"),
]


@pytest.mark.parametrize("data, path", BAD, ids=[b[1] for b in BAD])
def test_bad_specs_exit_2_with_one_line(tmp_path, capsys, data, path):
    p = write(tmp_path, "bad.yaml", data)
    for cmd in (["run", "--workload-spec", p], ["workload", "generate", "--spec", p, "--out", tmp_path / "t.csv"],
                ["workload", "stats", p]):
        expect_cli_error(capsys, *cmd, needles=[path])


@pytest.mark.slow
def test_bad_spec_in_a_fresh_process(tmp_path):
    p = write(tmp_path, "bad.yaml", BAD[2][0])
    r = cli("run", "--workload-spec", p, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert_one_error_line(r.stderr, ["clients[0].prompt_tokens.p90"])
    r = cli("run", "--workload-spec", tmp_path / "no.yaml", timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error: --workload-spec") and len(r.stderr.splitlines()) == 1


def test_slo_report_per_class_tenant_client(tmp_path):
    from blis_fast.results.slo import slo_report

    spec = {
        "seed": 4, "duration_s": 30,
        "slo_classes": {"tight": {"ttft_ms": 5, "tpot_ms": 1}, "loose": {"ttft_ms": 60000, "e2e_ms": 600000}},
        "clients": [
            {"name": "x", "rate": 4, "tenant": "t", "slo_class": "tight", "prompt_tokens": 300, "output_tokens": 30},
            {"name": "y", "rate": 4, "tenant": "t", "slo_class": "loose", "prompt_tokens": 100, "output_tokens": 10,
             "session": {"turns": 2, "think_time_s": 0.1}},
        ],
    }
    r = blis_fast.simulate(workload_spec=str(write(tmp_path, "s.yaml", spec)), alpha_coeffs=[0, 0, 0],
                           beta_coeffs=[2000, 5, 20])
    rep = slo_report(r)
    assert set(rep["slo_classes"]) == {"tight", "loose"} and set(rep["tenants"]) == {"t"}
    assert rep["slo_classes"]["loose"]["slo_attainment"] == 1.0
    assert rep["slo_classes"]["tight"]["slo_attainment"] == 0.0  # a 2 ms step already breaks 1 ms TPOT
    assert rep["slo_classes"]["tight"]["targets"] == {"ttft_ms": 5.0, "tpot_ms": 1.0, "e2e_ms": None}
    # naive check of one figure: x's TTFT p50
    reqs = r.state.reqs
    x = reqs["client"] == 0
    ttft_ms = (reqs["first_token_us"][x] - reqs["arrival_us"][x]) / 1e3
    assert rep["clients"]["x"]["ttft_ms"]["p50"] == pytest.approx(float(np.percentile(ttft_ms, 50)))
    t = rep["tenants"]["t"]
    assert t["arrived"] == rep["clients"]["x"]["arrived"] + rep["clients"]["y"]["arrived"] == len(reqs)
    assert t["slo_attainment"] == pytest.approx(rep["clients"]["y"]["arrived"] / len(reqs))
    json.dumps(rep)
