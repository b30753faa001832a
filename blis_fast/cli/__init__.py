"""The ``blis-fast`` command line (typer), one module per command group:

    app.py       the typer app and the helpers commands share
    run.py       blis-fast run
    bench.py     blis-fast bench
    workload.py  blis-fast workload generate | stats
    cache.py     blis-fast clear-cache

Each command parses its options, calls one ``blis_fast`` function and writes JSON.  Every
user error -- a bad flag value, a bad YAML key, a malformed trace -- ends with one line
``error: <field>: <message>`` on stderr and exit code 2 (``main``).
"""

from __future__ import annotations

import sys
import warnings

import typer

from blis_fast.cli import run, bench, workload, cache, studies  # noqa: F401,I001  (registers the commands, in help order)
from blis_fast.cli.app import app
from blis_fast.errors import BlisFastError

__all__ = ["app", "main"]

MAX_ERROR_CHARS = 1000


def _error(text: str) -> None:
    """Print ``error: <text>`` as one line on stderr and exit with code 2."""
    line = " ".join(str(text).split())
    if len(line) > MAX_ERROR_CHARS:
        line = line[: MAX_ERROR_CHARS - 3] + "..."
    typer.echo(f"error: {line}", err=True)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one-line errors with exit code 2.  Warnings raised
    while a command runs are shown only if it succeeds (never before an error line)."""
    args = sys.argv[1:] if argv is None else argv
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            app(args, standalone_mode=False)
        except BlisFastError as exc:
            _error(str(exc))
        except MemoryError:
            _error("simulation.max_memory: the machine ran out of memory; lower --max-memory so that the run is "
                   "refused up front, or make it smaller")
        except RecursionError:
            _error("input: nested too deeply")
        except (typer.Exit, SystemExit) as exc:
            raise SystemExit(getattr(exc, "exit_code", getattr(exc, "code", 0))) from None
        except Exception as exc:  # click usage errors (unknown options, missing values)
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
    for w in caught:  # the command succeeded: show what it warned about, after its output
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
