"""Figures of the studies (matplotlib, the optional ``plot`` extra, imported only here and
only when a figure is drawn).

Files are written deterministically: no date or software version in the metadata, SVG
element ids from a fixed salt, so the same study gives the same bytes.  The format
follows the file's suffix (.png or .svg).
"""

from __future__ import annotations

from pathlib import Path

from blis_fast.config.validate import show
from blis_fast.errors import ConfigError

FORMATS = (".png", ".svg")
INSTALL_HINT = "matplotlib is not installed; pip install 'blis-fast[plot]'"


def check_plot_path(path, flag: str = "--plot") -> Path:
    """``path`` as a Path ending in .png or .svg, and matplotlib importable (ConfigError
    naming ``flag`` otherwise) -- checked before anything is simulated."""
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise ConfigError(flag, f"must end in .png or .svg, got {show(str(path))}")
    _pyplot(flag)
    return p


def _pyplot(flag: str = "--plot"):
    try:
        import matplotlib  # deferred: matplotlib
    except ImportError:
        raise ConfigError(flag, INSTALL_HINT) from None
    matplotlib.use("Agg", force=True)  # files only: never a window
    import matplotlib.pyplot as plt  # deferred: matplotlib

    matplotlib.rcParams["svg.hashsalt"] = "blis-fast"
    return plt


def save(fig, path: Path, flag: str = "--plot") -> None:
    """Write ``fig`` to ``path`` atomically (deterministic bytes) and release it."""
    from blis_fast.config.outputs import atomic_write  # deferred: yaml

    plt = _pyplot()
    fmt = Path(path).suffix.lower().lstrip(".")
    meta = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, format=fmt, dpi=100, metadata=meta), flag)
    finally:
        plt.close(fig)


def capacity_figure(result, path: Path) -> None:
    """One panel per SLO predicate: the metric's mean (95 % CI bars) at every probe, met
    probes filled and failed ones hollow, the threshold as a dashed line and the answer
    as a vertical line."""
    plt = _pyplot()
    n = len(result.slos)
    fig, axes = plt.subplots(n, 1, figsize=(7, 2.2 + 2.3 * n), squeeze=False, sharex=True)
    probes = sorted(result.probes, key=lambda p: p.value)
    xs = [p.value for p in probes]
    for ax, pred in zip(axes[:, 0], result.slos):
        for met, style in ((True, dict(fmt="o", color="tab:green", label="meets all SLOs")),
                           (False, dict(fmt="o", color="tab:red", mfc="none", label="fails an SLO"))):
            sel = [p for p in probes if p.met == met]
            if sel:
                ax.errorbar([p.value for p in sel], [p.stats[pred.metric].mean for p in sel],
                            yerr=[p.stats[pred.metric].half_width for p in sel], capsize=3, **style)
        ax.plot(xs, [p.stats[pred.metric].mean for p in probes], color="0.6", lw=0.8, zorder=0)
        ax.axhline(pred.threshold, ls="--", color="tab:blue", label=f"SLO {pred}")
        if result.answer is not None:
            ax.axvline(result.answer, color="k", lw=1, label=f"answer {result.answer:.6g} {result.unit}")
        ax.set_ylabel(_metric_label(pred.metric))
        wide_scales(ax, xs, [p.stats[pred.metric].mean for p in probes] + [pred.threshold])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    axes[-1, 0].set_xlabel("arrival rate (requests/s)" if result.search == "rate" else "instances")
    what = "highest rate" if result.search == "rate" else "fewest instances"
    fig.suptitle(f"Capacity search: {what} meeting the SLOs ({len(result.seeds)} seeds per probe, 95 % CI)")
    fig.tight_layout()
    save(fig, path)


WIDE = 10.0  # an axis whose positive values span more than this factor is drawn logarithmic


