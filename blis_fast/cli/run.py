"""``blis-fast run``: simulate one cluster and print the summary JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from blis_fast.cli import feedback
from blis_fast.cli.app import OUTPUT, POLICIES, WORKLOAD, Quiet, Verbose, app
from blis_fast.cli.output import PER_INSTANCE_LIMIT, render, summary_json, wants_json
from blis_fast.cli.setting_flags import with_setting_flags
from blis_fast.config.outputs import atomic_write, check_outputs, config_inputs, staged_outputs
from blis_fast.config.policy import load_policy_bundle
from blis_fast.config.sim import SimConfig, build_config, load_yaml, replace
from blis_fast.errors import ConfigError


@app.command()
@with_setting_flags(before="timeseries_out")
def run(
    config: Annotated[Optional[Path], typer.Option("--config", rich_help_panel=WORKLOAD, help="YAML file with any of the settings below (flags override it)")] = None,
    policy_config: Annotated[Optional[Path], typer.Option("--policy-config", rich_help_panel=POLICIES, help="policy bundle YAML (admission, routing, priority, scheduler, preemption, observability, fitness); flags override it")] = None,
    timeseries_out: Annotated[Optional[Path], typer.Option("--timeseries-out", rich_help_panel=OUTPUT, help="write the time series (per instance and cluster: waiting, running, KV utilization, cumulative arrivals / completions / preemptions / rejections; README 'Time series') here (Parquet); sampled every --sample-interval-ms (default 100)")] = None,
    trace_out: Annotated[Optional[Path], typer.Option("--trace-out", rich_help_panel=OUTPUT, help="write the decision trace (admission, routing with every candidate's snapshot values and matched prefix blocks, preemption; with --trace-level full also the schedulers' admissions to the batch and blocked queue heads; filled with outcomes; README 'Decision trace') here (Parquet); implies --trace-level decisions")] = None,
    summarize_trace: Annotated[bool, typer.Option("--summarize-trace", rich_help_panel=OUTPUT, help="add the markdown trace summary (outcome, key issues, counterfactuals, worst decisions, suggested focus) to the output as summary_text; implies --trace-level decisions")] = False,
    evaluation_out: Annotated[Optional[Path], typer.Option("--evaluation-out", rich_help_panel=OUTPUT, help="write the evaluation (score in [0, 1], normalized objectives, metrics, policy and workload ids; README 'Evaluation') here (JSON; deterministic: no wall time)")] = None,
    results_path: Annotated[Optional[Path], typer.Option("--results-path", "--metrics-path", rich_help_panel=OUTPUT, help="write the cluster summary + per-request records (JSON) here (--metrics-path: BLIS's current name)")] = None,
    per_request_out: Annotated[Optional[Path], typer.Option("--per-request-out", rich_help_panel=OUTPUT, help="write the per-request table here; the suffix picks the format: .parquet, .csv or .jsonl (the fields of the --results-path records)")] = None,
    scale_events_out: Annotated[Optional[Path], typer.Option("--scale-events-out", rich_help_panel=OUTPUT, help="write the autoscaler's scale events (one row per tick that decided a change: time, pool, from -> to instances, signal, reason, act time; docs/autoscaling.md) here; the suffix picks the format: .parquet, .csv or .jsonl; needs an autoscaler")] = None,
    scale_ticks_out: Annotated[Optional[Path], typer.Option("--scale-ticks-out", rich_help_panel=OUTPUT, help="write every autoscaler tick (the columns of --scale-events-out) here; .parquet, .csv or .jsonl; needs an autoscaler")] = None,
    attempts_out: Annotated[Optional[Path], typer.Option("--attempts-out", rich_help_panel=OUTPUT, help="write the failed-attempt log (one row per attempt that timed out or was shed: request, attempt, arrival, gateway entry / release / wait, end, outcome, the state it was cancelled in, its instance; docs/policies.md) here; .parquet, .csv or .jsonl; needs request deadlines (ttl_s, --request-ttl-s) or shedding")] = None,
    json_out: Annotated[bool, typer.Option("--json", rich_help_panel=OUTPUT, help="print the summary as JSON even on a terminal (it is JSON whenever stdout is not a terminal)")] = False,
    per_instance: Annotated[bool, typer.Option("--per-instance", rich_help_panel=OUTPUT, help=f"list every instance in the terminal summary (it lists them up to {PER_INSTANCE_LIMIT})")] = False,
    quiet: Quiet = False,
    verbose: Verbose = 0,
    **settings: Any,  # every setting of config.sim.FLAG_PATHS, as an option (cli/setting_flags.py)
) -> None:
    """Simulate a cluster and print its summary on stdout: tables on a terminal, JSON
    (cluster + per instance) with --json or when stdout is a pipe or a file.

    With no options: llama-3.1-8b-instruct on one H100 (TP1, fitted coefficients),
    100 requests of the BLIS default distribution at 1 request/s.
    """
    overrides = {k: v for k, v in settings.items() if v is not None}
    if not overrides.get("check_invariants"):
        overrides.pop("check_invariants", None)  # a YAML file may still turn it on
    bundle = load_policy_bundle(policy_config) if policy_config else None
    cfg = build_config(load_yaml(config) if config else {}, overrides, policy_settings=bundle,
                       policy_origin=f"--policy-config {policy_config}")
    cfg = with_analysis_outputs(cfg, trace_level=settings.get("trace_level"),
                                sample_interval_ms=settings.get("sample_interval_ms"),
                                timeseries_out=timeseries_out, trace_out=trace_out, summarize_trace=summarize_trace)
    scale_tables = {flag: path for flag, path in (("--scale-events-out", scale_events_out),
                                                  ("--scale-ticks-out", scale_ticks_out),
                                                  ("--attempts-out", attempts_out)) if path is not None}
    outputs = (("--results-path", results_path), ("--per-request-out", per_request_out),
               ("--evaluation-out", evaluation_out), ("--timeseries-out", timeseries_out), ("--trace-out", trace_out),
               *scale_tables.items())
    # fail before simulating, not after; never overwrite an input or write two outputs to one file
    check_outputs(outputs, [("--config", config), ("--policy-config", policy_config)] + config_inputs(cfg))
    table_format = None
    if per_request_out is not None or scale_tables:
        from blis_fast.results.result import request_table_format  # deferred: blis_fast_kernels.native

        if per_request_out is not None:
            table_format = request_table_format(per_request_out, "--per-request-out")
        scale_tables = {flag: (path, request_table_format(path, flag)) for flag, path in scale_tables.items()}
        if (scale_events_out or scale_ticks_out) and cfg.policy.autoscaler == "none":
            raise ConfigError(next(iter(scale_tables)), "needs an autoscaler (--autoscaler threshold|target|saturation|"
                                                        "oscillator): a run without one makes no scale decisions")
    if attempts_out is not None:
        from blis_fast.run.resolve import config_deadlines  # deferred: blis_fast.workload

        if config_deadlines(cfg) is None:
            raise ConfigError("--attempts-out", "needs request deadlines (ttl_s, --request-ttl-s) or a sheddable "
                                                "SLO class: without them no attempt times out or is shed")
    from blis_fast.run.api import run_config  # deferred: blis_fast.rng, blis_fast.run, blis_fast.workload (not loaded by blis-fast --help)

    # the output files hold one record per request: reserve their memory up front
    reserve = (RESULTS_BYTES_PER_REQUEST if results_path else 0) + (TABLE_BYTES_PER_REQUEST if per_request_out else 0)
    with feedback.progress("blis-fast run") as bar:
        result = run_config(cfg, output_bytes_per_request=reserve, progress=bar.report)
        _write_outputs(result, bar.report, results_path=results_path, per_request_out=per_request_out,
                       table_format=table_format, evaluation_out=evaluation_out, summarize_trace=summarize_trace,
                       timeseries_out=timeseries_out, trace_out=trace_out, scale_tables=scale_tables)
        summary = result.summary()
        if summarize_trace:
            summary["summary_text"] = result.summary_text()
    if wants_json(json_out):
        typer.echo(summary_json(summary))
    else:
        render(summary, per_instance=per_instance)
    warning = result.adequacy.warning()  # too short or saturated: one line on stderr (--quiet drops it)
    if warning:
        feedback.logger.warning(warning)
    from blis_fast.results.kv_tiers import unread_warning  # deferred: blis_fast_kernels

    unread = unread_warning(result)  # KV tiers never read: their link settings changed nothing
    if unread:
        feedback.logger.warning(unread)


def _write_outputs(result, report, *, results_path, per_request_out, table_format, evaluation_out,
                   summarize_trace, timeseries_out, trace_out, scale_tables) -> None:
    """Write the run's output files (``report`` shows which on the progress bar);
    ``scale_tables``: {flag: (path, format)} of --scale-events-out / --scale-ticks-out /
    --attempts-out."""
    with staged_outputs():  # all outputs or none: a failed write leaves every target as it was
        if results_path:
            report(f"writing {results_path}", 0, None)
            atomic_write(results_path, result.write_results, "--results-path")
        if per_request_out:
            report(f"writing {per_request_out}", 0, None)
            atomic_write(per_request_out, lambda p: result.write_requests(p, table_format), "--per-request-out")
        if evaluation_out:
            report(f"writing {evaluation_out}", 0, None)
            text = result.evaluate(summarize=summarize_trace).to_json()
            atomic_write(evaluation_out, lambda p: Path(p).write_text(text), "--evaluation-out")
        if timeseries_out:
            report(f"writing {timeseries_out}", 0, None)
            atomic_write(timeseries_out, result.timeseries.write_parquet, "--timeseries-out")
        if trace_out:
            from blis_fast.results.trace_table import write_decision_trace  # deferred: blis_fast_kernels.native

            report(f"writing {trace_out}", 0, None)
            atomic_write(trace_out, lambda p: write_decision_trace(result, p), "--trace-out")
        for flag, (path, fmt) in scale_tables.items():
            from blis_fast.results.autoscale import write_scale_table, write_table  # deferred: blis_fast_kernels

            report(f"writing {path}", 0, None)
            if flag == "--attempts-out":
                atomic_write(path, lambda p: write_table(result.attempts_table(), p, fmt), flag)
                continue
            events_only = flag == "--scale-events-out"
            atomic_write(path, lambda p: write_scale_table(result, p, fmt, events_only), flag)


DEFAULT_SAMPLE_INTERVAL_MS = 100.0


def with_analysis_outputs(cfg: SimConfig, *, trace_level, sample_interval_ms, timeseries_out, trace_out,
                          summarize_trace) -> SimConfig:
    """The config with what the analysis outputs need: the decision trace for --trace-out /
    --summarize-trace, a sampling interval for --timeseries-out.  A flag whose output is
    not asked for is refused (it would change nothing)."""
    sim = cfg.simulation
    needs_trace = trace_out is not None or summarize_trace
    if needs_trace and sim.trace_level == "none":
        flag = "--trace-out" if trace_out is not None else "--summarize-trace"
        raise ConfigError(flag, "needs the decision trace; drop trace_level none (or set --trace-level decisions "
                                "or full)")
    if trace_level == "decisions" and not (needs_trace or sim.counterfactual_k):
        raise ConfigError("--trace-level", "decisions changes nothing without --trace-out, --summarize-trace or "
                                           "--counterfactual-k")
    if sim.trace_level == "full" and not needs_trace:
        # the scheduling records reach the trace file and the summary only (replays trace nothing)
        raise ConfigError("--trace-level" if trace_level else "simulation.trace_level",
                          "full changes nothing without --trace-out or --summarize-trace")
    if sample_interval_ms is not None and timeseries_out is None:
        raise ConfigError("--sample-interval-ms", "needs --timeseries-out FILE (where the time series goes)")
    changes = {}
    if needs_trace and sim.trace_level is None:
        changes["trace_level"] = "decisions"
    if timeseries_out is not None and sim.sample_interval_ms is None:
        changes["sample_interval_ms"] = DEFAULT_SAMPLE_INTERVAL_MS
    return replace(cfg, simulation=replace(sim, **changes)) if changes else cfg


RESULTS_BYTES_PER_REQUEST = 4096  # the results document's per-request records (dicts, then JSON text)
TABLE_BYTES_PER_REQUEST = 1024  # the per-request Parquet table (Arrow columns, then the file buffer)
