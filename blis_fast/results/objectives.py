"""Objectives: which metrics of a run matter, in which direction, and how each is turned
into a number in [0, 1] (higher is better) so an optimizer gets one scalar score and a
per-objective vector.

An objective names any metric of ``blis_fast.results.scorecard`` (the cluster summary's
numbers, goodput, fairness, utilization, ...), optionally for one group of requests or one
instance with a selector: ``slo_attainment[class=realtime]``, ``ttft_p99_ms[tenant=acme]``,
``goodput_rps[client=web]``, ``utilization[instance=2]``; or for one deployment or served
model -- its requests and its instances (``scorecard.POOL_METRICS``):
``ttft_p99_ms[deployment=h100]``, ``utilization[model=llama]``.

Normalization of a raw value v (monotone: never decreasing in v for ``max``, never
increasing for ``min``; always in [0, 1]):
- with a target T (>= 0):  ``min``: 1 if v <= T else 1 / (1 + (v - T) / d),  d = T if T > 0
  else the metric's scale (so for T > 0 it is T / v);  ``max``: 1 if v >= T else v / T.
  A score of 1 means the target is met.
- without a target:  fractions (metrics in [0, 1]: attainment, fairness, utilization, hit
  rates, ``*_fraction``): ``max``: v, ``min``: 1 - v;  anything else: ``max``: v / (v + s),
  ``min``: 1 / (1 + v / s), with the scale s = 1000 for ``*_ms`` metrics (1 s scores 0.5),
  100 for requests/s, 10000 for tokens/s, 1 otherwise (or the objective's own ``scale``).

A latency statistic of a set with no samples (nothing completed, no first token) scores 0:
nothing measured, no credit (else rejecting everything would look fast).

``slo_attainment[class=C]`` of a class that sets no targets is refused (ConfigError): its
requests "meet" their SLO by completing, so it would read 1.0 however slow they were.  The
whole-run ``slo_attainment`` (a default objective) keeps counting such requests as met.

score = Σ weightᵢ · normalizedᵢ / Σ weightᵢ.

Spec text (``--objectives``): comma-separated ``metric[:direction[:target[:weight]]]``, e.g.
``ttft_p99_ms:min:200,slo_attainment:max,goodput_rps::5:2`` (an empty field keeps its
default; the direction defaults to ``min`` for latencies, counts of bad things and
fractions of bad things, ``max`` otherwise).  YAML ``objectives:`` takes the same text or a
list of mappings ``{metric, direction, target, weight, scale}``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np

from blis_fast.config.validate import as_float, as_list, as_mapping, as_str, show, show_text
from blis_fast.errors import ConfigError
from blis_fast.text import FRACTIONS
from blis_fast.results import scorecard
from blis_fast.results.deployments import group_names, selection
from blis_fast.results.scorecard import GROUP_KINDS, allowed_metrics, group_masks
from blis_fast.results.slo import has_targets

DIRECTIONS = ("min", "max")
SELECTOR_KINDS = ("class", "tenant", "client", "instance", "deployment", "model")
SELECTOR_GROUPS = ("deployment", "model")  # a deployment's or a model's requests and instances (results.deployments)
MAX_OBJECTIVES = 64
DEFAULT_SPEC = "slo_attainment:max,goodput_rps:max,ttft_p99_ms:min,e2e_p99_ms:min"

# metrics where less is better (the default direction)
_LOWER_IS_BETTER = frozenset({
    "rejected_fraction", "preemption_rate", "preemption_count", "preemptions", "dropped_unservable",
    "rejected_requests", "still_queued", "still_running", "still_in_flight", "priority_inversions",
    "hol_blocking_instances", "queue_depth_mean", "queue_depth_peak", "mean_wait_queue_len", "wait_queue_peak",
    "kv_utilization_peak", "kv_peak_utilization", "utilization_imbalance", "vllm_estimated_duration_s",
    "simulated_duration_s", "gpu_hours", "cost",
    "timeout_fraction", "shed_fraction", "attempts_mean", "timeouts", "timed_out", "sheds", "shed", "retries",
    "gateway_depth_peak",
})
_SCALES = {"responses_per_sec": 100.0, "goodput_rps": 100.0, "tokens_per_sec": 10000.0}

_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[([a-z]+)=([^\]]*)\])?$")


@dataclass(frozen=True)
class Objective:
    """One objective: a metric (with an optional selector), ``min`` or ``max``, an optional
    target (same unit as the metric), a weight >= 0 and an optional normalization scale."""

    metric: str
    direction: str = "max"
    target: float | None = None
    weight: float = 1.0
    scale: float | None = None

    def __post_init__(self) -> None:
        check_objective(self, "objectives")

    @property
    def name(self) -> str:
        """The objective's key in score vectors: the metric as written."""
        return self.metric

    def to_dict(self) -> dict:
        return asdict(self)

    def normalize(self, value: float) -> float:
        """The value mapped to [0, 1], higher is better (module docstring)."""
        base = split_metric(self.metric, "objectives")[0]
        scale = self.scale if self.scale is not None else _SCALES.get(base, 1000.0 if base.endswith("_ms") else 1.0)
        v = float(value)
        t = self.target
        if t is not None:
            if self.direction == "min":
                if v <= t:
                    return 1.0
                d = t if t > 0 else scale
                return 1.0 / (1.0 + (v - t) / d)
            if v >= t:
                return 1.0
            return min(max(v / t, 0.0), 1.0) if t > 0 else 0.0
        if base in FRACTIONS and self.scale is None:
            v = min(max(v, 0.0), 1.0)
            return v if self.direction == "max" else 1.0 - v
        v = max(v, 0.0)
        return v / (v + scale) if self.direction == "max" else 1.0 / (1.0 + v / scale)

    def met(self, value: float) -> bool | None:
        """Whether the target holds (None without a target)."""
        if self.target is None:
            return None
        return value <= self.target if self.direction == "min" else value >= self.target


