"""Autoscaling in the event loop (docs/semantics.md §15).

Each autoscaled pool (``State.scale_pools``) ticks every ``interval_us``: an
AUTOSCALE_TICK collects its signals, the policy (the AUTOSCALE policy slot) turns them
into a wish, the bounds and the stabilization windows into a target, and a target other
than the current count acts a metrics delay later (ACTUATE):

    scale up:    a free row  -> provisioning -> loading -> warming -> active
                 (node delay)   (model delay)  (step times x the warm-up factor)
    scale down:  pending instances are cancelled first (newest first), then serving ones
                 drain (least-loaded / newest / oldest): draining -> terminated when empty

An instance's lifecycle moves on with LIFE events (``LifeStep``; the event's request
field names the life of the row it belongs to, so an event of a cancelled life is
ignored).  Only warming and active instances take requests (``INSTANCE_DT.active``).
Every lifecycle change is a row of the lifecycle log and every tick a row of the tick
log: the results (blis_fast.results.autoscale) derive instance counts, GPU-hours and cost
from them.

"Current" counts the instances that are or will be serving: provisioning, loading,
warming and active (not draining).  Draining instances still hold their rows: a pool
never holds more than max_instances rows' GPUs, so a scale-up waits for free rows.

Autoscaler events never keep a run alive (``LOOP_DT.scaler_events``, engine/loop.py): when
only they are left and no request can arrive, the run ends.
"""

import math

import numpy as np

from ..jit import helper
from ..kv.cache import is_prefill_leg, key_forget, kv_release
from ..policies.prefix_index import forget_instance
from ..policies.program import run_program
from ..schema import (ALL_NAMED, N_SIGNALS, AutoscaleKind, AutoscaleParam, ClusterEvent, DrainMode, InstanceEvent, KvMemo,
                      LifeState, LifeStep, PolicySlot, ProgramHeader, RequestState, ScaleDownPick, ScaleFeature,
                      ScaleReason, Signal, WarmupCurve)
from ..structs.dlist import dl_pop_front
from .calendar import calendar_clear
from .events import event_priority, push_event_with, request_epoch

_M31 = np.int64(2147483647)  # 2^31 - 1: the delay draws' modulus (every product fits an int64)


# ----------------------------------------------------------------------------- events


@helper
def push_scaler_event(st, t, priority, request, arg2):
    """Schedule an autoscaler event (counted: such events never keep a run alive)."""
    st.loop[0]["scaler_events"] += 1
    push_event_with(st, t, priority, request, arg2)


@helper
def push_life(st, i, t, step):
    """A LIFE event of instance i's current life at time t.  The end of a draining
    instance's last step (STEPS_DONE) is the end of real work: it keeps the run alive, the
    other LIFE events do not (``counts_as_scaler``)."""
    st.life[i]["events"] += 1
    if counts_as_scaler(step):
        push_scaler_event(st, t, event_priority(InstanceEvent.LIFE, i), st.life[i]["life"], np.int64(step))
    else:
        push_event_with(st, t, event_priority(InstanceEvent.LIFE, i), st.life[i]["life"], np.int64(step))


@helper
def counts_as_scaler(step):
    """True if a LIFE event of this LifeStep is counted in LOOP_DT.scaler_events."""
    return step != LifeStep.STEPS_DONE


@helper
def start_autoscalers(st):
    """The first tick of every autoscaled pool, one interval after the start."""
    for p in range(st.scale_pools.shape[0]):
        if st.scale_pools[p]["enabled"] != 0:
            push_scaler_event(st, st.scale_pools[p]["interval_us"],
                              event_priority(ClusterEvent.AUTOSCALE_TICK, np.int64(-1)), np.int64(p), np.int64(0))
    st.loop[0]["scale_started"] = 1


