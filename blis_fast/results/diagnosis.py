"""Why a run missed: detectors that each blame a set of requests for one cause, with the
evidence (the Key issues of the trace summary, blis_fast.results.trace_summary).

A *miss* is an arrived request that did not meet its SLO class's targets; when the
workload defines no targets at all, a request that did not complete or whose TTFT exceeds
twice the run's 10th-percentile TTFT (taken as at least 1 ms).  Detectors (each names the policy slot to change):

- ``routing_cache`` (routing, traced runs): routed while another instance's prefix index
  held at least one more leading block of its prompt;
- ``load_imbalance`` (routing): traced -- routed to an instance whose load exceeded the
  least-loaded candidate's by >= 2 requests and by half (load >= 1.5 x (least + 1)); untraced -- on an instance busier than 1.25x
  the mean instance (max/mean utilization > 1.25);
- ``bursty_admitted`` (admission): a tenant (or, if the tenant as a whole is not, one of
  its clients) whose peak arrival rate (windows of 1/50 of the run, at least 0.1 s) reaches
  4x its mean was admitted (< 10 % of its burst rejected): the requests arriving during
  its burst windows and the window after;
- ``gateway`` (flow control; runs with flow control or deadlines): requests that waited in
  a gateway queue, timed out or were shed (results.flow_control);
- ``kv_pressure`` (preemption / KV): preempted or dropped-unservable requests;
- ``hol_blocking`` (scheduler): with the scheduling records (``trace_level full``) --
  requests that waited through an episode in which their instance's wait-queue head could
  not get KV blocks while a request behind it would have fitted (``fits_behind`` > 0), and
  were admitted after it began; otherwise requests on instances whose mean wait queue
  exceeds twice the cluster mean;
- ``priority_inversions`` (priority): pairs counted by the anomaly counter; with the
  scheduling records also admissions that went ahead of a waiting request of strictly
  higher priority (``higher_priority_behind`` > 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from blis_fast_kernels.schema import BlockReason, RequestState, SchedRecord, TraceLevel
from blis_fast.results.scorecard import group_masks
from blis_fast.results.regret import estimated_regret, routing_log
from blis_fast.results.trace_table import scheduling_records


CAUSE_ORDER = ("routing_cache", "load_imbalance", "bursty_admitted", "gateway", "kv_pressure", "hol_blocking",
               "priority_inversions")


@dataclass
class Issue:
    key: str
    title: str
    slot: str  # the policy slot (or engine setting) to change
    suggestion: str
    requests: int  # requests blamed
    misses: int  # of which missed
    evidence: str


@dataclass
class Diagnosis:
    arrived: int
    misses: int
    miss_definition: str
    traced: bool
    issues: list[Issue] = field(default_factory=list)
    counterfactual_lines: list[str] = field(default_factory=list)
    worst_lines: list[str] = field(default_factory=list)


def miss_mask(result) -> tuple[np.ndarray, str]:
    """(per-request miss flags, how a miss is defined)."""
    tab = result.outcomes
    targets = result.workload.slo_targets or {}
    if any(t for t in targets.values()):
        return tab["arrived"] & ~tab["met"], "missed its SLO class's targets"
    ttft = tab["ttft_us"]
    ok = ttft >= 0
    fast = max(float(np.percentile(ttft[ok], 10)), 1000.0) if ok.any() else 1000.0
    slow = ~tab["done"] | (ttft > 2 * fast)
    return tab["arrived"] & slow, (f"no SLO targets: did not complete, or TTFT over twice the run's 10th percentile "
                                   f"({fast / 1e3:.1f} ms, at least 1 ms)")


def fmt_value(v) -> str:
    """A number as the summary shows it: integers as they are, 3 significant decimals
    below 1, 2 below 100, none above; None as '-', booleans as yes / no."""
    if v is None:
        return "-"
    if isinstance(v, (bool, np.bool_)):
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



def _routing_issues(result, miss, log) -> list[Issue]:
    out = []
    if len(log) == 0:
        return out
    reqs = log["request"]
    alt_ok = log["alt_instance"] >= 0
    best_match = np.where(alt_ok, log["alt_matched_blocks"], -1).max(axis=1)
    away = best_match > log["chosen_matched_blocks"]
    if away.any():
        lost = float((best_match - log["chosen_matched_blocks"])[away].mean())
        out.append(Issue(
            "routing_cache", "routing away from cached prefixes", "routing",
            "weight prefix affinity higher (--routing-policy weighted --routing-scorers prefix-affinity:5,...) "
            "or use prefix-affinity routing",
            int(away.sum()), int(miss[reqs[away]].sum()),
            f"{int(away.sum())} of {len(log)} decisions passed over an instance holding on average {fmt_value(lost)} more "
            f"leading prompt blocks ({_block_tokens(result)} tokens each)."))
    min_alt_load = np.where(alt_ok, log["alt_load"], np.inf).min(axis=1)
    heavier = ((log["chosen_load"] - min_alt_load) >= 2) & (log["chosen_load"] >= 1.5 * (min_alt_load + 1))
    if heavier.any():
        gap = float((log["chosen_load"] - min_alt_load)[heavier].mean())
        out.append(Issue(
            "load_imbalance", "load imbalance (routed to busier instances)", "routing",
            "weight load higher (--routing-scorers queue-depth / load-balance) or use least-loaded routing",
            int(heavier.sum()), int(miss[reqs[heavier]].sum()),
            f"{int(heavier.sum())} of {len(log)} decisions chose an instance carrying on average {fmt_value(gap)} more "
            f"requests than the least-loaded candidate; utilization max/mean "
            f"{fmt_value(result.evaluation_metrics['utilization_imbalance'])}."))
    return out


def _block_tokens(result) -> str:
    """The instances' block size ('16', or '16/32' when models differ)."""
    return "/".join(str(b) for b in sorted(set(int(x) for x in result.state.inst["block_size"])))