def default_direction(metric: str) -> str:
    """``min`` for latencies (``*_ms``) and counts or fractions of bad things, else ``max``."""
    base = split_metric(metric, "objectives")[0]
    return "min" if base.endswith("_ms") or base in _LOWER_IS_BETTER else "max"


def split_metric(metric: str, where: str) -> tuple[str, str | None, str | None]:
    """``"ttft_p99_ms[tenant=a]"`` -> ("ttft_p99_ms", "tenant", "a"); no selector -> (name, None, None)."""
    m = _NAME.match(metric) if isinstance(metric, str) else None
    if m is None:
        raise ConfigError(where, "metric must be a name with an optional "
                                 f"[class=|tenant=|client=|instance=|deployment=|model=...] selector, got {show(metric)}")
    base, kind, value = m.groups()
    if kind is not None and kind not in SELECTOR_KINDS:
        raise ConfigError(where, f"unknown selector {show(kind)} in {show(metric)}; "
                                 f"allowed: {', '.join(SELECTOR_KINDS)}")
    if kind is not None and value == "":
        raise ConfigError(where, f"empty selector value in {show(metric)}")
    return base, kind, value


def check_objective(o: Objective, where: str) -> None:
    """ConfigError unless the metric is known (for its selector kind), the direction is
    min/max, and target, weight and scale are finite numbers in range."""
    as_str(o.metric, f"{where}.metric")
    base, kind, _ = split_metric(o.metric, f"{where}.metric")
    allowed = allowed_metrics(kind)
    if base not in allowed:
        what = "metric" if kind is None else f"metric for [{kind}=...]"
        raise ConfigError(f"{where}.metric", f"unknown {what} {show(base)}; known: {', '.join(allowed)}")
    if o.direction not in DIRECTIONS:
        raise ConfigError(f"{where}.direction", f"must be min or max, got {show(o.direction)}")
    if o.target is not None:
        as_float(o.target, f"{where}.target", 0, 1e300, text=False)
    as_float(o.weight, f"{where}.weight", 0, 1e300, text=False)
    if o.scale is not None:
        as_float(o.scale, f"{where}.scale", 0, 1e300, lo_open=True, text=False)


def split_items(text: str) -> list[str]:
    """Split at commas outside [...] (selector values may hold commas)."""
    items, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return [s.strip() for s in items]


