"""What ``blis-fast run`` prints on stdout: for a person at a terminal a compact summary
(rich tables); for a pipe, a file or ``--json`` the summary JSON exactly as
``Result.summary()`` gives it (scripts parse it: ``blis-fast run > run.json``).

The human summary rounds for reading -- times to 3 significant figures (at least one
decimal below 100 ms), ratios as percentages with one decimal, rates to 3 significant
figures; counts are exact.  Files and JSON keep the full values.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from blis_fast.config.validate import escape_controls
from blis_fast.text import count, metric_text, ms, pct, rate

PER_INSTANCE_LIMIT = 8  # instances shown one per row without --per-instance


def wants_json(json_flag: bool) -> bool:
    """JSON for ``--json`` or when stdout is not a terminal (a pipe, a file)."""
    if json_flag:
        return True
    try:
        return not sys.stdout.isatty()
    except (AttributeError, ValueError):
        return True


def summary_json(summary: dict) -> str:
    return json.dumps(summary, indent=2, allow_nan=False)


# ----------------------------------------------------------------------------- the summary


def _escaped(value: Any) -> Any:
    """``value`` (a summary: dicts, lists, numbers, text) with control characters in its
    text escaped, line breaks kept; printable text is unchanged."""
    if isinstance(value, str):
        return escape_controls(value, keep="\n")
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    return value


def render(summary: dict, per_instance: bool = False, console=None) -> None:
    """Print the human summary of one run's ``summary`` dict on ``console`` (stdout)."""
    from rich.console import Console  # deferred: rich

    console = console or Console()
    summary = _escaped(summary)  # names from the user's files (classes, tenants, models) reach the terminal
    run, c = summary["run"], summary["cluster"]
    console.print(_headline(run, c, summary.get("deployments")))
    console.print()
    console.print(_latency_table(c))
    console.print()
    for line in _cluster_lines(c):
        console.print(line, highlight=False)
    deployments = summary.get("deployments") or {}
    if len(deployments) > 1:  # (the summary has the group with two or more deployments)
        console.print()
        console.print(_deployment_table(deployments))
    instances = summary.get("instances") or []
    if len(instances) > 1 and (per_instance or len(instances) <= PER_INSTANCE_LIMIT):
        console.print()
        console.print(_instance_table(instances))
    elif len(instances) > PER_INSTANCE_LIMIT:
        console.print(f"[dim]{len(instances)} instances (--per-instance lists them)[/dim]")
    slo = (summary.get("slo") or {}).get("slo_classes")
    if slo:
        console.print()
        console.print(_slo_table(slo))
    console.print()
    console.print(_anomalies(c), highlight=False)
    if summary.get("autoscale"):  # a run with an autoscaler
        console.print(_autoscaling(summary["autoscale"]), highlight=False)
    if "timeouts" in c:  # a run with flow control or deadlines (results.flow_control)
        console.print(_flow_control(c, summary.get("flow_control")), highlight=False)
    if summary.get("fitness"):
        console.print(_fitness(summary["fitness"]), highlight=False)
    if summary.get("evaluation"):  # --objectives
        ev = summary["evaluation"]
        console.print(_evaluation(ev), highlight=False, markup=False)
    if summary.get("counterfactuals"):
        console.print(f"{len(summary['counterfactuals'])} counterfactual replays (--json shows them)", highlight=False)
    if summary.get("summary_text"):  # --summarize-trace: markdown, printed as it is
        console.print()
        console.print(summary["summary_text"], markup=False, highlight=False)


def _fleet(deployments: dict[str, dict]) -> dict[str, list[str]]:
    """{short served-model name: ["2 × H100 TP1", ...]} in deployment order (empty with
    fewer than two deployments: the summary has no ``deployments`` group then)."""
    fleet: dict[str, list[str]] = {}
    for d in deployments.values():
        served = str(d.get("model", "")).rsplit("/", 1)[-1]
        fleet.setdefault(served, []).append(f"{count(d.get('num_instances'))} × {d.get('hardware')} TP{d.get('tp', 1)}")
    return fleet


