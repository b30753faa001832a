"""The result of a run: summary JSON (cluster + instances), per-request records, files.

Per-request field names follow BLIS's results file (``requestID, arrived_at,
num_prefill_tokens, num_decode_tokens, ttft_ms, itl_ms, e2e_ms, scheduling_delay_ms,
handled_by``) plus our own (``state, preemptions, cached_prompt_tokens, ...``).  With
``--compat blis-2026.02`` the reporting follows the reference (docs/semantics.md §11): ITL samples
of step + a2 plus one at completion, total output tokens without first tokens, only
requests that reached an instance, sorted by arrival time.
"""

from __future__ import annotations

import importlib.util
import json
import math
from functools import cached_property
from json.encoder import encode_basestring_ascii as _encode_str
from pathlib import Path

import numpy as np

from blis_fast_kernels.schema import REQUEST_STATE_NAMES, PolicySlot, PriorityKind, ProgramHeader, RequestState

from .anomalies import hol_blocking_instances, priority_inversions
from .autoscale import has_autoscaler
from .autoscale import summary as autoscale_summary
from .deployments import deployment_selection, has_groups, model_selection, request_fields
from .disaggregation import PD_REQUEST_FIELD_TYPES, is_disaggregated, request_fields as pd_request_fields
from .disaggregation import summary as pd_summary
from .kv_tiers import TIER_REQUEST_FIELD_TYPES, has_tiers, hit_fields
from .kv_tiers import request_fields as tier_request_fields
from .kv_tiers import summary as tier_summary
from .fitness import fitness
from .programs import program_faults
from . import flow_control
from .metrics import (ItlIndex, RequestColumns, instance_clocks_us, request_latencies, request_summary_columns,
                      stable_order, summarize_group)
from .window import measurement_window, window_mask
from blis_fast.errors import ConfigError
from blis_fast.version import __version__
from blis_fast.config.validate import show
from .scorecard import group_metrics, overall_metrics, request_outcomes
from .evaluation import evaluate
from .trace_summary import summary_text
from .trace_table import decision_table
from .slo import has_targets, slo_report

ROUTED_STATES = (RequestState.ROUTED, RequestState.QUEUED, RequestState.RUNNING, RequestState.COMPLETED,
                 RequestState.REMOTE_PREFILL, RequestState.TRANSFER_WAIT, RequestState.TRANSFERRING,
                 RequestState.LOADING)

# table types of the per-request fields (any other: string); units are in the names, but
# for BLIS's ``arrived_at`` (seconds)
REQUEST_FIELD_TYPES = {
    "arrived_at": "float64", "num_prefill_tokens": "int64", "num_decode_tokens": "int64", "ttft_ms": "float64",
    "itl_ms": "float64", "e2e_ms": "float64", "scheduling_delay_ms": "float64", "preemptions": "int64",
    "cached_prompt_tokens": "int64", "generated_tokens": "int64", "first_token_s": "float64",
    "completion_s": "float64", "session": "int64", "turn": "int64", "session_id": "int64", "round_index": "int64",
    **PD_REQUEST_FIELD_TYPES, **TIER_REQUEST_FIELD_TYPES, **flow_control.FLOW_REQUEST_FIELD_TYPES,
}
REQUEST_TABLE_FORMATS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl"}


def request_table_format(path: str | Path, flag: str) -> str:
    """The per-request file format named by ``path``'s suffix; ConfigError(flag) for any
    other suffix (a Parquet file named .csv would mislead whoever opens it)."""
    suffix = Path(path).suffix.lower()
    if suffix not in REQUEST_TABLE_FORMATS:
        raise ConfigError(flag, f"the file name must end in {', '.join(REQUEST_TABLE_FORMATS)} (the format), "
                                f"got {show(str(path))}")
    return REQUEST_TABLE_FORMATS[suffix]



def _requests_view(state, base: int):
    """(the State as the metrics read it, the prefill legs' routing records) of a P/D run:
    the requests' rows of the request table, and the routing log's records of the requests'
    own (decode) routing; the legs' records, with their requests' ids, apart (the decision
    trace's ``prefill_routing`` records; counterfactual replays force the requests' own).
    The preemption and scheduling logs name a leg by its request."""
    k = int(state.loop[0]["route_records"])
    log = state.route_log[:k]
    leg = log["request"] >= base
    legs = log[leg].copy()
    legs["request"] -= base
    loop = state.loop.copy()
    loop[0]["route_records"] = int((~leg).sum())
    # the other logs name a leg (scheduled, blocked or preempted on its prefill instance) by its request
    pre, sched = state.preempt_log.copy(), state.sched_log.copy()
    for table, field in ((pre, "victim"), (pre, "for_request"), (sched, "request")):
        table[field] = np.where(table[field] >= base, table[field] - base, table[field])
    view = state._replace(reqs=state.reqs[:base], route_log=np.ascontiguousarray(log[~leg]), loop=loop,
                          preempt_log=pre, sched_log=sched)
    return view, legs


