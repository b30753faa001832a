"""One engine step of one instance (docs/semantics.md §3-5): priorities and queue order,
batch formation (running requests first, then admissions from the wait-queue head),
the step time, and its execution (tokens, completions, KV release).

The running batch of instance i is ``batch[i, :batch_len]`` in admission order.  A step
visits its *explicit* entries one by one -- ``explicit[e]`` computes ``work[e]`` tokens
on top of ``context[e]`` KV tokens -- and the rest of the batch implicitly:

- the event-skipping step (``form_batch_riding``): the explicit entries are the requests
  the calendar (engine/calendar.py) holds for this step -- prefill chunks, tokens that
  need a visit -- plus the admissions; every other running request is a decode request
  that simply gains one token, counted in aggregate.  It applies when the step cannot
  run out of token budget or KV blocks, so that the order of visits cannot matter;
- otherwise the step visits every running request (``form_batch_all``: the reference
  path, with preemption), after bringing the riders up to date.  ``settings.
  event_skipping = 0`` takes this path every step; both give identical results.
"""

import math

import numpy as np

from ..jit import helper
from ..kv.cache import (LOADING, anonymous_held, key_deferred, key_lookup, kv_admit, kv_conserved, kv_forget_chunk,
                        kv_free_blocks, kv_grow, kv_release, register_deferred_keys, take_anonymous)
from ..kv.tiers import tier_hit_tokens, tiers_conserved
from ..latency.steptime import (blackbox_step_us, output_token_delay_us, roofline_decode_sums, roofline_entry,
                                roofline_step_us)
from ..policies.priority import update_wait_queue_priorities
from ..policies.scheduler import reorder_wait_queue
from ..policies.victim import choose_victim
from ..schema import (ALL_NAMED, BlockReason, InstanceEvent, LatencyKind, LifeState, LifeStep, PhaseEnd, PolicySlot, PriorityKind,
                      RequestState, SchedulerKind, Status)
from ..structs.dlist import dl_pop_front, dl_push_front
from .autoscale import push_life, warm_step_us
from .calendar import calendar_clear, calendar_insert, calendar_take_due, steps_to_next_event
from .events import event_priority, push_event
from .disaggregation import pd_retry_waiting
from .phases import end_phase
from .queueing import ensure_step
from .tiers import start_loads, tier_catch_up, wake_for_writes
from .trace import (log_blocked_head, log_irregular_token, log_load, log_preemption, log_scheduled, log_step, log_victim, tracing,
                    tracing_schedulers)


# ----------------------------------------------------------------------------- preemption


@helper
def shift_left(a, j, n):
    """Drop element j of a[:n] (1-D), keeping the order: a[j:n-1] = a[j+1:n]."""
    if j < 0:
        return  # (never happens)
    # written so that LLVM sees 0 <= k < k + 1 <= n - 1 -- no negative-index wraparound --
    # and copies with vector moves (a ``range`` loop here is 5x slower)
    k = j
    while k < n - 1:
        a[k] = a[k + 1]
        k += 1


@helper
def remove_slot(st, i, j):
    """Remove slot j from instance i's batch, keeping the order (later slots shift left)."""
    n = st.inst[i]["batch_len"]
    shift_left(st.batch[i], j, n)
    shift_left(st.batch_seq[i], j, n)
    st.inst[i]["batch_len"] = n - 1


@helper
def preempt_slot(st, i, j):
    """Preempt the request in batch slot j (recompute semantics, §4): release its blocks,
    reset its progress, put it at the head of the wait queue; later slots shift left
    (with their work/context).  Returns the victim's id."""
    inst = st.inst
    reqs = st.reqs
    v = st.batch[i, j]
    register_deferred_keys(st, i, v)  # (before its first preemption counts: kv/cache.py)
    shift_left(st.work, j, inst[i]["batch_len"])
    shift_left(st.context, j, inst[i]["batch_len"])
    remove_slot(st, i, j)
    kv_release(st, i, v)
    if st.settings[0]["prefix_caching"] != 0:
        reqs[v]["named_upto"] = ALL_NAMED  # its keys are no longer deferred: every block may carry one
    reqs[v]["computed"] = 0
    reqs[v]["state"] = RequestState.QUEUED
    reqs[v]["preemptions"] += 1
    inst[i]["preemptions"] += 1
    dl_push_front(reqs["queue_prev"], reqs["queue_next"], inst["wq_head"], inst["wq_tail"], inst["wq_len"], i, v)
    if inst[i]["wq_len"] > inst[i]["wq_peak"]:
        inst[i]["wq_peak"] = inst[i]["wq_len"]
    return v


