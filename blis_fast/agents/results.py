"""Results of an agent scenario's runs (issue 26), built on ``run.AgentRunOutput`` only.

Per run:
- per request type: ``completed`` (requests whose every node finished) and the latency
  of those requests -- end (its last node's finish) minus arrival -- as mean, p50, p95 and
  p99 in seconds (percentiles linear-interpolated over µs, as ``blis_fast.results.metrics``);
  ``None`` (JSON null) for a type without a completed request;
- per resource: ``utilization`` = work done / (capacity x span), the exact time average of
  the fraction of its capacity in use, where the span is the run's first arrival to its
  last node finish and the work done is that of the finished nodes (all of them in a
  tools-only run); 0 for a span of 0 (no work at all).

Over N runs each value is the mean over the runs where it is defined, with its sample
standard deviation (``std``; None with fewer than two such runs).  The JSON (``to_dict``):

    {"scenario": NAME, "share": MODE, "runs": N, "seed": S (run k used S + k),
     "types": {TYPE: {completed, latency_mean_s, latency_p50_s, latency_p95_s, latency_p99_s,
                      "std": {the same keys}}},
     "resources": {NAME: {utilization, "std": {"utilization": ...}}},
     "active": {tools_mean, tools_peak, llm_mean, llm_peak, requests_mean, requests_peak,
                "std": {the same keys}},
     "llm": {requests, completed, ttft_mean_s, ttft_p95_s, e2e_mean_s, e2e_p95_s,
             prefix_cache_hit_rate, "std": {...}}       (a scenario with llm nodes only: llm_summary)
     "per_run": [{"seed", "requests", "span_s", "events", "types": {...}, "resources": {...},
                  "active": {...}, "llm": {"calls": {...}}}]}

``active`` (issue 26, "active tools over time") comes from exact step functions of one run
over its span: the tool nodes active (started, not finished), the llm nodes active (llm
calls, ``node_prompt_tokens >= 0``) and the requests in the system (arrived, not ended);
``*_mean`` is the step function's time average over the span, ``*_peak`` its maximum.  A
node or request that never finishes counts until the span's end; one of start == end
counts for 0 µs.  The requests' mean obeys Little's law exactly: in a completed run it is
(requests / span) x their mean latency.  ``active_windows`` gives the same step functions'
averages per time window.

The per-request table (``requests_table``, kept with ``keep_requests``) has one row per node
of every request: run, request (its index in the run, by arrival), type, arrival_us, end_us
(null while unfinished), latency_s, node, start_us, finish_us (null: never started /
finished).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from blis_fast.agents.run import AgentRunOutput, run_runs, scenario_of, with_runs
from blis_fast.agents.scenario import Scenario
from blis_fast.config import memory
from blis_fast.config.validate import as_int
from blis_fast.results.metrics import percentiles_us
from blis_fast_kernels.schema import RequestState

TYPE_METRICS = ("completed", "latency_mean_s", "latency_p50_s", "latency_p95_s", "latency_p99_s")
RESOURCE_METRICS = ("utilization",)
# the llm nodes' requests on the cluster (a run with llm nodes): counts, the cluster's view of
# their latency (TTFT, E2E: from the request's arrival at the cluster) and its prefix cache
LLM_METRICS = ("requests", "completed", "ttft_mean_s", "ttft_p95_s", "e2e_mean_s", "e2e_p95_s",
               "prefix_cache_hit_rate")
ACTIVE_KINDS = ("tools", "llm", "requests")  # the step functions of ``active``, in this order
ACTIVE_METRICS = tuple(f"{kind}_{stat}" for kind in ACTIVE_KINDS for stat in ("mean", "peak"))
MAX_WINDOWS = 1_000_000  # active_windows: 4 float64 arrays of this length, 32 MB
TABLE_BYTES_PER_NODE = 2 * (9 * 8 + 4)  # its 9 columns of 8 bytes and 4 null masks, kept and copied to arrow


def _type_summary(latency_us: np.ndarray) -> dict:
    """The issue's per-type metrics of one run from its completed requests' latencies."""
    if latency_us.size == 0:
        return {"completed": 0, **{k: None for k in TYPE_METRICS[1:]}}
    p50, p95, p99 = percentiles_us(latency_us, (50, 95, 99))
    return {"completed": int(latency_us.size), "latency_mean_s": float(np.mean(latency_us)) / 1e6,
            "latency_p50_s": p50 / 1e6, "latency_p95_s": p95 / 1e6, "latency_p99_s": p99 / 1e6}


def _request_ends(out: AgentRunOutput) -> tuple[np.ndarray, np.ndarray]:
    """(end µs, completed) per request: its last node's finish; completed when every node
    finished."""
    run = out.run
    if run.num_requests == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.bool_)
    first = run.request_first_node[:-1]  # every request has at least one node
    end = np.maximum.reduceat(out.node_finish_us, first)
    completed = np.minimum.reduceat(out.node_finish_us, first) >= 0
    return end, completed


def _span_bounds_us(out: AgentRunOutput) -> tuple[int, int]:
    """(first arrival, last node finish) µs of a run: its span; without a finished node
    nothing was done, a span of 0 at the first arrival (at 0 without requests)."""
    arrivals = out.run.request_arrival_us
    lo_us = int(arrivals[0]) if arrivals.size else 0
    finished = out.node_finish_us[out.node_finish_us >= 0]
    return lo_us, int(finished.max()) if finished.size else lo_us


def _active_intervals(out: AgentRunOutput, lo_us: int, hi_us: int) -> dict:
    """KIND -> (begin, end) int64 µs after ``lo_us`` of what is active: tool nodes and llm
    nodes from start to finish, requests from arrival to end; what never finishes until
    ``hi_us``; clipped to the span, intervals of length 0 dropped (they add nothing to a
    mean, and leaving them out keeps them out of a peak)."""
    run = out.run
    started = out.node_start_us >= 0
    llm = run.node_prompt_tokens >= 0
    end, completed = _request_ends(out)
    pairs = {"tools": (out.node_start_us[started & ~llm], out.node_finish_us[started & ~llm]),
             "llm": (out.node_start_us[started & llm], out.node_finish_us[started & llm]),
             "requests": (run.request_arrival_us, np.where(completed, end, -1))}
    intervals = {}
    for kind, (begin, finish) in pairs.items():
        finish = np.where(finish >= 0, finish, hi_us)  # never finished: active until the span's end
        begin = np.clip(begin, lo_us, hi_us)
        finish = np.clip(finish, lo_us, hi_us)
        keep = finish > begin
        intervals[kind] = (begin[keep] - lo_us, finish[keep] - lo_us)  # int64 µs after the span's start
    return intervals


def _step_function(begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times, level, area) of the count of intervals [begin, end) active (int64 µs):
    ``level[k]`` the count from ``times[k]`` on, ``area[k]`` its integral up to ``times[k]``
    (µs x count, float64).  At equal times the ends come first, so an interval ending where
    another begins does not count twice in the peak."""
    # one sort of keys 2 t (an end) and 2 t + 1 (a begin): no argsort's gather, ends first at a tie
    # (t < 2^62 µs, a run's limit: 2 t + 1 fits in an int64)
    keys = np.concatenate([end << 1, (begin << 1) | 1])
    keys.sort()
    times = keys >> 1
    level = np.cumsum((keys & 1) * 2 - 1)
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(times).astype(np.float64))])
    return times, level, area


