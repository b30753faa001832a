"""Feedback on stderr (blis_fast.cli.feedback): progress bars only for a terminal and never
on stdout, --quiet, notices through logging, Ctrl-C -> one line and exit 130 (also when
typer swallows the interrupt), no temporary or partial output file after an interrupt,
and the watchdog that ends a process whose main thread does not unwind.  In this process
except the watchdog (one small subprocess)."""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from blis_fast.cli import feedback
from blis_fast.config.outputs import atomic_write
from builders import ROOT, FakeTerminal, default_sigint, run_cli


@pytest.fixture
def terminal(monkeypatch):
    """A stand-in terminal for stderr (install it in the test body: pytest's capture swaps
    sys.stderr again between set-up and call); bars show at once."""
    monkeypatch.setenv("BLIS_FAST_PROGRESS_AFTER", "0")
    feedback.configure(quiet=False, verbose=0)
    yield FakeTerminal()
    feedback.configure(quiet=False, verbose=0)


def test_bar_draws_on_a_terminal_stderr_only(terminal, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stderr", terminal)
    with feedback.progress("sweeping", total=3, unit="runs") as bar:
        for _ in range(3):
            bar.advance()
        with feedback.progress("inner run") as inner:  # stacks under the outer bar
            inner.report("simulating", 5, 10, "requests")
    drawn = terminal.getvalue()
    assert "sweeping" in drawn and "runs" in drawn and "simulating" in drawn
    assert capsys.readouterr().out == ""


def test_no_bar_when_quiet_or_not_a_terminal(terminal, monkeypatch):
    monkeypatch.setattr(sys, "stderr", terminal)
    feedback.configure(quiet=True)
    with feedback.progress("sweeping", total=3) as bar:
        bar.advance()
    assert terminal.getvalue() == ""
    feedback.configure(quiet=False)
    plain = io.StringIO()  # a pipe or a file: isatty() is False
    monkeypatch.setattr(sys, "stderr", plain)
    with feedback.progress("sweeping", total=3) as bar:
        bar.advance()
    assert plain.getvalue() == ""


def test_notices_follow_quiet_and_verbose(terminal, monkeypatch):
    monkeypatch.setattr(sys, "stderr", terminal)
    log = logging.getLogger("blis_fast.test")
    feedback.configure(quiet=False, verbose=0)
    log.info("hidden by default")
    log.warning("a warning")
    feedback.configure(verbose=1)
    log.info("shown with -v")
    feedback.configure(quiet=True)
    log.warning("hidden by --quiet")
    assert terminal.getvalue().splitlines() == ["a warning", "shown with -v"]


def test_interrupt_in_a_command_exits_130_with_one_line(monkeypatch, capsys, tmp_path):
    """Inside the command typer turns KeyboardInterrupt into its exit code 130 (which was
    dropped); the results file of the interrupted run is not created."""
    import blis_fast.run.api as api

    def interrupted_run(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "run_config", interrupted_run)
    code, out, err = run_cli(capsys, "run", "--num-requests", "5", "--results-path", tmp_path / "r.json")
    assert code == 130
    assert out == ""
    assert err.strip().splitlines() == [feedback.INTERRUPTED_LINE]
    assert list(tmp_path.iterdir()) == []


def test_interrupted_write_leaves_the_target_and_no_temporary(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("before")

    def write(tmp):
        tmp.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, write, "--results-path")
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    assert target.read_text() == "before"


def test_remove_pending_deletes_unfinished_temporaries(tmp_path):
    """What the watchdog calls before ending the process from another thread."""
    from blis_fast.config import outputs

    seen = []

    def write(tmp):
        tmp.write_text("half")
        seen.append(tmp)
        outputs.remove_pending()  # as if the watchdog fired now
        assert not tmp.exists()
        raise OSError("gone")

    with pytest.raises(Exception):
        atomic_write(tmp_path / "out.parquet", write, "--per-request-out")
    assert seen and list(tmp_path.iterdir()) == []


def test_an_interrupt_as_the_temporary_file_is_created_leaves_nothing(tmp_path, monkeypatch):
    """The temporary file is registered before it exists: a Ctrl-C that lands the moment
    it is created (CI once caught one there) still has it removed."""
    from blis_fast.config import outputs

    real_open = os.open

    def open_then_interrupt(path, flags, mode=0o777):
        os.close(real_open(path, flags, mode))
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs.os, "open", open_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "out.json", lambda tmp: tmp.write_text("x"), "--results-path")
    monkeypatch.undo()
    assert len(list(tmp_path.iterdir())) == 1  # the interrupt left it: the exit path removes it
    outputs.remove_pending()
    assert list(tmp_path.iterdir()) == []


