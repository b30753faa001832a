"""TraceSummary: a compact, deterministic markdown account of a run for an LLM (GEPA's
reflection, OpenEvolve's artifacts) or a person: Outcome, Key issues, Counterfactual
analysis, Worst decisions, Suggested focus.  Same run => same bytes (no wall time, fixed
number formats, ties broken by name).

Key issues are the largest sources of misses (requests that did not meet their SLO; with
no SLO targets in the workload, requests whose TTFT exceeds twice the run's 10th-percentile
TTFT).  Each detector (``blis_fast.results.diagnosis``) counts the requests it blames
and how many of them missed; issues are ranked by misses blamed, ties by cause (upstream first).
"""

from __future__ import annotations

import numpy as np

from blis_fast.results.diagnosis import fmt_value as _fmt
from blis_fast.results.diagnosis import diagnose
from blis_fast.results.scorecard import group_masks, group_metrics, instance_metrics
from blis_fast.results.objectives import judge, parse_objectives, weighted_score
from blis_fast.results.slo import has_targets
from blis_fast.results.kv_tiers import LOAD_BOUND_SHARE, TIER_NAMES, load_share
from blis_fast.results.autoscale import has_autoscaler, scaling_lag
from blis_fast.results.flow_control import GATEWAY_BOUND_SHARE, STORM_WINDOW_US, gateway_share, timeout_storm

MAX_ROWS = 8  # groups / instances listed (the rest summarized): the text stays short


def _group_lines(result) -> list[str]:
    """One line per SLO class and tenant (when the workload names them)."""
    out = []
    for kind in ("class", "tenant"):
        masks = group_masks(result, kind)
        if len(masks) < 2 and not (result.workload.names or {}):
            continue
        parts = []
        for name, mask in list(masks.items())[:MAX_ROWS]:
            g = group_metrics(result, mask)
            parts.append(f"{name}: attainment {_fmt(g['slo_attainment'])}, TTFT p99 {_fmt(g['ttft_p99_ms'])} ms, "
                         f"{g['arrived_requests']} arrived, {g['rejected_requests']} rejected")
        more = f" (+{len(masks) - MAX_ROWS} more)" if len(masks) > MAX_ROWS else ""
        if parts:
            out.append(f"Per {'SLO class' if kind == 'class' else kind}{more}: " + "; ".join(parts) + ".")
    return [""] + out if out else []


def _instance_lines(result) -> list[str]:
    """Step occupancy (the time a step runs), how full the steps were (token budget, batch
    slots), mean queue and mean KV utilization per instance."""
    used = result._used_instances().tolist()
    parts = []
    for i in used[:MAX_ROWS]:
        m = instance_metrics(result, np.array([i]))
        parts.append(f"instance_{i}: step occupancy {_fmt(m['utilization'])} (token budget "
                     f"{_fmt(m['token_budget_occupancy'])}, batch slots {_fmt(m['batch_slot_occupancy'])}), "
                     f"queue {_fmt(m['queue_depth_mean'])}, "
                     f"KV {_fmt(m['kv_utilization_mean'])}, {m['injected_requests']} requests")
    more = f" (+{len(used) - MAX_ROWS} more)" if len(used) > MAX_ROWS else ""
    return ["", f"Per instance{more} (means over steps): " + "; ".join(parts) + "."] if parts else []


# the TTFT parts of a disaggregated request (results.disaggregation.TTFT_PARTS), by side
_PD_SIDES = {"prefill": ("prefill_queue", "prefill_compute"), "transfer": ("transfer_wait", "transfer"),
             "decode": ("decode_queue", "first_decode_step"), "routing": ("routing",)}


def pd_bound(group: dict) -> tuple[str, float]:
    """(the side -- prefill, transfer, decode or routing -- whose TTFT parts take the largest
    share of a P/D run's mean TTFT, that share); ("", 0.0) when nothing was disaggregated."""
    sums = {side: sum(group[f"ttft_{p}_mean_ms"] for p in parts) for side, parts in _PD_SIDES.items()}
    total = sum(sums.values())
    if group["requests_disaggregated"] == 0 or total <= 0:
        return "", 0.0
    side = max(sums, key=lambda k: sums[k])
    return side, sums[side] / total


def _disaggregation_lines(result) -> list[str]:
    """A P/D run: how many requests were disaggregated, where their TTFT went, and which
    side bounds it (prefill-bound, transfer-bound, decode-bound)."""
    g = result.disaggregation
    if g is None:
        return []
    side, share = pd_bound(g)
    parts = ", ".join(f"{p.replace('_', ' ')} {_fmt(g[f'ttft_{p}_mean_ms'])}" for ps in _PD_SIDES.values() for p in ps)
    text = (f"Disaggregation: {g['requests_disaggregated']} of {g['requests_routed']} routed requests "
            f"({_fmt(g['disaggregated_fraction'])}); transfers {_fmt(g['transfer_mean_ms'])} ms mean, waited for blocks "
            f"{g['transfers_waited']} times, {g['dropped_at_decode']} dropped at decode.")
    if side:
        text += (f" Mean TTFT parts (ms): {parts}. The run is **{side}-bound**: the {side} side takes "
                 f"{_fmt(share)} of the disaggregated requests' mean TTFT.")
    return ["", text]


