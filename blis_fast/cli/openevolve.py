"""``blis-fast openevolve init DIR``: a starter OpenEvolve project (blis_fast.adapters.openevolve_starter)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from blis_fast.cli.app import Quiet, Verbose, app, printable_path

openevolve_app = typer.Typer(no_args_is_help=True, help="OpenEvolve integration: blis-fast as the fitness function.")
app.add_typer(openevolve_app, name="openevolve")


@openevolve_app.command("init")
def openevolve_init(
    directory: Annotated[Path, typer.Argument(metavar="DIR", show_default=False, help="folder to create the project in (must not hold its files)")],
    quiet: Quiet = False,
    verbose: Verbose = 0,
) -> None:
    """Write an OpenEvolve project: evaluator.py (one line), scenarios.yaml, config.yaml
    (YAML programs), config_python.yaml (.py programs) and seed programs in both forms and
    as a routing expression;
    prints the files written and the command to start."""
    from blis_fast.adapters.openevolve_starter import write_starter  # deferred: blis_fast.adapters (not loaded by blis-fast --help)

    files = write_starter(directory)
    for f in files:
        typer.echo(printable_path(f))
    typer.echo(f"start: openevolve-run {printable_path(directory / 'initial_program.yaml')} "
               f"{printable_path(directory / 'evaluator.py')} --config {printable_path(directory / 'config.yaml')}")
    typer.echo(f"or evolve a routing formula: openevolve-run "
               f"{printable_path(directory / 'initial_program_expression.yaml')} "
               f"{printable_path(directory / 'evaluator.py')} --config {printable_path(directory / 'config.yaml')}")
