"""Results of a run with an autoscaler (docs/autoscaling.md; kernels/engine/autoscale.py):
what each pool held and cost, what its autoscaler decided, and when it scaled badly.

Everything is derived from the kernel's two logs and the pools' counters (State):
the lifecycle log (one row per lifecycle change of an instance row: time, instance, the
state entered; an autoscaled pool's initial instances start ACTIVE at 0 without a row, its
other rows OFF), the tick log (one row per tick: time, pool, reason, current, ready, wish,
target, signal) and ``scale_pools`` (scale_ups, scale_downs, redirected, lost_tokens).

Definitions (per pool of the fleet -- a deployment's instances, or each prefill/decode/both
pool of a disaggregated one -- named ``<deployment>`` for a single pool, else
``<deployment>.<role>``; times in seconds of simulated time):

- **held** instances: those provisioning, loading, warming, active or draining (they hold
  their GPUs); **current**: provisioning, loading, warming or active (the count the
  autoscaler steers, not draining); **ready**: warming or active (they take requests).
- **billing**: an instance is billed from the start of its provisioning to its termination;
  the initial instances from 0; those still held until the run's end (``billed_s``: the
  last event's time, ``LOOP_DT.clock_us``).  ``gpu_hours`` = held instance-hours x the
  pool's GPUs per instance (TP); ``cost`` = gpu_hours x ``cost_per_gpu_hour``.  A pool
  without an autoscaler is billed too, its instances for the whole run, at its GPU's
  default price (``config.autoscale.DEFAULT_COST_PER_GPU_HOUR``), so that a run with an
  autoscaler compares with one without; a GPU without a default price has ``cost`` null,
  and so has the run's.
- ``mean_instances``: held instances, time-weighted over [0, billed_s]; ``peak_instances``:
  the most held at once (after all changes at one instant); ``time_at_max_s``: time with
  ``current`` = max_instances.
- ``scale_events``: ticks that decided a change (target != current; it acts a metrics delay
  later); ``ticks``: every tick.
- ``scale_oscillations``: pairs of consecutive scale events of one pool in opposite
  directions (an up then a down, or a down then an up) at most W apart, W = the pool's
  stabilization_down_s, or its interval_s when that is longer (with no window, a reversal on
  the next tick is the fastest flap there is).
- ``under_provisioned_s``: time with ``current`` = max_instances inside a pool's *missed*
  windows: the run is cut into windows of the pool's interval_s ([0, I), [I, 2I), ...); a
  window is missed when fewer than UNDER_PROVISIONED_ATTAINMENT of the requests that arrived
  in it and were served by the pool (their last instance is the pool's, or in a P/D run
  they were prefilled there) met their SLO -- the
  workload's SLO targets when some class sets one, else a TTFT within the run's TTFT p90
  (nearest rank over every request with a first token); a request without a first token
  misses.
- ``over_provisioned_s``: time (within [0, billed_s]) with ``current`` > min_instances while
  the pool's requests in the system (arrived, last token not yet out; a prefill pool's:
  prefill not yet done) were fewer than its ready instances: at least one ready instance
  had nothing to do, whatever the routing.
- ``scaling_lag`` (``--summarize-trace``): requests served by a pool that arrived while some
  of its instances were provisioning or loading (capacity decided but not yet serving).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from blis_fast_kernels.schema import LIFE_STATE_NAMES, SCALE_REASON_NAMES, LifeState, RequestState

from blis_fast.config.autoscale import DEFAULT_COST_PER_GPU_HOUR

from .disaggregation import is_disaggregated
from .slo import has_targets

UNDER_PROVISIONED_ATTAINMENT = 0.9  # a window whose requests met their SLO less often than this is missed
_N_STATES = len(LIFE_STATE_NAMES)
_US_PER_HOUR = 3600e6


def has_autoscaler(setup) -> bool:
    """True if some pool of the run has an autoscaler."""
    return any(p.autoscale is not None for p in setup.pools)


@dataclass(frozen=True)
class PoolTimeline:
    """One pool's lifecycle counts over the run: ``counts[k, s]`` instances in LifeState s
    from ``times[k]`` (µs; ``times[0]`` = 0) until ``times[k + 1]`` (the last until ``end_us``)."""

    name: str
    deployment: str
    role: str
    index: int  # its index in the fleet (INSTANCE_DT.pool, State.scale_pools)
    first: int  # its instance rows: first .. first + rows - 1
    rows: int
    initial: int
    min_instances: int
    max_instances: int
    gpus_per_instance: int
    cost_per_gpu_hour: float | None
    autoscale: object | None  # config.autoscale.ResolvedAutoscale, None without an autoscaler
    times: np.ndarray
    counts: np.ndarray
    end_us: int

    def count(self, lo: int, hi: int) -> np.ndarray:
        """Instances in LifeStates lo..hi, per interval."""
        return self.counts[:, lo:hi + 1].sum(axis=1)

    @property
    def held(self) -> np.ndarray:
        return self.count(LifeState.PROVISIONING, LifeState.DRAINING)

    @property
    def current(self) -> np.ndarray:
        return self.count(LifeState.PROVISIONING, LifeState.ACTIVE)

    @property
    def ready(self) -> np.ndarray:
        return self.count(LifeState.WARMING, LifeState.ACTIVE)

    @property
    def durations(self) -> np.ndarray:
        """µs of each interval."""
        return np.diff(np.append(self.times, self.end_us))

    def time_us(self, where: np.ndarray) -> int:
        """µs spent in the intervals where ``where``."""
        return int(self.durations[where].sum())

    def time_before(self, where: np.ndarray, t_us: np.ndarray) -> np.ndarray:
        """µs spent in the intervals where ``where`` before each time of ``t_us`` (<= end_us)."""
        spent = np.r_[0, np.cumsum(np.where(where, self.durations, 0))]
        k = self.at(t_us)
        return spent[k] + np.where(where[k], t_us - self.times[k], 0)

    def at(self, t_us: np.ndarray) -> np.ndarray:
        """The interval index at each time of ``t_us`` (after every change at or before it)."""
        return np.searchsorted(self.times, t_us, side="right") - 1


def pool_name(deployment, pool) -> str:
    """``<deployment>`` for a deployment of one pool, else ``<deployment>.<role>``."""
    return deployment.name if len(deployment.pools) == 1 else f"{deployment.name}.{pool.role}"


def _price(pool) -> float | None:
    """A pool's cost per GPU-hour: its autoscaler's, else its GPU's default (None: none)."""
    if pool.autoscale is not None:
        return float(pool.autoscale.cost_per_gpu_hour)
    return DEFAULT_COST_PER_GPU_HOUR.get(pool.hardware.name)