def _untraced_imbalance(result, miss) -> list[Issue]:
    m = result.evaluation_metrics
    if m["utilization_imbalance"] <= 1.25:
        return []
    used = result._used_instances()
    busy = result.state.inst["busy_us"][used].astype(np.float64)
    hot = used[busy > 1.25 * busy.mean()]
    blamed = np.isin(result.state.reqs["instance"], hot)
    return [Issue("load_imbalance", "load imbalance", "routing",
                  "weight load higher (--routing-scorers queue-depth / load-balance) or use least-loaded routing",
                  int(blamed.sum()), int((blamed & miss).sum()),
                  f"utilization max/mean {fmt_value(m['utilization_imbalance'])}; instances "
                  f"{', '.join(f'instance_{i}' for i in hot.tolist())} carry the excess.")]


def _bursty(result, miss) -> list[Issue]:
    reqs = result.state.reqs
    tab = result.outcomes
    arrived = tab["arrived"]
    if not arrived.any():
        return []
    t = reqs["arrival_us"].astype(np.float64)
    t_end = float(t[arrived].max())
    if t_end <= 0:
        return []
    width = max(t_end / 50.0, 1e5)
    n_win = int(t_end // width) + 1
    win = np.clip((t // width).astype(np.int64), 0, n_win - 1)

    tenants = sorted(group_masks(result, "tenant").items())
    clients = sorted(group_masks(result, "client").items())
    out, flagged = [], set()
    # a tenant whose own arrivals are bursty, else a bursty client of it (token buckets are per tenant)
    for kind, name, mask in [("tenant", n, m) for n, m in tenants] + [("client", n, m) for n, m in clients]:
        m = mask & arrived
        if m.sum() < 10:
            continue
        tenant_ids = np.unique(reqs["tenant"][m])
        if kind == "client" and (len(tenant_ids) != 1 or int(tenant_ids[0]) in flagged):
            continue
        counts = np.bincount(win[m], minlength=n_win)
        mean = counts.mean()
        if counts.max() < 4 * mean:
            continue
        burst = counts >= 3 * mean
        in_burst = burst[win] & m
        if int(tab["rejected"][in_burst].sum()) >= 0.1 * int(in_burst.sum()):
            continue  # admission already pushed back
        flagged.update(int(x) for x in tenant_ids)
        during = (burst | np.r_[False, burst[:-1]])[win] & arrived
        tenant = reqs["tenant"] == tenant_ids[0]
        tokens_per_s = float(reqs["prompt_len"][tenant & arrived].sum()) / (t_end / 1e6)
        burst_tokens = float(reqs["prompt_len"][in_burst].sum()) / max(int(burst.sum()), 1)
        tenant_name = next((n for n, tm in tenants if (tm & tenant).any()), str(int(tenant_ids[0])))
        who = f"tenant {name!r}" if kind == "tenant" else f"client {name!r} (tenant {tenant_name!r})"
        out.append(Issue(
            "bursty_admitted", f"bursty {who} admitted", "admission",
            f"rate-limit tenant {tenant_name!r}: --admission-policy token-bucket --token-bucket-refill-rate "
            f"{tokens_per_s * 1.2:.0f} --token-bucket-capacity {max(burst_tokens / 2, 1):.0f} (prompt tokens)",
            int(during.sum()), int((during & miss).sum()),
            f"its peak {width / 1e6:.2f}-s window held {int(counts.max())} arrivals vs a mean of {fmt_value(mean)}; "
            f"{int(in_burst.sum())} burst requests admitted, {int(tab['rejected'][m].sum())} of its requests rejected "
            f"in all."))
    return out


def _kv_pressure(result, miss) -> list[Issue]:
    reqs = result.state.reqs
    m = result.evaluation_metrics
    blamed = (reqs["preemptions"] > 0) | (reqs["state"] == RequestState.DROPPED)
    if not blamed.any():
        return []
    return [Issue(
        "kv_pressure", "KV-cache pressure and preemptions", "preemption / KV",
        "admit or route fewer long requests to full instances (kv-utilization scorer weight), change "
        "--preemption-victim, or give instances more KV blocks (--total-kv-blocks) / lower --max-num-seqs",
        int(blamed.sum()), int((blamed & miss).sum()),
        f"{m['preemption_count']} preemptions of {int((reqs['preemptions'] > 0).sum())} requests, "
        f"{m['dropped_unservable']} dropped as unservable; KV utilization mean {fmt_value(m['kv_utilization_mean'])}, "
        f"peak {fmt_value(m['kv_utilization_peak'])}.")]


def _gateway(result, miss) -> list[Issue]:
    """Requests the gateway held (waited in its queue), timed out or shed (a run with flow
    control or deadlines)."""
    if not result.flow_on:
        return []
    c = result.request_columns()
    blamed = (c["gateway_wait_us"] > 0) | (c["timeouts"] > 0) | (c["sheds"] > 0)
    if not blamed.any():
        return []
    s = result.cluster
    return [Issue(
        "gateway", "gateway saturation, timeouts and shedding", "flow control",
        "add capacity (instances) or let the detector pass more requests (--flow-concurrency-limit, "
        "--flow-queue-threshold), order the gateway by deadline (--dispatch-order deadline), give requests longer "
        "TTLs, or mark a class sheddable to protect the others",
        int(blamed.sum()), int((blamed & miss).sum()),
        f"{int((c['gateway_wait_us'] > 0).sum())} requests waited in the gateway ({fmt_value(s['gateway_wait_mean_ms'])} "
        f"ms mean per attempt, p99 {fmt_value(s['gateway_wait_p99_ms'])} ms, queue peak {s['gateway_depth_peak']}); "
        f"{s['timeouts']} attempts timed out, {s['sheds']} shed, {s['retries']} retries.")]


def _held_behind_blocked_heads(result, sched) -> tuple[np.ndarray, np.ndarray]:
    """(per-request flags of the requests held back, the head-of-line episodes): requests
    admitted after a kv-blocks episode of their instance with ``fits_behind`` > 0 began,
    having entered the wait queue before it ended (its head excluded)."""
    reqs = result.state.reqs
    held = np.zeros(len(reqs), bool)
    hol = sched[(sched["kind"] == SchedRecord.BLOCKED) & (sched["reason"] == BlockReason.KV_BLOCKS)
                & (sched["fits_behind"] > 0)]
    admitted = sched[sched["kind"] == SchedRecord.SCHEDULED]
    for i in np.unique(hol["instance"]).tolist():
        ep = hol[hol["instance"] == i]  # in time order (the log is)
        reach = np.maximum.accumulate(ep["last_time_us"])  # latest end among episodes begun so far
        adm = admitted[admitted["instance"] == i]
        k = np.searchsorted(ep["time_us"], adm["time_us"], side="left") - 1  # last episode begun before
        r = adm["request"]
        inside = (k >= 0) & (reach[np.maximum(k, 0)] >= reqs["queued_us"][r]) & ~np.isin(r, ep["request"])
        held[r[inside]] = True
    return held, hol


def _traced_hol(result, miss, sched) -> list[Issue]:
    held, hol = _held_behind_blocked_heads(result, sched)
    if not held.any():
        return []
    n_inst = len(np.unique(hol["instance"]))
    return [Issue("hol_blocking", "head-of-line blocking", "scheduler",
                  "let smaller requests go first (--scheduler sjf or --scheduler-weights), or give instances more KV "
                  "blocks (--total-kv-blocks)",
                  int(held.sum()), int((held & miss).sum()),
                  f"{len(hol)} episodes ({int(hol['steps'].sum())} steps) on {n_inst} "
                  f"instance{'s' if n_inst != 1 else ''} in which the wait queue's head could not get KV blocks while up to "
                  f"{int(hol['fits_behind'].max())} of the requests behind it would have fitted (scheduling records).")]


def _hol(result, miss, sched) -> list[Issue]:
    if sched is not None:
        return _traced_hol(result, miss, sched)
    m = result.evaluation_metrics
    if m["hol_blocking_instances"] == 0:
        return []
    inst = result.state.inst
    used = result._used_instances()
    steps = np.maximum(inst["steps"][used], 1)
    mean_q = inst["sum_wq_len"][used] / steps
    hot = used[mean_q > 2 * mean_q.mean()]
    blamed = np.isin(result.state.reqs["instance"], hot)
    return [Issue("hol_blocking", "head-of-line blocking", "scheduler",
                  "order the wait queue by size (--scheduler sjf or --scheduler-weights) or route away from long queues",
                  int(blamed.sum()), int((blamed & miss).sum()),
                  f"{m['hol_blocking_instances']} instances with a mean wait queue over twice the cluster mean "
                  f"({', '.join(f'instance_{i}' for i in hot.tolist())}).")]


def _inversions(result, miss, sched) -> list[Issue]:
    n = int(result.evaluation_metrics["priority_inversions"])
    jumped = 0 if sched is None else int(np.count_nonzero(
        (sched["kind"] == SchedRecord.SCHEDULED) & (sched["higher_behind"] > 0)))
    if n == 0 and jumped == 0:
        return []
    evidence = f"{n} pairs where an earlier request of the same class on the same instance took over 2x longer."
    if sched is not None:
        evidence += (f" {jumped} admissions to a batch went ahead of a waiting request of higher priority "
                     f"(scheduling records).")
    return [Issue("priority_inversions", "priority inversions", "priority",
                  "revisit --priority-policy / --slo-class-weights (earlier requests finishing far later), or let "
                  "the scheduler sort by priority (--scheduler priority-fcfs)",
                  min(max(n, jumped), int(result.outcomes["arrived"].sum())), 0, evidence)]


def _worst_lines(result, log, regret, best) -> list[str]:
    if len(log) == 0:
        return []
    order = np.lexsort((log["request"], -regret))
    order = order[regret[order] > 0][:3]
    if len(order) == 0:
        return ["No routing decision has a positive estimated regret."]
    tab = result.outcomes
    lines = []
    for k in order.tolist():
        rec = log[k]
        r = int(rec["request"])
        b = int(best[k])
        ttft = tab["ttft_us"][r]
        alt = (f"over instance_{int(rec['alt_instance'][b])} (load {fmt_value(float(rec['alt_load'][b]))}, "
               f"KV {fmt_value(float(rec['alt_kv_utilization'][b]))}, {int(rec['alt_matched_blocks'][b])} prefix blocks)"
               if b >= 0 else "(no alternative)")
        lines.append(f"- request_{r} at {int(rec['time_us']) / 1e6:.3f} s: chose instance_{int(rec['chosen_instance'])} "
                     f"(load {fmt_value(float(rec['chosen_load']))}, KV {fmt_value(float(rec['chosen_kv_utilization']))}, "
                     f"{int(rec['chosen_matched_blocks'])} prefix blocks) {alt}; estimated regret "
                     f"{regret[k] / 1e3:.1f} ms; TTFT {ttft / 1e3:.1f} ms" + (" (missed)" if bool(
                         miss_mask(result)[0][r]) else "") + ".")
    return lines


def _counterfactual_lines(result, regret) -> list[str]:
    lines = []
    if len(regret):
        pos = regret > 0
        lines.append(f"Estimated regret (model: blis_fast/results/regret.py) over {len(regret)} routing decisions: "
                     f"mean {regret.mean() / 1e3:.1f} ms, {int(pos.sum())} decisions with regret > 0, max "
                     f"{regret.max() / 1e3:.1f} ms.")
    for rep in getattr(result, "counterfactuals", None) or []:
        base = rep["baseline"]
        lines.append(f"- request_{rep['request']} (estimated regret {rep['estimated_regret_ms']:.1f} ms): actual "
                     f"instance_{rep['chosen_instance']} TTFT {base['ttft_ms']:.1f} ms, E2E {base['e2e_ms']:.1f} ms, "
                     f"score {base['score']:.4f}; replayed:")
        for alt in rep["alternatives"]:
            lines.append(f"  - instance_{alt['instance']}: TTFT {alt['ttft_ms']:.1f} ms, E2E {alt['e2e_ms']:.1f} ms, "
                         f"score {alt['score']:.4f}")
    return lines


def diagnose(result) -> Diagnosis:
    """Every detector's findings, ranked (module docstring), with the worst decisions and
    the counterfactual lines of the summary."""
    miss, definition = miss_mask(result)
    log = routing_log(result)
    traced = int(result.state.settings[0]["trace_level"]) > 0
    issues = _routing_issues(result, miss, log) if traced else _untraced_imbalance(result, miss)

    sched = scheduling_records(result) if int(result.state.settings[0]["trace_level"]) >= TraceLevel.FULL else None
    issues += (_bursty(result, miss) + _gateway(result, miss) + _kv_pressure(result, miss) + _hol(result, miss, sched)
               + _inversions(result, miss, sched))
    issues = [i for i in issues if i.requests > 0]
    # most misses first; ties go to the cause upstream (a busy instance's long queue is the
    # imbalance's symptom), then to more requests
    issues.sort(key=lambda i: (-i.misses, CAUSE_ORDER.index(i.key), -i.requests))
    regret, best = estimated_regret(result, log)
    return Diagnosis(
        arrived=int(result.outcomes["arrived"].sum()), misses=int(miss.sum()), miss_definition=definition,
        traced=traced, issues=issues, counterfactual_lines=_counterfactual_lines(result, regret),
        worst_lines=_worst_lines(result, log, regret, best))


__all__ = ["Diagnosis", "Issue", "diagnose", "miss_mask"]
