"""Writers of the run's logs: one step-log row per engine step, one irregular-ITL row per
token that does not continue its request's run of consecutive steps, and -- when decisions
are traced (settings.trace_level) -- one row per admission, routing decision and
preemption (schema.tables), and at TraceLevel.FULL the instance schedulers' records
(SCHED_DT: admissions to the batch, blocked wait-queue heads, preemption context).  The
loop guarantees room before each step (``log_room``); the caller grows the logs when the
loop returns Status.LOG_FULL.  The admission and routing logs have a row per request from
the start."""

import numpy as np

from ..jit import helper
from ..kv.cache import kv_free_blocks
from ..policies.priority import priority_of, priority_slot
from ..policies.routing import _load, is_candidate
from ..policies.scheduler import scheduler_key
from ..schema import (N_TRACE_ALTERNATIVES, SCHED_SCAN_DEPTH, BlockReason, PolicySlot, SchedRecord, SchedulerKind,
                      SnapField, TraceLevel)


@helper
def tracing(st):
    """True if decisions are logged."""
    return st.settings[0]["trace_level"] >= TraceLevel.DECISIONS


@helper
def tracing_schedulers(st):
    """True if the instance schedulers' decisions are logged too (TraceLevel.FULL)."""
    return st.settings[0]["trace_level"] >= TraceLevel.FULL


@helper
def log_room(st, i):
    """True if the logs can take one more step of instance i (one step row, one irregular
    row per batch slot; when tracing, one preemption row per batch slot and -- FULL -- at
    most 2 max_num_seqs + 1 scheduling rows: admissions or victims, one blocked head, and
    with KV tiers up to max_num_seqs loads)."""
    lp = st.loop
    seqs = st.inst[i]["max_num_seqs"]
    return (lp[0]["steps"] + 1 <= st.step_log.shape[0]
            and lp[0]["irregular_records"] + seqs <= st.irr_log.shape[0]
            and (not tracing(st) or lp[0]["preempt_records"] + seqs <= st.preempt_log.shape[0])
            and (not tracing_schedulers(st) or lp[0]["sched_records"] + 2 * seqs + 1 <= st.sched_log.shape[0]))


@helper
def scale_log_room(st):
    """True if the autoscaler's logs can take any one event (a tick's row; the lifecycle
    changes of a pool's every instance and one more) -- and, when tracing, the routing log
    one more decision: a request a draining instance sends back is routed again."""
    lp = st.loop
    return (lp[0]["life_records"] + st.inst.shape[0] + 2 <= st.life_log.shape[0]
            and lp[0]["scale_records"] + 1 <= st.scale_log.shape[0]
            and (not tracing(st) or lp[0]["route_records"] + 1 <= st.route_log.shape[0]))


@helper
def log_step(st, i, dt):
    """Append a step of instance i lasting dt µs; returns its global step index."""
    lp = st.loop
    k = lp[0]["steps"]
    st.step_log[k]["instance"] = i
    st.step_log[k]["dt_us"] = dt
    lp[0]["steps"] = k + 1
    return k


@helper
def log_irregular_token(st, r, step_idx, sample):
    """Record a token of request r at step ``step_idx`` that ends its run of consecutive
    token steps (ITL sample ``sample`` µs)."""
    lp = st.loop
    k = lp[0]["irregular_records"]
    log = st.irr_log
    log[k]["request"] = r
    log[k]["step"] = step_idx
    log[k]["value_us"] = sample
    log[k]["prev_run_start"] = st.reqs[r]["run_start_step"]
    log[k]["prev_run_end"] = st.reqs[r]["last_token_step"]
    lp[0]["irregular_records"] = k + 1


@helper
def log_admission(st, r, t, admitted):
    """Record the admission decision on request r at time t."""
    lp = st.loop
    k = lp[0]["admit_records"]
    log = st.admit_log
    tenant = st.reqs[r]["tenant"]
    log[k]["time_us"] = t
    log[k]["request"] = r
    log[k]["tenant"] = tenant
    log[k]["admitted"] = 1 if admitted else 0
    log[k]["cost"] = st.reqs[r]["prompt_len"]
    log[k]["bucket_tokens"] = st.tb_tokens[tenant] if tenant < st.tb_tokens.shape[0] else 0.0
    lp[0]["admit_records"] = k + 1