def _headline(run: dict, c: dict, deployments: dict[str, dict] | None = None):
    from rich.text import Text  # deferred: rich

    cfg = run.get("config") or {}
    engine = cfg.get("engine") or {}
    model = str(run.get("model", "")).rsplit("/", 1)[-1]
    wl = run.get("workload") or {}
    source = wl.get("source") or wl.get("kind") or (cfg.get("workload") or {}).get("type", "")
    source = str(source).replace("\\", "/").rsplit("/", 1)[-1]  # the file name is enough here
    text = Text()
    fleet = _fleet(deployments or {})
    if fleet:  # several deployments: what runs where (the instance counts), not only the first's GPU
        for k, (served, pools) in enumerate(fleet.items()):
            text.append(" + " if k else "")
            text.append(served, style="bold")
            text.append(" on " + " + ".join(pools))
        text.append(f" · {run.get('latency_model')} · {count(run.get('num_requests'))} requests ({source})")
        return text
    text.append(f"{model}", style="bold")
    text.append(f" on {run.get('hardware')} TP{engine.get('tp', 1)} · {run.get('latency_model')} · "
                f"{count(c.get('num_instances'))} instance{'s' if c.get('num_instances') != 1 else ''} · "
                f"{count(run.get('num_requests'))} requests ({source})")
    return text


def _latency_table(c: dict):
    from rich.table import Table  # deferred: rich

    t = Table(title=None, box=None, pad_edge=False, show_edge=False, header_style="bold")
    t.add_column("latency (ms)")
    for q in ("mean", "p90", "p95", "p99"):
        t.add_column(q, justify="right")
    for name, key in (("TTFT", "ttft"), ("ITL", "itl"), ("E2E", "e2e")):
        t.add_row(name, *(ms(c.get(f"{key}_{q}_ms")) for q in ("mean", "p90", "p95", "p99")))
    return t


def _cluster_lines(c: dict) -> list[str]:
    done = c.get("completed_requests", 0)
    arrived = c.get("arrived_requests", done)
    return [" · ".join([f"completed {count(done)}/{count(arrived)}", f"{rate(c.get('responses_per_sec'))} req/s",
                        f"{rate(c.get('tokens_per_sec'))} tok/s",
                        f"simulated {rate(c.get('vllm_estimated_duration_s'))} s"]),
            " · ".join([f"KV peak {pct(c.get('kv_peak_utilization'))}",
                        f"prefix cache hits {pct(c.get('prefix_cache_hit_rate'))}",
                        f"mean batch {rate(c.get('mean_batch_size'))}"]),
            # headroom: how full the steps were; step occupancy is near 100% at any load
            " · ".join([f"step occupancy: token budget {pct(c.get('token_budget_occupancy'))}",
                        f"batch slots {pct(c.get('batch_slot_occupancy'))}",
                        f"KV {pct(c.get('kv_occupancy_mean'))}",
                        f"a step running {pct(c.get('busy_fraction'))} of the time"])]


