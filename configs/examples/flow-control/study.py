"""The flow-control study of docs/flow-control.md: overload.yaml (a chat + batch mix at 3x
the capacity of 4 instances, with TTLs and retries) under each saturation detector, and
overload-shed.yaml (its batch class sheddable) under the detectors that can shed.

It reads what the kernel records: each request's final state, its attempts and gateway
wait (``flow_reqs``), the run's timeout / shed / retry counters, and -- for the figure --
the gateway's decision log (the depth after each decision) beside the sampled wait queues
of the instances.  ``compare`` prints one Markdown row per run: requests that completed,
that met their SLO (their class's TTFT and E2E targets; the specs set no TPOT), that timed
out or were shed on their last attempt, retries, attempts per request, the gateway's peak
depth and mean wait per attempt, the TTFT p99 of the completed requests (of their final
attempt) and their mean exchange E2E (last token minus the first attempt's arrival).  With
``--plot`` it draws the requests waiting -- in the gateway queue and in the instances' wait
queues -- over time, without flow control, with two detectors, and with shedding.  Run from the
repository root:

    python configs/examples/flow-control/study.py compare --plot flow-control-overload.png
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import blis_fast
from blis_fast.config.validate import MAX_REQUESTS, as_int
from blis_fast.errors import ConfigError
from blis_fast.studies.plots import check_plot_path, save
from blis_fast.studies.runs import check_jobs
from blis_fast.studies.script import OneLineParser
from blis_fast_kernels.schema import GatewayAction, RequestState

HERE = Path(__file__).parent
OVERLOAD = HERE / "overload.yaml"
SHEDDABLE = HERE / "overload-shed.yaml"
SETTINGS = dict(num_instances=4, sample_interval_ms=500, trace_level="decisions")
# (label, spec, flow control settings)
RUNS = (
    ("never", OVERLOAD, {}),
    ("concurrency (limit 64)", OVERLOAD, {"flow_control": "concurrency", "flow_concurrency_limit": 64}),
    ("utilization", OVERLOAD, {"flow_control": "utilization"}),
    ("free-slot", OVERLOAD, {"flow_control": "free-slot"}),
    ("utilization, batch sheddable", SHEDDABLE, {"flow_control": "utilization"}),
    ("free-slot, batch sheddable", SHEDDABLE, {"flow_control": "free-slot"}),
)
PLOTTED = ("never", "utilization", "free-slot", "utilization, batch sheddable")


def run_one(spec: Path, flow: dict, num_requests: int | None = None):
    """One run of the study (``num_requests``: keep the spec's first N requests)."""
    return blis_fast.simulate(workload_spec=str(spec), num_requests=num_requests, **SETTINGS, **flow)


def metrics(result) -> dict:
    """The study's figures of one run (module docstring), from the kernel's tables."""
    st = result.state
    n = len(st.reqs)
    reqs, fr, loop = st.reqs, st.flow_reqs[:n], st.loop[0]
    done = reqs["state"] == RequestState.COMPLETED
    ttft = reqs["first_token_us"] - reqs["arrival_us"]
    e2e = reqs["last_token_us"] - reqs["arrival_us"]
    targets = st.slo_targets[np.maximum(reqs["slo_class"], 0)]
    met = done & ((targets[:, 0] < 0) | (ttft <= targets[:, 0])) & ((targets[:, 2] < 0) | (e2e <= targets[:, 2]))
    attempts = n + int(loop["retries"])
    exchange = reqs["last_token_us"][done] - fr["first_arrival_us"][done]
    return {
        "requests": n,
        "completed": int(done.sum()),
        "met_slo": int(met.sum()),
        "timed_out": int((reqs["state"] == RequestState.TIMED_OUT).sum()),
        "shed": int((reqs["state"] == RequestState.SHED).sum()),
        "retries": int(loop["retries"]),
        "attempts_mean": attempts / n,
        "gateway_peak": int(loop["gateway_peak"]),
        "gateway_wait_ms": fr["gw_wait_total_us"].sum() / attempts / 1e3,
        "ttft_p99_s": np.percentile(ttft[done], 99) / 1e6 if done.any() else float("nan"),
        "exchange_e2e_s": exchange.mean() / 1e6 if done.any() else float("nan"),
    }


def table(rows: list[tuple[str, dict]]) -> str:
    lines = ["| flow control | completed | met SLO | timed out | shed | retries | attempts / request | "
             "gateway peak | gateway wait (ms / attempt) | TTFT p99 (s) | exchange E2E mean (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, m in rows:
        lines.append(f"| {label} | {m['completed']} | {m['met_slo']} | {m['timed_out']} | {m['shed']} | "
                     f"{m['retries']} | {m['attempts_mean']:.2f} | {m['gateway_peak']} | {m['gateway_wait_ms']:.0f} | "
                     f"{m['ttft_p99_s']:.1f} | {m['exchange_e2e_s']:.1f} |")
    return f"{rows[0][1]['requests']} requests per run\n\n" + "\n".join(lines)


def waiting_over_time(result) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times in s, requests in the gateway queue, requests in the instances' wait queues)
    at each sample time: the gateway's depth after its last decision at or before it."""
    cluster = result.timeseries.cluster()
    times_us = cluster["time_us"]
    st = result.state
    log = st.gateway_log[: int(st.loop[0]["gateway_records"])]
    depth = np.zeros(len(times_us), np.int64)
    if len(log):
        last = np.searchsorted(log["time_us"], times_us, side="right") - 1
        depth = np.where(last >= 0, log["depth"][np.maximum(last, 0)], 0)
    return times_us / 1e6, depth, cluster["waiting"]


def figure(results: dict, path: Path) -> None:
    import matplotlib.pyplot as plt  # deferred: matplotlib (check_plot_path has chosen its file-only backend)

    fig, axes = plt.subplots(1, len(PLOTTED), figsize=(16, 4.2), sharey=True)
    for ax, label in zip(axes, PLOTTED):
        t, gateway, instances = waiting_over_time(results[label])
        ax.stackplot(t, instances, gateway, labels=["in the instances' wait queues", "in the gateway queue"],
                     colors=["tab:orange", "tab:blue"], alpha=0.8)
        ax.set_title(f"flow control: {label}")
        ax.set_xlabel("time (s)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("requests waiting")
    axes[0].legend(loc="upper left")
    fig.suptitle("overload.yaml: 3x the capacity of 4 instances for 60 s (TTL 20 s chat / 60 s batch, retries)")
    fig.tight_layout()
    save(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("compare",), help="compare: every detector on the overload specs")
    parser.add_argument("--plot", default=None, help="draw the figure into this .png or .svg file")
    parser.add_argument("--jobs", default="2", help="runs side by side (default 2)")
    parser.add_argument("--num-requests", default=None, help="keep the first N requests of each spec")
    args = parser.parse_args(argv)
    try:  # every setting checked before anything runs
        jobs = check_jobs(args.jobs)
        num_requests = (None if args.num_requests is None
                        else as_int(args.num_requests, "--num-requests", 1, MAX_REQUESTS))
        plot = check_plot_path(args.plot) if args.plot else None
        with ThreadPoolExecutor(jobs) as pool:
            done = list(pool.map(lambda run: run_one(run[1], run[2], num_requests), RUNS))
    except ConfigError as exc:
        print(f"error: {exc.field}: {exc.message}", file=sys.stderr)
        sys.exit(2)
    results = {label: res for (label, _, _), res in zip(RUNS, done)}
    print(table([(label, metrics(res)) for label, res in results.items()]))
    if plot is not None:
        figure(results, plot)


if __name__ == "__main__":
    main()
