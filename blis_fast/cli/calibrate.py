"""``blis-fast replay T.parquet`` and ``blis-fast calibrate --observed T.parquet``
(docs/calibrate.md).

``replay`` IS ``blis-fast run`` of the recording (a rich trace): ``run``'s options, with the
workload fixed to the trace, and ``run``'s own code doing the work -- so its output is
byte for byte that of ``blis-fast run --workload traces --workload-traces-filepath T``.
``calibrate`` compares the recording's latencies with a simulation of its requests
(blis_fast.studies.calibrate) and, with ``--fit``, fits α/β from it.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from blis_fast.cli import feedback
from blis_fast.cli.app import Quiet, Verbose, app, number_option, printable_path
from blis_fast.cli.output import wants_json
from blis_fast.cli.run import run
from blis_fast.cli.runflags import SINGLE_RUN_OUTPUTS, config_from_flags, input_paths, with_run_flags
from blis_fast.config.outputs import check_outputs
from blis_fast.config.sim import load_yaml
from blis_fast.config.validate import as_float, show
from blis_fast.errors import ConfigError

# the settings that pick the workload: a replay's and a calibration's is the recording
WORKLOAD_CHOICE = ("workload", "workload_traces_filepath", "workload_spec")
# a calibration compares every completed request of the recording: no request cap, no
# measurement window
NOT_CALIBRATION_SETTINGS = ("num_requests", "warmup_s", "cooldown_s")
MAX_STEP_TOLERANCE_MS = 60_000.0
FIT_METHODS = ("replay", "steps")  # (blis_fast.studies.calibrate.FIT_METHODS, not imported here: it loads numpy)


def _trace_settings(path: Path) -> dict:
    return {"workload": "traces", "workload_traces_filepath": str(path)}


def _check_no_spec(run_flags: dict, flag: str) -> None:
    """A --config naming a workload spec would replace the recording (a spec wins over a
    trace): refused."""
    if run_flags.get("config") is None:
        return
    section = load_yaml(run_flags["config"]).get("workload")
    if isinstance(section, dict) and section.get("spec_filepath") is not None:
        raise ConfigError("workload.spec_filepath", f"{flag} runs the recording; drop the workload spec from "
                                                    f"{show(str(run_flags['config']))}")


def replay(trace: Path, **options) -> None:
    """Replay a recording (or any rich trace) through the simulator: blis-fast run of its
    requests, arrivals and lengths as recorded, with the engine of the settings given.
    Prints what blis-fast run prints."""
    settings = _trace_settings(trace)
    _check_no_spec({**options, **settings}, "blis-fast replay")
    run(**options, **settings)


def _replay_signature() -> inspect.Signature:
    """The trace argument, then ``run``'s options but those choosing the workload."""
    argument = inspect.Parameter("trace", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Annotated[
        Path, typer.Argument(metavar="T.parquet", help="the recording (blis-fast observe --out) or any rich trace",
                             show_default=False)])
    own = [p for p in inspect.signature(run).parameters.values() if p.name not in WORKLOAD_CHOICE]
    return inspect.Signature([argument, *own])


replay.__signature__ = _replay_signature()
replay.__annotations__ = {p.name: p.annotation for p in replay.__signature__.parameters.values()}
app.command(help=replay.__doc__)(replay)


