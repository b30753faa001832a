"""Time series of a run, sampled on the simulated clock (``sample_interval_ms``):
per instance and for the cluster, at t = k·interval (k = 1, 2, ...) while events remain,
each sample taken after every event at or before t.

Columns (one row per sample time and instance; the cluster's row has instance = -1):

| column | unit | definition |
|---|---|---|
| time_us / time_s | µs / s | the sample time |
| instance | id | instance id, -1 = the whole cluster |
| deployment | name | the instance's deployment (null on the cluster's rows); only in a run of two or more deployments |
| pool | name | the instance's pool: mono, prefill, decode or both (null on the cluster's rows); only in a run with prefill/decode disaggregation |
| waiting | requests | in the wait queue (cluster: summed) |
| running | requests | in the running batch |
| routed_pending | requests | routed here, queueing overhead (α) not yet elapsed |
| in_system | requests | cluster: arrived, not yet completed, rejected or dropped (nor timed out or shed, with deadlines; includes requests in admission / routing latency, in a gateway queue and between attempts); instance: waiting + running + routed_pending |
| kv_blocks_used | blocks | KV blocks allocated |
| kv_utilization | fraction | kv_blocks_used / KV blocks (cluster: pooled) |
| arrivals | requests, cumulative | cluster: arrived at the cluster; instance: entered its queue (injected) |
| completions | requests, cumulative | completed |
| preemptions | count, cumulative | preemptions |
| rejections | requests, cumulative | rejected by admission (cluster only; 0 per instance) |
| dropped | requests, cumulative | dropped as unservable |
| kv_cpu_blocks, kv_disk_blocks | blocks | entries held in the CPU / disk KV tier (cluster: summed); only in a run with KV tiers |
| loading | requests | loading blocks from a KV tier before they can run (RequestState.LOADING); only in a run with KV tiers |
| gateway_waiting | requests | cluster: in the gateway queues of flow control (RequestState.GATEWAY; 0 per instance); only in a run with a flow-control detector |
| provisioning, loading_model, warming, active, draining | instances | instances in that lifecycle state (kernels/schema/enums.py LifeState; instance: 1 or 0; cluster: summed over every row, pools without an autoscaler counted active); only in a run with an autoscaler |
"""

from __future__ import annotations

import numpy as np
from blis_fast_kernels.schema import N_TIERS, LifeState, RequestState
from blis_fast.config import memory

from blis_fast.errors import ConfigError

COLUMNS = ("waiting", "running", "routed_pending", "in_system", "kv_blocks_used", "arrivals", "completions",
           "preemptions", "rejections", "dropped")
TIER_COLUMNS = ("kv_cpu_blocks", "kv_disk_blocks", "loading")  # (runs with KV tiers only)
# (runs with an autoscaler only) instances per lifecycle state, LifeState PROVISIONING..DRAINING; the
# model-loading state is ``loading_model`` (``loading`` is the KV tiers' column)
LIFE_COLUMNS = ("provisioning", "loading_model", "warming", "active", "draining")
GATEWAY_COLUMNS = ("gateway_waiting",)  # (runs with a flow-control detector only)
ROW_BYTES = 8 * (len(COLUMNS) + 4)
CHUNK = 1024  # samples charged to the memory budget at a time
# A run's time series: at most MAX_SAMPLES sample times and MAX_SAMPLE_ROWS rows (sample times x
# (instances + 1)).  Each sample stops the kernel and runs Python, so the count bounds the
# time as well as the memory: the documented minimum interval on a long run is refused, not run.
MAX_SAMPLES = 1_000_000
MAX_SAMPLE_ROWS = 10_000_000
INTERVAL_FIELD = "simulation.sample_interval_ms"


def check_sample_count(samples: int, n_inst: int, why: str) -> None:
    """ConfigError naming ``simulation.sample_interval_ms`` if ``samples`` sample times of
    ``n_inst`` instance rows (plus the cluster's) are more than a run may take."""
    rows = samples * (n_inst + 1)
    if samples > MAX_SAMPLES or rows > MAX_SAMPLE_ROWS:
        raise ConfigError(INTERVAL_FIELD, f"{why} takes {samples} samples ({rows} rows, {n_inst + 1} per sample: "
                                          f"each instance and the cluster); a run takes at most {MAX_SAMPLES} "
                                          f"samples and {MAX_SAMPLE_ROWS} rows: raise the interval "
                                          f"(--sample-interval-ms)")


