"""Results of a run with gateway flow control or request deadlines (kernels/engine/flow.py;
docs/policies.md, docs/workloads.md): gateway waits and depth, timeouts, sheds, retries,
attempts and the latency of the whole exchange.

A request's row in the request table keeps its LAST attempt (its arrival, TTFT and E2E are
the final attempt's); ``State.flow_reqs`` adds its first arrival, attempt count, summed
gateway wait, timeouts and sheds, and ``State.attempt_log`` has one row per failed attempt.

Definitions (over the requests of the measurement window, if any, else every request):

- ``gateway_wait_mean_ms`` / ``gateway_wait_p99_ms``: per attempt that left the gateway
  stage -- released to routing (0 if it went straight through) or timed out --, its time in
  the gateway queue.  Shed attempts (never queued) and attempts still queued or not yet
  admitted at the end are not samples.
- ``gateway_depth_peak``: the most requests waiting in the gateway queues at once (run-wide).
- ``timeouts`` / ``sheds``: attempts that timed out / were shed; ``timed_out`` / ``shed``:
  requests whose last attempt timed out / was shed (they ended so), ``timeout_fraction`` /
  ``shed_fraction`` those over the requests that arrived.
- ``retries``: attempts after the first; ``attempts_mean``: attempts per arrived request.
- ``exchange_e2e_mean_ms`` / ``_p99_ms``: completed requests, from the first attempt's
  arrival to the final attempt's last token (= E2E for a request that never retried).

Request conservation: completed + rejected + dropped + timed_out + shed + still queued,
running or in flight (``still_in_flight``: arrived and in none of the other states --
admitting, in the gateway, routed, between attempts) == arrived.

The fields, the ``flow_control`` group and the per-request columns appear only when flow
control or deadlines are on (``flow_on``): a run without them keeps its outputs byte for byte.
"""

from __future__ import annotations

import numpy as np

from blis_fast_kernels.schema import (AttemptEnd, DISPATCH_ORDER_NAMES, FAIRNESS_NAMES, FLOW_DETECTOR_NAMES,
                                      REQUEST_STATE_NAMES, FlowParam, PolicySlot, RequestState)

from .metrics import percentiles_us

# states a request's attempt reached the gateway's decision from and left it (a sample of
# the gateway wait); PENDING (between attempts), ADMITTING, GATEWAY, REJECTED and SHED are not
_PAST_GATEWAY = (RequestState.ROUTED, RequestState.QUEUED, RequestState.RUNNING, RequestState.COMPLETED,
                 RequestState.DROPPED)


def flow_on(result) -> bool:
    """True when the run had flow control (a saturation detector) or deadlines (TTLs,
    shedding, retries): then its results carry the fields of this module."""
    s = result.full_state.settings[0]
    return int(s["flow"]) != 0 or int(s["deadlines"]) != 0


def gateway_on(result) -> bool:
    """True when the run had a gateway queue (a saturation detector)."""
    return int(result.full_state.settings[0]["flow"]) != 0


def attempt_rows(result) -> np.ndarray:
    """The failed-attempt log's rows (``ATTEMPT_DT``), in the order the attempts ended."""
    st = result.full_state
    return st.attempt_log[: int(st.loop[0]["attempt_records"])]


def request_columns(result) -> dict[str, np.ndarray]:
    """Per request (µs, -1 = undefined): ``attempts`` (0 = it never arrived),
    ``first_arrival_us``, ``exchange_e2e_us`` (completed requests), ``gateway_wait_us``
    (summed over its attempts), ``timeouts``, ``sheds``."""
    reqs = result.state.reqs
    n = len(reqs)
    fr = result.full_state.flow_reqs[:n]
    state = reqs["state"]
    attempt = fr["attempt"].astype(np.int64)
    arrived = (state != RequestState.PENDING) | (attempt > 0)
    lat = result.latencies
    first = np.where(arrived, fr["first_arrival_us"], -1).astype(np.int64)
    exchange = np.where(lat["done"], lat["e2e_us"] + reqs["arrival_us"] - first, -1)
    return {
        "attempts": np.where(arrived, attempt + 1, 0),
        "first_arrival_us": first,
        "exchange_e2e_us": exchange.astype(np.int64),
        "gateway_wait_us": fr["gw_wait_total_us"].astype(np.int64),
        "timeouts": fr["timeouts"].astype(np.int64),
        "sheds": fr["sheds"].astype(np.int64),
    }


