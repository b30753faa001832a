"""Parameter sweeps and side-by-side comparisons (``blis-fast sweep``, ``blis-fast compare``).

A sweep runs every point of a grid -- the cartesian product of ``--set NAME=VALUES`` axes,
in the order given -- ``seeds`` times each (the same seeds at every point), all in one
parallel batch, and reduces each metric to its mean over the seeds and a 95 % confidence
interval.  A comparison is the same thing over several base configurations: every
configuration sees the same grid, the same workload settings and the same seeds, so the
configurations are the only difference.

``NAME`` is a flat setting (``rate``, ``num_instances``, ``max_num_seqs``,
``token_bucket_capacity``, ``routing_policy`` ...: every name of ``FLAG_PATHS``), the same
setting's run-config path (``kv_tiers.cpu_blocks`` is ``kv_cpu_blocks``, ``workload.rate``
is ``rate``: the axis takes the flat name), or one entry of a weight setting,
``routing_scorers.queue-depth``, ``scheduler_weights.priority``, ``slo_class_weights.1``
(the rest of the setting stays as configured).  ``VALUES`` is a
range ``start:stop:step`` (stop included) or a comma-separated list (numbers or names).
Every point's configuration is built and validated before anything runs.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from decimal import Decimal, Overflow, localcontext
from typing import Callable, Sequence, get_type_hints

from blis_fast.config.policy import PROGRAM_FIELDS
from blis_fast.config.sim import FLAG_PATHS, SimConfig, flat_name
from blis_fast.config.validate import FLOAT_TINY, as_list, as_str, parse_decimal, show, show_text
from blis_fast.errors import ConfigError
from blis_fast.results.adequacy import worst_verdict
from blis_fast.studies.measure import ADEQUACY, SLO_JUDGED, TABLE_METRICS, check_metric
from blis_fast.studies.runs import (SeedStats, check_jobs, check_seeds, check_simulations, configs_for, run_all,
                                   seed_list, seed_stats)
from blis_fast.studies.tables import interval_text, text_table, write_rows
from blis_fast.results.objectives import split_metric, untargeted_message
from blis_fast.workload.spec import load_spec
from blis_fast.results.slo import has_targets
from blis_fast.run.resolve import workload_spec
from blis_fast.run.api import as_config

MAX_POINTS = 10_000  # grid points of one study (x configurations)
MAX_AXES = 8
MAX_EXTRA_METRICS = 256  # --metrics names of one study
MAX_NOTED = 4  # inadequate points named in the warning line


@dataclass(frozen=True)
class Axis:
    """One swept setting: its name as given (a config path as its flat name) and its values in order."""

    name: str
    values: tuple


def _number_or_name(text: str, field: str):
    """A list value: an int (plain digits), a float (a decimal point or an exponent) or a
    name.  A number beyond the float range (``1e999999``, ``1e-999999``) is refused rather
    than turned into inf or 0."""
    s = text.strip()
    d = parse_decimal(s)
    if d is None or not d.is_finite():
        return as_str(s, field)
    if d == d.to_integral_value() and "." not in s and "e" not in s.lower():
        return int(d)  # (parse_decimal admits at most 400 characters: no quadratic int())
    return _float_of(d, text, field)


def _float_of(d: Decimal, text: str, field: str) -> float:
    x = float(d)
    if not math.isfinite(x) or (d != 0 and abs(x) < FLOAT_TINY):
        raise ConfigError(field, f"{show(text)} is beyond the range of a float (normal, |x| < 1.8e308)")
    return x


def parse_values(text: str, field: str) -> tuple:
    """``start:stop:step`` (stop included, ``step`` > 0; integers if all three are) or a
    comma-separated list of numbers or names."""
    text = as_str(text, field, nonempty=False)
    if ":" in text:
        parts = text.split(":")
        nums = [parse_decimal(p.strip()) for p in parts]
        if len(parts) != 3 or any(n is None or not n.is_finite() for n in nums):
            raise ConfigError(field, f"a range is start:stop:step with three numbers, got {show(text)}")
        start, stop, step = nums
        if step <= 0 or stop < start:
            raise ConfigError(field, f"a range needs step > 0 and stop >= start, got {show(text)}")
        with localcontext() as ctx:
            ctx.traps[Overflow] = False  # (stop - start) / step beyond Decimal's range is +Infinity: too many
            count = (stop - start) / step
        if not count.is_finite() or count >= MAX_POINTS:
            raise ConfigError(field, f"{show(text)} has more than {MAX_POINTS} values")
        count = int(count) + 1
        exact = [start + k * step for k in range(count)]  # decimals: 0.1 steps stay exact
        integral = all(x == x.to_integral_value() for x in (start, stop, step))
        return tuple(int(x) if integral else _float_of(x, text, field) for x in exact)
    items = [s for s in text.split(",")]
    if not items or any(not s.strip() for s in items):
        raise ConfigError(field, f"expected start:stop:step or a comma-separated list, got {show(text)}")
    if len(items) > MAX_POINTS:
        raise ConfigError(field, f"more than {MAX_POINTS} values")
    return tuple(_number_or_name(s, field) for s in items)


def swept_programs(specs) -> dict[str, str]:
    """{program setting: its first swept expression} of the ``--set`` specs that sweep one:
    the study's base configuration takes it, so ``--routing-policy expression`` needs no
    ``--routing-program`` of its own."""
    out = {}
    for spec in specs or ():
        name, sep, values = str(spec).partition("=")
        name = name.strip().replace("-", "_")
        if sep and name in PROGRAM_FIELDS and values.split(";")[0].strip():
            out.setdefault(name, values.split(";")[0].strip())
    return out


def parse_programs(text: str, field: str) -> tuple:
    """The values of a program setting (``routing_program``, ...): expressions separated by
    ``;`` (each checked when its point's configuration is built)."""
    items = [s.strip() for s in as_str(text, field, max_len=100_000).split(";")]
    if not items or any(not s for s in items):
        raise ConfigError(field, f"expected expressions separated by ';', got {show(text)}")
    if len(items) > MAX_POINTS:
        raise ConfigError(field, f"more than {MAX_POINTS} values")
    return tuple(items)


def _entry_kind(head: str) -> str | None:
    """"dict" or "list" for a setting whose entries may be swept one at a time
    (``routing_scorers.queue-depth``, ``slo_class_weights.1``), else None."""
    section, _, attr = FLAG_PATHS[head].rpartition(".")
    owner = get_type_hints(SimConfig)[section] if section else SimConfig
    kind = str(get_type_hints(owner).get(attr, ""))
    return "dict" if kind.startswith("dict[") else "list" if kind.startswith("list[float]") else None


def parse_axis(spec, field: str = "--set") -> Axis:
    """``NAME=VALUES`` (module docstring) -> Axis; the name is checked here, the values
    when each point's configuration is built."""
    if isinstance(spec, Axis):
        return spec
    if isinstance(spec, tuple) and len(spec) == 2:
        name, values = spec
        name = as_str(name, field, max_len=256)
        if isinstance(values, str):
            values = parse_values(values, f"{field} {show_text(name)}")
        else:
            values = tuple(as_list(values, f"{field} {show_text(name)}", max_len=MAX_POINTS, what="a list of values"))
    else:
        text = as_str(spec, field)
        name, sep, values_text = text.partition("=")
        if not sep or not name.strip():
            raise ConfigError(field, f"expected NAME=start:stop:step or NAME=v1,v2,..., got {show(text)}")
        name = name.strip()
        if name.replace("-", "_") in PROGRAM_FIELDS:  # formulas hold commas and colons: ';' separates them
            values = parse_programs(values_text, f"{field} {show_text(name)}")
        else:
            values = parse_values(values_text, f"{field} {show_text(name)}")
    name = flat_name(name) or name  # (a run-config path: kv_tiers.cpu_blocks -> kv_cpu_blocks)
    head, dot, key = name.partition(".")
    head = head.replace("-", "_")
    if head not in FLAG_PATHS or (dot and not key):
        raise ConfigError(field, f"unknown setting {show(name)}; use a flat setting name (rate, num_instances, "
                                 f"max_num_seqs, ...: see 'blis-fast run --help') or WEIGHTS.KEY "
                                 f"(routing_scorers.queue-depth)")
    if dot:
        kind = _entry_kind(head)
        if kind is None:
            raise ConfigError(field, f"{show(name)}: {head} has no entries to sweep; only the weight settings "
                                     f"routing_scorers, scheduler_weights, fitness_weights, snapshot_intervals "
                                     f"(by key) and slo_class_weights, alpha_coeffs, beta_coeffs (by index) do")
        if kind == "list" and not (key.isascii() and key.isdigit() and len(key) <= 4):
            raise ConfigError(field, f"{show(name)}: {head} is a list: index it with a number below 10000")
    if not values:
        raise ConfigError(f"{field} {show_text(name)}", "needs at least one value")
    return Axis(head + (f".{key}" if dot else ""), tuple(values))


def point_settings(cfg: SimConfig, point: dict) -> dict:
    """The flat overrides of one grid point (weight entries merged into the configured
    weights)."""
    out: dict = {}
    for name, value in point.items():
        head, dot, key = name.partition(".")
        if not dot:
            out[head] = value
            continue
        section, _, attr = FLAG_PATHS[head].rpartition(".")
        current = out.get(head, getattr(getattr(cfg, section) if section else cfg, attr))
        if head == "routing_scorers" and current is None:
            current = cfg.policy.scorers()  # the defaults the weighted router would use
        if isinstance(current, (list, tuple)) or (current is None and key.isdigit()):
            items = list(current or [])
            if not key.isdigit() or int(key) > len(items) + 1000:
                raise ConfigError(f"--set {name}", f"{head} is a list: index it with a number, got {show(key)}")
            idx = int(key)
            items += [0.0] * (idx + 1 - len(items))
            items[idx] = value
            out[head] = items
        else:
            merged = dict(current or {})
            merged[key] = value
            out[head] = merged
    return out


@dataclass
class SweepResult:
    """Every point of a sweep (or comparison): its settings, and each metric over seeds."""

    axes: list[Axis]
    labels: list[str | None]  # configuration labels (compare); [None] for a sweep
    seeds: list[int]
    metrics: list[str]
    points: list[dict] = field(default_factory=list)  # {"config": label, **axis values}
    stats: list[dict[str, SeedStats]] = field(default_factory=list)
    offered_rate: list[float | None] = field(default_factory=list)  # requests/s offered (None: a trace)
    adequacy: list[str] = field(default_factory=list)  # per point: the worst verdict of its runs (results.adequacy)
    requested: list[str] = field(default_factory=list)  # the metrics the user named (--metrics), in order

    def rows(self) -> list[dict]:
        """One flat dict per point: config label (compare), axis values, the offered rate
        (requests/s, every arriving request counted: ``offered_rate``), seeds, the adequacy
        of its runs (the worst verdict: ok, unfinished, too_short, saturated), then per
        metric its mean and, with several seeds, ``<metric>_ci95``; a comparison of several
        configurations adds ``<metric>_diff`` (and ``_diff_ci95``), the paired difference
        against the first configuration (``differences``; null on the first's rows)."""
        out = []
        diffs = self.differences()
        for pt, st, rate, verdict, diff in zip(self.points, self.stats, self.offered_rate, self.adequacy, diffs):
            row = {} if self.labels == [None] else {"config": pt["config"]}
            row.update({a.name: pt[a.name] for a in self.axes})
            row["offered_rate"] = rate
            row["seeds"] = len(self.seeds)
            row["adequacy"] = verdict
            for m in self.metrics:
                row[m] = st[m].mean
                if len(self.seeds) > 1:
                    row[f"{m}_ci95"] = st[m].half_width
            if self.compared and len(self.labels) > 1:  # paired against the first configuration
                for m in self.metrics:
                    row[f"{m}_diff"] = None if diff is None else diff[m].mean
                    if len(self.seeds) > 1:
                        row[f"{m}_diff_ci95"] = None if diff is None else diff[m].half_width
            out.append(row)
        return out

    def to_dict(self) -> dict:
        return {"axes": {a.name: list(a.values) for a in self.axes},
                "configs": [lb for lb in self.labels if lb is not None], "seeds": self.seeds,
                "metrics": self.metrics, "rows": self.rows()}

    def write_table(self, path: Path, flag: str = "--out") -> None:
        """The rows as Parquet or CSV (by suffix), atomically."""
        write_rows(self.rows(), path, flag)

    @property
    def compared(self) -> bool:
        """Several configurations (``compare``), not one swept configuration."""
        return self.labels != [None]

    def differences(self) -> list[dict[str, SeedStats] | None]:
        """Per point, each metric's paired difference against the first configuration at
        the same grid point: the mean over seeds of (this run - the first configuration's
        run with the same seed) and its 95 % interval -- the same seeds give the same
        arrivals, so the pairing removes the workload's noise.  None for the first
        configuration's points (and for every point of a sweep)."""
        if not self.compared:
            return [None] * len(self.points)
        per_config = len(self.points) // len(self.labels)
        out: list[dict[str, SeedStats] | None] = []
        for k, st in enumerate(self.stats):
            if k < per_config:
                out.append(None)
                continue
            first = self.stats[k % per_config]
            out.append({m: seed_stats([a - b for a, b in zip(st[m].values, first[m].values)]) for m in self.metrics})
        return out

    def header(self) -> str:
        """What every row is: the seeds per point and what a ± means."""
        n = len(self.seeds)
        seeds = f"{n} seed{'s' if n > 1 else ''} per point ({', '.join(map(str, self.seeds[:5]))}" \
                f"{', ...' if n > 5 else ''})"
        what = "mean ± 95 % confidence interval over the seeds" if n > 1 else "one run: no interval (--seeds N)"
        return f"{seeds}; {what}"

    def text(self, columns: Sequence[str] | None = None, width: int | None = None) -> str:
        """A text table of the axes and the key metrics (all metrics if ``columns`` None),
        numbers as the ``run`` view prints them, means and intervals rounded to what the
        interval supports (``tables.interval_text``), under a header line naming the seeds;
        a comparison also shows each configuration's paired difference against the first
        one (``differences``).  Wider than ``width``: split into blocks of columns."""
        shown = [m for m in (columns or self.metrics) if m in self.metrics]
        if self.compared and not self.axes:
            return self.header() + "\n\n" + self._side_by_side(shown, width)
        keys = (["config"] if self.compared else []) + [a.name for a in self.axes]
        body = []
        for pt, st in zip(self.points, self.stats):
            cells = ([str(pt["config"])] if self.compared else []) + [_fmt(pt[a.name]) for a in self.axes]
            body.append(cells + [self._cell(m, st[m]) for m in shown])
        out = self.header() + "\n\n" + text_table(keys + shown, body, left=len(keys), width=width)
        if self.compared and len(self.labels) > 1:
            diffs = [(pt, d) for pt, d in zip(self.points, self.differences()) if d is not None]
            rows = [[str(pt["config"])] + [_fmt(pt[a.name]) for a in self.axes] + [self._diff(m, d[m]) for m in shown]
                    for pt, d in diffs]
            out += (f"\n\ndifference against {self.labels[0]} (paired: same seeds, same point)\n\n"
                    + text_table(keys + shown, rows, left=len(keys), width=width))
        return out

    def adequacy_note(self) -> str | None:
        """One line naming the points whose runs are too short, saturated or unfinished
        (None when every run is adequate): their numbers do not describe steady state."""
        bad = [(k, v) for k, v in enumerate(self.adequacy) if v != "ok"]
        if not bad:
            return None

        def where(k):
            pt = self.points[k]
            parts = ([str(pt["config"])] if self.compared else []) + [f"{a.name}={_fmt(pt[a.name])}"
                                                                      for a in self.axes]
            return " ".join(parts) or "the run"

        shown = "; ".join(f"{where(k)}: {v.replace('_', ' ')}" for k, v in bad[:MAX_NOTED])
        more = f"; and {len(bad) - MAX_NOTED} more" if len(bad) > MAX_NOTED else ""
        return (f"blis-fast: warning: {len(bad)} of {len(self.points)} points ran inadequately ({shown}{more}); "
                f"their numbers are not steady state: lengthen the runs (--num-requests, or a workload spec's "
                f"duration_s) or, if saturated, lower the load (the adequacy column of --out and --json)")

    def _cell(self, metric: str, s: SeedStats) -> str:
        return interval_text(metric, s.mean, s.half_width)

    def _diff(self, metric: str, s: SeedStats) -> str:
        """A paired difference, signed; of a fraction in percentage points (pp); "0" when
        every seed gave the same value."""
        if s.mean == 0 and s.half_width == 0:
            return "0"
        text = interval_text(metric, s.mean, s.half_width)
        if text.endswith("%"):
            text = text[:-1] + " pp"
        return "+" + text if s.mean > 0 else text

    def _side_by_side(self, shown: list[str], width: int | None) -> str:
        """One column per configuration, each after the first followed by its paired
        difference against the first ("Δ label")."""
        diffs = self.differences()
        head = ["metric"]
        for pt, d in zip(self.points, diffs):
            head += [str(pt["config"])] + ([f"Δ {pt['config']}"] if d is not None else [])
        body = []
        for m in shown:
            row = [m]
            for st, d in zip(self.stats, diffs):
                row += [self._cell(m, st[m])] + ([self._diff(m, d[m])] if d is not None else [])
            body.append(row)
        return text_table(head, body, left=1, width=width)


def _fmt(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def class_names(cfg: SimConfig) -> list[str]:
    """The SLO classes of the config's workload spec (none for other workloads)."""
    if not cfg.workload.spec_filepath:
        return []

    return list(load_spec(cfg.workload.spec_filepath).slo_classes)


def targeted_class_names(cfg: SimConfig) -> list[str] | None:
    """The SLO classes of the config's workload that set at least one target: those of its
    workload spec, none for a generated workload; None for a trace (its header may set
    targets: unknown before it is read)."""
    if cfg.workload.spec_filepath:
        return [c for c, t in load_spec(cfg.workload.spec_filepath).slo_classes.items() if has_targets(t)]
    return None if cfg.workload.type == "traces" else []


def check_targeted(metrics: Sequence[str], cfgs: Sequence[SimConfig], field: str) -> None:
    """Refuse, before running, ``slo_attainment[class=C]`` where a configuration's workload
    spec defines C without any target (its attainment would only count completions;
    ``objectives.metric_value`` refuses it in a run too)."""
    for cfg in cfgs:
        targeted = targeted_class_names(cfg)
        if targeted is None:
            continue
        known = class_names(cfg)
        for m in metrics:
            base, kind, name = split_metric(m, field)
            if base == "slo_attainment" and kind == "class" and name in known and name not in targeted:
                raise ConfigError(field, untargeted_message(m, name))


def study_metrics(cfgs: Sequence[SimConfig], extra=None, field: str = "--metrics") -> list[str]:
    """TABLE_METRICS (without the SLO-judged ones, ``SLO_JUDGED``, when no configuration's
    workload sets an SLO target), SLO attainment per class that sets targets of every
    configuration's workload, then ``extra`` (names or comma-separated text), each checked."""
    targeted = [targeted_class_names(cfg) for cfg in cfgs]
    judged = any(t is None or t for t in targeted)
    names = [m for m in TABLE_METRICS if judged or m not in SLO_JUDGED]
    for classes in targeted:
        names += [f"slo_attainment[class={c}]" for c in classes or ()]
    requested = requested_metrics(extra, field)
    check_targeted(requested, cfgs, field)
    return list(dict.fromkeys(names + requested))


def requested_metrics(extra, field: str = "--metrics") -> list[str]:
    """The metric names of ``extra`` (names or comma-separated text), each checked."""
    names = []
    if extra:
        if isinstance(extra, str):
            items = as_str(extra, field, max_len=100_000).split(",")
        else:
            items = as_list(extra, field, max_len=MAX_EXTRA_METRICS, what="metric names")
        if len(items) > MAX_EXTRA_METRICS:
            raise ConfigError(field, f"at most {MAX_EXTRA_METRICS} metrics, got {len(items)}")
        for m in items:
            m = as_str(m, field).strip()
            check_metric(m, field)
            names.append(m)
    return list(dict.fromkeys(names))


def run_study(bases: Sequence[tuple[str | None, SimConfig]], sets=(), *, seeds: int = 1, metrics=None,
              jobs: int | None = None, on_run: Callable[[], None] | None = None,
              on_start: Callable[[int], None] | None = None,
              on_configs: Callable[[list[SimConfig]], None] | None = None) -> SweepResult:
    """Every (configuration, grid point) x seed, in one parallel batch: see the module
    docstring.  ``on_configs(configs)`` once every run's configuration is built and
    before any runs (the CLI checks its outputs against the files they read there),
    ``on_start(total runs)`` before the first run, ``on_run()`` after each."""
    if sets is None:
        sets = ()
    items = [sets] if isinstance(sets, (str, Axis)) else as_list(sets, "--set", max_len=MAX_AXES,
                                                                  what="a list of NAME=VALUES")
    axes = [parse_axis(s) for s in items]
    if len(axes) > MAX_AXES:
        raise ConfigError("--set", f"at most {MAX_AXES} swept settings, got {len(axes)}")
    if len({a.name for a in axes}) != len(axes):
        raise ConfigError("--set", "a setting is swept twice")
    for a in axes:
        if a.name == "seed":
            raise ConfigError("--set seed", "every point runs the same seeds: use --seeds N (seeds from --seed on)")
        if a.name == "rate" and any(c.workload.spec_filepath for _, c in bases):
            raise ConfigError("--set rate", "a workload spec sets its own client rates: sweep rate_scale instead")
    n_seeds = check_seeds(seeds)
    jobs = check_jobs(jobs)
    points = math.prod(len(a.values) for a in axes) * len(bases)  # counted before the grid is built
    if points > MAX_POINTS:
        raise ConfigError("--set", f"{points} points, more than {MAX_POINTS}")
    check_simulations(points * n_seeds, "--seeds" if n_seeds > 1 else "--set", f"{points} points x {n_seeds} seeds")
    grid = list(itertools.product(*(a.values for a in axes))) or [()]
    names = study_metrics([c for _, c in bases], metrics)
    seeds_used = seed_list(bases[0][1], n_seeds)
    out = SweepResult(axes, [lb for lb, _ in bases], seeds_used, names, requested=requested_metrics(metrics))
    configs, where = [], []
    for label, base in bases:
        for values in grid:
            point = dict(zip((a.name for a in axes), values))
            cfgs = _point_configs(base, point, seeds_used)
            out.points.append({"config": label, **point})
            out.offered_rate.append(offered_rate(cfgs[0]))
            configs += cfgs
            at = ", ".join([*([show_text(label)] if label is not None else []),
                            *(f"{k}={show_text(v, 40)}" for k, v in point.items())])
            where += [at] * len(cfgs)
    if on_configs is not None:
        on_configs(configs)
    if on_start is not None:
        on_start(len(configs))
    rows = run_all(configs, names, jobs, on_run, where)
    for k in range(len(out.points)):
        per_seed = rows[k * n_seeds:(k + 1) * n_seeds]
        out.stats.append({m: seed_stats([r[m] for r in per_seed]) for m in names})
        out.adequacy.append(worst_verdict(r[ADEQUACY].verdict for r in per_seed))
    return out


def offered_rate(cfg: SimConfig) -> float | None:
    """The arrival rate a config offers, requests/s: --rate (x rate_scale), a workload
    spec's rate-driven clients' total (x rate_scale) with every request that arrives
    counted -- follow-up turns of sessions included (``WorkloadSpec.request_rate``) --,
    None for a trace."""
    w = cfg.workload
    if w.spec_filepath:
        return workload_spec(cfg).request_rate
    return None if w.type == "traces" else w.rate * w.rate_scale


def _point_configs(base: SimConfig, point: dict, seeds: list[int]) -> list[SimConfig]:
    settings = point_settings(base, point)
    where = ", ".join(f"{k}={show_text(v, 40)}" for k, v in point.items())
    try:
        return configs_for(base, settings, seeds)
    except ConfigError as exc:
        raise ConfigError(f"--set {where}" if where else exc.field, f"{exc.field}: {exc.message}") from None


def sweep(sets, config=None, *, seeds: int = 1, metrics=None, jobs: int | None = None,
          on_run: Callable[[], None] | None = None, **overrides) -> SweepResult:
    """Run the grid of ``sets`` (``"rate=10:100:10"``, a list of such texts, or
    ``[("rate", [10, 20])]``) on ``config`` + ``overrides`` (as ``blis_fast.simulate``),
    ``seeds`` seeds per point; ``metrics`` adds metric names to the table."""
    return run_study([(None, as_config(config, overrides))], sets, seeds=seeds, metrics=metrics, jobs=jobs,
                     on_run=on_run)


def compare(configs, sets=(), *, seeds: int = 1, metrics=None, jobs: int | None = None,
            on_run: Callable[[], None] | None = None, **overrides) -> SweepResult:
    """Run every configuration of ``configs`` (``{label: config}``, or a list of YAML
    paths labelled by file name) on the same grid, workload settings (``overrides`` apply
    to each) and seeds."""
    if isinstance(configs, dict):
        items = list(configs.items())
    elif isinstance(configs, (list, tuple)):
        items = [(Path(c).stem if isinstance(c, (str, Path)) else f"config{k + 1}", c) for k, c in enumerate(configs)]
    else:
        raise ConfigError("configs", f"must be a mapping label -> config or a list of YAML files, got {show(configs)}")
    if len(items) < 1:
        raise ConfigError("configs", "needs at least one configuration")
    labels = [str(lb) for lb, _ in items]
    if len(set(labels)) != len(labels):
        raise ConfigError("configs", f"labels must differ, got {show(labels)}")
    bases = [(str(lb), as_config(c, overrides)) for lb, c in items]
    return run_study(bases, sets, seeds=seeds, metrics=metrics, jobs=jobs, on_run=on_run)
