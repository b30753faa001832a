"""Summary metrics from the kernel's output tables (docs/semantics.md §9, §11).

All inputs are µs integers; means and percentiles are computed over µs values and
reported in ms.  Percentile = linear interpolation at rank (p/100)·(n−1) (numpy's
default), 0 for an empty set.  ITL samples arrive as a (value, count) log so that a
100K-request run does not materialize tens of millions of samples.
"""

from __future__ import annotations

import functools

import numpy as np

from blis_fast_kernels.native import gather_words, group_steps, run_cover
from blis_fast_kernels.schema import RequestState

REQ_COMPLETED, REQ_DROPPED = RequestState.COMPLETED, RequestState.DROPPED
REQ_QUEUED, REQ_RUNNING = RequestState.QUEUED, RequestState.RUNNING

PERCENTILES = (90, 95, 99)


def percentile_us(values: np.ndarray, p: float) -> float:
    """Linear-interpolated percentile of µs values (0.0 if empty)."""
    return percentiles_us(values, (p,))[0]


def percentiles_us(values: np.ndarray, ps=PERCENTILES) -> list[float]:
    """``[float(np.percentile(values, p)) for p in ps]``, bit for bit, from one sort: numpy's
    percentile costs ~5x a sort of a 10K-sample array (its partition and set-up), and a
    batch evaluation takes about ten percentile sets per run."""
    if values.size == 0:
        return [0.0] * len(ps)
    return sorted_percentiles(np.sort(values), ps)


def sorted_percentiles(ordered: np.ndarray, ps) -> list[float]:
    """The percentiles ``ps`` of values sorted ascending (non-empty), as numpy's default
    ("linear") method computes them, operation for operation -- rank (n-1)·p/100, the two
    neighbouring order statistics a <= b, a + (b-a)·γ below γ = 0.5 and b - (b-a)·(1-γ)
    from it -- so the results equal ``np.percentile``'s exactly (tests/results)."""
    n = len(ordered)
    q = np.true_divide(np.asarray(ps, dtype=np.float64), 100)
    rank = (n - 1) * q
    lo = np.floor(rank)
    hi = lo + 1
    top = rank >= n - 1  # the last rank: both neighbours are the largest value
    lo[top] = -1
    hi[top] = -1
    lo_i, hi_i = lo.astype(np.intp), hi.astype(np.intp)
    return _lerp(ordered[lo_i], ordered[hi_i], rank - lo_i).tolist()


