"""``blis-fast bench``: the standard benchmark scenarios (blis_fast.experiments.bench)."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from blis_fast.cli import feedback
from blis_fast.cli.app import Quiet, Verbose, app, number_option


@app.command()
def bench(
    json_out: Annotated[bool, typer.Option("--json", help="print machine-readable JSON instead of a table")] = False,
    scenarios: Annotated[Optional[str], typer.Option("--scenarios", help="comma-separated subset: 1k, 10k, 100k, 100k-weighted, 100k-expr (its router as an expression), 100k-decisions, 100k-full, 100k-ref, 100k-pd, 100k-chat, 100k-tiers (KV tiers, 100k-chat their twin without; not in the default: minutes), 100k-diurnal-autoscale (the autoscaling study's day, 100k-diurnal its twin on a fixed fleet; not in the default), 100k-overload, 100k-overload-flow, 100k-overload-flow-expr (the flow-control study's overload: no detector, utilization, utilization as an expression detector; not in the default), live-10k (10K requests through blis-fast serve's live engine, event time by event time, against the batch run; not in the default), batch-10k (64 candidates x 10k, serial and on all cores), batch-100k (64 x 100k, all cores; not in the default) (default: all but batch-100k, 100k-chat, 100k-tiers, the diurnal pair and the overload three)")] = None,
    repeats: Annotated[Optional[str], number_option("--repeats", help="timed repetitions per scenario, 1 to 1000 "
                                                                     "(best is reported; default 3)")] = None,
    startup: Annotated[bool, typer.Option("--startup/--no-startup", help="also measure cold compile and cached start-up in fresh processes")] = True,
    calibrate: Annotated[bool, typer.Option("--calibrate", help="instead, re-measure one instance's saturation throughput and print the scenario rates at 80% load (JSON)")] = False,
    quiet: Quiet = False,
    verbose: Verbose = 0,
) -> None:
    """Benchmark the standard scenarios: kernel seconds once compiled, simulated req/s and
    steps/s, the kernel time as a multiple of a minimal continuous-batching loop on the
    same workload (the floor), plus cold-compile time and the start-up time of a cached
    process."""
    from blis_fast.experiments.bench import run_bench  # deferred: blis_fast.experiments (not loaded by blis-fast --help)

    if calibrate:
        from blis_fast.experiments.bench import calibrate as _calibrate  # deferred: blis_fast.experiments (not loaded by blis-fast --help)

        typer.echo(json.dumps(_calibrate(), indent=2))
        return
    with feedback.progress("blis-fast bench") as bar:
        report = run_bench(scenarios=scenarios.split(",") if scenarios is not None else None,
                           repeats=3 if repeats is None else repeats, startup=startup,
                           progress=bar.report)
    if json_out:
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo(report_table(report))


def report_table(report: dict) -> str:
    """Human-readable bench report."""
    from blis_fast.experiments.bench import format_report  # deferred: blis_fast.experiments (not loaded by blis-fast --help)

    return format_report(report)
