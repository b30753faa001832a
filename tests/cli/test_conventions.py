"""The conventions people expect of a command-line tool and a Python package: --version,
help when run with no arguments, grouped help with defaults, shell completion, usage
errors as one line with exit 2, BLIS's current flag names, LICENSE / NOTICE / py.typed
shipped.  In this process (``python -m blis_fast`` runs in tests/cli/test_terminal.py)."""

from __future__ import annotations

import tomllib

import pytest

import blis_fast
from builders import ROOT, assert_one_error_line, run_cli


def test_version(capsys):
    code, out, err = run_cli(capsys, "--version")
    assert code == 0 and out.strip() == f"blis-fast {blis_fast.__version__}"


def test_no_arguments_prints_the_help(capsys):
    code, out, err = run_cli(capsys)
    assert code == 0 and err == ""
    assert out.startswith("Usage:") and "Commands:" in out and "run" in out and "--version" in out


def test_completion_is_offered(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and "--install-completion" in out and "--show-completion" in out


def test_run_help_is_grouped_with_defaults(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli(capsys, "run", "--help")
    assert code == 0
    panels = ["Model & hardware:", "Engine & cluster:", "KV tiers:", "Workload:", "Policies:", "Simulation:",
              "Output:"]
    positions = [out.index(p) for p in panels]
    assert positions == sorted(positions)
    engine = out[out.index("Engine & cluster:"):out.index("Workload:")]
    assert "--max-num-running-reqs, --max-num-seqs" in engine and "[default: 256]" in engine
    assert "--results-path, --metrics-path" in out[out.index("Output:"):]


def test_usage_error_is_one_line(capsys):
    code, out, err = run_cli(capsys, "run", "--no-such-flag")
    assert code == 2 and out == ""
    assert_one_error_line(err, ["--no-such-flag"])


def test_blis_current_names_are_accepted(capsys, tmp_path):
    metrics = tmp_path / "m.json"
    code, _, err = run_cli(capsys, "run", "--num-requests", "3", "--max-num-seqs", "8",
                           "--max-num-batched-tokens", "512", "--metrics-path", metrics)
    assert code == 0, err
    import json

    doc = json.loads(metrics.read_text())
    assert doc["run"]["config"]["engine"]["max_num_seqs"] == 8
    assert doc["run"]["config"]["engine"]["max_num_batched_tokens"] == 512


@pytest.mark.parametrize("name", ["LICENSE", "NOTICE"])
def test_license_files_are_shipped(name):
    text = (ROOT / name).read_text()
    assert "Apache License" in text
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert name in meta["project"]["license-files"]


def test_package_is_typed():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["blis_fast"]
    assert (ROOT / "blis_fast" / "py.typed").is_file()
    assert "pandas" in meta["project"]["optional-dependencies"]
    assert any(d.startswith("rich") for d in meta["project"]["dependencies"])