@helper
def log_life(st, i, t, state):
    """Instance i enters lifecycle state ``state`` at time t (logged)."""
    st.life[i]["state"] = state
    st.life[i]["since_us"] = t
    k = st.loop[0]["life_records"]
    st.life_log[k]["time_us"] = t
    st.life_log[k]["instance"] = i
    st.life_log[k]["state"] = state
    st.loop[0]["life_records"] = k + 1


# ----------------------------------------------------------------------------- delays


@helper
def _mix31(x):
    """A 31-bit hash step (Park-Miller multiplications with xor-shifts; int64-safe)."""
    x = x % _M31
    if x == 0:
        x = np.int64(1)
    for _ in range(3):
        x = (x * 48271) % _M31
        x ^= x >> 13
        x = (x * 16807) % _M31
        if x == 0:
            x = np.int64(1)
    return x


@helper
def uniform_draw(seed, p, k):
    """The k-th uniform in (0, 1) of pool p's stream of the run's seed."""
    x = _mix31(_mix31(_mix31(seed) + 1000003 * (p + 1)) + k)
    return (np.float64(x) + 0.5) / np.float64(_M31)


@helper
def draw_delay_us(st, p, mean_us, std_us):
    """A delay of pool p: ``mean_us`` when ``std_us`` is 0, else a normal(mean, std) draw
    truncated at 0, rounded to whole µs (pool p's stream, drawn in event order)."""
    if std_us <= 0:
        return mean_us
    sp = st.scale_pools
    k = sp[p]["draws"]
    sp[p]["draws"] = k + 2
    seed = st.settings[0]["autoscale_seed"]
    u1 = uniform_draw(seed, np.int64(p), k)
    u2 = uniform_draw(seed, np.int64(p), k + 1)
    z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
    d = mean_us + std_us * z
    if d <= 0.0:
        return np.int64(0)
    return np.int64(round(d))


# ----------------------------------------------------------------------------- counts and signals


@helper
def is_current(state):
    """Counted as current: provisioning, loading, warming or active."""
    return LifeState.PROVISIONING <= state <= LifeState.ACTIVE


@helper
def pool_counts(st, p):
    """(current, ready = warming or active) instances of pool p."""
    first = st.scale_pools[p]["first"]
    current = np.int64(0)
    ready = np.int64(0)
    for i in range(first, first + st.scale_pools[p]["rows"]):
        s = st.life[i]["state"]
        if is_current(s):
            current += 1
            if s >= LifeState.WARMING:
                ready += 1
    return current, ready


@helper
def ttft_p90_us(st, p):
    """TTFT p90 of pool p's first tokens since its last tick (nearest rank over the latest
    TTFT_WINDOW), -1 when there were none."""
    n = min(st.scale_pools[p]["ttft_count"], st.scale_ttft.shape[1])
    if n == 0:
        return np.float64(-1.0)
    v = st.scale_ttft[p]  # sorted in place: the tick that reads the window ends it
    gap = n // 2
    while gap > 0:  # Shell sort (no allocation in a kernel; n <= TTFT_WINDOW)
        for a in range(gap, n):
            x = v[a]
            b = a
            while b >= gap and v[b - gap] > x:
                v[b] = v[b - gap]
                b -= gap
            v[b] = x
        gap //= 2
    return np.float64(v[int(math.ceil(0.9 * n)) - 1])