def _active_summary(out: AgentRunOutput, lo_us: int, hi_us: int) -> dict:
    """The run's ``active`` metrics (module docstring): time averages over the span and peaks."""
    summary = {}
    for kind, (begin, end) in _active_intervals(out, lo_us, hi_us).items():
        # the integral of the step function is the summed lengths of the intervals
        # (in float64: an int64 sum of up to 10^8 lengths of up to 2^62 µs could overflow)
        summary[f"{kind}_mean"] = (float(np.sum((end - begin).astype(np.float64))) / (hi_us - lo_us)
                                   if hi_us > lo_us else 0.0)
        summary[f"{kind}_peak"] = int(_step_function(begin, end)[1].max()) if begin.size else 0
    return summary


def summarize_run(scenario: Scenario, out: AgentRunOutput) -> dict:
    """One run's per-type, per-resource and ``active`` metrics (module docstring)."""
    run = out.run
    end, completed = _request_ends(out)
    latency = end - run.request_arrival_us
    types = {t.name: _type_summary(latency[completed & (run.request_type == t.index)]) for t in scenario.types}
    lo_us, hi_us = _span_bounds_us(out)
    span_us = hi_us - lo_us
    resources = {}
    for r in scenario.resources:
        util = float(out.work_done[r.index]) / (r.capacity * (span_us / 1e6)) if span_us > 0 else 0.0
        resources[r.name] = {"utilization": util}
    summary = {"seed": run.seed, "requests": run.num_requests, "span_s": span_us / 1e6, "events": out.events,
               "types": types, "resources": resources, "active": _active_summary(out, lo_us, hi_us)}
    if out.cluster is not None:
        summary["llm"] = {"calls": llm_summary(out)}
    return summary


