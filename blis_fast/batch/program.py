"""Run a policy *program* -- a ``.py`` file whose ``get_policy()`` returns a policy bundle
(a dict shaped like the bundle YAML) -- in a separate process with a hard kill.

A program is code (an LLM may have written it), so it never runs in our process: a child
``python -I`` imports it under an address-space limit (RLIMIT_AS) and a file-size limit,
calls ``get_policy()`` (or reads ``POLICY``) and writes the result as JSON to a file;
stdout is discarded.  The parent kills the child's whole process group when it outlives
``timeout_s``.  Every failure becomes a ``ProgramError`` with one actionable line (the
exception and the program's line, the time limit, or the memory limit).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from blis_fast.errors import BlisFastError

TIMEOUT_S = 10.0
MEMORY_LIMIT_BYTES = 512 * 2**20
MAX_RESULT_BYTES = 2**20
MAX_STDERR_BYTES = 4096

# Runs in the child.  argv: program path, result path, address-space limit (bytes).
_CHILD = r"""
import json, resource, sys, traceback
program, out, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
resource.setrlimit(resource.RLIMIT_FSIZE, (4 * 2**20, 4 * 2**20))

def where(tb):
    lines = [f.lineno for f in traceback.extract_tb(tb) if f.filename == program]
    return f" (line {lines[-1]})" if lines else ""

try:
    import runpy
    ns = runpy.run_path(program, run_name="policy_program")
    fn = ns.get("get_policy")
    if callable(fn):
        result = {"policy": fn()}
    elif "POLICY" in ns:
        result = {"policy": ns["POLICY"]}
    else:
        result = {"error": "defines neither get_policy() nor POLICY; define get_policy() returning the policy "
                           "bundle as a dict"}
    text = json.dumps(result, allow_nan=True)
except MemoryError:
    text = json.dumps({"error": "ran out of memory (the program may allocate at most %d MiB)" % (limit >> 20)})
except BaseException as exc:
    if isinstance(exc, SyntaxError):
        msg, at = exc.msg, " (line %s)" % exc.lineno
    else:
        msg, at = str(exc), where(exc.__traceback__)
    msg = " ".join(msg.split())[:300]
    text = json.dumps({"error": type(exc).__name__ + (": " + msg if msg else "") + at})
with open(out, "w") as f:
    f.write(text)
"""


class ProgramError(BlisFastError):
    """A policy program failed (raised, ran too long, allocated too much, returned no dict)."""


def run_policy_program(path: str | Path, timeout_s: float = TIMEOUT_S,
                       memory_limit: int = MEMORY_LIMIT_BYTES) -> object:
    """The value ``get_policy()`` returns in program ``path`` (JSON types), computed in a
    child process killed after ``timeout_s``; ProgramError (one line) on any failure."""
    p = Path(path)
    if not p.is_file():
        raise ProgramError(f"program file not found: {p}")
    with tempfile.TemporaryDirectory(prefix="blis-fast-program-") as tmp:
        out = Path(tmp) / "result.json"
        err_path = Path(tmp) / "stderr.txt"
        with open(err_path, "wb") as err:
            child = subprocess.Popen(
                [sys.executable, "-I", "-c", _CHILD, str(p.resolve()), str(out), str(int(memory_limit))],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp,
                start_new_session=True)  # its own process group: the kill reaches anything it started
            try:
                child.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(child)
                raise ProgramError(f"the program did not return a policy within {timeout_s:g} s (killed); it must "
                                   "build and return the policy dict quickly, without loops that never end") from None
            finally:
                _kill_group(child)  # leftovers the program started
        if not out.is_file():
            tail = _tail(err_path)
            if child.returncode is not None and child.returncode < 0:
                raise ProgramError(f"the program process was killed by signal {-child.returncode}"
                                   f"{' (' + tail + ')' if tail else ''}; it may have exceeded the "
                                   f"{memory_limit >> 20} MiB memory limit")
            raise ProgramError(f"the program process failed (exit code {child.returncode})"
                               f"{': ' + tail if tail else ''}")
        if out.stat().st_size > MAX_RESULT_BYTES:
            raise ProgramError(f"get_policy() returned more than {MAX_RESULT_BYTES >> 10} KiB of JSON")
        try:
            result = json.loads(out.read_text())
        except ValueError:
            raise ProgramError("get_policy() returned something that is not JSON data (use dicts, lists, "
                               "strings and numbers)") from None
    if "error" in result:
        raise ProgramError(result["error"])
    return result["policy"]


def _kill_group(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        child.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover -- SIGKILL cannot be ignored
        pass


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - MAX_STDERR_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""
