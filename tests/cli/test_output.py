"""What ``blis-fast run`` prints (blis_fast.cli.output): the human summary on a terminal
(tables of latency, instances up to 8 or with --per-instance, SLO classes, anomalies,
fitness; rounded for reading), the summary JSON unchanged with --json or when stdout is
not a terminal.  In this process, stdout replaced by a stand-in terminal."""

from __future__ import annotations

import json
import re
import sys

import pytest

from blis_fast.cli import main
from blis_fast.cli.output import count, ms, pct, rate
from builders import FakeTerminal


def run_on_terminal(monkeypatch, capsys, *args) -> str:
    capsys.readouterr()
    term = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", term)  # (in the test body: pytest swaps stdout between phases)
    monkeypatch.setenv("COLUMNS", "160")
    try:
        main(["run", *map(str, args)])
    except SystemExit as exc:
        assert exc.code in (0, None), capsys.readouterr().err
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", term.getvalue())  # (colours)


def test_terminal_gets_the_human_summary(monkeypatch, capsys):
    out = run_on_terminal(monkeypatch, capsys, "--num-requests", "40", "--rate", "4", "--num-instances", "3",
                          "--fitness-weights", "throughput:1", "--objectives", "ttft_p99_ms:min:200")
    assert not out.lstrip().startswith("{")
    for needle in ("llama-3.1-8b-instruct on H100 TP1", "blackbox", "latency (ms)", "TTFT", "E2E", "p99",
                   "completed 40/40", "instance_2", "anomalies: none", "fitness", "evaluation score",
                   "ttft_p99_ms"):
        assert needle in out, needle


def test_many_instances_are_listed_only_when_asked(monkeypatch, capsys):
    args = ("--num-requests", "20", "--rate", "20", "--num-instances", "10")
    assert "instance_9" not in run_on_terminal(monkeypatch, capsys, *args)
    assert "instance_9" in run_on_terminal(monkeypatch, capsys, *args, "--per-instance")


def test_slo_classes_table(monkeypatch, capsys):
    out = run_on_terminal(monkeypatch, capsys, "--workload-spec", "configs/workloads/agentic.yaml")
    assert "SLO classes" in out and "agent" in out and "attained" in out


def test_json_flag_and_pipes_give_the_json_unchanged(monkeypatch, capsys):
    term = run_on_terminal(monkeypatch, capsys, "--num-requests", "10", "--json")
    monkeypatch.undo()
    code = None
    try:
        main(["run", "--num-requests", "10"])
    except SystemExit as exc:
        code = exc.code
    piped = capsys.readouterr().out  # capsys: not a terminal
    assert code in (0, None)
    assert json.loads(term) == json.loads(piped)
    assert list(json.loads(piped)) == ["cluster", "instances", "run", "adequacy"]


@pytest.mark.parametrize("fmt,value,text", [
    (ms, 0.52349, "0.523"), (ms, 32.93, "32.9"), (ms, 5102.150000000001, "5,102"), (ms, None, "-"),
    (ms, float("nan"), "-"), (pct, 0.14555, "14.6%"), (rate, 1.9305, "1.93"), (rate, 1561.3, "1,561"),
    (count, 29205, "29,205"),
])
def test_rounding_for_reading(fmt, value, text):
    assert fmt(value) == text


def test_headroom_and_step_occupancy_are_labelled(monkeypatch, capsys):
    out = run_on_terminal(monkeypatch, capsys, "--num-requests", "40", "--rate", "4", "--num-instances", "2")
    line = next(x for x in out.splitlines() if x.startswith("step occupancy:"))
    assert "token budget" in line and "batch slots" in line and "of the time" in line
    assert "busy " not in out  # step occupancy is no longer shown as "busy" (utilization)
    assert all(h in out for h in ("budget", "slots", "stepping"))


def test_evaluation_line_shows_each_value_beside_its_score(monkeypatch, capsys):
    out = run_on_terminal(monkeypatch, capsys, "--num-requests", "40", "--rate", "4", "--objectives",
                          "ttft_p99_ms:min:1,slo_attainment:max,responses_per_sec")
    line = next(x for x in out.splitlines() if x.startswith("evaluation score"))
    assert re.search(r"ttft_p99_ms [0-9.,]+ ms -> 0\.\d{3}", line), line
    assert re.search(r"slo_attainment no targets -> 1\.000", line), line  # the default workload sets none
    assert re.search(r"responses_per_sec [0-9.]+ req/s -> 0\.\d{3}", line), line
    out = run_on_terminal(monkeypatch, capsys, "--workload-spec", "configs/workloads/chat.yaml", "--objectives",
                          "slo_attainment:max")
    assert re.search(r"slo_attainment \d+\.\d% -> [01]\.\d{3}", out), out


def test_classes_without_targets_read_no_targets(monkeypatch, capsys, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("seed: 3\nrate: 4\nnum_requests: 30\nslo_classes: {fast: {ttft_ms: 500}, bulk: {}}\n"
                    "clients:\n  - {name: a, slo_class: fast, rate_fraction: 0.5, profile: chat}\n"
                    "  - {name: b, slo_class: bulk, rate_fraction: 0.5, profile: chat}\n")
    out = run_on_terminal(monkeypatch, capsys, "--workload-spec", spec)
    row = next(x for x in out.splitlines() if x.startswith("bulk"))
    assert "no targets" in row
    assert "no targets" not in next(x for x in out.splitlines() if x.startswith("fast "))
