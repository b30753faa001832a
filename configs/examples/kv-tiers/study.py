"""The KV tiers study of docs/kv-tiers.md: long-chat.yaml on cluster.yaml, swept over the
CPU tier's size (blocks per instance) and its read bandwidth (GB/s per instance).

For every point and seed it runs ``blis_fast.simulate`` and keeps what a sweep's
``--metrics`` cannot name -- the prefix hits split by where they were found
(``prefix_hit_rate_gpu`` / ``_cpu`` of the cluster summary) and the ``kv_tiers`` group's
load wait and thrashing rate -- beside the TTFT.  It prints a Markdown table (mean ± the
half-width of the 95 % interval over the seeds, as the study commands print them) and,
with ``--plot``, draws the page's figure.  A CPU tier of 0 blocks is no tier: that point
runs once per seed and stands for every bandwidth.  Run from the repository root:

    python configs/examples/kv-tiers/study.py --seeds 3 --plot kv-tiers-study.png
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import blis_fast
from blis_fast.config.validate import MAX_REQUESTS, as_int
from blis_fast.errors import ConfigError
from blis_fast.studies.script import OneLineParser
from blis_fast.studies.plots import check_plot_path, save
from blis_fast.studies.runs import check_jobs, check_seeds, check_simulations, seed_stats
from blis_fast.studies.tables import interval_text

HERE = Path(__file__).parent
CPU_BLOCKS = (0, 2000, 5000, 10000, 20000, 50000)
READ_GBPS = (0.5, 2, 8, 32)
FIRST_SEED = 42
# the page's measurement window: requests arriving in [first + 10 s, last - 10 s]
WINDOW = {"warmup_s": 10, "cooldown_s": 10}
# (column, how interval_text formats it: a latency in ms or a fraction in %)
COLUMNS = (("ttft_mean_ms", "ttft_mean_ms"), ("ttft_p99_ms", "ttft_p99_ms"),
           ("hit_rate_gpu", "prefix_cache_hit_rate"), ("hit_rate_cpu", "prefix_cache_hit_rate"),
           ("load_wait_mean_ms", "ttft_mean_ms"), ("load_wait_p99_ms", "ttft_mean_ms"),
           ("thrashing_rate", "prefix_cache_hit_rate"), ("preemptions", "preemption_count"))
TIER_ONLY = ("load_wait_mean_ms", "load_wait_p99_ms", "thrashing_rate")  # ("-" without a tier)


def measure(cpu_blocks: int, read_gbps: float, seed: int, num_requests: int | None) -> dict[str, float]:
    """One run's numbers (see the module docstring)."""
    tiers = {"kv_cpu_blocks": cpu_blocks, "kv_cpu_read_gbps": read_gbps} if cpu_blocks else {}
    extra = {"num_requests": num_requests} if num_requests else {}
    r = blis_fast.simulate(config=str(HERE / "cluster.yaml"), workload_spec=str(HERE / "long-chat.yaml"),
                           seed=seed, **WINDOW, **tiers, **extra)
    c, t = r.cluster, r.kv_tiers
    return {"ttft_mean_ms": c["ttft_mean_ms"], "ttft_p99_ms": c["ttft_p99_ms"],
            "hit_rate_gpu": c["prefix_hit_rate_gpu"] if t else c["prefix_cache_hit_rate"],
            "hit_rate_cpu": c["prefix_hit_rate_cpu"] if t else 0.0,
            "load_wait_mean_ms": t["load_wait_mean_ms"] if t else 0.0,
            "load_wait_p99_ms": t["load_wait_p99_ms"] if t else 0.0,
            "thrashing_rate": t["thrashing_rate"] if t else 0.0,
            "preemptions": c["preemption_count"]}


def run_study(seeds: int, num_requests: int | None = None, jobs: int = 2) -> dict[tuple[int, float], dict]:
    """{(cpu blocks, read GB/s): {column: SeedStats}} over the grid; the 0-block point is
    run once per seed and repeated for every bandwidth."""
    points = [(0, READ_GBPS[-1])] + [(b, g) for b in CPU_BLOCKS[1:] for g in READ_GBPS]
    runs = [(b, g, FIRST_SEED + s) for (b, g) in points for s in range(seeds)]
    with ThreadPoolExecutor(jobs) as pool:  # the event loop releases the GIL
        results = list(pool.map(lambda a: measure(*a, num_requests), runs))
    out = {}
    for k, (b, g) in enumerate(points):
        per_seed = results[k * seeds:(k + 1) * seeds]
        out[(b, g)] = {col: seed_stats([m[col] for m in per_seed]) for col, _ in COLUMNS}
    for g in READ_GBPS:
        out[(0, g)] = out[(0, READ_GBPS[-1])]
    return out


