"""Capacity of an agent scenario (``blis-fast agents capacity``, docs/agents.md): the highest
multiplier of the scenario's arrival rates (every type's rate scaled together) at which
every SLO predicate holds, e.g. ``p95_latency_s[type=deep-research]<=30``.

The search is the cluster capacity search's core (``studies.capacity.search_rate``:
bracket by factors 2, 4, 8, ... from the scenario's own rates, then ITP on the log of the
multiplier, to ``tolerance``).  A probe runs the scenario's runs at one multiplier (run k
uses seed + k at every probe: common random numbers) and reduces each metric to its mean
over the runs and a 95 % confidence interval (``studies.runs.seed_stats``).  It meets the
SLOs when every predicate holds for the whole interval (``by="ci"``, the default: the
interval's far end -- its top for an upper bound such as ``<= 30`` -- holds, so the answer
is a rate the SLOs are met at with 95 % confidence, not one a lucky set of runs met), or
for the means (``by="mean"``).  With one run there is no interval and the two agree.  A
type without a completed request has no latency: a probe where a predicate's latency is
missing fails.

Metrics: ``METRIC[type=NAME]`` for the per-type results (``completed``,
``latency_mean_s``, ``latency_p50_s``, ``latency_p95_s``, ``latency_p99_s``; also spelled
``mean_latency_s``, ``p50_latency_s``, ...) and ``utilization[resource=NAME]``; a
per-type metric without a selector applies to every type with arrivals.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field

from blis_fast.agents.results import RESOURCE_METRICS, TYPE_METRICS, AgentResult
from blis_fast.agents.run import run_runs, run_setup, scenario_of, with_runs
from blis_fast.agents.scenario import MAX_AGENT_NODES, MAX_AGENT_REQUESTS, MAX_RATE_PER_MIN, Scenario
from blis_fast.config.validate import as_choice, as_float, as_int, show
from blis_fast.errors import ConfigError
from blis_fast.studies.capacity import DEFAULT_TOLERANCE, MAX_PROBES, search_rate
from blis_fast.studies.runs import SeedStats, check_simulations, seed_stats
from blis_fast.studies.slo import SloPredicate, parse_slos

# the spelling (p95_latency_s) of the result keys (latency_p95_s)
ALIASES = {f"{q}_latency_s": f"latency_{q}_s" for q in ("mean", "p50", "p95", "p99")}
_METRIC = re.compile(r"^([a-z0-9_]+)(?:\[(type|resource)=([^\]]*)\])?$")
_MISSING_MARGIN = -1.0  # a missing latency (no completed request) fails, by this margin
MET_BY = ("ci", "mean")  # a probe meets a predicate: by its whole 95 % CI, or by its mean


@dataclass(frozen=True)
class AgentProbe:
    """One multiplier of the arrival rates: its metrics over the runs, whether it meets
    the SLOs, the smallest margin (``SloPredicate.margin``), whether some metric's 95 %
    CI contains its threshold, and ``too_large`` when its runs would exceed the size
    limits (it is not run and counts as failed)."""

    value: float
    stats: dict[str, SeedStats | None]
    met: bool
    margin: float
    uncertain: bool
    too_large: bool = False
    types: dict | None = None  # AgentResult.types at this probe (every type's latencies: the plot)

    def to_dict(self, scenario: Scenario) -> dict:
        return {"multiplier": self.value, "met": self.met, "uncertain": self.uncertain,
                "too_large": self.too_large, "rates_per_min": rates_at(scenario, self.value),
                "metrics": {m: None if s is None else {"mean": s.mean, "ci95": s.half_width, "per_run": list(s.values)}
                            for m, s in self.stats.items()}}


@dataclass
class AgentCapacityResult:
    """The answer (the highest met multiplier, None if none met), the failed multiplier
    above it, and every probe in probe order."""

    scenario: Scenario
    slos: list[SloPredicate]
    tolerance: float
    answer: float | None
    failed_neighbour: float | None
    probes: list[AgentProbe] = field(default_factory=list)
    message: str = ""
    by: str = "ci"

    def to_dict(self) -> dict:
        return {"scenario": self.scenario.name, "slos": [str(p) for p in self.slos], "runs": self.scenario.runs,
                "seed": self.scenario.seed, "tolerance": self.tolerance, "met_by": self.by,
                "answer_multiplier": self.answer,
                "answer_rates_per_min": None if self.answer is None else rates_at(self.scenario, self.answer),
                "failed_multiplier": self.failed_neighbour, "message": self.message,
                "probes_count": len(self.probes), "probes": [p.to_dict(self.scenario) for p in self.probes]}

    def table(self) -> str:
        head = ["multiplier", *(str(p) for p in self.slos), "met"]
        rows = []
        for pr in self.probes:
            cells = [f"{pr.value:.6g}"]
            for p in self.slos:
                s = pr.stats.get(p.metric)
                cells.append("-" if s is None else f"{s.mean:.4g}" + (f" ± {s.half_width:.2g}" if s.half_width else ""))
            cells.append("too large" if pr.too_large else ("yes" if pr.met else "no") + ("?" if pr.uncertain else ""))
            rows.append(cells)
        widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head))]
        lines = [f"{self.scenario.name or 'agents'}: {self.scenario.runs} run(s) per probe (seed "
                 f"{self.scenario.seed} + k), mean ± 95 % CI over the runs; met "
                 + ("when the whole CI meets the SLOs" if self.by == "ci" else "when the mean does"), ""]
        lines += ["  ".join(c.ljust(w) if k == 0 else c.rjust(w) for k, (c, w) in enumerate(zip(r, widths)))
                  for r in [head, *rows]]
        return "\n".join(lines + ["", self.message])


def rates_at(scenario: Scenario, multiplier: float) -> dict[str, float]:
    """TYPE -> requests per minute at ``multiplier`` (types with arrivals)."""
    return {t.name: t.rate_per_min * multiplier for t in scenario.types if t.rate_per_min > 0}


def scaled(scenario: Scenario, multiplier: float) -> Scenario:
    """``scenario`` with every type's rate multiplied by ``multiplier``."""
    types = tuple(dataclasses.replace(t, rate_per_min=t.rate_per_min * multiplier) for t in scenario.types)
    return dataclasses.replace(scenario, types=types)


