"""The ``blis-fast`` command line (typer).

Each command parses its options, calls one ``blis_fast`` function and writes JSON.
Every user error -- a bad flag value, a bad YAML key, a malformed trace -- ends with one
line ``error: <field>: <message>`` on stderr and exit code 2.
"""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Optional

import typer

from blis_fast.config.engine import EngineConfig
from blis_fast.config.sim import (
    FLAG_PATHS,
    DeploymentConfig,
    SimConfig,
    SimulationConfig,
    WorkloadConfig,
    build_config,
    load_yaml,
)
from blis_fast.errors import BlisFastError, ConfigError
from blis_fast.policy import PolicyConfig, load_policy_bundle

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: long BLIS flag names are never truncated
    help="blis-fast: fast, deterministic simulation of vLLM-style LLM inference clusters.",
)

_SECTION_CLASSES = {"engine": EngineConfig, "deployment": DeploymentConfig, "workload": WorkloadConfig,
                    "simulation": SimulationConfig, "policy": PolicyConfig}


def _help(flag: str) -> str:
    """Help text of a flat setting, taken from its dataclass field (one source of truth)."""
    section, _, name = FLAG_PATHS[flag].rpartition(".")
    cls = _SECTION_CLASSES.get(section, SimConfig)
    for f in fields(cls):
        if f.name == name:
            return f.metadata.get("help", "")
    return ""


def _opt(*names: str, flag: str | None = None, help: str | None = None):
    key = flag or names[0].lstrip("-").replace("-", "_")
    return typer.Option(*names, help=help if help is not None else _help(key), show_default=False)


@app.command()
def run(
    config: Annotated[Optional[Path], typer.Option("--config", help="YAML file with any of the settings below (flags override it)")] = None,
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
    enable_prefix_caching: Annotated[Optional[bool], typer.Option("--enable-prefix-caching/--disable-prefix-caching", help=_help("enable_prefix_caching"), show_default=False)] = None,
    admission_latency: Annotated[Optional[int], _opt("--admission-latency")] = None,
    routing_latency: Annotated[Optional[int], _opt("--routing-latency")] = None,
    compat: Annotated[Optional[str], _opt("--compat")] = None,
    policy_config: Annotated[Optional[Path], typer.Option("--policy-config", help="policy bundle YAML (admission, routing, priority, scheduler, preemption, observability, fitness); flags override it")] = None,
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
    results_path: Annotated[Optional[Path], typer.Option("--results-path", help="write the cluster summary + per-request records (JSON) here")] = None,
    per_request_out: Annotated[Optional[Path], typer.Option("--per-request-out", help="write the per-request table here (Parquet)")] = None,
    check_invariants: Annotated[bool, typer.Option("--check-invariants", help="verify KV conservation and batch limits after every step (slow)")] = False,
) -> None:
    """Simulate a cluster and print the summary JSON (cluster + per instance) on stdout.

    With no options: llama-3.1-8b-instruct on one H100 (TP1, fitted coefficients),
    100 requests of the BLIS default distribution at 1 request/s.
    """
    overrides = {k: v for k, v in locals().items() if k in FLAG_PATHS and v is not None}
    if not check_invariants:
        overrides.pop("check_invariants", None)  # a YAML file may still turn it on
    bundle = load_policy_bundle(policy_config) if policy_config else None
    cfg = build_config(load_yaml(config) if config else {}, overrides, policy_settings=bundle,
                       policy_origin=f"--policy-config {policy_config}")
    for flag, path in (("--results-path", results_path), ("--per-request-out", per_request_out)):
        _check_writable(flag, path)  # fail before simulating, not after
    from blis_fast.simulator import simulate

    result = simulate(cfg)
    try:
        if results_path:
            result.write_results(results_path)
        if per_request_out:
            result.write_parquet(per_request_out)
    except OSError as exc:
        raise ConfigError("--results-path" if results_path else "--per-request-out",
                          f"cannot write: {exc.strerror or exc}") from None
    typer.echo(json.dumps(result.summary(), indent=2, allow_nan=False))


def _check_writable(flag: str, path: Path | None) -> None:
    """ConfigError unless ``path`` can be created (its folder exists and is writable)."""
    import os

    if path is None:
        return
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ConfigError(flag, f"{path} is a directory")
    if not parent.is_dir():
        raise ConfigError(flag, f"folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ConfigError(flag, f"folder {parent} is not writable")


@app.command()
def bench(
    json_out: Annotated[bool, typer.Option("--json", help="print machine-readable JSON instead of a table")] = False,
    scenarios: Annotated[Optional[str], typer.Option("--scenarios", help="comma-separated subset: 1k, 10k, 100k")] = None,
    repeats: Annotated[int, typer.Option("--repeats", help="timed repetitions per scenario (best is reported)")] = 3,
    startup: Annotated[bool, typer.Option("--startup/--no-startup", help="also measure cold compile and cached start-up in fresh processes")] = True,
    calibrate: Annotated[bool, typer.Option("--calibrate", help="instead, re-measure one instance's saturation throughput and print the scenario rates at 80% load (JSON)")] = False,
) -> None:
    """Benchmark the standard scenarios: kernel seconds once compiled, simulated req/s and
    steps/s, plus cold-compile time and the start-up time of a cached process."""
    from blis_fast.bench import run_bench

    if calibrate:
        from blis_fast.bench import calibrate as _calibrate

        typer.echo(json.dumps(_calibrate(), indent=2))
        return
    report = run_bench(scenarios=scenarios.split(",") if scenarios else None, repeats=repeats, startup=startup)
    if json_out:
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo(report_table(report))


def report_table(report: dict) -> str:
    """Human-readable bench report."""
    from blis_fast.bench import format_report

    return format_report(report)


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
    from blis_fast.workload.trace_format import write_trace

    if seed is not None and seed < 0:
        from blis_fast.errors import ConfigError

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
    from blis_fast.workload.trace_format import stats_of_file

    if block_size < 1:
        from blis_fast.errors import ConfigError

        raise ConfigError("--block-size", f"must be >= 1, got {block_size}")
    typer.echo(json.dumps(stats_of_file(trace, block_size, seed), indent=2))


@app.command("clear-cache")
def clear_cache() -> None:
    """Delete numba's compiled-kernel cache (in $NUMBA_CACHE_DIR, or kernels/__pycache__)."""
    import os

    root = os.environ.get("NUMBA_CACHE_DIR")
    targets = [Path(root)] if root else [Path(__file__).resolve().parent.parent / "kernels" / "__pycache__"]
    removed = 0
    for t in targets:
        if t.is_dir():
            for p in t.rglob("*.nb[ic]"):
                p.unlink()
                removed += 1
    typer.echo(f"removed {removed} cache files from {', '.join(str(t) for t in targets)}")


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one-line errors with exit code 2."""
    args = sys.argv[1:] if argv is None else argv
    try:
        app(args, standalone_mode=False)
    except BlisFastError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    except (typer.Exit, SystemExit) as exc:
        raise SystemExit(getattr(exc, "exit_code", getattr(exc, "code", 0))) from None
    except Exception as exc:  # click usage errors (bad flag values, unknown options)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            msg = exc.format_message().replace("\n", " ")
            param = getattr(exc, "param", None)
            hint = getattr(exc, "param_hint", None)
            if msg.startswith("Invalid value for"):
                pass  # already names the option
            elif param is not None and getattr(param, "opts", None):
                msg = f"{param.opts[0]}: {msg}"
            elif hint:
                msg = f"{hint}: {msg}"
            typer.echo(f"error: {msg}", err=True)
            raise SystemExit(2) from None
        raise


if __name__ == "__main__":
    main()
