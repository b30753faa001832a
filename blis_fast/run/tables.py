"""Allocate and fill the kernel's State for one run: one allocator per table family (the
tests build states from the same functions).  Dtypes and layouts: ``blis_fast_kernels.schema``.

Everything is sized here, once; the event loop allocates nothing.  The only tables that
grow are the logs, between calls of the loop (``runner.grow_logs``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from blis_fast.errors import ConfigError
from blis_fast_kernels import schema as S
from blis_fast_kernels.schema.state import (GIVEN, LOG, MINUS_ONE, STATE_FIELDS, ZEROS, copy_array, event_capacity,
                                            state_shapes)
from blis_fast.config import memory
from blis_fast.config.deployments import model_block_sizes
from blis_fast.run.agents import AgentTables, agent_event_budget, agent_rows, agent_settings, agent_sizes
from blis_fast.run.flow import FlowLayout, check_flow_support, flow_layout, flow_rows, flow_sizes
from blis_fast.config.disaggregation import any_disaggregated
from blis_fast.run.sizing import next_pow2
from blis_fast.run.tiers import tier_layout, tier_request_rows, tier_rows, tier_sizes
from blis_fast.run.disaggregation import (ROLE_CODES, add_prefill_legs, check_pd_policy, pd_instance_rows,
                                          pd_model_rows, pd_request_rows, prefill_groups, routing_group_rows)
from blis_fast.policy import compile_policies

INT64_MAX = np.iinfo(np.int64).max
MIN_LOG_ROWS = 1024


class StateArrays:
    """Where ``build_state`` gets its large arrays: fresh ones (``np.zeros``), or with
    ``reuse=True`` the arrays of this object's previous state, cleared -- for a thread
    that evaluates candidate after candidate on one scenario (blis_fast.batch), whose
    previous state is dead by then.  Fresh arrays cost page faults, and with several
    threads the unmapping of the old ones interrupts the other cores: building a
    10K-request state took ~4x as long on two threads as on one.  One array is kept per
    State field (the latest shape)."""

    def __init__(self, reuse: bool = False):
        self.reuse = reuse
        self._kept: dict[str, np.ndarray] = {}

    def _get(self, field: str, shape, dtype) -> tuple[np.ndarray, bool]:
        """(array, fresh): the kept array of ``field`` if it has this shape and dtype."""
        shape, dtype = (shape if isinstance(shape, tuple) else (int(shape),)), np.dtype(dtype)
        kept = self._kept.get(field) if self.reuse else None
        if kept is not None and kept.shape == shape and kept.dtype == dtype:
            return kept, False
        a = np.zeros(shape, dtype)
        if self.reuse:
            self._kept[field] = a
        return a, True

    def zeros(self, field: str, shape, dtype) -> np.ndarray:
        a, fresh = self._get(field, shape, dtype)
        if not fresh and a.size:
            a.reshape(-1).view(np.uint8).fill(0)  # (records too: as bytes)
        return a

    def scratch(self, field: str, shape, dtype) -> np.ndarray:
        """An array the kernels write before they read any element of it (the event heap,
        the logs, the ring of touch records, block rows and lists, sort scratch): a kept one
        is handed over as it is, uncleared (tests/run poison them to check)."""
        return self._get(field, shape, dtype)[0]

    def log(self, field: str, rows: int, dtype) -> np.ndarray:
        """A log with room for at least ``rows`` records (written before they are read, as
        ``scratch``): the kept one if it is that long -- a log a run grew (``keep``) is
        reused at its grown length, not grown again by every run."""
        kept = self._kept.get(field) if self.reuse else None
        if kept is not None and kept.dtype == np.dtype(dtype) and len(kept) >= rows:
            return kept
        return self._get(field, rows, dtype)[0]

    def keep(self, field: str, array: np.ndarray) -> None:
        """Keep ``array`` as the next state's ``field`` (a log the run grew)."""
        if self.reuse:
            self._kept[field] = array

    def full(self, field: str, shape, value, dtype) -> np.ndarray:
        a, _ = self._get(field, shape, dtype)
        a.fill(value)
        return a

    def copy(self, field: str, source: np.ndarray) -> np.ndarray:
        """A copy of ``source`` (into the kept array when reusing)."""
        a, _ = self._get(field, source.shape, source.dtype)
        return copy_array(source, a)


def block_slots(workload, block_size, kv_total: int | None, compat: bool) -> tuple[np.ndarray, np.ndarray]:
    """(block_cap, slots) per request (``block_size``: per request, its model's, or one for all): block_cap = the most KV blocks it holds in normal
    operation -- prompt + all outputs but the last, whose KV is never computed; a request
    needing more than an instance has is dropped unservable --, slots = the length of its
    block list: block_cap, one more token's worth in compat mode (the reference writes the
    last token's KV at completion), 0 for a request that can never fit."""
    out_eff = np.maximum(workload.output_len, 1)  # N = 0 behaves as N = 1 (prefill emits one token)
    block_cap = (workload.prompt_len + out_eff - 1 + block_size - 1) // block_size
    extra = (workload.output_len > 0).astype(np.int64) if compat else 0
    slots = (workload.prompt_len + out_eff - 1 + extra + block_size - 1) // block_size
    if kv_total is not None:
        slots = np.where(block_cap <= kv_total, slots, 0)
    return block_cap, slots


