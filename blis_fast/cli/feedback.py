"""Feedback for people at a terminal -- on stderr only, never on stdout (stdout carries the
command's result, which scripts parse):

- ``configure(quiet, verbose)``: once per command.  Notices go through ``logging`` (the
  ``blis_fast`` logger: warnings by default, info with ``-v``, nothing but errors with
  ``--quiet``); progress bars are off with ``--quiet`` or when stderr is not a terminal.
- ``progress(description, total)``: a context giving a :class:`Bar` -- a rich progress bar
  for multi-run work (``bar.advance()`` per run) or one long run (``bar.report`` is the
  ``progress=`` callback of ``blis_fast.run.api.run_config``).  A bar appears only once
  its work has lasted ``show_after`` seconds (default 1 s, ``$BLIS_FAST_PROGRESS_AFTER``),
  so quick commands print nothing; it is erased when the work ends.  Bars opened while
  another is shown stack under it (a sweep's runs under the sweep).
- ``interrupt_guard()``: the ``blis-fast`` entry point's Ctrl-C and SIGTERM handling.
  Python raises KeyboardInterrupt in the main thread -- for SIGTERM (what ``timeout``,
  systemd and Kubernetes send) the guard's handler raises it too -- and temporary output
  files are removed as it unwinds (``blis_fast.config.outputs.atomic_write``), running
  policy programs killed (``blis_fast.batch.evaluate.load_candidates``);
  ``interrupted()`` then prints one line and exits with 130 (SIGINT) or 143 (SIGTERM).
  A watchdog thread covers the moments the main thread cannot react (inside a long C
  call such as LLVM compiling a kernel): if the process still runs
  ``GRACE_S`` after the signal, or at a second one, it prints the line, removes the
  temporary output files and ends the process (its policy programs' sandboxes die with
  it: blis_fast.batch.program).  A command that writes what it has on Ctrl-C (``blis-fast
  observe``) asks for a longer grace while it runs: ``saving_on_interrupt(grace_s)``.

Importing this module costs nothing (stdlib only; rich loads when a bar is first shown).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a command ended by Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM
INTERRUPTED_LINE = "blis-fast: interrupted"
TERMINATED_LINE = "blis-fast: terminated"
GRACE_S = 0.5  # how long the main thread has to unwind after Ctrl-C before the watchdog ends the process
DEFAULT_SHOW_AFTER_S = 1.0

logger = logging.getLogger("blis_fast")


class _Settings:
    """What the current command asked for (one command per process)."""

    quiet = False
    verbose = 0


_settings = _Settings()


# ----------------------------------------------------------------------------- notices (logging)


class _StderrHandler(logging.Handler):
    """Writes records to the *current* sys.stderr (pytest swaps it), through the progress
    display while one is shown so that a notice never tears a bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            # a notice may quote user text; (imported here: blis_fast.config loads numpy, and this
            # module is imported before anything heavy so that Ctrl-C is handled during start-up)
            from blis_fast.config.validate import escape_controls  # deferred: numpy (blis_fast.config)

            text = escape_controls(self.format(record), keep="\n")
            if not _display.print_above(text):
                sys.stderr.write(text + "\n")
                sys.stderr.flush()
        except Exception:  # noqa: BLE001 -- a notice must never break a command
            self.handleError(record)


_handler = _StderrHandler()
_handler.setFormatter(logging.Formatter("%(message)s"))


def configure(quiet: bool | None = None, verbose: int | None = None) -> None:
    """Set the command's feedback (None: leave as is): ``quiet`` drops notices and progress
    bars, ``verbose`` (1: info, 2: debug) shows more notices.  Notices are written to
    stderr as they are (``blis-fast: ...``)."""
    if quiet is not None:
        _settings.quiet = bool(quiet)
    if verbose is not None:
        _settings.verbose = int(verbose)
    v = _settings.verbose
    level = logging.ERROR if _settings.quiet else (logging.DEBUG if v >= 2 else logging.INFO if v else logging.WARNING)
    logger.setLevel(level)
    if _handler not in logger.handlers:
        logger.addHandler(_handler)
    logger.propagate = False


def quiet() -> bool:
    return _settings.quiet


def bars_enabled() -> bool:
    """Progress bars are drawn only for a person: stderr is a terminal and not --quiet."""
    if _settings.quiet:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stderr
        return False


