"""The flat table of evaluation metrics an objective can name (blis_fast.results.objectives):
the cluster summary's numbers plus goodput, fairness, utilization, KV, queue and rate
metrics, for the whole run or one group of requests (an SLO class, tenant or client) or
one instance, or one deployment or served model (its requests and its instances:
``POOL_METRICS``, blis_fast.results.deployments).  Definitions (README "Evaluation metrics"
has the full list with units):

- a request *meets its SLO* when it completed and every target of its class holds
  (``blis_fast.results.slo``); a class without targets only asks for completion -- so
  ``slo_attainment[class=C]`` of such a class is refused (``objectives.metric_value``),
  while the whole-run ``slo_attainment`` (a default objective) still counts them;
- ``slo_attainment`` = requests meeting their SLO / requests that arrived;
- ``goodput_rps`` = requests meeting their SLO / simulated duration (s);
- ``jain_fairness`` = Jain's index (Σx)² / (n·Σx²) over the tenants' goodput_rps
  (``jain_fairness_throughput``: over their completed requests per second); tenants are
  those with at least one arrived request; 1.0 with fewer than two or when all are 0;
- ``utilization`` = busy time / duration, per instance (overall: the mean over instances):
  *step occupancy*, the fraction of the time an engine step runs -- near 1 whenever a
  request is in flight, however small the batch, so it is no measure of headroom;
- headroom: ``token_budget_occupancy`` (tokens scheduled / max_num_batched_tokens),
  ``batch_slot_occupancy`` (running requests / max_num_seqs), ``kv_occupancy_mean``
  (allocated / total KV blocks), each summed over engine steps
  (``blis_fast.results.metrics.headroom``; overall: pooled over the instances' steps);
- ``kv_utilization_mean`` = mean over engine steps of allocated / total KV blocks (overall:
  the mean over instances); ``kv_utilization_peak`` = peak allocated / total;
- ``queue_depth_mean`` = mean wait-queue length at step start; ``queue_depth_peak``;
- ``preemption_rate`` = preemptions per arrived request; ``rejected_fraction`` = rejected /
  arrived.

The simulated duration is the cluster summary's ``vllm_estimated_duration_s`` (end of the
last engine step), so ``goodput_rps`` and ``responses_per_sec`` share a denominator.
"""

from __future__ import annotations

import functools

import numpy as np

from blis_fast_kernels.schema import RequestState

from blis_fast.config.autoscale import DEFAULT_COST_PER_GPU_HOUR
from blis_fast.errors import ConfigError

from .autoscale import billing

from .metrics import HEADROOM_METRICS, headroom, sorted_percentiles
from blis_fast.results.metrics import PERCENTILES
from .slo import request_slo_table

GROUP_KINDS = {"class": "slo_class", "tenant": "tenant", "client": "client"}  # selector key -> request column

# Metrics of any set of requests (the whole run or a group): computed by ``group_metrics``.
GROUP_METRICS = (
    "arrived_requests", "completed_requests", "rejected_requests", "slo_met_requests", "slo_attainment",
    "goodput_rps", "responses_per_sec", "tokens_per_sec", "rejected_fraction", "preemption_rate",
    "cached_token_fraction",
    *(f"{m}_{s}_ms" for m in ("ttft", "e2e", "tpot") for s in ("mean", "p50", "p90", "p95", "p99")),
)
# whole-run values the cluster summary reports itself (the rest of GROUP_METRICS, over all
# requests, are ``Result.request_metrics`` -- cheap: no summary needed)
SUMMARY_OWNED = ("responses_per_sec", "tokens_per_sec", "completed_requests")
# Metrics of one instance (``[instance=i]``) and, averaged or pooled, of the cluster.
INSTANCE_METRICS = ("utilization", "kv_utilization_mean", "kv_utilization_peak", "queue_depth_mean",
                    "queue_depth_peak", "prefix_cache_hit_rate", "preemptions", "injected_requests",
                    "completed_requests", "batch_size_mean", *HEADROOM_METRICS)