class TimeSeriesRecorder:
    """``on_sample`` callback of ``run.runner.run_to_end``: records one sample of every
    instance row in use and of the cluster."""

    def __init__(self, n_inst: int, every_us: int, tier_names: list[list[str]] | None = None,
                 lifecycle: bool = False, gateway: bool = False, deadlines: bool = False):
        self.n_inst = n_inst
        # KV tiers (``tier_names``: each instance's, results.kv_tiers): the tier columns too;
        # an autoscaler (``lifecycle``): the lifecycle columns; a flow-control detector
        # (``gateway``): the gateway queue's; ``deadlines`` (flow control or deadlines on):
        # timed-out and shed requests leave ``in_system``
        self.columns = COLUMNS + TIER_COLUMNS if tier_names is not None else COLUMNS
        self.life_at = len(self.columns)  # the first lifecycle column
        self.lifecycle = lifecycle
        if lifecycle:
            self.columns += LIFE_COLUMNS
        self.gateway_at = len(self.columns) if gateway else -1
        if gateway:
            self.columns += GATEWAY_COLUMNS
        self.deadlines = deadlines
        self.tier_rows = None
        if tier_names is not None:  # per tier column: each instance's State.tiers row (-1: it has none)
            self.tier_rows = [np.array([i * N_TIERS + t.index(name) if name in t else -1
                                        for i, t in enumerate(tier_names)], np.int64) for name in ("cpu", "disk")]
        self.every_us = int(every_us)  # the sample interval
        self.times: list[int] = []  # the first sample time of each distinct sample
        self.repeats: list[int] = []  # how many sample times (every interval) each one covers
        self.count = 0  # sample times recorded
        self.rows: list[np.ndarray] = []  # per distinct sample: int64[n_inst + 1, len(COLUMNS)] (cluster last)
        self.kv_total: np.ndarray | None = None

    def __call__(self, state, t_us: int, repeats: int = 1) -> None:
        check_sample_count(self.count + repeats, self.n_inst, f"sampling up to {int(t_us)} µs")
        charged = -(-self.count // CHUNK)
        self.count += repeats
        chunks = -(-self.count // CHUNK) - charged
        if chunks:
            memory.charge(chunks * CHUNK * (self.n_inst + 1) * (ROW_BYTES + len(self.columns) * 8),
                          f"the time series ({self.count - repeats} samples so far)",
                          "raise simulation.sample_interval_ms (--sample-interval-ms)")
        inst = state.inst
        lp = state.loop[0]
        a = np.empty((len(inst) + 1, len(self.columns)), np.int64)
        a[:-1, 0] = inst["wq_len"]
        a[:-1, 1] = inst["batch_len"]
        a[:-1, 2] = inst["routed_pending"]
        a[:-1, 3] = a[:-1, 0] + a[:-1, 1] + a[:-1, 2]
        a[:-1, 4] = inst["kv_allocated"]
        a[:-1, 5] = inst["injected"]
        a[:-1, 6] = inst["completed"]
        a[:-1, 7] = inst["preemptions"]
        a[:-1, 8] = 0
        a[:-1, 9] = inst["dropped"]
        if self.tier_rows is not None:
            used = state.tiers["used"]
            for j, rows in enumerate(self.tier_rows):
                a[:-1, 10 + j] = np.where(rows >= 0, used[np.maximum(rows, 0)], 0)
            a[:-1, 12] = state.kv_tier_inst["loading"]
        if self.lifecycle:
            life = state.life["state"]
            for j in range(len(LIFE_COLUMNS)):
                a[:-1, self.life_at + j] = life == LifeState.PROVISIONING + j
        a[-1] = a[:-1].sum(axis=0)
        a[-1, 5] = lp["injected"]
        a[-1, 8] = lp["rejected"]
        a[-1, 3] = a[-1, 5] - a[-1, 6] - a[-1, 8] - a[-1, 9]
        if self.gateway_at >= 0:
            a[:-1, self.gateway_at] = 0
            a[-1, self.gateway_at] = lp["gateway_depth"]  # (sampled after every event at or before t: exact)
        if self.deadlines:  # requests that ended timed out or shed: every failed attempt not retried
            a[-1, 3] -= lp["timeouts"] + lp["sheds"] - lp["retries"]
        self.times.append(int(t_us))
        self.repeats.append(int(repeats))
        self.rows.append(a)
        self.kv_total = inst["kv_total"].astype(np.int64)

    def sample_times(self) -> np.ndarray:
        """Every sample time, each distinct sample's repeats included."""
        reps = np.asarray(self.repeats, np.int64)
        first = np.repeat(np.asarray(self.times, np.int64), reps)
        within = np.arange(len(first), dtype=np.int64) - np.repeat(np.cumsum(reps) - reps, reps)
        return first + within * self.every_us

    def series(self, used: np.ndarray, state=None, labels: dict | None = None) -> "TimeSeries":
        """The recorded samples of instances ``used`` and the cluster; with the run's final
        ``state``, requests in their last step count as running and in the system (below).
        ``labels``: {column: a label of each of ``used``} (``results.deployments.instance_labels``:
        ``deployment``, ``pool``; none in a single monolithic deployment's run)."""
        times = self.sample_times()
        n = len(times)
        k = len(used) + 1
        if n == 0:
            data = np.zeros((0, len(self.columns)), np.int64)
        else:
            pick = np.concatenate([used, [self.rows[0].shape[0] - 1]])
            stacked = np.repeat(np.stack(self.rows)[:, pick, :], self.repeats, axis=0)
            if state is not None:
                # The kernel counts a completion when it processes the request's last step, at
                # the step's start; the last token is visible at the step's end + a2.  Until
                # then the request is in the system (running while the step computes), not
                # yet completed: Little's law holds on these columns (tests/run/test_analytic.py).
                computing, unseen = _in_last_step(state, used, times)
                stacked[:, :, COLUMNS.index("running")] += computing
                stacked[:, :, COLUMNS.index("in_system")] += unseen
                stacked[:, :, COLUMNS.index("completions")] -= unseen
            data = stacked.reshape(n * k, len(self.columns))
        times = np.repeat(times, k)
        instance = np.tile(np.concatenate([used, [-1]]).astype(np.int64), n)
        total = np.zeros(k, np.int64)
        if self.kv_total is not None:
            total[:-1] = self.kv_total[used]
            total[-1] = self.kv_total[used].sum()
        tiled = {name: np.tile(np.array([*values, None], dtype=object), n) for name, values in (labels or {}).items()}
        return TimeSeries(times, instance, {c: data[:, j] for j, c in enumerate(self.columns)}, np.tile(total, n), tiled)


def _in_last_step(state, used: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(computing, unseen): int64 [samples, len(used) + 1] each, per instance then the
    cluster -- completed requests whose last step had started by sample time t and, for
    ``computing``, had not ended (still running), for ``unseen``, whose last token (step
    end + a2) was not yet visible (still in the system)."""
    reqs = state.reqs
    done = reqs["state"] == RequestState.COMPLETED
    inst = reqs["instance"][done]
    visible = reqs["last_token_us"][done]
    step_end = visible - np.trunc(state.inst["alpha2"]).astype(np.int64)[inst]
    start = step_end - reqs["last_step_us"][done]
    computing = np.zeros((len(times), len(used) + 1), np.int64)
    unseen = np.zeros_like(computing)
    for j, sel in enumerate([inst == i for i in used.tolist()] + [np.ones(len(inst), bool)]):
        started = np.searchsorted(np.sort(start[sel]), times, side="right")
        computing[:, j] = started - np.searchsorted(np.sort(step_end[sel]), times, side="right")
        unseen[:, j] = started - np.searchsorted(np.sort(visible[sel]), times, side="right")
    return computing, unseen


class TimeSeries:
    """Sampled columns (module docstring), one row per (sample time, instance)."""

    def __init__(self, time_us: np.ndarray, instance: np.ndarray, cols: dict[str, np.ndarray], kv_total: np.ndarray,
                 labels: dict[str, np.ndarray] | None = None):
        self.time_us = time_us
        self.instance = instance
        self.labels = labels or {}  # {column: object [rows]}: the instance's label, None on the cluster's rows
        self.cols = cols
        self.kv_total = kv_total

    def __len__(self) -> int:
        return len(self.time_us)

    def columns(self) -> dict[str, np.ndarray]:
        """Every column, in the documented order."""
        kv = np.divide(self.cols["kv_blocks_used"], self.kv_total, out=np.zeros(len(self)), where=self.kv_total > 0)
        out = {"time_us": self.time_us, "time_s": self.time_us / 1e6, "instance": self.instance}
        out.update(self.labels)
        for c in self.cols:
            out[c] = self.cols[c]
            if c == "kv_blocks_used":
                out["kv_utilization"] = kv
        return out

    def cluster(self) -> dict[str, np.ndarray]:
        """The cluster's rows only."""
        m = self.instance == -1
        return {k: v[m] for k, v in self.columns().items()}

    def table(self):
        """A pyarrow Table of ``columns()``."""
        import pyarrow as pa  # deferred: pyarrow

        return pa.table({k: pa.array(v, pa.string() if k in self.labels else None)
                         for k, v in self.columns().items()})

    def write_parquet(self, path) -> None:
        import pyarrow.parquet as pq  # deferred: pyarrow

        pq.write_table(self.table(), str(path))


__all__ = ["COLUMNS", "GATEWAY_COLUMNS", "LIFE_COLUMNS", "TimeSeries", "TimeSeriesRecorder"]