def _state_counts(initial_states: np.ndarray, instances: np.ndarray, entered: np.ndarray) -> np.ndarray:
    """int64 [len(entered) + 1, states]: the pool's instances per LifeState at the start and
    after each lifecycle change (``instances[j]`` enters ``entered[j]``, rows counted from
    the pool's first)."""
    order = np.argsort(instances, kind="stable")
    by_row, new = instances[order], entered[order]
    opens = np.r_[True, by_row[1:] != by_row[:-1]] if by_row.size else np.zeros(0, bool)
    prev_sorted = np.where(opens, initial_states[by_row], np.r_[0, new[:-1]] if new.size else new)
    prev = np.empty_like(prev_sorted)
    prev[order] = prev_sorted
    states = np.arange(_N_STATES)
    delta = (entered[:, None] == states).astype(np.int64) - (prev[:, None] == states)
    start = np.bincount(initial_states, minlength=_N_STATES).astype(np.int64)
    return np.vstack([start, start + np.cumsum(delta, axis=0)])


def timelines(result) -> list[PoolTimeline]:
    """Every pool's PoolTimeline, in fleet order."""
    st = result.full_state
    log = st.life_log[: int(st.loop[0]["life_records"])]
    end_us = int(st.loop[0]["clock_us"])
    out = []
    for dep in result.setup.deployments:
        for pool in dep.pools:
            first, rows = pool.first_instance, pool.rows
            mine = (log["instance"] >= first) & (log["instance"] < first + rows)
            initial = np.full(rows, LifeState.OFF, np.int64)
            initial[: pool.instances] = LifeState.ACTIVE
            counts = _state_counts(initial, log["instance"][mine].astype(np.int64) - first,
                                   log["state"][mine].astype(np.int64))
            times = np.r_[0, log["time_us"][mine]].astype(np.int64)
            # the counts after every change at one instant (a change at 0 replaces the start)
            last = np.r_[times[1:] != times[:-1], True]
            times, counts = times[last], counts[last]
            a = pool.autoscale
            out.append(PoolTimeline(
                name=pool_name(dep, pool), deployment=dep.name, role=pool.role, index=len(out), first=first,
                rows=rows, initial=pool.instances,
                min_instances=pool.instances if a is None else a.min_instances,
                max_instances=pool.instances if a is None else a.max_instances,
                gpus_per_instance=int(pool.engine.tp), cost_per_gpu_hour=_price(pool), autoscale=a,
                times=times, counts=counts, end_us=end_us))
    return out


