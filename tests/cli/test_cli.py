"""The ``blis-fast`` command line: default run, the acceptance trace command, results and
Parquet files, YAML configs with flag overrides, determinism across processes, and the
bad-input matrix (exit 2, one ``error:`` line naming the field/flag, never a traceback).

Tests marked ``BOTH_WAYS`` run ``main()`` in this process and, marked slow, the real
``python -m blis_fast.cli`` in a fresh one; fresh-process-only tests are marked slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from blis_fast.cli import main
from builders import (
    BOTH_WAYS,
    COMPAT,
    LLAMA,
    LLAMA_8B_HF,
    REQUEST_FIELDS,
    ROOT,
    SUMMARY_HEAD,
    assert_one_error_line,
    cli,
    invoke,
)


def acceptance_args(trace: Path, results: Path, *extra):
    return ["run", "--model", LLAMA, "--hardware", "H100", "--tp", "1", "--workload", "traces",
            "--workload-traces-filepath", trace, "--num-instances", "4", "--results-path", results, *extra]


# ============================================================================ happy paths


@BOTH_WAYS
def test_run_with_no_args_prints_default_summary(mode, capsys):
    code, stdout, stderr = invoke(mode, capsys, "run")
    assert code == 0, stderr
    out = json.loads(stdout)
    assert list(out) == ["cluster", "instances", "run", "adequacy"]
    assert out["cluster"]["completed_requests"] == 100
    assert out["cluster"]["instance_id"] == "cluster"
    assert len(out["instances"]) == 1
    assert out["run"]["model"] == LLAMA
    assert out["run"]["latency_model"] == "blackbox"
    assert list(out["cluster"])[: len(SUMMARY_HEAD)] == SUMMARY_HEAD
    assert "Traceback" not in stderr


@pytest.mark.slow
def test_console_script_exists_and_runs():
    exe = Path(sys.executable).parent / "blis-fast"
    if not exe.exists():
        pytest.skip("console script not installed next to this interpreter")
    p = subprocess.run([str(exe), "run", "--num-requests", "5"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["cluster"]["completed_requests"] == 5


@pytest.mark.slow
def test_no_command_shows_help():
    p = cli()
    assert "run" in (p.stdout + p.stderr)
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_run_help_lists_blis_flags():
    p = cli("run", "--help", env=dict(os.environ, COLUMNS="250", TERM="dumb"))  # rich truncates long names
    assert p.returncode == 0
    for flag in ("--max-num-running-reqs", "--max-num-scheduled-tokens", "--workload-traces-filepath",
                 "--results-path", "--per-request-out", "--compat", "--config", "--max-memory"):
        assert flag in p.stdout, flag


@BOTH_WAYS
@pytest.mark.parametrize("compat", [None, COMPAT], ids=["normal", "compat"])
def test_acceptance_trace_command(tmp_path, trace40, compat, mode, capsys):
    results = tmp_path / "out.json"
    extra = ["--compat", compat] if compat else []
    code, out, err = invoke(mode, capsys, *acceptance_args(trace40, results, *extra))
    assert code == 0, err
    stdout = json.loads(out)
    doc = json.loads(results.read_text())
    # the results file: cluster summary fields (in order) + per-request records
    assert list(doc)[: len(SUMMARY_HEAD)] == SUMMARY_HEAD
    assert doc["completed_requests"] == 40
    reqs = doc["requests"]
    assert len(reqs) == 40
    for rec in reqs:
        assert list(rec)[: len(REQUEST_FIELDS)] == REQUEST_FIELDS
        assert rec["handled_by"] in {f"instance_{i}" for i in range(4)}
        assert rec["ttft_ms"] > 0 and rec["e2e_ms"] >= rec["ttft_ms"]
        assert rec["scheduling_delay_ms"] >= 0 and rec["itl_ms"] >= 0
        assert rec["source_id"] == "src-" + rec["requestID"].split("_")[1]
    assert {rec["requestID"] for rec in reqs} == {f"request_{i}" for i in range(40)}
    # trace arrivals are increasing: request_i -> instance_(i mod 4), records ordered by arrival
    assert [r["requestID"] for r in reqs] == [f"request_{i}" for i in range(40)]
    assert all(r["handled_by"] == f"instance_{i % 4}" for i, r in enumerate(reqs))
    # stdout's cluster object equals the file's summary part
    for k in SUMMARY_HEAD:
        assert doc[k] == stdout["cluster"][k], k
    assert len(stdout["instances"]) == 4
    assert sum(s["completed_requests"] for s in stdout["instances"]) == 40
    assert stdout["run"]["compat"] == compat
    assert stdout["run"]["model"] == LLAMA
    # no NaN in the file (json.loads would have accepted NaN: check explicitly)
    assert "NaN" not in results.read_text() and "Infinity" not in results.read_text()


@BOTH_WAYS
def test_acceptance_compat_changes_reporting_not_requests(tmp_path, trace40, mode, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert invoke(mode, capsys, *acceptance_args(trace40, a))[0] == 0
    assert invoke(mode, capsys, *acceptance_args(trace40, b, "--compat", COMPAT))[0] == 0
    na, nb = json.loads(a.read_text()), json.loads(b.read_text())
    # compat: total_output_tokens excludes first tokens (one per completed request)
    assert na["total_output_tokens"] - nb["total_output_tokens"] == 40
    assert na["total_input_tokens"] == nb["total_input_tokens"]
    # compat E2E includes one extra step + a2 per request
    assert all(rb["e2e_ms"] > ra["e2e_ms"] for ra, rb in zip(na["requests"], nb["requests"]))


@BOTH_WAYS
def test_per_request_parquet(tmp_path, trace40, mode, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    results, table_path = tmp_path / "out.json", tmp_path / "x.parquet"
    code, _, err = invoke(mode, capsys, *acceptance_args(trace40, results, "--per-request-out", table_path))
    assert code == 0, err
    t = pq.read_table(table_path)
    assert t.num_rows == 40
    for name in REQUEST_FIELDS:
        assert name in t.column_names, name
    doc = json.loads(results.read_text())
    by_id = {r["requestID"]: r for r in doc["requests"]}
    rows = t.to_pylist()
    for row in rows:
        rec = by_id[row["requestID"]]
        for name in REQUEST_FIELDS:
            if isinstance(rec[name], float):
                assert row[name] == pytest.approx(rec[name], rel=1e-12, abs=1e-12), name
            else:
                assert row[name] == rec[name], name


@BOTH_WAYS
def test_parquet_only_without_results_path(tmp_path, mode, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "only.parquet"
    code, _, err = invoke(mode, capsys, "run", "--num-requests", "7", "--per-request-out", out)
    assert code == 0, err
    assert pq.read_table(out).num_rows == 7


def test_in_process_main_with_capsys(capsys, tmp_path):
    results = tmp_path / "r.json"
    main(["run", "--num-requests", "12", "--num-instances", "3", "--rate", "4", "--results-path", str(results)])
    out = json.loads(capsys.readouterr().out)
    assert out["cluster"]["completed_requests"] == 12
    assert [s["instance_id"] for s in out["instances"]] == ["instance_0", "instance_1", "instance_2"]
    doc = json.loads(results.read_text())
    assert [r["handled_by"] for r in doc["requests"]] == [f"instance_{i % 3}" for i in range(12)]


# ============================================================================ YAML configs


def test_yaml_nested_sections(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "model: meta-llama/llama-3.1-8b-instruct\n"
        "hardware: H100\n"
        "engine:\n  tp: 1\n  max_num_seqs: 5\n  total_kv_blocks: 3000\n"
        "deployment:\n  num_instances: 3\n"
        "workload:\n  type: chatbot\n  rate: 9\n  num_requests: 21\n"
        "simulation:\n  seed: 5\n"
    )
    main(["run", "--config", str(cfg)])
    out = json.loads(capsys.readouterr().out)
    conf = out["run"]["config"]
    assert conf["engine"]["max_num_seqs"] == 5
    assert conf["engine"]["total_kv_blocks"] == 3000
    assert conf["deployment"]["num_instances"] == 3
    assert conf["workload"]["type"] == "chatbot" and conf["workload"]["rate"] == 9
    assert conf["simulation"]["seed"] == 5
    assert out["cluster"]["completed_requests"] + out["cluster"]["dropped_unservable"] == 21
    assert len(out["instances"]) == 3
    assert all(s["batch_size_peak"] <= 5 for s in out["instances"])


def test_yaml_flat_names(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("max_num_running_reqs: 4\nmax_num_scheduled_tokens: 1024\nnum_instances: 2\n"
                   "workload: distribution\nrate: 6\nnum_requests: 11\nseed: 3\n")
    main(["run", "--config", str(cfg)])
    conf = json.loads(capsys.readouterr().out)["run"]["config"]
    assert conf["engine"]["max_num_seqs"] == 4
    assert conf["engine"]["max_num_batched_tokens"] == 1024
    assert conf["deployment"]["num_instances"] == 2
    assert conf["workload"]["rate"] == 6 and conf["workload"]["num_requests"] == 11
    assert conf["simulation"]["seed"] == 3


def test_cli_flag_overrides_yaml(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("num_requests: 7\nengine:\n  max_num_seqs: 4\nworkload:\n  rate: 3\n")
    main(["run", "--config", str(cfg), "--num-requests", "9", "--max-num-seqs", "6"])
    out = json.loads(capsys.readouterr().out)
    conf = out["run"]["config"]
    assert conf["workload"]["num_requests"] == 9  # flag beats flat YAML
    assert conf["engine"]["max_num_seqs"] == 6  # flag (alias) beats nested YAML
    assert conf["workload"]["rate"] == 3  # untouched YAML value kept
    assert out["cluster"]["completed_requests"] == 9


def test_shipped_example_configs_parse():
    from blis_fast import build_config, load_yaml

    examples = sorted((ROOT / "configs" / "examples").glob("*.yaml"))
    assert examples
    for p in examples:
        build_config(load_yaml(p))


@BOTH_WAYS
def test_yaml_equals_flags(tmp_path, mode, capsys):
    """The same settings via YAML or via flags give identical results files."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("num_instances: 2\nworkload:\n  rate: 5\n  num_requests: 15\nsimulation:\n  seed: 9\n")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert invoke(mode, capsys, "run", "--config", cfg, "--results-path", a)[0] == 0
    assert invoke(mode, capsys, "run", "--num-instances", "2", "--rate", "5", "--num-requests", "15", "--seed", "9",
                  "--results-path", b)[0] == 0
    da, db = json.loads(a.read_text()), json.loads(b.read_text())
    da.pop("run"), db.pop("run")
    assert da == db


