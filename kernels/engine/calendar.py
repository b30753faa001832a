"""Event skipping: running decode requests "ride" between their events.

In the common engine step almost nothing happens to most running requests: a decode
request that neither needs a new KV block, nor fills one, nor finishes only gains one
token, exactly like every other such request.  So instead of visiting every running
request every step, each instance keeps a *calendar*: a ring of ``calendar_size``
buckets indexed by the instance's local step number, each a singly linked list (through
``reqs["cal_next"]``) of the requests that need attention at that step:

- a decode request's next *event*: the step that allocates a new KV block (its KV
  tokens reach a block boundary), the step that fills a block (its key is registered,
  docs/semantics.md §6), or the step that emits its last token;
- a request that must be visited one by one at the next step: one still in prefill, or
  one whose next token does not directly follow its previous one (after a step in which
  the token budget left it without work).

A riding request's per-token fields (computed, generated, last token time and step,
ITL sum) are exact as of the start of local step ``sync_step``; in each later step it
gains one token.  ``materialize`` brings them up to date in O(1) from the instance's
step clock, because every step a riding request takes part in is consecutive and gives
it exactly one token (the engine falls back to visiting everybody otherwise, see
engine/step.py).  ``ride_count`` and ``ride_ctx`` (Σ of the riders' KV tokens) give the
step's decode count and, for the roofline model, its total decode context without a
visit.

A *counted* rider needs no visit for its blocks either: one whose named blocks
(kv/cache.py) are all allocated and full, so that every block it still takes is
anonymous and no block it fills gets a key.  With c KV tokens at the start of step s it
takes a new block exactly in the steps s' with (c + s' - s) divisible by the block size,
so ``st.ride_phase[i, p]`` counts the counted riders whose new blocks fall in the steps
congruent to p (``reqs["ride_phase"]`` is the rider's p, -1 for others), the step takes
``st.ride_phase[i, s % block_size]`` (the instance's block size) anonymous blocks at once, and ``materialize``
derives a counted rider's block count from its tokens.  Its only remaining event is its
last token.
"""

import numpy as np

from ..jit import helper
from ..kv.cache import key_deferred
from ..latency.steptime import output_token_delay_us


@helper
def materialize(st, i, r, s):
    """Bring riding request r of instance i up to date at the start of local step s: it
    gained one token in each of its instance's steps sync_step .. s-1."""
    reqs = st.reqs
    k = s - reqs[r]["sync_step"]
    if k <= 0:
        return
    inst = st.inst
    a2 = output_token_delay_us(inst[i]["alpha2"])
    token_us = inst[i]["last_step_end_us"] + a2
    sample_sum = token_us - reqs[r]["last_token_us"]  # telescoping: Σ of the gaps
    if st.settings[0]["compat"] != 0:  # the reference's samples are step + a2 each
        sample_sum += k * a2
    reqs[r]["itl_sum_us"] += sample_sum
    reqs[r]["computed"] += k
    reqs[r]["generated"] += k
    reqs[r]["last_token_us"] = token_us
    reqs[r]["last_token_step"] = inst[i]["prev_step"]
    reqs[r]["last_step_us"] = inst[i]["last_dt_us"]
    reqs[r]["sync_step"] = s
    if reqs[r]["ride_phase"] >= 0:  # its blocks were taken in aggregate: derive them
        bs = np.int64(st.inst[i]["block_size"])
        reqs[r]["blocks_held"] = (reqs[r]["computed"] + bs - 1) // bs


@helper
def rides_counted(st, r, c, bs):
    """True if request r, riding with c KV tokens in blocks of bs (its instance's), is a
    counted rider: all its named blocks are allocated and full."""
    return c // bs >= st.reqs[r]["named_upto"]


@helper
def steps_to_next_event(st, i, r, c, g, held):
    """Steps from now until decode request r of instance i (KV tokens c, g tokens
    emitted, ``held`` blocks, as of the start of a step) needs a visit: 0 = this step."""
    reqs = st.reqs
    bs = np.int64(st.inst[i]["block_size"])
    d = reqs[r]["output_len"] - g - 1  # the step emitting its last token
    named = not rides_counted(st, r, c, bs)
    d_alloc = held * bs - c  # the step whose token needs a new block
    if named and d_alloc < d:
        d = d_alloc
    if named and st.settings[0]["prefix_caching"] != 0:
        j = c // bs  # the block its next tokens fill
        if j < reqs[r]["key_count"] and not key_deferred(st, r, reqs[r]["key_start"] + j):
            d_fill = bs - 1 - (c - j * bs)  # the step whose token completes block j
            if d_fill < d:
                d = d_fill
    limit = st.settings[0]["calendar_size"] - 1
    if d > limit:
        d = limit  # a wake-up with nothing to do, to stay inside the ring
    return d