# Whole-run only.
# KV cache tiers (results.kv_tiers): whole-run metrics of a run with tiers; a run without them has
# every hit on the GPU and nothing loaded (``untiered_metric``: asked for, not in its tables, so
# its outputs stay as they were)
TIER_METRICS = ("prefix_hit_tokens_gpu", "prefix_hit_tokens_cpu", "prefix_hit_tokens_disk", "prefix_hit_rate_gpu",
                "prefix_hit_rate_cpu", "prefix_hit_rate_disk", "load_requests", "load_wait_mean_ms",
                "load_wait_p99_ms", "thrashing_rate")
def untiered_metric(result, name: str) -> float:
    """KV tier metric ``name`` of a run without tiers: the GPU's share is every hit, the
    tiers' and the loads' are 0."""
    if name == "prefix_hit_tokens_gpu":
        return float(result.state.inst["prefix_hit_tokens"].sum())
    if name == "prefix_hit_rate_gpu":
        return float(result.cluster["prefix_cache_hit_rate"])
    return 0.0


# Autoscaling (results.autoscale): the run's billed GPU-hours and their cost, lower is better.  In
# a run's tables only with an autoscaler; a run without one is billed on demand (``billed_metric``:
# its instances for the whole run), so runs with and without compare and their outputs stay as they were
AUTOSCALE_METRICS = ("gpu_hours", "cost")


def billed_metric(result, name: str) -> float:
    """``gpu_hours`` or ``cost`` of a run (results.autoscale.billing); ConfigError naming
    ``objectives.metric`` for the cost of a run with a GPU that has no price."""
    hours, cost = billing(result)
    if name == "gpu_hours":
        return hours
    if cost is None:
        raise ConfigError("objectives.metric", "cost: a pool's GPU has no default cost_per_gpu_hour (defaults: "
                                               f"{', '.join(DEFAULT_COST_PER_GPU_HOUR)}); use gpu_hours")
    return cost


# Flow control and deadlines (results.flow_control): the cluster summary's fields of a run with
# them; a run without them has no timeouts, sheds, retries or gateway wait (``unflowed_metric``:
# asked for, not in its tables, so its outputs stay as they were)
FLOW_METRICS = ("timeout_fraction", "shed_fraction", "gateway_wait_mean_ms", "gateway_wait_p99_ms", "attempts_mean",
                "timeouts", "timed_out", "sheds", "shed", "retries", "gateway_depth_peak", "exchange_e2e_mean_ms",
                "exchange_e2e_p99_ms")


def unflowed_metric(result, name: str) -> float:
    """Flow-control metric ``name`` of a run without flow control or deadlines: one attempt
    per arrived request, the exchange is the request (its E2E), nothing else happened."""
    if name == "attempts_mean":
        return 1.0 if result.cluster["arrived_requests"] > 0 else 0.0
    if name.startswith("exchange_e2e_"):
        return float(result.cluster[name[len("exchange_"):]])
    return 0.0


CLUSTER_METRICS = ("jain_fairness", "jain_fairness_throughput", "utilization_min", "utilization_max",
                   "utilization_imbalance", "simulated_duration_s")


def jain_index(values) -> float:
    """Jain's fairness index (Σx)² / (n·Σx²) of non-negative values: 1 when all are equal,
    1/n when one takes everything; 1.0 for fewer than two values or all zeros."""
    x = np.asarray(values, dtype=np.float64)
    sq = float((x * x).sum())
    if x.size < 2 or sq == 0.0:
        return 1.0
    return float(x.sum()) ** 2 / (x.size * sq)