def table(study: dict) -> str:
    """The study as a Markdown table, one row per point (0 blocks once)."""
    head = ["cpu_blocks", "read_gbps", *(col for col, _ in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (b, g), stats in sorted(study.items()):
        if b == 0 and g != READ_GBPS[-1]:
            continue
        cells = [f"{b:,}", "-" if b == 0 else f"{g:g}"]
        cells += ["-" if b == 0 and col in TIER_ONLY else interval_text(fmt, stats[col].mean, stats[col].half_width)
                  for col, fmt in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def figure(study: dict, path: Path, seeds: int) -> None:
    """Four panels against the CPU tier's size: the prefix hit rate split GPU / CPU (at the
    highest bandwidth), the TTFT mean and p99 and the load wait per bandwidth."""
    import matplotlib.pyplot as plt  # deferred: matplotlib (check_plot_path has chosen its file-only backend)

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    x = list(range(len(CPU_BLOCKS)))  # evenly spaced sizes (0 has no place on a log axis)
    labels = [f"{b:,}" for b in CPU_BLOCKS]
    best = READ_GBPS[-1]
    gpu = [study[(b, best)]["hit_rate_gpu"].mean for b in CPU_BLOCKS]
    cpu = [study[(b, best)]["hit_rate_cpu"].mean for b in CPU_BLOCKS]
    ax = axes[0, 0]
    ax.bar(x, gpu, color="tab:blue", label="found on the GPU")
    ax.bar(x, cpu, bottom=gpu, color="tab:orange", label="loaded from the CPU tier")
    ax.set_ylim(0, 1)
    ax.set_title(f"Prefix cache hit rate (read {best:g} GB/s)")
    ax.set_ylabel("fraction of prompt tokens looked up")
    colors = plt.get_cmap("tab10")
    for ax, (col, title, ylabel) in zip(axes.flat[1:], (
            ("ttft_mean_ms", "TTFT mean", "TTFT (ms)"), ("ttft_p99_ms", "TTFT p99", "TTFT (ms)"),
            ("load_wait_mean_ms", "Load wait per load, mean", "wait (ms)"))):
        first = 1 if col.startswith("load_wait") else 0  # (no tier, no load: nothing to draw at 0)
        drawn = [study[(b, g)][col].mean for b in CPU_BLOCKS[first:] for g in READ_GBPS]
        for k, g in enumerate(READ_GBPS):
            points = [study[(b, g)][col] for b in CPU_BLOCKS[first:]]
            ax.plot(x[first:], [p.mean for p in points], marker="o", color=colors(k), label=f"read {g:g} GB/s")
            if seeds > 1:  # (the band's lower edge kept above 0 for the log axis)
                ax.fill_between(x[first:], [max(p.low, p.mean / 10) for p in points], [p.high for p in points],
                                color=colors(k), alpha=0.15, lw=0)
        if min(drawn) > 0:  # (latencies spanning decades; a tiny run may have no load to draw)
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_ylabel(ylabel)
    for ax in axes.flat:
        ax.set_xticks(x, labels)
        ax.set_xlabel("CPU tier (KV blocks per instance; the GPU holds 4,000)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle(f"KV cache tiers: long-chat.yaml on 4 x H100, {seeds} seed{'s' if seeds > 1 else ''} per point"
                 + (" (95 % confidence intervals)" if seeds > 1 else ""))
    fig.tight_layout()
    save(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="3", help="seeds per point, from 42 on (default 3)")
    parser.add_argument("--num-requests", default=None, help="keep the first N requests of the spec")
    parser.add_argument("--jobs", default="2", help="runs side by side (default 2)")
    parser.add_argument("--plot", default=None, help="draw the figure into this .png or .svg file")
    args = parser.parse_args(argv)
    try:  # every setting checked before anything runs
        seeds, jobs = check_seeds(args.seeds), check_jobs(args.jobs)
        check_simulations(seeds * (1 + (len(CPU_BLOCKS) - 1) * len(READ_GBPS)), "--seeds", f"{seeds} seeds per point")
        num_requests = (None if args.num_requests is None
                        else as_int(args.num_requests, "--num-requests", 1, MAX_REQUESTS))
        plot = check_plot_path(args.plot) if args.plot else None
        study = run_study(seeds, num_requests, jobs)
    except ConfigError as exc:
        print(f"error: {exc.field}: {exc.message}", file=sys.stderr)
        sys.exit(2)
    print(table(study))
    if plot is not None:
        figure(study, plot, seeds)


if __name__ == "__main__":
    main()