@helper
def calendar_insert(st, i, r, due, c):
    """Put request r, which has c KV tokens after the step just formed or executed, into
    instance i's bucket of local step ``due`` (as a counted rider if it is one)."""
    reqs = st.reqs
    size = st.settings[0]["calendar_size"]
    b = due & (size - 1)
    reqs[r]["cal_next"] = st.calendar[i, b]
    st.calendar[i, b] = r
    st.inst[i]["ride_count"] += 1
    st.inst[i]["ride_ctx"] += reqs[r]["computed"]
    bs = np.int64(st.inst[i]["block_size"])
    if rides_counted(st, r, c, bs):
        p = (reqs[r]["sync_step"] - reqs[r]["computed"]) % bs
        reqs[r]["ride_phase"] = p
        st.ride_phase[i, p] += 1


@helper
def calendar_take_due(st, i, s):
    """Take the requests of local step s out of instance i's calendar, bring them up to
    date and list them in ``st.due`` in batch order (admission order); returns how many."""
    reqs = st.reqs
    inst = st.inst
    size = st.settings[0]["calendar_size"]
    b = s & (size - 1)
    r = st.calendar[i, b]
    st.calendar[i, b] = -1
    n = 0
    while r >= 0:
        nxt = reqs[r]["cal_next"]
        # ride_ctx holds its KV tokens as of the start of this step (advanced every step)
        inst[i]["ride_count"] -= 1
        p = reqs[r]["ride_phase"]
        if p >= 0:
            st.ride_phase[i, p] -= 1
        materialize(st, i, r, s)
        reqs[r]["ride_phase"] = -1
        inst[i]["ride_ctx"] -= reqs[r]["computed"]
        # insertion sort by admission order (a bucket holds a few requests)
        seq = reqs[r]["admit_seq"]
        k = n
        while k > 0 and reqs[st.due[k - 1]]["admit_seq"] > seq:
            st.due[k] = st.due[k - 1]
            k -= 1
        st.due[k] = r
        n += 1
        r = nxt
    return n


@helper
def calendar_remove(st, i, r):
    """Take running request r out of instance i's calendar between two steps (it leaves
    the batch: a cancellation, engine/flow.py), up to date at the start of the next step.
    Its bucket is not recorded, so the buckets are searched: O(calendar size + riders),
    paid once per cancelled running request."""
    reqs = st.reqs
    inst = st.inst
    materialize(st, i, r, inst[i]["steps"])
    for b in range(st.settings[0]["calendar_size"]):
        prev = np.int64(-1)
        q = st.calendar[i, b]
        while q >= 0:
            if q == r:
                if prev < 0:
                    st.calendar[i, b] = reqs[r]["cal_next"]
                else:
                    reqs[prev]["cal_next"] = reqs[r]["cal_next"]
                reqs[r]["cal_next"] = -1
                inst[i]["ride_count"] -= 1
                inst[i]["ride_ctx"] -= reqs[r]["computed"]
                p = reqs[r]["ride_phase"]
                if p >= 0:
                    st.ride_phase[i, p] -= 1
                    reqs[r]["ride_phase"] = -1
                return
            prev = q
            q = reqs[q]["cal_next"]


@helper
def calendar_clear(st, i, s):
    """Empty instance i's calendar, bringing every running request up to date at the start
    of local step s (before a step that visits all of them)."""
    inst = st.inst
    for k in range(inst[i]["batch_len"]):
        materialize(st, i, st.batch[i, k], s)
        st.reqs[st.batch[i, k]]["ride_phase"] = -1
    for b in range(st.settings[0]["calendar_size"]):
        st.calendar[i, b] = -1
    for p in range(inst[i]["block_size"]):
        st.ride_phase[i, p] = 0
    inst[i]["ride_count"] = 0
    inst[i]["ride_ctx"] = 0


@helper
def sync_riders(st, i):
    """Bring every running request of instance i up to date after its last executed step
    (before anyone reads the tables); the calendar stays valid."""
    s = st.inst[i]["steps"]
    for k in range(st.inst[i]["batch_len"]):
        materialize(st, i, st.batch[i, k], s)
