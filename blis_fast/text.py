"""Numbers for reading: a metric's value formatted by its unit ("1,742 ms", "44.7%",
"299 req/s"), shared by the terminal views of ``blis_fast.cli`` and the study tables of
``blis_fast.studies`` (a base module: the ``blis-fast`` start-up imports it without
numpy or the results package)."""

from __future__ import annotations

import math
from typing import Any

# metrics that lie in [0, 1] by definition
FRACTIONS = frozenset({
    "slo_attainment", "jain_fairness", "jain_fairness_throughput", "utilization", "utilization_min",
    "utilization_max", "kv_utilization_mean", "kv_utilization_peak", "kv_peak_utilization", "prefix_cache_hit_rate",
    "busy_fraction", "rejected_fraction", "cached_token_fraction", "token_budget_occupancy", "batch_slot_occupancy",
    "kv_occupancy_mean", "timeout_fraction", "shed_fraction",
})


def ms(x: Any) -> str:
    """A time in ms for reading: 3 significant figures, e.g. 0.523, 32.9, 1,234."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    x = float(x)
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}" if abs(x) >= 1 else f"{x:.3f}"


def pct(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{100 * float(x):.1f}%"


def rate(x: Any) -> str:
    """A rate (requests or tokens per second): as ``sig3``."""
    return sig3(x)


def count(x: Any) -> str:
    return "-" if x is None else f"{int(x):,}"


def sig3(x: Any) -> str:
    """Any other number: 3 significant figures, thousands separated (0.0123, 4.56, 78,912)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    x = float(x)
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def unit_of(metric: str) -> str:
    """The unit of an evaluation metric by its name (selectors ignored): "ms", "%" (a
    fraction), "req/s", "tok/s" or "" (a count or ratio)."""
    base = metric.partition("[")[0]
    if base.endswith("_ms"):
        return "ms"
    if base in FRACTIONS or base.endswith("_occupancy"):
        return "%"
    if base in ("responses_per_sec", "goodput_rps") or base.endswith("_rps") or base == "offered_rate":
        return "req/s"
    if base == "tokens_per_sec":
        return "tok/s"
    return ""


def metric_text(metric: str, x: Any, with_unit: bool = True) -> str:
    """A metric's value for reading, formatted by its unit (``unit_of``): "1,742 ms",
    "44.7%", "299 req/s"; ``None`` (e.g. SLO attainment without targets) is "-"."""
    unit = unit_of(metric)
    if unit == "%":
        return pct(x)
    text = ms(x) if unit == "ms" else sig3(x)
    return f"{text} {unit}" if with_unit and unit and text != "-" else text