def request_outcomes(result) -> dict[str, np.ndarray]:
    """Per-request arrays: arrived, done, rejected, met (SLO met), ttft_us, e2e_us,
    tpot_us (request order)."""
    reqs = result.reqs
    names = result.workload.names or {}
    n_cls = int(reqs["slo_class"].max()) + 1 if len(reqs) else 0
    slo_names = list(names.get("slo_class") or [str(i) for i in range(n_cls)])
    tab = request_slo_table(reqs, slo_names, result.workload.slo_targets or {}, result.latencies)
    state = reqs["state"]
    # arrived = released at the cluster (closed-loop turns never released stay PENDING)
    tab["arrived"] = state != RequestState.PENDING
    if result.flow_on:  # (between two attempts a request is pending again: it has arrived)
        tab["arrived"] |= result.full_state.flow_reqs["attempt"][: len(state)] > 0
    tab["met"] = tab["met"] & tab["arrived"]
    tab["rejected"] = state == RequestState.REJECTED
    return tab


def duration_s(result) -> float:
    """The simulated duration metrics divide by (s): the cluster's vllm_estimated_duration_s."""
    return result.duration_s


def group_metrics(result, mask: np.ndarray | None) -> dict[str, float]:
    """``GROUP_METRICS`` of the requests where ``mask`` (None = all)."""
    out_tab = result.outcomes
    reqs = result.reqs
    sel = mask  # None: every request (no mask to apply)
    rated = out_tab["done"] if sel is None else sel & out_tab["done"]  # what the per-second rates count
    if result.in_window is not None:  # the requests of the measurement window (results.window); the rates
        # count those finishing inside it (throughput during it)
        rated = result.finished_in_window if sel is None else sel & result.finished_in_window
        sel = result.in_window if sel is None else sel & result.in_window

    def among(m: np.ndarray) -> np.ndarray:  # m restricted to the selection
        return m if sel is None else sel & m

    def picked(col: np.ndarray) -> np.ndarray:  # the selection's values
        return col if sel is None else col[sel]

    done = among(out_tab["done"])
    n_arr = int(np.count_nonzero(among(out_tab["arrived"])))
    n_done = int(np.count_nonzero(done))
    n_met = int(np.count_nonzero(among(out_tab["met"])))
    n_rej = int(np.count_nonzero(among(out_tab["rejected"])))
    dur = result.rate_duration_s
    gen = reqs["generated"][rated]
    if result.compat:
        gen = np.maximum(gen - 1, 0)
    admitted = among(reqs["instance"] >= 0)
    prompt = int(reqs["prompt_len"][admitted].sum())
    out: dict[str, float] = {
        "arrived_requests": n_arr,
        "completed_requests": n_done,
        "rejected_requests": n_rej,
        "slo_met_requests": n_met,
        "slo_attainment": n_met / n_arr if n_arr else 0.0,
        "goodput_rps": int(np.count_nonzero(rated & out_tab["met"])) / dur if dur > 0 else 0.0,
        "responses_per_sec": int(np.count_nonzero(rated)) / dur if dur > 0 else 0.0,
        "tokens_per_sec": int(gen.sum()) / dur if dur > 0 else 0.0,
        "rejected_fraction": n_rej / n_arr if n_arr else 0.0,
        "preemption_rate": int(picked(reqs["preemptions"]).sum()) / n_arr if n_arr else 0.0,
        "cached_token_fraction": int(reqs["cached_tokens"][admitted].sum()) / prompt if prompt else 0.0,
    }
    if mask is None:  # every request (of the window): the samples the cluster summary sorted
        ordered = result.ordered_latencies
        samples = (("ttft", ordered["ttft"], True), ("e2e", ordered["e2e"], True))
    else:
        samples = (("ttft", out_tab["ttft_us"][among(out_tab["ttft_us"] >= 0)], False),
                   ("e2e", out_tab["e2e_us"][done], False))
    for name, values, is_sorted in (*samples, ("tpot", out_tab["tpot_us"][done], False)):
        out[f"{name}_mean_ms"] = float(values.mean()) / 1e3 if values.size else 0.0
        if not values.size:
            pcts = [0.0] * 4
        else:
            pcts = sorted_percentiles(values if is_sorted else np.sort(values), (50, 90, 95, 99))
        for p, v in zip((50, 90, 95, 99), pcts):
            out[f"{name}_p{p}_ms"] = v / 1e3
    return out