@helper
def log_routing(st, r, t, chosen, n_keys, forced):
    """Record the routing decision for request r: the chosen instance and the best
    N_TRACE_ALTERNATIVES others by the policy's score (ties to the lower index), with the
    snapshot values the router saw.  Missing alternatives have instance -1."""
    lp = st.loop
    k = lp[0]["route_records"]
    log = st.route_log
    n_inst = st.inst.shape[0]
    log[k]["time_us"] = t
    log[k]["request"] = r
    log[k]["prompt_blocks"] = n_keys
    log[k]["forced"] = 1 if forced else 0
    model = st.reqs[r]["model"]
    n_active = 0
    for i in range(n_inst):
        if is_candidate(st.inst, i, model):
            n_active += 1
    log[k]["candidates"] = n_active
    log[k]["chosen_instance"] = chosen
    log[k]["chosen_score"] = st.route_scores[chosen]
    log[k]["chosen_load"] = _load(st.snap, chosen)
    log[k]["chosen_kv_utilization"] = st.snap[chosen, SnapField.KV_UTILIZATION]
    log[k]["chosen_matched_blocks"] = st.affinity[chosen]
    alt_i = log[k]["alt_instance"]
    alt_score = log[k]["alt_score"]
    alt_load = log[k]["alt_load"]
    alt_kv = log[k]["alt_kv_utilization"]
    alt_matched = log[k]["alt_matched_blocks"]
    prev_score = np.inf
    prev_i = np.int64(-1)
    for a in range(N_TRACE_ALTERNATIVES):
        best = np.int64(-1)
        for i in range(n_inst):
            if i == chosen or not is_candidate(st.inst, i, model):
                continue
            sc = st.route_scores[i]
            # strictly after the previous pick in (score desc, index asc) order
            if sc > prev_score or (sc == prev_score and i <= prev_i):
                continue
            if best < 0 or sc > st.route_scores[best]:
                best = i
        alt_i[a] = best
        if best < 0:
            alt_score[a] = 0.0
            alt_load[a] = 0.0
            alt_kv[a] = 0.0
            alt_matched[a] = 0
        else:
            alt_score[a] = st.route_scores[best]
            alt_load[a] = _load(st.snap, best)
            alt_kv[a] = st.snap[best, SnapField.KV_UTILIZATION]
            alt_matched[a] = st.affinity[best]
            prev_score = st.route_scores[best]
            prev_i = best
    lp[0]["route_records"] = k + 1


@helper
def log_preemption(st, i, t, victim, for_request, blocks_released):
    """Record the preemption of ``victim`` on instance i in the step starting at t."""
    lp = st.loop
    k = lp[0]["preempt_records"]
    log = st.preempt_log
    log[k]["time_us"] = t
    log[k]["instance"] = i
    log[k]["victim"] = victim
    log[k]["for_request"] = for_request
    log[k]["victim_generated"] = st.reqs[victim]["generated"]
    log[k]["victim_blocks"] = blocks_released
    lp[0]["preempt_records"] = k + 1


# ----------------------------------------------------------------------------- scheduling records (FULL)


@helper
def _sched_row(st, kind, i, t, r):
    """Append a scheduling record of ``kind`` about request r on instance i at time t, every
    other field 0 (steps 1); returns its row."""
    lp = st.loop
    k = lp[0]["sched_records"]
    log = st.sched_log
    log[k]["time_us"] = t
    log[k]["last_time_us"] = t
    log[k]["instance"] = i
    log[k]["kind"] = kind
    log[k]["request"] = r
    log[k]["position"] = 0
    log[k]["queue_len"] = 0
    log[k]["priority"] = 0.0
    log[k]["sched_key"] = 0.0
    log[k]["wait_us"] = 0
    log[k]["tokens"] = 0
    log[k]["cached_tokens"] = 0
    log[k]["budget_left"] = 0
    log[k]["free_blocks"] = 0
    log[k]["reason"] = BlockReason.NONE
    log[k]["steps"] = 1
    log[k]["readmission"] = 0
    log[k]["higher_behind"] = 0
    log[k]["fits_behind"] = 0
    log[k]["for_request"] = -1
    log[k]["for_priority"] = 0.0
    lp[0]["sched_records"] = k + 1
    return k


@helper
def _waiting_fields(st, k, i, t, r, position, budget, free_blocks):
    """Fill what a SCHEDULED or BLOCKED record says of waiting request r (still in the
    wait queue): position, queue length, priority, the sort key, wait so far, the budget
    and free blocks it met, and how many of the first SCHED_SCAN_DEPTH requests behind it
    have a strictly higher priority."""
    reqs = st.reqs
    log = st.sched_log
    # priorities as of t (a victim of this step was not in the queue when they were updated)
    params, program = priority_slot(st)
    p = priority_of(st, params, program, r, t)
    log[k]["position"] = position
    log[k]["queue_len"] = st.inst[i]["wq_len"]
    log[k]["priority"] = p
    if st.policy_kind[PolicySlot.SCHEDULER] != SchedulerKind.FCFS:
        log[k]["sched_key"] = scheduler_key(st, r, p, t, position)
    log[k]["wait_us"] = t - reqs[r]["queued_us"]
    log[k]["budget_left"] = budget
    log[k]["free_blocks"] = free_blocks
    higher = 0
    q = reqs[r]["queue_next"]
    seen = 0
    while q >= 0 and seen < SCHED_SCAN_DEPTH:
        if priority_of(st, params, program, q, t) > p:
            higher += 1
        q = reqs[q]["queue_next"]
        seen += 1
    log[k]["higher_behind"] = higher