def _from_text(item: str, where: str) -> Objective:
    # the metric may contain ':' only inside its selector: split the rest from the right of ']'
    head, sep, rest = item.partition("]")
    if sep:
        metric = head + "]"
        parts = rest.split(":")
        if parts[0] != "":
            raise ConfigError(where, f"expected metric[:direction[:target[:weight]]], got {show(item)}")
        fields = parts[1:]
    else:
        metric, *fields = item.split(":")
    metric = metric.strip()
    if len(fields) > 3:
        raise ConfigError(where, f"expected metric[:direction[:target[:weight]]], got {show(item)}")
    fields = [f.strip() for f in fields] + [""] * (3 - len(fields))
    direction = fields[0] or default_direction(metric)
    target = as_float(fields[1], f"{where}.target", 0, 1e300) if fields[1] else None
    weight = as_float(fields[2], f"{where}.weight", 0, 1e300) if fields[2] else 1.0
    return _make(metric, direction, target, weight, None, where)


def _make(metric, direction, target, weight, scale, where) -> Objective:
    try:
        return Objective(metric, direction, target, weight, scale)
    except ConfigError as exc:  # name the position in the user's list
        field = exc.field.replace("objectives", where, 1)
        raise ConfigError(field, exc.message) from None


def _from_mapping(d: dict, where: str) -> Objective:
    as_mapping(d, where, {"metric", "direction", "target", "weight", "scale"})
    if "metric" not in d:
        raise ConfigError(f"{where}.metric", "is required")
    metric = as_str(d["metric"], f"{where}.metric")
    direction = d.get("direction") or default_direction(metric)
    target = d.get("target")
    target = None if target is None else as_float(target, f"{where}.target", 0, 1e300)
    weight = as_float(d.get("weight", 1.0), f"{where}.weight", 0, 1e300)
    scale = d.get("scale")
    scale = None if scale is None else as_float(scale, f"{where}.scale", 0, 1e300, lo_open=True)
    return _make(metric, direction, target, weight, scale, where)


def parse_objectives(spec, where: str = "objectives") -> list[Objective]:
    """Objectives from spec text, a list of mappings / Objective, or None (the defaults:
    ``DEFAULT_SPEC``).  ConfigError naming ``where`` (and the position) on anything else;
    the weights must not all be 0 and metric names must not repeat."""
    if spec is None:
        return parse_objectives(DEFAULT_SPEC, where)
    if isinstance(spec, Objective):
        spec = [spec]
    if isinstance(spec, str):
        if len(spec) > 100_000:
            raise ConfigError(where, f"is too long ({len(spec)} characters)")
        items = [s for s in split_items(spec) if s]
        if not items:
            raise ConfigError(where, "needs at least one metric[:direction[:target[:weight]]]")
        out = [_from_text(s, f"{where}[{k}]") for k, s in enumerate(items)]
    else:
        items = as_list(spec, where, min_len=1, max_len=MAX_OBJECTIVES, what="a list of objectives")
        out = []
        for k, item in enumerate(items):
            if isinstance(item, Objective):
                out.append(item)
            elif isinstance(item, str):
                out.append(_from_text(item, f"{where}[{k}]"))
            else:
                out.append(_from_mapping(item, f"{where}[{k}]"))
    if len(out) > MAX_OBJECTIVES:
        raise ConfigError(where, f"at most {MAX_OBJECTIVES} objectives, got {len(out)}")
    seen = set()
    for k, o in enumerate(out):
        if o.metric in seen:
            raise ConfigError(f"{where}[{k}].metric", f"{o.metric!r} appears twice")
        seen.add(o.metric)
    if not any(o.weight > 0 for o in out):
        raise ConfigError(where, "at least one objective needs a weight > 0")
    return out


def objectives_setting(value, where: str) -> list[dict]:
    """The run config's ``objectives`` setting, validated, as plain mappings (JSON-able)."""
    return [o.to_dict() for o in parse_objectives(value, where)]


