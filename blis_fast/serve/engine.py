"""The live engine: the simulator advanced as requests arrive (``blis-fast serve``).

A batch run knows its requests up front; a server learns of them one by one.  The live
engine keeps one simulation State whose request table has ``capacity`` rows, each sized for
the longest request the server takes (``max_model_len`` tokens: its block keys and KV block
slots), plus one *sentinel* row that never arrives (its arrival is beyond any time the
engine reaches).  A request that comes in takes a free row: the row is filled as a batch
run's request table would be (``run.tables.request_table`` of a one-request workload, its
block keys hashed from its token ids by ``Workload.from_tokens``), and its row id is
written at the end of the arrival stream (``State.arrival_order``; every position after
the last request holds the sentinel, so the event loop pauses before it).  The loop then
runs event time by event time (``advance``), never past the wall clock's simulated time,
so an arrival at time t is injected before any event after t has run: the run is the
batch run of the same arrivals, byte for byte (tests/serve/test_live_engine.py).  When a
request has completed (or was dropped or rejected) and its tokens are delivered, its row
is free again (``release``): the arrival stream is compacted when it fills, so the engine
runs for as long as it is served with ``capacity`` rows.

One decode step gives a running request one token; advancing event time by event time
makes each new token's time exact: the request's ``last_token_us`` (its step's end + α2),
reported by ``advance`` as ``(request, token index, time)`` -- a time after the step's
start, which the server waits for before sending the token --, with the requests that
ended.

The engine is the reference path (no event skipping): every running request's fields are
exact after each step.  Every block key is marked as possibly shared (the engine cannot
know which later requests repeat a prompt), which makes the prefix cache find repeats by
value, as a batch run does.  Not served live: autoscaling, KV tiers, gateway flow control
and agent workflows (refused with one line).  Several
served models and prefill/decode disaggregation are: a request names its model, and a
disaggregated model's request has its prefill leg row (``pd_base`` rows on) filled as a
batch run's is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blis_fast.config.validate import MAX_TIME_US, show
from blis_fast.errors import ConfigError
from blis_fast.run.disaggregation import add_prefill_legs, pd_model_rows, pd_request_rows
from blis_fast.run.resolve import Setup
from blis_fast.run.session import RunSession
from blis_fast.run.tables import fleet, request_table
from blis_fast.workload.workload import Workload
from blis_fast_kernels import schema as S

MAX_CAPACITY = 65_536  # live request rows
MAX_MODEL_LEN = 1 << 20  # tokens of one request (prompt + output)
NEVER_US = MAX_TIME_US  # the sentinel row's arrival: beyond any time the engine reaches
ENDED = (S.RequestState.COMPLETED, S.RequestState.DROPPED, S.RequestState.REJECTED)
UNSUPPORTED = {  # what the live engine does not serve yet -> how the config turns it on
    "autoscaled": "autoscaling (--autoscaler)",
    "flow": "gateway flow control (--flow-control) or request deadlines",
    "tiers": "KV cache tiers (kv_tiers:)",
}


class LiveEngine:
    """A simulation that takes requests as they arrive (module docstring).

    ``setup``: a resolved config (``blis_fast.run.resolve``); ``capacity``: requests in the
    engine at once (arrived and not yet released); ``max_model_len``: the most tokens
    (prompt + output) of one request, at most what one instance's KV cache holds."""

    def __init__(self, setup: Setup, capacity: int = 1024, max_model_len: int = 8192,
                 record_steps: bool = False) -> None:
        if not 1 <= capacity <= MAX_CAPACITY:
            raise ConfigError("capacity", f"must be in [1, {MAX_CAPACITY}] requests, got {show(capacity)}")
        self.setup = setup
        self.models = setup.served_models
        sizes = {int(d.engine.block_size) for d in setup.deployments} or {int(setup.config.engine.block_size)}
        if len(sizes) > 1:
            raise ConfigError("deployments", f"the live engine needs one KV block size for every deployment, got "
                                             f"{', '.join(map(str, sorted(sizes)))}")
        self.block_size = sizes.pop()
        self.pd_models = pd_model_rows(setup)
        kv_tokens = min(d.latency.total_kv_blocks for d in setup.deployments) * self.block_size \
            if setup.deployments else setup.latency.total_kv_blocks * self.block_size
        if not 2 <= max_model_len <= min(MAX_MODEL_LEN, kv_tokens):
            raise ConfigError("max_model_len", f"must be in [2, {min(MAX_MODEL_LEN, kv_tokens)}] tokens (at most "
                                               f"one instance's KV cache: {kv_tokens} tokens), got {show(max_model_len)}")
        self.capacity = int(capacity)
        self.max_model_len = int(max_model_len)
        self.session = RunSession(setup, self._unarrived_rows(), event_skipping=False)
        self.session.prepare()
        st = self.state
        self._check_supported(st)
        st.settings["max_events"] = np.iinfo(np.int64).max  # (a hang guard for batch runs; a server runs on)
        self.pd_base = int(st.settings[0]["pd_base"])  # request r's prefill leg is row r + pd_base (P/D)
        self.sentinel = self.capacity
        st.arrival_order[:] = self.sentinel
        st.loop["next_arrival"] = 0
        self._write = 0  # the next free position of the arrival stream
        self._free = list(range(self.capacity - 1, -1, -1))  # rows, the lowest taken first
        self._live = np.zeros(self.capacity + 1, bool)
        self._reported = np.zeros(self.capacity + 1, np.int64)  # tokens reported per row
        self._ended = np.zeros(self.capacity + 1, bool)  # its end reported by advance
        self._key_start = st.reqs["key_start"].copy()
        self._block_start = st.reqs["block_start"].copy()
        self._served = 0  # requests taken so far (their content seeds)
        self.caching = bool(st.settings[0]["prefix_caching"])
        self.compat = setup.config.simulation.compat is not None
        self.session.run_until(-1)  # (loads the compiled loop now, not at the first request: it pauses at once)
        # every step's (instance, start, end, prefill tokens, decode requests) when asked for (calibration)
        self.steps: list[tuple[int, int, int, int, int]] | None = [] if record_steps else None
        self._inst_counts = self._instance_counts()

    @property
    def state(self):
        return self.session.state

    # ------------------------------------------------------------------ construction

    def _unarrived_rows(self) -> Workload:
        """capacity + 1 rows of max_model_len tokens (one output token: the most KV block
        slots and keys any request of at most max_model_len tokens needs) that never arrive,
        then the rows whose keys hold the retired keys (``_retire_keys``): one key position
        per KV block of the cluster."""
        per = self.max_model_len // self.block_size
        blocks = fleet(self.setup.config, self.setup.latency, self.setup.deployments).kv_blocks
        self.retired_base = (self.capacity + 1) * per
        n = self.capacity + 1 + -(-blocks // per)
        prompt = np.full(n, self.max_model_len - 1, np.int64)
        output = np.ones(n, np.int64)
        offsets = np.arange(n + 1, dtype=np.int64) * per
        keys = np.arange(1, n * per + 1, dtype=np.int64)  # (distinct: overwritten as requests come)
        # (a disaggregated model's rows, if there is one: then every row's prefill leg has block slots too)
        disaggregated = np.flatnonzero(self.pd_models["enabled"] != 0)
        model = np.full(n, disaggregated[0] if disaggregated.size else 0, np.int32)
        return Workload(arrival_us=np.full(n, NEVER_US, np.int64), prompt_len=prompt, output_len=output,
                        block_keys=keys, key_offsets=offsets, block_size=self.block_size,
                        description={"kind": "live"}, key_shared=np.ones(keys.shape[0], np.uint8),
                        model=model if len(self.models) > 1 else None, models=self.models)

    def _check_supported(self, st) -> None:
        s = st.settings[0]
        on = {"autoscaled": s["autoscaled"] != 0,
              "flow": s["flow"] != 0 or s["deadlines"] != 0, "tiers": bool((st.kv_tier_inst["n_tiers"] > 0).any())}
        for what, enabled in on.items():
            if enabled:
                raise ConfigError("serve", f"the live engine does not serve {UNSUPPORTED[what]} yet; leave it out")

    # ------------------------------------------------------------------ requests

    def submit(self, prompt_ids: np.ndarray, max_tokens: int, arrival_us: int, model: int = 0) -> int:
        """Take a request for served model ``model`` (an index of ``models``) arriving at
        ``arrival_us`` (not before the engine's clock) with prompt token ids ``prompt_ids``
        and ``max_tokens`` output tokens; its row id, or -1 when every row is taken (the
        server answers 503).  Its block keys are hashed from the ids (``Workload.from_tokens``;
        the output blocks fresh, one content seed per request taken)."""
        prompt_ids = np.ascontiguousarray(prompt_ids, np.int64)
        n_prompt = int(prompt_ids.shape[0])
        self._check(n_prompt, max_tokens, arrival_us)
        one = Workload.from_tokens(np.array([arrival_us], np.int64), prompt_ids, np.array([0, n_prompt], np.int64),
                                   np.array([max_tokens], np.int64), self.block_size,
                                   content_seed=np.array([self._served + 1], np.int64), description={"kind": "live"})
        return self._take(one.prompt_len[0], one.output_len[0], one.block_keys, arrival_us, model)

    def submit_keys(self, prompt_len: int, max_tokens: int, keys: np.ndarray, arrival_us: int, model: int = 0) -> int:
        """``submit`` of a request whose block keys are known (a workload's:
        ``Workload.block_keys`` of its prompt and output blocks)."""
        self._check(int(prompt_len), int(max_tokens), arrival_us)
        if keys.shape[0] != (prompt_len + max_tokens) // self.block_size:
            raise ValueError(f"{keys.shape[0]} keys for {prompt_len} + {max_tokens} tokens of {self.block_size}")
        return self._take(int(prompt_len), int(max_tokens), np.ascontiguousarray(keys, np.int64), arrival_us, model)

    def _check(self, n_prompt: int, max_tokens: int, arrival_us: int) -> None:
        if n_prompt < 1 or max_tokens < 1 or n_prompt + max_tokens > self.max_model_len:
            raise ConfigError("request", f"prompt {n_prompt} + max_tokens {max_tokens} tokens must be within "
                                         f"[2, {self.max_model_len}] (max_model_len)")
        clock = int(self.state.loop[0]["clock_us"])
        if arrival_us < clock:
            raise ValueError(f"arrival {arrival_us} µs is before the engine's clock {clock} µs")

    def _take(self, prompt_len: int, max_tokens: int, keys: np.ndarray, arrival_us: int, model: int) -> int:
        """A free row filled with the request (``submit``), appended to the arrival stream;
        -1 when none is free."""
        st = self.state
        if not self._free:
            return -1
        r = self._free.pop()
        self._served += 1
        self._retire_keys(r)
        one = Workload(arrival_us=np.array([arrival_us], np.int64), prompt_len=np.array([prompt_len], np.int64),
                       output_len=np.array([max_tokens], np.int64), block_keys=keys,
                       key_offsets=np.array([0, keys.shape[0]], np.int64), block_size=self.block_size,
                       description={"kind": "live"}, key_shared=np.ones(keys.shape[0], np.uint8))
        kv_total = int(st.inst["kv_total"].max())
        rows = request_table(one, self.block_size, kv_total, self.compat, self.caching)
        rows["key_start"] = self._key_start[r]
        rows["named_upto"] = S.ALL_NAMED  # (the reference path: every block named)
        rows["model"] = model
        if self.pd_base:  # its prefill leg, as a batch run builds it (it shares the request's keys)
            rows, _ = add_prefill_legs(rows, 0, self.pd_models, self.block_size)
            leg = r + self.pd_base
            rows[1]["block_start"] = self._block_start[leg]
            st.reqs[leg] = rows[1]
            st.pd_reqs[r] = pd_request_rows(1)[0]
        rows[0]["block_start"] = self._block_start[r]
        st.reqs[r] = rows[0]
        k0 = int(self._key_start[r])
        st.keys[k0:k0 + keys.shape[0]] = keys
        self._enqueue(r)
        self._live[r] = True
        self._ended[r] = False
        self._reported[r] = 0
        return r

    def _retire_keys(self, r: int) -> None:
        """Before row r's key positions take a new request's keys: the KV blocks still
        registered under them (cached content of the row's earlier requests, which later
        requests may hit) keep their key at a position of their own -- retired_base + the
        block's id --, so the block's entry in the prefix table is found when it is evicted
        (the kernels find a block's key by its position).  The kernels' memos of the last
        lookups, kept by key position, are forgotten."""
        st = self.state
        k0 = int(self._key_start[r])
        key_index = st.blocks["key_index"]
        held = np.flatnonzero((key_index >= k0) & (key_index < k0 + self.max_model_len // self.block_size))
        if held.size:
            st.keys[self.retired_base + held] = st.keys[key_index[held]]
            key_index[held] = self.retired_base + held
        st.kv_memo[:, S.KvMemo.CHANGES] = -1
        st.pi_memo[S.RouterMemo.VERSION] = -1

    def _enqueue(self, r: int) -> None:
        """Append row r to the arrival stream, compacting it first when it is full."""
        st = self.state
        order = st.arrival_order
        if self._write == order.shape[0]:
            start = int(st.loop[0]["next_arrival"])
            pending = order[start:self._write].copy()
            order[:] = self.sentinel
            order[:pending.shape[0]] = pending
            st.loop["next_arrival"] = 0
            self._write = pending.shape[0]
        order[self._write] = r
        self._write += 1

    def release(self, r: int) -> None:
        """Request r has ended and the server delivered what it had: its row is free."""
        if not self._live[r] or int(self.state.reqs["state"][r]) not in ENDED:
            raise ValueError(f"request row {r} is not an ended live request")
        self._live[r] = False
        self._free.append(r)

    # ------------------------------------------------------------------ time

    def next_event_us(self) -> int | None:
        """The time of the engine's next event, None if nothing is pending."""
        st = self.state
        lp = st.loop[0]
        times = []
        if int(lp["next_arrival"]) < self._write:
            times.append(int(st.reqs["arrival_us"][st.arrival_order[int(lp["next_arrival"])]]))
        if int(lp["heap_size"]) > 0:
            times.append(int(st.heap["time_us"][0]))
        return min(times) if times else None

    def _instance_counts(self) -> np.ndarray:
        """Per instance: (steps, prefill tokens, decode requests) so far."""
        inst = self.state.inst
        return np.stack([inst["steps"], inst["prefill_tokens"], inst["decode_tokens"]])

    def advance(self, t_us: int) -> tuple[list[tuple[int, int, int]], list[int]]:
        """Run every event at or before ``t_us``: (the tokens they produced, as (row, token
        index from 0, time µs) in row order -- each a time after its step's start --, the
        rows that ended in them: completed, dropped or rejected).  With ``record_steps``,
        the steps that started are appended to ``steps`` (exact when ``t_us`` is the next
        event's time: an instance starts at most one step at a time)."""
        self.session.run_until(int(t_us))
        if self.steps is not None:
            counts = self._instance_counts()
            delta = counts - self._inst_counts
            ends = self.state.inst["busy_until_us"]
            for i in np.flatnonzero(delta[0]).tolist():
                self.steps.append((i, int(t_us), int(ends[i]), int(delta[1, i]), int(delta[2, i])))
            self._inst_counts = counts
        reqs = self.state.reqs
        live = np.flatnonzero(self._live)
        gen = reqs["generated"][live]
        new = live[gen > self._reported[live]]
        tokens = []
        for r in new.tolist():
            k0, k1 = int(self._reported[r]), int(reqs["generated"][r])
            t = int(reqs["last_token_us"][r])
            tokens.extend((r, k, t) for k in range(k0, k1))  # (one per step: k1 = k0 + 1 event by event)
            self._reported[r] = k1
        waiting = live[~self._ended[live]]
        state = reqs["state"][waiting]
        ended = waiting[(state == S.RequestState.COMPLETED) | (state == S.RequestState.DROPPED)
                        | (state == S.RequestState.REJECTED)]
        self._ended[ended] = True
        return tokens, ended.tolist()

    def ended(self, r: int) -> bool:
        """True once request r is completed, dropped or rejected."""
        return int(self.state.reqs["state"][r]) in ENDED

    def outcome(self, r: int) -> str:
        """How request r ended: completed, dropped (could never fit), rejected (admission)."""
        return S.REQUEST_STATE_NAMES[int(self.state.reqs["state"][r])]


STEP_RECORD = np.dtype([("instance", np.int64), ("start_us", np.int64), ("end_us", np.int64),
                        ("prefill_tokens", np.int64), ("decode_requests", np.int64)])


@dataclass
class LiveReplay:
    """What ``replay_live`` saw: per request its token times, instance and queue entry,
    and (when recorded) every step's composition (STEP_RECORD rows, in start order)."""

    tokens: list[list[int]]
    instance: np.ndarray  # int64, -1: never routed
    queued_us: np.ndarray  # int64, its first entry into a wait queue (-1: none)
    steps: np.ndarray | None


def replay_live(setup: Setup, workload: Workload, capacity: int = 2048, max_model_len: int = 8192,
                record_steps: bool = False) -> LiveReplay:
    """Run ``workload``'s requests (all of them known up front: no closed-loop followers)
    through a live engine as the server's driver does -- each arrives before the events of
    its µs, and the engine runs event time by event time -- recording what ``LiveReplay``
    holds.  The run is the batch run of the workload (tests/serve/test_live_engine.py)."""
    if workload.is_dependent.any():
        raise ConfigError("workload", "a live replay takes requests known up front (no closed-loop followers)")
    engine = LiveEngine(setup, capacity=capacity, max_model_len=max_model_len, record_steps=record_steps)
    n = len(workload)
    tokens: list[list[int]] = [[] for _ in range(n)]
    instance = np.full(n, -1, np.int64)
    queued = np.full(n, -1, np.int64)
    of_row: dict[int, int] = {}
    models = workload.model if workload.model is not None else np.zeros(n, np.int32)

    def run_to(t: int) -> None:
        reqs = engine.state.reqs
        while (e := engine.next_event_us()) is not None and e <= t:
            new, ended = engine.advance(e)
            for row, _, when in new:
                tokens[of_row[row]].append(when)
            for row in ended:
                j = of_row.pop(row)
                instance[j], queued[j] = int(reqs["instance"][row]), int(reqs["queued_us"][row])
                engine.release(row)

    offsets = workload.key_offsets
    for j in np.argsort(workload.arrival_us, kind="stable").tolist():
        t = int(workload.arrival_us[j])
        run_to(t - 1)
        row = engine.submit_keys(int(workload.prompt_len[j]), max(int(workload.output_len[j]), 1),
                                 workload.block_keys[offsets[j]:offsets[j + 1]], t, int(models[j]))
        if row < 0:
            raise ConfigError("capacity", f"{capacity} rows are too few: request {j} found none free")
        of_row[row] = j
    run_to(np.iinfo(np.int64).max)
    steps = None if engine.steps is None else np.array(engine.steps, STEP_RECORD)
    return LiveReplay(tokens, instance, queued, steps)
