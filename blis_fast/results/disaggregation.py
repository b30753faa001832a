"""A P/D run's results (docs/semantics.md "Prefill/decode disaggregation"): per request, where
it was prefilled and decoded and where its time to first token went; for the run, the
``disaggregation`` summary group.  Read from the full State: the requests' rows, their
prefill legs' rows (request r's leg is row r + pd_base) and ``pd_reqs``.

Everything here appears only in runs with a disaggregated deployment (``is_disaggregated``):
a monolithic run's files are unchanged.

TTFT decomposition of a disaggregated request (each a µs span, together its TTFT when the
decode side emits the first token):

    routing         arrival -> its prefill leg enters the prefill instance's queue
                    (admission and routing latency, the prefill instance's queueing overhead)
    prefill_queue   -> the prefill leg is first scheduled
    prefill_compute -> the step that completes its prompt ends
    transfer_wait   -> its blocks are reserved on the decode instance (the transfer starts)
    transfer        -> its KV has arrived
    decode_queue    -> it is scheduled on the decode instance
    first_decode_step -> its first token
"""

from __future__ import annotations

import numpy as np

from blis_fast_kernels.schema import PoolRole, RequestState

from blis_fast.config.disaggregation import any_disaggregated

from .metrics import percentile_us

TTFT_PARTS = ("routing", "prefill_queue", "prefill_compute", "transfer_wait", "transfer", "decode_queue",
              "first_decode_step")


def is_disaggregated(setup) -> bool:
    """True if a deployment of the run has prefill and decode pools."""
    return any_disaggregated(setup.deployments)


def pd_columns(result) -> dict[str, np.ndarray]:
    """Per request (the requests' rows): ``disaggregated`` (bool), ``prefill_instance`` and
    ``decode_instance`` (-1 when not disaggregated), the times ``prefill_done_us``,
    ``transfer_start_us``, ``transfer_end_us``, ``decode_scheduled_us`` (-1 when not
    reached), ``charged_tokens``, and each TTFT part's span ``<part>_us`` (-1 when not
    reached)."""
    st = result.full_state
    n = int(st.settings[0]["pd_base"])
    reqs, legs, pd = st.reqs[:n], st.reqs[n:2 * n], st.pd_reqs[:n]
    dis = pd["prefill_instance"] >= 0
    out: dict[str, np.ndarray] = {
        "disaggregated": dis,
        "prefill_instance": np.where(dis, pd["prefill_instance"], -1),
        "decode_instance": np.where(dis & (pd["transfer_start_us"] >= 0), reqs["instance"], -1),
        "prefill_done_us": pd["prefill_done_us"].copy(),
        "transfer_start_us": pd["transfer_start_us"].copy(),
        "transfer_end_us": pd["transfer_end_us"].copy(),
        "decode_scheduled_us": np.where(dis & (pd["transfer_end_us"] >= 0), reqs["first_scheduled_us"], -1),
        "charged_tokens": np.where(pd["transfer_start_us"] >= 0, pd["charged_tokens"], 0),
    }
    marks = (reqs["arrival_us"], legs["queued_us"], legs["first_scheduled_us"], pd["prefill_done_us"],
             pd["transfer_start_us"], pd["transfer_end_us"], out["decode_scheduled_us"],
             np.where(pd["transfer_end_us"] >= 0, reqs["first_token_us"], -1))
    for part, a, b in zip(TTFT_PARTS, marks, marks[1:]):
        out[f"{part}_us"] = np.where(dis & (a >= 0) & (b >= 0), b - a, -1)
    return out


# table types of the per-request P/D fields (``request_fields``; the instances are names)
PD_REQUEST_FIELD_TYPES = {"disaggregated": "bool", **{f"{k}_s": "float64" for k in ("prefill_done", "transfer_start",
                                                                                   "transfer_end", "decode_scheduled")},
                          **{f"{part}_ms": "float64" for part in TTFT_PARTS}}


def request_fields(result, sel: np.ndarray, missing=None) -> dict[str, list]:
    """The per-request P/D fields of rows ``sel`` (results JSON records and tables):
    ``disaggregated``, ``prefill_instance``, ``decode_instance``, ``prefill_done_s``,
    ``transfer_start_s``, ``transfer_end_s``, ``decode_scheduled_s`` and the TTFT parts
    ``<part>_ms``; null (``missing``) where they do not apply."""
    c = pd_columns(result)

    def name(key):
        return [f"instance_{k}" if k >= 0 else None for k in c[key][sel].tolist()]

    def scaled(key, scale):
        v = c[key][sel]
        return [x if ok else missing for x, ok in zip((v / scale).tolist(), (v >= 0).tolist())]

    out = {"disaggregated": c["disaggregated"][sel].tolist(), "prefill_instance": name("prefill_instance"),
           "decode_instance": name("decode_instance")}
    for key in ("prefill_done", "transfer_start", "transfer_end", "decode_scheduled"):
        out[f"{key}_s"] = scaled(f"{key}_us", 1e6)
    for part in TTFT_PARTS:
        out[f"{part}_ms"] = scaled(f"{part}_us", 1000.0)
    return out


def _stats(prefix: str, values_us: np.ndarray, out: dict) -> None:
    out[f"{prefix}_mean_ms"] = float(values_us.mean()) / 1000.0 if values_us.size else 0.0
    out[f"{prefix}_p99_ms"] = percentile_us(values_us, 99) / 1000.0 if values_us.size else 0.0