def active_windows(out: AgentRunOutput, windows: int = 60) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(edges_s float64[windows + 1], tools, llm, requests float64[windows]) of one run: the
    exact time average per window of the tool nodes active, the llm nodes active and the
    requests in the system (module docstring) over the run's span (first arrival to last
    node finish; a span of 0 gives one second of zeros).  The windows' averages weighted
    by their widths add up to the run's ``active`` means.  ``windows``: [1, MAX_WINDOWS]."""
    windows = as_int(windows, "windows", 1, MAX_WINDOWS)
    lo_us, hi_us = _span_bounds_us(out)
    width_us = hi_us - lo_us if hi_us > lo_us else 1_000_000
    edges_us = np.linspace(0.0, float(width_us), windows + 1)
    averages = []
    for begin, end in _active_intervals(out, lo_us, hi_us).values():
        if not begin.size:
            averages.append(np.zeros(windows))
            continue
        times, _, area = _step_function(begin, end)
        # the integral is piecewise linear between the changes: interpolating it is exact
        at_edges = np.interp(edges_us, times.astype(np.float64), area)
        averages.append(np.maximum(np.diff(at_edges), 0.0) / np.diff(edges_us))
    edges_s = (lo_us + edges_us) / 1e6
    return edges_s, averages[0], averages[1], averages[2]


def llm_summary(out: AgentRunOutput) -> dict:
    """The llm nodes' requests of one run on its cluster (LLM_METRICS): how many were sent
    and completed, their TTFT and E2E (mean, p95; None without a completed one) and the
    cluster's prefix cache hit rate."""
    reqs = out.cluster.state.reqs[:len(out.cluster.workload)]  # (a P/D run's prefill legs follow)
    sent = reqs["arrival_us"] >= 0
    done = reqs["state"] == RequestState.COMPLETED
    ttft = (reqs["first_token_us"] - reqs["arrival_us"])[done]
    e2e = (reqs["last_token_us"] - reqs["arrival_us"])[done]
    cluster = out.cluster.cluster
    entry = {"requests": int(np.count_nonzero(sent)), "completed": int(np.count_nonzero(done)),
             "prefix_cache_hit_rate": float(cluster.get("prefix_cache_hit_rate", 0.0))}
    for name, v in (("ttft", ttft), ("e2e", e2e)):
        entry[f"{name}_mean_s"] = float(np.mean(v)) / 1e6 if v.size else None
        entry[f"{name}_p95_s"] = percentiles_us(v, (95,))[0] / 1e6 if v.size else None
    return entry


