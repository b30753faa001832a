"""``blis-fast`` as a person sees it at a terminal, in fresh processes whose stderr is a
pseudo-terminal (python's ``pty``) and whose stdout is a pipe: the compile notice and the
progress bar on stderr, clean JSON on stdout; Ctrl-C (SIGINT) in each phase -- start-up
imports, kernel compile, workload generation, the kernel, writing the output files --
ends the command with exit code 130, one line, no traceback, no output file.

All slow (fresh processes); the runs are as small as each phase allows."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from blis_fast.cli.feedback import INTERRUPTED_LINE
from builders import ROOT, default_sigint

pytestmark = pytest.mark.slow

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _env(**extra) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BLIS_FAST_PROGRESS_AFTER": "0", "COLUMNS": "120"}
    env.pop("NUMBA_DISABLE_JIT", None)
    env.update(extra)
    return env


def run_on_terminal(args, *, interrupt_when: str | None = None, env=None, python_flags=(), cwd=None,
                    timeout: float = 300) -> tuple[int, str, str, float | None]:
    """Run ``python -m blis_fast *args`` with stderr on a pseudo-terminal and stdout on a
    pipe; send SIGINT as soon as ``interrupt_when`` appears on stderr.  Returns (exit
    code, stdout, stderr without escape codes, seconds from the signal to the exit)."""
    import pty

    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, *python_flags, "-m", "blis_fast", *map(str, args)], stdout=subprocess.PIPE,
                         stderr=slave, stdin=subprocess.DEVNULL, env=env or _env(), cwd=cwd,
                         preexec_fn=default_sigint)
    os.close(slave)
    raw, sent = b"", None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.01)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    chunk = b""
                if not chunk:
                    break
                raw += chunk
            if sent is None and interrupt_when is not None and interrupt_when.encode() in raw:
                p.send_signal(signal.SIGINT)
                sent = time.monotonic()
            if not ready and p.poll() is not None:
                break
        out = p.communicate(timeout=max(deadline - time.monotonic(), 1))[0].decode()
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)
    lag = None if sent is None else time.monotonic() - sent
    return p.returncode, out, ANSI.sub("", raw.decode(errors="replace")), lag


def assert_interrupted(code: int, out: str, err: str, folder: Path | None = None) -> None:
    assert code == 130, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1].strip() == INTERRUPTED_LINE, err[-500:]
    assert out == ""
    if folder is not None:
        assert sorted(p.name for p in folder.iterdir()) == []  # no output, no temporary file


def test_piped_stdout_gets_clean_json_and_the_terminal_a_progress_bar():
    code, out, err, _ = run_on_terminal(["run", "--num-requests", "2000", "--rate", "50"])
    assert code == 0, err
    assert json.loads(out)["cluster"]["completed_requests"] == 2000
    assert "simulating" in err  # the bar's phases are drawn on the terminal ...
    assert "simulating" not in out  # ... and nothing of them reaches stdout


BIG_RUN = ["run", "--num-requests", "300000", "--rate", "2000", "--num-instances", "8"]


@pytest.mark.parametrize("phase", ["generating the workload", "simulating"])
def test_ctrl_c_during_a_run(phase, tmp_path):
    code, out, err, lag = run_on_terminal([*BIG_RUN, "--results-path", tmp_path / "r.json"], interrupt_when=phase)
    assert lag is not None, err[-2000:]
    assert_interrupted(code, out, err, tmp_path)


def test_ctrl_c_while_writing_the_outputs(tmp_path):
    args = ["run", "--num-requests", "30000", "--rate", "200", "--num-instances", "4",
            "--results-path", tmp_path / "r.json", "--per-request-out", tmp_path / "r.parquet"]
    code, out, err, lag = run_on_terminal(args, interrupt_when="writing")
    assert lag is not None, err[-2000:]
    assert_interrupted(code, out, err, tmp_path)


def test_ctrl_c_during_start_up_imports():
    """``-X importtime`` lists each module as it loads: the signal goes as soon as typer has
    loaded, while the config and numpy still load."""
    code, out, err, lag = run_on_terminal(BIG_RUN, interrupt_when="| typer", python_flags=("-X", "importtime"))
    assert lag is not None
    assert_interrupted(code, out, err)


def test_compile_notice_then_ctrl_c_during_the_compile(tmp_path):
    """A fresh kernel cache: the notice appears when numba starts compiling, and Ctrl-C
    then ends the command (in C code for long stretches: the watchdog's case)."""
    env = _env(NUMBA_CACHE_DIR=str(tmp_path / "cold-cache"), BLIS_FAST_KERNELS="jit")  # (compiled ones compile nothing)
    code, out, err, lag = run_on_terminal(["run", "--num-requests", "20"], interrupt_when="compiling kernels", env=env)
    assert lag is not None, err[-2000:]
    assert "blis-fast: compiling kernels" in err
    assert_interrupted(code, out, err)
