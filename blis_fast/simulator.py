"""From a validated SimConfig and a Workload to the kernel's tables, and back.

``simulate()`` is the public entry point:

    resolve (model, GPU, latency model, KV blocks) -> build the workload -> allocate the
    state tables (kernels.dtypes) -> kernels.engine.simulate_cluster -> Result

Numba is imported only when a run actually starts, so the CLI's ``--help`` and config
validation stay instant.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from blis_fast.config import (
    HardwareConfig,
    LatencyModel,
    ModelConfig,
    load_hardware,
    load_model_config,
    resolve_latency_model,
)
from blis_fast.config.sim import SimConfig, build_config, flag_for
from blis_fast.errors import ConfigError, SimulationError
from blis_fast.policy import compile_policies
from blis_fast.workload import DistributionSpec, Workload, generate_distribution, load_blis_trace, load_preset
from kernels import dtypes as D

INT64_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True, eq=False)
class Setup:
    """A SimConfig resolved against the shipped data: model facts, GPU, latency model."""

    config: SimConfig
    model: ModelConfig
    hardware: HardwareConfig
    latency: LatencyModel

    @property
    def compat(self) -> bool:
        """True in blis-2026.02 compatibility mode."""
        return self.config.simulation.compat is not None


def resolve(config: SimConfig) -> Setup:
    """Resolve model, hardware and latency model (ConfigError on anything unknown)."""
    model = load_model_config(config.model)
    hardware = load_hardware(config.hardware)
    latency = resolve_latency_model(
        model, hardware, config.engine, config.model,
        latency_model=config.latency_model, alpha_coeffs=config.alpha_coeffs,
        beta_coeffs=config.beta_coeffs, vllm_version=config.vllm_version,
    )
    return Setup(config, model, hardware, latency)


def distribution_spec(config: SimConfig) -> DistributionSpec:
    """The DistributionSpec of a non-trace workload: preset values, then explicit settings."""
    w = config.workload
    params = load_preset(w.type) if w.type != "distribution" else {}
    for f in fields(DistributionSpec):
        value = getattr(w, f.name, None)
        if value is not None:
            params[f.name] = value
    params["rate"] = w.rate
    params["num_requests"] = w.num_requests
    params["arrival"] = w.arrival or ("constant" if config.simulation.compat else "poisson")
    try:
        return DistributionSpec(**params).validate("workload")
    except ConfigError as exc:  # name the flag too: the value may come from a preset or a flag
        raise ConfigError(f"{exc.field} ({flag_for(exc.field)})", exc.message) from None


def build_workload(config: SimConfig) -> Workload:
    """Generate or load the workload the config describes."""
    w = config.workload
    bs = config.engine.block_size
    if w.spec_filepath:  # a workload spec replaces the workload type (docs/workloads.md)
        from blis_fast.workload.generate import generate_from_spec
        from blis_fast.workload.spec import load_spec

        spec = load_spec(w.spec_filepath)
        seed = config.simulation.seed if config.simulation.seed is not None else spec.effective_seed
        return generate_from_spec(spec, seed, bs)
    if w.type == "traces":
        from blis_fast.workload.trace_format import is_rich_trace, load_trace

        if is_rich_trace(w.traces_filepath):
            return load_trace(w.traces_filepath, bs)
        rounding = "trunc" if config.simulation.compat else "round"
        return load_blis_trace(w.traces_filepath, bs, arrival_rounding=rounding)
    return generate_distribution(distribution_spec(config), config.simulation.workload_seed, bs)


@dataclass(eq=False)
class RunState:
    """Every table the kernel reads or mutates (dtypes in kernels.dtypes)."""

    sim: np.ndarray
    reqs: np.ndarray
    arrival_order: np.ndarray
    keys: np.ndarray
    req_blocks: np.ndarray
    inst: np.ndarray
    batch: np.ndarray
    work: np.ndarray
    context: np.ndarray
    blocks: np.ndarray
    slots: np.ndarray
    heap: np.ndarray
    roofline: np.ndarray
    step_log: np.ndarray
    irr_log: np.ndarray
    done_buf: np.ndarray
    stats: np.ndarray
    # --- policies (blis_fast.policy) and their state
    adm_params: np.ndarray
    tb_tokens: np.ndarray
    tb_last_us: np.ndarray
    route_weights: np.ndarray
    prio_params: np.ndarray
    sched_weights: np.ndarray
    snap: np.ndarray
    snap_refreshed: np.ndarray
    snap_interval: np.ndarray
    affinity: np.ndarray
    alive: np.ndarray
    pi_state: np.ndarray
    pi_slots: np.ndarray
    pi_ring: np.ndarray
    key_shared: np.ndarray
    gmap: np.ndarray
    sort_ids: np.ndarray
    sort_keys: np.ndarray
    sort_tmp_ids: np.ndarray
    sort_tmp_keys: np.ndarray


def _next_pow2(x: int) -> int:
    return 1 << max(int(x) - 1, 1).bit_length()


def _arrival_order(workload: Workload) -> np.ndarray:
    independent = np.flatnonzero(~workload.is_dependent)
    return independent[np.argsort(workload.arrival_us[independent], kind="stable")].astype(np.int64)


def build_state(setup: Setup, workload: Workload) -> RunState:
    """Allocate and fill the state tables for one run."""
    cfg = setup.config
    eng = cfg.engine
    bs = eng.block_size
    if workload.block_size != bs:
        raise ConfigError("workload", f"was built for block size {workload.block_size}, engine uses {bs}")
    workload.validate()  # (a Workload changed with dataclasses.replace is not re-validated)
    n = len(workload)
    lat = setup.latency

    reqs = np.zeros(n, D.REQUEST_DT)
    reqs["arrival_us"] = workload.arrival_us
    reqs["prompt_len"] = workload.prompt_len
    out_eff = np.maximum(workload.output_len, 1)  # N = 0 behaves as N = 1 (prefill emits one token)
    reqs["output_len"] = out_eff
    reqs["key_start"] = workload.key_offsets[:-1]
    reqs["key_count"] = np.diff(workload.key_offsets)
    # most KV a request ever holds: prompt + all outputs but the last (never fed back)
    block_cap = (workload.prompt_len + out_eff - 1 + bs - 1) // bs
    reqs["block_cap"] = block_cap
    reqs["block_start"] = np.concatenate(([0], np.cumsum(block_cap)[:-1])) if n else []
    for name in workload.ATTRIBUTES:
        reqs[name] = workload.column(name)
    for f in ("instance", "queue_prev", "queue_next", "routed_us", "queued_us", "first_scheduled_us",
              "first_token_us", "last_token_us", "run_start_step", "last_token_step"):
        reqs[f] = -1

    lo, hi = cfg.deployment.bounds()
    n_inst = hi  # rows for the pool's upper bound; the first num_instances start active
    kv_total = lat.total_kv_blocks
    if n_inst * kv_total >= 2**31:  # block ids are int32 in the KV block table
        raise ConfigError("deployment.max_instances",
                          f"{n_inst} instances x {kv_total} KV blocks exceeds 2^31 blocks; lower the instance count "
                          "or engine.total_kv_blocks")
    inst = np.zeros(n_inst, D.INSTANCE_DT)
    inst["active"][: cfg.deployment.num_instances] = 1
    inst["max_num_seqs"] = eng.max_num_seqs
    inst["max_batched_tokens"] = eng.max_num_batched_tokens
    inst["long_prefill_threshold"] = eng.long_prefill_token_threshold
    inst["latency_kind"] = D.LAT_BLACKBOX if lat.kind == "blackbox" else D.LAT_ROOFLINE
    for k in range(3):
        inst[f"alpha{k}"] = lat.alpha[k]
        inst[f"beta{k}"] = lat.beta[k]
    inst["kv_total"] = kv_total
    inst["kv_offset"] = np.arange(n_inst, dtype=np.int64) * kv_total
    inst["kv_virgin_next"] = inst["kv_offset"]
    # an instance's prefix table holds at most one key per block, and never more keys than
    # the workload has: sizing by the smaller keeps huge KV caches from costing memory
    ht_size = _next_pow2(2 * max(1, min(kv_total, len(workload.block_keys))))
    inst["ht_offset"] = np.arange(n_inst, dtype=np.int64) * ht_size
    inst["ht_mask"] = ht_size - 1
    for f in ("kv_lru_head", "kv_lru_tail", "wq_head", "wq_tail", "prev_step"):
        inst[f] = -1

    sim = np.zeros(1, D.SIM_DT)
    s = cfg.simulation
    sim["horizon_us"] = INT64_MAX if s.horizon is None else s.horizon
    sim["block_size"] = bs
    sim["prefix_caching"] = int(eng.enable_prefix_caching)
    sim["compat"] = int(s.compat is not None)
    sim["check_invariants"] = int(s.check_invariants)
    pol = compile_policies(cfg.policy)
    sim["admission_kind"] = pol.admission_kind
    sim["routing_kind"] = pol.routing_kind
    sim["scheduler_kind"] = pol.scheduler_kind
    sim["victim_kind"] = pol.victim_kind
    sim["priority_active"] = int(pol.priority_active)
    sim["prefix_index"] = int(pol.uses_prefix_index)
    pi_cap = cfg.policy.prefix_index_capacity
    sim["prefix_index_capacity"] = pi_cap
    sim["admission_latency_us"] = s.admission_latency
    sim["routing_latency_us"] = s.routing_latency
    work_tokens = int(workload.prompt_len.sum() + out_eff.sum())
    sim["max_events"] = s.max_events if s.max_events is not None else 16 * (work_tokens + 8 * n) + 1_000_000

    itl_cap = max(1024, 2 * n)
    n_tenants = int(reqs["tenant"].max()) + 1 if n else 1
    n_words = (n_inst + 63) // 64
    pi_slots_per = 1
    if pol.uses_prefix_index:
        from kernels.prefix_index import mark_shared_keys

        # keys only one request carries never match: the index keeps just their LRU place,
        # so its hash tables need room for the shared keys only
        key_shared, n_shared = mark_shared_keys(np.ascontiguousarray(workload.block_keys, dtype=np.int64))
        pi_slots_per = _next_pow2(2 * max(1, min(pi_cap, n_shared)))
        pi_slots = np.zeros(2 * n_inst * pi_slots_per, np.int64)
        pi_ring = np.zeros((n_inst, 2 * pi_cap, 2), np.int64)  # touch records; compacted when full
        gmap = np.zeros((_next_pow2(2 * max(1, min(n_inst * pi_cap, n_shared))), 1 + n_words), np.int64)
    else:  # same types, minimal sizes: the kernel signature does not depend on the policy
        pi_slots = np.zeros(2, np.int64)
        pi_ring = np.zeros((n_inst, 1, 2), np.int64)
        gmap = np.zeros((1, 1 + n_words), np.int64)
        key_shared = np.zeros(1, np.uint8)
    pi_state = np.zeros((n_inst, 4), np.int64)
    sim["prefix_index_slots"] = pi_slots_per
    n_sort = n if pol.scheduler_kind == D.SCHED_SORT else 1
    snap_refreshed = np.full(D.N_SNAP, -1, np.int64)
    # record tables as recarrays: identical to numba (same type, same signature), and rows
    # support attribute access when the kernels run as plain Python (NUMBA_DISABLE_JIT=1)
    rec = np.recarray
    return RunState(
        sim=sim.view(rec),
        reqs=reqs.view(rec),
        # the pre-sorted arrival stream: requests whose arrival is known up front (closed-loop
        # followers arrive when their predecessor completes)
        arrival_order=_arrival_order(workload),
        keys=np.ascontiguousarray(workload.block_keys, dtype=np.int64),
        req_blocks=np.zeros(int(block_cap.sum()), np.int64),
        inst=inst.view(rec),
        batch=np.zeros((n_inst, eng.max_num_seqs), np.int64),
        work=np.zeros(eng.max_num_seqs, np.int64),
        context=np.zeros(eng.max_num_seqs, np.int64),
        # zeros: untouched pages cost nothing, so millions of KV blocks are cheap until used
        blocks=np.zeros(n_inst * kv_total, D.KV_BLOCK_DT).view(rec),
        slots=np.zeros(2 * n_inst * ht_size, np.int64),  # (key, block + 1) pairs
        heap=np.zeros(n + 4 * n_inst + 64, D.EVENT_DT).view(rec),
        roofline=np.ascontiguousarray(lat.roofline, dtype=np.float64),
        step_log=np.zeros((itl_cap, 2), np.int64),
        irr_log=np.zeros((1024, 5), np.int64),
        done_buf=np.zeros(eng.max_num_seqs, np.int64),
        stats=np.zeros(1, D.RUN_STATS_DT).view(rec),
        adm_params=pol.admission_params,
        tb_tokens=np.full(n_tenants, cfg.policy.token_bucket_capacity, np.float64),  # buckets start full
        tb_last_us=np.zeros(n_tenants, np.int64),
        route_weights=pol.route_weights,
        prio_params=pol.priority_params,
        sched_weights=pol.scheduler_weights,
        snap=np.zeros((n_inst, D.N_SNAP), np.float64),
        snap_refreshed=snap_refreshed,
        snap_interval=pol.snapshot_intervals,
        affinity=np.zeros(n_inst, np.int64),
        alive=np.zeros(n_words, np.int64),
        pi_state=pi_state,
        pi_slots=pi_slots,
        pi_ring=pi_ring,
        key_shared=key_shared,
        gmap=gmap,
        sort_ids=np.zeros(n_sort, np.int64),
        sort_keys=np.zeros(n_sort, np.float64),
        sort_tmp_ids=np.zeros(n_sort, np.int64),
        sort_tmp_keys=np.zeros(n_sort, np.float64),
    )


def run_kernel(state: RunState) -> RunState:
    """Run the engine kernel on ``state`` (mutated in place); raise SimulationError on a bad status."""
    from kernels.engine import simulate_cluster  # numba loads here, not at import

    state.step_log, state.irr_log = simulate_cluster(
        state.sim, state.reqs, state.arrival_order, state.keys, state.req_blocks, state.inst, state.batch,
        state.work, state.context, state.blocks, state.slots, state.heap, state.roofline,
        state.step_log, state.irr_log, state.done_buf, state.stats,
        state.adm_params, state.tb_tokens, state.tb_last_us, state.route_weights, state.prio_params,
        state.sched_weights, state.snap, state.snap_refreshed, state.snap_interval, state.affinity, state.alive,
        state.pi_state, state.pi_slots, state.pi_ring, state.gmap, state.key_shared,
        state.sort_ids, state.sort_keys, state.sort_tmp_ids, state.sort_tmp_keys,
    )
    status = int(state.stats[0]["status"])
    if status != D.STATUS_OK:
        st = state.stats[0]
        where = []
        if st["error_instance"] >= 0:
            where.append(f"instance_{st['error_instance']}")
        if st["error_request"] >= 0:
            where.append(f"request_{st['error_request']}")
        at = f" ({', '.join(where)}, t={st['clock_us']} µs)" if where else f" (t={st['clock_us']} µs)"
        raise SimulationError(D.STATUS_MESSAGES.get(status, f"status {status}") + at)
    return state


def simulate(config: SimConfig | dict | None = None, workload: Workload | None = None, **overrides):
    """Simulate one run and return a :class:`blis_fast.results.Result`.

    ``config`` is a SimConfig, a dict shaped like the YAML file, or None (defaults);
    ``overrides`` are flat setting names as on the CLI (``num_instances=4``, ``rate=20``).
    ``workload`` replaces the one the config describes (it must use the engine's block size);
    a string is taken as the workload type (``workload="chatbot"``).
    """
    from blis_fast.results import Result

    if isinstance(workload, str):  # the flat setting ``workload="chatbot"``, not a Workload
        overrides["workload"] = workload
        workload = None
    if isinstance(config, SimConfig):
        cfg = build_config(config.to_dict(), overrides) if overrides else config
    else:
        cfg = build_config(config or {}, overrides)
    setup = resolve(cfg)
    wl = workload if workload is not None else build_workload(cfg)
    state = run_kernel(build_state(setup, wl))
    return Result(setup, wl, state)