def show_after_s() -> float:
    """Seconds of work before a bar appears ($BLIS_FAST_PROGRESS_AFTER, default 1)."""
    try:
        return max(float(os.environ.get("BLIS_FAST_PROGRESS_AFTER", DEFAULT_SHOW_AFTER_S)), 0.0)
    except ValueError:
        return DEFAULT_SHOW_AFTER_S


# ----------------------------------------------------------------------------- progress bars


class Bar:
    """One line of the progress display.  ``update``/``advance``/``report`` are cheap when
    nothing is shown (a few attribute writes), so callers need not check."""

    def __init__(self, description: str, total: float | None, unit: str):
        self.description = description
        self.total = total
        self.completed = 0.0
        self.unit = unit
        self.task_id = None  # set when the display shows this bar

    def update(self, completed: float | None = None, total: float | None = None,
               description: str | None = None) -> None:
        if completed is not None:
            self.completed = float(completed)
        if total is not None:
            self.total = float(total)
        if description is not None:
            self.description = description
        _display.refresh(self)

    def advance(self, n: float = 1) -> None:
        self.update(completed=self.completed + n)

    def report(self, phase: str, done: float, total: float | None, unit: str = "") -> None:
        """A ``progress=`` callback of ``blis_fast.run.api.run_config``: the run's phase
        ('generating the workload', 'simulating', ...), how far it is (``total`` None:
        unknown) and the unit counted."""
        self.total = None if total is None else float(total)
        self.unit = unit
        self.update(completed=done, description=phase)


class _Display:
    """The rich progress display shared by every open bar (created when the first bar has
    been open ``show_after_s()`` seconds, stopped when the last one closes)."""

    def __init__(self):
        self.lock = threading.RLock()
        self.bars: list[Bar] = []
        self.live = None  # rich.progress.Progress while shown
        self.timer: threading.Timer | None = None

    def add(self, bar: Bar) -> None:
        with self.lock:
            self.bars.append(bar)
            if self.live is not None:
                self._attach(bar)
            elif show_after_s() == 0:
                self.show()
            elif self.timer is None:
                self.timer = threading.Timer(show_after_s(), self.show)
                self.timer.daemon = True
                self.timer.start()

    def remove(self, bar: Bar) -> None:
        with self.lock:
            if bar in self.bars:
                self.bars.remove(bar)
            if self.live is not None and bar.task_id is not None:
                self.live.remove_task(bar.task_id)
            bar.task_id = None
            if not self.bars:
                self.stop()

    def show(self) -> None:
        with self.lock:
            if self.live is not None or not self.bars:
                return
            from rich.console import Console  # deferred: rich
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,  # deferred: rich
                                       TimeElapsedColumn, TimeRemainingColumn)

            self.live = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[unit]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                console=Console(file=sys.stderr), transient=True,
                redirect_stdout=False, redirect_stderr=False,  # stdout is the result: never touch it
            )
            self.live.start()
            for bar in self.bars:
                self._attach(bar)

    def _attach(self, bar: Bar) -> None:
        bar.task_id = self.live.add_task(bar.description, total=bar.total, completed=bar.completed, unit=bar.unit)

    def refresh(self, bar: Bar) -> None:
        if bar.task_id is None:
            return
        with self.lock:
            if self.live is not None and bar.task_id is not None:
                task = next((t for t in self.live.tasks if t.id == bar.task_id), None)
                if task is not None and bar.total is None:  # rich's update() cannot clear a total
                    task.total = None
                new_phase = task is not None and task.description != bar.description
                self.live.update(bar.task_id, total=bar.total, completed=bar.completed, description=bar.description,
                                 unit=bar.unit, refresh=new_phase)  # a new phase shows at once

    def stop(self) -> None:
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            if self.live is not None:
                live, self.live = self.live, None
                for bar in self.bars:
                    bar.task_id = None
                live.stop()

    def print_above(self, text: str) -> bool:
        """Print ``text`` above the bars if they are shown (True), else do nothing (False)."""
        with self.lock:
            if self.live is None:
                return False
            self.live.console.print(text, markup=False, highlight=False, soft_wrap=True)
            return True


_display = _Display()


@contextmanager
def progress(description: str, total: float | None = None, unit: str = "") -> Iterator[Bar]:
    """A progress bar on stderr for the work inside the ``with`` block (see the module
    docstring).  ``total`` None draws an indeterminate bar; ``unit`` is shown after the
    count (``"runs"``, ``"requests"``)."""
    bar = Bar(description, total, unit)
    if not bars_enabled():
        yield bar
        return
    _display.add(bar)
    try:
        yield bar
    finally:
        _display.remove(bar)