@helper
def pool_signal(st, p, signal, ready, t):
    """The value of ``signal`` (schema.Signal) for pool p now (its ``ready`` instances);
    NaN when it has no sample (a window without first tokens or judged completions)."""
    sp = st.scale_pools
    inst = st.inst
    first = sp[p]["first"]
    if signal == Signal.TTFT_P90_MS:
        v = ttft_p90_us(st, p)
        return np.nan if v < 0 else v / 1e3
    if signal == Signal.SLO_ATTAINMENT:
        judged = sp[p]["slo_judged"]
        return np.nan if judged == 0 else sp[p]["slo_met"] / judged
    if ready == 0:
        return np.nan
    total = 0.0
    queued = np.int64(0)
    for i in range(first, first + sp[p]["rows"]):
        queued += inst[i]["injected"]
        s = st.life[i]["state"]
        if s != LifeState.WARMING and s != LifeState.ACTIVE:
            continue
        if signal == Signal.KV_UTILIZATION:
            total += inst[i]["kv_allocated"] / inst[i]["kv_total"]
        elif signal == Signal.WAITING:
            total += inst[i]["wq_len"]
        elif signal == Signal.IN_FLIGHT:
            total += inst[i]["routed_pending"] + inst[i]["wq_len"] + inst[i]["batch_len"]
    if signal == Signal.ARRIVAL_RATE:
        total = (queued - sp[p]["last_queued"]) / (sp[p]["interval_us"] / 1e6)
    elif (signal == Signal.WAITING or signal == Signal.IN_FLIGHT) and st.settings[0]["flow"] != 0:
        total += st.flow_models[inst[first]["model"]]["depth"]  # flow control: its model's gateway queue waits too
    return total / ready


@helper
def kv_demand_ratio(st, p, current):
    """Saturation: (KV blocks held + blocks of the waiting prompts of the pool's current
    instances) / their KV blocks, pending instances' counted (NaN without capacity), and
    the same ratio with one instance fewer (the N-1 check; inf when current <= 1)."""
    sp = st.scale_pools
    inst = st.inst
    reqs = st.reqs
    demand = 0.0
    capacity = 0.0
    largest = 0.0
    for i in range(sp[p]["first"], sp[p]["first"] + sp[p]["rows"]):
        if not is_current(st.life[i]["state"]):
            continue
        capacity += inst[i]["kv_total"]
        largest = max(largest, np.float64(inst[i]["kv_total"]))
        demand += inst[i]["kv_allocated"]
        bs = np.int64(inst[i]["block_size"])
        r = inst[i]["wq_head"]
        while r >= 0:
            demand += (reqs[r]["prompt_len"] + bs - 1) // bs
            r = reqs[r]["queue_next"]
    if capacity <= 0:
        return np.nan, np.inf
    fewer = capacity - largest
    return demand / capacity, (demand / fewer if current > 1 and fewer > 0 else np.inf)


