"""What a study keeps of each run: a flat dict of metric name -> float, and the run's
adequacy (``ADEQUACY``).

A run's Result (its State holds every table of the run) is dropped as soon as its numbers
are read, so a study of hundreds of runs holds only these dicts.  Metric names are those
of ``blis_fast.results.objectives.metric_value``: the cluster summary's numbers and the
evaluation metrics, with selectors such as ``slo_attainment[class=realtime]``.
"""

from __future__ import annotations

from blis_fast.config.validate import show
from blis_fast.errors import ConfigError
from blis_fast.results.objectives import metric_value, split_metric
from blis_fast.results.scorecard import allowed_metrics

# the columns of a sweep / compare table besides the metrics the user names
TABLE_METRICS = (
    "completed_requests", "responses_per_sec", "tokens_per_sec", "goodput_rps", "slo_attainment",
    "ttft_mean_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_mean_ms", "e2e_p90_ms", "e2e_p99_ms",
    "itl_mean_ms", "itl_p99_ms", "scheduling_delay_p99_ms", "utilization", "busy_fraction", "mean_batch_size",
    "kv_peak_utilization", "preemption_count", "rejected_requests", "token_budget_occupancy", "batch_slot_occupancy",
    "kv_occupancy_mean",
)
# judged against SLO targets: left out of a study whose workload sets none (they would
# only count completed requests: an attainment of 1.0 however slow the requests were)
SLO_JUDGED = ("slo_attainment", "goodput_rps")


def check_metric(name: str, field: str) -> None:
    """ConfigError naming ``field`` unless ``name`` is a metric an objective may name."""
    base, kind, _ = split_metric(name, field)
    allowed = allowed_metrics(kind)
    if base not in allowed:
        what = "metric" if kind is None else f"metric for [{kind}=...]"
        raise ConfigError(field, f"unknown {what} {show(base)}; known: {', '.join(allowed)}")


# the key of a run's ``results.adequacy.Adequacy`` in its ``run_metrics`` dict (not a metric name)
ADEQUACY = "adequacy"


def run_metrics(result, names) -> dict:
    """``{name: metric_value(result, name)}`` for ``names``, and under ``ADEQUACY`` the run's
    adequacy (too short, saturated, ...: ``blis_fast.results.adequacy``)."""
    out = {name: metric_value(result, name) for name in names}
    out[ADEQUACY] = result.adequacy
    return out