# ----------------------------------------------------------------------------- Ctrl-C


_exit_lock = threading.Lock()
_line_printed = False
_terminated = threading.Event()  # the interrupt was a SIGTERM
_saving_grace_s = 0.0  # set by saving_on_interrupt: the watchdog waits at least this long


@contextmanager
def saving_on_interrupt(grace_s: float) -> Iterator[None]:
    """Inside the block, the watchdog gives the main thread at least ``grace_s`` after a
    Ctrl-C (not GRACE_S) to unwind: the command writes its partial results as it does.  A
    second Ctrl-C still ends the process at once."""
    global _saving_grace_s
    previous, _saving_grace_s = _saving_grace_s, max(float(grace_s), 0.0)
    try:
        yield
    finally:
        _saving_grace_s = previous


def _exit_code() -> int:
    return EXIT_TERMINATED if _terminated.is_set() else EXIT_INTERRUPTED


def _on_sigterm(signum, frame) -> None:
    """SIGTERM ends the command like Ctrl-C (main thread; the watchdog sees it too)."""
    _terminated.set()
    raise KeyboardInterrupt


def _print_interrupted_once() -> None:
    global _line_printed
    with _exit_lock:
        if _line_printed:
            return
        _line_printed = True
    try:
        _display.stop()
    except Exception:  # noqa: BLE001 -- the display may be half-drawn; the line matters more
        pass
    try:
        line = TERMINATED_LINE if _terminated.is_set() else INTERRUPTED_LINE
        sys.stderr.write(("\n" if _stderr_is_tty() else "") + line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def interrupted() -> None:
    """End the command after a Ctrl-C (or SIGTERM): one line on stderr, exit code 130
    (143)."""
    _print_interrupted_once()
    raise SystemExit(_exit_code())


def end_now(code: int) -> None:
    """End the process at once -- no interpreter teardown -- after removing the temporary
    files of unfinished output writes and flushing stdout/stderr."""
    outputs = sys.modules.get("blis_fast.config.outputs")
    if outputs is not None:
        outputs.remove_pending()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def _hard_exit() -> None:
    """End the process from the watchdog thread: the main thread did not unwind in time."""
    _print_interrupted_once()
    end_now(_exit_code())


class _Watchdog(threading.Thread):
    """Reads the signal numbers CPython writes to the wakeup pipe -- even while the main
    thread is stuck in C code -- and ends the process if it has not ended ``grace_s``
    after a Ctrl-C or SIGTERM, or at once on a second one."""

    def __init__(self, read_fd: int, grace_s: float):
        super().__init__(name="blis-fast-interrupts", daemon=True)
        self.read_fd = read_fd
        self.grace_s = grace_s
        self.deadline: threading.Timer | None = None
        self.seen = 0

    def run(self) -> None:
        while True:
            try:
                data = os.read(self.read_fd, 64)
            except OSError:
                return
            if not data:  # the guard closed the pipe: the command is over
                return
            if signal.SIGINT not in data and signal.SIGTERM not in data:
                continue
            if signal.SIGTERM in data:
                _terminated.set()
            self.seen += 1
            grace_s = max(self.grace_s, _saving_grace_s)
            if self.seen >= 2 or grace_s <= 0:  # a second Ctrl-C: the person wants out now
                _hard_exit()
            if self.deadline is None:
                self.deadline = threading.Timer(grace_s, _hard_exit)
                self.deadline.daemon = True
                self.deadline.start()

    def cancel(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()


@contextmanager
def interrupt_guard(grace_s: float = GRACE_S) -> Iterator[None]:
    """Arm the watchdog for the block (main thread only; elsewhere a no-op).  The block
    itself must turn KeyboardInterrupt into ``interrupted()``."""
    global _line_printed
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(read_fd)
        os.close(write_fd)
        yield
        return
    _line_printed = False
    _terminated.clear()
    previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
    watchdog = _Watchdog(read_fd, grace_s)
    watchdog.start()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)
        signal.set_wakeup_fd(previous)
        os.close(write_fd)  # the watchdog reads EOF and ends
        watchdog.join(1.0)
        watchdog.cancel()
        os.close(read_fd)