def _mean_std(values: list) -> tuple:
    """(mean, sample std) of the values that are not None; None where undefined."""
    xs = [v for v in values if v is not None]
    if not xs:
        return None, None
    mean = math.fsum(xs) / len(xs)
    if len(xs) < 2:
        return mean, None
    return mean, math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


def _aggregate(per_run: list[dict], group: str, names: list[str], metrics: tuple) -> dict:
    out = {}
    for name in names:
        entry, std = {}, {}
        for m in metrics:
            entry[m], std[m] = _mean_std([r[group][name][m] for r in per_run])
        entry["std"] = std
        out[name] = entry
    return out


def _requests_columns(scenario: Scenario, out: AgentRunOutput) -> dict:
    """One run's rows of the per-request table (module docstring) as numpy columns."""
    run = out.run
    end, completed = _request_ends(out)
    req = run.node_request
    type_offset = np.cumsum([0] + [len(t.nodes) for t in scenario.types])
    node_names = np.array([n.name for t in scenario.types for n in t.nodes], dtype=object)
    type_names = np.array([t.name for t in scenario.types], dtype=object)
    rtype = run.request_type[req]
    return {"run": np.full(run.num_nodes, run.run_index, np.int64), "request": req.astype(np.int64),
            "type": type_names[rtype], "arrival_us": run.request_arrival_us[req],
            "end_us": (end[req], ~completed[req]),
            "latency_s": ((end - run.request_arrival_us)[req] / 1e6, ~completed[req]),
            "node": node_names[type_offset[rtype] + run.node_template],
            "start_us": (out.node_start_us, out.node_start_us < 0),
            "finish_us": (out.node_finish_us, out.node_finish_us < 0)}


def utilization_windows(scenario: Scenario, out: AgentRunOutput, windows: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """(edges_s float64[windows + 1], utilization float64[R, windows]) of one run: the
    fraction of each resource's capacity in use per time window over the run's span (first
    arrival to last finish).  A node's work on a resource is spread evenly over its
    lifetime (start to finish): the run keeps no finer record, so a window's value is
    exact only where every node's rate on the resource was constant (a node alone, or
    shares that did not change); over the whole span it is exact (``utilization``)."""
    finished = (out.node_finish_us > out.node_start_us) & (out.node_start_us >= 0)
    start = out.node_start_us[finished].astype(np.float64) / 1e6
    finish = out.node_finish_us[finished].astype(np.float64) / 1e6
    lo = float(out.run.request_arrival_us[0]) / 1e6 if out.run.request_arrival_us.size else 0.0
    hi = float(finish.max()) if finish.size else lo + 1.0
    edges = np.linspace(lo, max(hi, lo + 1e-6), windows + 1)
    util = np.zeros((len(scenario.resources), windows))
    for r, res in enumerate(scenario.resources):
        work = out.run.node_work[finished, r]
        keep = work > 0
        rate = work[keep] / (finish[keep] - start[keep])  # units per second while the node ran
        times = np.concatenate([start[keep], finish[keep]])
        order = np.argsort(times, kind="stable")
        t = times[order]
        level = np.cumsum(np.concatenate([rate, -rate])[order])  # the summed rate after each change
        done = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(t))])  # work done by each change time
        at_edges = np.interp(edges, t, done) if t.size else np.zeros_like(edges)  # piecewise linear: exact
        # a window with no work differences two equal sums: rounding may leave -1e-17
        util[r] = np.maximum(np.diff(at_edges), 0.0) / (res.capacity * np.diff(edges))
    return edges, util


