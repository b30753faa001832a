"""``blis-fast workload generate | stats``: workload specs and rich traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from blis_fast.cli.app import app
from blis_fast.errors import ConfigError

workload_app = typer.Typer(no_args_is_help=True, help="Workload specs and rich traces: generate a trace, summarize one.")
app.add_typer(workload_app, name="workload")


@workload_app.command("generate")
def workload_generate(
    spec: Annotated[Path, typer.Option("--spec", help="workload spec YAML (docs/workloads.md)")],
    out: Annotated[Path, typer.Option("--out", help="trace file to write (.parquet or .csv)")],
    seed: Annotated[Optional[int], typer.Option("--seed", help="seed (default: the spec's, else 42)", show_default=False)] = None,
    fmt: Annotated[Optional[str], typer.Option("--format", help="csv | parquet (default: from the --out extension)", show_default=False)] = None,
) -> None:
    """Generate the requests of a workload spec and write them as a rich trace (YAML
    header + CSV/Parquet table); prints a one-line JSON note."""
    from blis_fast.workload.generate import generate_requests
    from blis_fast.workload.spec import load_spec
    from blis_fast.workload.formats.rich_trace import write_trace

    if seed is not None and seed < 0:
        raise ConfigError("--seed", f"must be >= 0, got {seed}")
    req = generate_requests(load_spec(spec), seed)
    path = write_trace(req, out, fmt)
    typer.echo(json.dumps({"out": str(path), "num_requests": len(req), "seed": req.header.get("seed")}))


@workload_app.command("stats")
def workload_stats(
    trace: Annotated[Path, typer.Argument(help="rich trace (.parquet / blis-fast CSV), BLIS trace CSV, or a spec YAML")],
    block_size: Annotated[int, typer.Option("--block-size", help="KV block size for the prefix-sharing figures (tokens)")] = 16,
    seed: Annotated[Optional[int], typer.Option("--seed", help="seed when TRACE is a spec (default: the spec's)", show_default=False)] = None,
) -> None:
    """Summarize a workload as JSON: rates per client / tenant / SLO class, prompt and
    output length percentiles, sessions, and prefix sharing (ideal cache hit rate)."""
    from blis_fast.workload.stats import stats_of_file

    if block_size < 1:
        raise ConfigError("--block-size", f"must be >= 1, got {block_size}")
    typer.echo(json.dumps(stats_of_file(trace, block_size, seed), indent=2))
