"""Run a policy *program* -- a ``.py`` file whose ``get_policy()`` returns a policy bundle
(a dict shaped like the bundle YAML, or bundle YAML text) -- in a sandbox.

A program is code an LLM may have written, so it never runs in our process, nor as our
child: a trusted supervisor (``sandbox_supervisor.py``, a fresh ``python -I`` in its own
session that dies with us) confines a runner that imports the program -- a PID namespace
it is PID 1 of, no network, another user, Landlock, seccomp and rlimits, each where the
machine offers it (docs/limits.md, "Candidate programs: the sandbox";
``sandbox_status()`` says which are active here).  The runner sends what ``get_policy()``
returns down a pipe; the supervisor forwards at most ``MAX_RESULT_BYTES`` of it after a
header saying how the runner ended; this module reads that as untrusted data (size,
depth, shape).  Every failure becomes a ``ProgramError`` with one line (the exception
and the program's line, the time limit, the memory limit, a malformed result).

``stop_all_programs()`` kills every sandbox running in this process (Ctrl-C, SIGTERM);
a caller that dies takes its sandboxes with it (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from blis_fast.config.validate import as_float, show
from blis_fast.errors import BlisFastError

TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 3600.0  # program_timeout_s is a number in (0, MAX_TIMEOUT_S]
MEMORY_LIMIT_BYTES = 512 * 2**20
FILE_LIMIT_BYTES = 4 * 2**20  # each file the program writes in its folder
TMPFS_BYTES = 16 * 2**20  # its whole folder, when a private tmpfs can be mounted
MAX_PROGRAM_BYTES = 2**20  # the program's source
MAX_RESULT_BYTES = 2**20  # the JSON of what get_policy() returns
MAX_RESULT_DEPTH = 64  # nesting of lists and dicts in it
MAX_MESSAGE_CHARS = 300  # of the program's own error line
SUPERVISOR_GRACE_S = 5.0  # the supervisor's own start and reporting, beyond the program's time
SUPERVISOR = Path(__file__).with_name("sandbox_supervisor.py")


class ProgramError(BlisFastError):
    """A policy program failed (raised, ran too long, allocated too much, sent a malformed
    result)."""


def check_timeout(value: Any, field: str = "program_timeout_s") -> float:
    """``value`` as a program time limit: a finite number of seconds in (0, 3600]
    (ConfigError naming ``field`` otherwise; text, bools, NaN and infinities refused)."""
    return as_float(value, field, 0, MAX_TIMEOUT_S, lo_open=True, text=False, unit="seconds")


LAYERS = ("namespaces", "tmpfs", "user", "landlock", "seccomp")  # (rlimits are always set)


def run_policy_program(path: str | Path, timeout_s: float = TIMEOUT_S,
                       memory_limit: int = MEMORY_LIMIT_BYTES, *, layers_off: tuple = ()) -> object:
    """The value ``get_policy()`` (or ``POLICY``) of program ``path`` holds, as JSON data,
    computed in the sandbox and killed after ``timeout_s``; ProgramError (one line) on
    any failure of the program, ConfigError for a bad ``timeout_s``.  ``layers_off``
    (names in LAYERS) runs without those layers: for tests of what the others hold."""
    timeout_s = check_timeout(timeout_s)
    source = _read_program(Path(path))
    with tempfile.TemporaryDirectory(prefix="blis-fast-program-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp) / "work"
        work.mkdir(mode=0o700)
        program = work / "program.py"  # a copy: the program reads nothing of the caller's, not even its own file
        program.write_bytes(source)
        header, payload = _supervise(dict(program=str(program), work=str(work), timeout_s=timeout_s,
                                          memory_bytes=int(memory_limit), file_bytes=FILE_LIMIT_BYTES,
                                          tmpfs_bytes=TMPFS_BYTES, max_result=MAX_RESULT_BYTES, parent=os.getpid(),
                                          off=[x for x in LAYERS if x in layers_off]),
                                     timeout_s + SUPERVISOR_GRACE_S)
    return _outcome(header, payload, timeout_s, memory_limit)


def sandbox_status() -> dict[str, dict]:
    """The sandbox's layers on this machine, as a trivial program finds them:
    {layer: {"active": bool, "detail": text}} for namespaces, tmpfs, rlimits, user,
    landlock and seccomp."""
    with tempfile.TemporaryDirectory(prefix="blis-fast-program-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        (work / "program.py").write_text("POLICY = {}\n")
        header, _ = _supervise(dict(program=str(work / "program.py"), work=str(work), timeout_s=TIMEOUT_S,
                                    memory_bytes=MEMORY_LIMIT_BYTES, file_bytes=FILE_LIMIT_BYTES,
                                    tmpfs_bytes=TMPFS_BYTES, max_result=MAX_RESULT_BYTES, parent=os.getpid()),
                               TIMEOUT_S + SUPERVISOR_GRACE_S)
    return dict(header.get("layers", {}))


def sandbox_status_text() -> str:
    """``sandbox_status()`` as lines ``on|off  layer: detail``."""
    return "\n".join(f"{'on ' if v.get('active') else 'off'}  {k}: {v.get('detail', '')}"
                     for k, v in sandbox_status().items())


# ----------------------------------------------------------------------------- the supervisor

_running: set = set()  # the supervisors of this process (Popen), for stop_all_programs
_running_lock = threading.Lock()
_stopping = threading.Event()


def stop_all_programs() -> None:
    """Kill every sandbox this process runs (its supervisor's group; the runner dies with
    its supervisor).  Sandboxes started while this runs are killed as they start; call
    ``allow_programs()`` to start new ones again."""
    _stopping.set()
    with _running_lock:
        procs = list(_running)
    for proc in procs:
        _kill_group(proc)


def allow_programs() -> None:
    """Let programs start again after ``stop_all_programs()``."""
    _stopping.clear()


def _supervise(cfg: dict, wall_s: float) -> tuple[dict, bytes]:
    """(header, result bytes) of the supervisor run with ``cfg``; ProgramError when it
    cannot be started, fails or outlives ``wall_s``."""
    if _stopping.is_set():
        raise ProgramError("not run: the batch is stopping")
    try:
        # no preexec_fn (unsafe with threads): the supervisor sets itself up
        proc = subprocess.Popen([sys.executable, "-I", str(SUPERVISOR), json.dumps(cfg)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, close_fds=True)
    except OSError as exc:
        raise ProgramError(f"cannot start the program's sandbox: {exc.strerror or exc}") from None
    with _running_lock:
        _running.add(proc)
    try:
        if _stopping.is_set():
            _kill_group(proc)
        out, err = proc.communicate(timeout=wall_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise ProgramError(f"the program's sandbox did not end within {wall_s:g} s (killed)") from None
    finally:
        _kill_group(proc)  # idempotent; on Ctrl-C in this thread too
        with _running_lock:
            _running.discard(proc)
    if _stopping.is_set():
        raise ProgramError("stopped: the batch was interrupted")
    head, _, payload = out.partition(b"\n")
    try:
        header = json.loads(head)
        assert isinstance(header, dict) and "outcome" in header
    except (ValueError, AssertionError):
        tail = err.decode("utf-8", "replace").strip().splitlines()
        raise ProgramError(f"the program's sandbox failed (exit code {proc.returncode})"
                           + (f": {clean_line(tail[-1])}" if tail else "")) from None
    return header, payload


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover -- SIGKILL cannot be ignored
        pass


def _read_program(p: Path) -> bytes:
    """The program's source: a regular file (a FIFO or a device would block or never
    end) of at most MAX_PROGRAM_BYTES."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ProgramError(f"the program {show(str(p))} is not a regular file")
            source = f.read(MAX_PROGRAM_BYTES + 1)
    except FileNotFoundError:
        raise ProgramError(f"program file not found: {show(str(p))}") from None
    except OSError as exc:
        raise ProgramError(f"cannot read the program {show(str(p))}: {exc.strerror or exc}") from None
    if len(source) > MAX_PROGRAM_BYTES:
        raise ProgramError(f"the program is larger than {MAX_PROGRAM_BYTES >> 10} KiB")
    return source