def metric_value(result, name: str) -> float:
    """The value of metric ``name`` (with an optional selector) in a ``Result``.
    ConfigError if the metric or the selected group is unknown."""
    base, kind, value = split_metric(name, "objectives.metric")
    overall, group, instance = scorecard.known_metrics()
    if kind is None:
        if base in group and base not in scorecard.SUMMARY_OWNED:  # (no cluster summary needed)
            return float(result.request_metrics[base])
        table = result.evaluation_metrics
        if base not in table and base in scorecard.TIER_METRICS:  # a run without KV tiers: all hits on the GPU
            return float(scorecard.untiered_metric(result, base))
        if base not in table and base in scorecard.AUTOSCALE_METRICS:  # a run without an autoscaler: billed now
            return float(scorecard.billed_metric(result, base))
        if base not in table and base in scorecard.FLOW_METRICS:  # a run without flow control or deadlines
            return float(scorecard.unflowed_metric(result, base))
        if base not in table:
            raise ConfigError("objectives.metric", f"unknown metric {show(base)}; known: {', '.join(overall)}")
        return float(table[base])
    if kind == "instance":
        if base not in instance:
            raise ConfigError("objectives.metric", f"unknown metric for [instance=...] {show(base)}; "
                                                   f"known: {', '.join(instance)}")
        used = result._used_instances().tolist()
        index = instance_index(value)
        if index is None or index not in used:
            raise ConfigError("objectives.metric", f"{show(name)}: no instance {show(value)}; instances: "
                                                   f"{known_list(used)}")

        return float(scorecard.instance_metrics(result, np.array([index]))[base])
    if kind in SELECTOR_GROUPS:
        if base not in scorecard.POOL_METRICS:
            raise ConfigError("objectives.metric", f"unknown metric for [{kind}=...] {show(base)}; "
                                                   f"known: {', '.join(scorecard.POOL_METRICS)}")
        chosen = selection(result, kind, value)
        if chosen is None:
            raise ConfigError("objectives.metric", no_pool_message(name, kind, value,
                                                                   group_names(result.setup, kind)))
        return scorecard.pool_metric(result, *chosen, base)
    if base not in group:
        raise ConfigError("objectives.metric", f"unknown metric for [{kind}=...] {show(base)}; "
                                               f"known: {', '.join(group)}")
    masks = scorecard.group_masks(result, kind)
    if value not in masks:
        raise ConfigError("objectives.metric", no_group_message(name, kind, value, list(masks)))
    if base == "slo_attainment" and kind == "class":
        if not has_targets((result.workload.slo_targets or {}).get(value)):
            raise ConfigError("objectives.metric", untargeted_message(name, value))
    return float(scorecard.group_metrics(result, masks[value])[base])


_KIND_PLURALS = {"class": "classes", "tenant": "tenants", "client": "clients"}
MAX_LISTED = 20  # names listed in a message about an unknown one


def known_list(names) -> str:
    """The first MAX_LISTED ``names``, each shortened, and how many more there are."""
    names = list(names)
    shown = ", ".join(show_text(n, 40) for n in names[:MAX_LISTED]) or "(none)"
    return shown + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


def no_group_message(metric: str, kind: str, value: str, known) -> str:
    return (f"{show(metric)}: the workload has no {kind} {show(value)}; its {_KIND_PLURALS[kind]}: "
            f"{known_list(known)}")


def no_pool_message(metric: str, kind: str, value: str, known) -> str:
    """The error of a ``[deployment=...]`` / ``[model=...]`` selector naming none of the run's."""
    what = "deployment" if kind == "deployment" else "deployment serving model"
    plural = "deployments" if kind == "deployment" else "served models"
    return f"{show(metric)}: the run has no {what} {show(value)}; its {plural}: {known_list(known)}"


def untargeted_message(metric: str, value: str) -> str:
    return (f"{show(metric)}: class {show(value)} sets no SLO targets, so its attainment would only count completed "
            f"requests; give the class ttft_ms, tpot_ms or e2e_ms targets, or name completed_requests")


def instance_index(value: str) -> int | None:
    """The instance number of a selector value (``2`` or ``instance_2``), None if it is none."""
    key = value[len("instance_"):] if value.startswith("instance_") else value
    return int(key) if key.isascii() and key.isdigit() and len(key) <= 6 else None


def workload_groups(workload, kind: str) -> list[str]:
    """The names of the groups of a selector kind (class, tenant, client) that hold at least
    one request of ``workload`` -- the groups ``scorecard.group_masks`` finds after the run."""
    col = GROUP_KINDS[kind]
    names = list((workload.names or {}).get(col) or [])
    ids = np.unique(workload.column(col)) if len(workload) else np.zeros(0, np.int64)
    return [names[g] if g < len(names) else str(g) for g in ids.tolist() if g >= 0]