@app.command()
@with_run_flags(exclude=SINGLE_RUN_OUTPUTS + WORKLOAD_CHOICE + NOT_CALIBRATION_SETTINGS)
def calibrate(
    observed: Annotated[Path, typer.Option("--observed", metavar="T.parquet", show_default=False,
                                           help="the recording (blis-fast observe --out)")],
    fit: Annotated[bool, typer.Option("--fit", help="fit α/β from the recording (one instance) and compare again "
                                                     "with them")] = False,
    fit_out: Annotated[Optional[Path], typer.Option("--fit-out", metavar="F.yaml", help="write the fitted set here "
                                                    "(a coefficients file: a models: entry as in "
                                                    "configs/defaults.yaml); needs --fit")] = None,
    fit_method: Annotated[str, typer.Option("--fit-method", metavar="replay|steps", help="--fit: how. replay: "
                                            "replay the recording through the simulator and fit each request's "
                                            "decode time and TTFT (any instance count; robust to a client's timing "
                                            "jitter). steps: rebuild the engine's steps from the token times (one "
                                            "instance; needs token times precise to well under a step)")] = "replay",
    step_tolerance_ms: Annotated[Optional[str], number_option(
        "--step-tolerance-ms", metavar="FLOAT", help="--fit: token times closer than this to the previous one belong "
                                                     "to the same engine step: above the recording's timing jitter, "
                                                     "below the shortest step (default: half the 1st percentile of "
                                                     "the gaps between two tokens of one request)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON (it is JSON whenever stdout "
                                                         "is not a terminal)")] = False,
    quiet: Quiet = False,
    verbose: Verbose = 0,
    run_flags: dict = None,
) -> None:
    """Compare a recording's TTFT, ITL and E2E with a simulation of its requests (mean,
    p50, p90, p99, per-request MAPE, Pearson r, bias, a grade A-D); with --fit, fit α/β
    from it and compare again.  docs/calibrate.md."""
    from blis_fast.studies.calibrate import calibrate as run_calibration, write_coefficients  # deferred: numpy, pyarrow

    if fit_out is not None and not fit:
        raise ConfigError("--fit-out", "needs --fit (it writes the fitted coefficients)")
    if fit_method not in FIT_METHODS:
        raise ConfigError("--fit-method", f"must be one of {', '.join(FIT_METHODS)}, got {show(fit_method)}")
    if fit_method != "replay" and not fit:
        raise ConfigError("--fit-method", "needs --fit (it chooses how the fit is done)")
    if step_tolerance_ms is not None and (not fit or fit_method != "steps"):
        raise ConfigError("--step-tolerance-ms", "needs --fit --fit-method steps (it groups token times into steps "
                                                 "for that fit)")
    tolerance_us = None
    if step_tolerance_ms is not None:
        tolerance_us = round(1000 * as_float(step_tolerance_ms, "--step-tolerance-ms", 0.0, MAX_STEP_TOLERANCE_MS,
                                             lo_open=True))
        if tolerance_us < 1:
            raise ConfigError("--step-tolerance-ms", f"must be at least 0.001 (1 µs), got {show(step_tolerance_ms)}")
    flags = {**run_flags, **_trace_settings(observed)}
    _check_no_spec(flags, "blis-fast calibrate")
    cfg = config_from_flags(flags)
    for path, value, unset in (("workload.num_requests", cfg.workload.num_requests, None),
                               ("simulation.warmup_s", cfg.simulation.warmup_s, 0.0),
                               ("simulation.cooldown_s", cfg.simulation.cooldown_s, 0.0)):
        if value != unset:  # (only a --config file can set them here)
            raise ConfigError(path, "a calibration compares every completed request of the recording; drop it "
                                    "from the config")
    check_outputs([("--fit-out", fit_out)], [("--observed", observed)] + input_paths(run_flags, cfg))
    with feedback.progress("blis-fast calibrate") as bar:
        bar.report("simulating the recording", 0, None)
        report = run_calibration(cfg, observed, fit=fit, step_tolerance_us=tolerance_us, fit_method=fit_method)
        if fit_out is not None:
            bar.report(f"writing {fit_out}", 0, None)
            write_coefficients(fit_out, report["coefficients_set"])
            report["fit_out"] = str(fit_out)
    if wants_json(as_json):
        typer.echo(json.dumps(report, indent=2, allow_nan=False))
    else:
        typer.echo(render_report(report, observed))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f} %"


def _comparison_lines(doc: dict) -> list[str]:
    lines = [f"  {'':12}{'observed ms':>14}{'simulated ms':>14}{'error':>10}"]
    for name in ("ttft", "itl", "e2e"):
        m = doc[name]
        if not m.get("count"):
            lines.append(f"  {name.upper():12}(no request to compare)")
            continue
        for stat in ("mean", "p50", "p90", "p99"):
            lines.append(f"  {name.upper() + ' ' + stat:12}{m['observed_ms'][stat]:>14.3f}"
                         f"{m['simulated_ms'][stat]:>14.3f}{_pct(m['relative_error'][stat]):>10}")
        r = "-" if m["pearson_r"] is None else f"{m['pearson_r']:.3f}"
        lines.append(f"  {'':12}per request ({m['count']}): MAPE {100 * m['mape']:.1f} %, r {r}, "
                     f"bias {_pct(m['bias'])}; grade {m['grade']}")
    lines.append(f"  overall grade {doc['grade']}")
    return lines


def render_report(report: dict, observed: Path) -> str:
    """The calibration report as text for a terminal."""
    rec = report["recording"]
    before = report["coefficients_before"]
    lines = [f"calibration of {printable_path(observed)}: {rec['requests']} requests, {rec['completed']} completed, "
             f"{report['before']['requests_compared']} compared",
             f"before: {before['latency_model']} alpha {before['alpha_coeffs']} beta {before['beta_coeffs']}",
             *_comparison_lines(report["before"])]
    if "fitted" in report:
        fitted = report["fitted"]
        fit = report["fit"]
        if "steps_fitted" in fit:  # (--fit-method steps)
            how = f"{fit['steps_fitted']} steps; alpha from {fit['alpha_source']}, {fit['alpha_requests']} requests"
        else:
            how = (f"{fit['replays']} replays, {fit['requests_beta']} requests' decode times; alpha from "
                   f"{fit['alpha_source']}, {fit['requests_alpha']} requests")
        lines += [f"fitted ({fit['method']}, {how}): "
                  f"alpha {[round(a, 3) for a in fitted['alpha_coeffs']]} "
                  f"beta {[round(b, 3) for b in fitted['beta_coeffs']]}",
                  *(f"  note: {n}" for n in report["fit"]["notes"]),
                  "after (fitted coefficients):", *_comparison_lines(report["after"])]
        if "fit_out" in report:
            lines.append(f"wrote {printable_path(report['fit_out'])}")
    return "\n".join(lines)