FLOW_REQUEST_FIELD_TYPES = {"attempts": "int64", "first_arrival_s": "float64", "exchange_e2e_ms": "float64",
                            "gateway_wait_ms": "float64", "timeouts": "int64", "sheds": "int64"}


def request_fields(result, sel: np.ndarray, missing=None) -> dict[str, list]:
    """The per-request record fields of rows ``sel`` (``FLOW_REQUEST_FIELD_TYPES``; an
    undefined time is ``missing``)."""
    c = request_columns(result)

    def scaled(key, scale):
        v = c[key][sel]
        return [x if ok else missing for x, ok in zip((v / scale).tolist(), (v >= 0).tolist())]

    return {"attempts": c["attempts"][sel].tolist(), "first_arrival_s": scaled("first_arrival_us", 1e6),
            "exchange_e2e_ms": scaled("exchange_e2e_us", 1000.0),
            "gateway_wait_ms": (c["gateway_wait_us"][sel] / 1000.0).tolist(),
            "timeouts": c["timeouts"][sel].tolist(), "sheds": c["sheds"][sel].tolist()}


def _selected(result) -> np.ndarray:
    """bool per request: the requests the statistics cover (the measurement window's)."""
    win = result.in_window
    return np.ones(len(result.state.reqs), bool) if win is None else win


def gateway_waits_us(result) -> np.ndarray:
    """The gateway wait samples (µs) of the covered requests' attempts (module docstring)."""
    sel = _selected(result)
    reqs = result.state.reqs
    fr = result.full_state.flow_reqs[: len(reqs)]
    final = sel & np.isin(reqs["state"], _PAST_GATEWAY)
    log = attempt_rows(result)
    failed = log[(log["outcome"] == AttemptEnd.TIMED_OUT) & sel[log["request"]]]
    return np.concatenate((fr["gw_wait_us"][final], failed["gw_wait_us"])).astype(np.int64)


def ended_counts(result) -> tuple[int, int]:
    """(timed_out, shed): covered requests whose last attempt timed out / was shed."""
    sel = _selected(result)
    state = result.reqs["state"]
    return int((sel & (state == RequestState.TIMED_OUT)).sum()), int((sel & (state == RequestState.SHED)).sum())


def cluster_fields(result, arrived: int) -> dict:
    """The cluster summary's flow-control fields (module docstring), ``arrived`` requests."""
    sel = _selected(result)
    c = request_columns(result)
    waits = gateway_waits_us(result)
    timed_out, shed = ended_counts(result)
    attempts = int(c["attempts"][sel].sum())
    done = sel & (c["exchange_e2e_us"] >= 0)
    exchange = c["exchange_e2e_us"][done]
    p99_wait = percentiles_us(waits, (99,))[0]
    p99_exchange = percentiles_us(exchange, (99,))[0]
    return {
        "gateway_wait_mean_ms": float(waits.mean()) / 1000.0 if waits.size else 0.0,
        "gateway_wait_p99_ms": p99_wait / 1000.0,
        "gateway_depth_peak": int(result.full_state.loop[0]["gateway_peak"]),
        "timeouts": int(c["timeouts"][sel].sum()),
        "timed_out": timed_out,
        "timeout_fraction": timed_out / arrived if arrived else 0.0,
        "sheds": int(c["sheds"][sel].sum()),
        "shed": shed,
        "shed_fraction": shed / arrived if arrived else 0.0,
        "retries": int(np.maximum(c["attempts"][sel] - 1, 0).sum()),
        "attempts_mean": attempts / arrived if arrived else 0.0,
        "exchange_e2e_mean_ms": float(exchange.mean()) / 1000.0 if exchange.size else 0.0,
        "exchange_e2e_p99_ms": p99_exchange / 1000.0,
    }