# ============================================================================ determinism


@pytest.mark.slow
def test_two_processes_byte_identical(tmp_path, trace40):
    outs = []
    for k in range(2):
        d = tmp_path / f"r{k}"
        d.mkdir()
        p = cli(*acceptance_args(trace40, d / "out.json", "--per-request-out", d / "x.parquet"), cwd=d)
        assert p.returncode == 0, p.stderr
        outs.append((p.stdout, (d / "out.json").read_bytes(), (d / "x.parquet").read_bytes()))
    assert outs[0][0] == outs[1][0]
    assert outs[0][1] == outs[1][1]
    assert outs[0][2] == outs[1][2]


@pytest.mark.slow
def test_two_processes_byte_identical_generated_workload(tmp_path):
    files = []
    for k in range(2):
        f = tmp_path / f"g{k}.json"
        env = dict(os.environ, PYTHONHASHSEED=str(k * 7919 + 1))  # str hashing must not matter
        p = cli("run", "--workload", "chatbot", "--rate", "30", "--num-requests", "300", "--num-instances", "3",
                "--seed", "123", "--results-path", f, env=env)
        assert p.returncode == 0, p.stderr
        files.append(f.read_bytes())
    assert files[0] == files[1]


# ============================================================================ bad input


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "config.json").write_text(json.dumps({**LLAMA_8B_HF, "num_key_value_heads": 64}))  # kv heads > heads
    (d / "malformed.csv").write_text(
        "arrival_time,request_id,model,prefill_tokens,decode_tokens\n"
        '0.0,a,m,"[1, 2, 3]","[1]"\n'
        '0.1,b,m,"[1, 2, x]","[1]"\n')
    (d / "badarrival.csv").write_text(
        "arrival_time,request_id,model,prefill_tokens,decode_tokens\n"
        '0.0,a,m,"[1, 2, 3]","[1]"\n'
        '0.1,b,m,"[1, 2, 3]","[1]"\n'
        'soon,c,m,"[1, 2, 3]","[1]"\n')
    (d / "unknown.yaml").write_text("engine:\n  max_num_seqs: 4\n  bogus_key: 3\n")
    (d / "unknown_top.yaml").write_text("rate: 4\nnot_a_setting: 1\n")
    (d / "malformed.yaml").write_text("engine: [\n  tp: 1\n")
    (d / "badvalue.yaml").write_text("engine:\n  max_num_seqs: 0\n")
    (d / "badflat.yaml").write_text("rate: -3\n")
    (d / "notmapping.yaml").write_text("- 1\n- 2\n")
    return d