@dataclass(eq=False)
class AgentResult:
    """The outcome of a scenario's runs: ``per_run`` summaries (``summarize_run``) and, when
    kept, the per-request table's columns per run."""

    scenario: Scenario
    per_run: list[dict] = field(default_factory=list)
    request_columns: list[dict] | None = None
    keep_windows: bool = False  # keep the first run's utilization per time window (a plot's heatmap)
    windows: tuple[np.ndarray, np.ndarray] | None = None  # utilization_windows of the first run
    active_windows: tuple | None = None  # active_windows of the first run, kept with ``windows``

    def add(self, out: AgentRunOutput) -> None:
        """Fold in the next run."""
        if self.keep_windows and not self.per_run:
            self.windows = utilization_windows(self.scenario, out)
            self.active_windows = active_windows(out)
        self.per_run.append(summarize_run(self.scenario, out))
        if self.request_columns is not None:
            self.request_columns.append(_requests_columns(self.scenario, out))

    @property
    def types(self) -> dict:
        """TYPE -> its metrics' means over the runs, with ``std``."""
        return _aggregate(self.per_run, "types", [t.name for t in self.scenario.types], TYPE_METRICS)

    @property
    def resources(self) -> dict:
        """RESOURCE -> its utilization's mean over the runs, with ``std``."""
        return _aggregate(self.per_run, "resources", [r.name for r in self.scenario.resources], RESOURCE_METRICS)

    @property
    def active(self) -> dict:
        """The ``active`` metrics' means over the runs, with ``std`` (module docstring)."""
        entry, std = {}, {}
        for m in ACTIVE_METRICS:
            entry[m], std[m] = _mean_std([r["active"][m] for r in self.per_run])
        return {**entry, "std": std}

    @property
    def llm(self) -> dict | None:
        """The llm nodes' requests on the cluster (``llm_summary``), means over the runs with
        ``std``; None for a tools-only scenario."""
        if not self.per_run or "llm" not in self.per_run[0]:
            return None
        return _aggregate(self.per_run, "llm", ["calls"], LLM_METRICS)["calls"]

    def to_dict(self) -> dict:
        """The JSON of ``blis-fast agents run --json`` (module docstring)."""
        out = {"scenario": self.scenario.name, "share": self.scenario.share, "runs": len(self.per_run),
               "seed": self.scenario.seed, "types": self.types, "resources": self.resources, "active": self.active}
        if self.llm is not None:
            out["llm"] = self.llm
        out["per_run"] = self.per_run
        return out

    def requests_table(self):
        """The per-request table (one row per node, module docstring) as a pyarrow Table;
        needs the result made with ``keep_requests``."""
        import pyarrow as pa  # deferred: pyarrow

        if self.request_columns is None:
            raise ValueError("the per-request table was not kept (run_scenario(..., keep_requests=True))")
        names = ("run", "request", "type", "arrival_us", "end_us", "latency_s", "node", "start_us", "finish_us")
        arrays = []
        for name in names:
            parts = [cols[name] for cols in self.request_columns]
            if isinstance(parts[0] if parts else None, tuple):
                values = np.concatenate([v for v, _ in parts])
                arrays.append(pa.array(values, mask=np.concatenate([m for _, m in parts])))
            elif name in ("type", "node"):
                values = np.concatenate(parts) if parts else np.zeros(0, object)
                arrays.append(pa.array(values, type=pa.string()).dictionary_encode())
            else:
                arrays.append(pa.array(np.concatenate(parts) if parts else np.zeros(0, np.int64)))
        return pa.table(dict(zip(names, arrays)))

    def write_requests(self, path: str | Path, fmt: str) -> None:
        """Write the per-request table as ``fmt``: parquet, csv or jsonl."""
        from blis_fast.results.autoscale import write_table  # deferred: pyarrow behind it

        write_table(self.requests_table(), path, fmt)

    def table(self) -> str:
        """The terminal summary: one line per type, then one per resource."""
        n = len(self.per_run)
        pm = n > 1

        def cell(entry: dict, key: str, scale: float = 1.0, digits: int = 3) -> str:
            v, s = entry[key], entry["std"][key]
            if v is None:
                return "-"
            text = f"{v * scale:.{digits}f}"
            return f"{text} ± {s * scale:.{digits}f}" if pm and s is not None else text

        title = self.scenario.name or "agents"
        lines = [f"{title}: {n} run{'s' if n != 1 else ''} (seed {self.scenario.seed} + k), share "
                 f"{self.scenario.share}" + ("; mean ± std over runs" if pm else "")]
        head = ("type", "completed", "mean s", "p50 s", "p95 s", "p99 s")
        rows = [(name, cell(e, "completed", digits=1 if pm else 0), cell(e, "latency_mean_s"),
                 cell(e, "latency_p50_s"), cell(e, "latency_p95_s"), cell(e, "latency_p99_s"))
                for name, e in self.types.items()]
        lines += _columns(head, rows)
        rows = [(name, cell(e, "utilization", 100.0, 1)) for name, e in self.resources.items()]
        lines += [""] + _columns(("resource", "utilization %"), rows)
        if self.per_run:
            active = self.active
            rows = [(label, cell(active, f"{kind}_mean"), cell(active, f"{kind}_peak", digits=1 if pm else 0))
                    for kind, label in zip(ACTIVE_KINDS, ("tool calls", "llm calls", "requests"))]
            lines += [""] + _columns(("active", "mean", "peak"), rows)
        llm = self.llm
        if llm is not None:
            head = ("llm calls", "completed", "ttft mean s", "ttft p95 s", "e2e mean s", "e2e p95 s", "prefix hit %")
            lines += [""] + _columns(head, [(cell(llm, "requests", digits=1 if pm else 0),
                                             cell(llm, "completed", digits=1 if pm else 0), cell(llm, "ttft_mean_s"),
                                             cell(llm, "ttft_p95_s"), cell(llm, "e2e_mean_s"), cell(llm, "e2e_p95_s"),
                                             cell(llm, "prefix_cache_hit_rate", 100.0, 1))])
        return "\n".join(lines)


