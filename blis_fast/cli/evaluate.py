"""``blis-fast evaluate``: every policy candidate on every scenario (blis_fast.batch), the
rows written as Parquet, a ranking printed on stdout."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from blis_fast.cli.app import Quiet, Verbose, app, number_option
from blis_fast.config.validate import as_float, as_int, show, show_text
from blis_fast.errors import ConfigError
from blis_fast.cli.feedback import logger, progress
from blis_fast.config.outputs import atomic_write, check_outputs, config_inputs

MESSAGE_CHARS = 70  # of a failed candidate's message in the ranking
NAME_CHARS = 60  # of a candidate's name in the ranking


@app.command()
def evaluate(
    policies: Annotated[list[Path], typer.Option("--policies", metavar="FILE_OR_DIR", help="candidate files (.yaml/.yml policy bundles, .py programs with get_policy()) or folders of them; repeatable")],
    scenarios: Annotated[Path, typer.Option("--scenarios", metavar="FILE", help="scenarios YAML: scenarios: [{name, config, workload_spec|trace, seed, slo_classes, objectives}], objectives:, budget: (configs/evaluate/scenarios.yaml)")],
    out: Annotated[Path, typer.Option("--out", metavar="FILE", help="write one row per (candidate, scenario) here (Parquet): score, objectives, metrics, status, message")],
    workers: Annotated[Optional[str], number_option("--workers", help="threads evaluating in parallel (default: all cores; 1 = serial)")] = None,
    dask_scheduler: Annotated[Optional[str], typer.Option("--dask-scheduler", metavar="ADDR", help="evaluate on a Dask cluster instead: scheduler address tcp://HOST:PORT or tls://HOST:PORT, reached within $BLIS_FAST_DASK_TIMEOUT_S seconds (default 10) (extra blis-fast[distributed])", show_default=False)] = None,
    objectives: Annotated[Optional[str], typer.Option("--objectives", metavar="SPEC", help="default objectives of scenarios that set none, e.g. 'ttft_p99_ms:min:200,slo_attainment:max' (overrides the file's)", show_default=False)] = None,
    max_events: Annotated[Optional[str], number_option("--max-events", help="budget per evaluation: events (overrides the file's budget)")] = None,
    max_simulated_s: Annotated[Optional[str], number_option("--max-simulated-s", help="budget per evaluation: simulated seconds", metavar="FLOAT")] = None,
    max_wall_s: Annotated[Optional[str], number_option("--max-wall-s", help="budget per evaluation: wall-clock seconds (default 60)", metavar="FLOAT")] = None,
    summaries: Annotated[bool, typer.Option("--summaries", help="add each run's trace-summary text (column summary_text)")] = False,
    top: Annotated[Optional[str], number_option("--top", help="rows of the printed ranking (default 20; 0 = all)")] = None,
    program_timeout_s: Annotated[Optional[str], number_option("--program-timeout-s", help="seconds each .py program may take to return its policy (default 10, at most 3600)", metavar="FLOAT")] = None,
    quiet: Quiet = False,
    verbose: Verbose = 0,
) -> None:
    """Evaluate policy candidates on scenarios in parallel.  Writes one Parquet row per
    (candidate, scenario) and prints the candidates ranked by mean score.  Candidates
    that fail (malformed, over budget) get score 0 and a message; the command still
    exits 0."""
    from blis_fast.batch.budget import Budget  # deferred: blis_fast.batch (not loaded by blis-fast --help)
    from blis_fast.batch.candidates import PROGRAM_SUFFIXES, candidate_files  # deferred: blis_fast.batch (not loaded by blis-fast --help)
    from blis_fast.batch.program import MAX_TIMEOUT_S  # deferred: blis_fast.batch (not loaded by blis-fast --help)
    from blis_fast.batch.scenarios import load_scenarios_file, scenario_error  # deferred: blis_fast.batch (not loaded by blis-fast --help)
    from blis_fast.results.objectives import parse_objectives  # deferred: blis_fast_kernels.native

    n_workers = as_int(workers, "--workers", 1, 1024) if workers is not None else None
    if dask_scheduler is not None:
        from blis_fast.batch.scheduler import parse_scheduler_address, timeout_from_env  # deferred: blis_fast.batch (not loaded by blis-fast --help)

        parse_scheduler_address(dask_scheduler)  # before anything is read or connected
        timeout_from_env()
    if n_workers is not None and dask_scheduler is not None:
        raise ConfigError("--workers", "give --workers or --dask-scheduler, not both (Dask workers set their own)")
    n_top = as_int(top, "--top", 0, 10**9) if top is not None else 20
    timeout_s = as_float(program_timeout_s, "--program-timeout-s", 0, MAX_TIMEOUT_S, lo_open=True) \
        if program_timeout_s is not None else None
    files = candidate_files(policies)
    scen, file_objectives, file_budget = load_scenarios_file(scenarios)
    budget = dict(Budget.parse(file_budget, f"--scenarios {scenarios.name}: budget").to_dict())
    if max_events is not None:
        budget["max_events"] = as_int(max_events, "--max-events", 1, 2**62)
    if max_simulated_s is not None:
        budget["max_simulated_s"] = as_float(max_simulated_s, "--max-simulated-s", 0, 1e12, lo_open=True)
    if max_wall_s is not None:
        budget["max_wall_s"] = as_float(max_wall_s, "--max-wall-s", 0, 1e7, lo_open=True)
    default_objectives = parse_objectives(objectives, "--objectives") if objectives is not None else file_objectives
    inputs = [("--scenarios", scenarios)] + [("--policies", f) for f in files]
    for s in scen:
        if s.config_file is not None:
            inputs.append((f"scenario {show(s.name, 80)}: config", s.config_file))
        try:
            inputs += config_inputs(s.config)
        except ConfigError as exc:  # e.g. a workload spec that does not exist
            raise scenario_error(s.name, exc) from None
    check_outputs([("--out", out)], inputs)  # before anything is evaluated

    if verbose and any(f.suffix in PROGRAM_SUFFIXES for f in files):
        _log_sandbox()
    executor, client = (None, None)
    if dask_scheduler is not None:
        executor, client = dask_executor(dask_scheduler)
    try:
        batch = _run(files, scen, default_objectives, Budget.parse(budget), n_workers, executor, summaries,
                     timeout_s)
    finally:
        if client is not None:
            client.close()
    import pyarrow.parquet as pq  # deferred: pyarrow

    atomic_write(out, lambda p: pq.write_table(batch.table, str(p)), "--out")
    typer.echo(ranking_text(batch.table, n_top))


def _run(files, scen, objectives, budget, workers, executor, summaries, program_timeout_s=None):
    from blis_fast.batch.evaluate import evaluate_many  # deferred: blis_fast.batch (not loaded by blis-fast --help)

    n = len(files) * len(scen)
    with _progress(n) as report:
        return evaluate_many(files, scen, objectives=objectives, budget=budget, workers=workers, executor=executor,
                             summarize=summaries, progress=report, program_timeout_s=program_timeout_s)


def _log_sandbox() -> None:
    """With -v: the layers of the policy programs' sandbox on this machine."""
    from blis_fast.batch.program import ProgramError, sandbox_status_text  # deferred: blis_fast.batch (not loaded by blis-fast --help)

    try:
        logger.info("blis-fast: policy program sandbox:\n" + sandbox_status_text())
    except ProgramError as exc:
        logger.info(f"blis-fast: policy program sandbox: {exc}")


