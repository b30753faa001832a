"""What a study keeps of each run: a flat dict of metric name -> float.

A run's Result (its State holds every table of the run) is dropped as soon as its numbers
are read, so a study of hundreds of runs holds only these dicts.  Metric names are those
of ``blis_fast.results.objectives.metric_value`` (the cluster summary's numbers and the
evaluation metrics, with selectors such as ``slo_attainment[class=realtime]``).
"""

from __future__ import annotations

from blis_fast.errors import ConfigError

# the columns of a sweep / compare table besides the metrics the user names
TABLE_METRICS = (
    "completed_requests", "responses_per_sec", "tokens_per_sec",
    "ttft_mean_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_mean_ms", "e2e_p90_ms", "e2e_p99_ms",
    "itl_mean_ms", "itl_p99_ms", "scheduling_delay_p99_ms", "busy_fraction", "mean_batch_size",
    "kv_peak_utilization", "preemption_count", "rejected_requests",
)


def metric_of(result, name: str) -> float:
    """The value of metric ``name`` in ``result``; ConfigError naming it if unknown."""
    try:
        from blis_fast.results.objectives import metric_value
    except ImportError:  # evaluation results not there yet: the cluster summary and SLO report
        return _summary_metric(result, name)
    return metric_value(result, name)


def check_metric(name: str, field: str) -> None:
    """ConfigError naming ``field`` unless ``name`` is a metric an objective may name."""
    try:
        from blis_fast.results.objectives import split_metric
        from blis_fast.results.scorecard import known_metrics
    except ImportError:
        return  # checked on the first run instead
    base, kind, _ = split_metric(name, field)
    overall, group, instance = known_metrics()
    allowed = overall if kind is None else instance if kind == "instance" else group
    if base not in allowed:
        raise ConfigError(field, f"unknown metric {base!r}; known: {', '.join(allowed)}")


def _summary_metric(result, name: str) -> float:
    base, _, selector = name.partition("[")
    if not selector:
        value = result.cluster.get(base)
    else:
        kind, _, group = selector.rstrip("]").partition("=")
        groups = ((result.slo or {}).get("slo_classes") or {}) if kind == "class" else {}
        g = groups.get(group)
        if g is None:
            raise ConfigError("--slo", f"{name}: the workload has no SLO class {group!r}")
        head, _, rest = base.partition("_")
        value = g.get(base) if base in g else (g.get(f"{head}_ms") or {}).get(rest.replace("_ms", ""))
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ConfigError("--slo", f"unknown metric {name!r}")
    return float(value)


def run_metrics(result, names) -> dict[str, float]:
    """``{name: metric_of(result, name)}`` for ``names``."""
    return {name: metric_of(result, name) for name in names}
