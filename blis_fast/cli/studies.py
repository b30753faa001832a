"""``blis-fast capacity``: studies above single runs (blis_fast.studies), each taking every
setting flag of ``blis-fast run`` (blis_fast.cli.runflags)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from blis_fast.cli.app import app, number_option
from blis_fast.cli.runflags import config_from_flags, input_paths, with_run_flags
from blis_fast.config.outputs import atomic_write, check_outputs

_JOBS_HELP = "simulations run at once (default: the machine's cores)"
_SEEDS_HELP = "seeds per point: consecutive workload seeds from --seed (default 3)"


def _write_text(path: Path, text: str, flag: str) -> None:
    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    atomic_write(path, write, flag)


@app.command()
@with_run_flags
def capacity(
    slo: Annotated[str, typer.Option("--slo", help="SLO predicates that must all hold for the mean over seeds: "
                                                   "metric<=value, metric>=value (< and > too), comma-separated, "
                                                   "e.g. 'ttft_p99_ms<=200,e2e_p99_ms<=5000'; metrics as in "
                                                   "--objectives, selectors allowed "
                                                   "('slo_attainment[class=realtime]>=0.99')")],
    slo_class: Annotated[Optional[str], typer.Option("--slo-class", help="apply each predicate without a selector "
                                                     "to these SLO classes of the workload spec instead of the whole "
                                                     "cluster (comma-separated names)")] = None,
    search: Annotated[str, typer.Option("--search", help="rate: the highest arrival rate meeting the SLOs (from "
                                                         "--rate); instances: the fewest instances meeting them at "
                                                         "--rate (from --num-instances)")] = "rate",
    seeds: Annotated[Optional[str], number_option("--seeds", help=_SEEDS_HELP)] = None,
    tolerance: Annotated[Optional[str], number_option("--tolerance", metavar="FLOAT",
                                                      help="rate search: stop when failed/met rate <= 1 + this "
                                                           "(default 0.01)")] = None,
    rate_min: Annotated[Optional[str], number_option("--rate-min", metavar="FLOAT",
                                                     help="rate search: lowest rate to consider, req/s "
                                                          "(with --rate-max: the bracket; default: from --rate)")] = None,
    rate_max: Annotated[Optional[str], number_option("--rate-max", metavar="FLOAT",
                                                     help="rate search: highest rate to consider, req/s")] = None,
    search_max_instances: Annotated[Optional[str], number_option(
        "--search-max-instances", help="instance search: the most instances to try (default 1024)")] = None,
    max_probes: Annotated[Optional[str], number_option("--max-probes", help="stop after this many probes "
                                                                            "(default 40)")] = None,
    jobs: Annotated[Optional[str], number_option("--jobs", help=_JOBS_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON instead of a table")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", help="also write the result (answer and probes) as JSON "
                                                              "here")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="draw the probes (metric vs rate or instances, "
                                                                "threshold, answer) into this .png or .svg "
                                                                "(needs: pip install 'blis-fast[plot]')")] = None,
    run_flags: dict = None,
) -> None:
    """Find the highest arrival rate (or fewest instances) meeting every SLO.

    Brackets the answer from --rate (or --num-instances), then refines it (ITP: bisection
    at worst, usually faster); every probe runs --seeds seeds in parallel and compares
    the mean with each threshold.  Prints the probes and the answer, and says when the
    seeds' noise limits it.
    """
    from blis_fast.studies.capacity import DEFAULT_SEEDS, DEFAULT_TOLERANCE, MAX_PROBES, capacity as run_capacity
    from blis_fast.studies.plots import capacity_figure, check_plot_path

    cfg = config_from_flags(run_flags)
    check_outputs((("--out", out), ("--plot", plot)), input_paths(run_flags, cfg))
    if plot is not None:
        check_plot_path(plot)
    result = run_capacity(
        slo, cfg, search=search, slo_classes=slo_class, seeds=DEFAULT_SEEDS if seeds is None else seeds,
        tolerance=DEFAULT_TOLERANCE if tolerance is None else tolerance, rate_min=rate_min, rate_max=rate_max,
        max_instances=1024 if search_max_instances is None else search_max_instances,
        max_probes=MAX_PROBES if max_probes is None else max_probes, jobs=jobs)
    text = json.dumps(result.to_dict(), indent=2, allow_nan=False)
    if out is not None:
        _write_text(out, text + "\n", "--out")
    if plot is not None:
        capacity_figure(result, plot)
    typer.echo(text if as_json else result.table())