def _progress(total: int):
    """A progress bar on stderr (blis_fast.cli.feedback) whose ``report(done, total)`` the
    batch calls."""
    @contextmanager
    def bar():
        with progress("evaluating", total, unit="runs") as b:
            yield lambda done, _total: b.update(done)

    return bar()


def dask_executor(address: str):
    """(executor, client) of the Dask scheduler at ``address``
    (``blis_fast.batch.scheduler.connect``: the address checked, the connection bounded by
    $BLIS_FAST_DASK_TIMEOUT_S, default 10 s); ConfigError naming --dask-scheduler."""
    from blis_fast.batch.scheduler import connect  # deferred: blis_fast.batch (not loaded by blis-fast --help)

    client = connect(address)
    return client.get_executor(), client


def ranking_text(table, top: int = 20) -> str:
    """Candidates ranked by mean score over the scenarios (a failed evaluation counts 0;
    ties by name): rank, candidate, mean and min score, evaluations ok, first failure."""
    rows = table.select(["candidate", "score", "status", "message"]).to_pylist()
    by: dict[str, list] = {}
    for r in rows:
        by.setdefault(r["candidate"], []).append(r)
    ranked = sorted(by.items(), key=lambda kv: (-sum(r["score"] for r in kv[1]) / len(kv[1]), kv[0]))
    shown = ranked if top == 0 else ranked[:top]
    names = [show_text(c, NAME_CHARS) for c, _ in shown]  # user text: shortened, control characters escaped
    width = max([len("candidate")] + [len(c) for c in names])
    lines = [f"{'rank':>4}  {'candidate':<{width}}  {'mean':>6}  {'min':>6}  {'ok':>7}  note"]
    for k, (cand, (_, rs)) in enumerate(zip(names, shown), 1):
        scores = [r["score"] for r in rs]
        ok = sum(r["status"] == "ok" for r in rs)
        bad = next((r for r in rs if r["status"] != "ok"), None)
        note = "" if bad is None else show_text(f"{bad['status']}: {bad['message']}", MESSAGE_CHARS)
        lines.append(f"{k:>4}  {cand:<{width}}  {sum(scores) / len(scores):6.3f}  {min(scores):6.3f}  "
                     f"{f'{ok}/{len(rs)}':>7}  {note}")
    if len(shown) < len(ranked):
        lines.append(f"({len(ranked) - len(shown)} more candidates in the output file)")
    return "\n".join(lines)