def gpu_hours(tl: PoolTimeline) -> float:
    """The pool's billed GPU-hours (module docstring)."""
    return float((tl.held * tl.durations).sum()) * tl.gpus_per_instance / _US_PER_HOUR


def billing(result) -> tuple[float, float | None]:
    """(the run's GPU-hours, its cost -- None when a pool's GPU has no price)."""
    hours, cost = 0.0, 0.0
    for tl in timelines(result):
        h = gpu_hours(tl)
        hours += h
        cost = None if cost is None or tl.cost_per_gpu_hour is None else cost + h * tl.cost_per_gpu_hour
    return hours, cost


def tick_log(result) -> np.ndarray:
    """The autoscaler's tick log (SCALE_LOG_DT rows, in time order)."""
    st = result.full_state
    return st.scale_log[: int(st.loop[0]["scale_records"])]


def scale_oscillations(ticks: np.ndarray, tl: PoolTimeline) -> int:
    """Reversals of pool ``tl``'s scale events within its window (module docstring)."""
    if tl.autoscale is None:
        return 0
    ev = ticks[(ticks["pool"] == tl.index) & (ticks["target"] != ticks["current"])]
    direction = np.sign(ev["target"] - ev["current"])
    window = max(tl.autoscale.stabilization_down_us, tl.autoscale.interval_us)
    flips = (direction[1:] != direction[:-1]) & (np.diff(ev["time_us"]) <= window)
    return int(flips.sum())


def request_met(result) -> np.ndarray:
    """bool per request: it met its SLO (some class sets targets) or, without targets, had
    its first token within the run's TTFT p90 (nearest rank)."""
    if any(has_targets(t) for t in (result.workload.slo_targets or {}).values()):
        return result.outcomes["met"]
    lat = result.latencies
    ttft = lat["ttft_us"]
    firsts = np.sort(ttft[lat["has_first"]])
    if firsts.size == 0:
        return np.zeros(len(ttft), bool)
    p90 = firsts[int(np.ceil(0.9 * firsts.size)) - 1]
    return lat["has_first"] & (ttft <= p90)


def _pool_requests(result, tl: PoolTimeline) -> tuple[np.ndarray, np.ndarray]:
    """(rows of the requests served by the pool, when each left it, µs): those whose last
    instance is one of its rows, until their last token (the run's end if they did not
    complete), and in a P/D run those prefilled there and decoded elsewhere, until their
    prefill was done (the run's end if it was not)."""
    reqs = result.reqs
    inst = reqs["instance"]
    mine = (inst >= tl.first) & (inst < tl.first + tl.rows)
    done = reqs["state"] == RequestState.COMPLETED
    leave = np.where(done, reqs["last_token_us"], tl.end_us)
    if is_disaggregated(result.setup):
        pd = result.full_state.pd_reqs[: len(inst)]
        prefilled = (pd["prefill_instance"] >= tl.first) & (pd["prefill_instance"] < tl.first + tl.rows) & ~mine
        leave = np.where(prefilled, np.where(pd["prefill_done_us"] >= 0, pd["prefill_done_us"], tl.end_us), leave)
        mine |= prefilled
    rows = np.flatnonzero(mine)
    return rows, leave[rows]