def max_multiplier(scenario: Scenario) -> float:
    """The largest multiplier whose runs stay within the scenario limits (a type's rate,
    a run's expected requests and nodes)."""
    requests, nodes = scenario.expected_size()
    top = max(t.rate_per_min for t in scenario.types)
    return min(MAX_RATE_PER_MIN / top, MAX_AGENT_REQUESTS / max(requests, 1e-300), MAX_AGENT_NODES / max(nodes, 1e-300))


def _check_metric(scenario: Scenario):
    types = {t.name for t in scenario.types if t.rate_per_min > 0}
    resources = {r.name for r in scenario.resources}

    def check(metric: str, field_name: str) -> None:
        m = _METRIC.match(metric)
        name = ALIASES.get(m.group(1), m.group(1)) if m else None
        if m is None or (name not in TYPE_METRICS and name not in RESOURCE_METRICS):
            raise ConfigError(field_name, f"unknown agent metric {show(metric)}; known: {', '.join(TYPE_METRICS)} "
                                          f"(per type, [type=NAME]), {', '.join(RESOURCE_METRICS)} ([resource=NAME])")
        kind, sel = m.group(2), m.group(3)
        if name in RESOURCE_METRICS and (kind != "resource" or sel not in resources):
            raise ConfigError(field_name, f"{name} needs [resource=NAME] with a resource of the scenario "
                                          f"({', '.join(sorted(resources))}), got {show(metric)}")
        if name in TYPE_METRICS and kind is not None and (kind != "type" or sel not in types):
            raise ConfigError(field_name, f"{name} takes [type=NAME] with a type that has arrivals "
                                          f"({', '.join(sorted(types))}), got {show(metric)}")
    return check


def parse_agent_slos(slo, scenario: Scenario, field_name: str = "--slo") -> list[SloPredicate]:
    """The predicates of ``slo`` over the scenario's metrics, in their canonical names
    (``latency_p95_s[type=NAME]``); a per-type predicate without a selector is repeated
    for every type with arrivals."""
    out: list[SloPredicate] = []
    for p in parse_slos(slo, field=field_name, check_name=_check_metric(scenario)):
        m = _METRIC.match(p.metric)
        name = ALIASES.get(m.group(1), m.group(1))
        if m.group(2) is None:
            out += [SloPredicate(f"{name}[type={t}]", p.op, p.threshold) for t in rates_at(scenario, 1.0)]
        else:
            out.append(SloPredicate(f"{name}[{m.group(2)}={m.group(3)}]", p.op, p.threshold))
    return list(dict.fromkeys(out))


def _values(per_run: list[dict], metric: str) -> list:
    m = _METRIC.match(metric)
    group = "types" if m.group(2) == "type" else "resources"
    return [run[group][m.group(3)][m.group(1)] for run in per_run]


