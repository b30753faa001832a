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

import typer

from blis_fast.cli import run, bench, workload, cache  # noqa: F401,I001  (registers the commands, in help order)
from blis_fast.cli.app import app
from blis_fast.errors import BlisFastError

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one-line errors with exit code 2."""
    args = sys.argv[1:] if argv is None else argv
    try:
        app(args, standalone_mode=False)
    except BlisFastError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    except (typer.Exit, SystemExit) as exc:
        raise SystemExit(getattr(exc, "exit_code", getattr(exc, "code", 0))) from None
    except Exception as exc:  # click usage errors (bad flag values, unknown options)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            msg = exc.format_message().replace("\n", " ")
            param = getattr(exc, "param", None)
            hint = getattr(exc, "param_hint", None)
            if msg.startswith("Invalid value for"):
                pass  # already names the option
            elif param is not None and getattr(param, "opts", None):
                msg = f"{param.opts[0]}: {msg}"
            elif hint:
                msg = f"{hint}: {msg}"
            typer.echo(f"error: {msg}", err=True)
            raise SystemExit(2) from None
        raise