@helper
def batch_remove(st, i, r):
    """Remove request r from instance i's batch, keeping the order: its slot is found by
    binary search of its admission number (the batch is sorted by it), so no other
    request's record is read."""
    seq = st.reqs[r]["admit_seq"]
    batch_seq = st.batch_seq[i]
    lo = 0
    hi = st.inst[i]["batch_len"] - 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if batch_seq[mid] < seq:
            lo = mid + 1
        else:
            hi = mid
    remove_slot(st, i, lo)


# ----------------------------------------------------------------------------- batch formation


@helper
def decode_fills_block(st, r, c, bs):
    """True if request r's token at KV position c (blocks of bs tokens: its instance's)
    completes a block whose key must be registered (so its allocation call cannot be
    skipped)."""
    if st.settings[0]["prefix_caching"] == 0:
        return False
    j = (c + 1) // bs  # blocks complete after this token
    return ((c + 1) % bs == 0 and j <= st.reqs[r]["key_count"] and j <= st.reqs[r]["named_upto"]
            and not key_deferred(st, r, st.reqs[r]["key_start"] + j - 1))


@helper
def registers_over_free_block(st, i, r, c, n):
    """True if request r's tokens [c, c + n) fill a named block whose key a free (cached,
    unheld) block of instance i holds."""
    if st.settings[0]["prefix_caching"] == 0:
        return False
    reqs = st.reqs
    bs = np.int64(st.inst[i]["block_size"])
    last = min((c + n) // bs, reqs[r]["key_count"], reqs[r]["named_upto"])
    for j in range(c // bs, last):
        q = reqs[r]["key_start"] + j
        if key_deferred(st, r, q):
            continue
        b = key_lookup(st, i, q)
        if b >= 0 and st.blocks[b]["ref_count"] == 0:
            return True
    return False


@helper
def join_batch(st, i, r, n, cached, m):
    """Request r enters instance i's batch (admission order) as explicit entry m, computing
    n tokens this step with ``cached`` already in KV."""
    inst = st.inst
    k = inst[i]["batch_len"]
    st.batch[i, k] = r
    st.batch_seq[i, k] = inst[i]["admit_counter"]
    inst[i]["batch_len"] = k + 1
    st.reqs[r]["admit_seq"] = inst[i]["admit_counter"]
    inst[i]["admit_counter"] += 1
    st.explicit[m] = r
    st.work[m] = n
    st.context[m] = cached
    st.reqs[r]["state"] = RequestState.RUNNING


@helper
def admit_received(st, i, now, budget, cap, m):
    """Admit the requests whose KV arrived -- by a P/D transfer (engine/disaggregation.py)
    or a load from a KV tier (engine/tiers.py) -- (``rx``), in order, while the batch has
    room and budget is left: they hold their prefix blocks; each computes the rest of its
    prompt as a chunk (capped as an admission's: ``cap``, ``budget``) -- a transferred one
    at most its next token, whose room was there when it was reserved.  Returns (budget
    left, tokens to compute, entries, admissions)."""
    inst = st.inst
    reqs = st.reqs
    full = tracing_schedulers(st)
    n_tokens = np.int64(0)
    admitted = 0
    while st.pd_inst[i]["rx_len"] > 0 and inst[i]["batch_len"] < inst[i]["max_num_seqs"] and budget > 0:
        r = st.pd_inst[i]["rx_head"]
        target = reqs[r]["prompt_len"] + reqs[r]["generated"]
        reqs[r]["prefill_target"] = target
        c = reqs[r]["computed"]
        n = target - c
        if cap > 0 and n > cap:
            n = cap
        if n > budget:
            n = budget
        free = kv_free_blocks(inst, i)
        anon = anonymous_held(st, r)  # (held outside the batch until now; the chunk's new ones are the batch's)
        if not kv_grow(st, i, r, n):
            # no room for the whole chunk: the room it holds (a transfer reserved its next token's,
            # a load one block beyond its prefix) -- it always has some
            n = min(n, reqs[r]["blocks_held"] * np.int64(inst[i]["block_size"]) - c)
            if n <= 0 or not kv_grow(st, i, r, n):
                break
        if full:
            log_scheduled(st, i, now, r, admitted, budget, free, n, c)
        admitted += 1
        dl_pop_front(reqs["queue_prev"], reqs["queue_next"], st.pd_inst["rx_head"], st.pd_inst["rx_tail"], st.pd_inst["rx_len"], i)
        st.pd_inst[i]["held_outside"] -= 1
        st.pd_inst[i]["held_anon"] -= anon
        join_batch(st, i, r, n, c, m)
        m += 1
        if reqs[r]["first_scheduled_us"] < 0:
            reqs[r]["first_scheduled_us"] = now
        budget -= n
        n_tokens += n
    return budget, n_tokens, m, admitted


@helper
def admit_waiting(st, i, now, budget, cap, m):
    """Pass B (§3.2): admit from the head of instance i's wait queue (strict head-of-line)
    while the batch has room and budget is left; each admission is appended to the batch
    and as explicit entry m, m+1, ...  Requests whose KV arrived by transfer (P/D) come
    first (``admit_received``).  Returns (budget left, prefill tokens, entries)."""
    inst = st.inst
    reqs = st.reqs
    n_prefill = np.int64(0)
    full = tracing_schedulers(st)
    admitted = 0
    if st.pd_inst[i]["rx_len"] > 0:
        budget, n_prefill, m, admitted = admit_received(st, i, now, budget, cap, m)
    free = np.int64(0)
    reason = BlockReason.NONE
    loads = 0  # (KV tiers: requests that started loading in this step, at most max_num_seqs)
    while inst[i]["wq_len"] > 0 and inst[i]["batch_len"] < inst[i]["max_num_seqs"] and budget > 0:
        if loads >= inst[i]["max_num_seqs"]:
            break
        r = inst[i]["wq_head"]
        target = reqs[r]["prompt_len"] + reqs[r]["generated"]
        reqs[r]["prefill_target"] = target
        if full:
            free = kv_free_blocks(inst, i)
        n, cached = kv_admit(st, i, r, budget, cap, True)
        if n == LOADING:  # its prefix blocks are taken; it waits for them out of the queue (engine/tiers.py)
            if full:
                log_load(st, i, now, r, admitted, budget, free, tier_hit_tokens(st, i, r), cached)
                admitted += 1
            loads += 1
            dl_pop_front(reqs["queue_prev"], reqs["queue_next"], inst["wq_head"], inst["wq_tail"], inst["wq_len"], i)
            reqs[r]["state"] = RequestState.LOADING
            if reqs[r]["first_scheduled_us"] < 0:
                reqs[r]["cached_tokens"] = cached
            inst[i]["prefix_query_tokens"] += target
            inst[i]["prefix_hit_tokens"] += cached
            st.pd_inst[i]["held_outside"] += 1  # (until it is admitted from rx)
            st.pd_inst[i]["held_anon"] += anonymous_held(st, r)
            start_loads(st, i, r, now)
            continue
        if n < 0:
            reason = BlockReason.KV_BLOCKS
            break  # head-of-line: no skipping
        if full:
            log_scheduled(st, i, now, r, admitted, budget, free, n, cached)
            admitted += 1
        dl_pop_front(reqs["queue_prev"], reqs["queue_next"], inst["wq_head"], inst["wq_tail"], inst["wq_len"], i)
        join_batch(st, i, r, n, cached, m)
        m += 1
        if reqs[r]["first_scheduled_us"] < 0:
            reqs[r]["first_scheduled_us"] = now
            reqs[r]["cached_tokens"] = cached
        inst[i]["prefix_query_tokens"] += target
        inst[i]["prefix_hit_tokens"] += cached
        budget -= n
        n_prefill += n
    if full:
        log_blocked_head(st, i, now, admitted, budget, cap, reason)
    if inst[i]["batch_len"] > inst[i]["batch_peak"]:
        inst[i]["batch_peak"] = inst[i]["batch_len"]
    return budget, n_prefill, m


@helper
def form_batch_all(st, i, now):
    """Form instance i's batch visiting every running request (§3.2).

    Pass A gives running requests their next chunk / decode token in batch order,
    preempting (policies/victim.py) when KV runs out -- a victim already served this step
    gives its tokens back; pass B admits from the wait-queue head unless a preemption
    happened.  Every batch slot becomes an explicit entry (work 0 = no work this step).
    Returns (prefill tokens P, decode requests D, Σ context of the decode entries,
    explicit entries)."""
    inst = st.inst
    reqs = st.reqs
    batch = st.batch
    work = st.work
    context = st.context
    prefix_caching = st.settings[0]["prefix_caching"] != 0
    victim_kind = st.policy_kind[PolicySlot.VICTIM]
    bs = np.int64(st.inst[i]["block_size"])
    budget = inst[i]["max_batched_tokens"]
    cap = inst[i]["long_prefill_threshold"]
    n_prefill = np.int64(0)
    n_decode = np.int64(0)
    decode_ctx = np.int64(0)
    preempted = False

    # Pass A: running requests.
    k = 0
    while k < inst[i]["batch_len"]:
        if budget == 0:
            break  # the rest get no work (and do not advance) this step
        r = batch[i, k]
        c = reqs[r]["computed"]
        remaining = reqs[r]["prefill_target"] - c
        if remaining > 0:  # chunked-prefill continuation
            n = remaining
            if cap > 0 and n > cap:
                n = cap
            if n > budget:
                n = budget
        else:  # decode: KV for one more token
            n = 1
        # a decode token that fits in the last block and fills no keyed block needs no call
        ok = remaining <= 0 and c < reqs[r]["blocks_held"] * bs and not decode_fills_block(st, r, c, bs)
        while not ok:
            if kv_grow(st, i, r, n):
                ok = True
                break
            j = choose_victim(st, i, victim_kind, now)
            if j < k:  # already served this step: give its tokens back
                v = batch[i, j]
                if prefix_caching:
                    kv_forget_chunk(st, i, v, context[j], work[j])
                budget += work[j]
                if context[j] < reqs[v]["prefill_target"]:
                    n_prefill -= work[j]
                else:
                    n_decode -= 1
                    decode_ctx -= context[j]
            released = reqs[batch[i, j]]["blocks_held"]
            if tracing_schedulers(st):
                log_victim(st, i, now, j, r)
            victim = preempt_slot(st, i, j)
            if tracing(st):
                log_preemption(st, i, now, victim, r, released)
            preempted = True
            if victim == r:
                break
            if j < k:
                k -= 1  # r moved one slot left
        if not ok:
            continue  # r left the batch; slot k now holds the next request (if any)
        work[k] = n
        context[k] = c
        budget -= n
        if remaining > 0:
            n_prefill += n
        else:
            n_decode += 1
            decode_ctx += c
        k += 1
    m = inst[i]["batch_len"]
    for j in range(m):
        st.explicit[j] = batch[i, j]
    for j in range(k, m):
        work[j] = 0

    # Pass B: admissions from the head of the wait queue.
    if not preempted:
        budget, admitted, m = admit_waiting(st, i, now, budget, cap, m)
        n_prefill += admitted
    else:
        if inst[i]["batch_len"] > inst[i]["batch_peak"]:
            inst[i]["batch_peak"] = inst[i]["batch_len"]
        if tracing_schedulers(st):
            log_blocked_head(st, i, now, np.int64(0), budget, cap, BlockReason.PREEMPTION)
    return n_prefill, n_decode, decode_ctx, m


@helper
def form_batch_riding(st, i, now, s, n_due):
    """Form instance i's batch of local step s from its calendar (engine/calendar.py): the
    ``n_due`` requests taken out for this step (in batch order) plus the riders.

    Applies only when the step can neither run out of token budget nor out of KV blocks
    in pass A -- then every running request gets its full work whatever the order, no
    preemption happens, and visiting the riders would change nothing.  The counted
    riders' anonymous blocks are taken first, in one go: pass A takes the first blocks of
    the free list whoever takes which, so the same named blocks are evicted -- unless a
    visited request registers a key that a free block holds (whether that block is
    evicted before or after the registration depends on the order): then it does not
    apply either.  Returns (applied,
    P, D of the explicit entries, Σ their decode context, explicit entries); when not
    applied nothing has changed."""
    inst = st.inst
    reqs = st.reqs
    bs = np.int64(st.inst[i]["block_size"])
    budget = inst[i]["max_batched_tokens"]
    cap = inst[i]["long_prefill_threshold"]
    demand = inst[i]["ride_count"]  # one token per rider
    need = np.int64(0)
    order_matters = False
    for d in range(n_due):
        r = st.due[d]
        c = reqs[r]["computed"]
        n = reqs[r]["prefill_target"] - c
        if n > 0:
            if cap > 0 and n > cap:
                n = cap
        else:
            n = 1
        demand += n
        need += (c + n + bs - 1) // bs - reqs[r]["blocks_held"]
        if registers_over_free_block(st, i, r, c, n):
            order_matters = True
    riders_new = st.ride_phase[i, s % bs]  # the counted riders' new blocks (engine/calendar.py)
    if demand > budget or need + riders_new > kv_free_blocks(inst, i) or (order_matters and riders_new > 0):
        return False, np.int64(0), np.int64(0), np.int64(0), np.int64(0)
    if riders_new > 0:  # taken before the visits: the same blocks leave the free list (see above)
        take_anonymous(st, i, riders_new)
        if inst[i]["kv_allocated"] > inst[i]["kv_peak_allocated"]:
            inst[i]["kv_peak_allocated"] = inst[i]["kv_allocated"]

    n_prefill = np.int64(0)
    n_decode = np.int64(0)
    decode_ctx = np.int64(0)
    m = 0
    prev_step = inst[i]["prev_step"]
    for d in range(n_due):
        r = st.due[d]
        c = reqs[r]["computed"]
        n = reqs[r]["prefill_target"] - c
        if n > 0:  # prefill chunk
            if cap > 0 and n > cap:
                n = cap
            kv_grow(st, i, r, n)  # cannot fail: checked above
            st.explicit[m] = r
            st.work[m] = n
            st.context[m] = c
            m += 1
            n_prefill += n
            continue
        kv_grow(st, i, r, np.int64(1))  # a new block and/or a filled block's key
        g = reqs[r]["generated"]
        if g + 1 >= reqs[r]["output_len"] or reqs[r]["last_token_step"] != prev_step:
            # its last token, or a token that does not follow its previous one: visit it
            st.explicit[m] = r
            st.work[m] = 1
            st.context[m] = c
            m += 1
            n_decode += 1
            decode_ctx += c
        else:  # rides on: back into the calendar at its next event
            due = s + 1 + steps_to_next_event(st, i, r, c + 1, g + 1, reqs[r]["blocks_held"])
            calendar_insert(st, i, r, due, c + 1)
    budget -= demand
    budget, admitted, m = admit_waiting(st, i, now, budget, cap, m)
    return True, n_prefill + admitted, n_decode, decode_ctx, m


# ----------------------------------------------------------------------------- step time


@helper
def step_duration_us(st, i, n_prefill, n_decode, decode_ctx, m):
    """Duration of the step just formed on instance i (§5), in µs: P prefill tokens, D
    decode requests whose contexts sum to decode_ctx; the roofline model also reads the
    explicit entries' prefill chunks (in batch order)."""
    inst = st.inst
    if inst[i]["latency_kind"] == LatencyKind.BLACKBOX:
        return blackbox_step_us(inst[i]["beta0"], inst[i]["beta1"], inst[i]["beta2"], n_prefill, n_decode)
    reqs = st.reqs
    params = st.roofline[inst[i]["pool"]]  # the roofline row of the instance's deployment
    pg = 0.0
    pv = 0.0
    pd = 0.0
    npre = 0
    for e in range(m):
        n = st.work[e]
        s = st.context[e]
        if n == 0 or s >= reqs[st.explicit[e]]["prefill_target"]:
            continue  # no work, or a decode entry (summed below)
        g, v, d = roofline_entry(params, s, n)
        pg += g
        pv += v
        pd += d
        npre += 1
    dg, dv, dd = roofline_decode_sums(params, n_decode, decode_ctx)
    return roofline_step_us(params, pg, pv, pd, npre, dg, dv, dd, n_decode)


# ----------------------------------------------------------------------------- execution


@helper
def execute_step(st, i, now, dt, step_idx, m):
    """Apply step ``step_idx`` of duration ``dt`` that started at ``now`` to the explicit
    entries (§3.4-5): advance prefill chunks, emit tokens at step end + a2, complete
    requests and free their KV.  (Riders gain their token implicitly.)

    ITL bookkeeping: a token emitted right after the request's token of the instance's
    previous step extends its current run (its sample is this step's duration, rebuilt
    from the step log later); any other non-first token goes to the irregular log with
    its sample.  Samples are token-time gaps, or in compat mode the reference's step + a2
    (plus one more at completion).  Completed requests are listed in ``done`` and leave
    the batch.  Returns the number completed."""
    inst = st.inst
    reqs = st.reqs
    compat = st.settings[0]["compat"] != 0
    end = now + dt
    a2 = output_token_delay_us(inst[i]["alpha2"])
    token_us = end + a2
    prev_step = inst[i]["prev_step"]
    n_done = 0
    for e in range(m):
        r = st.explicit[e]
        n = st.work[e]
        if n == 0 and not (reqs[r]["first_token_us"] < 0 and reqs[r]["computed"] >= reqs[r]["prefill_target"]):
            continue  # no work this step (a fully cached prompt admitted in compat mode has none and is done)
        reqs[r]["computed"] += n
        if reqs[r]["computed"] < reqs[r]["prefill_target"]:
            continue  # a prefill chunk that does not finish the prompt
        # prefill finished (first or recomputed) or a decode: one new output token
        if reqs[r]["first_token_us"] < 0:
            end_phase(st, i, r, np.int64(PhaseEnd.PREFILL_DONE), token_us, step_idx)
        else:
            sample = dt + a2 if compat else token_us - reqs[r]["last_token_us"]
            reqs[r]["itl_sum_us"] += sample
            if reqs[r]["last_token_step"] != prev_step:  # not a continuation: log it
                log_irregular_token(st, r, step_idx, sample)
                reqs[r]["run_start_step"] = step_idx
        reqs[r]["last_token_us"] = token_us
        reqs[r]["last_token_step"] = step_idx
        reqs[r]["last_step_us"] = dt
        reqs[r]["generated"] += 1
        if reqs[r]["generated"] >= reqs[r]["output_len"]:
            if compat and reqs[r]["requested_output"] > 0:
                # the reference's conventions at completion: one more ITL sample (step + a2),
                # and the last token's KV written before the release -- a block it fills is
                # keyed (a later turn of the conversation finds it); no room: nothing happens
                reqs[r]["itl_sum_us"] += dt + a2
                kv_grow(st, i, r, np.int64(1))
            end_phase(st, i, r, np.int64(PhaseEnd.OUTPUT_DONE), token_us, step_idx)
            st.done[n_done] = r
            n_done += 1
    for d in range(n_done):
        batch_remove(st, i, st.done[d])
    inst[i]["prev_step"] = step_idx
    return n_done


@helper
def reschedule_explicit(st, i, s, m, step_idx):
    """After local step s: the explicit entries still running are exact again as of step
    s + 1; with event skipping, each goes back into the calendar -- at s + 1 if it is
    still in prefill or got no token this step, else at its next event."""
    reqs = st.reqs
    riding = st.settings[0]["event_skipping"] != 0
    for e in range(m):
        r = st.explicit[e]
        if reqs[r]["state"] != RequestState.RUNNING:
            continue
        reqs[r]["sync_step"] = s + 1
        if not riding:
            continue
        c = reqs[r]["computed"]
        due = s + 1
        if c >= reqs[r]["prefill_target"] and reqs[r]["last_token_step"] == step_idx:
            due += steps_to_next_event(st, i, r, c, reqs[r]["generated"], reqs[r]["blocks_held"])
        calendar_insert(st, i, r, due, c)


# ----------------------------------------------------------------------------- the handler


@helper
def on_step(st, i, t):
    """Step event of instance i at time t: form the batch, time it, execute it, release
    closed-loop followers, schedule the next step while there is work."""
    inst = st.inst
    lp = st.loop
    inst[i]["step_pending"] = 0
    tiered = st.kv_tier_inst[i]["n_tiers"] > 0
    if tiered:
        tier_catch_up(st, i, t)
        if st.pd_inst[i]["xq_len"] > 0:  # stores that landed may have freed the blocks they wait for
            pd_retry_waiting(st, i, t)
    wq_at_start = inst[i]["wq_len"]
    if st.policy_kind[PolicySlot.PRIORITY] != PriorityKind.CONSTANT:
        update_wait_queue_priorities(st, i, t)
    if st.policy_kind[PolicySlot.SCHEDULER] != SchedulerKind.FCFS:
        reorder_wait_queue(st, i, t)
    s = inst[i]["steps"]  # this step's local index
    riding = False
    if st.settings[0]["event_skipping"] != 0:
        n_due = calendar_take_due(st, i, s)
        riding, n_prefill, n_decode, decode_ctx, m = form_batch_riding(st, i, t, s, n_due)
        if not riding:
            calendar_clear(st, i, s)
    if not riding:
        n_prefill, n_decode, decode_ctx, m = form_batch_all(st, i, t)
        lp[0]["steps_visiting_all"] += 1
    if inst[i]["batch_len"] == 0:
        if tiered and inst[i]["wq_len"] + st.pd_inst[i]["xq_len"] > 0:
            wake_for_writes(st, i, t)  # KV tiers: GPU blocks pinned by stores free when those land
        if st.pd_inst[i]["held_outside"] > 0:
            # P/D: blocks held here outside a batch free or arrive later (the queue waits for them,
            # engine/disaggregation.py); arrived requests a preemption kept out are admitted now
            if st.pd_inst[i]["rx_len"] > 0:
                ensure_step(st, i, t)
        elif inst[i]["wq_len"] > 0 and inst[i]["step_pending"] == 0:
            lp[0]["status"] = Status.STALL
            lp[0]["error_instance"] = i
        return  # an empty batch never steps
    n_decode += inst[i]["ride_count"]  # riders: one decode token each
    decode_ctx += inst[i]["ride_ctx"]
    dt = step_duration_us(st, i, n_prefill, n_decode, decode_ctx, m)
    autoscaled = st.settings[0]["autoscaled"] != 0
    if autoscaled and st.life[i]["state"] == LifeState.WARMING:  # autoscaling: a new instance warms up
        dt = warm_step_us(st, i, dt, t)
    if tiered and st.kv_tier_inst[i]["step_load_us"] > 0:  # load: step -- this step's admissions' loads
        dt += np.int64(math.ceil(st.kv_tier_inst[i]["step_load_us"]))
        st.kv_tier_inst[i]["step_load_us"] = 0.0
    step_idx = log_step(st, i, dt)
    inst[i]["steps"] = s + 1
    inst[i]["busy_us"] += dt
    inst[i]["sum_wq_len"] += wq_at_start
    inst[i]["sum_batch_len"] += inst[i]["batch_len"]
    if st.settings[0]["flow"] != 0:  # flow control: its slots stay taken until the step ends (engine/flow.py)
        st.flow_inst[i]["step_batch"] = inst[i]["batch_len"]
    inst[i]["sum_kv_allocated"] += inst[i]["kv_allocated"]
    inst[i]["prefill_tokens"] += n_prefill
    inst[i]["decode_tokens"] += n_decode
    n_done = execute_step(st, i, t, dt, step_idx, m)
    inst[i]["ride_ctx"] += inst[i]["ride_count"]  # each rider's token is now in KV
    reschedule_explicit(st, i, s, m, step_idx)
    end = t + dt
    for d in range(n_done):
        end_phase(st, i, st.done[d], np.int64(PhaseEnd.FOLLOWER_RELEASED), end, step_idx)
    if st.pd_inst[i]["xq_len"] > 0:  # prefilled requests wait here for blocks this step may have freed
        pd_retry_waiting(st, i, end)
    inst[i]["busy_until_us"] = end
    inst[i]["last_step_end_us"] = end
    inst[i]["last_dt_us"] = dt
    if st.settings[0]["check_invariants"] != 0:
        if not kv_conserved(st, i) or (tiered and not tiers_conserved(st, i)):
            lp[0]["status"] = Status.INVARIANT_KV
            lp[0]["error_instance"] = i
            return
        if inst[i]["batch_len"] > inst[i]["max_num_seqs"]:
            lp[0]["status"] = Status.INVARIANT_BATCH
            lp[0]["error_instance"] = i
            return
    if inst[i]["batch_len"] > 0 or inst[i]["wq_len"] > 0 or st.pd_inst[i]["rx_len"] > 0:
        push_event(st, end, event_priority(InstanceEvent.STEP, i), np.int64(-1))
        inst[i]["step_pending"] = 1
    elif tiered and st.pd_inst[i]["xq_len"] > 0:
        wake_for_writes(st, i, end)  # P/D transfers wait here for blocks that stores still pin
    elif autoscaled and st.life[i]["state"] == LifeState.DRAINING:
        push_life(st, i, end, LifeStep.STEPS_DONE)  # its last step: terminated when it ends
