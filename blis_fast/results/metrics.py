"""Summary metrics from the kernel's output tables (docs/semantics.md §9, §11).

All inputs are µs integers; means and percentiles are computed over µs values and
reported in ms.  Percentile = linear interpolation at rank (p/100)·(n−1) (numpy's
default), 0 for an empty set.  ITL samples arrive as a (value, count) log so that a
100K-request run does not materialize tens of millions of samples.
"""

from __future__ import annotations

import numpy as np

from kernels.schema import RequestState

REQ_COMPLETED, REQ_DROPPED = RequestState.COMPLETED, RequestState.DROPPED
REQ_QUEUED, REQ_RUNNING = RequestState.QUEUED, RequestState.RUNNING

PERCENTILES = (90, 95, 99)


def percentile_us(values: np.ndarray, p: float) -> float:
    """Linear-interpolated percentile of µs values (0.0 if empty)."""
    if values.size == 0:
        return 0.0
    return float(np.percentile(values, p))


def weighted_percentile_us(values: np.ndarray, counts: np.ndarray, p: float) -> float:
    """The same percentile as ``percentile_us(np.repeat(values, counts), p)`` without repeating."""
    total = int(counts.sum()) if counts.size else 0
    if total == 0:
        return 0.0
    order = np.argsort(values, kind="stable")
    v = values[order].astype(np.float64)
    cum = np.cumsum(counts[order])
    rank = (p / 100.0) * (total - 1)
    lo = int(np.floor(rank))
    hi = min(lo + 1, total - 1)
    # k-th smallest sample (0-based) = first value whose cumulative count exceeds k
    v_lo = v[np.searchsorted(cum, lo, side="right")]
    v_hi = v[np.searchsorted(cum, hi, side="right")]
    return float(v_lo + (v_hi - v_lo) * (rank - lo))