def _lerp(a: np.ndarray, b: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """numpy's quantile interpolation between order statistics a <= b (float64 result)."""
    diff = b - a
    out = np.add(a, diff * gamma)
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe")
    return out


def _sort_by_value(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` sorted, with ``counts`` in the same order.  Ties may fall either way: equal
    values are interchangeable.  Integer values whose range and count fit in 62 bits are
    packed with their position into one key and sorted as plain integers (several times
    faster than an argsort)."""
    n = len(values)
    if n and values.dtype.kind in "iu":
        lo = int(values.min())
        span = int(values.max()) - lo
        bits = max(n - 1, 1).bit_length()
        if span.bit_length() + bits <= 62:
            key = values.astype(np.int64)  # a copy, then in place: one extra array at a time
            key -= lo
            key <<= bits
            key |= np.arange(n, dtype=np.int64)
            key.sort()
            order = key & ((1 << bits) - 1)
            counts = counts[order]
            del order
            key >>= bits
            key += lo
            return key, counts
    order = np.argsort(values)
    return values[order], counts[order]


def value_order(values: np.ndarray) -> np.ndarray:
    """Positions of ``values`` in ascending order of value (ties either way), by
    ``_sort_by_value``'s packed sort when it applies (the positions ride as its counts)."""
    return _sort_by_value(values, np.arange(len(values), dtype=np.int64))[1]


def stable_order(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` for small non-negative integer keys (instance
    ids): as int16 they take numpy's radix sort."""
    if keys.size and keys.dtype.kind in "iu" and 0 <= int(keys.min()) and int(keys.max()) < 2**15:
        keys = keys.astype(np.int16)
    return np.argsort(keys, kind="stable")


def weighted_percentiles_us(values: np.ndarray, counts: np.ndarray, ps=PERCENTILES) -> list[float]:
    """``percentile_us(np.repeat(values, counts), p)`` for each p, without repeating
    (one sort of ``values`` for all of them)."""
    total = int(counts.sum()) if counts.size else 0
    if total == 0:
        return [0.0] * len(ps)
    v, c = _sort_by_value(values, counts)
    cum = np.cumsum(c)
    rank = (total - 1) * np.true_divide(np.asarray(ps, dtype=np.float64), 100)
    lo = np.floor(rank)
    hi = np.minimum(lo + 1, total - 1)
    # k-th smallest sample (0-based) = first value whose cumulative count exceeds k
    a = v[np.searchsorted(cum, lo.astype(np.int64), side="right")]
    b = v[np.searchsorted(cum, hi.astype(np.int64), side="right")]
    return _lerp(a, b, rank - lo).tolist()


def weighted_percentile_us(values: np.ndarray, counts: np.ndarray, p: float) -> float:
    """The same percentile as ``percentile_us(np.repeat(values, counts), p)`` without repeating."""
    return weighted_percentiles_us(values, counts, (p,))[0]


class ItlIndex:
    """Rebuilds the ITL samples of any set of requests from the kernel's step log and
    irregular-token log (blis_fast_kernels.schema.tables): a request's tokens inside a run of consecutive
    steps have the durations of those steps as samples (+ a2 in compat mode); the other
    non-first tokens are logged one by one; compat adds one sample per completed request.

    ``by_instance`` gives the samples of the cluster and of every instance from one pass
    (a request's runs lie on its own instance, so instance i's samples are the cluster's
    restricted to instance i's steps)."""

    def __init__(self, reqs: np.ndarray, inst: np.ndarray, step_log: np.ndarray, irr_log: np.ndarray, compat: bool):
        self.reqs = reqs
        self.compat = compat
        self.irr = irr_log
        self.a2 = np.trunc(inst["alpha2"]).astype(np.int64)
        s_inst = np.ascontiguousarray(step_log["instance"], dtype=np.int64)
        if len(s_inst) and not (0 <= int(s_inst.min()) and int(s_inst.max()) < len(inst)):
            raise ValueError("the step log names an instance the instance table does not have")
        # steps grouped by instance, in time order within each: position = "flat" index;
        # instance i's steps are flat[starts[i]:starts[i + 1]] (one compiled counting sort)
        self.flat, self.starts = group_steps(s_inst, len(inst))
        self.step_values = np.empty(len(step_log), np.int64)
        self.step_values[self.flat] = step_log["dt_us"]
        if compat:
            self.step_values += np.repeat(self.a2, np.diff(self.starts))

    def _cover(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Per flat step, how many of the runs (start, end] cover it (a run covers the steps
        after its first one through its last, all of one instance)."""
        return run_cover(self.flat, np.ascontiguousarray(starts, dtype=np.int64),
                         np.ascontiguousarray(ends, dtype=np.int64))

    def _selected(self, selected: np.ndarray, first_token_us: np.ndarray):
        """(ids of the selected requests with a first token, irregular records of those)."""
        chosen = selected & (first_token_us >= 0)
        ids = np.flatnonzero(chosen)
        irr = self.irr[chosen[self.irr["request"]]] if len(self.irr) else self.irr
        return ids, irr

    def histogram(self, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values µs, counts) of all ITL samples of the requests where ``selected``."""
        reqs = self.reqs
        ids, irr = self._selected(selected, reqs["first_token_us"])
        cover = self._cover(np.concatenate((reqs["run_start_step"][ids], irr["prev_run_start"])),
                            np.concatenate((reqs["last_token_step"][ids], irr["prev_run_end"])))
        keep = cover > 0
        values = [self.step_values[keep], irr["value_us"]]
        counts = [cover[keep], np.ones(len(irr), np.int64)]
        if self.compat:  # the reference's extra sample per completed request (none when N = 0)
            done = ids[(reqs["state"][ids] == REQ_COMPLETED) & (reqs["requested_output"][ids] > 0)]
            values.append(reqs["last_step_us"][done] + self.a2[reqs["instance"][done]])
            counts.append(np.ones(len(done), np.int64))
        return np.concatenate(values), np.concatenate(counts)

    def by_instance(self, selected: np.ndarray):
        """``(histogram(selected), of)`` where ``of(i)`` is
        ``histogram(selected & (instance == i))``, from one coverage pass."""
        reqs = self.reqs
        ids, irr = self._selected(selected, reqs["first_token_us"])
        cover = self._cover(np.concatenate((reqs["run_start_step"][ids], irr["prev_run_start"])),
                            np.concatenate((reqs["last_token_step"][ids], irr["prev_run_end"])))
        req_inst = reqs["instance"]
        irr_inst = req_inst[irr["request"]]
        irr_values = irr["value_us"]
        if self.compat:  # the reference's extra sample per completed request (none when N = 0)
            done = ids[(reqs["state"][ids] == REQ_COMPLETED) & (reqs["requested_output"][ids] > 0)]
            done_inst = req_inst[done]
            extra = reqs["last_step_us"][done] + self.a2[done_inst]

        def pack(lo, hi, irr_rows, extra_rows):
            c = cover[lo:hi]
            keep = c > 0
            values = [self.step_values[lo:hi][keep], irr_values[irr_rows]]
            counts = [c[keep], np.ones(len(values[1]), np.int64)]
            if self.compat:
                values.append(extra[extra_rows])
                counts.append(np.ones(len(values[2]), np.int64))
            return np.concatenate(values), np.concatenate(counts)

        def of(i: int):
            lo, hi = (int(self.starts[i]), int(self.starts[i + 1])) if i + 1 < len(self.starts) else (0, 0)
            return pack(lo, hi, irr_inst == i, (done_inst == i) if self.compat else None)

        everything = slice(None)
        return pack(0, len(cover), everything, everything), of


# The request fields a run's judge reads (``Result.evaluate``): copied out together, in one
# pass over the table, the first time any of them is read.
JUDGED_FIELDS = ("arrival_us", "first_token_us", "first_scheduled_us", "itl_sum_us", "state", "instance",
                 "generated", "output_len", "prompt_len", "preemptions", "cached_tokens", "run_start_step",
                 "last_token_step", "slo_class", "tenant")


class RequestColumns:
    """The request table read field by field: ``cols["arrival_us"]`` is that field copied
    out once into a contiguous, read-only array.  The table is a wide record array (~300
    bytes a request), so each ``reqs[field]`` pass reads a cache line per request; the
    ``JUDGED_FIELDS`` are therefore copied out all at once, by one compiled pass over the
    rows (``gather_words``), when the first of them is read.  Anything but a field name
    (rows, masks) reads the table itself; ``len`` and ``dtype`` are the table's."""

    def __init__(self, table: np.ndarray):
        self.table = table
        self.dtype = table.dtype
        self._fields: dict[str, np.ndarray] = {}
        self._gathered = False

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, key):
        if not isinstance(key, str):
            return self.table[key]
        col = self._fields.get(key)
        if col is None:
            if not self._gathered and key in JUDGED_FIELDS:
                self._gathered = True
                self._fields.update(gather_fields(self.table, JUDGED_FIELDS))
                col = self._fields.get(key)
            if col is None:
                col = self._fields[key] = np.ascontiguousarray(self.table[key])
                col.flags.writeable = False
        return col


@functools.lru_cache(maxsize=16)  # (a few table dtypes; every evaluation asks)
def _word_plan(dtype: np.dtype, names: tuple) -> tuple[np.ndarray, list] | None:
    """How ``gather_fields`` reads ``names`` of a record dtype: (the 8-byte words to copy,
    [(field, its word's position in those, its byte offset in the word, dtype)]); None if
    some field is missing or not a 4- or 8-byte field aligned to its size."""
    words: list[int] = []
    plan = []
    for name in names:
        if dtype.names is None or name not in dtype.names:
            return None
        dt, offset = dtype.fields[name][:2]
        if dt.itemsize not in (4, 8) or offset % dt.itemsize or dtype.itemsize % 8:
            return None
        w = offset // 8
        if w not in words:
            words.append(w)
        plan.append((name, words.index(w), offset % 8, dt))
    return np.array(words, np.int64), plan


def gather_fields(table: np.ndarray, names: tuple) -> dict[str, np.ndarray]:
    """{name: table[name] as a contiguous, read-only array} for the fields ``names`` of a
    1-D record table, copied in one pass over its rows (``gather_words``); an empty dict
    when the table's layout does not allow it (the caller then reads field by field)."""
    plan = _word_plan(table.dtype, names)
    if plan is None or table.ndim != 1 or not table.flags.c_contiguous or len(table) == 0:
        return {}
    words, fields = plan
    n = len(table)
    out = np.empty((len(words), n), np.uint64)
    gather_words(table.view(np.uint64).reshape(n, table.dtype.itemsize // 8), words, out)
    cols = {}
    for name, c, byte, dt in fields:
        if dt.itemsize == 8:
            col = out[c].view(dt)
        else:  # a 4-byte field: its half of the copied word (memory order, whatever the endianness)
            col = np.ascontiguousarray(out[c].view(np.uint32)[byte // 4::2]).view(dt)
        col.flags.writeable = False
        cols[name] = col
    return cols


def _stats_ms(prefix: str, values_us: np.ndarray, out: dict, ordered: bool = False) -> None:
    """Mean and ``PERCENTILES`` of µs samples as ``<prefix>_mean_ms``, ``<prefix>_p90_ms``...
    (``ordered``: the samples are sorted already)."""
    out[f"{prefix}_mean_ms"] = float(values_us.mean()) / 1000.0 if values_us.size else 0.0
    pcts = sorted_percentiles(values_us, PERCENTILES) if ordered and values_us.size else percentiles_us(values_us)
    for p, v in zip(PERCENTILES, pcts):
        out[f"{prefix}_p{p}_ms"] = v / 1000.0


def request_latencies(reqs: np.ndarray) -> dict[str, np.ndarray]:
    """Per-request µs arrays (int64; -1 where undefined): ttft, e2e, sched delay; and the
    masks has_first (a first token) and done (completed)."""
    arrival = reqs["arrival_us"]
    first = reqs["first_token_us"]
    has_first = first >= 0
    done = reqs["state"] == REQ_COMPLETED
    ttft = np.where(has_first, first - arrival, -1)
    e2e = np.where(done, ttft + reqs["itl_sum_us"], -1)
    scheduled = reqs["first_scheduled_us"]
    sched = np.where(scheduled >= 0, scheduled - arrival, -1)
    return {"ttft_us": ttft, "e2e_us": e2e, "scheduling_delay_us": sched, "has_first": has_first, "done": done}


def request_summary_columns(reqs: np.ndarray, lat: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The per-request columns ``summarize_group`` reads, as contiguous arrays (the request
    table is a wide record array: each field read is a strided pass over all of it)."""
    lat = request_latencies(reqs) if lat is None else lat
    return {
        "state": np.ascontiguousarray(reqs["state"]),
        "generated": np.ascontiguousarray(reqs["generated"]),
        "prompt_len": np.ascontiguousarray(reqs["prompt_len"]),
        **lat,
    }


def instance_clocks_us(inst: np.ndarray, reqs: np.ndarray, compat: bool, horizon_us: int | None) -> np.ndarray:
    """Each instance's end-of-run clock (µs), the basis of the duration metrics.

    Normal mode: the end of its last step.  Compat mode: the reference's clock -- the time
    of the last event the instance processed, at most the horizon: step boundaries (a step
    that started by the horizon but ends after it counts by its start) and its requests'
    arrivals and queue entries (docs/semantics.md §11)."""
    end = inst["last_step_end_us"].astype(np.int64)
    if not compat:
        return end
    h = np.iinfo(np.int64).max if horizon_us is None else int(horizon_us)
    clocks = np.where(end <= h, end, end - inst["last_dt_us"])
    clocks = np.where(inst["steps"] > 0, clocks, 0)
    at = reqs["instance"]
    queued, routed = reqs["queued_us"], reqs["routed_us"]
    t = np.where((queued >= 0) & (queued <= h), queued, np.where((routed >= 0) & (routed <= h), routed, -1))
    seen = (at >= 0) & (t >= 0)
    np.maximum.at(clocks, at[seen], t[seen])
    return clocks


def summarize_group(name: str, cols: dict[str, np.ndarray], rows: np.ndarray | None, inst: np.ndarray,
                    itl_value: np.ndarray, itl_count: np.ndarray, compat: bool, duration_us: int,
                    window_rates: tuple[int, np.ndarray] | None = None,
                    ordered: dict[str, np.ndarray] | None = None) -> dict:
    """The summary object of a set of requests served by ``inst`` rows.

    ``cols`` are ``request_summary_columns``; ``rows`` the group's request ids in increasing
    order (None: every request).  Field names and order follow the reference's metrics
    object; our extra fields follow.  ``duration_us``: the group's end-of-run clock (the
    latest of its instances' ``instance_clocks_us``).  The per-second rates divide by the
    duration; with a measurement window (``results.window``) ``window_rates`` = (its span
    µs, the ids of the group's requests whose last token falls inside it), and the rates
    count those requests over the span: the throughput during the window.  ``ordered``
    (optional): the group's E2E samples (completed requests) and TTFT samples (requests
    with a first token), sorted, as {"e2e": ..., "ttft": ...} -- when the caller has them.
    """
    def col(key):
        return cols[key] if rows is None else cols[key][rows]

    state = col("state")
    done = state == REQ_COMPLETED
    queued = state == REQ_QUEUED
    running = state == REQ_RUNNING
    dropped = state == REQ_DROPPED
    # (P/D: prefilled, then dropped at the decode side for want of blocks -- it reached an instance too)
    at_decode = int((state == RequestState.DROPPED_AT_DECODE).sum())
    enqueued = done | queued | running  # reached an instance's queue and still counted there
    generated = col("generated")
    out_tokens = int(np.maximum(generated - 1, 0).sum()) if compat else int(generated.sum())
    duration_s = duration_us / 1e6
    completed = int(done.sum())
    rate_s, rate_done, rate_tokens = duration_s, completed, out_tokens
    if window_rates is not None:
        span_us, finishing = window_rates
        rate_s, rate_done = span_us / 1e6, len(finishing)
        gen = cols["generated"][finishing]
        rate_tokens = int(np.maximum(gen - 1, 0).sum()) if compat else int(gen.sum())
    n_dropped = int(dropped.sum())
    out: dict = {
        "instance_id": name,
        "completed_requests": completed,
        "still_queued": int(queued.sum()),
        "still_running": int(running.sum()),
        "injected_requests": int(enqueued.sum()) + n_dropped + at_decode,
        "total_input_tokens": int(col("prompt_len")[enqueued].sum()),
        "total_output_tokens": out_tokens,
        "vllm_estimated_duration_s": duration_s,
        "responses_per_sec": rate_done / rate_s if rate_s > 0 else 0.0,
        "tokens_per_sec": rate_tokens / rate_s if rate_s > 0 else 0.0,
    }
    if ordered is not None:
        _stats_ms("e2e", ordered["e2e"], out, ordered=True)
        _stats_ms("ttft", ordered["ttft"], out, ordered=True)
    else:
        _stats_ms("e2e", col("e2e_us")[done], out)
        _stats_ms("ttft", col("ttft_us")[col("has_first")], out)
    total = int(itl_count.sum())
    out["itl_mean_ms"] = float((itl_value * itl_count).sum()) / total / 1000.0 if total else 0.0
    for p, v in zip(PERCENTILES, weighted_percentiles_us(itl_value, itl_count)):
        out[f"itl_p{p}_ms"] = v / 1000.0
    sched = col("scheduling_delay_us")
    out["scheduling_delay_p99_ms"] = percentile_us(sched[sched >= 0], 99) / 1000.0
    out["preemption_count"] = int(inst["preemptions"].sum())
    out["dropped_unservable"] = n_dropped
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
    # step occupancy: the fraction of the time an engine step runs -- near 1 whenever a
    # request is in flight, however small the batch, so it shows no headroom
    out["busy_fraction"] = int(inst["busy_us"].sum()) / (duration_us * len(inst)) if duration_us and len(inst) else 0.0
    out.update(headroom(inst))
    return out


HEADROOM_METRICS = ("token_budget_occupancy", "batch_slot_occupancy", "kv_occupancy_mean")


def headroom(inst: np.ndarray) -> dict[str, float]:
    """How full the engine steps of ``inst`` rows were, over all their steps (0 without
    steps), from the kernel's per-instance step counters:

    - ``token_budget_occupancy`` = Σ tokens scheduled (prefill, cache hits excluded, and
      decode) / Σ max_num_batched_tokens;
    - ``batch_slot_occupancy`` = Σ running requests / Σ max_num_seqs;
    - ``kv_occupancy_mean`` = Σ allocated KV blocks (once the batch is formed) / Σ total
      KV blocks.

    Each sum runs over the steps, so with equal limits on every instance each is the mean
    over steps of that step's ratio.  Unlike ``busy_fraction`` these fall with the load:
    they are the headroom a planner reads."""
    steps = inst["steps"].astype(np.int64)
    if not inst.size or int(steps.sum()) == 0:
        return dict.fromkeys(HEADROOM_METRICS, 0.0)
    tokens = int(inst["prefill_tokens"].sum()) + int(inst["decode_tokens"].sum())
    return {
        "token_budget_occupancy": tokens / int((steps * inst["max_batched_tokens"]).sum()),
        "batch_slot_occupancy": int(inst["sum_batch_len"].sum()) / int((steps * inst["max_num_seqs"]).sum()),
        "kv_occupancy_mean": int(inst["sum_kv_allocated"].sum()) / int((steps * inst["kv_total"]).sum()),
    }