def _tier_lines(result) -> list[str]:
    """A run with KV tiers: where the prefix hits were found, the loads and their wait, the
    thrashing rate, and whether loading bounds the TTFT of the requests that loaded
    (**load-bound**: results.kv_tiers.LOAD_BOUND_SHARE)."""
    g = result.kv_tiers
    if g is None:
        return []
    share, n = load_share(result)
    found = ", ".join(f"{name} {_fmt(g[f'prefix_hit_rate_{name}'])}" for name in ("gpu", *TIER_NAMES)
                      if name == "gpu" or name in g["tiers"])
    text = (f"KV tiers: prefix hits by where they were found (of the prompt tokens looked up): {found}; "
            f"{g['load_requests']} requests loaded from a tier, waiting {_fmt(g['load_wait_mean_ms'])} ms mean "
            f"(p99 {_fmt(g['load_wait_p99_ms'])} ms); thrashing rate {_fmt(g['thrashing_rate'])}.")
    if n:
        if share >= LOAD_BOUND_SHARE:
            text += (f" The run is **load-bound**: loading takes {_fmt(share)} of the TTFT of the {n} requests that "
                     f"loaded -- a faster tier link (read_gbps) or a larger GPU cache would pay.")
        else:
            text += f" Loading takes {_fmt(share)} of the TTFT of the {n} requests that loaded (not load-bound)."
    return ["", text]


def _autoscale_lines(result) -> list[str]:
    """A run with an autoscaler: what it did and cost, and, per pool whose requests arrived
    while some of its instances were still provisioning or loading and waited longer for
    their first token than its other requests, **scaling lag** named as a cause, with the
    numbers (results.autoscale.scaling_lag)."""
    if not has_autoscaler(result.setup):
        return []
    g = result.autoscale
    cost = "-" if g["cost"] is None else _fmt(g["cost"])
    lines = ["", f"Autoscaling: {g['scale_events']} scale events ({g['scale_ups']} instances started, "
                 f"{g['scale_downs']} stopped), {_fmt(g['gpu_hours'])} GPU-hours costing {cost}; "
                 f"{g['scale_oscillations']} oscillations, {_fmt(g['under_provisioned_s'])} s under-provisioned, "
                 f"{_fmt(g['over_provisioned_s'])} s over-provisioned."]
    for lag in scaling_lag(result):
        if lag["ttft_mean_ms"] <= lag["other_ttft_mean_ms"]:
            continue
        lines.append(f"**Scaling lag** ({lag['pool']}): {lag['requests']} requests ({lag['missed']} missed) arrived "
                     f"while instances were provisioning or loading ({_fmt(lag['pending_s'])} s with capacity pending); "
                     f"their TTFT was {_fmt(lag['ttft_mean_ms'])} ms mean against {_fmt(lag['other_ttft_mean_ms'])} ms "
                     "for the pool's other requests -- scaling up earlier (a lower threshold, a shorter window) or "
                     "shorter provisioning / loading delays would pay.")
    return lines


def _flow_lines(result) -> list[str]:
    """A run with flow control or deadlines: gateway waits, timeouts, sheds and retries;
    **gateway-bound** when the gateway queue takes at least GATEWAY_BOUND_SHARE of the TTFT of
    the requests that waited there, and a **timeout storm** when many attempts timed out
    within STORM_WINDOW_US (results.flow_control)."""
    if not result.flow_on:
        return []
    c = result.cluster
    lines = ["", f"Flow control: gateway wait {_fmt(c['gateway_wait_mean_ms'])} ms mean (p99 "
                 f"{_fmt(c['gateway_wait_p99_ms'])} ms), gateway queue peak {c['gateway_depth_peak']}; "
                 f"{c['timeouts']} attempts timed out ({c['timed_out']} requests ended so, "
                 f"{_fmt(c['timeout_fraction'])} of those arrived), {c['sheds']} shed ({c['shed']} ended so), "
                 f"{c['retries']} retries, {_fmt(c['attempts_mean'])} attempts per request."]
    share, n = gateway_share(result)
    if n and share >= GATEWAY_BOUND_SHARE:
        lines.append(f"The run is **gateway-bound**: the gateway queue takes {_fmt(share)} of the TTFT of the {n} "
                     "requests that waited there -- the instances are saturated behind it; more capacity, or a "
                     "detector that lets more requests through (a higher concurrency limit), would pay.")
    storm = timeout_storm(result)
    if storm is not None:
        count, first, last = storm
        lines.append(f"**Timeout storm**: {count} attempts timed out within {_fmt(STORM_WINDOW_US / 1e6)} s "
                     f"({_fmt(first / 1e6)}-{_fmt(last / 1e6)} s) -- the load outran the TTLs; retries into the "
                     "same overload add to it (a longer backoff, shedding or more capacity would pay).")
    return lines