class Result:
    """Summary metrics and per-request records of one simulation run."""

    def __init__(self, setup, workload, state, wall_time_s: float | None = None):
        self.setup = setup
        self.workload = workload
        # a P/D run's request table has a prefill-leg row per request after the requests
        # (run/disaggregation.py): the metrics read the requests' rows, ``full_state`` has all
        self.full_state = state
        base = int(state.settings[0]["pd_base"])
        self.state = state
        self.prefill_routing_log = state.route_log[:0]  # P/D: the prefill legs' routing decisions
        if base > 0:
            self.state, self.prefill_routing_log = _requests_view(state, base)
        self.wall_time_s = wall_time_s  # the event loop's wall time (never written to results files)
        self.timeseries = None  # TimeSeries (results.timeseries) when sample_interval_ms was set
        self.counterfactuals: list[dict] = []  # exact replays (run.counterfactual) when counterfactual_k > 0

    def __repr__(self) -> str:
        """One line: what ran and how it went (computes the summary if not yet done)."""
        cfg, c = self.setup.config, self.cluster
        n_inst = c.get("num_instances", 0)

        def ms(key):
            v = c.get(key)
            return "-" if v is None else f"{v:.4g} ms"
        model = self.setup.model.name if self.setup.model is not None else self.setup.deployments[0].name
        return (f"<Result {model} on {self.setup.hardware.name} TP{cfg.engine.tp} "
                f"({self.setup.latency.kind}), {n_inst} instance{'s' if n_inst != 1 else ''}, "
                f"{len(self.workload)} requests: {c.get('completed_requests', 0)} completed, "
                f"{c.get('rejected_requests', 0)} rejected; TTFT p99 {ms('ttft_p99_ms')}, "
                f"E2E p99 {ms('e2e_p99_ms')}>")

    # ------------------------------------------------------------------ summary
    @property
    def compat(self) -> bool:
        """True in blis-2026.02 compatibility mode."""
        return self.setup.compat

    @property
    def _horizon(self) -> int | None:
        return self.setup.config.simulation.horizon

    @cached_property
    def reqs(self) -> RequestColumns:
        """The request table, read by field (``metrics.RequestColumns``: each field copied
        out once); the metrics read it through this."""
        return RequestColumns(self.state.reqs)

    @cached_property
    def _itl(self) -> ItlIndex:
        st = self.state
        return ItlIndex(self.reqs, st.inst, st.step_log[: int(st.loop[0]["steps"])],
                        st.irr_log[: int(st.loop[0]["irregular_records"])], self.compat)

    @cached_property
    def latencies(self) -> dict[str, np.ndarray]:
        """Per-request latencies (``metrics.request_latencies``), computed once."""
        return request_latencies(self.reqs)

    @cached_property
    def ordered_latencies(self) -> dict[str, np.ndarray]:
        """The E2E µs of the completed requests and the TTFT µs of those with a first token,
        each sorted, over the measurement window if there is one: the samples of both the
        cluster summary's and the whole-run request metrics' statistics (sorted once)."""
        lat, win = self.latencies, self.in_window
        done = lat["done"] if win is None else lat["done"] & win
        first = lat["has_first"] if win is None else lat["has_first"] & win
        return {"e2e": np.sort(lat["e2e_us"][done]), "ttft": np.sort(lat["ttft_us"][first])}

    @cached_property
    def _cols(self) -> dict[str, np.ndarray]:
        return request_summary_columns(self.reqs, self.latencies)

    def _used_instances(self) -> np.ndarray:
        """Instances that were active or served something (pool rows never used are left out)."""
        inst = self.state.inst
        return np.flatnonzero((inst["active"] != 0) | (inst["injected"] > 0))

    @cached_property
    def window(self) -> tuple[int, int] | None:
        """(first, last) arrival µs of the requests the statistics cover (``results.window``:
        simulation.warmup_s / cooldown_s); None: every request."""
        sim = self.setup.config.simulation
        return measurement_window(self.reqs["arrival_us"], sim.warmup_s, sim.cooldown_s)

    @cached_property
    def in_window(self) -> np.ndarray | None:
        """bool per request: it arrived in the measurement window; None without one."""
        return None if self.window is None else window_mask(self.reqs["arrival_us"], self.window)

    @cached_property
    def finished_in_window(self) -> np.ndarray | None:
        """bool per request: completed, its last token visible inside the measurement
        window -- what the per-second rates count (throughput during the window, whenever
        the request arrived); None without a window."""
        if self.window is None:
            return None
        lo, hi = self.window
        done = self.reqs["state"] == RequestState.COMPLETED
        last = self.reqs["last_token_us"]
        return done & (last >= lo) & (last <= hi)

    @property
    def rate_duration_s(self) -> float:
        """What the per-second rates divide by: the window's span, else the run's duration."""
        if self.window is None:
            return self.duration_s
        return (self.window[1] - self.window[0]) / 1e6

    @cached_property
    def _clocks(self) -> tuple[np.ndarray, np.ndarray]:
        """(the instances used, every instance's end-of-run clock in µs)."""
        st = self.state
        return self._used_instances(), instance_clocks_us(st.inst, self.reqs, self.compat, self._horizon)

    @cached_property
    def duration_s(self) -> float:
        """The simulated duration: the cluster summary's ``vllm_estimated_duration_s`` (the
        latest clock of the instances used), without computing the summary."""
        used, clocks = self._clocks
        return int(clocks[used].max()) / 1e6 if used.size else 0.0

    @cached_property
    def _measured(self):
        """(requests measured -- completed, in the window if any --, rows of the window or
        None, rates: (window span µs, requests finishing in it) or None, used instances,
        each instance's clock, ITL histograms: a one-item list holding the cluster's
        (values, counts) -- taken out once the cluster is summarized, so that they are not
        kept -- and the per-instance function)."""
        cols = self._cols
        win, fin = self.in_window, self.finished_in_window
        measured = cols["state"] == RequestState.COMPLETED
        rows, rates = None, None  # rates: (window span µs, requests finishing in it), results.window
        if win is not None:
            measured &= win
            rows = np.flatnonzero(win)
            rates = (self.window[1] - self.window[0], np.flatnonzero(fin))
        used, clocks = self._clocks
        cluster_itl, itl_of = self._itl.by_instance(measured)
        return measured, rows, rates, used, clocks, ([cluster_itl], itl_of)

    def _with_window(self, group: dict) -> dict:
        if self.window is not None:
            group["window_start_s"] = self.window[0] / 1e6
            group["window_end_s"] = self.window[1] / 1e6
        return group

    @cached_property
    def _cluster_group(self) -> dict:
        """The cluster summary without the run-level fields (the per-instance summaries
        are computed only when asked for: an evaluation reads the cluster's)."""
        _, rows, rates, used, clocks, (cluster_itl, _) = self._measured
        cv, cc = cluster_itl.pop()
        st = self.state
        return self._with_window(summarize_group("cluster", self._cols, rows, st.inst[used], cv, cc, self.compat,
                                                 int(clocks[used].max()) if used.size else 0, rates,
                                                 self.ordered_latencies))

    @cached_property
    def instances(self) -> list[dict]:
        """One summary object per instance that was ever active (the ITL samples of all
        instances come from one pass over the step log)."""
        st = self.state
        win, fin = self.in_window, self.finished_in_window
        _, _, rates, used, clocks, (_, itl_of) = self._measured

        def by_instance(order):  # (order, [start, end) of each used instance's requests in it)
            keys = req_inst[order]
            return order, np.searchsorted(keys, used, side="left"), np.searchsorted(keys, used, side="right")

        # each instance's requests in increasing id order: a stable sort by instance
        req_inst = self.reqs["instance"]
        order = stable_order(req_inst)
        grouped = by_instance(order if win is None else order[win[order]])
        finishing = by_instance(order[fin[order]]) if win is not None else None
        instances = []
        for k, i in enumerate(used.tolist()):
            values, counts = itl_of(i)
            mine = grouped[0][grouped[1][k]:grouped[2][k]]
            if finishing is not None:
                rates = (rates[0], finishing[0][finishing[1][k]:finishing[2][k]])
            instances.append(self._with_window(summarize_group(f"instance_{i}", self._cols, mine, st.inst[[i]],
                                                               values, counts, self.compat, int(clocks[i]), rates)))
        return instances

    def _selection_summary(self, mask: np.ndarray, inst_rows: np.ndarray) -> dict:
        """The cluster summary's group metrics (``summarize_group``) over the requests where
        ``mask`` and the instance rows ``inst_rows`` (of the measurement window, if any)."""
        measured, _, rates, _, clocks, _ = self._measured
        rows = np.flatnonzero(mask if self.in_window is None else mask & self.in_window)
        if rates is not None:
            rates = (rates[0], rates[1][mask[rates[1]]])
        values, counts = self._itl.histogram(measured & mask)
        duration_us = int(clocks[inst_rows].max()) if inst_rows.size else 0
        group = summarize_group("", self._cols, rows, self.state.inst[inst_rows], values, counts, self.compat,
                                duration_us, rates)
        del group["instance_id"]
        return self._with_window(group)

    @cached_property
    def deployment_groups(self) -> dict[str, dict] | None:
        """{deployment name: its summary} -- the cluster summary's group metrics over its
        instances and the requests they served (``results.deployments``); None with fewer
        than two deployments (the summary then has no ``deployments`` group)."""
        if not has_groups(self.setup):
            return None
        out = {}
        for dep in self.setup.deployments:
            mask, rows = deployment_selection(self, dep.name)
            out[dep.name] = {"model": dep.served_model_name, "hardware": dep.hardware.name, "tp": dep.engine.tp,
                             "num_instances": len(rows), **self._selection_summary(mask, rows)}
        return out

    @cached_property
    def model_groups(self) -> dict[str, dict] | None:
        """{served model name: its summary} -- the cluster summary's group metrics over the
        requests asking for it and the instances of the deployments serving it; None with
        fewer than two deployments."""
        if not has_groups(self.setup):
            return None
        out = {}
        for name in dict.fromkeys(dep.served_model_name for dep in self.setup.deployments):
            mask, rows = model_selection(self, name)
            serving = [dep.name for dep in self.setup.deployments if dep.served_model_name == name]
            out[name] = {"deployments": serving, "num_instances": len(rows), **self._selection_summary(mask, rows)}
        return out

    def _with_groups(self, doc: dict) -> dict:
        """``doc`` with the ``deployments`` and ``models`` groups when the run has them."""
        if self.deployment_groups is not None:
            doc["deployments"] = self.deployment_groups
            doc["models"] = self.model_groups
        return doc

    @cached_property
    def disaggregation(self) -> dict | None:
        """The ``disaggregation`` summary group of a P/D run (results.disaggregation), else None."""
        return pd_summary(self) if is_disaggregated(self.setup) else None

    @cached_property
    def cluster(self) -> dict:
        """The cluster-wide summary object (requests pooled over instances)."""
        st = self.state
        out = dict(self._cluster_group)
        stats = st.loop[0]
        arrived, rejected = self._arrived_rejected()
        out["arrived_requests"] = arrived
        out["rejected_requests"] = rejected
        # (timed out or shed: ended, not in flight -- 0 without flow control or deadlines)
        timed_out, shed = flow_control.ended_counts(self) if self.flow_on else (0, 0)
        out["still_in_flight"] = arrived - rejected - out["injected_requests"] - timed_out - shed
        out["num_instances"] = int(st.inst["active"].sum())
        out["engine_steps"] = int(stats["steps"])
        out["events"] = int(stats["events"])
        if has_tiers(self.setup):  # (a run without tiers keeps its fields)
            out.update(hit_fields(self))
        if self.flow_on:  # (a run without flow control or deadlines keeps its fields)
            out.update(flow_control.cluster_fields(self, arrived))
        faults = program_faults(st)
        if faults is not None:  # (a run without expression or tree policies keeps its fields)
            out["program_faults"] = faults
        out.update(self.anomalies())
        return out

    @cached_property
    def flow_on(self) -> bool:
        """True when the run had gateway flow control or request deadlines (results.flow_control)."""
        return flow_control.flow_on(self)

    @cached_property
    def flow_control(self) -> dict | None:
        """The ``flow_control`` summary group of a run with a gateway queue (results.flow_control), else None."""
        return flow_control.summary(self) if flow_control.gateway_on(self) else None

    def attempts_table(self):
        """The failed-attempt log as a pyarrow Table (``--attempts-out``; results.flow_control):
        one row per attempt that timed out or was shed (empty without deadlines)."""
        return flow_control.attempts_table(self)

    @cached_property
    def kv_tiers(self) -> dict | None:
        """The ``kv_tiers`` summary group of a run with KV tiers (results.kv_tiers), else None."""
        return tier_summary(self) if has_tiers(self.setup) else None

    @cached_property
    def autoscale(self) -> dict | None:
        """The ``autoscale`` summary group of a run with an autoscaler (results.autoscale), else None."""
        return autoscale_summary(self) if has_autoscaler(self.setup) else None

    # ------------------------------------------------------------------ evaluation
    @cached_property
    def outcomes(self) -> dict[str, np.ndarray]:
        """Per-request outcome arrays (``scorecard.request_outcomes``): arrived, done,
        rejected, met (SLO met), ttft_us, e2e_us, tpot_us."""
        return request_outcomes(self)

    @cached_property
    def request_metrics(self) -> dict[str, float]:
        """``scorecard.GROUP_METRICS`` over every request (of the measurement window)."""
        return group_metrics(self, None)

    @cached_property
    def evaluation_metrics(self) -> dict[str, float]:
        """Every whole-run metric an objective can name (``scorecard.overall_metrics``)."""
        return overall_metrics(self)

    @cached_property
    def adequacy(self):
        """Whether the run measures steady state: too short, saturated, unfinished or ok
        (``blis_fast.results.adequacy``)."""
        from .adequacy import adequacy  # deferred: yaml

        return adequacy(self)

    @property
    def seed(self) -> int:
        """The workload seed in force (explicit, else the workload spec's, else 42)."""
        s = self.setup.config.simulation.seed
        if s is not None:
            return int(s)
        d = self.workload.description or {}
        return int(d["seed"]) if isinstance(d.get("seed"), int) else self.setup.config.simulation.workload_seed

    def evaluate(self, objectives=None, summarize: bool = False):
        """An ``EvaluationResult`` against ``objectives`` (spec text such as
        ``"ttft_p99_ms:min:200,slo_attainment:max"``, a list of Objective / mappings, or
        None: the config's ``objectives``, else the defaults); ``summarize`` adds the
        trace summary text."""
        return evaluate(self, objectives, summarize)

    def summary_text(self, objectives=None) -> str:
        """The deterministic markdown trace summary (``blis_fast.results.trace_summary``)."""
        return summary_text(self, objectives)

    def decision_table(self):
        """The decision trace as a pyarrow Table (``--trace-out``; README 'Decision trace'):
        empty unless the run traced decisions; with ``trace_level="full"`` it also has the
        instance schedulers' records and their columns."""
        return decision_table(self)

    def _priority_kind(self) -> str:
        """The priority policy's name for the anomaly counters; ``constant`` also for a
        priority program that reads no feature (every request gets the same priority)."""
        st = self.state
        if (int(st.policy_kind[PolicySlot.PRIORITY]) == PriorityKind.EXPRESSION
                and st.policy_param[PolicySlot.PRIORITY, ProgramHeader.FEATURES] == 0):
            return "constant"
        return self.setup.config.policy.priority

    def anomalies(self) -> dict:
        """Anomaly counters: priority inversions, HOL-blocking instances, rejected requests."""
        lat = self.latencies
        return {
            "priority_inversions": priority_inversions(self.reqs, lat["e2e_us"], lat["done"],
                                                       self._priority_kind()),
            "hol_blocking_instances": hol_blocking_instances(self.state.inst, self.state.pd_inst["role"]),
            "rejected_requests": self._arrived_rejected()[1],
        }

    def _arrived_rejected(self) -> tuple[int, int]:
        """(requests that arrived, requests rejected at admission), of the measurement
        window if there is one (its requests all arrived, by definition)."""
        if self.in_window is None:
            return int(self.state.loop[0]["injected"]), int(self.state.loop[0]["rejected"])
        rejected = self.in_window & (self.reqs["state"] == RequestState.REJECTED)
        return int(self.in_window.sum()), int(rejected.sum())

    @cached_property
    def fitness(self) -> dict | None:
        """Fitness score and components (None without ``fitness_weights``)."""
        weights = self.setup.config.policy.fitness_weights
        if not weights:
            return None
        lat = self.latencies
        c = self.cluster
        return fitness(weights, c["responses_per_sec"], c["tokens_per_sec"],
                       lat["ttft_us"][lat["has_first"]], lat["e2e_us"][lat["done"]])

    def summary(self) -> dict:
        """The JSON printed on stdout: {"cluster", "instances", ("deployments", "models" with
        two or more deployments), ("disaggregation", "kv_tiers", "autoscale", "flow_control"
        when the run has them), "run"} (+ "fitness", "slo",
        "counterfactuals", "evaluation" when they apply), then "adequacy"."""
        out = self._with_groups({"cluster": self.cluster, "instances": self.instances})
        if is_disaggregated(self.setup):
            out["disaggregation"] = self.disaggregation
        if has_tiers(self.setup):
            out["kv_tiers"] = self.kv_tiers
        if has_autoscaler(self.setup):  # (a run without an autoscaler keeps its summary)
            out["autoscale"] = self.autoscale
        if self.flow_control is not None:  # (a run without a gateway queue keeps its summary)
            out["flow_control"] = self.flow_control
        out["run"] = self.run_info()
        if self.fitness is not None:
            out["fitness"] = self.fitness
        if self.slo is not None:
            out["slo"] = self.slo
        if self.counterfactuals:
            out["counterfactuals"] = self.counterfactuals
        if self.setup.config.objectives is not None:  # asked for: the score and its vector
            ev = self.evaluate()
            out["evaluation"] = {"score": ev.score, "objectives": ev.objectives, "values": self._objective_values(ev)}
        out["adequacy"] = self.adequacy.to_dict()
        return out

    def _objective_values(self, ev) -> dict:
        """Each objective's raw value, shown beside its normalized score; null for an SLO
        attainment when no class of the workload sets a target (it would only count
        completions: results.slo)."""
        targeted = any(has_targets(t) for t in (self.workload.slo_targets or {}).values())
        return {k: None if k.startswith("slo_attainment") and not targeted else ev.metrics.get(k)
                for k in ev.objectives}

    @cached_property
    def slo(self) -> dict | None:
        """SLO attainment and latencies per SLO class, tenant and client (blis_fast.results.slo);
        None unless the workload defines classes, tenants or clients (workload specs)."""
        if not (self.workload.slo_targets or self.workload.names):
            return None

        return slo_report(self)

    def run_info(self) -> dict:
        """What produced these numbers (deterministic: no wall-clock fields)."""
        lat = self.setup.latency
        cfg = self.setup.config
        return {
            "blis_fast_version": __version__,
            "compat": cfg.simulation.compat,
            "model": cfg.model,
            "hardware": self.setup.hardware.name,
            "latency_model": lat.kind,
            "latency_source": lat.source,
            "alpha_coeffs": [float(x) for x in lat.alpha],
            "beta_coeffs": [float(x) for x in lat.beta],
            "total_kv_blocks_per_instance": int(lat.total_kv_blocks),
            "workload": _jsonable(self.workload.description),
            "num_requests": len(self.workload),
            "config": _jsonable(cfg.to_dict()),
        }

    # ------------------------------------------------------------------ per request
    def request_columns(self) -> dict[str, np.ndarray]:
        """Per-request columns (in request order; -1/NaN-free: undefined times are -1 µs)."""
        reqs = self.state.reqs
        lat = self.latencies
        n_out = self.workload.output_len
        done = lat["done"]
        itl_us = np.zeros(len(reqs), np.float64)
        if self.compat:
            # reference: (E2E − TTFT) / max(N − 1, 1), 0 when N = 0
            denom = np.maximum(n_out - 1, 1)
            itl_us = np.where(done & (n_out > 0), (lat["e2e_us"] - lat["ttft_us"]) / denom, 0.0)
        else:
            multi = done & (reqs["generated"] > 1)
            itl_us[multi] = reqs["itl_sum_us"][multi] / (reqs["generated"][multi] - 1)
        out = {
            "request_index": np.arange(len(reqs), dtype=np.int64),
            "arrival_us": reqs["arrival_us"],
            "prompt_tokens": reqs["prompt_len"],
            "output_tokens": n_out,
            "instance": reqs["instance"],
            "state": reqs["state"],
            "ttft_us": lat["ttft_us"],
            "e2e_us": lat["e2e_us"],
            "itl_mean_us": itl_us,
            "scheduling_delay_us": lat["scheduling_delay_us"],
            "first_token_us": reqs["first_token_us"],
            "completion_us": np.where(done, reqs["last_token_us"], -1),
            "generated_tokens": reqs["generated"],
            "preemptions": reqs["preemptions"],
            "cached_prompt_tokens": reqs["cached_tokens"],
        }
        if self.flow_on:  # (a run without flow control or deadlines keeps its columns)
            out.update(flow_control.request_columns(self))
        return out

    def _fields(self, sel: np.ndarray, missing: float | None = None) -> dict[str, list]:
        """The per-request fields of rows ``sel``, one list per field, shared by the JSON
        records and every table format (so they always have the same fields).  Undefined
        times are ``missing``."""
        c = self.request_columns()
        ids = self.workload.source_ids
        labels = self.request_labels()

        def scaled(key, scale):  # µs -> ms or s, undefined (< 0) -> missing
            v = c[key][sel]
            return [x if ok else missing for x, ok in zip((v / scale).tolist(), (v >= 0).tolist())]

        rows = sel.tolist()
        inst = c["instance"][sel].tolist()
        names = REQUEST_STATE_NAMES
        cols = {
            "requestID": [f"request_{i}" for i in rows],
            "arrived_at": (c["arrival_us"][sel] / 1e6).tolist(),
            "num_prefill_tokens": c["prompt_tokens"][sel].tolist(),
            "num_decode_tokens": c["output_tokens"][sel].tolist(),
            "ttft_ms": scaled("ttft_us", 1000.0),
            "itl_ms": (c["itl_mean_us"][sel] / 1000.0).tolist(),
            "e2e_ms": scaled("e2e_us", 1000.0),
            "scheduling_delay_ms": scaled("scheduling_delay_us", 1000.0),
            "handled_by": [f"instance_{k}" if k >= 0 else None for k in inst],
            "state": [names[k] for k in c["state"][sel].tolist()],
            "preemptions": c["preemptions"][sel].tolist(),
            "cached_prompt_tokens": c["cached_prompt_tokens"][sel].tolist(),
            "generated_tokens": c["generated_tokens"][sel].tolist(),
            "first_token_s": scaled("first_token_us", 1e6),
            "completion_s": scaled("completion_us", 1e6),
        }
        if has_groups(self.setup):  # (a single-deployment run's records keep their fields)
            cols.update(request_fields(self, sel))
        if is_disaggregated(self.setup):  # (a monolithic run's records keep their fields)
            cols.update(pd_request_fields(self, sel, missing))
        if has_tiers(self.setup):  # (as a run without tiers)
            cols.update(tier_request_fields(self, sel, missing))
        if self.flow_on:  # (as a run without flow control or deadlines)
            cols.update(flow_control.request_fields(self, sel, missing))
        if ids is not None:
            cols["source_id"] = [ids[i] for i in rows]
        for key, values in labels.items():
            cols[key] = [values[i] for i in rows]
        return cols

    def _record_columns(self) -> tuple[list[str], list[list]]:
        """The per-request records as (field names, one Python list per field), in record
        order: every request but those still pending; in compat mode, as the reference,
        those that reached an instance (dropped ones removed), sorted by arrival time."""
        c = self.request_columns()
        sel = np.arange(len(c["state"]))
        if self.compat:
            sel = sel[np.isin(c["state"], ROUTED_STATES)]
            sel = sel[np.argsort(c["arrival_us"][sel], kind="stable")]
        else:
            sel = sel[c["state"][sel] != RequestState.PENDING]
        cols = self._fields(sel, 0.0 if self.compat else None)
        return list(cols), list(cols.values())

    def request_records(self) -> list[dict]:
        """BLIS-style per-request records for the results file."""
        keys, cols = self._record_columns()
        return [dict(zip(keys, row)) for row in zip(*cols)]

    def request_labels(self) -> dict[str, list]:
        """Per-request workload labels for workload-spec runs (BLIS's ``slo_class`` and
        ``tenant_id``, plus ``client``, ``priority_class``, ``session``, ``turn`` and, under
        BLIS's current names, ``session_id``, ``round_index``); empty for workloads
        without them."""
        wl = self.workload
        if not wl.names:
            return {}
        reqs = self.state.reqs
        out: dict[str, list] = {}
        for col, key in (("slo_class", "slo_class"), ("tenant", "tenant_id"), ("client", "client"),
                         ("priority_class", "priority_class")):
            names = wl.names.get(col)
            if names:
                out[key] = [names[k] for k in reqs[col].tolist()]
        if wl.session is not None:
            out["session"] = reqs["session"].tolist()
            out["turn"] = reqs["turn"].tolist()
            out["session_id"], out["round_index"] = out["session"], out["turn"]
        return out

    def requests_table(self):
        """Per-request table as a pyarrow Table: every request, in request order, with the
        fields of the JSON records (``request_records``)."""
        import pyarrow as pa  # deferred: pyarrow

        cols = self._fields(np.arange(len(self.state.reqs)))
        return pa.table({k: pa.array(v, REQUEST_FIELD_TYPES.get(k, pa.string())) for k, v in cols.items()})

    def to_pandas(self):
        """The per-request table as a pandas DataFrame (needs the ``pandas`` extra:
        ``pip install 'blis-fast[pandas]'``)."""
        if importlib.util.find_spec("pandas") is None:
            raise ImportError("Result.to_pandas() needs pandas: pip install 'blis-fast[pandas]' (or pandas); "
                              "Result.requests_table() gives the same table as pyarrow")
        return self.requests_table().to_pandas()

    # ------------------------------------------------------------------ files
    def _document_head(self) -> dict:
        doc = dict(self.cluster)
        if self.fitness is not None:
            doc["fitness"] = self.fitness
        if self.slo is not None:
            doc["slo"] = self.slo
        doc["instances"] = self.instances
        self._with_groups(doc)
        doc["run"] = self.run_info()
        return doc

    def results_document(self) -> dict:
        """The ``--results-path`` JSON: the cluster summary, instances, run info, requests."""
        doc = self._document_head()
        doc["requests"] = self.request_records()
        return doc

    def results_json(self) -> str:
        """``json.dumps(self.results_document(), indent=2, allow_nan=False) + "\\n"``, byte for
        byte, with the per-request records formatted column by column (the json module's
        indenting encoder is pure Python: ~4 s for 100K records)."""
        head = json.dumps(self._document_head(), indent=2, allow_nan=False)
        keys, cols = self._record_columns()
        records = _records_json(keys, cols)
        if records is None or not head.endswith("\n}"):  # an unusual value: the json module
            return json.dumps(self.results_document(), indent=2, allow_nan=False) + "\n"
        return head[:-2] + ',\n  "requests": ' + records + "\n}\n"

    def write_results(self, path: str | Path) -> None:
        """Write the results JSON (byte-identical for identical inputs)."""
        Path(path).write_text(self.results_json())

    def write_parquet(self, path: str | Path) -> None:
        """Write the per-request table as Parquet."""
        import pyarrow.parquet as pq  # deferred: pyarrow

        pq.write_table(self.requests_table(), str(path))

    def write_requests(self, path: str | Path, fmt: str | None = None) -> None:
        """Write the per-request table as ``fmt`` (``parquet``, ``csv`` or ``jsonl``; None:
        from the file name's suffix, ``request_table_format``); every format has the same
        fields.  JSON Lines: one record per line, as the results file's records."""
        fmt = fmt or request_table_format(path, "path")
        if fmt == "parquet":
            self.write_parquet(path)
        elif fmt == "csv":
            import pyarrow.csv as pc  # deferred: pyarrow

            pc.write_csv(self.requests_table(), str(path))
        else:
            cols = self._fields(np.arange(len(self.state.reqs)))
            with open(path, "w", encoding="utf-8") as f:
                for row in zip(*cols.values()):
                    f.write(json.dumps(dict(zip(cols, row)), allow_nan=False) + "\n")