BAD_INPUTS = [
    # (id, args, substrings the single error line must contain)
    ("unknown-model", ["--model", "nope/not-a-model"], ["not-a-model", "llama-3.1-8b-instruct"]),
    ("rate-0", ["--rate", "0"], ["--rate"]),
    ("rate-nan", ["--rate", "nan"], ["--rate"]),
    ("rate-neg", ["--rate", "-1"], ["--rate"]),
    ("rate-inf", ["--rate", "inf"], ["--rate"]),
    ("min-gt-max", ["--min-instances", "3", "--max-instances", "2"], ["instances"]),
    ("num-gt-max", ["--num-instances", "3", "--max-instances", "2"], ["instances"]),
    ("prompt-stdev-neg", ["--prompt-tokens-stdev", "-1"], ["prompt-tokens-stdev"]),
    ("output-stdev-neg", ["--output-tokens-stdev", "-5"], ["output-tokens-stdev"]),
    ("max-num-seqs-0", ["--max-num-seqs", "0"], ["--max-num-"]),
    ("max-num-running-reqs-0", ["--max-num-running-reqs", "0"], ["--max-num-running-reqs"]),
    ("kv-heads-gt-heads", ["--model", "{d}/config.json"], ["kv_heads"]),
    ("gpu-mem-1.5", ["--gpu-memory-utilization", "1.5"], ["--gpu-memory-utilization"]),
    ("tp-0", ["--tp", "0"], ["--tp"]),
    ("missing-trace", ["--workload", "traces", "--workload-traces-filepath", "{d}/missing.csv"], ["missing.csv"]),
    ("traces-without-file", ["--workload", "traces"], ["traces"]),
    ("malformed-trace", ["--workload", "traces", "--workload-traces-filepath", "{d}/malformed.csv"],
     ["malformed.csv", "row 2"]),
    ("bad-arrival-trace", ["--workload", "traces", "--workload-traces-filepath", "{d}/badarrival.csv"],
     ["badarrival.csv", "row 3"]),
    ("workload-bogus", ["--workload", "bogus"], ["--workload", "bogus"]),
    ("latency-model-x", ["--latency-model", "x"], ["--latency-model"]),
    ("compat-x", ["--compat", "x"], ["--compat"]),
    ("hardware-X", ["--hardware", "X"], ["hardware", "H100"]),
    ("yaml-unknown-key", ["--config", "{d}/unknown.yaml"], ["engine.bogus_key"]),
    ("yaml-unknown-top-key", ["--config", "{d}/unknown_top.yaml"], ["not_a_setting"]),
    ("yaml-malformed", ["--config", "{d}/malformed.yaml"], ["malformed.yaml"]),
    ("yaml-bad-value", ["--config", "{d}/badvalue.yaml"], ["engine.max_num_seqs"]),
    ("yaml-bad-flat-value", ["--config", "{d}/badflat.yaml"], ["rate"]),
    ("yaml-not-mapping", ["--config", "{d}/notmapping.yaml"], ["notmapping.yaml"]),
    ("yaml-missing", ["--config", "{d}/nope.yaml"], ["nope.yaml"]),
    ("num-instances-0", ["--num-instances", "0"], ["--num-instances"]),
    ("horizon-neg", ["--horizon", "-1"], ["--horizon"]),
    ("num-requests-abc", ["--num-requests", "abc"], ["--num-requests"]),
    ("rate-abc", ["--rate", "abc"], ["--rate"]),
    ("tp-float", ["--tp", "1.5"], ["--tp"]),
    ("num-requests-0", ["--num-requests", "0"], ["--num-requests"]),
    ("alpha-two-values", ["--alpha-coeffs", "1,2"], ["alpha"]),
    ("beta-not-numbers", ["--beta-coeffs", "a,b,c"], ["beta"]),
    ("unknown-flag", ["--no-such-flag", "3"], ["--no-such-flag"]),
    ("block-size-0", ["--block-size-in-tokens", "0"], ["--block-size-in-tokens"]),
    ("seed-neg", ["--seed", "-1"], ["--seed"]),
    ("horizon-2^64", ["--horizon", str(2**64)], ["--horizon", "2^62"]),
    ("num-requests-underscore", ["--num-requests", "1_0"], ["--num-requests"]),
    ("max-memory-unit", ["--max-memory", "3XB"], ["--max-memory"]),
    ("max-memory-exceeded", ["--num-requests", "100000", "--max-memory", "16MiB"], ["simulation.max_memory"]),
]


@BOTH_WAYS
@pytest.mark.parametrize("case_id, args, needles", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line(bad_files, case_id, args, needles, mode, capsys):
    args = [a.format(d=bad_files) for a in args]
    code, out, err = invoke(mode, capsys, "run", *args)
    assert code == 2, (code, out[-500:], err[-2000:])
    assert_one_error_line(err, needles)
    assert out == ""


def test_bad_input_in_process_raises_system_exit_2(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["run", "--rate", "0"])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --rate")


@BOTH_WAYS
@pytest.mark.parametrize("flag, name", [("--results-path", "out.json"), ("--per-request-out", "x.parquet")])
def test_unwritable_output_path_no_traceback(tmp_path, flag, name, mode, capsys):
    code, _, err = invoke(mode, capsys, "run", "--num-requests", "3", flag, tmp_path / "no" / "such" / "dir" / name)
    assert code == 2
    line = assert_one_error_line(err)
    assert flag in line or name in line
