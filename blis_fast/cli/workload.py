"""``blis-fast workload generate | stats``: workload specs and rich traces."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer

from blis_fast.cli import feedback
from blis_fast.cli.app import Quiet, Verbose, app, number_option
from blis_fast.config.validate import INT64_MAX, as_choice, as_int
from blis_fast.config.memory import parse_bytes, memory_budget
from blis_fast.config.outputs import check_outputs, spec_files
from blis_fast.errors import WorkloadError

workload_app = typer.Typer(no_args_is_help=True, help="Workload specs and rich traces: generate a trace, summarize one.")
app.add_typer(workload_app, name="workload")

MAX_MEMORY_HELP = "memory budget, e.g. 4GB or 512MiB (default: half the machine's RAM)"


@workload_app.command("generate")
def workload_generate(
    spec: Annotated[Path, typer.Option("--spec", help="workload spec YAML (docs/workloads.md)")],
    out: Annotated[Path, typer.Option("--out", help="trace file to write (.parquet or .csv)")],
    seed: Annotated[Optional[str], number_option("--seed", help="seed (default: the spec's, else 42)")] = None,
    fmt: Annotated[Optional[str], typer.Option("--format", help="csv | parquet (default: from the --out extension)", show_default=False)] = None,
    max_memory: Annotated[Optional[str], number_option("--max-memory", help=MAX_MEMORY_HELP, metavar="SIZE")] = None,
    quiet: Quiet = False,
    verbose: Verbose = 0,
) -> None:
    """Generate the requests of a workload spec and write them as a rich trace (YAML
    header + CSV/Parquet table); prints a one-line JSON note."""
    from blis_fast.workload.formats.rich_trace import FORMATS, write_trace  # deferred: blis_fast.rng, blis_fast.workload (not loaded by blis-fast --help)

    seed_v = as_int(seed, "--seed", 0, INT64_MAX) if seed is not None else None
    if fmt is not None:
        as_choice(fmt, "--format", FORMATS)
    limit = parse_bytes(max_memory, "--max-memory") if max_memory is not None else None
    # never overwrite the spec or a file it names; the folder must exist (checked before generating)
    check_outputs([("--out", out)], [("--spec", spec)] + [("--spec", p) for p in spec_files(spec)])
    with memory_budget(limit, "--max-memory"), feedback.progress("generating the workload") as bar:
        req = spec_requests(spec, seed_v)
        bar.report(f"writing {out}", 0, None)
        path = write_trace(req, out, fmt)
    typer.echo(json.dumps({"out": str(path), "num_requests": len(req), "seed": req.header.get("seed")}))


def spec_requests(spec: Path, seed: int | None, num_requests: int | None = None):
    """The Requests of a workload spec as a rich trace holds them (``workload generate``,
    ``observe``): a model column when a client names a model; a spec with deadlines,
    shedding or retries is refused (a trace would silently drop them).  ``num_requests``
    keeps the first N (the spec's own ``num_requests`` otherwise)."""
    from blis_fast.config.flow_control import first_deadline_key  # deferred: blis_fast_kernels (not loaded by blis-fast --help)
    from blis_fast.workload.generate import generate_requests  # deferred: blis_fast.rng, blis_fast.workload (not loaded by blis-fast --help)
    from blis_fast.workload.spec import load_spec  # deferred: blis_fast.rng, blis_fast.workload (not loaded by blis-fast --help)

    spec_v = load_spec(spec)
    if num_requests is not None:
        spec_v = replace(spec_v, num_requests=num_requests)
    deadline_key = first_deadline_key(spec_v)
    if deadline_key is not None:  # (written without them, the trace would silently drop them)
        raise WorkloadError(deadline_key, "a rich trace does not carry deadlines, shedding or retries yet: run "
                                          "the spec itself (--workload-spec), or leave the key out")
    req = generate_requests(spec_v, seed)
    if any(c.model is not None for c in spec_v.clients):  # only then a model column (old traces unchanged)
        per_client = np.array([c.model or "" for c in spec_v.clients], dtype=object)
        req.model = per_client[req["client"]] if len(req) else np.zeros(0, dtype=object)
    return req


@workload_app.command("stats")
def workload_stats(
    trace: Annotated[Path, typer.Argument(help="rich trace (.parquet / blis-fast CSV), BLIS trace CSV, or a spec YAML")],
    block_size: Annotated[str, number_option("--block-size", help="KV block size for the prefix-sharing figures (tokens) [default: 16]")] = "16",
    seed: Annotated[Optional[str], number_option("--seed", help="seed when TRACE is a spec (default: the spec's)")] = None,
    max_memory: Annotated[Optional[str], number_option("--max-memory", help=MAX_MEMORY_HELP, metavar="SIZE")] = None,
    quiet: Quiet = False,
    verbose: Verbose = 0,
) -> None:
    """Summarize a workload as JSON: rates per client / tenant / SLO class, prompt and
    output length percentiles, sessions, and prefix sharing (ideal cache hit rate)."""
    from blis_fast.workload.stats import stats_of_file  # deferred: blis_fast.rng, blis_fast.workload (not loaded by blis-fast --help)

    bs = as_int(block_size, "--block-size", 1, 1024)
    seed_v = as_int(seed, "--seed", 0, INT64_MAX) if seed is not None else None
    limit = parse_bytes(max_memory, "--max-memory") if max_memory is not None else None
    with memory_budget(limit, "--max-memory"), feedback.progress(f"reading {trace}"):
        stats = stats_of_file(trace, bs, seed_v)
    typer.echo(json.dumps(stats, indent=2))
