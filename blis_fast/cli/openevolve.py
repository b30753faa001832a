"""``blis-fast openevolve init DIR``: a starter OpenEvolve project (blis_fast.adapters.openevolve_starter)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from blis_fast.cli.app import Quiet, Verbose, app

openevolve_app = typer.Typer(no_args_is_help=True, help="OpenEvolve integration: blis-fast as the fitness function.")
app.add_typer(openevolve_app, name="openevolve")


@openevolve_app.command("init")
def openevolve_init(
    directory: Annotated[Path, typer.Argument(metavar="DIR", show_default=False, help="folder to create the project in (must not hold its files)")],
    quiet: Quiet = False,
    verbose: Verbose = 0,
) -> None:
    """Write an OpenEvolve project: evaluator.py (one line), scenarios.yaml, config.yaml
    (YAML programs), config_python.yaml (.py programs) and seed programs in both forms;
    prints the files written and the command to start."""
    from blis_fast.adapters.openevolve_starter import write_starter

    files = write_starter(directory)
    for f in files:
        typer.echo(_shown(f))
    typer.echo(f"start: openevolve-run {_shown(directory / 'initial_program.yaml')} "
               f"{_shown(directory / 'evaluator.py')} --config {_shown(directory / 'config.yaml')}")


def _shown(path: Path) -> str:
    """``path`` as printed: as is, or quoted with its control characters escaped (a BEL in
    a folder name must not reach the terminal raw)."""
    from blis_fast.config.validate import show

    text = str(path)
    return text if text.isprintable() else show(text, 4200)