def instance_metrics(result, rows: np.ndarray) -> dict[str, float]:
    """``INSTANCE_METRICS`` of the instance rows ``rows`` (several rows: utilization and
    means averaged over instances, peaks the maximum, counts summed)."""
    inst = result.state.inst[rows]
    dur_us = duration_s(result) * 1e6
    steps = inst["steps"].astype(np.float64)
    per_step = np.maximum(steps, 1.0)
    kv_total = np.maximum(inst["kv_total"], 1).astype(np.float64)
    query = int(inst["prefix_query_tokens"].sum())
    util = inst["busy_us"] / dur_us if dur_us > 0 else np.zeros(len(inst))
    return {
        "utilization": float(util.mean()) if len(inst) else 0.0,
        "kv_utilization_mean": float((inst["sum_kv_allocated"] / per_step / kv_total).mean()) if len(inst) else 0.0,
        "kv_utilization_peak": float((inst["kv_peak_allocated"] / kv_total).max()) if len(inst) else 0.0,
        "queue_depth_mean": float((inst["sum_wq_len"] / per_step).mean()) if len(inst) else 0.0,
        "queue_depth_peak": int(inst["wq_peak"].max()) if len(inst) else 0,
        "prefix_cache_hit_rate": int(inst["prefix_hit_tokens"].sum()) / query if query else 0.0,
        "preemptions": int(inst["preemptions"].sum()),
        "injected_requests": int(inst["injected"].sum()),
        "completed_requests": int(inst["completed"].sum()),
        "batch_size_mean": float((inst["sum_batch_len"] / per_step).mean()) if len(inst) else 0.0,
        **headroom(inst),  # pooled over the rows' steps, as the cluster summary gives them
    }


def group_masks(result, kind: str) -> dict[str, np.ndarray]:
    """{group name: request mask} of a selector kind (class, tenant, client): every group
    the workload names (or numbers) that has at least one request."""
    col = GROUP_KINDS[kind]
    ids = result.reqs[col]
    names = list((result.workload.names or {}).get(col) or [])
    n = max(len(names), int(ids.max()) + 1 if len(ids) else 0)
    out = {}
    for g in range(n):
        m = ids == g
        if m.any():
            out[names[g] if g < len(names) else str(g)] = m
    return out


def overall_metrics(result) -> dict[str, float]:
    """Every whole-run metric: the cluster summary's numbers, ``GROUP_METRICS`` over all
    requests, ``INSTANCE_METRICS`` over the used instances and ``CLUSTER_METRICS``."""
    cluster = result.cluster
    out: dict[str, float] = {k: v for k, v in cluster.items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool)}
    # the non-finite values of each expression or tree policy, as numbers: program_faults_<slot>
    out.update({f"program_faults_{slot}": n for slot, n in (cluster.get("program_faults") or {}).items()})
    group = dict(result.request_metrics)
    for k in SUMMARY_OWNED:
        group.pop(k)  # the summary's own values (same definitions; compat conventions included)
    out.update(group)
    used = result._used_instances()
    inst = instance_metrics(result, used)
    out.update({k: v for k, v in inst.items() if k not in ("injected_requests", "completed_requests")})
    dur_us = duration_s(result) * 1e6  # each instance's utilization, as instance_metrics([i]) gives it
    util = (result.state.inst["busy_us"][used] / dur_us).tolist() if dur_us > 0 else [0.0] * len(used)
    mean_util = float(np.mean(util)) if util else 0.0
    out["utilization_min"] = float(min(util)) if util else 0.0
    out["utilization_max"] = float(max(util)) if util else 0.0
    # max / mean busy time: 1 = balanced, n = one instance did everything
    out["utilization_imbalance"] = out["utilization_max"] / mean_util if mean_util > 0 else 1.0
    tenants = group_masks(result, "tenant")
    tab = result.outcomes
    finished = tab["done"] if result.in_window is None else result.finished_in_window  # results.window
    dur = result.rate_duration_s
    goodput = [int((m & tab["met"] & finished).sum()) / dur if dur > 0 else 0.0 for m in tenants.values()
               if (m & tab["arrived"]).any()]
    thr = [int((m & finished).sum()) / dur if dur > 0 else 0.0 for m in tenants.values()
           if (m & tab["arrived"]).any()]
    out["jain_fairness"] = jain_index(goodput)
    out["jain_fairness_throughput"] = jain_index(thr)
    out["simulated_duration_s"] = duration_s(result)
    tiers = result.kv_tiers
    if tiers is not None:  # (the hit split is in the cluster summary already)
        out.update({k: tiers[k] for k in ("load_requests", "load_wait_mean_ms", "load_wait_p99_ms", "thrashing_rate")})
    scaled = result.autoscale
    if scaled is not None:  # (a run without an autoscaler keeps its table: billed_metric when asked)
        out.update({k: scaled[k] for k in AUTOSCALE_METRICS if scaled[k] is not None})
    return out