def wide_scales(ax, xs, ys) -> None:
    """Logarithmic x and/or y axis where the values span more than ``WIDE`` (a latency
    that explodes past saturation would flatten everything else), plain tick labels."""
    from matplotlib.ticker import ScalarFormatter  # deferred: matplotlib

    for values, set_scale, axis in ((xs, ax.set_xscale, ax.xaxis), (ys, ax.set_yscale, ax.yaxis)):
        pos = [v for v in values if v > 0]
        if pos and min(pos) * WIDE < max(pos) and len(pos) == len(values):
            set_scale("log")
            fmt = ScalarFormatter()
            fmt.set_scientific(False)
            axis.set_major_formatter(fmt)


_UNITS = (("_ms", "ms"), ("_per_sec", "1/s"), ("_rps", "requests/s"), ("_s", "s"))


def _metric_label(metric: str) -> str:
    """``ttft_p99_ms`` -> ``ttft_p99 (ms)``; fractions and counts stay as they are."""
    base, sep, sel = metric.partition("[")
    for suffix, unit in _UNITS:
        if base.endswith(suffix):
            return f"{base[: -len(suffix)]}{sep}{sel} ({unit})"
    return metric


# the panels of a sweep / comparison figure: (title, y label, [(metric, line label)])
STUDY_PANELS = (
    ("Time to first token", "TTFT (ms)", [("ttft_mean_ms", "mean"), ("ttft_p90_ms", "p90"), ("ttft_p99_ms", "p99")]),
    ("End-to-end latency", "E2E latency (ms)", [("e2e_mean_ms", "mean"), ("e2e_p90_ms", "p90"), ("e2e_p99_ms", "p99")]),
    ("Inter-token latency", "ITL (ms)", [("itl_mean_ms", "mean"), ("itl_p99_ms", "p99")]),
    ("Throughput", "throughput (requests/s)", [("responses_per_sec", "completed"), ("goodput_rps", "meeting SLO")]),
    # headroom: how full the steps were; step occupancy (a step running) is near 1 at any load
    ("Step occupancy and headroom", "fraction", [("token_budget_occupancy", "token budget per step"),
                                                ("batch_slot_occupancy", "batch slots per step"),
                                                ("kv_occupancy_mean", "KV blocks per step"),
                                                ("busy_fraction", "time a step runs")]),
    ("SLO attainment", "fraction of requests", [("slo_attainment", "all")]),
)
OFFERED_LABEL = "offered load (requests/s)\nevery arriving request: follow-up turns included"
NO_TARGETS = "no SLO targets in the workload\n(attainment would only count completions)"
_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 2)))
_HATCHES = ("", "//", "..", "xx", "\\\\", "++")
_AXIS_LABELS = {"rate": "arrival rate (requests/s)", "rate_scale": "rate scale (x the workload's rates)", "num_instances": "instances", "max_num_seqs": "max_num_seqs "
                "(requests per batch)", "max_num_batched_tokens": "max_num_batched_tokens (tokens per step)"}


