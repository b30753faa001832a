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
        import matplotlib
    except ImportError:
        raise ConfigError(flag, INSTALL_HINT) from None
    matplotlib.use("Agg", force=True)  # files only: never a window
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.hashsalt"] = "blis-fast"
    return plt


def save(fig, path: Path, flag: str = "--plot") -> None:
    """Write ``fig`` to ``path`` atomically (deterministic bytes) and release it."""
    from blis_fast.config.outputs import atomic_write

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


WIDE = 20.0  # an axis whose positive values span more than this factor is drawn logarithmic


def wide_scales(ax, xs, ys) -> None:
    """Logarithmic x and/or y axis where the values span more than ``WIDE`` (a latency
    that explodes past saturation would flatten everything else), plain tick labels."""
    from matplotlib.ticker import ScalarFormatter

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
