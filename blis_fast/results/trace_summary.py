"""TraceSummary: a compact, deterministic markdown account of a run for an LLM (GEPA's
reflection, OpenEvolve's artifacts) or a person: Outcome, Key issues, Counterfactual
analysis, Worst decisions, Suggested focus.  Same run => same bytes (no wall time, fixed
number formats, ties broken by name).

Key issues are the largest sources of misses (requests that did not meet their SLO; with
no SLO targets in the workload, requests whose TTFT exceeds twice the run's median TTFT:
``slow``).  Each detector (``blis_fast.results.diagnosis``) counts the requests it blames
and how many of them missed; issues are ranked by misses blamed, ties by cause (upstream first).
"""

from __future__ import annotations

import numpy as np


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    v = float(v)
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def summary_text(result, objectives=None) -> str:
    """The markdown summary of ``result`` judged against ``objectives`` (as
    ``Result.evaluate``)."""
    from blis_fast.results.diagnosis import diagnose
    from blis_fast.results.objectives import metric_value, parse_objectives

    cfg = result.setup.config
    objs = parse_objectives(objectives if objectives is not None else cfg.objectives)
    m = result.evaluation_metrics
    lines = ["# Run summary", ""]
    pol = cfg.policy
    lines.append(f"Policy: admission `{pol.admission}`, routing `{pol.routing}`"
                 + (f" (scorers {dict(sorted(pol.scorers().items()))})" if pol.routing == "weighted" else "")
                 + f", priority `{pol.priority}`, scheduler `{pol.scheduler}`, preemption victim "
                   f"`{pol.preemption_victim}`. {m['num_instances']} instances, {m['arrived_requests']} requests "
                   f"arrived over {_fmt(m['simulated_duration_s'])} s simulated.")
    lines += ["", "## Outcome", "", "| objective | value | target | normalized | met |", "|---|---|---|---|---|"]
    total_w = sum(o.weight for o in objs)
    score = 0.0
    for o in objs:
        v = metric_value(result, o.metric)
        s = o.normalize(v)
        score += o.weight * s
        lines.append(f"| {o.metric} ({o.direction}) | {_fmt(v)} | {_fmt(o.target)} | {_fmt(s)} | {_fmt(o.met(v))} |")
    lines += ["", f"Score {_fmt(score / total_w)} (weighted mean of the normalized objectives). "
                  f"SLO attainment {_fmt(m['slo_attainment'])}, goodput {_fmt(m['goodput_rps'])} req/s, "
                  f"TTFT p50/p99 {_fmt(m['ttft_p50_ms'])}/{_fmt(m['ttft_p99_ms'])} ms, "
                  f"E2E p99 {_fmt(m['e2e_p99_ms'])} ms, rejected {_fmt(m['rejected_fraction'])}, "
                  f"preemptions {m['preemption_count']}, prefix-cache hit rate {_fmt(m['prefix_cache_hit_rate'])}, "
                  f"utilization {_fmt(m['utilization_min'])}-{_fmt(m['utilization_max'])}."]
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


__all__ = ["summary_text"]