def _axis_label(name: str) -> str:
    if name in _AXIS_LABELS:
        return _AXIS_LABELS[name]
    return f"{name} (s)" if name.endswith("_s") else f"{name} (µs)" if name.endswith("_latency") else name


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def study_figure(study, path: Path, title: str) -> None:
    """Six panels against the first swept setting (or the configurations, when nothing is
    swept): TTFT, E2E and ITL percentiles, throughput (against the offered rate -- every
    request that arrives, follow-up turns of sessions included -- when the rate is swept,
    with the line y = x), step occupancy and the headroom metrics (token budget, batch
    slots, KV blocks per step), and SLO attainment (all requests and one line per SLO
    class with targets; a note instead when the workload sets none).  One colour per
    series -- configuration and the other swept settings -- and one line style per metric;
    95 % CI bands with several seeds."""
    plt = _pyplot()
    x_axis = study.axes[0] if study.axes else None
    compare = study.labels != [None]
    if x_axis is None:
        xs_all = [pt["config"] for pt in study.points]
        series_of = [()] * len(study.points)
    else:
        xs_all = [pt[x_axis.name] for pt in study.points]
        series_of = [tuple(([("config", pt["config"])] if compare else [])
                           + [(a.name, pt[a.name]) for a in study.axes[1:]]) for pt in study.points]
    # throughput against the offered rate when the load is what is swept
    offered_x = (x_axis is not None and x_axis.name in ("rate", "rate_scale")
                 and all(r is not None for r in study.offered_rate))
    categories = list(dict.fromkeys(xs_all))
    categorical = not all(_is_number(v) for v in categories)
    pos = {v: k for k, v in enumerate(categories)}
    series = list(dict.fromkeys(series_of))
    colors = plt.get_cmap("tab10")
    classes = [m for m in study.metrics if m.startswith("slo_attainment[class=")]
    panels = list(STUDY_PANELS)
    panels[-1] = (panels[-1][0], panels[-1][1],
                  panels[-1][2] + [(m, m[len("slo_attainment[class="):-1]) for m in classes])
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for ax, (ptitle, ylabel, lines) in zip(axes.flat, panels):
        lines = [(m, lb) for m, lb in lines if m in study.metrics]
        bars = len(series) * len(lines)  # categorical x: grouped bars, one per (series, metric)
        for si, key in enumerate(series):
            idx = [k for k, s in enumerate(series_of) if s == key]
            color = colors(si % 10)
            for li, (metric, label) in enumerate(lines):
                if offered_x and ptitle == "Throughput":
                    x = [study.offered_rate[k] for k in idx]
                    ax.plot(x, [study.stats[k][metric].mean for k in idx], ls=_STYLES[li % len(_STYLES)],
                            marker="o", ms=3, color=color, label=label if len(series) == 1 else None)
                    continue
                if categorical:
                    b = si * len(lines) + li
                    x = [pos[xs_all[k]] - 0.4 + (b + 0.5) * 0.8 / bars for k in idx]
                    ax.bar(x, [study.stats[k][metric].mean for k in idx], width=0.8 / bars,
                           yerr=[study.stats[k][metric].half_width for k in idx] if len(study.seeds) > 1 else None,
                           color=color if len(series) > 1 else colors(li % 10),
                           hatch=_HATCHES[li % len(_HATCHES)] if len(series) > 1 else None,
                           edgecolor="white", label=label if len(series) == 1 else None, capsize=2)
                    continue
                x = [pos[xs_all[k]] if categorical else xs_all[k] for k in idx]
                y = [study.stats[k][metric].mean for k in idx]
                h = [study.stats[k][metric].half_width for k in idx]
                name = label if len(series) == 1 else None
                ax.plot(x, y, ls=_STYLES[li % len(_STYLES)], marker="o", ms=3, color=color, label=name)
                if any(h):
                    ax.fill_between(x, [a - b for a, b in zip(y, h)], [a + b for a, b in zip(y, h)], color=color,
                                    alpha=0.15, lw=0)
        xlabel = "configuration" if x_axis is None else _axis_label(x_axis.name)
        if offered_x and ptitle == "Throughput":
            lo, hi = min(study.offered_rate), max(study.offered_rate)
            ax.plot([lo, hi], [lo, hi], color="0.5", lw=0.8, ls="--", label="offered load (y = x)")
            ptitle, xlabel = "Throughput vs offered load", OFFERED_LABEL
        if not lines and ptitle == "SLO attainment":
            ax.text(0.5, 0.5, NO_TARGETS, ha="center", va="center", transform=ax.transAxes, color="0.4")
        if len(series) > 1 and len(lines) > 1:  # line styles (hatches) name the metrics; colours the series
            for li, (_, label) in enumerate(lines):
                if categorical:
                    ax.bar([], [], color="0.8", hatch=_HATCHES[li % len(_HATCHES)], label=label)
                else:
                    ax.plot([], [], ls=_STYLES[li % len(_STYLES)], color="k", label=label)
        ax.set_title(ptitle)
        ax.set_ylabel(ylabel)
        if ylabel.startswith("fraction"):
            ax.set_ylim(-0.02, 1.05)
        if categorical:
            ax.set_xticks(range(len(categories)), [str(c) for c in categories])
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best")
    if len(series) > 1:
        handles = [plt.Line2D([], [], color=colors(si % 10), lw=2) for si in range(len(series))]
        names = [", ".join(f"{v}" if k == "config" else f"{k}={v}" for k, v in key) for key in series]
        fig.legend(handles, names, loc="lower center", ncol=min(len(series), 6), fontsize=9)
    seeds = len(study.seeds)
    what = (", ".join(str(lb) for lb in study.labels) if compare and x_axis is None
            else f"{len(study.points)} points")
    fig.suptitle(f"{title}: {what}, {seeds} seed{'s' if seeds > 1 else ''} per point"
                 + (" (95 % confidence intervals)" if seeds > 1 else ""))
    fig.tight_layout(rect=(0, 0.05 if len(series) > 1 else 0, 1, 1))
    save(fig, path)