def check_selectors(selected, workload, instances: int, deployments=()) -> None:
    """Before a run: ConfigError unless every selector of ``selected`` -- (field, metric)
    pairs -- names a group of ``workload`` that has requests, an instance below
    ``instances`` (the run's instance rows), or one of ``deployments`` -- (name, served
    model name) pairs -- or their models.  The same names are checked again on the run's
    result (``metric_value``), which also knows which instances served."""
    groups: dict[str, list[str]] = {}
    pools = {"deployment": [name for name, _ in deployments],
             "model": list(dict.fromkeys(model for _, model in deployments))}
    for field, metric in selected:
        base, kind, value = split_metric(metric, field)
        if kind is None:
            continue
        if kind in pools:
            if value not in pools[kind]:
                raise ConfigError(field, no_pool_message(metric, kind, value, pools[kind]))
            continue
        if kind == "instance":
            index = instance_index(value)
            if index is None or index >= instances:
                raise ConfigError(field, f"{show(metric)}: no instance {show(value)}; the deployment has "
                                         f"{instances} (0 to {instances - 1})")
            continue
        if kind not in groups:
            groups[kind] = workload_groups(workload, kind)
        if value not in groups[kind]:
            raise ConfigError(field, no_group_message(metric, kind, value, groups[kind]))
        if base == "slo_attainment" and kind == "class":
            if not has_targets((workload.slo_targets or {}).get(value)):
                raise ConfigError(field, untargeted_message(metric, value))


_SAMPLED = ("ttft_", "e2e_", "tpot_", "itl_", "scheduling_delay_")  # statistics over per-request samples


def measured(result, metric: str) -> bool:
    """False for a latency statistic (``ttft_*``, ``e2e_*``, ``tpot_*``, ``itl_*``,
    ``scheduling_delay_*``) of a set of requests with no sample (no first token, nothing
    completed, nothing scheduled): its value 0 means "nothing measured", not "fast"."""
    base, kind, value = split_metric(metric, "objectives.metric")
    prefix = next((p for p in _SAMPLED if base.startswith(p)), None)
    if prefix is None or kind == "instance":
        return True


    tab = result.outcomes
    if kind is None:
        sel = np.ones(len(tab["done"]), bool)
    elif kind in SELECTOR_GROUPS:
        sel = selection(result, kind, value)[0]
    else:
        sel = group_masks(result, kind)[value]
    if result.in_window is not None:
        sel = sel & result.in_window
    if prefix == "ttft_":
        population = tab["ttft_us"] >= 0
    elif prefix == "scheduling_delay_":
        population = result.latencies["scheduling_delay_us"] >= 0
    else:
        population = tab["done"]
    return bool((sel & population).any())


def judge(result, objectives) -> list[dict]:
    """Per objective: {metric, direction, target, weight, value (raw), normalized, met}.
    A latency statistic with no sample (``measured``) gets no credit: normalized 0, not met."""
    objs = objectives if isinstance(objectives, list) and all(isinstance(o, Objective) for o in objectives) \
        else parse_objectives(objectives)
    out = []
    for o in objs:
        v = metric_value(result, o.metric)
        ok = measured(result, o.metric)
        out.append({"metric": o.metric, "direction": o.direction, "target": o.target, "weight": o.weight,
                    "value": v, "normalized": o.normalize(v) if ok else 0.0,
                    "met": (o.met(v) if ok else False) if o.target is not None else None})
    return out


def weighted_score(rows: list[dict]) -> float:
    """Σ weight · normalized / Σ weight of ``judge`` rows, in [0, 1]."""
    total_w = sum(r["weight"] for r in rows)
    s = sum(r["weight"] * r["normalized"] for r in rows) / total_w
    return float(min(max(s, 0.0), 1.0))


def score(result, objectives) -> tuple[float, dict[str, float]]:
    """(weighted mean of the normalized objectives in [0, 1], {metric: normalized value})."""
    rows = judge(result, objectives)
    return weighted_score(rows), {r["metric"]: r["normalized"] for r in rows}


__all__ = ["DEFAULT_SPEC", "DIRECTIONS", "Objective", "check_selectors", "default_direction", "judge", "measured",
           "metric_value", "workload_groups",
           "objectives_setting", "parse_objectives", "score", "split_metric", "weighted_score"]
