"""The autoscaling study of docs/autoscaling.md: diurnal.yaml on the compressed day of
diurnal-day.yaml, and a sweep of the threshold autoscaler's settings beside static fleets.

It reads what the kernel records -- the lifecycle log (one row per instance entering a
lifecycle state) and the tick log.  ``timeline`` runs diurnal.yaml, prints its lifecycle
changes and, with ``--plot``, draws the instance counts over the day.  ``sweep`` runs every
(up, down) pair of ``THRESHOLDS`` on in-flight requests per instance, and fleets of 1 to 8
instances without an autoscaler (``STATIC_FLEETS``); for each it prints a Markdown row --
GPU-hours, SLO attainment, TTFT p99, the largest pool and the scale-ups -- and, with
``--plot``, draws SLO attainment and TTFT p99 against GPU-hours -- the results' billing
(blis_fast.results.autoscale: an instance holds its GPUs from the start of its
provisioning, or from 0 for the initial ones, until it is terminated or the run ends,
times its TP; a fixed fleet is billed the same way).  Run from the repository root:

    python configs/examples/autoscaling/study.py timeline --plot autoscaling-diurnal.png
    python configs/examples/autoscaling/study.py sweep --plot autoscaling-sweep.png
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import blis_fast
from blis_fast.config.validate import MAX_REQUESTS, as_int
from blis_fast.errors import ConfigError
from blis_fast.studies.script import OneLineParser
from blis_fast.results.autoscale import billing
from blis_fast.studies.plots import check_plot_path, save
from blis_fast.studies.runs import check_jobs
from blis_fast_kernels.schema.enums import LIFE_STATE_NAMES

HERE = Path(__file__).parent
CONFIG = HERE / "diurnal.yaml"
SPEC = HERE / "diurnal-day.yaml"
# (up, down) in-flight requests per serving instance; (40, 15) is diurnal.yaml's
THRESHOLDS = ((10, 4), (20, 8), (30, 10), (40, 15), (40, 25), (60, 20), (60, 40), (80, 30), (120, 40))
STATIC_FLEETS = (1, 2, 3, 4, 5, 6, 7, 8)

STATE = {name: k for k, name in enumerate(LIFE_STATE_NAMES)}
# lifecycle states whose instance holds (and is billed for) its GPUs; counted as "current"
# by the autoscaler (not draining); taking requests
HELD = [STATE[s] for s in ("provisioning", "loading", "warming", "active", "draining")]
CURRENT = [STATE[s] for s in ("provisioning", "loading", "warming", "active")]
SERVING = [STATE[s] for s in ("warming", "active")]


def lifecycle_log(result) -> np.ndarray:
    """The run's lifecycle records (time_us, instance, state), in time order."""
    st = result.state
    return st.life_log[: int(st.loop[0]["life_records"])]


def instance_timeline(result) -> tuple[np.ndarray, np.ndarray]:
    """(times in s, counts): ``counts[k, s]`` instances are in lifecycle state s from
    ``times[k]`` on; the first row is the start, the last the run's end.  An instance whose
    first record is not ``provisioning`` was serving from the start; one without records
    kept its final state all run (a pool that never scaled, or a run without autoscaler)."""
    st = result.state
    log = lifecycle_log(result)
    state = st.life["state"].copy()  # the final states; walked back to the start below
    seen = np.zeros(len(state), bool)
    for rec in log:
        i = int(rec["instance"])
        if not seen[i]:
            seen[i] = True
            state[i] = STATE["off"] if int(rec["state"]) == STATE["provisioning"] else STATE["active"]
    counts = [np.bincount(state, minlength=len(LIFE_STATE_NAMES))]
    times = [0.0]
    for rec in log:
        state[int(rec["instance"])] = int(rec["state"])
        counts.append(np.bincount(state, minlength=len(LIFE_STATE_NAMES)))
        times.append(int(rec["time_us"]) / 1e6)
    times.append(int(st.loop[0]["clock_us"]) / 1e6)
    counts.append(counts[-1])
    return np.array(times), np.array(counts)


def gpu_hours(result) -> float:
    """GPU-hours held (the results' billing, docs/autoscaling.md "Billing"; a fixed fleet is
    billed too)."""
    return billing(result)[0]