def agents_run_figure(result, path: Path) -> None:
    """Utilization per resource over time, a heatmap of the first run
    (``AgentResult.windows``: ``agents.results.utilization_windows``), and under it the
    active tool calls, llm calls and requests in the system over time, their averages per
    window (``AgentResult.active_windows``: ``agents.results.active_windows``)."""
    plt = _pyplot()
    edges, util = result.windows
    names = [r.name for r in result.scenario.resources]
    fig, (ax, active_ax) = plt.subplots(2, 1, figsize=(9, 0.5 * len(names) + 4.4), sharex=True,
                                        gridspec_kw={"height_ratios": [0.5 * len(names) + 1.0, 2.6]})
    image = ax.imshow(util, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0.0, vmax=1.0,
                      extent=(edges[0], edges[-1], len(names) - 0.5, -0.5))
    ax.set_yticks(range(len(names)), names)
    ax.set_title(f"{result.scenario.name or 'agents'}: utilization per resource, run 0 (seed {result.scenario.seed})")
    fig.colorbar(image, ax=ax, label="fraction of capacity in use")
    active_edges, tools, llm, requests = result.active_windows
    active_ax.stairs(tools, active_edges, label="tool calls active")
    if llm.any():  # a tools-only scenario has no llm line to draw
        active_ax.stairs(llm, active_edges, label="llm calls active")
    active_ax.stairs(requests, active_edges, label="requests in the system")
    active_ax.set_xlabel("time (s)")
    active_ax.set_ylabel("mean count per window")
    active_ax.set_title("active tools / requests in the system over time")
    active_ax.legend(fontsize="small")
    # an invisible colorbar takes the same width as the heatmap's, so the two time axes line up
    fig.colorbar(image, ax=active_ax).ax.set_visible(False)
    fig.tight_layout()
    save(fig, path)


def agents_capacity_figure(result, path: Path) -> None:
    """Latency (p50 and p95, mean over the runs) against the offered rate per type, one
    panel per type, from the probes of an agents capacity search (a rate sweep)."""
    plt = _pyplot()
    probes = sorted((p for p in result.probes if p.types is not None), key=lambda p: p.value)
    names = [t for t in result.scenario.types if t.rate_per_min > 0]
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.6), squeeze=False)
    for ax, t in zip(axes[0], names):
        for key, style in (("latency_p50_s", "o-"), ("latency_p95_s", "s--")):
            pts = [(t.rate_per_min * p.value, p.types[t.name][key]) for p in probes
                   if p.types[t.name][key] is not None]
            ax.plot([x for x, _ in pts], [y for _, y in pts], style, label=key.split("_")[1])
        if result.answer is not None:
            ax.axvline(t.rate_per_min * result.answer, color="grey", linestyle=":", label="answer")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"{t.name} arrivals (requests/min)")
        ax.set_ylabel("latency (s)")
        ax.legend(fontsize="small")
    fig.suptitle(f"{result.scenario.name or 'agents'}: latency vs rate")
    fig.tight_layout()
    save(fig, path)
