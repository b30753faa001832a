"""Capacity search: the highest arrival rate, or the fewest instances at a given rate,
that meets every SLO predicate (``blis_fast.capacity``, ``blis-fast capacity``).

Each *probe* simulates one rate (or instance count) once per seed -- the same seeds at
every probe (common random numbers: with Poisson arrivals the gaps of seed s at rate r are
the same exponential draws scaled by 1/r, so neighbouring probes differ by the rate, not
by luck) -- and reduces every SLO metric to its mean over the seeds and a 95 % confidence
interval.  A probe *meets* the SLOs when every predicate holds for the mean.

Rate search, on x = log(rate) -- the offered rate: ``--rate``, or for a workload spec the
total of its rate-driven clients' rates, which every probe scales (``workload.rate_scale``):
1. bracket: from the config's rate (or ``rate_min`` / ``rate_max``), step up while the
   SLOs hold (or down while they fail) by factors 2, 4, 8, ... until a met and a failed
   probe enclose the answer;
2. refine with the ITP method (Oliveira and Takahashi, 2020): a regula-falsi step on the
   probes' margins (``studies.slo``), truncated and projected so that it never needs more
   probes than bisection (+1), and usually far fewer, until failed / met rate <= 1 +
   ``tolerance``.
The answer is the highest met rate.  It is *limited by seed noise* when, at the last met
or the first failed probe, some metric's confidence interval contains its threshold: the
seeds cannot tell the two sides apart, and more seeds or longer runs would be needed; the
search then stops early rather than probing what it cannot resolve.

Instance search: integers, doubling up from (or halving down to) the config's
``num_instances``, then bisection to adjacent counts; the answer is the smallest count
that met.

Run adequacy (``blis_fast.results.adequacy``; docs/studies.md "Run adequacy"): a probe
meets the SLOs only on adequate runs.  Its runs are sized to the arrival span the met
probes so far needed (SPAN_MARGIN x 10 x their E2E p99; at least the workload's
``num_requests``); a probe whose SLOs hold on runs too short to trust is rerun longer (up
to MAX_LENGTHENINGS times, MAX_PROBE_REQUESTS requests); a saturated probe fails; a
too-short probe that fails counts as failed (a run that starts empty is optimistic).  A
probe that stays too short (or that a horizon cut) stops the search with a message naming
what to lengthen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from blis_fast.config.effective import TRACE, workload_source
from blis_fast.config.sim import SimConfig
from blis_fast.config.validate import MAX_INSTANCES, as_choice, as_float, as_int, escape_controls, show
from blis_fast.errors import ConfigError
from blis_fast.results.adequacy import worst_verdict
from blis_fast.run.api import as_config
from blis_fast.studies.measure import ADEQUACY
from blis_fast.studies.runs import (SeedStats, check_jobs, check_seeds, check_simulations, configs_for, run_all,
                                   seed_list, seed_stats)
from blis_fast.studies.slo import SloPredicate, parse_slos
from blis_fast.text import metric_text
from blis_fast.studies.tables import bracket_text, interval_text, text_table
from blis_fast.workload.spec import load_spec
from blis_fast.results.objectives import known_list, split_metric
from blis_fast.studies.sweep import check_targeted, class_names

SEARCHES = ("rate", "instances")
MAX_RATE = 1e12
DEFAULT_TOLERANCE = 0.01
DEFAULT_SEEDS = 3
MAX_PROBES = 40  # a search that has not converged by then stops with what it has
EXPANSION_STEPS = 12  # bracketing steps each way: factors 2, 4, ..., 2^12 (a ~10^23 range)
# run adequacy (results.adequacy): a probe's runs are sized to cover SPAN_MARGIN x the arrival span
# its E2E p99 needs, lengthened at most MAX_LENGTHENINGS times and to MAX_PROBE_REQUESTS requests
MAX_PROBE_REQUESTS = 200_000
MAX_LENGTHENINGS = 4
SPAN_MARGIN = 1.25


@dataclass(frozen=True)
class Probe:
    """One point of the search: the rate (req/s) or instance count, each SLO metric over
    the seeds, whether it meets the SLOs (every predicate holds for the means and its runs
    are adequate), the smallest margin, and whether some metric's 95 % CI contains its
    threshold (the seeds disagree).  ``verdict`` is the worst adequacy of its runs
    (saturated, too_short, unfinished, ok; ``results.adequacy``), ``num_requests`` the
    requests per run (None: the workload's own), ``holds`` whether the predicates hold
    for the means whatever the adequacy, and ``span_needed_s`` the arrival span its
    longest-latency run needs (10 x its E2E p99; None: unknown)."""

    value: float
    stats: dict[str, SeedStats]
    met: bool
    margin: float
    uncertain: bool
    verdict: str = "ok"
    num_requests: int | None = None
    holds: bool = False
    arrival_rate: float | None = None  # mean over the seeds, req/s, over the last quarter of the arrivals
    completion_rate: float | None = None
    span_s: float | None = None  # the shortest arrival span of its runs
    span_needed_s: float | None = None

    def to_dict(self, slos: list[SloPredicate]) -> dict:
        return {
            "value": self.value, "met": self.met, "uncertain": self.uncertain,
            "metrics": {p.metric: {"mean": self.stats[p.metric].mean, "ci95": self.stats[p.metric].half_width,
                                   "per_seed": list(self.stats[p.metric].values)} for p in slos},
            "adequacy": {"verdict": self.verdict, "num_requests": self.num_requests, "arrival_span_s": self.span_s,
                         "arrival_span_needed_s": self.span_needed_s, "arrival_rate_rps": self.arrival_rate,
                         "completion_rate_rps": self.completion_rate},
        }


@dataclass
class CapacityResult:
    """The answer of a capacity search and how it was found."""

    search: str  # "rate" | "instances"
    answer: float | None  # highest met rate (req/s) / fewest met instances; None if nothing met
    slos: list[SloPredicate]
    seeds: list[int]
    tolerance: float
    probes: list[Probe] = field(default_factory=list)
    failed_neighbour: float | None = None  # the failed probe closest to the answer (rate: above; instances: below)
    noise_limited: bool = False
    message: str = ""

    @property
    def simulations(self) -> int:
        return len(self.probes) * len(self.seeds)

    @property
    def unit(self) -> str:
        return "req/s" if self.search == "rate" else "instances"

    def to_dict(self) -> dict:
        """A JSON-ready dict (deterministic: no wall-clock fields)."""
        return {
            "search": self.search, "answer": self.answer, "unit": self.unit,
            "failed_neighbour": self.failed_neighbour, "noise_limited": self.noise_limited, "message": self.message,
            "slos": [str(p) for p in self.slos], "seeds": self.seeds, "tolerance": self.tolerance,
            "probes_count": len(self.probes), "simulations": self.simulations,
            "probes": [p.to_dict(self.slos) for p in self.probes],
        }

    def table(self, width: int | None = None) -> str:
        """The seeds per probe, the probes as a text table (in probe order; numbers as
        ``tables.interval_text`` rounds them), then the answer."""
        head = [self.search, *(str(p) for p in self.slos), "met"]
        rows = []
        for pr in self.probes:
            cells = [metric_text("rate" if self.search == "rate" else "instances", pr.value, with_unit=False)]
            for p in self.slos:
                s = pr.stats[p.metric]
                cells.append(interval_text(p.metric, s.mean, s.half_width))
            if pr.holds and pr.verdict in ("too_short", "unfinished"):  # neither met nor failed: not measured
                cells.append(f"unknown ({pr.verdict.replace('_', ' ')})")
            else:
                cells.append(("yes" if pr.met else "no") + ("?" if pr.uncertain else "")
                             + (" (saturated)" if pr.verdict == "saturated" else ""))
            rows.append(cells)
        n = len(self.seeds)
        seeds = f"{n} seed{'s' if n > 1 else ''} per probe" + (", mean ± 95 % confidence interval" if n > 1 else "")
        return seeds + "\n\n" + text_table(head, rows, left=0, width=width) + "\n\n" + escape_controls(self.message)


class _Searcher:
    """Runs probes (every seed of one value, in parallel), lengthens the runs of a probe
    that meets the SLOs but is too short to trust, and keeps the probes."""

    def __init__(self, cfg: SimConfig, search: str, slos: list[SloPredicate], seeds: list[int], jobs: int,
                 on_run: Callable[[], None] | None, max_probes: int):
        self.cfg, self.search, self.slos, self.seeds, self.jobs = cfg, search, slos, seeds, jobs
        self.on_run, self.max_probes = on_run, max_probes
        self.probes: list[Probe] = []
        self.spec_rate = 0.0  # a workload spec's total client rate at rate_scale 1 (0: not a spec)
        self.start = cfg.workload.rate * cfg.workload.rate_scale  # the offered rate the search starts from
        if search == "rate" and cfg.workload.spec_filepath:
            self.spec_rate = load_spec(cfg.workload.spec_filepath).total_rate
            if not self.spec_rate > 0:
                raise ConfigError("--search", "rate search needs rate-driven clients; this workload spec has none")
            self.start = self.spec_rate * cfg.workload.rate_scale
        self.metrics = list(dict.fromkeys(p.metric for p in slos))
        # a generated workload is lengthened by its request count; a spec or a trace has its own length
        self.lengthens = not cfg.workload.spec_filepath and cfg.workload.type != "traces"
        self.min_requests = cfg.workload.num_requests  # every probe runs at least these
        self.span_target = 0.0  # arrival span (s) a probe is sized for: learned from the probes that met
        self.unresolved: Probe | None = None  # a probe that met but could not be made adequate: the search stops

    def settings(self, value: float, num_requests: int | None) -> dict:
        out = {} if num_requests is None else {"num_requests": num_requests}
        if self.search == "rate" and self.spec_rate:  # a spec: scale its clients' rates to total ``value``
            return {**out, "rate_scale": value / self.spec_rate}
        if self.search == "rate":
            return {**out, "rate": value, "rate_scale": 1.0}
        return {**out, "num_instances": int(value), "min_instances": None, "max_instances": None}

    def offered(self, value: float) -> float:
        """The arrival rate of a probe at ``value``, req/s."""
        return value if self.search == "rate" else self.start

    def requests_for(self, value: float) -> int | None:
        """Requests per run at ``value``: enough to span ``span_target`` seconds of arrivals,
        at least the workload's, at most MAX_PROBE_REQUESTS (None: the workload's own length)."""
        if not self.lengthens:
            return None
        want = min(math.ceil(self.offered(value) * self.span_target), MAX_PROBE_REQUESTS)
        return max(self.min_requests, want)

    def _run(self, values: list[float], sizes: list[int | None]) -> list[dict]:
        configs = [c for v, n in zip(values, sizes) for c in configs_for(self.cfg, self.settings(v, n), self.seeds)]
        where = [f"{self.search}={v:.6g}" for v in values for _ in self.seeds]
        return run_all(configs, self.metrics, self.jobs, self.on_run, where, metrics_field="--slo")

    def _reduce(self, value: float, per_seed: list[dict], num_requests: int | None) -> Probe:
        stats = {m: seed_stats([r[m] for r in per_seed]) for m in self.metrics}
        holds = all(p.holds(stats[p.metric].mean) for p in self.slos)
        margin = min(p.margin(stats[p.metric].mean) for p in self.slos)
        uncertain = any(stats[p.metric].low <= p.threshold <= stats[p.metric].high
                        and stats[p.metric].half_width > 0 for p in self.slos)
        runs = [r[ADEQUACY] for r in per_seed if r.get(ADEQUACY) is not None]  # None: not assessed
        verdict = worst_verdict(a.verdict for a in runs)
        # a saturated run fails whatever its numbers: its latencies grow with the run's length;
        # a run too short to trust (or cut by the horizon) neither meets nor fails yet
        met = holds and verdict == "ok"
        if verdict == "saturated":
            margin = min(margin, 0.0)

        def mean(xs):
            xs = [x for x in xs if x is not None]
            return math.fsum(xs) / len(xs) if xs else None

        needed = [a.span_needed_s for a in runs if a.span_needed_s is not None]
        return Probe(value, stats, met, margin, uncertain, verdict, num_requests, holds,
                     mean(a.arrival_rate_rps for a in runs), mean(a.completion_rate_rps for a in runs),
                     min((a.arrival_span_s for a in runs), default=None), max(needed, default=None))

    def _longer(self, probe: Probe) -> int | None:
        """More requests per run for a probe too short to trust, or None if it cannot be lengthened."""
        if not self.lengthens or probe.num_requests is None or probe.num_requests >= MAX_PROBE_REQUESTS:
            return None
        need = (probe.span_needed_s or 0.0) * SPAN_MARGIN
        want = max(math.ceil(self.offered(probe.value) * need), 2 * probe.num_requests)
        return min(want, MAX_PROBE_REQUESTS)

    def probe(self, values: list[float]) -> list[Probe]:
        """Probe ``values`` (all seeds of all of them in one parallel batch).  A probe whose
        SLOs hold on runs too short to trust is rerun longer (up to MAX_LENGTHENINGS times);
        one that still is, or that the horizon cut, is ``unresolved`` and the search stops.
        A too-short probe that fails counts as failed: a run that starts with an empty
        cluster is optimistic about latency, a longer one would fail too."""
        sizes = [self.requests_for(v) for v in values]
        rows = self._run(values, sizes)
        n = len(self.seeds)
        out = []
        for k, v in enumerate(values):
            per_seed, size = rows[k * n:(k + 1) * n], sizes[k]
            p = self._reduce(v, per_seed, size)
            for _ in range(MAX_LENGTHENINGS):
                longer = self._longer(p) if p.holds and p.verdict == "too_short" else None
                if longer is None:
                    break
                self.span_target = max(self.span_target, longer / self.offered(v))
                p = self._reduce(v, self._run([v], [longer]), longer)
            if p.holds and p.verdict in ("too_short", "unfinished") and self.unresolved is None:
                self.unresolved = p
            if p.met and p.span_needed_s is not None:
                self.span_target = max(self.span_target, p.span_needed_s * SPAN_MARGIN)
            out.append(p)
        self.probes += out
        return out

    @property
    def exhausted(self) -> bool:
        return len(self.probes) >= self.max_probes or self.unresolved is not None


def _round_rate(r: float) -> float:
    """Six significant digits: the printed rate reproduces the probe with ``--rate``."""
    return float(f"{min(max(r, 1e-9), MAX_RATE):.6g}")


def search_rate(s, tol: float, rate_min: float | None, rate_max: float | None):
    """The rate search's core (module docstring): bracket, then ITP on log(rate).
    (highest met probe, lowest failed probe above it) -- either may be None.

    ``s`` is any prober: ``s.start`` (the rate to start from), ``s.probe([rates])`` (a
    list of probes, each with ``value``, ``met``, ``margin`` and ``uncertain`` as
    ``Probe``) and ``s.exhausted`` (True: probe no more).  ``_Searcher`` probes cluster
    runs; blis_fast/agents/capacity.py probes agent scenarios with the same core."""
    lo = hi = None  # met probe, failed probe
    if rate_min is not None or rate_max is not None:
        given = [r for r in (rate_min, rate_max) if r is not None]
        for p in s.probe([_round_rate(r) for r in given]):
            if p.met and (lo is None or p.value > lo.value):
                lo = p
            if not p.met and (hi is None or p.value < hi.value):
                hi = p
        if lo is not None and hi is not None and lo.value > hi.value:
            lo = None  # a met rate above a failed one: start again from the failed one
        if rate_min is not None and rate_max is not None and (lo is None or hi is None):
            return lo, hi  # the answer lies outside [rate_min, rate_max]
    else:
        p = s.probe([_round_rate(s.start)])[0]
        lo, hi = (p, None) if p.met else (None, p)
    step = 1.0
    for _ in range(EXPANSION_STEPS):  # bracket: factors 2, 4, 8, ...
        if (lo is None) == (hi is None) or s.exhausted:
            break
        step *= 2
        if hi is None:
            r = _round_rate(lo.value * step)
            if r <= lo.value:
                break
            p = s.probe([r])[0]
            lo, hi = (p, None) if p.met else (lo, p)
        else:
            r = _round_rate(hi.value / step)
            if r >= hi.value:
                break
            p = s.probe([r])[0]
            lo, hi = (p, hi) if p.met else (None, p)
    if lo is None or hi is None:
        return lo, hi
    # ITP on x = log(rate), f = -margin (f(a) < 0 at the met end, f(b) > 0 at the failed end)
    eps = math.log1p(tol) / 2
    a, b = math.log(lo.value), math.log(hi.value)
    n_max = max(0, math.ceil(math.log2(max((b - a) / (2 * eps), 1.0)))) + 1
    k1, k2 = 0.2 / (b - a), 2.0
    j = 0
    while hi.value > lo.value * (1 + tol) and not s.exhausted:
        if lo.uncertain and hi.uncertain:
            break  # the seeds cannot tell the two ends apart: more probes would not resolve it
        fa, fb = -lo.margin, -hi.margin
        mid = (a + b) / 2
        r = max(eps * 2.0 ** (n_max - j) - (b - a) / 2, 0.0)
        delta = k1 * (b - a) ** k2
        x_f = (b * fa - a * fb) / (fa - fb) if fb != fa else mid
        sigma = 1.0 if mid >= x_f else -1.0
        x_t = x_f + sigma * delta if delta <= abs(mid - x_f) else mid
        x = x_t if abs(x_t - mid) <= r else mid - sigma * r
        rate = _round_rate(math.exp(x))
        if not lo.value < rate < hi.value:
            rate = _round_rate(math.sqrt(lo.value * hi.value))
            if not lo.value < rate < hi.value:
                break  # six significant digits cannot split the bracket further
        p = s.probe([rate])[0]
        if p.met:
            lo, a = p, math.log(p.value)
        else:
            hi, b = p, math.log(p.value)
        j += 1
    return lo, hi


def _search_instances(s: _Searcher, cfg: SimConfig, max_instances: int):
    """(fewest met probe, most failed probe below it) -- either may be None."""
    n0 = cfg.deployment.num_instances
    p = s.probe([n0])[0]
    met, failed = (p, None) if p.met else (None, p)
    while not s.exhausted:  # bracket by doubling / halving
        if met is None:
            n = min(int(failed.value) * 2, max_instances)
            if n <= failed.value:
                break
            p = s.probe([n])[0]
        elif failed is None:
            if met.value <= 1:
                break
            p = s.probe([max(int(met.value) // 2, 1)])[0]
        else:
            break
        met, failed = (p, failed) if p.met else (met, p)
    while met is not None and failed is not None and met.value - failed.value > 1 and not s.exhausted:
        if met.uncertain and failed.uncertain:
            break
        p = s.probe([(int(met.value) + int(failed.value)) // 2])[0]
        met, failed = (p, failed) if p.met else (met, p)
    return met, failed


def capacity(slo, config=None, *, search: str = "rate", slo_classes=None, seeds: int = DEFAULT_SEEDS,
             tolerance: float = DEFAULT_TOLERANCE, rate_min: float | None = None, rate_max: float | None = None,
             search_max_instances: int = 1024, max_probes: int = MAX_PROBES, jobs: int | None = None,
             on_run: Callable[[], None] | None = None, **overrides) -> CapacityResult:
    """The highest arrival rate (``search="rate"``) or the fewest instances at the
    config's rate (``search="instances"``) meeting every predicate of ``slo``
    (``"ttft_p99_ms<=200,e2e_p99_ms<=5000"``; ``slo_classes`` applies them per SLO class).

    ``config`` and ``overrides`` are as in ``blis_fast.simulate``; the config's rate (or
    num_instances) is where the search starts.  Every probe runs ``seeds`` seeds (from
    the config's seed on), ``jobs`` at a time (default: all cores), each with at least
    the config's ``num_requests`` and more when its runs are too short for steady state
    (module docstring, "Run adequacy").  ``on_run()`` is called after each simulation
    (progress).  Bad input raises ConfigError.
    """
    search = as_choice(search, "--search", SEARCHES)
    preds = parse_slos(slo, slo_classes)
    n_seeds = check_seeds(seeds)
    tol = as_float(tolerance, "--tolerance", 1e-6, 1.0)
    max_probes = as_int(max_probes, "--max-probes", 1, 10_000)
    check_simulations(max_probes * n_seeds, "--max-probes", f"{max_probes} probes x {n_seeds} seeds")
    jobs = check_jobs(jobs)
    cfg = as_config(config, overrides)
    w = cfg.workload
    if search == "rate" and w.type == "traces" and not w.spec_filepath:
        raise ConfigError("--search", "rate search needs generated arrivals (a distribution, a preset or a "
                                      "workload spec); a trace fixes its own arrival times")
    if search == "instances" and cfg.deployments is not None:
        # which pool would grow is a choice the search cannot make (one H100 is not one A100)
        raise ConfigError("--search", f"instances searches one pool's num_instances; this config has a deployments: "
                                      f"list ({len(cfg.deployments)} deployments, each with its own instances), so "
                                      f"search each deployment as a config of its own, or use --search rate")
    if search == "instances" and cfg.pd.pools:
        # which pool would grow is a choice the search cannot make either (prefill or decode)
        raise ConfigError("--search", "instances searches one pool's num_instances; this config has prefill and "
                                      "decode pools (--prefill-instances, --decode-instances), so sweep them "
                                      "(blis-fast sweep --set prefill_instances=... --set decode_instances=...), or "
                                      "use --search rate")
    if search != "rate" and (rate_min is not None or rate_max is not None):
        raise ConfigError("--rate-min" if rate_min is not None else "--rate-max", "applies to --search rate only")
    if rate_min is not None:
        rate_min = as_float(rate_min, "--rate-min", 0, MAX_RATE, lo_open=True)
    if rate_max is not None:
        rate_max = as_float(rate_max, "--rate-max", 0, MAX_RATE, lo_open=True)
    if rate_min is not None and rate_max is not None and not rate_min < rate_max:
        raise ConfigError("--rate-min", f"must be below --rate-max ({rate_max:g}), got {rate_min:g}")
    max_instances = as_int(search_max_instances, "--search-max-instances", 1, MAX_INSTANCES)
    _check_classes(preds, cfg)
    s = _Searcher(cfg, search, preds, seed_list(cfg, n_seeds), jobs, on_run, max_probes)
    if search == "rate":
        good, bad = search_rate(s, tol, rate_min, rate_max)
    else:
        if cfg.deployment.num_instances > max_instances:
            raise ConfigError("--search-max-instances", f"must be >= num_instances ({cfg.deployment.num_instances}), "
                                                 f"got {max_instances}")
        good, bad = _search_instances(s, cfg, max_instances)
    if s.unresolved is not None and bad is s.unresolved:
        bad = None  # it did not fail: it could not be measured
    out = CapacityResult(search, good.value if good else None, preds, s.seeds, tol, s.probes,
                         bad.value if bad else None)
    out.noise_limited = bool(good and bad and (good.uncertain or bad.uncertain))
    if s.unresolved is not None:
        out.message = _stopped_message(out, good, s)
    else:
        out.message = _message(out, good, bad, s.exhausted, rate_min, rate_max, max_instances)
    if n_seeds == 1 and workload_source(cfg.workload) != TRACE:  # a trace's seeds would all repeat one run
        out.message += "; one seed per probe, so seed noise is not assessed (--seeds 3 gives confidence intervals)"
    return out


def _check_classes(preds: list[SloPredicate], cfg: SimConfig) -> None:
    """Refuse, before running, a [class=NAME] the workload spec does not define."""
    known = class_names(cfg)
    for p in preds:
        _, kind, name = split_metric(p.metric, "--slo")
        if kind == "class" and name not in known:
            raise ConfigError("--slo-class" if p.metric.endswith(f"[class={name}]") else "--slo",
                              f"the workload has no SLO class {show(name)}; its classes: {known_list(known)}")
    check_targeted([p.metric for p in preds], [cfg], "--slo")


def _message(out: CapacityResult, good: Probe | None, bad: Probe | None, exhausted: bool,
             rate_min, rate_max, max_instances) -> str:
    what = "rate" if out.search == "rate" else "instance count"
    slos = ", ".join(str(p) for p in out.slos)
    if good is None:
        if out.search == "rate":
            where = f" at or above --rate-min {rate_min:g}" if rate_min is not None else \
                    f" down to {bad.value:.6g} req/s" if bad else ""
        else:
            where = f" up to {int(bad.value)} instances (--search-max-instances {max_instances})" if bad else ""
        return f"no {what} meets {slos}{where}" + _saturation(bad)
    if bad is None:
        if out.search == "rate" and rate_max is not None:
            return f"every probed rate meets {slos}, up to --rate-max {rate_max:g}: raise --rate-max"
        if out.search == "rate":  # the bracket stopped growing: the probe budget, or a rate no run can reach
            why = "--max-probes" if len(out.probes) >= MAX_PROBES or exhausted else "the bracket's doublings"
            return (f"every probed rate meets {slos}, up to {good.value:.6g} req/s; the search stopped there "
                    f"({why}): start from a higher --rate, or give --rate-min and --rate-max around the answer")
        return f"1 instance meets {slos}"
    if out.search == "rate":
        text = (f"highest rate meeting {slos}: {bracket_text(good.value, bad.value)} req/s "
                f"({good.value:.6g} meets, {bad.value:.6g} fails{_saturation(bad)}; "
                f"{len(out.probes)} probes x {len(out.seeds)} seeds = {out.simulations} simulations)")
    else:
        text = (f"fewest instances meeting {slos}: {int(good.value)} ({int(bad.value)} fails{_saturation(bad)}; "
                f"{len(out.probes)} probes x {len(out.seeds)} seeds = {out.simulations} simulations)")
    if out.noise_limited:
        text += ("; limited by seed noise: a metric's 95 % CI contains its threshold at the bracket's end, so "
                 "more --seeds or longer runs (--num-requests) are needed for a sharper answer")
    elif exhausted and out.search == "rate" and bad.value > good.value * (1 + out.tolerance):
        text += f"; stopped after {len(out.probes)} probes (--max-probes) before the {out.tolerance:g} tolerance"
    return text


def _saturation(p: Probe | None) -> str:
    """", saturated: ..." for a failed probe whose runs were saturated (the backlog grew
    without bound), with its arrival and completion rates."""
    if p is None or p.verdict != "saturated" or p.arrival_rate is None:
        return ""
    return (f", saturated: arrivals {p.arrival_rate:.4g} req/s, completions {p.completion_rate:.4g} req/s "
            f"over the last quarter of its runs")


def _stopped_message(out: CapacityResult, good: Probe | None, s: _Searcher) -> str:
    """The search stopped at a probe whose SLOs hold on runs it could not make adequate:
    what it found so far, and the setting that lengthens the runs."""
    p = s.unresolved
    slos = ", ".join(str(q) for q in out.slos)
    unit = "req/s" if out.search == "rate" else "instances"
    head = f"stopped at {p.value:.6g} {unit}: it meets {slos} on runs "
    if p.verdict == "unfinished":
        head += "the horizon cut with requests in flight, whose latencies are missing: raise --horizon"
    else:
        span = "" if p.span_s is None else f"arrivals span {p.span_s:.3g} s"
        need = "" if p.span_needed_s is None else f", under 10 x their E2E p99 of {p.span_needed_s / 10:.3g} s"
        head += f"too short to trust ({span}{need})"
        target = (p.span_needed_s or 0.0) * SPAN_MARGIN
        if s.lengthens:
            want = max(math.ceil(s.offered(p.value) * target), (p.num_requests or 0) * 2)
            head += (f" even at {p.num_requests:,} requests, the most the search runs per probe: give "
                     f"--num-requests {want} (every probe runs at least that many)")
        elif s.cfg.workload.spec_filepath:
            head += (f"; the workload spec fixes its length: make its duration_s (or num_requests) cover at least "
                     f"{target:.3g} s of arrivals")
        else:
            head += f"; the trace fixes its length: replay one covering at least {target:.3g} s of arrivals"
    found = (f"highest {'rate' if out.search == 'rate' else 'instance count'} meeting {slos} on adequate runs: "
             f"{good.value:.6g} {unit}; " if good is not None else "")
    return found + head
