"""SLO attainment and latency per SLO class, tenant and client (workload-spec runs).

For request i (µs, from the request table after a run):
    TTFT = first token − arrival,  E2E = last token − arrival,
    TPOT = (E2E − TTFT)/(N − 1) for N > 1 output tokens (0 for N <= 1).
A request *meets* its class's SLO when it completed and each target its class defines
(``ttft_ms``, ``tpot_ms``, ``e2e_ms``; missing = no constraint) holds.  Attainment =
requests meeting it / requests that arrived (released at the cluster: rejected, dropped
and unfinished requests count as misses; closed-loop turns never released do not count).
A class without targets has no attainment: ``slo_attainment`` is null there (and for a
tenant or client none of whose requests has a class with targets), never a completion
fraction that would read as 1.0 however slow the requests were.

    from blis_fast.results.slo import slo_report
    report = slo_report(blis_fast.simulate(workload_spec="configs/workloads/multi-tenant.yaml"))
"""

from __future__ import annotations

import numpy as np

from blis_fast_kernels.schema import RequestState

from .metrics import request_latencies

TARGETS = ("ttft_ms", "tpot_ms", "e2e_ms")


def has_targets(targets) -> bool:
    """Whether a class's targets (a mapping ``ttft_ms``/``tpot_ms``/``e2e_ms`` -> ms, None =
    no constraint) set at least one."""
    return any((targets or {}).get(k) is not None for k in TARGETS)


def targeted_classes(slo_names: list[str], slo_targets: dict) -> list[int]:
    """The class ids (positions in ``slo_names``) whose class sets at least one target."""
    return [c for c, name in enumerate(slo_names) if has_targets(slo_targets.get(name))]


def _pcts(us: np.ndarray) -> dict:
    if us.size == 0:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0}
    ms = us / 1e3
    q = np.percentile(ms, [50, 90, 99])
    return {"mean": float(ms.mean()), "p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2])}


def request_slo_table(reqs: np.ndarray, slo_names: list[str], slo_targets: dict,
                      lat: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Per-request arrays: arrived, done, ttft_us, tpot_us (float), e2e_us, met (bool).
    ``lat``: ``request_latencies(reqs)`` if already computed."""
    lat = request_latencies(reqs) if lat is None else lat
    arrived = reqs["arrival_us"] >= 0
    done = lat["done"]
    ttft, e2e = lat["ttft_us"], lat["e2e_us"]
    n_out = reqs["output_len"]
    tpot = np.where(done & (n_out > 1), (e2e - ttft) / np.maximum(n_out - 1, 1), 0.0)
    met = done.copy()
    cls = reqs["slo_class"]
    for c, name in enumerate(slo_names):
        t = slo_targets.get(name) or {}
        m = cls == c
        if t.get("ttft_ms") is not None:
            met[m] &= ttft[m] <= t["ttft_ms"] * 1e3
        if t.get("tpot_ms") is not None:
            met[m] &= tpot[m] <= t["tpot_ms"] * 1e3
        if t.get("e2e_ms") is not None:
            met[m] &= e2e[m] <= t["e2e_ms"] * 1e3
    return {"arrived": arrived, "done": done, "ttft_us": ttft, "tpot_us": tpot, "e2e_us": e2e, "met": met}


def _group(reqs, tab, mask, judged: bool, deadlines: bool = False) -> dict:
    """``judged``: some request of the group has a class with targets (else no attainment);
    ``deadlines``: the run had flow control or deadlines (then ``timed_out`` and ``shed``:
    the group's requests that ended so)."""
    arrived = mask & tab["arrived"]
    done = mask & tab["done"]
    n_arr = int(arrived.sum())
    attained = (float((mask & tab["met"]).sum() / n_arr) if n_arr else 0.0) if judged else None
    out = {
        "arrived": n_arr,
        "completed": int(done.sum()),
        "rejected": int((mask & (reqs["state"] == RequestState.REJECTED)).sum()),
        "dropped_unservable": int((mask & (reqs["state"] == RequestState.DROPPED)).sum()),
    }
    if deadlines:  # (a run without them keeps its report)
        out["timed_out"] = int((mask & (reqs["state"] == RequestState.TIMED_OUT)).sum())
        out["shed"] = int((mask & (reqs["state"] == RequestState.SHED)).sum())
    return {
        **out,
        "slo_attainment": attained,
        "ttft_ms": _pcts(tab["ttft_us"][mask & (tab["ttft_us"] >= 0)]),
        "tpot_ms": _pcts(tab["tpot_us"][done]),
        "e2e_ms": _pcts(tab["e2e_us"][done]),
    }


def slo_report(result) -> dict:
    """{"slo_classes": {name: {targets, arrived, completed, rejected, slo_attainment, ttft_ms,
    tpot_ms, e2e_ms}}, "tenants": {...}, "clients": {...}} of a ``Result``.  Tenants and
    clients are judged against each request's own class."""
    wl = result.workload
    reqs = result.state.reqs
    names = wl.names or {}
    n_cls = int(reqs["slo_class"].max()) + 1 if len(reqs) else 0
    slo_names = list(names.get("slo_class") or [str(i) for i in range(n_cls)])
    tab = request_slo_table(reqs, slo_names, wl.slo_targets or {}, result.latencies)
    targeted = np.isin(reqs["slo_class"], targeted_classes(slo_names, wl.slo_targets or {}))
    win = result.in_window  # only the requests of the measurement window (results.window)
    out: dict = {}
    for col, key in (("slo_class", "slo_classes"), ("tenant", "tenants"), ("client", "clients")):
        ids = reqs[col]
        lst = list(names.get(col) or [str(i) for i in range(int(ids.max()) + 1 if len(ids) else 0)])
        groups = {}
        for i, name in enumerate(lst):
            m = ids == i if win is None else (ids == i) & win
            if not m.any():
                continue
            g = _group(reqs, tab, m, bool((m & targeted).any()), result.flow_on)
            if col == "slo_class":
                g = {"targets": dict(wl.slo_targets.get(name) or {}), **g}
            groups[name] = g
        out[key] = groups
    return out
