"""``blis-fast observe``: replay a workload against an OpenAI-compatible endpoint and record
what it saw (docs/observe.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from blis_fast.cli import feedback
from blis_fast.cli.app import OUTPUT, Quiet, Verbose, app, number_option, printable_path
from blis_fast.cli.output import summary_json, wants_json
from blis_fast.config.validate import INT64_MAX, MAX_REQUESTS, as_int, show
from blis_fast.errors import ConfigError

SAVE_GRACE_S = 10.0  # after Ctrl-C: time to cancel the requests in flight and write the recording


def _require_serve_extra() -> None:
    """One line (exit 2) when httpx is missing, before anything is read or sent."""
    try:
        import httpx  # noqa: F401  # deferred: httpx (the serve extra), only checked here
    except ImportError:
        raise ConfigError("blis-fast observe needs the serve extra", 'pip install "blis-fast[serve]"') from None


def _trace_requests(trace: Path, num_requests: int | None):
    from blis_fast.observe.observer import first_requests  # deferred: numpy, blis_fast.workload (not loaded by blis-fast --help)
    from blis_fast.workload.formats.rich_trace import is_rich_trace, read_trace  # deferred: blis_fast.workload (not loaded by blis-fast --help)

    if trace.is_file() and not is_rich_trace(trace):
        raise ConfigError("--trace", f"{show(str(trace))} is not a rich trace (.parquet, or a CSV starting with "
                                     "'# blis-fast-trace'; write one with blis-fast workload generate)")
    req = read_trace(trace)[0]
    return first_requests(req, num_requests) if num_requests is not None else req


def _human(summary: dict) -> str:
    errors = ", ".join(f"{k} {v}" for k, v in summary["errors"].items()) or "none"
    lines = [f"observed {summary['sent']} of {summary['requests']} requests -> {printable_path(summary['out'])}",
             f"  ok {summary['ok']}, errors: {errors}, timed out {summary['timed_out']}"]
    for name in ("ttft_ms", "e2e_ms"):
        p = summary[name]
        if p["p50"] is not None:
            lines.append(f"  {name[:-3].upper()} p50 {p['p50']:.1f} ms, p99 {p['p99']:.1f} ms (observed)")
    return "\n".join(lines)


@app.command("observe")
def observe_command(
    endpoint: Annotated[str, typer.Option("--endpoint", help="the server, http(s)://host:port (a trailing /v1 is allowed)")],
    out: Annotated[Path, typer.Option("--out", help="the recording to write (.parquet): a rich trace of the requests sent with what was seen of each")],
    workload_spec: Annotated[Optional[Path], typer.Option("--workload-spec", help="workload spec YAML to replay (docs/workloads.md)")] = None,
    trace: Annotated[Optional[Path], typer.Option("--trace", help="rich trace to replay (.parquet / blis-fast CSV)")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="served model to ask for (default: the first GET /v1/models lists)")] = None,
    time_scale: Annotated[str, number_option("--time-scale", help="K: request k is sent arrival_us[k] / K after the start and recorded times are multiplied by K, (0, 1000] [default: 1]", metavar="FLOAT")] = "1",
    concurrency: Annotated[str, number_option("--concurrency", help="requests in flight at most (more wait), 1..10000 [default: 256]")] = "256",
    timeout_s: Annotated[str, number_option("--timeout-s", help="wall seconds a request may take from its send, (0, 3600] [default: 300]", metavar="FLOAT")] = "300",
    num_requests: Annotated[Optional[str], number_option("--num-requests", help="send only the first N requests")] = None,
    seed: Annotated[Optional[str], number_option("--seed", help="seed of the spec's requests (default: the spec's, else 42)")] = None,
    api: Annotated[str, typer.Option("--api", help="completions (/v1/completions, prompt as token ids) | chat (/v1/chat/completions)")] = "completions",
    server_flag: Annotated[Optional[list[str]], typer.Option("--server-flag", help="how the server was started (repeatable; recorded in the header's server_flags)")] = None,
    json_out: Annotated[bool, typer.Option("--json", rich_help_panel=OUTPUT, help="print the summary as JSON even on a terminal (it is JSON whenever stdout is not a terminal)")] = False,
    quiet: Quiet = False,
    verbose: Verbose = 0,
) -> None:
    """Send a workload's requests to an OpenAI-compatible endpoint on their schedule
    (streaming, prompt as token ids, exactly the request's output tokens) and record each
    request's send time, token times, usage, status and error in a rich trace (Parquet);
    prints a summary: sent, ok, errors by kind, timed out, observed TTFT / E2E p50, p99.
    Ctrl-C writes what it has and exits 130."""
    from blis_fast.config.outputs import check_outputs, spec_files  # deferred: yaml (not loaded by blis-fast --help)
    from blis_fast.observe.observer import observe  # deferred: numpy, blis_fast.workload (not loaded by blis-fast --help)
    from blis_fast.observe.settings import ObserveSettings  # deferred: numpy (not loaded by blis-fast --help)
    from blis_fast.cli.workload import spec_requests  # deferred: numpy, blis_fast.workload (not loaded by blis-fast --help)

    settings = ObserveSettings(endpoint, model, time_scale, concurrency, timeout_s, api, tuple(server_flag or ()))
    n_v = as_int(num_requests, "--num-requests", 1, MAX_REQUESTS) if num_requests is not None else None
    if (workload_spec is None) == (trace is None):
        raise ConfigError("--workload-spec", "give exactly one of --workload-spec and --trace")
    if seed is not None and workload_spec is None:
        raise ConfigError("--seed", "applies to --workload-spec only (a trace's requests are fixed)")
    seed_v = as_int(seed, "--seed", 0, INT64_MAX) if seed is not None else None
    if out.suffix.lower() not in (".parquet", ".pq"):
        raise ConfigError("--out", f"an observed recording is a Parquet file (.parquet), got {show(str(out))}")
    inputs = [("--workload-spec", workload_spec)] + [("--workload-spec", p) for p in spec_files(workload_spec)] \
        if workload_spec is not None else [("--trace", trace)]
    check_outputs([("--out", out)], inputs)  # never over an input; the folder must exist
    _require_serve_extra()
    req = spec_requests(workload_spec, seed_v, n_v) if workload_spec is not None else _trace_requests(trace, n_v)
    with feedback.saving_on_interrupt(SAVE_GRACE_S), \
            feedback.progress(f"observing {settings.endpoint}", total=len(req), unit="requests") as bar:
        result = observe(req, settings, out, on_done=bar.advance)
    summary = {"out": str(result.path), **result.summary}
    typer.echo(summary_json(summary) if wants_json(json_out) else _human(summary))
    for notice in result.notices:  # (after the result; --quiet drops them)
        feedback.logger.warning(f"blis-fast: warning: {notice}")