def _instance_table(instances: list[dict]):
    from rich.table import Table  # deferred: rich

    t = Table(title="instances (times in ms; budget, slots, KV: mean step occupancy; stepping: time a step runs)",
              title_justify="left", box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name, right in (("instance", False), ("completed", True), ("TTFT p99", True), ("E2E p99", True),
                        ("ITL p99", True), ("KV peak", True), ("budget", True), ("slots", True), ("KV", True),
                        ("stepping", True), ("preempted", True)):
        t.add_column(name, justify="right" if right else "left")
    for s in instances:
        t.add_row(str(s.get("instance_id")), count(s.get("completed_requests")), ms(s.get("ttft_p99_ms")),
                  ms(s.get("e2e_p99_ms")), ms(s.get("itl_p99_ms")), pct(s.get("kv_peak_utilization")),
                  pct(s.get("token_budget_occupancy")), pct(s.get("batch_slot_occupancy")),
                  pct(s.get("kv_occupancy_mean")), pct(s.get("busy_fraction")), count(s.get("preemption_count")))
    return t


def _deployment_table(deployments: dict[str, dict]):
    from rich.table import Table  # deferred: rich

    t = Table(title="deployments (times in ms; budget, slots, KV: mean step occupancy; stepping: time a step runs)",
              title_justify="left", box=None, pad_edge=False, show_edge=False, header_style="bold")
    # one served model: the headline names it, and the table fits 100 columns without it
    with_model = len({d.get("model") for d in deployments.values()}) > 1
    for name, right in (("deployment", False), ("model", False), ("hardware", False), ("instances", True),
                        ("completed", True), ("TTFT p99", True), ("E2E p99", True), ("budget", True),
                        ("slots", True), ("KV", True), ("stepping", True)):
        if name != "model" or with_model:
            t.add_column(name, justify="right" if right else "left")
    for name, d in deployments.items():
        model = [str(d.get("model", "")).rsplit("/", 1)[-1]] if with_model else []
        hardware = f"{d.get('hardware')} TP{d.get('tp', 1)}"
        t.add_row(str(name), *model, hardware, count(d.get("num_instances")), count(d.get("completed_requests")),
                  ms(d.get("ttft_p99_ms")), ms(d.get("e2e_p99_ms")), pct(d.get("token_budget_occupancy")),
                  pct(d.get("batch_slot_occupancy")), pct(d.get("kv_occupancy_mean")), pct(d.get("busy_fraction")))
    return t


def _slo_table(classes: dict):
    from rich.table import Table  # deferred: rich

    t = Table(title="SLO classes (times in ms)", title_justify="left", box=None, pad_edge=False, show_edge=False,
              header_style="bold")
    for name, right in (("class", False), ("arrived", True), ("completed", True), ("attained", True),
                        ("TTFT p99", True), ("TPOT p99", True), ("E2E p99", True), ("targets", False)):
        t.add_column(name, justify="right" if right else "left")
    for name, s in classes.items():
        targets = " ".join(f"{k.removesuffix('_ms')}≤{ms(v)}" for k, v in (s.get("targets") or {}).items()
                           if v is not None)
        attained = "no targets" if s.get("slo_attainment") is None else pct(s["slo_attainment"])
        t.add_row(str(name), count(s.get("arrived")), count(s.get("completed")), attained,
                  ms((s.get("ttft_ms") or {}).get("p99")), ms((s.get("tpot_ms") or {}).get("p99")),
                  ms((s.get("e2e_ms") or {}).get("p99")), targets or "-")
    return t


ANOMALIES = (("rejected_requests", "rejected"), ("dropped_unservable", "dropped (never fit)"),
             ("preemption_count", "preemptions"), ("priority_inversions", "priority inversions"),
             ("hol_blocking_instances", "HOL-blocking instances"), ("still_queued", "still queued"),
             ("still_running", "still running"))


def _anomalies(c: dict) -> str:
    seen = [f"{label} {count(c[key])}" for key, label in ANOMALIES if c.get(key)]
    return "anomalies: " + (" · ".join(seen) if seen else "none")


def _autoscaling(a: dict) -> str:
    """One line of the ``autoscale`` group: decisions, instances started and stopped, the
    bill, and its anomalies when they happened."""
    cost = "no price" if a.get("cost") is None else f"cost {a['cost']:.4g}"
    text = (f"autoscaling: {count(a.get('scale_events'))} scale events ({count(a.get('scale_ups'))} started, "
            f"{count(a.get('scale_downs'))} stopped) · {a.get('gpu_hours', 0):.4g} GPU-hours · {cost}")
    seen = []
    if a.get("scale_oscillations"):
        seen.append(f"oscillations {count(a['scale_oscillations'])}")
    for key, label in (("under_provisioned_s", "under-provisioned"), ("over_provisioned_s", "over-provisioned")):
        if a.get(key):
            seen.append(f"{label} {a[key]:.4g} s")
    return " · ".join([text, *seen])


def _flow_control(c: dict, group: dict | None) -> str:
    """One line of a run with flow control or deadlines: the detector, the gateway wait and
    queue peak, timeouts, sheds, retries and attempts per request."""
    head = f"flow control {group.get('detector')}" if group else "deadlines"
    return (f"{head}: gateway wait {c.get('gateway_wait_mean_ms', 0):.4g} ms mean (p99 "
            f"{c.get('gateway_wait_p99_ms', 0):.4g} ms), queue peak {count(c.get('gateway_depth_peak'))} · "
            f"timeouts {count(c.get('timeouts'))} ({count(c.get('timed_out'))} requests, "
            f"{c.get('timeout_fraction', 0):.1%}) · sheds {count(c.get('sheds'))} ({count(c.get('shed'))} requests) · "
            f"retries {count(c.get('retries'))} · {c.get('attempts_mean', 0):.3g} attempts per request")


def _evaluation(ev: dict) -> str:
    """The score, then each objective's value beside its normalized score:
    ``ttft_p99_ms 1,742 ms -> 0.287``; ``slo_attainment no targets -> 1.000`` when the
    workload sets no SLO target."""
    values = ev.get("values") or {}
    parts = [f"evaluation score {ev.get('score', 0):.3f}"]
    for k, v in (ev.get("objectives") or {}).items():
        if isinstance(v, (int, float)):
            if values.get(k) is not None:
                shown = f"{metric_text(k, values[k])} -> "
            else:  # null: an SLO attainment without targets (its score counts completions)
                shown = "no targets -> " if k in values else ""
            parts.append(f"{k} {shown}{v:.3f}")
    return " · ".join(parts)


def _fitness(f: dict) -> str:
    """The fitness score and its normalized components (BLIS's keys)."""
    parts = [f"fitness {f.get('score', 0):.4g}"]
    parts += [f"{k} {v:.3g}" for k, v in (f.get("components") or {}).items() if isinstance(v, (int, float))]
    return " · ".join(parts)
