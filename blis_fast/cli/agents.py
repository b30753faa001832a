"""``blis-fast agents run``: agent workflows as DAGs of tools sharing resources (issue 26,
docs/agents.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from blis_fast.cli import feedback
from blis_fast.cli.app import Quiet, Verbose, app, number_option
from blis_fast.config.outputs import atomic_write, check_outputs, named_files

# --config of both commands: the cluster the llm nodes are sent to
ClusterConfig = Annotated[Optional[Path], typer.Option(
    "--config", metavar="FILE", help="the simulated cluster the llm nodes are sent to (a simulator config YAML), "
                                     "instead of the scenario's cluster")]

agents_app = typer.Typer(no_args_is_help=True, help="Agent workflows: DAGs of tool calls sharing resources.")
app.add_typer(agents_app, name="agents")


@agents_app.command("run")
def agents_run(
    scenario: Annotated[Path, typer.Option("--scenario", help="agent scenario YAML (docs/agents.md)")],
    runs: Annotated[Optional[str], number_option("--runs", help="runs (run k uses the scenario's seed + k; default: "
                                                               "the scenario's runs)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON instead of a table")] = False,
    per_request_out: Annotated[Optional[Path], typer.Option(
        "--per-request-out", metavar="FILE", help="write the per-request table (one row per node of every request: "
                                                  "run, request, type, arrival, end, latency, node, start, finish) "
                                                  "here; the suffix picks the format: .parquet, .csv or .jsonl")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", metavar="FILE", help="draw each resource's utilization "
                                                                        "over time (run 0) to FILE (.png or .svg; "
                                                                        "needs matplotlib)")] = None,
    config: ClusterConfig = None,
    quiet: Quiet = False,
    verbose: Verbose = 0,
) -> None:
    """Run an agent scenario's runs and print each request type's latency (mean, p50, p95,
    p99) and each resource's utilization, as mean ± std over the runs."""
    from blis_fast.agents.results import AgentResult, check_table_memory  # deferred: numpy, the kernels
    from blis_fast.agents.run import run_runs, scenario_of, with_runs  # deferred: numpy, the kernels
    from blis_fast.results.result import request_table_format  # deferred: numpy

    table_format = None
    if per_request_out is not None:
        table_format = request_table_format(per_request_out, "--per-request-out")
    sc = with_runs(scenario_of(scenario), runs, "--runs")
    outputs = [(flag, p) for flag, p in (("--per-request-out", per_request_out), ("--plot", plot)) if p is not None]
    if plot is not None:
        from blis_fast.studies.plots import check_plot_path  # deferred: matplotlib

        check_plot_path(plot)
    if outputs:  # never overwrite the scenario or a file it names
        cluster = [Path(sc.cluster)] if isinstance(sc.cluster, str) else []  # (a cluster: path, resolved)
        inputs = [("--scenario", p) for p in [scenario, *named_files(sc.raw, scenario.resolve().parent), *cluster]]
        inputs += [("--config", config)] if config is not None else []
        check_outputs(outputs, inputs)
    if per_request_out is not None:
        check_table_memory(sc)
    result = AgentResult(sc, request_columns=[] if per_request_out is not None else None,
                         keep_windows=plot is not None)
    with feedback.progress("agents run", sc.runs, "runs") as bar:
        def on_run(out) -> None:
            result.add(out)
            bar.advance()

        run_runs(sc, on_run, config)
        if per_request_out is not None:
            bar.report(f"writing {per_request_out}", 0, None)
            atomic_write(per_request_out, lambda p: result.write_requests(p, table_format), "--per-request-out")
    if plot is not None:
        from blis_fast.studies.plots import agents_run_figure  # deferred: matplotlib

        agents_run_figure(result, plot)
    typer.echo(json.dumps(result.to_dict(), indent=2, allow_nan=False) if as_json else result.table())


@agents_app.command("capacity")
def agents_capacity_cmd(
    scenario: Annotated[Path, typer.Option("--scenario", help="agent scenario YAML (docs/agents.md)")],
    slo: Annotated[str, typer.Option("--slo", help="predicates, e.g. 'p95_latency_s[type=deep-research]<=30' "
                                                   "(comma-separated; docs/agents.md 'Capacity')")],
    runs: Annotated[Optional[str], number_option("--runs", help="runs per probe (default: the scenario's runs)")] = None,
    tolerance: Annotated[Optional[str], number_option("--tolerance", metavar="NUMBER", help="stop when failed / met multiplier <= "
                                                                          "1 + this (default 0.01)")] = None,
    max_probes: Annotated[Optional[str], number_option("--max-probes", help="at most this many probes "
                                                                            "(default 40)")] = None,
    by: Annotated[str, typer.Option("--by", metavar="ci|mean", help="a probe meets the SLOs when the whole 95 % "
                                                               "CI of each metric over the runs does (ci, the "
                                                               "default) or when its mean does (mean)")] = "ci",
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON instead of a table")] = False,
    plot: Annotated[Optional[Path], typer.Option("--plot", metavar="FILE", help="draw each type's latency (p50, "
                                                                        "p95) against its rate over the probes to "
                                                                        "FILE (.png or .svg; needs matplotlib)")] = None,
    config: ClusterConfig = None,
    quiet: Quiet = False,
    verbose: Verbose = 0,
) -> None:
    """The highest multiplier of the scenario's arrival rates (all types scaled together)
    meeting every SLO predicate; prints the rate per type and every probe."""
    from blis_fast.studies.agents_capacity import agents_capacity  # deferred: numpy, the kernels
    from blis_fast.studies.capacity import DEFAULT_TOLERANCE, MAX_PROBES  # deferred: numpy

    if plot is not None:
        from blis_fast.studies.plots import check_plot_path  # deferred: matplotlib

        check_plot_path(plot)
        check_outputs([("--plot", plot)], [("--scenario", scenario)] + ([("--config", config)] if config else []))
    with feedback.progress("agents capacity", None, "runs") as bar:
        result = agents_capacity(scenario, slo, runs=runs,
                                 tolerance=DEFAULT_TOLERANCE if tolerance is None else tolerance,
                                 max_probes=MAX_PROBES if max_probes is None else max_probes, on_run=bar.advance,
                                 config=config, by=by)
    if plot is not None:
        from blis_fast.studies.plots import agents_capacity_figure  # deferred: matplotlib

        agents_capacity_figure(result, plot)
    typer.echo(json.dumps(result.to_dict(), indent=2, allow_nan=False) if as_json else result.table())