class ItlIndex:
    """Rebuilds the ITL samples of any set of requests from the kernel's step log and
    irregular-token log (kernels.schema.tables): a request's tokens inside a run of consecutive
    steps have the durations of those steps as samples (+ a2 in compat mode); the other
    non-first tokens are logged one by one; compat adds one sample per completed request."""

    def __init__(self, reqs: np.ndarray, inst: np.ndarray, step_log: np.ndarray, irr_log: np.ndarray, compat: bool):
        self.reqs = reqs
        self.compat = compat
        self.irr = irr_log
        self.a2 = np.trunc(inst["alpha2"]).astype(np.int64)
        s_inst = step_log["instance"]
        # steps grouped by instance, in time order within each: position = "flat" index
        self.order = np.argsort(s_inst, kind="stable")
        self.flat = np.empty(len(step_log), np.int64)
        self.flat[self.order] = np.arange(len(step_log))
        inst_sorted = s_inst[self.order]
        self.step_values = step_log["dt_us"][self.order] + (self.a2[inst_sorted] if compat else 0)

    def histogram(self, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values µs, counts) of all ITL samples of the requests where ``selected``."""
        reqs = self.reqs
        ids = np.flatnonzero(selected & (reqs["first_token_us"] >= 0))
        irr = self.irr[np.isin(self.irr["request"], ids)]
        starts = np.concatenate((reqs["run_start_step"][ids], irr["prev_run_start"]))
        ends = np.concatenate((reqs["last_token_step"][ids], irr["prev_run_end"]))
        n = len(self.step_values)
        diff = np.zeros(n + 1, np.int64)
        # a run covers the steps after its first one through its last (same instance)
        np.add.at(diff, self.flat[starts] + 1, 1)
        np.add.at(diff, self.flat[ends] + 1, -1)
        cover = np.cumsum(diff)[:n]
        keep = cover > 0
        values = [self.step_values[keep], irr["value_us"]]
        counts = [cover[keep], np.ones(len(irr), np.int64)]
        if self.compat:  # the reference's extra sample per completed request
            done = ids[reqs["state"][ids] == REQ_COMPLETED]
            values.append(reqs["last_step_us"][done] + self.a2[reqs["instance"][done]])
            counts.append(np.ones(len(done), np.int64))
        return np.concatenate(values), np.concatenate(counts)


def _stats_ms(prefix: str, values_us: np.ndarray, out: dict) -> None:
    out[f"{prefix}_mean_ms"] = float(values_us.mean()) / 1000.0 if values_us.size else 0.0
    for p in PERCENTILES:
        out[f"{prefix}_p{p}_ms"] = percentile_us(values_us, p) / 1000.0


def request_latencies(reqs: np.ndarray) -> dict[str, np.ndarray]:
    """Per-request µs arrays (int64; -1 where undefined): ttft, e2e, itl (mean, float), sched delay."""
    arrival = reqs["arrival_us"]
    has_first = reqs["first_token_us"] >= 0
    done = reqs["state"] == REQ_COMPLETED
    ttft = np.where(has_first, reqs["first_token_us"] - arrival, -1)
    e2e = np.where(done, ttft + reqs["itl_sum_us"], -1)
    sched = np.where(reqs["first_scheduled_us"] >= 0, reqs["first_scheduled_us"] - arrival, -1)
    return {"ttft_us": ttft, "e2e_us": e2e, "scheduling_delay_us": sched, "has_first": has_first, "done": done}


def summarize_group(name: str, reqs: np.ndarray, mask: np.ndarray, inst: np.ndarray, itl_value: np.ndarray,
                    itl_count: np.ndarray, compat: bool, horizon_us: int | None = None) -> dict:
    """The summary object of a set of requests (``mask``) served by ``inst`` rows.

    Field names and order follow the reference's metrics object; our extra fields follow.
    The duration is the end of the last step; in compat mode it is capped at the horizon
    (the reference reports min(clock, horizon)).
    """
    lat = request_latencies(reqs)
    state = reqs["state"]
    done = lat["done"] & mask
    queued = (state == REQ_QUEUED) & mask
    running = (state == REQ_RUNNING) & mask
    dropped = (state == REQ_DROPPED) & mask
    enqueued = done | queued | running  # reached an instance's queue and still counted there
    generated = reqs["generated"][mask]
    out_tokens = int(np.maximum(generated - 1, 0).sum()) if compat else int(generated.sum())
    duration_us = int(inst["last_step_end_us"].max()) if inst.size else 0
    if compat and horizon_us is not None:
        duration_us = min(duration_us, horizon_us)
    duration_s = duration_us / 1e6
    completed = int(done.sum())
    out: dict = {
        "instance_id": name,
        "completed_requests": completed,
        "still_queued": int(queued.sum()),
        "still_running": int(running.sum()),
        "injected_requests": int(enqueued.sum() + dropped.sum()),
        "total_input_tokens": int(reqs["prompt_len"][enqueued].sum()),
        "total_output_tokens": out_tokens,
        "vllm_estimated_duration_s": duration_s,
        "responses_per_sec": completed / duration_s if duration_s > 0 else 0.0,
        "tokens_per_sec": out_tokens / duration_s if duration_s > 0 else 0.0,
    }
    _stats_ms("e2e", lat["e2e_us"][done], out)
    _stats_ms("ttft", lat["ttft_us"][lat["has_first"] & mask], out)
    total = int(itl_count.sum())
    out["itl_mean_ms"] = float((itl_value * itl_count).sum()) / total / 1000.0 if total else 0.0
    for p in PERCENTILES:
        out[f"itl_p{p}_ms"] = weighted_percentile_us(itl_value, itl_count, p) / 1000.0
    sched = lat["scheduling_delay_us"][mask]
    out["scheduling_delay_p99_ms"] = percentile_us(sched[sched >= 0], 99) / 1000.0
    out["preemption_count"] = int(inst["preemptions"].sum())
    out["dropped_unservable"] = int(dropped.sum())
    # --- blis-fast extras
    query = int(inst["prefix_query_tokens"].sum())
    kv_total = int(inst["kv_total"].sum())
    out["kv_total_blocks"] = kv_total
    out["kv_peak_used_blocks"] = int(inst["kv_peak_allocated"].max()) if inst.size else 0
    out["kv_peak_utilization"] = float((inst["kv_peak_allocated"] / inst["kv_total"]).max()) if inst.size else 0.0
    out["prefix_cache_hit_rate"] = int(inst["prefix_hit_tokens"].sum()) / query if query else 0.0
    out["prefill_tokens_computed"] = int(inst["prefill_tokens"].sum())
    out["decode_tokens_computed"] = int(inst["decode_tokens"].sum())
    steps = int(inst["steps"].sum())
    out["steps"] = steps
    out["mean_batch_size"] = int(inst["sum_batch_len"].sum()) / steps if steps else 0.0
    out["mean_wait_queue_len"] = int(inst["sum_wq_len"].sum()) / steps if steps else 0.0
    out["wait_queue_peak"] = int(inst["wq_peak"].max()) if inst.size else 0
    out["batch_size_peak"] = int(inst["batch_peak"].max()) if inst.size else 0
    out["busy_fraction"] = int(inst["busy_us"].sum()) / (duration_us * len(inst)) if duration_us and len(inst) else 0.0
    return out