# ----------------------------------------------------------------------------- its answer


def _outcome(header: dict, payload: bytes, timeout_s: float, memory_limit: int) -> object:
    """What the program returned, from the supervisor's header and the runner's bytes."""
    outcome = header.get("outcome")
    runner = header.get("layers", {}).get("runner")
    if runner is not None:  # it ended (or was killed) before confining itself: the program never ran
        raise ProgramError(f"the program's sandbox could not be set up: {clean_line(str(runner.get('detail')))}")
    if outcome == "timeout":
        raise ProgramError(f"the program did not return a policy within {timeout_s:g} s (killed); it must "
                           "build and return the policy dict quickly, without loops that never end")
    if outcome == "oversize":
        raise ProgramError(f"get_policy() returned more than {MAX_RESULT_BYTES >> 10} KiB of JSON")
    if header.get("signal") is not None:
        raise ProgramError(f"the program process was killed by signal {header['signal']}; it may have exceeded "
                           f"the {memory_limit >> 20} MiB memory limit")
    if not payload:
        raise ProgramError(f"the program process ended (exit code {header.get('exit_code')}) without returning a "
                           "policy; return it from get_policy() rather than exiting")
    return parse_result(payload)


def parse_result(payload: bytes) -> object:
    """The policy in the runner's bytes ``{"policy": value}``, or ProgramError carrying
    its ``{"error": line}``; anything else -- not UTF-8, not JSON, nested deeper than
    MAX_RESULT_DEPTH, another shape -- is a ProgramError saying so."""
    malformed = "the program sent a malformed result (it must return the policy from get_policy(), not write it)"
    try:
        data = json.loads(payload.decode("utf-8"))
    except RecursionError:
        raise ProgramError(f"get_policy() returned data nested deeper than {MAX_RESULT_DEPTH} levels") from None
    except ValueError:  # (UnicodeDecodeError, JSONDecodeError, an over-long integer)
        raise ProgramError(malformed) from None
    if _deeper_than(data, MAX_RESULT_DEPTH + 1):  # (+1: the {"policy": ...} wrapper)
        raise ProgramError(f"get_policy() returned data nested deeper than {MAX_RESULT_DEPTH} levels")
    if not isinstance(data, dict) or len(data) != 1 or not ({"policy", "error"} & set(data)):
        raise ProgramError(malformed)
    if "error" in data:
        if not isinstance(data["error"], str):
            raise ProgramError(malformed)
        raise ProgramError(clean_line(data["error"]) or "the program failed")
    return data["policy"]


def _deeper_than(value: Any, limit: int) -> bool:
    """True if lists and dicts nest more than ``limit`` levels in ``value`` (no recursion)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (list, dict)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (v.values() if isinstance(v, dict) else v))
    return False


def clean_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` on one line, control characters escaped, at most ``limit`` characters."""
    line = " ".join(text.split())
    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in line[: limit * 2])
    return line if len(line) <= limit else line[: limit - 3] + "..."
