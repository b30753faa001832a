"""Every ``blis-fast`` command, registered on the typer app in help order, and
``run_command``: one command run with the project's error conventions -- a user error is
one line ``error: <field>: <message>`` on stderr with exit code 2, Ctrl-C is one line and
exit code 130 (``blis_fast.cli.feedback``), a usage error is one line naming the option."""

from __future__ import annotations

import functools
import sys
import warnings

import typer
import typer.main

from blis_fast.cli import run, evaluate, openevolve, bench, workload, models, serve, observe, calibrate, cache, studies, agents  # noqa: F401,I001  (registers the commands, in help order)
from blis_fast.cli.app import app
from blis_fast.cli.feedback import EXIT_INTERRUPTED, configure, interrupted, logger
from blis_fast.config.effective import CompatIgnoredWarning
from blis_fast.config.validate import escape_controls
from blis_fast.errors import BlisFastError

__all__ = ["app", "run_command"]

MAX_ERROR_CHARS = 1000


def _error(text: str) -> None:
    """Print ``error: <text>`` as one line on stderr and exit with code 2: whitespace runs
    become one space, control characters are escaped (user text can reach a message: a
    file name, a flag value) and the line is cut at MAX_ERROR_CHARS."""
    line = escape_controls(" ".join(str(text)[: 4 * MAX_ERROR_CHARS].split()))
    if len(line) > MAX_ERROR_CHARS:
        line = line[: MAX_ERROR_CHARS - 3] + "..."
    typer.echo(f"error: {line}", err=True)
    raise SystemExit(2)


@functools.cache
def _click_command():
    """The click command typer builds from the app's signatures -- built once per process:
    calling ``app(...)`` rebuilds it every time (~0.1 s), and the tests run many commands in
    one process.  (Calling the click command skips only typer's pretty-traceback hook, which
    the app disables: ``pretty_exceptions_enable=False``.)"""
    return typer.main.get_command(app)


def run_command(argv: list[str] | None = None) -> None:
    """Run one command.  Warnings raised while it runs are shown only if it succeeds (never
    before an error line); a ``CompatIgnoredWarning`` as its own one line (once, however
    many configs the command builds), through the notices' logger (``--quiet`` drops it)."""
    args = sys.argv[1:] if argv is None else argv
    configure(quiet=False, verbose=0)  # the command's --quiet / -v change it while parsing
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            code = _click_command()(args, standalone_mode=False)
        except BlisFastError as exc:
            _error(str(exc))
        except MemoryError:
            _error("simulation.max_memory: the machine ran out of memory; lower --max-memory so that the run is "
                   "refused up front, or make it smaller")
        except RecursionError:
            _error("input: nested too deeply")
        except KeyboardInterrupt:
            interrupted()
        except (typer.Exit, SystemExit) as exc:
            raise SystemExit(getattr(exc, "exit_code", getattr(exc, "code", 0))) from None
        except Exception as exc:  # click usage errors (unknown options, missing values)
            native = sys.modules.get("blis_fast_kernels.native")
            if native is not None and isinstance(exc, native.NativeUnavailable):
                _error(str(exc))  # BLIS_FAST_KERNELS asks for what this install cannot do
            if type(exc).__name__ == "NoArgsIsHelpError":  # `blis-fast` alone: the help, as --help shows it
                typer.echo(exc.ctx.get_help())  # (typer's rich help prints itself and returns "")
                raise SystemExit(0) from None
            if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
                msg = exc.format_message()
                param = getattr(exc, "param", None)
                hint = getattr(exc, "param_hint", None) or getattr(exc, "option_name", None)
                if msg.startswith("Invalid value for"):
                    pass  # already names the option
                elif param is not None and getattr(param, "opts", None):
                    msg = f"{param.opts[0]}: {msg}"
                elif hint:
                    msg = f"{hint}: {msg}"
                _error(msg)
            raise
    # without standalone mode, typer *returns* the exit code of typer.Exit -- and turns a
    # Ctrl-C inside the command into Exit(130)
    if code == EXIT_INTERRUPTED:
        interrupted()
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        raise SystemExit(code)
    shown = set()
    for w in caught:  # the command succeeded: show what it warned about, after its output (user text escaped)
        text = escape_controls(str(w.message))
        if issubclass(w.category, CompatIgnoredWarning):  # one line each, once (studies build many configs)
            if text not in shown:
                shown.add(text)
                logger.warning(text)
            continue
        warnings.showwarning(text, w.category, w.filename, w.lineno)