def run_diurnal(num_requests: int | None = None, **settings) -> blis_fast.Result:
    """diurnal.yaml on diurnal-day.yaml (its first ``num_requests`` requests if given)."""
    extra = {"num_requests": num_requests} if num_requests else {}
    return blis_fast.simulate(config=str(CONFIG), workload_spec=str(SPEC), **extra, **settings)


def static_config(instances: int) -> dict:
    """diurnal.yaml's deployment as a fixed fleet of ``instances``: no autoscaler, no bounds,
    no autoscale section (settings a run without autoscaler refuses)."""
    cfg = blis_fast.load_yaml(CONFIG)
    cfg["deployment"] = {"num_instances": instances}
    cfg["policy"] = {k: v for k, v in cfg["policy"].items() if not k.startswith("autoscale")}
    cfg.pop("autoscale", None)
    return cfg


def measure(point: tuple, num_requests: int | None) -> dict:
    """One sweep point: ("threshold", up, down) or ("static", instances)."""
    if point[0] == "threshold":
        r = run_diurnal(num_requests, autoscale_up=point[1], autoscale_down=point[2])
    else:
        extra = {"num_requests": num_requests} if num_requests else {}
        r = blis_fast.simulate(config=static_config(point[1]), workload_spec=str(SPEC), **extra)
    _, counts = instance_timeline(r)
    m = r.evaluation_metrics
    return {"gpu_hours": gpu_hours(r), "slo_attainment": m["slo_attainment"], "ttft_p99_ms": m["ttft_p99_ms"],
            "max_instances": int(counts[:, HELD].sum(axis=1).max()),
            "scale_ups": int(np.count_nonzero(lifecycle_log(r)["state"] == STATE["provisioning"]))}


def sweep_points() -> list[tuple]:
    return [("threshold", up, down) for up, down in THRESHOLDS] + [("static", n) for n in STATIC_FLEETS]


def run_sweep(num_requests: int | None = None, jobs: int = 2) -> dict[tuple, dict]:
    """{point: measures} over ``sweep_points()``."""
    points = sweep_points()
    with ThreadPoolExecutor(jobs) as pool:  # the event loop releases the GIL
        return dict(zip(points, pool.map(lambda p: measure(p, num_requests), points)))


def point_label(point: tuple) -> str:
    return f"up {point[1]:g} / down {point[2]:g}" if point[0] == "threshold" else f"{point[1]} static"