@helper
def policy_wish(st, p, current, ready, t):
    """(the autoscaler's wish for pool p, the signal it read)."""
    kind = st.policy_kind[PolicySlot.AUTOSCALE]
    prm = st.policy_param[PolicySlot.AUTOSCALE]
    sp = st.scale_pools
    if kind == AutoscaleKind.OSCILLATOR:
        period = max(np.int64(1), np.int64(prm[AutoscaleParam.PERIOD_TICKS]))
        phase = (sp[p]["ticks"] // period) % 2
        return (current + 1 if phase == 0 else current - 1), np.float64(phase)
    if kind == AutoscaleKind.EXPRESSION:
        return _wish_by_program(st, p, prm, current, ready, t)
    if kind == AutoscaleKind.SATURATION:
        ratio, fewer = kv_demand_ratio(st, p, current)
        if ratio != ratio:
            return current, ratio
        if ratio > prm[AutoscaleParam.KV_UP]:
            return current + 1, ratio
        if ratio < prm[AutoscaleParam.KV_DOWN] and fewer <= prm[AutoscaleParam.KV_UP]:
            return current - 1, ratio
        return current, ratio
    signal = np.int64(prm[AutoscaleParam.SIGNAL])
    v = pool_signal(st, p, signal, ready, t)
    if v != v:  # no sample: hold
        return current, v
    better_high = signal == Signal.SLO_ATTAINMENT
    if kind == AutoscaleKind.THRESHOLD:
        up = prm[AutoscaleParam.UP]
        down = prm[AutoscaleParam.DOWN]
        if (v < up) if better_high else (v > up):
            return current + 1, v
        if (v > down) if better_high else (v < down):
            return current - 1, v
        return current, v
    # TARGET (Kubernetes HPA): desired = ceil(current x signal / target) (the inverse ratio for
    # a signal where higher is better), as a float first: it may be huge or infinite
    target = prm[AutoscaleParam.TARGET]
    if better_high:
        want = np.inf if v <= 0 else current * target / v
    else:
        want = current * v / target
    cap = np.float64(sp[p]["max_instances"] + 1)
    if want > cap:
        want = cap
    return np.int64(math.ceil(want - 1e-9)), v


@helper
def _wish_by_program(st, p, prog, current, ready, t):
    """(desired instances = ceil of the program's value (ScaleFeature) within [-1, max + 1],
    that value); a value that is not finite holds (counted).  Only the signals the program
    reads are computed (the TTFT p90 sorts its window, the KV demand walks the queues)."""
    sp = st.scale_pools
    f = st.prog_features
    mask = np.int64(prog[ProgramHeader.FEATURES])
    f[ScaleFeature.CURRENT] = current
    f[ScaleFeature.READY] = ready
    f[ScaleFeature.MIN_INSTANCES] = sp[p]["min_instances"]
    f[ScaleFeature.MAX_INSTANCES] = sp[p]["max_instances"]
    f[ScaleFeature.TICKS] = sp[p]["ticks"]
    for signal in range(N_SIGNALS):  # (ScaleFeature.KV_UTILIZATION + signal: the Signal order)
        if (mask >> (ScaleFeature.KV_UTILIZATION + signal)) & 1:
            f[ScaleFeature.KV_UTILIZATION + signal] = pool_signal(st, p, signal, ready, t)
    if (mask >> ScaleFeature.KV_DEMAND) & 3:
        f[ScaleFeature.KV_DEMAND], f[ScaleFeature.KV_DEMAND_FEWER] = kv_demand_ratio(st, p, current)
    v = run_program(prog, f, st.prog_stack)
    if not (v > -np.inf and v < np.inf):
        st.prog_faults[PolicySlot.AUTOSCALE] += 1
        return current, v
    cap = np.float64(sp[p]["max_instances"] + 1)
    want = min(max(v, -1.0), cap)
    return np.int64(math.ceil(want - 1e-9)), v


# ----------------------------------------------------------------------------- the tick


@helper
def on_tick(st, p, t):
    """Pool p's tick at time t: signals -> wish -> target (bounds, windows, max change),
    logged; a target other than the current count acts after the metrics delay; the next
    tick follows one interval later."""
    sp = st.scale_pools
    current, ready = pool_counts(st, p)
    for i in range(sp[p]["first"], sp[p]["first"] + sp[p]["rows"]):  # (a safety net: drains end at their events)
        if st.life[i]["state"] == LifeState.DRAINING:
            maybe_terminate(st, i, t)
    wish, signal = policy_wish(st, p, current, ready, t)
    lo = sp[p]["min_instances"]
    hi = sp[p]["max_instances"]
    reason = np.int64(ScaleReason.HOLD)
    if wish > hi:
        wish = hi
        if current >= hi:
            reason = ScaleReason.AT_MAX
    elif wish < lo:
        wish = lo
        if current <= lo:
            reason = ScaleReason.AT_MIN
    w = st.scale_wish.shape[1]
    k = sp[p]["ticks"]
    st.scale_wish[p, k % w] = wish
    target = current
    if wish > current:  # up: the smallest wish of the window's ticks (each must want more)
        m = wish
        for j in range(1, sp[p]["ticks_up"]):
            m = min(m, st.scale_wish[p, (k - j) % w])
        if m > current:
            target = m
            reason = ScaleReason.UP
        else:
            reason = ScaleReason.UP_HELD
    elif wish < current:  # down: the largest wish of the window's ticks
        m = wish
        for j in range(1, sp[p]["ticks_down"]):
            m = max(m, st.scale_wish[p, (k - j) % w])
        if m < current:
            target = m
            reason = ScaleReason.DOWN
        else:
            reason = ScaleReason.DOWN_HELD
    mc = sp[p]["max_change"]
    if mc > 0:
        target = min(max(target, current - mc), current + mc)
    sp[p]["ticks"] = k + 1
    n = st.loop[0]["scale_records"]
    log = st.scale_log
    log[n]["time_us"] = t
    log[n]["pool"] = p
    log[n]["reason"] = reason
    log[n]["current"] = current
    log[n]["ready"] = ready
    log[n]["wish"] = wish
    log[n]["target"] = target
    log[n]["signal"] = signal
    st.loop[0]["scale_records"] = n + 1
    # the window's counters start again
    queued = np.int64(0)
    for i in range(sp[p]["first"], sp[p]["first"] + sp[p]["rows"]):
        queued += st.inst[i]["injected"]
    sp[p]["last_queued"] = queued
    sp[p]["slo_judged"] = 0
    sp[p]["slo_met"] = 0
    sp[p]["ttft_count"] = 0
    if target != current:
        push_scaler_event(st, t + sp[p]["metrics_delay_us"], event_priority(ClusterEvent.ACTUATE, np.int64(-1)),
                          np.int64(p), target)
    push_scaler_event(st, t + sp[p]["interval_us"], event_priority(ClusterEvent.AUTOSCALE_TICK, np.int64(-1)),
                      np.int64(p), np.int64(0))


# ----------------------------------------------------------------------------- actuation


@helper
def on_actuate(st, p, target, t):
    """Pool p's decision acts: start or stop instances until ``target`` are current."""
    current, _ = pool_counts(st, p)
    if target > current:
        start_instances(st, p, target - current, t)
    elif target < current:
        stop_instances(st, p, current - target, t)


@helper
def start_instances(st, p, n, t):
    """Start up to n instances of pool p on free rows (never used, or terminated with no
    event left), lowest row first: provisioning, then a LIFE event after the node delay."""
    sp = st.scale_pools
    for i in range(sp[p]["first"], sp[p]["first"] + sp[p]["rows"]):
        if n == 0:
            break
        s = st.life[i]["state"]
        if (s != LifeState.OFF and s != LifeState.TERMINATED) or st.life[i]["events"] > 0:
            continue
        st.life[i]["life"] += 1
        st.life[i]["birth"] = sp[p]["births"]
        sp[p]["births"] += 1
        sp[p]["scale_ups"] += 1
        log_life(st, i, t, LifeState.PROVISIONING)
        d = draw_delay_us(st, p, sp[p]["provisioning_mean_us"], sp[p]["provisioning_std_us"])
        push_life(st, i, t + d, LifeStep.LOADED_NODE)
        n -= 1


@helper
def _pick(st, p, pending):
    """The next instance of pool p to stop: among the pending ones (``pending``) the newest;
    among the serving ones by the pool's scale-down pick (least-loaded: fewest requests in
    flight, ties to the newest).  -1 when there is none."""
    sp = st.scale_pools
    inst = st.inst
    pick = np.int64(-1)
    best_load = np.int64(0)
    how = sp[p]["scale_down"]
    for i in range(sp[p]["first"], sp[p]["first"] + sp[p]["rows"]):
        s = st.life[i]["state"]
        if pending:
            if s != LifeState.PROVISIONING and s != LifeState.LOADING:
                continue
        elif s != LifeState.WARMING and s != LifeState.ACTIVE:
            continue
        birth = st.life[i]["birth"]
        load = inst[i]["routed_pending"] + inst[i]["wq_len"] + inst[i]["batch_len"]
        if pick < 0:
            better = True
        elif pending or how == ScaleDownPick.NEWEST:
            better = birth > st.life[pick]["birth"]
        elif how == ScaleDownPick.OLDEST:
            better = birth < st.life[pick]["birth"]
        else:
            better = load < best_load or (load == best_load and birth > st.life[pick]["birth"])
        if better:
            pick = i
            best_load = load
    return pick


@helper
def stop_instances(st, p, n, t):
    """Stop n instances of pool p: cancel pending ones first (newest first), then drain
    serving ones."""
    sp = st.scale_pools
    while n > 0:
        i = _pick(st, p, True)
        if i >= 0:
            log_life(st, i, t, LifeState.TERMINATED)  # nothing runs there yet (its LIFE event is now stale)
        else:
            i = _pick(st, p, False)
            if i < 0:
                return
            drain(st, i, t)
        sp[p]["scale_downs"] += 1
        n -= 1


@helper
def drain(st, i, t):
    """Instance i starts draining at time t (it takes no new request)."""
    p = st.inst[i]["pool"]
    st.inst[i]["active"] = 0
    log_life(st, i, t, LifeState.DRAINING)
    mode = st.scale_pools[p]["drain"]
    if mode == DrainMode.WAIT:
        if st.scale_pools[p]["drain_timeout_us"] >= 0:
            push_life(st, i, t + st.scale_pools[p]["drain_timeout_us"], LifeStep.DRAIN_TIMEOUT)
    elif mode == DrainMode.REDIRECT:
        redirect_waiting(st, i, t)
    elif st.inst[i]["batch_len"] > 0 and st.inst[i]["busy_until_us"] > t:
        push_life(st, i, st.inst[i]["busy_until_us"], LifeStep.EVICT)  # its step in progress ends first
        redirect_waiting(st, i, t)
    else:
        evict_running(st, i, t)
        redirect_waiting(st, i, t)
    maybe_terminate(st, i, t)


@helper
def redirecting(st, i):
    """True if requests reaching instance i now go back to routing (it drains with
    redirect or immediate, or its drain wait timed out)."""
    if st.life[i]["state"] != LifeState.DRAINING:
        return False
    mode = st.scale_pools[st.inst[i]["pool"]]["drain"]
    return mode != DrainMode.WAIT or st.life[i]["timed_out"] != 0


@helper
def forget_own_keys(st, r):
    """Request r leaves its instance for another: its unshared keys' cache entries (one
    slot each for the whole cluster, kv/cache.py) must not point at the old instance's
    blocks."""
    if st.settings[0]["prefix_caching"] == 0:
        return
    k0 = st.reqs[r]["key_start"]
    for q in range(k0, k0 + st.reqs[r]["key_count"]):
        if st.key_shared[q] == 0 and st.kv_slot[q] != 0:
            st.kv_slot[q] = 0


@helper
def reroute(st, i, r, t):
    """Request r leaves instance i at time t and goes back through routing (after the
    routing latency)."""
    forget_own_keys(st, r)
    st.reqs[r]["state"] = RequestState.ADMITTING
    st.reqs[r]["instance"] = -1
    st.scale_pools[st.inst[i]["pool"]]["redirected"] += 1
    push_event_with(st, t + st.settings[0]["routing_latency_us"],
                    event_priority(ClusterEvent.ROUTING, np.int64(-1)), r, request_epoch(st, r))


@helper
def redirect_waiting(st, i, t):
    """Every request waiting on instance i goes back through routing, in queue order."""
    inst = st.inst
    reqs = st.reqs
    while inst[i]["wq_len"] > 0:
        r = dl_pop_front(reqs["queue_prev"], reqs["queue_next"], inst["wq_head"], inst["wq_tail"], inst["wq_len"], i)
        reroute(st, i, r, t)


@helper
def evict_running(st, i, t):
    """Drain immediate, between two steps of instance i: its running requests lose their
    KV (counted as lost tokens) and go back through routing, in batch order (recompute
    semantics, as a preemption, but not counted as one)."""
    inst = st.inst
    reqs = st.reqs
    p = inst[i]["pool"]
    calendar_clear(st, i, inst[i]["steps"])  # every rider up to date at the start of the next step
    for k in range(inst[i]["batch_len"]):
        r = st.batch[i, k]
        st.scale_pools[p]["lost_tokens"] += reqs[r]["computed"]
        kv_release(st, i, r)
        if st.settings[0]["prefix_caching"] != 0:
            reqs[r]["named_upto"] = ALL_NAMED
        reqs[r]["computed"] = 0
        reroute(st, i, r, t)
    inst[i]["batch_len"] = 0


@helper
def maybe_terminate(st, i, t):
    """A draining instance with nothing left (no request routed there, waiting, running,
    or holding KV blocks for P/D) is terminated: its GPUs are released and its row is
    reset for a later life."""
    inst = st.inst
    pd = st.pd_inst
    if st.life[i]["state"] != LifeState.DRAINING:
        return
    if (inst[i]["batch_len"] > 0 or inst[i]["wq_len"] > 0 or inst[i]["routed_pending"] > 0
            or pd[i]["held_outside"] > 0 or pd[i]["rx_len"] > 0 or pd[i]["xq_len"] > 0 or pd[i]["link_len"] > 0):
        return
    log_life(st, i, t, LifeState.TERMINATED)
    reset_instance(st, i)


@helper
def reset_instance(st, i):
    """Instance row i as a new node finds it: its KV cache empty and unindexed (every block
    never used), the router's prefix index of it empty."""
    inst = st.inst
    blocks = st.blocks
    off = inst[i]["kv_offset"]
    for b in range(off, inst[i]["kv_virgin_next"]):  # named blocks: their unshared keys' slots go
        q = blocks[b]["key_index"]
        if q >= 0 and st.key_shared[q] == 0:
            key_forget(st, i, np.int64(q), np.int64(b))
    rows = inst[i]["ht_mask"] + 1
    h0 = inst[i]["ht_offset"]
    for h in range(h0, h0 + rows):
        st.kv_table[h, 0] = 0
        st.kv_table[h, 1] = 0
    inst[i]["ht_changes"] += 1
    st.kv_memo[i, KvMemo.CHANGES] = -1
    inst[i]["kv_virgin_next"] = off
    inst[i]["free_head"] = -1
    inst[i]["free_tail"] = -1
    inst[i]["free_len"] = 0
    inst[i]["kv_allocated"] = 0
    inst[i]["head_units"] = inst[i]["kv_total"]
    inst[i]["id_pool"] = -1
    if st.settings[0]["prefix_index"] != 0:
        forget_instance(st, i)


# ----------------------------------------------------------------------------- lifecycle events


@helper
def on_life(st, i, life, step, t):
    """A LIFE event of instance i (``step``: LifeStep) for its life ``life``."""
    lf = st.life
    lf[i]["events"] -= 1
    if lf[i]["life"] != life:
        return  # of an earlier life of the row
    s = lf[i]["state"]
    p = st.inst[i]["pool"]
    sp = st.scale_pools
    if step == LifeStep.LOADED_NODE:
        if s == LifeState.PROVISIONING:
            log_life(st, i, t, LifeState.LOADING)
            push_life(st, i, t + draw_delay_us(st, p, sp[p]["loading_mean_us"], sp[p]["loading_std_us"]),
                      LifeStep.LOADED_MODEL)
    elif step == LifeStep.LOADED_MODEL:
        if s == LifeState.LOADING:
            st.inst[i]["active"] = 1
            lf[i]["timed_out"] = 0
            if sp[p]["warm_factor"] > 1.0:
                lf[i]["warm_base"] = st.inst[i]["completed"]
                lf[i]["warm_start_us"] = t
                log_life(st, i, t, LifeState.WARMING)
                if sp[p]["warm_requests"] == 0:
                    push_life(st, i, t + sp[p]["warm_us"], LifeStep.WARM_END)
            else:
                log_life(st, i, t, LifeState.ACTIVE)
    elif step == LifeStep.WARM_END:
        if s == LifeState.WARMING:
            log_life(st, i, t, LifeState.ACTIVE)
    elif step == LifeStep.EVICT:
        if s == LifeState.DRAINING:
            evict_running(st, i, t)
            redirect_waiting(st, i, t)
            maybe_terminate(st, i, t)
    elif step == LifeStep.DRAIN_TIMEOUT:
        if s == LifeState.DRAINING:
            lf[i]["timed_out"] = 1
            redirect_waiting(st, i, t)
            maybe_terminate(st, i, t)
    elif step == LifeStep.STEPS_DONE:
        maybe_terminate(st, i, t)


@helper
def warm_step_us(st, i, dt, t):
    """A warming instance's step of base duration dt starting at t: dt x the warm-up
    factor at its progress x (completions since it began warming / warm_requests, or time
    since / warm_us), truncated to whole µs -- step: F; linear: F - (F - 1) x; exponential:
    1 + (F - 1)(0.01^x - 0.01) / 0.99.  A warm-up counted in requests ends (active) at the
    first step that starts once they have completed."""
    sp = st.scale_pools[st.inst[i]["pool"]]
    n = sp["warm_requests"]
    if n > 0:
        x = (st.inst[i]["completed"] - st.life[i]["warm_base"]) / n
        if x >= 1.0:
            log_life(st, i, t, LifeState.ACTIVE)
            return dt
    else:
        x = (t - st.life[i]["warm_start_us"]) / sp["warm_us"]
        if x >= 1.0:
            return dt  # (its WARM_END event is due now)
    f = sp["warm_factor"]
    curve = sp["warm_curve"]
    if curve == WarmupCurve.LINEAR:
        f = f - (f - 1.0) * x
    elif curve == WarmupCurve.EXPONENTIAL:
        f = 1.0 + (f - 1.0) * (0.01 ** x - 0.01) / 0.99
    return np.int64(dt * f)


# ----------------------------------------------------------------------------- signal samples


@helper
def note_first_token(st, i, r, now):
    """A request's first token on instance i at ``now``: a TTFT sample of its pool."""
    p = st.inst[i]["pool"]
    sp = st.scale_pools
    if sp[p]["enabled"] == 0 or is_prefill_leg(st, r):
        return
    w = st.scale_ttft.shape[1]
    k = sp[p]["ttft_count"]
    st.scale_ttft[p, k % w] = now - st.reqs[r]["arrival_us"]
    sp[p]["ttft_count"] = k + 1


@helper
def note_completion(st, i, r, now):
    """Request r completes on instance i at ``now``: judged against its class's SLO
    targets (if it has any) for its pool's slo_attainment signal."""
    p = st.inst[i]["pool"]
    sp = st.scale_pools
    if sp[p]["enabled"] == 0:
        return
    reqs = st.reqs
    c = reqs[r]["slo_class"]
    if c < 0 or c >= st.slo_targets.shape[0]:
        return
    ttft_t = st.slo_targets[c, 0]
    tpot_t = st.slo_targets[c, 1]
    e2e_t = st.slo_targets[c, 2]
    if ttft_t < 0 and tpot_t < 0 and e2e_t < 0:
        return
    ttft = reqs[r]["first_token_us"] - reqs[r]["arrival_us"]
    e2e = now - reqs[r]["arrival_us"]
    n_out = reqs[r]["output_len"]
    met = True
    if ttft_t >= 0 and ttft > ttft_t:
        met = False
    if e2e_t >= 0 and e2e > e2e_t:
        met = False
    if tpot_t >= 0 and n_out > 1 and (e2e - ttft) / (n_out - 1) > tpot_t:
        met = False
    sp[p]["slo_judged"] += 1
    if met:
        sp[p]["slo_met"] += 1
