"""Shared helpers of the hardening suite: run the CLI in this process or in a fresh one
(with its peak memory), and the assertions every surface shares -- exit 2 with one
``error: <field>: <message>`` line, or a valid run; inputs unchanged on disk; no warnings."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from blis_fast.cli import main

MAX_LINE = 1000  # an error line is at most this long (cli.MAX_ERROR_CHARS + "error: ")


def cli_in_process(*args) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``blis-fast ARGS`` run by ``main`` in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return code, out.getvalue(), err.getvalue()


# Linux copies the parent's RSS high-water mark into a forked child and keeps it across exec,
# so a child forked from a large pytest process reports pytest's size as its own ru_maxrss.
# A small launcher process (fresh after its own exec) forks the measured process instead and
# reports that grandchild's rusage, which is then its true peak.
_LAUNCHER = r"""
import os, resource, subprocess, sys, time
report, timeout, address_space = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
def limit():
    if address_space:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
p = subprocess.Popen(sys.argv[4:], preexec_fn=limit)
deadline = time.monotonic() + timeout
timed_out = False
while True:
    pid, status, ru = os.wait4(p.pid, os.WNOHANG)
    if pid:
        break
    if time.monotonic() > deadline:
        p.kill()
        _, status, ru = os.wait4(p.pid, 0)
        timed_out = True
        break
    time.sleep(0.02)
with open(report, "w") as f:
    f.write(f"{os.waitstatus_to_exitcode(status)} {ru.ru_maxrss} {int(timed_out)}")
"""


def cli_subprocess(*args, timeout: float = 600, env: dict | None = None,
                   address_space: int | None = 16 * 2**30) -> tuple[int, str, str, float, float]:
    """(exit code, stdout, stderr, peak RSS in MiB, seconds) of ``python -m blis_fast.cli
    ARGS`` in a fresh process; ``address_space`` caps its virtual memory (a safety net so
    a regression cannot exhaust a shared machine)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report"
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", _LAUNCHER, str(report), str(timeout), str(address_space or 0),
                        sys.executable, "-m", "blis_fast.cli", *[str(a) for a in args]],
                       stdout=out, stderr=err, env=env, check=True)
        seconds = time.monotonic() - t0
        code, maxrss_kib, timed_out = (int(x) for x in report.read_text().split())
        if timed_out:
            raise TimeoutError(f"blis-fast {' '.join(map(str, args))[:200]} ran longer than {timeout} s")
        out.seek(0)
        err.seek(0)
        return code, out.read().decode(), err.read().decode(), maxrss_kib / 1024, seconds


def assert_clean_error(code: int, out: str, err: str, needles=()) -> str:
    """Exit 2, nothing on stdout, exactly one ``error: <field>: <message>`` line on stderr
    (no traceback, no warning before it) containing every needle; returns the line."""
    assert code == 2, (code, out[-300:], err[-2000:])
    assert out == "", out[-300:]
    assert err.endswith("\n") and err.count("\n") == 1, err[-2000:]
    line = err.rstrip("\n")
    assert line.startswith("error: "), line
    assert len(line) <= MAX_LINE + 10, len(line)
    field, sep, message = line[len("error: "):].partition(": ")
    assert sep and field and message, line
    assert "Traceback" not in err and "Warning" not in err, line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def assert_ok_or_clean_error(code: int, out: str, err: str) -> str:
    """Either a valid run (exit 0, JSON on stdout, nothing on stderr but the one warning
    line of a run that is not adequate -- too short, saturated, unfinished: the JSON's
    ``adequacy``) or a clean error."""
    if code == 0:
        summary = json.loads(out)
        verdict = summary.get("adequacy", {}).get("verdict", "ok") if isinstance(summary, dict) else "ok"
        if verdict == "ok":
            assert err == "", err[-2000:]
        else:
            assert err.startswith("blis-fast: warning: ") and err.count("\n") == 1, err[-2000:]
        return "ok"
    return assert_clean_error(code, out, err)


def digest(*paths) -> dict:
    """sha256 and mtime of each file (to show inputs were not touched)."""
    out = {}
    for p in paths:
        p = Path(p)
        out[str(p)] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) if p.exists() else None
    return out


@contextlib.contextmanager
def no_warnings():
    """Fail if anything inside warns."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert not caught, [str(w.message) for w in caught]


# a 400-byte YAML alias bomb: 9 levels of 9 aliases -> 9^9 (387 million) strings when expanded
ALIAS_BOMB = "".join(
    [f'a0: &a0 ["x","x","x","x","x","x","x","x","x"]\n']
    + [f"a{k}: &a{k} [" + ",".join([f"*a{k - 1}"] * 9) + "]\n" for k in range(1, 9)]
)