def summary_text(result, objectives=None) -> str:
    """The markdown summary of ``result`` judged against ``objectives`` (as
    ``Result.evaluate``)."""
    cfg = result.setup.config
    objs = parse_objectives(objectives if objectives is not None else cfg.objectives)
    m = result.evaluation_metrics
    lines = ["# Run summary", ""]
    pol = cfg.policy
    lines.append(f"Policy: admission `{pol.admission}`, routing `{pol.routing}`"
                 + (f" (scorers {dict(sorted(pol.scorers().items()))})" if pol.routing == "weighted" else "")
                 + _per_model_routing(pol)
                 + f", priority `{pol.priority}`, scheduler `{pol.scheduler}`, preemption victim "
                   f"`{pol.preemption_victim}`. Instances: {m['num_instances']}; {m['arrived_requests']} requests "
                   f"arrived over {_fmt(m['simulated_duration_s'])} s simulated.")
    lines += ["", "## Outcome", "", "| objective | value | target | normalized | met |", "|---|---|---|---|---|"]
    rows = judge(result, objs)
    for r in rows:
        lines.append(f"| {r['metric']} ({r['direction']}) | {_fmt(r['value'])} | {_fmt(r['target'])} | "
                     f"{_fmt(r['normalized'])} | {_fmt(r['met'])} |")
    targeted = any(has_targets(t) for t in (result.workload.slo_targets or {}).values())
    attainment = _fmt(m["slo_attainment"]) if targeted else "- (no SLO targets: only completions counted)"
    lines += ["", f"Score {_fmt(weighted_score(rows))} (weighted mean of the normalized objectives). "
                  f"SLO attainment {attainment}, goodput {_fmt(m['goodput_rps'])} req/s, "
                  f"TTFT p50/p99 {_fmt(m['ttft_p50_ms'])}/{_fmt(m['ttft_p99_ms'])} ms, "
                  f"E2E p99 {_fmt(m['e2e_p99_ms'])} ms, rejected {_fmt(m['rejected_fraction'])}, "
                  f"preemptions {m['preemption_count']}, prefix-cache hit rate {_fmt(m['prefix_cache_hit_rate'])}, "
                  f"step occupancy {_fmt(m['utilization_min'])}-{_fmt(m['utilization_max'])} (the time a step "
                  f"runs), token budget {_fmt(m['token_budget_occupancy'])} and batch slots "
                  f"{_fmt(m['batch_slot_occupancy'])} occupied per step."]
    lines += _group_lines(result) + _instance_lines(result) + _disaggregation_lines(result) + _tier_lines(result)
    lines += _autoscale_lines(result) + _flow_lines(result)
    diag = diagnose(result)
    lines += ["", "## Key issues", ""]
    lines.append(f"Misses: {diag.misses} of {diag.arrived} arrived requests ({diag.miss_definition}).")
    if not diag.traced:
        lines.append("(No decision trace: run with trace_level=decisions / --trace-level decisions for "
                     "per-decision evidence and counterfactuals.)")
    if diag.issues:
        for k, issue in enumerate(diag.issues[:6], 1):
            lines.append(f"{k}. **{issue.title}** -- {issue.requests} requests, {issue.misses} missed. {issue.evidence}")
    else:
        lines.append("No issue found: every detector came back clean.")
    lines += ["", "## Counterfactual analysis", ""]
    lines += diag.counterfactual_lines or ["No routing decisions were traced or replayed."]
    lines += ["", "## Worst decisions", ""]
    lines += diag.worst_lines or ["No decision trace recorded."]
    lines += ["", "## Suggested focus", ""]
    if diag.issues:
        for issue in diag.issues[:2]:
            lines.append(f"- {issue.slot}: {issue.suggestion}")
    else:
        lines.append("- Nothing stands out; tighten the objectives' targets or raise the load to find limits.")
    return "\n".join(lines) + "\n"



def _per_model_routing(pol) -> str:
    """`` (per model: M `type` ...)`` for a policy that routes some models by their own routing."""
    if not pol.routing_per_model:
        return ""
    parts = []
    for model, entry in pol.routing_per_model.items():
        scorers = entry["scorers"]
        parts.append(f"{model} `{entry['type']}`" + (f" (scorers {dict(sorted(scorers.items()))})" if scorers else ""))
    return " (per model: " + "; ".join(parts) + ")"

__all__ = ["summary_text"]
