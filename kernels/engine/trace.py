"""Writers of the run's logs: one step-log row per engine step, one irregular-ITL row per
token that does not continue its request's run of consecutive steps, and -- when decisions
are traced (settings.trace_level) -- one row per admission, routing decision and
preemption (schema.tables).  The loop guarantees room before each step (``log_room``);
the caller grows the logs when the loop returns Status.LOG_FULL.  The admission and
routing logs have a row per request from the start."""

import numpy as np

from ..jit import helper
from ..policies.routing import _load
from ..schema import N_TRACE_ALTERNATIVES, SnapField, TraceLevel


@helper
def tracing(st):
    """True if decisions are logged."""
    return st.settings[0]["trace_level"] >= TraceLevel.DECISIONS


@helper
def log_room(st, i):
    """True if the logs can take one more step of instance i (one step row, and one
    irregular row per batch slot)."""
    lp = st.loop
    seqs = st.inst[i]["max_num_seqs"]
    return (lp[0]["steps"] + 1 <= st.step_log.shape[0]
            and lp[0]["irregular_records"] + seqs <= st.irr_log.shape[0]
            and (not tracing(st) or lp[0]["preempt_records"] + seqs <= st.preempt_log.shape[0]))


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
    n_active = 0
    for i in range(n_inst):
        if st.inst[i]["active"] != 0:
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
            if i == chosen or st.inst[i]["active"] == 0:
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
