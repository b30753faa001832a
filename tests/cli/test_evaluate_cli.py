"""blis-fast evaluate: Parquet rows, a ranking on stdout, exit 0 with failing candidates,
one-line errors for bad flags, inputs never overwritten; the shipped example runs."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from builders import ROOT, expect_cli_error, run_cli, write

SCENARIOS = {
    "objectives": "slo_attainment:max,ttft_p99_ms:min",
    "budget": {"max_wall_s": 60},
    "scenarios": [
        {"name": "a", "config": {"num_instances": 2, "workload": "chatbot", "rate": 60, "num_requests": 100}, "seed": 1,
         "slo_classes": {"chat": {"ttft_ms": 300}}},
        {"name": "b", "config": {"num_instances": 2, "workload": "chatbot", "rate": 200, "num_requests": 100}},
    ],
}


@pytest.fixture
def files(tmp_path):
    pol = tmp_path / "pol"
    pol.mkdir()
    write(pol, "ll.yaml", "routing: least-loaded\n")
    write(pol, "busiest.yaml", "routing: always-busiest\n")
    write(pol, "typo.yaml", "routing: {type: weighted, params: {scorers: {queue-lenght: 1}}}\n")
    write(pol, "notes.txt", "not a candidate")
    return pol, write(tmp_path, "scenarios.yaml", SCENARIOS)


def test_evaluate_writes_rows_and_ranks(capsys, tmp_path, files):
    pol, scen = files
    out = tmp_path / "res.parquet"
    code, stdout, err = run_cli(capsys, "evaluate", "--policies", pol, "--scenarios", scen, "--out", out,
                                "--workers", "2", "--max-events", "10000000")
    assert code == 0, err
    rows = pq.read_table(out).to_pylist()
    assert sorted((r["candidate"], r["scenario"]) for r in rows) == sorted(
        (c, s) for c in ("ll", "busiest", "typo") for s in ("a", "b"))
    typo = [r for r in rows if r["candidate"] == "typo"]
    assert all(r["status"] == "invalid_policy" and "queue-lenght" in r["message"] for r in typo)
    lines = stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["rank", "candidate", "mean"]
    ranked = [ln.split()[1] for ln in lines[1:]]
    assert ranked[-1] == "typo" and "invalid_policy" in lines[-1]
    assert ranked.index("ll") < ranked.index("busiest")


@pytest.mark.parametrize("args,needles", [
    (["--workers", "0"], ["--workers"]),
    (["--workers", "2", "--dask-scheduler", "tcp://127.0.0.1:1"], ["--workers", "--dask-scheduler"]),
    (["--max-simulated-s", "-1"], ["--max-simulated-s"]),
    (["--objectives", "slo_attainment:sideways"], ["--objectives"]),
])
def test_bad_flags(capsys, tmp_path, files, args, needles):
    pol, scen = files
    expect_cli_error(capsys, "evaluate", "--policies", pol, "--scenarios", scen, "--out", tmp_path / "r.parquet",
                     *args, needles=needles)
    assert not (tmp_path / "r.parquet").exists()


def test_inputs_are_never_overwritten(capsys, tmp_path, files):
    pol, scen = files
    before = scen.read_bytes()
    expect_cli_error(capsys, "evaluate", "--policies", pol, "--scenarios", scen, "--out", scen,
                     needles=["--out", "input"])
    assert scen.read_bytes() == before
    expect_cli_error(capsys, "evaluate", "--policies", tmp_path / "nope", "--scenarios", scen, "--out",
                     tmp_path / "r.parquet", needles=["--policies", "nope"])


def test_shipped_example_files_are_valid():
    from blis_fast.batch.candidates import candidate_files, load_candidate
    from blis_fast.batch.scenarios import load_scenarios_file

    scenarios, objectives, budget = load_scenarios_file(ROOT / "configs" / "evaluate" / "scenarios.yaml")
    assert len(scenarios) >= 2 and objectives and budget
    cands = {f.stem: load_candidate(f, f.stem) for f in candidate_files([ROOT / "configs" / "evaluate" / "candidates"])}
    assert cands["typo"].error is not None  # the deliberately malformed example
    assert all(c.error is None for name, c in cands.items() if name != "typo")


@pytest.mark.parametrize("scenario,needles", [
    ({"name": "a", "config": "missing.yaml"}, ["scenarios[0].config", "missing.yaml"]),
    ({"name": "a", "config": {"num_requests": 20}, "workload_spec": "nope/spec.yaml"}, ["scenario a: workload_spec"]),
    ({"name": "a", "config": {"num_requests": 20}, "slo_classes": {"x": {"ttft_ms": -1}}},
     ["scenarios[0].slo_classes.x.ttft_ms"]),
    ({"name": "a", "config": {"num_requests": 20}, "objectives": "no_such_metric:max"}, ["no_such_metric"]),
])
def test_bad_scenarios_name_the_key(capsys, tmp_path, files, scenario, needles):
    pol, _ = files
    scen = write(tmp_path, "bad.yaml", {"scenarios": [scenario]})
    expect_cli_error(capsys, "evaluate", "--policies", pol, "--scenarios", scen, "--out", tmp_path / "r.parquet",
                     needles=needles)


def test_progress_bar_on_a_terminal(monkeypatch, capsys, tmp_path, files):
    import sys

    from builders import FakeTerminal

    from blis_fast.cli import feedback

    pol, scen = files
    monkeypatch.setenv("BLIS_FAST_PROGRESS_AFTER", "0")
    term = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", term)
    try:
        code, out, _ = run_cli(capsys, "evaluate", "--policies", pol, "--scenarios", scen, "--out",
                               tmp_path / "r.parquet", "--workers", "1")
    finally:
        feedback.configure(quiet=False, verbose=0)
    assert code == 0
    assert "evaluating" in term.getvalue() and "runs" in term.getvalue()
    assert "evaluating" not in out  # the bar is on stderr; stdout is the ranking
