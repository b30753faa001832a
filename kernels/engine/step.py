"""One engine step of one instance (docs/semantics.md §3-5): priorities and queue order,
batch formation (running requests first, then admissions from the wait-queue head),
the step time, and its execution (tokens, completions, KV release).

The running batch of instance i is ``batch[i, :batch_len]`` in admission order;
``work[k]`` and ``context[k]`` hold what batch slot k computes this step.
"""

import numpy as np

from ..jit import helper
from ..kv.cache import kv_admit, kv_conserved, kv_forget_chunk, kv_grow, kv_release
from ..latency.steptime import blackbox_step_us, output_token_delay_us, roofline_entry, roofline_step_us
from ..policies.priority import update_wait_queue_priorities
from ..policies.scheduler import reorder_wait_queue
from ..policies.victim import choose_victim
from ..schema import InstanceEvent, LatencyKind, PolicySlot, PriorityKind, RequestState, SchedulerKind, Status
from ..structs.dlist import dl_pop_front, dl_push_front
from .events import event_priority, push_event
from .handlers import release_follower
from .trace import log_irregular_token, log_step


# ----------------------------------------------------------------------------- preemption


@helper
def preempt_slot(st, i, j):
    """Preempt the request in batch slot j (recompute semantics, §4): release its blocks,
    reset its progress, put it at the head of the wait queue; later slots shift left
    (with their work/context).  Returns the victim's id."""
    inst = st.inst
    reqs = st.reqs
    v = st.batch[i, j]
    n = inst[i]["batch_len"]
    for k in range(j, n - 1):
        st.batch[i, k] = st.batch[i, k + 1]
        st.work[k] = st.work[k + 1]
        st.context[k] = st.context[k + 1]
    inst[i]["batch_len"] = n - 1
    kv_release(st, i, v)
    reqs[v]["computed"] = 0
    reqs[v]["state"] = RequestState.QUEUED
    reqs[v]["preemptions"] += 1
    inst[i]["preemptions"] += 1
    dl_push_front(reqs["queue_prev"], reqs["queue_next"], inst["wq_head"], inst["wq_tail"], inst["wq_len"], i, v)
    if inst[i]["wq_len"] > inst[i]["wq_peak"]:
        inst[i]["wq_peak"] = inst[i]["wq_len"]
    return v


# ----------------------------------------------------------------------------- batch formation


@helper
def form_batch(st, i, now):
    """Form instance i's batch for a step starting at ``now`` (§3.2).

    Pass A gives running requests their next chunk / decode token in batch order,
    preempting (policies/victim.py) when KV runs out -- a victim already served this step
    gives its tokens back; pass B admits from the wait-queue head (strict head-of-line)
    unless a preemption happened.  Writes work[k] (tokens batch slot k computes, 0 = none)
    and context[k] (tokens already in KV).  Returns (prefill tokens P, decode requests D).
    """
    inst = st.inst
    reqs = st.reqs
    batch = st.batch
    work = st.work
    context = st.context
    prefix_caching = st.settings[0]["prefix_caching"] != 0
    victim_kind = st.policy_kind[PolicySlot.VICTIM]
    prio_params = st.policy_param[PolicySlot.PRIORITY]
    bs = st.settings[0]["block_size"]
    budget = inst[i]["max_batched_tokens"]
    cap = inst[i]["long_prefill_threshold"]
    n_prefill = np.int64(0)
    n_decode = np.int64(0)
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
        # fast path: a decode token that fits in the last block needs no allocation
        ok = remaining <= 0 and c < reqs[r]["blocks_held"] * bs
        while not ok:
            if kv_grow(st, i, r, n):
                ok = True
                break
            j = choose_victim(st, i, victim_kind, prio_params, now)
            if j < k:  # already served this step: give its tokens back
                v = batch[i, j]
                if prefix_caching:
                    kv_forget_chunk(st, i, v, context[j], work[j])
                budget += work[j]
                if context[j] < reqs[v]["prefill_target"]:
                    n_prefill -= work[j]
                else:
                    n_decode -= 1
            victim = preempt_slot(st, i, j)
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
        k += 1
    for j in range(k, inst[i]["batch_len"]):
        work[j] = 0

    # Pass B: admissions from the head of the wait queue.
    if not preempted:
        while inst[i]["wq_len"] > 0 and inst[i]["batch_len"] < inst[i]["max_num_seqs"] and budget > 0:
            r = inst[i]["wq_head"]
            target = reqs[r]["prompt_len"] + reqs[r]["generated"]
            reqs[r]["prefill_target"] = target
            n, cached = kv_admit(st, i, r, budget, cap)
            if n < 0:
                break  # head-of-line: no skipping
            dl_pop_front(reqs["queue_prev"], reqs["queue_next"], inst["wq_head"], inst["wq_tail"], inst["wq_len"], i)
            k = inst[i]["batch_len"]
            batch[i, k] = r
            inst[i]["batch_len"] = k + 1
            work[k] = n
            context[k] = cached
            reqs[r]["state"] = RequestState.RUNNING
            if reqs[r]["first_scheduled_us"] < 0:
                reqs[r]["first_scheduled_us"] = now
                reqs[r]["cached_tokens"] = cached
            inst[i]["prefix_query_tokens"] += target
            inst[i]["prefix_hit_tokens"] += cached
            budget -= n
            n_prefill += n
    if inst[i]["batch_len"] > inst[i]["batch_peak"]:
        inst[i]["batch_peak"] = inst[i]["batch_len"]
    return n_prefill, n_decode


