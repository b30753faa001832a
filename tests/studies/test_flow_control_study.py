"""The flow-control study's shipped examples (configs/examples/flow-control/,
docs/flow-control.md): the M/M/4 script's free-slot runs are the FCFS c-server queue
request by request and its Erlang C is the textbook's; the overload study's figures add
up and only the sheddable class is shed; every command of the page runs, made small; the
scripts refuse bad input in one line."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from blis_fast_kernels.schema import RequestState
from builders import ROOT, doc_commands, run_cli
from tests.hardening.hardening_helpers import assert_clean_error

FLOW = ROOT / "configs" / "examples" / "flow-control"


def script(name: str):
    """configs/examples/flow-control/<name>.py as a module."""
    spec = importlib.util.spec_from_file_location(f"flow_control_{name}", FLOW / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_erlang_c_is_the_textbook_formula():
    """c = 1 is M/M/1 (W = ρ / (μ − λ)); c = 2 at λ = 1, mean service 1: W = 1/3."""
    mgc = script("mgc")
    assert mgc.erlang_c_wait(1, 0.5, 1.0) == pytest.approx(0.5 / (1.0 - 0.5))
    assert mgc.erlang_c_wait(2, 1.0, 1.0) == pytest.approx(1 / 3)


def test_free_slot_with_one_slot_per_instance_is_the_fcfs_queue():
    """Every request's start is the recursion's (earliest-free server takes the next
    arrival), and requests do wait (the check is not vacuous)."""
    mgc = script("mgc")
    run = mgc.run_load(0.8, 3, 3000)
    assert run["exact"] and (run["wait"] > 0).sum() > 500
    # the recursion itself: 2 servers, arrivals 0, 0, 0 with services 5, 3, 1 -> starts 0, 0, 3
    starts = mgc.fcfs_starts(np.array([0, 0, 0]), np.array([5, 3, 1]), 2)
    assert starts.tolist() == [0, 0, 3]


def test_overload_figures_add_up_and_only_the_sheddable_class_is_shed():
    """A small overload: every request ends completed, timed out or shed; shedding hits
    only the batch class of overload-shed.yaml and never overload.yaml's."""
    study = script("study")
    for spec, flow in ((study.OVERLOAD, {"flow_control": "utilization"}), (study.SHEDDABLE, {"flow_control": "free-slot"})):
        result = study.run_one(spec, flow, 3000)
        m = study.metrics(result)
        assert m["completed"] + m["timed_out"] + m["shed"] == m["requests"] == 3000
        assert m["met_slo"] <= m["completed"]
        shed = result.state.reqs["state"] == RequestState.SHED
        if spec == study.OVERLOAD:
            assert m["shed"] == 0
        else:
            assert m["shed"] > 0
            batch = list(result.workload.names["slo_class"]).index("batch")
            assert (result.state.reqs["slo_class"][shed] == batch).all()


def test_the_page_commands_run_small(capsys, monkeypatch, tmp_path):
    """Every command of docs/flow-control.md runs as written, made small (500 requests
    per run, two seeds), its figure into a temporary directory."""
    pytest.importorskip("matplotlib")
    commands = doc_commands("flow-control.md")
    assert [c[:2] for c in commands] == [["blis-fast", "run"], ["python", "configs/examples/flow-control/study.py"],
                                         ["blis-fast", "run"], ["python", "configs/examples/flow-control/mgc.py"]]
    monkeypatch.chdir(ROOT)  # the page's paths are relative to the repository
    for k, command in enumerate(commands):
        args, it = [], iter(command[2:] if command[0] == "python" else command[1:])
        for a in it:
            if a in ("--plot", "--num-requests", "--seeds"):
                value = next(it)
                if a == "--plot":
                    args += [a, str(tmp_path / f"{k}-{value}")]
            else:
                args.append(a)
        if command[0] == "python":
            name = command[1].rsplit("/", 1)[1][:-3]
            script(name).main(args + ["--num-requests", "500"] + (["--seeds", "2"] if name == "mgc" else []))
            rows = capsys.readouterr().out.strip().splitlines()
            assert len(rows) == (2 + 2 if name == "mgc" else 2 + 2 + 6), rows
            if name == "mgc":
                assert all(r.endswith("| True |") for r in rows[2:])
        else:
            code, out, err = run_cli(capsys, *args, "--num-requests", "500")
            assert code == 0, (command, err)
        for a, value in zip(command, command[1:]):
            if a == "--plot":
                assert (tmp_path / f"{k}-{value}").is_file(), value


@pytest.mark.parametrize("name, args, needle", [
    ("mgc", ["--seeds", "0"], "--seeds: must be an integer in [1, 100]"),
    ("mgc", ["--num-requests", "1"], "--num-requests"),
    ("study", ["compare", "--num-requests", "0"], "--num-requests"),
    ("study", ["compare", "--jobs", "-1"], "--jobs"),
    ("study", ["compare", "--plot", "figure.pdf"], "--plot: must end in .png or .svg"),
    ("study", ["sweep"], "invalid choice"),
])
def test_the_scripts_refuse_bad_input_in_one_line(capsys, name, args, needle):
    """Before anything runs: one line, exit code 2."""
    with pytest.raises(SystemExit) as exc:
        script(name).main(args)
    out = capsys.readouterr()
    assert_clean_error(exc.value.code, out.out, out.err, [needle])
