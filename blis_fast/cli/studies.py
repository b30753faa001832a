"""``blis-fast capacity | sweep | compare``: studies above single runs (blis_fast.studies),
each taking every setting flag of ``blis-fast run`` (blis_fast.cli.runflags), with a
progress bar over its runs on stderr and its table on stdout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from blis_fast.cli import feedback
from blis_fast.cli.app import Quiet, Verbose, app, number_option
from blis_fast.cli.runflags import SINGLE_RUN_OUTPUTS, config_from_flags, input_paths, with_run_flags
from blis_fast.config.effective import TRACE, workload_source
from blis_fast.config.outputs import atomic_write, check_outputs, staged_outputs
from blis_fast.config.outputs import config_inputs
from blis_fast.config.validate import show
from blis_fast.errors import ConfigError

_JOBS_HELP = "simulations run at once (default: the machine's cores)"
_SEEDS_HELP = "seeds per point: consecutive workload seeds from --seed (default {})"
_SET_HELP = ("a swept setting NAME=start:stop:step (stop included) or NAME=v1,v2,...; NAME is any flat setting "
             "(rate, num_instances, max_num_seqs, routing_policy, ...) or a weight entry "
             "(routing_scorers.queue-depth); a program setting's expressions are separated by ';' "
             "(routing_program=-load;hit_blocks - queue); repeat for a grid")
_METRICS_HELP = ("more metrics for the table, comma-separated (names as in --objectives, selectors allowed), "
                 "printed after the key columns; latencies, throughput, occupancy and SLO attainment (per class "
                 "with targets) are always there")
_OUT_HELP = "write the table of every point (metric means and 95 % CI half-widths) here: .parquet or .csv"
_PLOT_HELP = ("draw latency percentiles, throughput vs offered load, step occupancy and headroom and SLO attainment "
              "per class vs "
              "the first swept setting into this .png or .svg (needs: pip install 'blis-fast[plot]')")
# the columns printed on stdout (the --out table has every metric), then the SLO classes'
# attainment and the --metrics columns
SHOWN = ("responses_per_sec", "ttft_p99_ms", "e2e_p99_ms", "itl_p99_ms", "slo_attainment", "token_budget_occupancy",
         "batch_slot_occupancy", "kv_occupancy_mean")


def _write_text(path: Path, text: str, flag: str) -> None:
    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    atomic_write(path, write, flag)


@app.command()
@with_run_flags(exclude=SINGLE_RUN_OUTPUTS)
def capacity(
    slo: Annotated[str, typer.Option("--slo", metavar="PREDICATES", help="SLO predicates that must all hold for the mean over seeds: "
                                                   "metric<=value, metric>=value (< and > too), comma-separated, "
                                                   "e.g. 'ttft_p99_ms<=200,e2e_p99_ms<=5000'; metrics as in "
                                                   "--objectives, selectors allowed "
                                                   "('slo_attainment[class=realtime]>=0.99')")],
    slo_class: Annotated[Optional[str], typer.Option("--slo-class", metavar="CLASSES", help="apply each predicate without a selector "
                                                     "to these SLO classes of the workload spec instead of the whole "
                                                     "cluster (comma-separated names)")] = None,
    search: Annotated[str, typer.Option("--search", metavar="rate|instances", help="rate: the highest arrival rate meeting the SLOs (from "
                                                         "--rate); instances: the fewest instances meeting them at "
                                                         "--rate (from --num-instances)")] = "rate",
    seeds: Annotated[Optional[str], number_option("--seeds", help=_SEEDS_HELP.format("3; 1 for a trace"))] = None,
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
    out: Annotated[Optional[Path], typer.Option("--out", metavar="FILE", help="also write the result (answer and probes) as JSON "
                                                              "here")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", metavar="FILE", help="draw the probes (metric vs rate or instances, "
                                                                "threshold, answer) into this .png or .svg "
                                                                "(needs: pip install 'blis-fast[plot]')")] = None,
    quiet: Quiet = False,
    verbose: Verbose = 0,
    run_flags: dict = None,
) -> None:
    """Find the highest arrival rate (or fewest instances) meeting every SLO.

    Brackets the answer from --rate (or --num-instances), then refines it (ITP: bisection
    at worst, usually faster); every probe runs --seeds seeds in parallel and compares
    the mean with each threshold.  Prints the probes and the answer, and says when the
    seeds' noise limits it.

    A probe counts only on runs that measure steady state: each runs at least
    --num-requests requests, and more when its arrivals span less than 10x its E2E p99
    (up to 200,000); a saturated probe fails (docs/studies.md, "Run adequacy").
    """
    from blis_fast.studies.capacity import DEFAULT_SEEDS, DEFAULT_TOLERANCE, MAX_PROBES, capacity as run_capacity  # deferred: blis_fast_kernels.native
    from blis_fast.studies.plots import capacity_figure, check_plot_path  # deferred: blis_fast.studies (not loaded by blis-fast --help)

    cfg = config_from_flags(run_flags)
    check_outputs((("--out", out), ("--plot", plot)), input_paths(run_flags, cfg))
    if plot is not None:
        check_plot_path(plot)
    if seeds is None:  # a trace draws nothing at random: one seed (more are refused: they repeat one run)
        seeds = 1 if workload_source(cfg.workload) == TRACE else DEFAULT_SEEDS
    with feedback.progress("capacity search", None, "runs") as bar:
        result = run_capacity(
            slo, cfg, search=search, slo_classes=slo_class, seeds=seeds,
            tolerance=DEFAULT_TOLERANCE if tolerance is None else tolerance, rate_min=rate_min, rate_max=rate_max,
            search_max_instances=1024 if search_max_instances is None else search_max_instances,
            max_probes=MAX_PROBES if max_probes is None else max_probes, jobs=jobs, on_run=bar.advance)
    text = json.dumps(result.to_dict(), indent=2, allow_nan=False)
    with staged_outputs():  # both outputs or neither
        if out is not None:
            _write_text(out, text + "\n", "--out")
        if plot is not None:
            capacity_figure(result, plot)
    from blis_fast.studies.tables import terminal_width  # deferred: blis_fast.studies (not loaded by blis-fast --help)

    typer.echo(text if as_json else result.table(width=terminal_width()))


def _finish_study(study, out: Path | None, plot: Path | None, as_json: bool, title: str) -> None:
    from blis_fast.studies.plots import study_figure  # deferred: blis_fast.studies (not loaded by blis-fast --help)

    with staged_outputs():  # both outputs or neither
        if out is not None:
            study.write_table(out)
        if plot is not None:
            study_figure(study, plot, title)
    if as_json:
        typer.echo(json.dumps(study.to_dict(), indent=2, allow_nan=False))
    else:
        from blis_fast.studies.tables import terminal_width  # deferred: blis_fast.studies (not loaded by blis-fast --help)

        shown = [*SHOWN, *(m for m in study.metrics if m.startswith("slo_attainment[")), *study.requested]
        typer.echo(study.text(list(dict.fromkeys(shown)), width=terminal_width()))
    note = study.adequacy_note()  # runs too short or saturated: one line on stderr (--quiet drops it)
    if note:
        feedback.logger.warning(note)


def _check_study_outputs(out, plot, inputs) -> None:
    from blis_fast.studies.plots import check_plot_path  # deferred: blis_fast.studies (not loaded by blis-fast --help)
    from blis_fast.studies.tables import check_table_path  # deferred: blis_fast.studies (not loaded by blis-fast --help)

    check_outputs((("--out", out), ("--plot", plot)), inputs)
    if out is not None:
        check_table_path(out)
    if plot is not None:
        check_plot_path(plot)


def _grid_inputs_check(out, plot, inputs):
    """``run_study``'s ``on_configs``: the outputs checked again against the files every
    grid point reads (a swept trace or workload spec, ``--set workload_traces_filepath=a,b``),
    before any point runs."""
    def check(configs) -> None:
        if out is None and plot is None:
            return
        seen, grid_inputs = set(), []
        for c in configs:  # the seeds of a point share its files: each distinct file source once
            key = (c.model, c.workload.traces_filepath, c.workload.spec_filepath)
            if key not in seen:
                seen.add(key)
                grid_inputs += [(f"{flag} of a grid point", p) for flag, p in config_inputs(c)]
        check_outputs((("--out", out), ("--plot", plot)), [*inputs, *grid_inputs])

    return check


@app.command()
@with_run_flags(exclude=SINGLE_RUN_OUTPUTS)
def sweep(
    set_: Annotated[list[str], typer.Option("--set", metavar="NAME=VALUES", help=_SET_HELP)],
    seeds: Annotated[Optional[str], number_option("--seeds", help=_SEEDS_HELP.format(1))] = None,
    metrics: Annotated[Optional[str], typer.Option("--metrics", metavar="METRICS", help=_METRICS_HELP)] = None,
    jobs: Annotated[Optional[str], number_option("--jobs", help=_JOBS_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print every point as JSON instead of a table")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", metavar="FILE", help=_OUT_HELP)] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", metavar="FILE", help=_PLOT_HELP)] = None,
    quiet: Quiet = False,
    verbose: Verbose = 0,
    run_flags: dict = None,
) -> None:
    """Run a grid of settings (--set, repeatable) and tabulate the metrics per point.

    Every point runs --seeds seeds (the same at every point), all points in parallel.
    Prints the key metrics; --out writes all of them, --plot draws the curves.
    """
    from blis_fast.studies.sweep import run_study, swept_programs  # deferred: blis_fast_kernels.native

    for name, first in swept_programs(set_).items():  # (a swept formula needs no formula of its own)
        if run_flags.get(name) is None:
            run_flags[name] = first
    cfg = config_from_flags(run_flags)
    inputs = input_paths(run_flags, cfg)
    _check_study_outputs(out, plot, inputs)
    with feedback.progress("sweep", None, "runs") as bar:
        study = run_study([(None, cfg)], set_, seeds=1 if seeds is None else seeds, metrics=metrics, jobs=jobs,
                          on_run=bar.advance, on_start=lambda n: bar.update(total=n),
                          on_configs=_grid_inputs_check(out, plot, inputs))
    _finish_study(study, out, plot, as_json, "Sweep")


@app.command()
@with_run_flags(exclude=("config", *SINGLE_RUN_OUTPUTS))
def compare(
    configs: Annotated[list[Path], typer.Argument(metavar="CONFIG.yaml", help="run-config YAML files (as --config of 'blis-fast run'), "
                                                       "each labelled by its file name")],
    set_: Annotated[Optional[list[str]], typer.Option("--set", metavar="NAME=VALUES", help=_SET_HELP)] = None,
    seeds: Annotated[Optional[str], number_option("--seeds", help=_SEEDS_HELP.format(1))] = None,
    metrics: Annotated[Optional[str], typer.Option("--metrics", metavar="METRICS", help=_METRICS_HELP)] = None,
    jobs: Annotated[Optional[str], number_option("--jobs", help=_JOBS_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print every point as JSON instead of a table")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", metavar="FILE", help=_OUT_HELP)] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", metavar="FILE", help=_PLOT_HELP + "; one line per configuration")] = None,
    quiet: Quiet = False,
    verbose: Verbose = 0,
    run_flags: dict = None,
) -> None:
    """Compare configurations side by side on the same workload and seeds.

    Each YAML file is a run config; the flags given here (workload, rate, seeds, ...)
    apply to every one of them, so the configurations differ only in what their files
    set.  With --set, every configuration runs the whole grid.
    """
    from blis_fast.studies.sweep import run_study  # deferred: blis_fast_kernels.native

    labels = [p.stem for p in configs]
    if len(set(labels)) != len(labels):
        raise ConfigError("CONFIGS", f"the files' names label the columns and must differ, got {show(labels)}")
    bases = [(label, config_from_flags({**run_flags, "config": path})) for label, path in zip(labels, configs)]
    inputs = [("CONFIGS", p) for p in configs] + [x for _, c in bases for x in input_paths(run_flags, c)]
    _check_study_outputs(out, plot, inputs)
    with feedback.progress("compare", None, "runs") as bar:
        study = run_study(bases, set_ or (), seeds=1 if seeds is None else seeds, metrics=metrics, jobs=jobs,
                          on_run=bar.advance, on_start=lambda n: bar.update(total=n),
                          on_configs=_grid_inputs_check(out, plot, inputs))
    _finish_study(study, out, plot, as_json, "Comparison")