def table(sweep: dict) -> str:
    """The sweep as a Markdown table, one row per point."""
    head = ["run", "gpu_hours", "slo_attainment", "ttft_p99_ms", "max_instances", "scale_ups"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for point, m in sweep.items():
        lines.append(f"| {point_label(point)} | {m['gpu_hours']:.1f} | {100 * m['slo_attainment']:.1f} % | "
                     f"{m['ttft_p99_ms']:,.0f} | {m['max_instances']} | {m['scale_ups']} |")
    return "\n".join(lines)


def timeline_figure(result, path: Path) -> None:
    """Instances over the day -- held (billed), current (the autoscaler's count) and
    serving -- over the arrival rate per minute."""
    import matplotlib.pyplot as plt  # deferred: matplotlib (check_plot_path has chosen its file-only backend)

    times, counts = instance_timeline(result)
    fig, ax = plt.subplots(figsize=(11, 4.8))
    minutes = times / 60
    for states, label, color in ((HELD, "held (GPUs billed)", "tab:gray"), (CURRENT, "current (not draining)",
                                 "tab:orange"), (SERVING, "serving (warming or active)", "tab:blue")):
        ax.step(minutes, counts[:, states].sum(axis=1), where="post", label=label, color=color, lw=1.8)
    ax.set_xlabel("simulated time (min)")
    ax.set_ylabel("instances (4 x H100 each)")
    ax.set_ylim(0, counts[:, HELD].sum(axis=1).max() + 1)
    ax.grid(True, alpha=0.3)
    rate = ax.twinx()
    arrivals_min = result.state.reqs["arrival_us"] / 60e6
    bins = np.arange(0, np.ceil(minutes[-1]) + 1)
    per_min, _ = np.histogram(arrivals_min, bins)
    rate.plot(bins[:-1] + 0.5, per_min / 60, color="tab:green", alpha=0.6, lw=1, label="arrivals (req/s)")
    rate.set_ylabel("arrival rate (req/s, per minute)")
    rate.set_ylim(0, max(1, per_min.max() / 60) * 1.1)
    lines = ax.get_legend_handles_labels()[0] + rate.get_legend_handles_labels()[0]
    ax.legend(lines, [ln.get_label() for ln in lines], loc="upper left", fontsize=8)
    ax.set_title("diurnal.yaml on diurnal-day.yaml: threshold autoscaler (in-flight per instance, up 40 / down 15)")
    fig.tight_layout()
    save(fig, path)


def sweep_figure(sweep: dict, path: Path) -> None:
    """SLO attainment and TTFT p99 against GPU-hours: threshold settings and static fleets."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, metric, ylabel in ((axes[0], "slo_attainment", "SLO attainment (TTFT 1 s, TPOT 50 ms)"),
                               (axes[1], "ttft_p99_ms", "TTFT p99 (ms)")):
        for kind, marker, color, name in (("threshold", "o", "tab:blue", "threshold autoscaler (up / down)"),
                                          ("static", "s", "tab:gray", "static fleet (instances)")):
            pts = [(p, m) for p, m in sweep.items() if p[0] == kind]
            ax.plot([m["gpu_hours"] for _, m in pts], [m[metric] for _, m in pts], marker=marker, ls="none",
                    color=color, label=name)
            for p, m in pts:
                text = f"{p[1]:g}/{p[2]:g}" if kind == "threshold" else f"{p[1]}"
                ax.annotate(text, (m["gpu_hours"], m[metric]), textcoords="offset points", xytext=(4, 4), fontsize=7,
                            color=color)
        ax.set_xlabel("GPU-hours over the day")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    if min(m["ttft_p99_ms"] for m in sweep.values()) > 0:
        axes[1].set_yscale("log")
    fig.suptitle("Threshold settings vs static fleets on the compressed day (llama-3.1-70b, TP4 H100)")
    fig.tight_layout()
    save(fig, path)


def timeline_table(result) -> str:
    """The lifecycle changes as a Markdown table: each with the counts it leaves."""
    times, counts = instance_timeline(result)
    log = lifecycle_log(result)
    lines = ["| time (min) | instance | enters | held | current | serving |", "|---|---|---|---|---|---|"]
    for k, rec in enumerate(log, start=1):  # (row 0 of the timeline is the start)
        lines.append(f"| {times[k] / 60:.2f} | {int(rec['instance'])} | {LIFE_STATE_NAMES[int(rec['state'])]} | "
                     f"{counts[k, HELD].sum()} | {counts[k, CURRENT].sum()} | {counts[k, SERVING].sum()} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("timeline", "sweep"),
                        help="timeline: diurnal.yaml's lifecycle changes; sweep: the threshold settings and fleets")
    parser.add_argument("--plot", default=None, help="draw the figure into this .png or .svg file")
    parser.add_argument("--num-requests", default=None, help="keep the first N requests of the day")
    parser.add_argument("--jobs", default="2", help="sweep runs side by side (default 2)")
    args = parser.parse_args(argv)
    try:  # every setting checked before anything runs
        jobs = check_jobs(args.jobs)
        num_requests = (None if args.num_requests is None
                        else as_int(args.num_requests, "--num-requests", 1, MAX_REQUESTS))
        plot = check_plot_path(args.plot) if args.plot else None
        if args.what == "timeline":
            diurnal = run_diurnal(num_requests)
        else:
            sweep = run_sweep(num_requests, jobs)
    except ConfigError as exc:
        print(f"error: {exc.field}: {exc.message}", file=sys.stderr)
        sys.exit(2)
    if args.what == "timeline":
        print(timeline_table(diurnal))
        if plot is not None:
            timeline_figure(diurnal, plot)
    else:
        print(table(sweep))
        if plot is not None:
            sweep_figure(sweep, plot)


if __name__ == "__main__":
    main()