def summary(result) -> dict:
    """The ``flow_control`` summary group of a run with a gateway queue: the detector, the
    dispatch order, the fairness and, per served model, the requests its gateway released
    (``dispatched``, after waiting in the queue), shed and its queue's peak depth."""
    st = result.full_state
    par = st.policy_param[PolicySlot.FLOW]
    names = list(result.workload.models or []) or [result.setup.deployments[0].served_model_name]
    fm = st.flow_models
    models = {}
    for m in range(min(len(fm), len(names))):
        models[str(names[m])] = {"dispatched": int(fm[m]["dispatched"]), "sheds": int(fm[m]["sheds"]),
                                 "depth_peak": int(fm[m]["peak"])}
    return {"detector": FLOW_DETECTOR_NAMES[int(st.policy_kind[PolicySlot.FLOW])],
            "dispatch_order": DISPATCH_ORDER_NAMES[int(par[FlowParam.DISPATCH_ORDER])],
            "fairness": FAIRNESS_NAMES[int(par[FlowParam.FAIRNESS])],
            "models": models}


ATTEMPT_COLUMNS = ("request", "attempt", "arrival_us", "gateway_enter_us", "gateway_leave_us", "gateway_wait_us",
                   "end_us", "outcome", "place", "instance")


def attempts_table(result):
    """The failed-attempt log as a pyarrow Table (``--attempts-out``): one row per attempt
    that timed out or was shed, in the order they ended -- the request, its attempt number
    (0 = first), arrival, gateway entry / release (-1 = none), gateway wait, end (µs),
    ``outcome`` (timed_out / shed), ``place`` (the state it was cancelled in) and the
    instance it held (-1 = none)."""
    import pyarrow as pa  # deferred: pyarrow

    log = attempt_rows(result)
    outcome = np.array(["timed_out", "shed"], dtype=object)
    states = np.array(REQUEST_STATE_NAMES, dtype=object)
    cols = {
        "request": log["request"].astype(np.int64), "attempt": log["attempt"].astype(np.int64),
        "arrival_us": log["arrival_us"].astype(np.int64), "gateway_enter_us": log["gw_enter_us"].astype(np.int64),
        "gateway_leave_us": log["gw_leave_us"].astype(np.int64), "gateway_wait_us": log["gw_wait_us"].astype(np.int64),
        "end_us": log["end_us"].astype(np.int64),
    }
    table = {k: pa.array(v) for k, v in cols.items()}
    table["outcome"] = pa.array(outcome[log["outcome"].astype(np.int64)].tolist(), pa.string())
    table["place"] = pa.array(states[log["place"].astype(np.int64)].tolist(), pa.string())
    table["instance"] = pa.array(log["instance"].astype(np.int64))
    return pa.table(table)


GATEWAY_BOUND_SHARE = 0.5  # a run is gateway-bound when gateway waits are at least this share of the TTFT
STORM_WINDOW_US = 1_000_000  # a timeout storm: at least STORM_MIN timeouts within this window ...
STORM_MIN = 10


def gateway_share(result) -> tuple[float, int]:
    """(the summed final-attempt gateway wait / the summed TTFT, over requests with a first
    token that waited in the gateway; how many they are): how much of their TTFT went to the
    gateway queue."""
    reqs = result.state.reqs
    fr = result.full_state.flow_reqs[: len(reqs)]
    lat = result.latencies
    waited = lat["has_first"] & (fr["gw_wait_us"] > 0)
    total = int(lat["ttft_us"][waited].sum())
    return (int(fr["gw_wait_us"][waited].sum()) / total if total > 0 else 0.0), int(waited.sum())


def timeout_storm(result) -> tuple[int, int, int] | None:
    """The densest burst of timeouts: (its count, its first and last end µs) when at least
    STORM_MIN attempts timed out within STORM_WINDOW_US; None otherwise."""
    log = attempt_rows(result)
    ends = np.sort(log["end_us"][log["outcome"] == AttemptEnd.TIMED_OUT].astype(np.int64))
    if ends.size < STORM_MIN:
        return None
    last = np.searchsorted(ends, ends + STORM_WINDOW_US, side="right")  # timeouts in [ends[k], ends[k] + window]
    counts = last - np.arange(ends.size)
    k = int(np.argmax(counts))
    n = int(counts[k])
    if n < STORM_MIN:
        return None
    return n, int(ends[k]), int(ends[k + n - 1])


__all__ = ["ATTEMPT_COLUMNS", "FLOW_REQUEST_FIELD_TYPES", "GATEWAY_BOUND_SHARE", "STORM_MIN", "STORM_WINDOW_US",
           "attempt_rows", "attempts_table", "cluster_fields", "ended_counts", "flow_on", "gateway_on",
           "gateway_share", "gateway_waits_us", "request_columns", "request_fields", "summary", "timeout_storm"]
