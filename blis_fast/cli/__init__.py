"""The ``blis-fast`` command line (typer), one module per command group:

    commands.py  registers every command (in help order) and runs one: errors -> one line
    app.py       the typer app and the helpers commands share (option groups, --quiet/-v)
    feedback.py  progress bars and notices on stderr, Ctrl-C -> exit 130
    output.py    the human summary of a run (a terminal) or its JSON (--json, a pipe)
    run.py       blis-fast run
    evaluate.py  blis-fast evaluate
    openevolve.py  blis-fast openevolve init
    bench.py     blis-fast bench
    workload.py  blis-fast workload generate | stats
    serve.py     blis-fast serve (an OpenAI-compatible server backed by the live engine)
    observe.py   blis-fast observe (an OpenAI-compatible endpoint driven by a workload)
    calibrate.py blis-fast replay | calibrate (a recording through the simulator; errors and a fit)
    models.py    blis-fast models (known models: coefficient sets, shipped configs)
    cache.py     blis-fast clear-cache
    studies.py   blis-fast capacity (study commands)
    agents.py    blis-fast agents run (agent DAG scenarios)
    runflags.py  the run flags shared by run and the study commands

Each command parses its options, calls one ``blis_fast`` function and writes its result
on stdout.  Every user error -- a bad flag value, a bad YAML key, a malformed trace --
ends with one line ``error: <field>: <message>`` on stderr and exit code 2; Ctrl-C ends
any command with one line and exit code 130 (SIGTERM: 143).

This module stays light (stdlib only): ``main`` arms the Ctrl-C handling *before* the
commands, typer and numpy are imported, so that even an interrupt during start-up ends
cleanly.
"""

from __future__ import annotations

from blis_fast.paths import skip_numba_blas_probe

# The command runs only blis-fast's kernels: numba's registry set-up need not load SciPy's
# linear algebra (0.2-0.35 s of every run's start-up; blis_fast.paths.skip_numba_blas_probe).
skip_numba_blas_probe()

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``blis-fast``, ``python -m blis_fast``): runs one
    command; exit code 0, 2 (user error, one ``error:`` line), 130 (Ctrl-C) or 143
    (SIGTERM).  Run as the
    program (``argv`` None), an interrupted command skips the interpreter's teardown
    (a second or more after a large run), once its temporary files are gone."""
    from blis_fast.cli.feedback import EXIT_INTERRUPTED, EXIT_TERMINATED, end_now, interrupt_guard, interrupted  # deferred: logging, threading, typing (start-up)

    try:
        with interrupt_guard():
            try:
                from blis_fast.cli.commands import run_command  # deferred: yaml, numpy

                run_command(argv)
            except KeyboardInterrupt:
                interrupted()
    except SystemExit as exc:
        if exc.code in (EXIT_INTERRUPTED, EXIT_TERMINATED) and argv is None:
            end_now(exc.code)
        raise


def __getattr__(name: str):
    if name == "app":  # the typer app with every command registered
        from blis_fast.cli.commands import app  # deferred: yaml, numpy

        return app
    raise AttributeError(f"module 'blis_fast.cli' has no attribute {name!r}")