# Metrics of a deployment or a served model (``[deployment=D]``, ``[model=M]``): those of
# its requests (GROUP_METRICS) and of its instances (INSTANCE_METRICS; the request counts are
# the group's).
POOL_METRICS = tuple(dict.fromkeys([*GROUP_METRICS, *INSTANCE_METRICS]))


def allowed_metrics(kind: str | None) -> tuple[str, ...]:
    """The metrics an objective may name with a selector of ``kind`` (None: none)."""
    overall, group, instance = known_metrics()
    if kind is None:
        return overall
    if kind == "instance":
        return instance
    return POOL_METRICS if kind in ("deployment", "model") else group


def pool_metric(result, mask: np.ndarray, rows: np.ndarray, base: str) -> float:
    """Metric ``base`` (of ``POOL_METRICS``) of a deployment or model: over its requests
    ``mask`` if a group metric, else over its instance rows ``rows``."""
    if base in GROUP_METRICS:
        return float(group_metrics(result, mask)[base])
    return float(instance_metrics(result, rows)[base])


@functools.cache  # (constant; every objective of every evaluation asks)
def known_metrics() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(whole-run metrics, group metrics, instance metrics) by name: what an objective may
    name without a selector, with [class=|tenant=|client=], and with [instance=]."""
    summary = ["completed_requests", "still_queued", "still_running", "injected_requests", "total_input_tokens",
               "total_output_tokens", "vllm_estimated_duration_s", "responses_per_sec", "tokens_per_sec",
               *(f"{m}_{s}_ms" for m in ("e2e", "ttft", "itl") for s in ("mean", *(f"p{p}" for p in PERCENTILES))),
               "scheduling_delay_p99_ms", "preemption_count", "dropped_unservable", "kv_total_blocks",
               "kv_peak_used_blocks", "kv_peak_utilization", "prefix_cache_hit_rate", "prefill_tokens_computed",
               "decode_tokens_computed", "steps", "mean_batch_size", "mean_wait_queue_len", "wait_queue_peak",
               "batch_size_peak", "busy_fraction", *HEADROOM_METRICS, "arrived_requests", "rejected_requests",
               "still_in_flight",
               "num_instances", "engine_steps", "events", "priority_inversions", "hol_blocking_instances"]
    overall = tuple(dict.fromkeys([*summary, *GROUP_METRICS, *INSTANCE_METRICS, *CLUSTER_METRICS, *TIER_METRICS,
                                     *AUTOSCALE_METRICS, *FLOW_METRICS]))
    return overall, GROUP_METRICS, INSTANCE_METRICS
