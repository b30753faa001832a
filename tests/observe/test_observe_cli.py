"""``blis-fast observe`` from the command line: a run's summary, bad input as one line with
exit 2 (before any request is sent), the serve extra missing, and Ctrl-C writing what it
has (exit 130) -- in process, with a fresh-process twin marked slow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from blis_fast.cli import feedback
from blis_fast.workload.formats.observed import read_observed
from fake_openai_server import MODEL, FakeServer
from hardening.hardening_helpers import assert_clean_error, cli_in_process, digest
from test_observe import SPEC, write_trace_csv

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server():
    with FakeServer() as srv:
        yield srv


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SPEC)
    return path


def test_observe_prints_the_summary_and_writes_the_recording(server, spec, tmp_path):
    out = tmp_path / "o.parquet"
    code, stdout, stderr = cli_in_process("observe", "--endpoint", server.url, "--workload-spec", spec, "--out", out,
                                          "--time-scale", "100", "--num-requests", "5", "--server-flag", "--tp 2",
                                          "--json")
    assert code == 0
    assert stderr == ("blis-fast: warning: the server runs at time scale 1 and the observer at 100 (--time-scale): "
                      "recorded times are off by their ratio\n")  # (the fake server reports time scale 1)
    summary = json.loads(stdout)
    assert (summary["requests"], summary["sent"], summary["ok"], summary["errors"]) == (5, 5, 5, {})
    assert summary["out"] == str(out) and summary["ttft_ms"]["p50"] > 0 and summary["e2e_ms"]["p99"] > 0
    _, header, obs = read_observed(out)
    assert header["observed"]["model"] == MODEL and header["observed"]["server_flags"] == ["--tp 2"]
    assert header["observed"]["interrupted"] is False and len(obs) == 5


def test_a_trace_is_observed_and_seed_is_refused_with_it(server, tmp_path):
    trace = write_trace_csv(tmp_path / "t.csv", [(0, 5, 2), (100, 6, 2)])
    trace.write_text("# blis-fast-trace\n" + trace.read_text())
    out = tmp_path / "o.parquet"
    code, stdout, stderr = cli_in_process("observe", "--endpoint", server.url, "--trace", trace, "--out", out, "--json")
    assert code == 0 and json.loads(stdout)["ok"] == 2 and stderr == ""
    assert_clean_error(*cli_in_process("observe", "--endpoint", server.url, "--trace", trace, "--out", out,
                                       "--seed", "3"), ["--seed"])


BAD = [
    (["--endpoint", "ftp://127.0.0.1:1"], "--endpoint"),
    (["--endpoint", "127.0.0.1:8000"], "--endpoint"),
    (["--endpoint", "http://user:pw@127.0.0.1:8000"], "--endpoint"),
    (["--endpoint", "http://127.0.0.1:99999"], "--endpoint"),
    (["--endpoint", "http://127.0.0.1:8000/?q=1"], "--endpoint"),
    (["--concurrency", "0"], "--concurrency"),
    (["--concurrency", "10001"], "--concurrency"),
    (["--concurrency", "1.5"], "--concurrency"),
    (["--timeout-s", "0"], "--timeout-s"),
    (["--timeout-s", "3601"], "--timeout-s"),
    (["--timeout-s", "nan"], "--timeout-s"),
    (["--time-scale", "0"], "--time-scale"),
    (["--time-scale", "1001"], "--time-scale"),
    (["--time-scale", "-1"], "--time-scale"),
    (["--num-requests", "0"], "--num-requests"),
    (["--seed", "-1"], "--seed"),
    (["--api", "embeddings"], "--api"),
    (["--model", "x" * 300], "--model"),
]


@pytest.mark.parametrize("extra, field", BAD, ids=[f"{e[0]}={e[1][:12]}" for e, _ in BAD])
def test_bad_flags_are_one_line_before_anything_is_sent(server, spec, tmp_path, extra, field):
    args = {"--endpoint": server.url, "--workload-spec": spec, "--out": tmp_path / "o.parquet"}
    args.update(dict(zip(extra[::2], extra[1::2])))
    before = len(server.bodies)
    line = assert_clean_error(*cli_in_process("observe", *[x for kv in args.items() for x in kv]))
    assert line.startswith(f"error: {field}: "), line
    assert len(server.bodies) == before and not (tmp_path / "o.parquet").exists()


def test_bad_inputs_and_outputs(server, spec, tmp_path):
    base = ["observe", "--endpoint", server.url]
    out = tmp_path / "o.parquet"
    assert_clean_error(*cli_in_process(*base, "--out", out), ["--workload-spec", "exactly one"])
    assert_clean_error(*cli_in_process(*base, "--workload-spec", spec, "--trace", spec, "--out", out),
                       ["exactly one"])
    assert_clean_error(*cli_in_process(*base, "--workload-spec", spec, "--out", tmp_path / "o.csv"),
                       ["--out", "Parquet"])
    assert_clean_error(*cli_in_process(*base, "--workload-spec", spec, "--out", tmp_path / "missing" / "o.parquet"),
                       ["--out"])
    bad_spec = tmp_path / "bad.yaml"
    bad_spec.write_text("clients: [{name: a, rate: -1}]\n")
    assert_clean_error(*cli_in_process(*base, "--workload-spec", bad_spec, "--out", out))
    trace = tmp_path / "t.parquet"
    write_trace_csv(tmp_path / "t.csv", [(0, 5, 2)])
    assert cli_in_process("workload", "generate", "--spec", spec, "--out", trace)[0] == 0
    kept = digest(trace)
    assert_clean_error(*cli_in_process(*base, "--trace", trace, "--out", trace), ["--out"])  # never over an input
    assert digest(trace) == kept
    assert_clean_error(*cli_in_process(*base, "--trace", tmp_path / "t.csv", "--out", out), ["--trace", "rich trace"])
    assert_clean_error(*cli_in_process(*base, "--trace", tmp_path / "none.parquet", "--out", out), ["not found"])
    assert not out.exists()


def test_an_unreachable_endpoint_or_an_unserved_model_is_one_line(server, spec, tmp_path):
    with FakeServer() as gone:
        url = gone.url
    out = tmp_path / "o.parquet"
    line = assert_clean_error(*cli_in_process("observe", "--endpoint", url, "--workload-spec", spec, "--out", out),
                              ["--endpoint", "cannot reach"])
    assert url in line
    before = len(server.bodies)
    assert_clean_error(*cli_in_process("observe", "--endpoint", server.url, "--workload-spec", spec, "--out", out,
                                       "--model", "other"), ["--model", "'other' is not served"])
    assert len(server.bodies) == before and not out.exists()


def test_the_serve_extra_missing_is_one_line(spec, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "httpx", None)  # (import httpx now raises ImportError)
    code, out, err = cli_in_process("observe", "--endpoint", "http://127.0.0.1:9", "--workload-spec", spec,
                                    "--out", tmp_path / "o.parquet")
    assert (code, out) == (2, "")
    assert err == 'error: blis-fast observe needs the serve extra: pip install "blis-fast[serve]"\n'


def interrupt_trace(tmp_path: Path) -> Path:
    # row 2 streams slowly (prompt length 9): in flight at the interrupt; row 3's prompt length
    # (99) makes the fake server press Ctrl-C (in process); rows 4..6 are due seconds later
    rows = [(0, 5, 2), (0, 6, 2), (0, 9, 2), (0, 99, 2), (5_000_000, 7, 2), (6_000_000, 8, 2), (7_000_000, 10, 2)]
    trace = write_trace_csv(tmp_path / "t.csv", rows)
    trace.write_text("# blis-fast-trace\n" + trace.read_text())
    return trace


def check_interrupted_recording(out: Path) -> None:
    _, header, obs = read_observed(out)
    assert header["observed"]["interrupted"] is True
    assert obs["send_us"][2] >= 0 and obs.error[2].startswith("interrupted after ")  # (the slow stream)
    assert obs["send_us"][3] >= 0
    assert list(obs["send_us"][4:]) == [-1, -1, -1] and list(obs["status"][4:]) == [0, 0, 0]
    assert obs.error[4:] == ["not sent"] * 3


def test_ctrl_c_writes_what_it_has_and_exits_130(tmp_path):
    out = tmp_path / "o.parquet"
    with FakeServer({9: "slow", 99: "interrupt"}) as srv:
        code, stdout, stderr = cli_in_process("observe", "--endpoint", srv.url, "--trace", interrupt_trace(tmp_path),
                                              "--out", out)
    assert (code, stdout) == (130, "")
    assert stderr.strip().splitlines() == [feedback.INTERRUPTED_LINE]
    check_interrupted_recording(out)


@pytest.mark.slow
def test_sigint_to_a_fresh_process_writes_what_it_has(tmp_path):
    out = tmp_path / "o.parquet"
    with FakeServer({9: "slow"}) as srv:
        proc = subprocess.Popen([sys.executable, "-m", "blis_fast.cli", "observe", "--endpoint", srv.url, "--trace",
                                 interrupt_trace(tmp_path), "--out", out], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
        deadline = time.monotonic() + 120
        while len(srv.bodies) < 4:  # the first four are sent (one streams slowly); the rest are due seconds later
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.decode().strip().splitlines()[-1] == feedback.INTERRUPTED_LINE
    check_interrupted_recording(out)


def test_a_progress_bar_on_a_terminal_and_none_with_quiet(server, spec, tmp_path, monkeypatch):
    from blis_fast.cli import main
    from builders import FakeTerminal

    monkeypatch.setenv("BLIS_FAST_PROGRESS_AFTER", "0")
    drawn = {}
    for quiet in (False, True):
        terminal = FakeTerminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        main(["observe", "--endpoint", server.url, "--workload-spec", str(spec), "--out",
              str(tmp_path / f"o{quiet}.parquet"), "--time-scale", "100", "--num-requests", "4"]
             + (["--quiet"] if quiet else []))  # (returns: exit code 0)
        drawn[quiet] = terminal.getvalue()
    assert "observing" in drawn[False] and "requests" in drawn[False]
    assert drawn[True] == ""


def test_the_human_summary():
    from blis_fast.cli.observe import _human

    text = _human({"out": "o.parquet", "requests": 3, "sent": 2, "ok": 1, "errors": {"timeout": 1, "not_sent": 1},
                   "timed_out": 1, "ttft_ms": {"p50": 12.5, "p99": 20.0}, "e2e_ms": {"p50": None, "p99": None}})
    assert text.splitlines() == ["observed 2 of 3 requests -> o.parquet", "  ok 1, errors: timeout 1, not_sent 1, "
                                 "timed out 1", "  TTFT p50 12.5 ms, p99 20.0 ms (observed)"]