def request_table(workload, block_size, kv_total: int | None = None, compat: bool = False,
                  caching: bool = False) -> np.ndarray:
    """REQUEST_DT rows of the workload: inputs, labels, key and block-slice positions, the
    named block positions (``named_positions``, for a run with event skipping and prefix
    ``caching``); all times and links -1.  With ``kv_total``, a request that needs more
    blocks than an instance has (dropped unservable when it reaches one) gets an empty
    block slice (``block_slots``).  ``block_size``: per request (its model's) or one for all."""
    n = len(workload)
    reqs = np.zeros(n, S.REQUEST_DT)
    reqs["arrival_us"] = workload.arrival_us
    reqs["prompt_len"] = workload.prompt_len
    out_eff = np.maximum(workload.output_len, 1)  # N = 0 behaves as N = 1 (prefill emits one token)
    reqs["output_len"] = out_eff
    reqs["requested_output"] = workload.output_len
    reqs["key_start"] = workload.key_offsets[:-1]
    reqs["key_count"] = np.diff(workload.key_offsets)
    reqs["prompt_key_count"] = np.minimum(workload.prompt_len // block_size, reqs["key_count"])
    block_cap, slots = block_slots(workload, block_size, kv_total, compat)
    reqs["block_cap"] = block_cap
    reqs["block_start"] = np.concatenate(([0], np.cumsum(slots)[:-1])) if n else []
    for name in workload.ATTRIBUTES:
        reqs[name] = workload.column(name)
    if workload.model is not None:  # its served-model id (routing candidates); none = model 0
        reqs["model"] = workload.model
    for f in ("instance", "queue_prev", "queue_next", "routed_us", "queued_us", "first_scheduled_us",
              "first_token_us", "last_token_us", "run_start_step", "last_token_step", "cal_next", "ride_phase"):
        reqs[f] = -1
    reqs["named_upto"] = named_positions(reqs, workload, caching)
    return reqs


def arrival_order(workload) -> np.ndarray:
    """Requests whose arrival is known up front (closed-loop followers arrive when their
    predecessor completes), stably sorted by arrival time."""
    independent = np.flatnonzero(~workload.is_dependent)
    return independent[np.argsort(workload.arrival_us[independent], kind="stable")].astype(np.int64)


@dataclass(frozen=True)
class Fleet:
    """The instance rows of a run, by deployment: what the instance table, the roofline
    rows and the sizes of the State are built from.  One deployment (the top-level
    settings) has rows for its pool's upper bound (``deployment.max_instances``), the first
    ``num_instances`` active; several deployments have each its ``instances`` rows, all
    active, in list order (``Setup.deployments[k].first_instance``)."""

    engines: tuple  # per pool: EngineConfig
    latencies: tuple  # per pool: LatencyModel (α, β, roofline, KV blocks)
    rows: tuple  # per pool: instance rows
    active: tuple  # per pool: of which active at the start
    models: tuple  # per pool: served-model id (index into Setup.served_models)
    roles: tuple = (S.PoolRole.MONO,)  # per pool: PoolRole
    route_ids: tuple = (0,)  # per pool: its instances' routing group (run/disaggregation.py)
    route_alts: tuple = (-1,)  # per pool: a second routing group (a `both` pool's prefill group), -1 = none
    tiers: tuple = (None,)  # per pool: its KV tiers beyond the GPU (ResolvedKvTiers), None = none
    autoscale: tuple = (None,)  # per pool: its autoscaler (config.autoscale.ResolvedAutoscale), None = none

    @property
    def n_inst(self) -> int:
        return sum(self.rows)

    @property
    def n_routes(self) -> int:
        """Routing groups: one per served model, one per disaggregated model's prefill pools."""
        return max(max(self.models) + 1, max(self.route_ids) + 1, max(self.route_alts) + 1)

    @property
    def kv_blocks(self) -> int:
        """KV blocks of all instance rows (each deployment's kv_total per row)."""
        return sum(r * lat.total_kv_blocks for r, lat in zip(self.rows, self.latencies))

    @property
    def max_kv_total(self) -> int:
        """The largest KV cache of an instance: a request needing more fits nowhere."""
        return max(lat.total_kv_blocks for lat in self.latencies)

    @property
    def max_num_seqs(self) -> int:
        return max(e.max_num_seqs for e in self.engines)

    @property
    def max_block_size(self) -> int:
        """The largest block size (columns of State.ride_phase); each instance's own is
        INSTANCE_DT.block_size."""
        return max(e.block_size for e in self.engines)


def fleet(cfg, latency, deployments: tuple = ()) -> Fleet:
    """The ``Fleet`` of a run: ``deployments`` (``Setup.deployments``) when there are
    several, else the one deployment of ``cfg``'s top-level settings with ``latency``."""
    if len(deployments) > 1 or any_disaggregated(deployments):
        served = tuple(dict.fromkeys(d.served_model_name for d in deployments))
        groups = prefill_groups(deployments, served)
        pools = [(served.index(d.served_model_name), p) for d in deployments for p in d.pools]
        return Fleet(tuple(p.engine for _, p in pools), tuple(p.latency for _, p in pools),
                     tuple(p.rows for _, p in pools), tuple(p.instances for _, p in pools),
                     tuple(m for m, _ in pools), tuple(ROLE_CODES[p.role] for _, p in pools),
                     tuple(groups[m] if p.role == "prefill" else m for m, p in pools),
                     tuple(groups[m] if p.role == "both" else -1 for m, p in pools),
                     tuple(p.kv_tiers for _, p in pools), tuple(p.autoscale for _, p in pools))
    _, n_inst = cfg.deployment.bounds()  # rows for the pool's upper bound; num_instances start active
    tiers = deployments[0].kv_tiers if deployments else None
    scaler = deployments[0].pools[0].autoscale if deployments and deployments[0].pools else None
    return Fleet((cfg.engine,), (latency,), (n_inst,), (cfg.deployment.num_instances,), (0,), tiers=(tiers,),
                 autoscale=(scaler,))


def instance_table(fl: Fleet, ht_rows: int) -> np.ndarray:
    """INSTANCE_DT rows of every deployment in order: its engine limits, latency model and
    KV blocks, ``pool`` = its index, ``model`` = its served-model id; each instance owns
    ``kv_total`` blocks after the previous instances' and ``ht_rows`` prefix-table rows."""
    inst = np.zeros(fl.n_inst, S.INSTANCE_DT)
    first = 0
    for k, (engine, latency, rows, active) in enumerate(zip(fl.engines, fl.latencies, fl.rows, fl.active)):
        dep = inst[first:first + rows]  # (a view: the assignments fill inst)
        dep["active"][:active] = 1
        dep["pool"] = k
        dep["model"] = fl.models[k]
        dep["route_id"] = fl.route_ids[k]
        dep["route_alt"] = fl.route_alts[k]
        dep["max_num_seqs"] = engine.max_num_seqs
        dep["max_batched_tokens"] = engine.max_num_batched_tokens
        dep["long_prefill_threshold"] = engine.long_prefill_token_threshold
        dep["block_size"] = engine.block_size
        dep["latency_kind"] = S.LatencyKind.BLACKBOX if latency.kind == "blackbox" else S.LatencyKind.ROOFLINE
        for c in range(3):
            dep[f"alpha{c}"] = latency.alpha[c]
            dep[f"beta{c}"] = latency.beta[c]
        dep["kv_total"] = latency.total_kv_blocks
        first += rows
    inst["kv_offset"] = np.concatenate(([0], np.cumsum(inst["kv_total"])[:-1])) if fl.n_inst else []
    inst["kv_virgin_next"] = inst["kv_offset"]
    inst["head_units"] = inst["kv_total"]  # every block free, anonymous until it needs an id
    inst["id_pool"] = -1
    inst["ht_offset"] = np.arange(fl.n_inst, dtype=np.int64) * ht_rows
    inst["ht_mask"] = ht_rows - 1
    for f in ("free_head", "free_tail", "wq_head", "wq_tail", "prev_step"):
        inst[f] = -1
    return inst


def autoscaled(fl: Fleet) -> bool:
    """True if some pool of the fleet has an autoscaler."""
    return any(a is not None for a in fl.autoscale)


def window_ticks(window_us: int, interval_us: int) -> int:
    """Ticks a stabilization window spans, the current one included (0 s: 1 tick)."""
    return window_us // interval_us + 1


def scale_pool_rows(fl: Fleet) -> np.ndarray:
    """The ``scale_pools`` field: each pool's autoscaler settings in µs (enabled 0 without)."""
    out = np.zeros(len(fl.rows), S.SCALE_POOL_DT)
    first = 0
    for k, (rows, a) in enumerate(zip(fl.rows, fl.autoscale)):
        out[k]["first"], out[k]["rows"] = first, rows
        out[k]["min_instances"] = out[k]["max_instances"] = fl.active[k]
        out[k]["warm_factor"] = 1.0
        out[k]["drain_timeout_us"] = -1
        first += rows
        if a is None:
            continue
        row = out[k]
        row["enabled"], row["drain"], row["warm_curve"], row["scale_down"] = 1, a.drain, a.warmup_curve, a.scale_down
        row["min_instances"], row["max_instances"] = a.min_instances, a.max_instances
        for f in ("interval_us", "metrics_delay_us", "provisioning_mean_us", "provisioning_std_us", "loading_mean_us",
                  "loading_std_us", "warmup_factor", "max_change", "drain_timeout_us"):
            row["warm_factor" if f == "warmup_factor" else f] = getattr(a, f)
        row["warm_requests"], row["warm_us"] = a.warmup_requests, a.warmup_us
        row["ticks_up"] = window_ticks(a.stabilization_up_us, a.interval_us)
        row["ticks_down"] = window_ticks(a.stabilization_down_us, a.interval_us)
        row["births"] = fl.active[k]
    return out


def life_rows(fl: Fleet) -> np.ndarray:
    """The ``life`` field: each pool's initial instances active (born in row order), its
    other rows off."""
    out = np.zeros(fl.n_inst, S.LIFE_DT)
    out["birth"] = -1
    first = 0
    for rows, active in zip(fl.rows, fl.active):
        out["state"][first:first + rows] = S.LifeState.OFF
        out["state"][first:first + active] = S.LifeState.ACTIVE
        out["birth"][first:first + active] = np.arange(active)
        first += rows
    return out


def scale_wish_rows(fl: Fleet, window: int) -> np.ndarray:
    """The ``scale_wish`` field: every pool's ticks before the first wish its initial count."""
    return np.repeat(np.asarray(fl.active, np.int64)[:, None], window, axis=1)


def slo_target_rows(workload) -> np.ndarray:
    """The ``slo_targets`` field: per SLO class id (the workload's slo_class names), its
    TTFT, TPOT and E2E targets in µs, -1 = none."""
    names = list((workload.names or {}).get("slo_class") or [])
    targets = workload.slo_targets or {}
    out = np.full((max(len(names), 1), 3), -1, np.int64)
    for c, name in enumerate(names):
        for j, key in enumerate(("ttft_ms", "tpot_ms", "e2e_ms")):
            v = (targets.get(name) or {}).get(key)
            if v is not None:
                out[c, j] = int(round(float(v) * 1e3))
    return out


def autoscale_sizes(fl: Fleet, n_slo_classes: int) -> dict[str, int]:
    """The autoscaling sizes (schema.state.SIZE_NAMES): minimal without an autoscaler."""
    if not autoscaled(fl):
        return {"n_slo_classes": max(n_slo_classes, 1), "scale_window": 1, "ttft_window": 1, "life_rows": 1,
                "scale_rows": 1}
    window = max(max(window_ticks(a.stabilization_up_us, a.interval_us),
                     window_ticks(a.stabilization_down_us, a.interval_us)) for a in fl.autoscale if a is not None)
    return {"n_slo_classes": max(n_slo_classes, 1), "scale_window": window, "ttft_window": S.TTFT_WINDOW,
            "life_rows": 4 * fl.n_inst + 64, "scale_rows": MIN_LOG_ROWS}


def scaler_event_capacity(fl: Fleet) -> int:
    """Autoscaler events the heap may hold at once: per pool a tick and its decisions still
    waiting for their metrics delay (one per tick of the delay, and one more), per
    instance row four LIFE events (its current transition or a warm-up end, a drain timeout,
    an eviction or the end of its last step, and one of an earlier life)."""
    if not autoscaled(fl):
        return 0
    return sum(a.metrics_delay_us // a.interval_us + 2 for a in fl.autoscale if a is not None) + 4 * fl.n_inst


def roofline_rows(fl: Fleet) -> np.ndarray:
    """The ``roofline`` field: one parameter row per deployment (``INSTANCE_DT.pool``)."""
    return np.ascontiguousarray(np.stack([np.asarray(lat.roofline, np.float64) for lat in fl.latencies]))


# Buckets of each instance's calendar (kernels/engine/calendar.py): a counted rider's
# next event is its last token, so a long request wakes up idly every 1023 steps.
CALENDAR_SIZE = 1024


def prefix_caching(config, workload) -> bool:
    """True if the run caches prefix blocks (enabled, and the workload has block keys)."""
    return bool(config.engine.enable_prefix_caching) and len(workload.block_keys) > 0


def named_positions(reqs: np.ndarray, workload, caching: bool) -> np.ndarray:
    """Each request's ``named_upto`` with event skipping (kernels/kv/cache.py): the
    positions of its blocks that may carry a key before it is ever preempted -- up to its
    last key that another request shares (its other keys are its own: registered only at
    a preemption); none without prefix caching."""
    out = np.zeros(len(reqs), np.int64)
    if not caching or len(reqs) == 0:
        return out
    shared = np.flatnonzero(workload.shared_keys())
    if shared.size:
        starts = reqs["key_start"]
        owner = np.searchsorted(starts, shared, side="right") - 1  # a request with no keys shares the next one's start
        np.maximum.at(out, owner, shared - starts[owner] + 1)
    return out


def settings_record(config, block_size: int, uses_prefix_index: bool, index_rows: int, max_events: int,
                    event_skipping: bool = True, trace_level: int = 0) -> np.ndarray:
    """The SETTINGS_DT record of a run."""
    s = config.simulation
    rec = np.zeros(1, S.SETTINGS_DT)
    rec["horizon_us"] = INT64_MAX if s.horizon is None else s.horizon
    rec["pause_at_us"] = INT64_MAX
    rec["block_size"] = block_size
    rec["prefix_caching"] = int(config.engine.enable_prefix_caching)
    rec["compat"] = int(s.compat is not None)
    rec["check_invariants"] = int(s.check_invariants)
    rec["prefix_index"] = int(uses_prefix_index)
    rec["prefix_index_capacity"] = config.policy.prefix_index_capacity
    rec["prefix_index_slots"] = index_rows
    rec["admission_latency_us"] = s.admission_latency
    rec["routing_latency_us"] = s.routing_latency
    rec["max_events"] = max_events
    rec["event_skipping"] = int(event_skipping)
    rec["trace_level"] = trace_level
    rec["forced_request"] = -1
    rec["forced_instance"] = -1
    rec["calendar_size"] = CALENDAR_SIZE
    return rec


def loop_record() -> np.ndarray:
    """A fresh LOOP_DT record: clock 0, empty heap, no event processed."""
    rec = np.zeros(1, S.LOOP_DT)
    rec["error_instance"] = -1
    rec["error_request"] = -1
    rec["error_kind"] = -1
    return rec


def key_sharing(workload, keys: np.ndarray, needed: bool, counted: int | None = None) -> tuple[np.ndarray, int]:
    """(uint8 per key: 1 if its value occurs at another position too, at least the number
    of distinct such values: ``counted`` when the caller counted them, else the number of
    shared positions).  Keys nobody else carries are cached and indexed without hashing
    (kernels/kv/cache.py, the router's prefix index); a generated workload knows which
    keys those are, a trace's are counted.  Minimal when nothing reads them."""
    if not needed:
        return np.zeros(1, np.uint8), 0
    flags = np.ascontiguousarray(workload.shared_keys(), dtype=np.uint8)
    if counted is not None:
        return flags, counted
    return flags, int(np.count_nonzero(flags))  # an upper bound on the distinct values: enough for sizing


def kv_memo(n_inst: int) -> np.ndarray:
    """The instances' ``kv_memo`` rows (schema KvMemo): no prompt lookup yet."""
    memo = np.zeros((n_inst, S.N_KV_MEMO + S.KV_MEMO_BLOCKS), np.int64)
    memo[:, S.KvMemo.CHANGES] = -1
    return memo


def router_memo(n_inst: int) -> np.ndarray:
    """The router's ``pi_memo`` (schema RouterMemo): no leading-key walk yet."""
    memo = np.zeros(S.N_ROUTER_MEMO + 2 * ((n_inst + 63) // 64), np.int64)
    memo[S.RouterMemo.VERSION] = -1
    return memo


def distinct_shared_values(workload) -> int:
    """The number of different values among the workload's shared keys (each occurs at two
    positions or more): what the prefix tables must hold at most.  A sort of the shared
    positions' keys (~25 ms for 10K chatbot requests): worth it when many runs share the
    workload (blis_fast.batch counts once per scenario)."""
    shared = workload.shared_keys().view(bool)
    return int(np.unique(workload.block_keys[shared]).size)


def check_kv_blocks(cfg, latency, deployments: tuple = ()) -> None:
    """ConfigError if the cluster has 2^31 KV blocks or more (block ids are int32)."""
    fl = fleet(cfg, latency, deployments)
    if fl.kv_blocks >= 2**31:  # block ids are int32 in the KV block table
        if len(fl.rows) == 1:
            raise ConfigError("deployment.max_instances",
                              f"{fl.n_inst} instances x {latency.total_kv_blocks} KV blocks exceeds 2^31 blocks; "
                              "lower the instance count or engine.total_kv_blocks")
        raise ConfigError("deployments", f"the deployments' {fl.n_inst} instances have {fl.kv_blocks} KV blocks in "
                                         "all, at least 2^31; lower their instances or total_kv_blocks")


def state_sizes(cfg, latency, n: int, n_keys: int, n_blocks: int, n_shared: int, uses_prefix_index: bool,
                scheduler_kind: int, trace_level: int = 0, caching: bool | None = None, n_tenants: int = 1,
                n_arrivals: int | None = None, deployments: tuple = (), n_slo_classes: int = 1,
                flow: FlowLayout | None = None, agents: AgentTables | None = None) -> dict[str, int]:
    """The named sizes (``schema.state.SIZE_NAMES``) of a run of ``n`` requests with
    ``n_keys`` block keys (``n_shared`` distinct shared values at most) and ``n_blocks``
    request-block slots: what every State field's shape is computed from.  ``caching``:
    whether prefix blocks are cached (default: the engine setting, when there are keys).
    ``deployments``: ``Setup.deployments`` (``fleet``); ``flow``: the run's flow control
    and deadlines (run/flow.py; None: none)."""
    eng = cfg.engine
    fl = fleet(cfg, latency, deployments)
    n_inst = fl.n_inst
    n_pd = n if any_disaggregated(deployments) else 0  # requests with a prefill-leg row each
    tiers = tier_layout(fl, n_shared)
    n_loads = S.N_TIERS * (n + n_pd) if tiers.enabled else 0  # load transfers: one per request row and tier
    if caching is None:
        caching = bool(eng.enable_prefix_caching) and n_keys > 0
    # an instance's prefix table holds shared keys only, at most one per block: sizing by the
    # smaller keeps huge KV caches from costing memory (rows alike for every instance: the
    # largest KV cache's)
    ht_rows = next_pow2(2 * max(1, min(fl.max_kv_total, n_shared)))
    inst_words = (n_inst + 63) // 64
    decisions, full = trace_level >= S.TraceLevel.DECISIONS, trace_level >= S.TraceLevel.FULL
    sizes = {
        "n_requests": n + n_pd, "n_arrivals": n if n_arrivals is None else n_arrivals, "n_keys": n_keys,
        "n_flags": n_keys if caching or uses_prefix_index else 1, "n_kv_slots": n_keys if caching else 1,
        "n_blocks": n_blocks, "n_inst": n_inst, "inst_words": inst_words, "max_num_seqs": fl.max_num_seqs,
        "calendar_size": CALENDAR_SIZE, "block_size": fl.max_block_size, "kv_blocks": fl.kv_blocks,
        "kv_table_rows": n_inst * ht_rows, "heap_rows": event_capacity(n + n_pd, n_inst, n_pd, n_loads),
        "step_rows": max(MIN_LOG_ROWS, 2 * n), "irr_rows": MIN_LOG_ROWS,
        # each request is decided once; the preemption and scheduling logs grow as needed (run.runner.grow_logs)
        "decision_rows": max(n + n_pd, 1) if decisions else 1, "preempt_rows": MIN_LOG_ROWS if decisions else 1,
        "sched_rows": max(n, MIN_LOG_ROWS) if full else 1, "sched_open_rows": n_inst if full else 1,
        "n_tenants": n_tenants, "cohort_members": 1,
        "n_sort": n + n_pd if scheduler_kind != S.SchedulerKind.FCFS else 1,
        "pi_table_rows": 2, "pi_ring": 1, "gmap_rows": 2,  # same types, minimal sizes when the index is off
        "n_deployments": len(fl.rows), "n_models": max(fl.models) + 1, "n_routes": fl.n_routes,
        "n_pd_requests": max(n_pd, 1),
        **tier_sizes(tiers, n + n_pd, n_blocks),
        **autoscale_sizes(fl, n_slo_classes),
        **flow_sizes(flow, n + n_pd, n_inst, decisions),
        **agent_sizes(agents, n + n_pd),
    }
    sizes["heap_rows"] += scaler_event_capacity(fl)
    if flow is not None and flow.on:
        sizes["heap_rows"] = event_capacity(n + n_pd, n_inst, n_pd, n_loads, flow.n_ttl,
                                            flow.n_models if flow.flow else 0, flow.n_stale) + scaler_event_capacity(fl)
        if decisions and flow.attempts:  # each attempt is admitted (and routed) once
            sizes["decision_rows"] = max(flow.attempts, 1)
    if uses_prefix_index:
        # keys only one request carries never match: the index keeps just their LRU place, so
        # its hash tables need room for the shared key values only
        cap = cfg.policy.prefix_index_capacity
        sizes["pi_table_rows"] = n_inst * next_pow2(2 * max(1, min(cap, n_shared)))
        sizes["pi_ring"] = 2 * cap  # ring entries (compacted when full); a record owns one current entry
        sizes["gmap_rows"] = next_pow2(2 * max(1, min(n_inst * cap, n_shared)))
    return sizes


def field_bytes(sizes: dict[str, int]) -> dict[str, int]:
    """Bytes of each State field for ``sizes``."""
    shapes = state_shapes(**sizes)
    return {f.name: math.prod(shape) * np.dtype(f.dtype).itemsize for f, shape in zip(STATE_FIELDS, shapes)}


def estimate_state_bytes(cfg, latency, n: int, n_keys: int, n_blocks: int, uses_prefix_index: bool,
                         scheduler_kind: int, shared_known: bool = True, n_shared: int | None = None,
                         trace_level: int = 0, n_tenants: int = 1, deployments: tuple = (),
                         flow: FlowLayout | None = None, agents: AgentTables | None = None) -> dict[str, int]:
    """Bytes ``build_state`` allocates for ``n`` requests with ``n_keys`` block keys (of
    which ``n_shared`` are shared; default all) and ``n_blocks`` request-block slots, by
    family (``Field.family``: the memory budget's estimate); when the keys' sharing is not
    known it is counted (16 bytes per key, ``key_sharing``).  ``deployments``: as
    ``state_sizes``."""
    sizes = state_sizes(cfg, latency, n, n_keys, n_blocks, n_keys if n_shared is None else n_shared,
                        uses_prefix_index, scheduler_kind, trace_level, n_tenants=n_tenants, deployments=deployments,
                        flow=flow, agents=agents)
    parts: dict[str, int] = {}
    for f, nbytes in zip(STATE_FIELDS, field_bytes(sizes).values()):
        if f.family:
            parts[f.family] = parts.get(f.family, 0) + nbytes
    if not shared_known:
        parts["block-key tables"] += 16 * n_keys
    return parts


def describe_estimate(parts: dict, cfg, latency, n: int, n_keys: float, deployments: tuple = ()) -> str:
    """'the run (... requests, ... keys; largest: the KV block table: 64 instances x ...)'."""
    big = max(parts, key=parts.get)
    fl = fleet(cfg, latency, deployments)
    n_inst = fl.n_inst
    kv = (f"{n_inst} instances x {latency.total_kv_blocks} KV blocks" if len(fl.rows) == 1
          else f"{n_inst} instances, {fl.kv_blocks} KV blocks in all")
    detail = {"KV block table": kv,
              "instance tables": f"{n_inst} instances x max_num_seqs {fl.max_num_seqs}",
              "router prefix index": f"{n_inst} instances x prefix_index_capacity {cfg.policy.prefix_index_capacity}",
              "decision trace": f"{n} requests traced (simulation.trace_level decisions)",
              "scheduling trace": f"{n} requests traced (simulation.trace_level full)",
              }.get(big, f"{n} requests, {int(n_keys)} KV block keys")
    return f"the run ({n} requests, {int(n_keys)} KV block keys; largest part: the {big}, {detail})"


def workload_sizes(workload, block_size, kv_total: int, compat: bool) -> tuple[int, int, int]:
    """(request-block slots, prompt + output tokens, tenants) of a workload: what sizes a
    run's tables, whatever the policy (requests that can never fit get no block slots;
    N = 0 counts as one output token)."""
    n_blocks = int(block_slots(workload, block_size, kv_total, compat)[1].sum())
    work_tokens = int(workload.prompt_len.sum() + np.maximum(workload.output_len, 1).sum())
    n_tenants = int(workload.column("tenant").max()) + 1 if len(workload) else 1
    return n_blocks, work_tokens, n_tenants


@dataclass(frozen=True)
class ScenarioTables:
    """What every run of one workload under one resolved config shares, whatever the
    policy: made once by ``scenario_tables`` (blis_fast.batch, per scenario) and handed to
    ``build_state``, which then copies or reads instead of computing."""

    request_rows: np.ndarray  # the initial request table (request_table)
    arrival_order: np.ndarray
    n_blocks: int  # request-block slots
    shared_positions: int  # positions of shared keys
    shared_values: int  # distinct shared key values (distinct_shared_values): sizes the prefix tables
    work_tokens: int  # prompt + output tokens of all requests
    n_tenants: int


def scenario_tables(setup, workload) -> ScenarioTables:
    """``ScenarioTables`` of ``workload`` under ``setup``, after checking the workload."""
    workload.validate()
    cfg = setup.config
    bs, kv_total = workload.request_block_sizes(), fleet(cfg, setup.latency, setup.deployments).max_kv_total
    compat = cfg.simulation.compat is not None
    n_blocks, work_tokens, n_tenants = workload_sizes(workload, bs, kv_total, compat)
    return ScenarioTables(
        request_rows=request_table(workload, bs, kv_total, compat, prefix_caching(cfg, workload)),
        arrival_order=arrival_order(workload),
        n_blocks=n_blocks,
        shared_positions=int(np.count_nonzero(workload.shared_keys())),
        shared_values=distinct_shared_values(workload),
        work_tokens=work_tokens,
        n_tenants=n_tenants,
    )


def _workload_block_sizes(workload, n_models: int) -> tuple[int, ...]:
    """The block size a workload's keys have for each of ``n_models`` served models."""
    if workload.model_block_sizes:
        return tuple(workload.model_block_sizes)
    return (int(workload.block_size),) * n_models


def _block_size_text(workload) -> str:
    return ", ".join(str(b) for b in workload.model_block_sizes) or str(workload.block_size)


def allocate_state(sizes: dict[str, int], given: dict[str, np.ndarray], arrays: StateArrays) -> S.State:
    """The State of ``sizes`` (``state_sizes``): every field as ``STATE_FIELDS`` declares
    it -- GIVEN ones from ``given`` (checked against the declared type and shape), the
    others from ``arrays`` with their initial content.  Arrays that are read-only or
    unaligned are copied: the loop takes writable, aligned arrays only (kernels/aot.py) --
    inputs unpickled on a distributed worker (read-only, and unaligned in dask's frames) or
    memory-mapped."""
    out = []
    for f, shape in zip(STATE_FIELDS, state_shapes(**sizes)):
        if f.init == GIVEN:
            a = given[f.name]
            if a.dtype != f.dtype or a.shape != shape:
                raise AssertionError(f"State.{f.name}: built as {a.dtype}{a.shape}, declared {f.dtype}{shape}")
        elif f.init == ZEROS:
            a = arrays.zeros(f.name, shape, f.dtype)
        elif f.init == MINUS_ONE:
            a = arrays.full(f.name, shape, -1, f.dtype)
        elif f.init == LOG:
            a = arrays.log(f.name, shape[0], f.dtype)
        else:  # SCRATCH
            a = arrays.scratch(f.name, shape, f.dtype)
        out.append(a if a.flags.writeable and a.flags.aligned else a.copy())
    return S.State(*out)


def _memory_hint(parts: dict[str, int]) -> str:
    """What to change when the largest part of the estimate does not fit, if a setting of
    the run's own is to blame (the trace)."""
    if max(parts, key=parts.get) in ("decision trace", "scheduling trace"):
        return "trace a smaller workload (simulation.trace_level none)"
    return ""


def build_state(setup, workload, policy=None, *, event_skipping: bool = True, trace_level: int = 0,
                scenario: ScenarioTables | None = None, arrays: StateArrays | None = None,
                agents: AgentTables | None = None) -> S.State:
    """Allocate and fill the State of one run of ``workload`` under ``setup`` (a resolved
    config); ``policy`` (blis_fast.policy.CompiledPolicies) defaults to the config's.
    ``event_skipping=False`` visits every running request every step (the reference path
    the tests compare the event-skipping engine with; the results are identical).
    ``scenario``: ``scenario_tables(setup, workload)``, what many runs share (the request
    table is copied rather than built, the workload was checked when it was made, and the
    prefix tables are sized to the distinct shared key values rather than to the shared
    positions -- a popular prefix is one value at thousands of positions).  ``arrays``:
    where the large arrays come from (``StateArrays``; default fresh ones).  Every field is
    allocated as ``schema.state.STATE_FIELDS`` declares it (``allocate_state``)."""
    cfg = setup.config
    eng = cfg.engine
    wanted = model_block_sizes(cfg.deployment_list())
    if _workload_block_sizes(workload, len(wanted)) != wanted:
        raise ConfigError("workload", f"was built for block size {_block_size_text(workload)}, the deployments' models "
                                      f"use {', '.join(str(b) for b in wanted)}")
    bs = workload.request_block_sizes()
    if scenario is None:
        workload.validate()  # (a Workload changed with dataclasses.replace is not re-validated)
    pol = policy if policy is not None else compile_policies(cfg.policy)
    # a decision trace records each candidate's matched prefix blocks: the router keeps its
    # prefix index then even if the policy does not read it (routing is unchanged)
    use_index = pol.uses_prefix_index or trace_level >= S.TraceLevel.DECISIONS
    n = len(workload)
    lat = setup.latency
    deps = setup.deployments
    fl = fleet(cfg, lat, deps)
    kv_total = fl.max_kv_total  # (a request that fits no instance gets no block slots)
    check_kv_blocks(cfg, lat, deps)
    # cheap checks and the memory estimate first: nothing large is allocated for a run that cannot fit
    compat = cfg.simulation.compat is not None

    if scenario is not None:
        n_blocks, work_tokens, n_tenants = scenario.n_blocks, scenario.work_tokens, scenario.n_tenants
        shared_known, n_shared = True, min(scenario.shared_positions, scenario.shared_values)
    else:
        n_blocks, work_tokens, n_tenants = workload_sizes(workload, bs, kv_total, compat)
        shared = workload.key_shared
        shared_known, n_shared = shared is not None, int(np.count_nonzero(shared)) if shared is not None else None
    n_keys = len(workload.block_keys)
    pd = any_disaggregated(deps)
    factor = 2 if pd else 1  # the prefill legs' block slots: at most the requests' (run/disaggregation.py)
    flow_kind, flow_param = pol.flow_rows(setup.served_models)
    flay = flow_layout(flow_kind, flow_param, workload, n_tenants)
    check_flow_support(flay, pd, tier_layout(fl, n_shared or 0).enabled)
    parts = estimate_state_bytes(cfg, lat, n, n_keys, factor * n_blocks, use_index, pol.scheduler_kind,
                                 shared_known=shared_known, n_shared=n_shared, trace_level=trace_level,
                                 n_tenants=n_tenants, deployments=deps, flow=flay, agents=agents)
    memory.charge(sum(parts.values()), describe_estimate(parts, cfg, lat, n, n_keys, deps), _memory_hint(parts))
    caching = prefix_caching(cfg, workload)
    arrays = arrays if arrays is not None else StateArrays()
    if scenario is None:
        reqs = request_table(workload, bs, kv_total, compat, caching)
    else:
        reqs = arrays.copy("reqs", scenario.request_rows)
    keys = np.ascontiguousarray(workload.block_keys, dtype=np.int64)
    if len(keys) >= 2**31:  # blocks record their key's position as int32
        raise ConfigError("workload", f"{len(keys)} block keys exceed 2^31; use fewer or shorter requests")
    key_shared, n_shared = key_sharing(workload, keys, caching or use_index, None if scenario is None else n_shared)
    order = arrival_order(workload) if scenario is None else scenario.arrival_order
    check_pd_policy(pol, setup)
    pd_models = pd_model_rows(setup, pol)
    if pd:
        reqs, n_blocks = add_prefill_legs(reqs, n_blocks, pd_models, bs)
    slo_targets = slo_target_rows(workload)
    sizes = state_sizes(cfg, lat, n, len(keys), n_blocks, n_shared, use_index, pol.scheduler_kind, trace_level,
                        caching, n_tenants, len(order), deps, len(slo_targets), flay, agents)
    n_inst = fl.n_inst
    s = cfg.simulation
    max_events = s.max_events if s.max_events is not None else (16 * factor * (work_tokens + 8 * n) + 1_000_000
                                                                + agent_event_budget(agents))
    if s.max_events is None and flay.attempts > n:  # retries: each attempt may redo its request's work
        max_events *= -(-flay.attempts // n)
    if not event_skipping:  # the reference path: every block named (kernels/kv/cache.py)
        reqs["named_upto"] = S.ALL_NAMED
    settings = settings_record(cfg, fl.max_block_size, use_index, sizes["pi_table_rows"] // n_inst if use_index else 1,
                               max_events, event_skipping, trace_level)
    settings["pd_base"] = n if pd else 0
    settings["autoscaled"] = int(autoscaled(fl))
    sim = cfg.simulation  # the delay draws' seed: simulation_seed, else the workload's
    settings["autoscale_seed"] = (sim.workload_seed if sim.simulation_seed is None else sim.simulation_seed) \
        if autoscaled(fl) else 0
    settings["flow"] = int(flay.flow)
    settings["deadlines"] = int(flay.deadlines)
    settings["flow_seed"] = (sim.workload_seed if sim.simulation_seed is None else sim.simulation_seed) \
        if flay.deadlines else 0
    agent_settings(agents, workload, settings)
    given = {
        "settings": settings,
        "loop": loop_record(), "reqs": reqs, "arrival_order": order, "keys": keys, "key_shared": key_shared,
        "inst": instance_table(fl, sizes["kv_table_rows"] // n_inst),
        "kv_memo": kv_memo(n_inst),
        "roofline": roofline_rows(fl),
        "policy_kind": np.ascontiguousarray(pol.kinds, dtype=np.int64),
        "policy_param": np.ascontiguousarray(pol.params, dtype=np.float64),
        **dict(zip(("routing_kind", "routing_param"), routing_group_rows(pol, setup))),
        # one candidate: a cohort of one (blis_fast.batch.cohorts makes larger ones)
        "cohort": np.array(pol.params[S.PolicySlot.ROUTING], np.float64).reshape(1, -1),
        "tb_tokens": np.full(n_tenants, cfg.policy.token_bucket_capacity, np.float64),  # buckets start full
        # the reference's router starts with an all-zero snapshot taken at time 0 (compat);
        # otherwise each field is first read at the first routing decision
        "snap_refreshed": np.full(S.N_SNAP, 0 if compat else -1, np.int64),
        "pi_memo": router_memo(n_inst),
        "pd_inst": pd_instance_rows(fl.roles, fl.rows),
        "pd_models": pd_models,
        "pd_reqs": pd_request_rows(n if pd else 0),
        **dict(zip(("kv_tier_inst", "tiers"), tier_rows(fl, tier_layout(fl, n_shared)))),
        "tier_reqs": tier_request_rows(sizes["n_tier_requests"]),
        "life": life_rows(fl), "scale_pools": scale_pool_rows(fl),
        "scale_wish": scale_wish_rows(fl, sizes["scale_window"]), "slo_targets": slo_targets,
        **flow_rows(flay, workload, reqs, sizes["n_models"]), "flow_kind": flow_kind, "flow_param": flow_param,
        **agent_rows(agents, n + (n if pd else 0), sizes),
    }
    return allocate_state(sizes, given, arrays)