class _AgentProber:
    """Probes multipliers for ``search_rate`` (its prober protocol)."""

    def __init__(self, scenario: Scenario, slos: list[SloPredicate], max_probes: int, on_run=None, config=None,
                 by: str = "ci"):
        self.scenario, self.slos, self.max_probes, self.on_run = scenario, slos, max_probes, on_run
        self.by = by
        self.config = config  # the cluster of the llm nodes (a config path or mapping; None: the scenario's)
        self.start = 1.0
        self.limit = max_multiplier(scenario)
        self.probes: list[AgentProbe] = []

    @property
    def exhausted(self) -> bool:
        return len(self.probes) >= self.max_probes

    def _one(self, m: float) -> AgentProbe:
        if m > self.limit:
            return AgentProbe(m, {p.metric: None for p in self.slos}, False, _MISSING_MARGIN, False, too_large=True)
        result = AgentResult(scaled(self.scenario, m))

        def add(out) -> None:
            result.add(out)
            if self.on_run is not None:
                self.on_run()

        run_runs(result.scenario, add, self.config)
        stats: dict[str, SeedStats | None] = {}
        for p in self.slos:
            vs = _values(result.per_run, p.metric)
            stats[p.metric] = None if any(v is None for v in vs) else seed_stats(vs)
        judged = {p.metric: None if stats[p.metric] is None else self._judged(p, stats[p.metric]) for p in self.slos}
        margins = [_MISSING_MARGIN if judged[p.metric] is None else p.margin(judged[p.metric]) for p in self.slos]
        met = all(judged[p.metric] is not None and p.holds(judged[p.metric]) for p in self.slos)
        uncertain = any(s is not None and s.half_width > 0 and s.low <= p.threshold <= s.high
                        for p, s in ((p, stats[p.metric]) for p in self.slos))
        return AgentProbe(m, stats, met, min(margins), uncertain, types=result.types)

    def _judged(self, p: SloPredicate, s: SeedStats) -> float:
        """The value predicate ``p`` is judged on: the mean, or the CI's end on the side the
        bound limits (its top for an upper bound)."""
        if self.by == "mean":
            return s.mean
        return s.high if p.upper else s.low

    def probe(self, values: list[float]) -> list[AgentProbe]:
        out = [self._one(m) for m in values]
        self.probes += out
        return out


def agents_capacity(scenario, slo, *, runs=None, tolerance=DEFAULT_TOLERANCE, max_probes=MAX_PROBES,
                    on_run=None, config=None, by: str = "ci") -> AgentCapacityResult:
    """The highest multiplier of ``scenario``'s arrival rates meeting every predicate of
    ``slo`` (module docstring).  ``runs`` per probe (None: the scenario's); ``config``: the
    cluster of the llm nodes, overriding the scenario's ``cluster``; ``by``: "ci" (a probe
    meets a predicate when its whole 95 % CI does) or "mean".  Bad input raises ConfigError
    naming the field."""
    sc = with_runs(scenario_of(scenario), runs, "--runs")
    if not rates_at(sc, 1.0):
        raise ConfigError("arrivals", "capacity scales the arrival rates: give at least one type a rate above 0")
    preds = parse_agent_slos(slo, sc)
    tol = as_float(tolerance, "--tolerance", 1e-6, 1.0)
    max_probes = as_int(max_probes, "--max-probes", 1, 1000)
    check_simulations(max_probes * sc.runs, "--max-probes", f"{max_probes} probes x {sc.runs} runs")
    run_setup(sc, config)  # a missing or wrong cluster fails here, before any probe
    by = as_choice(by, "--by", MET_BY)
    prober = _AgentProber(sc, preds, max_probes, on_run, config, by)
    good, bad = search_rate(prober, tol, None, None)
    out = AgentCapacityResult(sc, preds, tol, good.value if good else None, bad.value if bad else None,
                              prober.probes, by=by)
    out.message = _message(out, good, bad, prober)
    return out


def _message(out: AgentCapacityResult, good, bad, prober: _AgentProber) -> str:
    slos = ", ".join(str(p) for p in out.slos)
    n = len(out.probes)
    if good is None:
        low = f" down to {bad.value:.6g} x the scenario's rates" if bad else ""
        return f"no rate meets {slos}{low} ({n} probes)"
    rates = ", ".join(f"{t} {r:.6g}/min" for t, r in rates_at(out.scenario, good.value).items())
    if bad is None:
        return (f"every probed rate meets {slos}, up to {good.value:.6g} x the scenario's rates ({rates}); the "
                f"search stopped there ({n} probes): raise the scenario's rates")
    if bad.too_large:
        return (f"{good.value:.6g} x the scenario's rates ({rates}) meets {slos}; {bad.value:.6g} x would exceed a "
                f"run's size limits (docs/limits.md 'Agent scenarios'): shorten duration_s to search higher")
    text = (f"highest rate meeting {slos}: {good.value:.6g} x the scenario's rates ({rates}); {bad.value:.6g} x "
            f"fails ({n} probes x {out.scenario.runs} runs)")
    if good.uncertain or bad.uncertain:
        text += "; limited by run noise: a metric's 95 % CI contains its threshold, so more runs would sharpen it"
    elif prober.exhausted and bad.value > good.value * (1 + out.tolerance):
        text += f"; stopped after {n} probes (--max-probes) before the {out.tolerance:g} tolerance"
    return text


__all__ = ["AgentCapacityResult", "AgentProbe", "agents_capacity", "parse_agent_slos", "rates_at", "scaled"]