def test_watchdog_ends_a_process_that_does_not_unwind(tmp_path):
    """A main thread that swallows KeyboardInterrupt (or sits in a long C call) is ended
    by the watchdog: one line, exit 130, the pending temporary file removed."""
    tmp = tmp_path / ".out.json.tmp"
    code = textwrap.dedent(f"""
        import os, signal, sys, time
        from pathlib import Path
        from blis_fast.cli import feedback
        from blis_fast.config import outputs
        tmp = Path({str(tmp)!r})
        tmp.write_text("half")
        outputs._pending.add(tmp)
        with feedback.interrupt_guard(grace_s=0.2):
            sent = False
            while True:
                try:
                    if not sent:
                        sent = True
                        os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(0.05)
                except KeyboardInterrupt:
                    pass  # never unwinds
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=str(ROOT),
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=default_sigint)
    assert p.returncode == 130, p.stderr
    assert p.stderr.strip().splitlines() == [feedback.INTERRUPTED_LINE]
    assert not tmp.exists()


def test_a_command_saving_on_interrupt_gets_its_longer_grace(tmp_path):
    """Inside ``saving_on_interrupt`` the watchdog waits the longer grace: a main thread
    that takes longer than GRACE_S to write its partial results still ends on its own."""
    saved = tmp_path / "partial.txt"
    code = textwrap.dedent(f"""
        import os, signal, time
        from pathlib import Path
        from blis_fast.cli import feedback
        with feedback.interrupt_guard(grace_s=0.1), feedback.saving_on_interrupt(30):
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(30)
            except KeyboardInterrupt:
                time.sleep(0.6)  # (writing what it has: longer than the 0.1 s grace)
                Path({str(saved)!r}).write_text("saved")
                raise SystemExit(130)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=str(ROOT),
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=default_sigint)
    assert p.returncode == 130, p.stderr
    assert saved.read_text() == "saved" and p.stderr == ""


def test_guard_is_a_no_op_outside_the_main_thread():
    import threading

    done = []

    def body():
        with feedback.interrupt_guard():
            done.append(signal.getsignal(signal.SIGINT))

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert done


@pytest.mark.parametrize("grace_s,unwinds", [(5.0, True), (0.2, False)])
def test_sigterm_ends_a_command_like_ctrl_c_with_143(grace_s, unwinds):
    """SIGTERM (timeout, systemd, Kubernetes) raises KeyboardInterrupt in the main thread
    under the guard: one ``terminated`` line and exit 143, whether the main thread unwinds
    (``interrupted()``) or not (the watchdog ends the process)."""
    code = textwrap.dedent(f"""
        import os, signal, time
        from blis_fast.cli import feedback
        with feedback.interrupt_guard(grace_s={grace_s}):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(30)
            except KeyboardInterrupt:
                if {unwinds}:
                    feedback.interrupted()
                while True:
                    time.sleep(0.05)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=str(ROOT),
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == feedback.EXIT_TERMINATED == 143, p.stderr
    assert p.stderr.strip().splitlines() == [feedback.TERMINATED_LINE]