@helper
def log_scheduled(st, i, t, r, position, budget, free_blocks, n, cached):
    """Record that waiting request r (the wait queue's head, about to leave it) enters
    instance i's batch in the step starting at t: its first chunk is n tokens, ``cached``
    prompt tokens came from the prefix cache; ``budget`` and ``free_blocks`` are what was
    left before it."""
    k = _sched_row(st, SchedRecord.SCHEDULED, i, t, r)
    _waiting_fields(st, k, i, t, r, position, budget, free_blocks)
    st.sched_log[k]["tokens"] = n
    st.sched_log[k]["cached_tokens"] = cached
    st.sched_log[k]["readmission"] = 1 if st.reqs[r]["preemptions"] > 0 else 0


@helper
def log_load(st, i, t, r, position, budget, free_blocks, loaded, cached):
    """Record that waiting request r (the wait queue's head, about to leave it) found
    ``loaded`` prompt tokens in instance i's KV tiers in the step starting at t and waits
    for them to load (``cached``: with those found on the GPU); ``budget`` and
    ``free_blocks`` are what was left before it.  The load's end is filled in when it is
    done (``last_time_us``, engine/tiers.py)."""
    k = _sched_row(st, SchedRecord.LOAD, i, t, r)
    _waiting_fields(st, k, i, t, r, position, budget, free_blocks)
    st.sched_log[k]["tokens"] = loaded
    st.sched_log[k]["cached_tokens"] = cached
    st.sched_log[k]["readmission"] = 1 if st.reqs[r]["preemptions"] > 0 else 0
    st.tier_reqs[r]["load_record"] = k


@helper
def log_blocked_head(st, i, t, admitted, budget, cap, reason):
    """At the end of instance i's batch formation in the step starting at t: record why the
    wait queue's head stays waiting, after ``admitted`` admissions, with ``budget`` tokens
    left -- ``reason`` (BlockReason) KV_BLOCKS or PREEMPTION as the caller saw it, else
    (NONE) a full batch or a used-up budget -- extending the instance's open episode when
    the same head stays blocked for the same reason; an empty queue closes the episode."""
    inst = st.inst
    if inst[i]["wq_len"] == 0:
        st.sched_open[i] = -1
        return
    if reason == BlockReason.NONE:
        reason = BlockReason.BATCH_FULL if inst[i]["batch_len"] >= inst[i]["max_num_seqs"] else BlockReason.TOKEN_BUDGET
    h = inst[i]["wq_head"]
    log = st.sched_log
    k = st.sched_open[i]
    if k >= 0 and log[k]["request"] == h and log[k]["reason"] == reason:
        log[k]["steps"] += 1
        log[k]["last_time_us"] = t
        return
    reqs = st.reqs
    free = kv_free_blocks(inst, i)
    k = _sched_row(st, SchedRecord.BLOCKED, i, t, h)
    st.sched_open[i] = k
    _waiting_fields(st, k, i, t, h, admitted, budget, free)
    log[k]["tokens"] = reqs[h]["prompt_len"] + reqs[h]["generated"]
    log[k]["reason"] = reason
    if reason != BlockReason.KV_BLOCKS:
        return
    # head-of-line blocking: requests behind it whose first chunk would have fitted
    bs = np.int64(st.inst[i]["block_size"])
    fits = 0
    q = reqs[h]["queue_next"]
    seen = 0
    while q >= 0 and seen < SCHED_SCAN_DEPTH:
        n = reqs[q]["prompt_len"] + reqs[q]["generated"]
        if cap > 0 and n > cap:
            n = cap
        if n > budget:
            n = budget
        if (n + bs - 1) // bs <= free:
            fits += 1
        q = reqs[q]["queue_next"]
        seen += 1
    log[k]["fits_behind"] = fits


@helper
def log_victim(st, i, t, j, for_request):
    """Record the context of preempting batch slot j of instance i in the step starting at
    t for ``for_request``: the victim's and that request's priorities, the batch size, and
    how many running requests had a strictly lower priority than the victim."""
    reqs = st.reqs
    v = st.batch[i, j]
    n = st.inst[i]["batch_len"]
    k = _sched_row(st, SchedRecord.VICTIM, i, t, v)
    params, program = priority_slot(st)
    p = priority_of(st, params, program, v, t)
    lower = 0
    for s in range(n):
        q = st.batch[i, s]
        if priority_of(st, params, program, q, t) < p:
            lower += 1
    log = st.sched_log
    log[k]["position"] = j
    log[k]["queue_len"] = n
    log[k]["priority"] = p
    log[k]["higher_behind"] = lower
    log[k]["for_request"] = for_request
    log[k]["for_priority"] = priority_of(st, params, program, for_request, t)