def summary(result) -> dict:
    """The ``disaggregation`` summary group: how many requests were disaggregated, their
    transfers (time, wait for blocks, bytes, the transfer queue's mean and peak depth, the
    mean transfers in flight, the link peak), drops at the decode side, the mean TTFT
    parts, and each pool's use."""
    st = result.full_state
    n = int(st.settings[0]["pd_base"])
    c = pd_columns(result)
    reqs, pdi, pd = st.reqs[:n], st.pd_inst, st.pd_reqs[:n]
    pd_model = st.pd_models["enabled"][reqs["model"]] != 0
    routed = pd_model & (reqs["routed_us"] >= 0)
    dis = c["disaggregated"]
    started = pd["transfer_start_us"] >= 0
    ended = pd["transfer_end_us"] >= 0
    waited = pd["wait_start_us"] >= 0
    out: dict = {
        "requests_routed": int(routed.sum()),
        "requests_disaggregated": int(dis.sum()),
        "disaggregated_fraction": float(dis.sum() / routed.sum()) if routed.any() else 0.0,
        "transfers_completed": int(ended.sum()),
        "transfers_in_flight": int((started & ~ended).sum()),
        "transfers_waiting": int((reqs["state"] == RequestState.TRANSFER_WAIT).sum()),
        "transfers_waited": int(waited.sum()),
        "dropped_at_decode": int((reqs["state"] == RequestState.DROPPED_AT_DECODE).sum()),
        "transfer_queue_peak": int(pdi["xq_peak"].max()) if len(pdi) else 0,
        "link_transfers_peak": int(pdi["link_peak"].max()) if len(pdi) else 0,
        "bytes_transferred": _bytes_transferred(result, c["charged_tokens"], reqs["model"]),
    }
    _stats("transfer", (pd["transfer_end_us"] - pd["transfer_start_us"])[ended], out)
    _stats("transfer_wait", (pd["transfer_start_us"] - pd["prefill_done_us"])[started], out)
    # time averages by Little's law: Σ of the spans / the run's span
    clock = max(int(st.loop[0]["clock_us"]), 1)
    waited_until = np.where(pd["transfer_start_us"] >= 0, pd["transfer_start_us"], clock)
    # (per decode instance, as the peak: the deepest one queue was)
    n_decode = max(int(np.isin(pdi["role"], (PoolRole.DECODE, PoolRole.BOTH)).sum()), 1)
    out["transfer_queue_mean"] = float(np.where(waited, waited_until - pd["wait_start_us"], 0).sum() / clock / n_decode)
    moving_until = np.where(ended, pd["transfer_end_us"], clock)
    out["transfers_in_flight_mean"] = float(np.where(started, moving_until - pd["transfer_start_us"], 0).sum() / clock)
    for part in TTFT_PARTS:
        v = c[f"{part}_us"]
        v = v[v >= 0]
        out[f"ttft_{part}_mean_ms"] = float(v.mean()) / 1000.0 if v.size else 0.0
    out["pools"] = pool_summaries(result)
    return out


def _bytes_transferred(result, charged: np.ndarray, model: np.ndarray) -> int:
    """KV bytes the transfers moved (all TP ranks)."""
    served = result.setup.served_models
    per_token = np.zeros(len(served), np.float64)
    for d in result.setup.deployments:
        per_token[served.index(d.served_model_name)] = d.model.kv_bytes_per_token
    return int(round(float((charged * per_token[model]).sum())))


def pool_summaries(result) -> dict[str, dict]:
    """{"<deployment>/<role>": its instances, busy fraction, tokens (and per second of the
    run), prefill legs, transfers received and KV peak} for every pool of the
    disaggregated deployments."""
    st = result.full_state
    inst = st.inst
    clock = max(int(st.loop[0]["clock_us"]), 1)
    out: dict[str, dict] = {}
    for d in result.setup.deployments:
        if d.pd is None:
            continue
        for p in d.pools:
            rows = inst[p.first_instance:p.first_instance + p.rows]
            pd_rows = st.pd_inst[p.first_instance:p.first_instance + p.rows]
            kv = rows["kv_total"].sum()
            out[f"{d.name}/{p.role}"] = {
                "role": p.role, "hardware": p.hardware.name, "tp": p.engine.tp, "num_instances": p.instances,
                "busy_fraction": float(rows["busy_us"].sum() / (clock * len(rows))),
                "prefill_tokens": int(rows["prefill_tokens"].sum()),
                "decode_tokens": int(rows["decode_tokens"].sum()),
                "prefill_tokens_per_s": float(rows["prefill_tokens"].sum() / (clock / 1e6)),
                "decode_tokens_per_s": float(rows["decode_tokens"].sum() / (clock / 1e6)),
                "prefill_legs": int(pd_rows["pd_prefills"].sum()),
                "transfers_received": int(pd_rows["pd_transfers_in"].sum()),
                "kv_peak_utilization": float(rows["kv_peak_allocated"].sum() / kv) if kv else 0.0,
            }
    return out


__all__ = ["PD_REQUEST_FIELD_TYPES", "TTFT_PARTS", "is_disaggregated", "pd_columns", "pool_summaries", "request_fields", "summary"]