# ----------------------------------------------------------------------------- step time


@helper
def step_duration_us(st, i, n_prefill, n_decode):
    """Duration of the step just formed on instance i (§5), in µs."""
    inst = st.inst
    if inst[i]["latency_kind"] == LatencyKind.BLACKBOX:
        return blackbox_step_us(inst[i]["beta0"], inst[i]["beta1"], inst[i]["beta2"], n_prefill, n_decode)
    reqs = st.reqs
    pg = 0.0
    pv = 0.0
    pd = 0.0
    npre = 0
    dg = 0.0
    dv = 0.0
    dd = 0.0
    ndec = 0
    for k in range(inst[i]["batch_len"]):
        n = st.work[k]
        if n == 0:
            continue
        r = st.batch[i, k]
        s = st.context[k]
        g, v, d = roofline_entry(st.roofline, s, n)
        if s < reqs[r]["prefill_target"]:  # context below the prefill target: a prefill chunk
            pg += g
            pv += v
            pd += d
            npre += 1
        else:
            dg += g
            dv += v
            dd += d
            ndec += 1
    return roofline_step_us(st.roofline, pg, pv, pd, npre, dg, dv, dd, ndec)


# ----------------------------------------------------------------------------- execution


@helper
def execute_step(st, i, now, dt, step_idx):
    """Apply step ``step_idx`` of duration ``dt`` that started at ``now`` (§3.4-5): advance
    prefill chunks, emit tokens at step end + a2, complete requests and free their KV.

    ITL bookkeeping: a token emitted right after the request's token of the instance's
    previous step extends its current run (its sample is this step's duration, rebuilt
    from the step log later); any other non-first token goes to the irregular log with
    its sample.  Samples are token-time gaps, or in compat mode the reference's step + a2
    (plus one more at completion).  Completed requests are listed in ``done``.  Returns
    the number completed."""
    inst = st.inst
    reqs = st.reqs
    compat = st.settings[0]["compat"] != 0
    end = now + dt
    a2 = output_token_delay_us(inst[i]["alpha2"])
    token_us = end + a2
    prev_step = inst[i]["prev_step"]
    write = 0
    n_done = 0
    for k in range(inst[i]["batch_len"]):
        r = st.batch[i, k]
        n = st.work[k]
        if n > 0:
            reqs[r]["computed"] += n
            if reqs[r]["computed"] >= reqs[r]["prefill_target"]:
                # prefill finished (first or recomputed) or a decode: one new output token
                if reqs[r]["first_token_us"] < 0:
                    reqs[r]["first_token_us"] = token_us
                    reqs[r]["run_start_step"] = step_idx
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
                    if compat:  # the reference's extra sample at completion
                        reqs[r]["itl_sum_us"] += dt + a2
                    kv_release(st, i, r)
                    reqs[r]["state"] = RequestState.COMPLETED
                    inst[i]["completed"] += 1
                    st.done[n_done] = r
                    n_done += 1
                    continue
        st.batch[i, write] = r
        write += 1
    inst[i]["batch_len"] = write
    inst[i]["prev_step"] = step_idx
    return n_done


# ----------------------------------------------------------------------------- the handler


@helper
def on_step(st, i, t):
    """Step event of instance i at time t: form the batch, time it, execute it, release
    closed-loop followers, schedule the next step while there is work."""
    inst = st.inst
    lp = st.loop
    inst[i]["step_pending"] = 0
    wq_at_start = inst[i]["wq_len"]
    prio_params = st.policy_param[PolicySlot.PRIORITY]
    if st.policy_kind[PolicySlot.PRIORITY] != PriorityKind.CONSTANT:
        update_wait_queue_priorities(st, i, prio_params, t)
    if st.policy_kind[PolicySlot.SCHEDULER] == SchedulerKind.SORT:
        reorder_wait_queue(st, i, st.policy_param[PolicySlot.SCHEDULER])
    n_prefill, n_decode = form_batch(st, i, t)
    if inst[i]["batch_len"] == 0:
        if inst[i]["wq_len"] > 0:
            lp[0]["status"] = Status.STALL
            lp[0]["error_instance"] = i
        return  # an empty batch never steps
    dt = step_duration_us(st, i, n_prefill, n_decode)
    step_idx = log_step(st, i, dt)
    inst[i]["steps"] += 1
    inst[i]["busy_us"] += dt
    inst[i]["sum_wq_len"] += wq_at_start
    inst[i]["sum_batch_len"] += inst[i]["batch_len"]
    inst[i]["prefill_tokens"] += n_prefill
    inst[i]["decode_tokens"] += n_decode
    n_done = execute_step(st, i, t, dt, step_idx)
    for d in range(n_done):
        release_follower(st, st.done[d])
    end = t + dt
    inst[i]["busy_until_us"] = end
    inst[i]["last_step_end_us"] = end
    if st.settings[0]["check_invariants"] != 0:
        if not kv_conserved(st, i):
            lp[0]["status"] = Status.INVARIANT_KV
            lp[0]["error_instance"] = i
            return
        if inst[i]["batch_len"] > inst[i]["max_num_seqs"]:
            lp[0]["status"] = Status.INVARIANT_BATCH
            lp[0]["error_instance"] = i
            return
    if inst[i]["batch_len"] > 0 or inst[i]["wq_len"] > 0:
        push_event(st, end, event_priority(InstanceEvent.STEP, i), -1)
        inst[i]["step_pending"] = 1

