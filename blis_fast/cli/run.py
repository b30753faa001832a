"""``blis-fast run``: simulate one cluster and print the summary JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from blis_fast.cli import feedback
from blis_fast.cli.app import ENGINE, OUTPUT, POLICIES, SIMULATION, WORKLOAD, Quiet, Verbose, app, field_help
from blis_fast.cli.output import PER_INSTANCE_LIMIT, render, summary_json, wants_json
from blis_fast.cli.app import option as _opt
from blis_fast.config.outputs import atomic_write, check_outputs, config_inputs, staged_outputs
from blis_fast.config.policy import load_policy_bundle
from blis_fast.config.sim import FLAG_PATHS, SimConfig, build_config, load_yaml, replace
from blis_fast.errors import ConfigError


@app.command()
def run(
    config: Annotated[Optional[Path], typer.Option("--config", rich_help_panel=WORKLOAD, help="YAML file with any of the settings below (flags override it)")] = None,
    model: Annotated[Optional[str], _opt("--model")] = None,
    hardware: Annotated[Optional[str], _opt("--hardware")] = None,
    tp: Annotated[Optional[int], _opt("--tp")] = None,
    pp: Annotated[Optional[int], _opt("--pp")] = None,
    dp: Annotated[Optional[int], _opt("--dp")] = None,
    vllm_version: Annotated[Optional[str], _opt("--vllm-version")] = None,
    latency_model: Annotated[Optional[str], _opt("--latency-model")] = None,
    alpha_coeffs: Annotated[Optional[str], _opt("--alpha-coeffs")] = None,
    beta_coeffs: Annotated[Optional[str], _opt("--beta-coeffs")] = None,
    seed: Annotated[Optional[int], _opt("--seed")] = None,
    simulation_seed: Annotated[Optional[int], _opt("--simulation-seed")] = None,
    horizon: Annotated[Optional[int], _opt("--horizon")] = None,
    workload: Annotated[Optional[str], _opt("--workload")] = None,
    workload_traces_filepath: Annotated[Optional[str], _opt("--workload-traces-filepath")] = None,
    workload_spec: Annotated[Optional[str], _opt("--workload-spec")] = None,
    rate: Annotated[Optional[float], _opt("--rate")] = None,
    rate_scale: Annotated[Optional[float], _opt("--rate-scale")] = None,
    num_requests: Annotated[Optional[int], _opt("--num-requests")] = None,
    arrival: Annotated[Optional[str], _opt("--arrival")] = None,
    prefix_tokens: Annotated[Optional[int], _opt("--prefix-tokens")] = None,
    prompt_tokens: Annotated[Optional[float], _opt("--prompt-tokens")] = None,
    prompt_tokens_stdev: Annotated[Optional[float], _opt("--prompt-tokens-stdev")] = None,
    prompt_tokens_min: Annotated[Optional[int], _opt("--prompt-tokens-min")] = None,
    prompt_tokens_max: Annotated[Optional[int], _opt("--prompt-tokens-max")] = None,
    output_tokens: Annotated[Optional[float], _opt("--output-tokens")] = None,
    output_tokens_stdev: Annotated[Optional[float], _opt("--output-tokens-stdev")] = None,
    output_tokens_min: Annotated[Optional[int], _opt("--output-tokens-min")] = None,
    output_tokens_max: Annotated[Optional[int], _opt("--output-tokens-max")] = None,
    num_instances: Annotated[Optional[int], _opt("--num-instances")] = None,
    min_instances: Annotated[Optional[int], _opt("--min-instances")] = None,
    max_instances: Annotated[Optional[int], _opt("--max-instances")] = None,
    total_kv_blocks: Annotated[Optional[int], _opt("--total-kv-blocks")] = None,
    block_size_in_tokens: Annotated[Optional[int], _opt("--block-size-in-tokens")] = None,
    max_num_running_reqs: Annotated[Optional[int], _opt("--max-num-running-reqs", "--max-num-seqs")] = None,
    max_num_scheduled_tokens: Annotated[Optional[int], _opt("--max-num-scheduled-tokens", "--max-num-batched-tokens")] = None,
    long_prefill_token_threshold: Annotated[Optional[int], _opt("--long-prefill-token-threshold")] = None,
    gpu_memory_utilization: Annotated[Optional[float], _opt("--gpu-memory-utilization")] = None,
    enable_prefix_caching: Annotated[Optional[bool], typer.Option("--enable-prefix-caching/--disable-prefix-caching", rich_help_panel=ENGINE, help=field_help("enable_prefix_caching"), show_default=False)] = None,
    admission_latency: Annotated[Optional[int], _opt("--admission-latency")] = None,
    routing_latency: Annotated[Optional[int], _opt("--routing-latency")] = None,
    compat: Annotated[Optional[str], _opt("--compat")] = None,
    policy_config: Annotated[Optional[Path], typer.Option("--policy-config", rich_help_panel=POLICIES, help="policy bundle YAML (admission, routing, priority, scheduler, preemption, observability, fitness); flags override it")] = None,
    admission_policy: Annotated[Optional[str], _opt("--admission-policy")] = None,
    token_bucket_capacity: Annotated[Optional[float], _opt("--token-bucket-capacity")] = None,
    token_bucket_refill_rate: Annotated[Optional[float], _opt("--token-bucket-refill-rate")] = None,
    routing_policy: Annotated[Optional[str], _opt("--routing-policy")] = None,
    routing_scorers: Annotated[Optional[str], _opt("--routing-scorers")] = None,
    priority_policy: Annotated[Optional[str], _opt("--priority-policy")] = None,
    slo_class_weights: Annotated[Optional[str], _opt("--slo-class-weights")] = None,
    scheduler: Annotated[Optional[str], _opt("--scheduler")] = None,
    scheduler_weights: Annotated[Optional[str], _opt("--scheduler-weights")] = None,
    preemption_victim: Annotated[Optional[str], _opt("--preemption-victim")] = None,
    snapshot_refresh_interval: Annotated[Optional[int], _opt("--snapshot-refresh-interval")] = None,
    snapshot_intervals: Annotated[Optional[str], _opt("--snapshot-intervals")] = None,
    prefix_index_capacity: Annotated[Optional[int], _opt("--prefix-index-capacity")] = None,
    fitness_weights: Annotated[Optional[str], _opt("--fitness-weights")] = None,
    objectives: Annotated[Optional[str], _opt("--objectives")] = None,
    trace_level: Annotated[Optional[str], _opt("--trace-level")] = None,
    counterfactual_k: Annotated[Optional[int], _opt("--counterfactual-k")] = None,
    sample_interval_ms: Annotated[Optional[float], _opt("--sample-interval-ms")] = None,
    timeseries_out: Annotated[Optional[Path], typer.Option("--timeseries-out", rich_help_panel=OUTPUT, help="write the time series (per instance and cluster: waiting, running, KV utilization, cumulative arrivals / completions / preemptions / rejections; README 'Time series') here (Parquet); sampled every --sample-interval-ms (default 100)")] = None,
    trace_out: Annotated[Optional[Path], typer.Option("--trace-out", rich_help_panel=OUTPUT, help="write the decision trace (admission, routing with every candidate's snapshot values and matched prefix blocks, preemption; with --trace-level full also the schedulers' admissions to the batch and blocked queue heads; filled with outcomes; README 'Decision trace') here (Parquet); implies --trace-level decisions")] = None,
    summarize_trace: Annotated[bool, typer.Option("--summarize-trace", rich_help_panel=OUTPUT, help="add the markdown trace summary (outcome, key issues, counterfactuals, worst decisions, suggested focus) to the output as summary_text; implies --trace-level decisions")] = False,
    evaluation_out: Annotated[Optional[Path], typer.Option("--evaluation-out", rich_help_panel=OUTPUT, help="write the evaluation (score in [0, 1], normalized objectives, metrics, policy and workload ids; README 'Evaluation') here (JSON; deterministic: no wall time)")] = None,
    results_path: Annotated[Optional[Path], typer.Option("--results-path", "--metrics-path", rich_help_panel=OUTPUT, help="write the cluster summary + per-request records (JSON) here (--metrics-path: BLIS's current name)")] = None,
    per_request_out: Annotated[Optional[Path], typer.Option("--per-request-out", rich_help_panel=OUTPUT, help="write the per-request table here; the suffix picks the format: .parquet, .csv or .jsonl (the fields of the --results-path records)")] = None,
    check_invariants: Annotated[bool, typer.Option("--check-invariants", rich_help_panel=SIMULATION, help="verify KV conservation and batch limits after every step (slow)")] = False,
    max_memory: Annotated[Optional[str], _opt("--max-memory")] = None,
    warmup_s: Annotated[Optional[float], _opt("--warmup-s")] = None,
    cooldown_s: Annotated[Optional[float], _opt("--cooldown-s")] = None,
    json_out: Annotated[bool, typer.Option("--json", rich_help_panel=OUTPUT, help="print the summary as JSON even on a terminal (it is JSON whenever stdout is not a terminal)")] = False,
    per_instance: Annotated[bool, typer.Option("--per-instance", rich_help_panel=OUTPUT, help=f"list every instance in the terminal summary (it lists them up to {PER_INSTANCE_LIMIT})")] = False,
    quiet: Quiet = False,
    verbose: Verbose = 0,
) -> None:
    """Simulate a cluster and print its summary on stdout: tables on a terminal, JSON
    (cluster + per instance) with --json or when stdout is a pipe or a file.

    With no options: llama-3.1-8b-instruct on one H100 (TP1, fitted coefficients),
    100 requests of the BLIS default distribution at 1 request/s.
    """
    overrides = {k: v for k, v in locals().items() if k in FLAG_PATHS and v is not None}
    if not check_invariants:
        overrides.pop("check_invariants", None)  # a YAML file may still turn it on
    bundle = load_policy_bundle(policy_config) if policy_config else None
    cfg = build_config(load_yaml(config) if config else {}, overrides, policy_settings=bundle,
                       policy_origin=f"--policy-config {policy_config}")
    cfg = with_analysis_outputs(cfg, trace_level=trace_level, sample_interval_ms=sample_interval_ms,
                                timeseries_out=timeseries_out, trace_out=trace_out, summarize_trace=summarize_trace)
    outputs = (("--results-path", results_path), ("--per-request-out", per_request_out),
               ("--evaluation-out", evaluation_out), ("--timeseries-out", timeseries_out), ("--trace-out", trace_out))
    # fail before simulating, not after; never overwrite an input or write two outputs to one file
    check_outputs(outputs, [("--config", config), ("--policy-config", policy_config)] + config_inputs(cfg))
    table_format = None
    if per_request_out is not None:
        from blis_fast.results.result import request_table_format  # deferred: blis_fast_kernels.native

        table_format = request_table_format(per_request_out, "--per-request-out")
    from blis_fast.run.api import run_config  # deferred: blis_fast.rng, blis_fast.run, blis_fast.workload (not loaded by blis-fast --help)

    # the output files hold one record per request: reserve their memory up front
    reserve = (RESULTS_BYTES_PER_REQUEST if results_path else 0) + (TABLE_BYTES_PER_REQUEST if per_request_out else 0)
    with feedback.progress("blis-fast run") as bar:
        result = run_config(cfg, output_bytes_per_request=reserve, progress=bar.report)
        _write_outputs(result, bar.report, results_path=results_path, per_request_out=per_request_out,
                       table_format=table_format, evaluation_out=evaluation_out, summarize_trace=summarize_trace,
                       timeseries_out=timeseries_out, trace_out=trace_out)
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


def _write_outputs(result, report, *, results_path, per_request_out, table_format, evaluation_out,
                   summarize_trace, timeseries_out, trace_out) -> None:
    """Write the run's output files (``report`` shows which on the progress bar)."""
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