def under_provisioned_us(result, tl: PoolTimeline, met: np.ndarray) -> int:
    """µs at max_instances inside the pool's missed windows (module docstring)."""
    if tl.autoscale is None or tl.end_us <= 0:
        return 0
    at_max = tl.current == tl.max_instances
    if not at_max.any():
        return 0
    width = tl.autoscale.interval_us
    rows, _ = _pool_requests(result, tl)
    window = result.reqs["arrival_us"][rows] // width
    n = int(tl.end_us // width) + 1
    arrived = np.bincount(window, minlength=n)[:n]
    kept = np.bincount(window, weights=met[rows], minlength=n)[:n]
    missed = np.flatnonzero((arrived > 0) & (kept < UNDER_PROVISIONED_ATTAINMENT * arrived))
    lo = missed * width
    hi = np.minimum(lo + width, tl.end_us)
    return int((tl.time_before(at_max, hi) - tl.time_before(at_max, lo)).sum())


def over_provisioned_us(result, tl: PoolTimeline) -> int:
    """µs above min_instances with fewer of the pool's requests in the system than ready
    instances (module docstring)."""
    if tl.autoscale is None:
        return 0
    rows, leave = _pool_requests(result, tl)
    arrive = np.sort(result.reqs["arrival_us"][rows])
    leave = np.sort(leave)
    # breakpoints: the timeline's changes and every arrival and departure (a repeated one makes
    # an empty interval, which counts nothing: sorted, not deduplicated -- np.unique hashes, slowly)
    cuts = np.sort(np.concatenate([tl.times, arrive, leave, [tl.end_us]]))
    cuts = cuts[(cuts >= 0) & (cuts <= tl.end_us)]
    starts, lengths = cuts[:-1], np.diff(cuts)
    in_system = np.searchsorted(arrive, starts, side="right") - np.searchsorted(leave, starts, side="right")
    k = tl.at(starts)
    over = (tl.current[k] > tl.min_instances) & (in_system < tl.ready[k])
    return int(lengths[over].sum())


def scaling_lag(result) -> list[dict]:
    """Per autoscaled pool with such requests: the requests it served that arrived while
    some of its instances were provisioning or loading (``requests``, ``missed``,
    ``ttft_mean_ms`` of those with a first token, ``other_ttft_mean_ms`` of its other
    requests, ``pending_s``: the time any instance was pending)."""
    met = request_met(result)
    lat = result.latencies
    out = []
    for tl in timelines(result):
        if tl.autoscale is None:
            continue
        pending = tl.count(LifeState.PROVISIONING, LifeState.LOADING) > 0
        rows, _ = _pool_requests(result, tl)
        arrival = result.reqs["arrival_us"][rows]
        during = pending[tl.at(arrival)] if rows.size else np.zeros(0, bool)
        if not during.any():
            continue

        def ttft_mean(sel):
            r = rows[sel & lat["has_first"][rows]]
            return float(lat["ttft_us"][r].mean()) / 1e3 if r.size else 0.0
        out.append({"pool": tl.name, "requests": int(during.sum()), "missed": int((~met[rows[during]]).sum()),
                    "ttft_mean_ms": ttft_mean(during), "other_ttft_mean_ms": ttft_mean(~during),
                    "pending_s": tl.time_us(pending) / 1e6})
    return out


def summary(result) -> dict:
    """The ``autoscale`` summary group (module docstring: definitions)."""
    st = result.full_state
    ticks = tick_log(result)
    met = request_met(result)
    pools = {}
    for tl in timelines(result):
        sp = st.scale_pools[tl.index]
        hours = gpu_hours(tl)
        mine = ticks[ticks["pool"] == tl.index]
        pools[tl.name] = {
            "deployment": tl.deployment, "role": tl.role, "autoscaled": tl.autoscale is not None,
            "initial_instances": tl.initial, "min_instances": tl.min_instances, "max_instances": tl.max_instances,
            "mean_instances": float((tl.held * tl.durations).sum()) / tl.end_us if tl.end_us > 0 else float(tl.initial),
            "peak_instances": int(tl.held.max()),
            "time_at_max_s": tl.time_us(tl.current == tl.max_instances) / 1e6,
            "gpus_per_instance": tl.gpus_per_instance, "gpu_hours": hours,
            "cost_per_gpu_hour": tl.cost_per_gpu_hour,
            "cost": None if tl.cost_per_gpu_hour is None else hours * tl.cost_per_gpu_hour,
            "ticks": int(len(mine)), "scale_events": int((mine["target"] != mine["current"]).sum()),
            "scale_ups": int(sp["scale_ups"]), "scale_downs": int(sp["scale_downs"]),
            "redirected": int(sp["redirected"]), "lost_tokens": int(sp["lost_tokens"]),
            "scale_oscillations": scale_oscillations(ticks, tl),
            "under_provisioned_s": under_provisioned_us(result, tl, met) / 1e6,
            "over_provisioned_s": over_provisioned_us(result, tl) / 1e6,
        }
    groups = list(pools.values())
    costs = [g["cost"] for g in groups]
    out = {key: sum(g[key] for g in groups) for key in ("scale_ups", "scale_downs", "scale_events")}
    out["gpu_hours"] = sum(g["gpu_hours"] for g in groups)
    out["cost"] = None if None in costs else sum(costs)
    out["billed_s"] = int(st.loop[0]["clock_us"]) / 1e6
    for key in ("redirected", "lost_tokens", "scale_oscillations", "under_provisioned_s", "over_provisioned_s"):
        out[key] = sum(g[key] for g in groups)
    out["pools"] = pools
    return out


# ----------------------------------------------------------------------------- the scale tables

JSONL_CHUNK_ROWS = 65536  # rows converted to Python objects at a time (a tick log may be long)


def act_times_us(tls: list[PoolTimeline], ticks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(when each tick's decision acts -- the tick + its pool's metrics delay, µs --, whether
    it decided a change)."""
    delay = np.array([0 if tl.autoscale is None else tl.autoscale.metrics_delay_us for tl in tls], np.int64)
    return ticks["time_us"] + delay[ticks["pool"].astype(np.int64)], ticks["target"] != ticks["current"]


def scale_table(result, changes_only: bool):
    """The tick log as a pyarrow Table: every tick, or with ``changes_only`` the scale
    events (target != current).  Columns: ``time_s``, ``pool`` (its name),
    ``reason`` (kernels/schema/enums.py ScaleReason), ``from_instances`` / ``to_instances``
    (the current count and the decision), ``wish``, ``ready``, ``signal`` (the policy's;
    null when it had no sample), ``act_time_s`` (when a change acts: the tick + the pool's
    metrics delay; null without a change).  Built from numpy columns: no Python object per row."""
    import pyarrow as pa  # deferred: pyarrow
    import pyarrow.compute as pc  # deferred: pyarrow

    ticks = tick_log(result)
    if changes_only:
        ticks = ticks[ticks["target"] != ticks["current"]]
    tls = timelines(result)
    pool = ticks["pool"].astype(np.int64)
    act_us, change = act_times_us(tls, ticks)
    signal = ticks["signal"].astype(np.float64)
    return pa.table({
        "time_s": pa.array(ticks["time_us"] / 1e6),
        "pool": pc.take(pa.array([tl.name for tl in tls], pa.string()), pa.array(pool)),
        "reason": pc.take(pa.array(SCALE_REASON_NAMES, pa.string()), pa.array(ticks["reason"].astype(np.int64))),
        "from_instances": pa.array(ticks["current"].astype(np.int64)),
        "to_instances": pa.array(ticks["target"].astype(np.int64)),
        "wish": pa.array(ticks["wish"].astype(np.int64)),
        "ready": pa.array(ticks["ready"].astype(np.int64)),
        "signal": pa.array(np.where(np.isfinite(signal), signal, 0.0), mask=~np.isfinite(signal)),
        "act_time_s": pa.array(act_us / 1e6, mask=~change),
    })


def with_scale_records(trace, result):
    """The decision trace ``trace`` (a pyarrow Table, results.trace_table) with a ``scale``
    record per autoscaler tick: its columns null but ``time_us`` and ``reason``, the new
    columns ``pool``, ``from_instances``, ``to_instances``, ``wish``, ``ready``, ``signal``
    and ``act_time_us`` (of ``scale_table``; null on the other records); in time order, a
    tick after the other records of its time."""
    import pyarrow as pa  # deferred: pyarrow

    ticks = scale_table(result, changes_only=False)
    act_us, change = act_times_us(timelines(result), tick_log(result))
    n, m = trace.num_rows, ticks.num_rows
    extra = {"pool": ticks["pool"], "from_instances": ticks["from_instances"], "to_instances": ticks["to_instances"],
             "wish": ticks["wish"], "ready": ticks["ready"], "signal": ticks["signal"],
             "act_time_us": pa.array(act_us, mask=~change)}
    time_us = tick_log(result)["time_us"].astype(np.int64)
    scale_cols = {}
    for name, column in zip(trace.column_names, trace.columns):
        if name == "time_us":
            scale_cols[name] = pa.array(time_us)
        elif name == "record":
            scale_cols[name] = pa.array(["scale"] * m, pa.string())
        elif name == "reason":
            scale_cols[name] = ticks["reason"]
        else:
            scale_cols[name] = pa.nulls(m, column.type)
    scale_cols.update(extra)
    trace_cols = dict(zip(trace.column_names, trace.columns))
    trace_cols.update({name: pa.nulls(n, col.type) for name, col in extra.items()})
    both = pa.concat_tables([pa.table(trace_cols), pa.table(scale_cols)])
    times = both["time_us"].to_numpy()
    order = np.lexsort((np.arange(n + m), np.r_[np.zeros(n, np.int8), np.ones(m, np.int8)], times))
    return both.take(pa.array(order))


def write_scale_table(result, path: str | Path, fmt: str, changes_only: bool) -> None:
    """Write the scale events (``changes_only``) or every tick (``scale_table``) as ``fmt``:
    parquet, csv or jsonl (one JSON record per line)."""
    write_table(scale_table(result, changes_only), path, fmt)


def write_table(table, path: str | Path, fmt: str) -> None:
    """Write a pyarrow Table as ``fmt``: parquet, csv or jsonl (one JSON record per line)."""
    if fmt == "parquet":
        import pyarrow.parquet as pq  # deferred: pyarrow

        pq.write_table(table, str(path))
    elif fmt == "csv":
        import pyarrow.csv as pcsv  # deferred: pyarrow

        pcsv.write_csv(table, str(path))
    else:
        with open(path, "w", encoding="utf-8") as f:
            for start in range(0, table.num_rows, JSONL_CHUNK_ROWS):
                for row in table.slice(start, JSONL_CHUNK_ROWS).to_pylist():
                    f.write(json.dumps(row, allow_nan=False) + "\n")


__all__ = ["PoolTimeline", "UNDER_PROVISIONED_ATTAINMENT", "act_times_us", "billing",
           "gpu_hours", "has_autoscaler", "pool_name", "request_met", "scale_table", "scale_oscillations",
           "scaling_lag", "summary", "tick_log", "timelines", "with_scale_records",
           "write_scale_table", "write_table"]