def _json_column(col: list) -> list[str]:
    """``[json.dumps(v) for v in col]`` for a column of str, int, finite float and None
    values (ensure_ascii, as the json module's encoder), one C-level map per type; raises
    TypeError for anything else."""
    types = set(map(type, col))
    if types <= {int}:
        return list(map(int.__repr__, col))
    if types <= {str}:
        return list(map(_encode_str, col))
    if types <= {float, type(None)}:
        if not all(map(math.isfinite, (v for v in col if v is not None))):
            raise TypeError("not a finite float")
        if type(None) not in types:
            return list(map(float.__repr__, col))
        return ["null" if v is None else float.__repr__(v) for v in col]
    if types <= {str, type(None)}:
        return ["null" if v is None else _encode_str(v) for v in col]
    if types <= {int, type(None)}:
        return ["null" if v is None else int.__repr__(v) for v in col]
    raise TypeError(f"column of {sorted(t.__name__ for t in types)}")


def _records_json(keys: list[str], cols: list[list]) -> str | None:
    """The JSON list of records (rows of ``cols``), as ``json.dumps(..., indent=2)`` writes
    it two levels deep; None if a value is not a plain scalar."""
    try:
        enc = [_json_column(col) for col in cols]
    except TypeError:
        return None
    if not enc or not enc[0]:
        return "[]"
    fields = ",\n".join("      " + _encode_str(k).replace("%", "%%") + ": %s" for k in keys)
    template = "    {\n" + fields + "\n    }"  # one record: a %-format per row, in C
    return "[\n" + ",\n".join(map(template.__mod__, zip(*enc))) + "\n  ]"


def _jsonable(obj):
    """Convert numpy scalars/arrays and tuples inside a description to JSON types."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj
