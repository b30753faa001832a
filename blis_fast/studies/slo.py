"""SLO predicates of a capacity search: ``"ttft_p99_ms<=200,e2e_p99_ms<=5000"``.

Each predicate is ``metric OP threshold`` with OP one of ``<=  <  >=  >``; the metric is
any name ``blis_fast.results.objectives.metric_value`` resolves, selectors included
(``slo_attainment[class=realtime]>=0.99``).  ``slo_classes`` applies every predicate
without a selector to each named SLO class instead of the whole cluster
(``--slo-class realtime``): ``ttft_p99_ms<=200`` becomes ``ttft_p99_ms[class=realtime]<=200``.

A predicate's *margin* is its signed relative distance to the threshold, positive when it
holds: ``log(threshold / value)`` for an upper bound, ``log(value / threshold)`` for a
lower bound.  The search interpolates on it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from blis_fast.config.validate import as_float, as_list, as_str, show
from blis_fast.errors import ConfigError
from blis_fast.results.objectives import split_items
from blis_fast.studies.measure import check_metric

OPS = ("<=", ">=", "<", ">")
MAX_PREDICATES = 32
_ITEM = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?)\s*(<=|>=|<|>)\s*(\S+)\s*$")
_TINY = 1e-300  # a value of 0 gets a finite margin


@dataclass(frozen=True)
class SloPredicate:
    """``metric op threshold`` (the metric in its own unit, e.g. ms)."""

    metric: str
    op: str
    threshold: float

    @property
    def upper(self) -> bool:
        """True for an upper bound (``<=``, ``<``): lower values are better."""
        return self.op in ("<=", "<")

    def holds(self, value: float) -> bool:
        v, t = float(value), self.threshold
        return {"<=": v <= t, "<": v < t, ">=": v >= t, ">": v > t}[self.op]

    def margin(self, value: float) -> float:
        """log(threshold / value) for an upper bound, log(value / threshold) for a lower
        one: > 0 when it holds with room, 0 at the threshold."""
        v, t = max(float(value), _TINY), max(self.threshold, _TINY)
        return math.log(t / v) if self.upper else math.log(v / t)

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.threshold:g}"


def parse_slos(spec, slo_classes=None, field: str = "--slo", check_name=None) -> list[SloPredicate]:
    """The predicates of ``spec`` (text, or a list of texts / SloPredicate), each metric
    checked against the known metric names (``check_name(metric, field)``, default
    ``check_metric_name``: the cluster's metrics); with ``slo_classes``, every predicate
    without a selector is repeated once per class with ``[class=NAME]``.  ConfigError
    naming ``field`` on anything malformed."""
    if isinstance(spec, SloPredicate):
        spec = [spec]
    if isinstance(spec, str):
        raw = split_items(as_str(spec, field, max_len=100_000))
    elif isinstance(spec, (list, tuple)) and spec:
        raw = list(spec)
    else:
        raise ConfigError(field, f"must be predicates such as 'ttft_p99_ms<=200,e2e_p99_ms<=5000', got {show(spec)}")
    if len(raw) > MAX_PREDICATES:
        raise ConfigError(field, f"at most {MAX_PREDICATES} predicates, got {len(raw)}")
    preds = []
    for item in raw:
        if isinstance(item, SloPredicate):
            preds.append(item)
            continue
        m = _ITEM.match(item) if isinstance(item, str) else None
        if m is None:
            raise ConfigError(field, f"expected metric<=value, metric<value, metric>=value or metric>value "
                                     f"(e.g. ttft_p99_ms<=200), got {show(item)}")
        preds.append(SloPredicate(m.group(1), m.group(2), as_float(m.group(3), f"{field} ({m.group(1)})", 0, 1e300)))
    classes = _class_names(slo_classes)
    out: list[SloPredicate] = []
    for p in preds:
        if classes and "[" not in p.metric:  # the cluster-wide predicate, once per class
            out += [SloPredicate(f"{p.metric}[class={c}]", p.op, p.threshold) for c in classes]
        else:
            out.append(p)
    for p in out:
        (check_name or check_metric_name)(p.metric, field)
    return out


def _class_names(slo_classes) -> list[str]:
    if slo_classes is None:
        return []
    if isinstance(slo_classes, str):
        items = split_items(as_str(slo_classes, "--slo-class", max_len=100_000))
    else:
        items = as_list(slo_classes, "--slo-class", max_len=MAX_PREDICATES, what="a list of SLO class names")
    names = [as_str(c, "--slo-class", max_len=256, nonempty=False).strip() for c in items]
    if len(names) > MAX_PREDICATES:
        raise ConfigError("--slo-class", f"at most {MAX_PREDICATES} classes, got {len(names)}")
    if not names or any(not n or "]" in n for n in names):
        raise ConfigError("--slo-class", f"must be SLO class names of the workload spec, got {show(slo_classes)}")
    return list(dict.fromkeys(names))


def check_metric_name(metric: str, field: str) -> None:
    """ConfigError unless ``metric`` is a metric name an objective may use."""
    check_metric(metric, field)