def _columns(head: tuple, rows: list[tuple]) -> list[str]:
    """Left-aligned first column, right-aligned others."""
    widths = [max(len(str(r[k])) for r in [head, *rows]) for k in range(len(head))]
    fmt = lambda r: "  ".join(str(c).ljust(w) if k == 0 else str(c).rjust(w)  # noqa: E731
                              for k, (c, w) in enumerate(zip(r, widths)))
    return [fmt(head)] + [fmt(r) for r in rows]


def check_table_memory(scenario: Scenario) -> None:
    """ConfigError if keeping every run's per-request table would exceed the memory budget."""
    _, nodes = scenario.expected_size()
    memory.check(nodes * scenario.runs * TABLE_BYTES_PER_NODE,
                 f"the per-request table of {scenario.runs} runs ({nodes * scenario.runs:.3g} expected nodes)",
                 "write it for fewer runs (--runs) or a shorter duration_s")


def run_scenario(path_or_dict, runs=None, *, keep_requests: bool = False, config=None) -> AgentResult:
    """Run an agent scenario (a YAML path, a dict of its settings or a Scenario) ``runs``
    times (None: the scenario's ``runs``; run k uses seed + k) and summarize the runs;
    ``keep_requests`` keeps the per-request table (``AgentResult.requests_table``);
    ``config``: the cluster for the llm nodes (a simulator config path or mapping),
    overriding the scenario's ``cluster``.  Bad input raises ``ConfigError`` naming the field."""
    scenario = with_runs(scenario_of(path_or_dict), runs)
    if keep_requests:
        check_table_memory(scenario)
    result = AgentResult(scenario, request_columns=[] if keep_requests else None)
    run_runs(scenario, result.add, config)
    return result


__all__ = ["AgentResult", "run_scenario", "utilization_windows", "active_windows", "TYPE_METRICS", "RESOURCE_METRICS",
           "ACTIVE_METRICS", "MAX_WINDOWS", "summarize_run", "check_table_memory"]
