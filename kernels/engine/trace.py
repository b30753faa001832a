"""Writers of the run's logs: one step-log row per engine step, one irregular-ITL row per
token that does not continue its request's run of consecutive steps (schema.tables).
The loop guarantees room before each step (``log_room``); the caller grows the logs when
the loop returns Status.LOG_FULL."""

from ..jit import helper


@helper
def log_room(st, i):
    """True if the logs can take one more step of instance i (one step row, and one
    irregular row per batch slot)."""
    lp = st.loop
    return (lp[0]["steps"] + 1 <= st.step_log.shape[0]
            and lp[0]["irregular_records"] + st.inst[i]["max_num_seqs"] <= st.irr_log.shape[0])


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
