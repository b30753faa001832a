"""α/β fitted by replaying the recording (``blis-fast calibrate --fit``, the default method).

Token times seen by a client carry the network's and the client's jitter -- milliseconds,
against steps of a few milliseconds -- so rebuilding the engine's steps from them
(``blis_fast.studies.fit``, ``--fit-method steps``) works only on precise times.  This
method needs no step to be seen.  It replays the recorded requests (each arriving when it
was sent) through the live engine (``blis_fast.serve.engine.replay_live``), which says
which instance ran each request and every step's composition; then for each completed
request:

- **β**: its decode time, last token - first token, is the sum of the durations of the
  steps its instance ran in between (the request is in the batch, so the instance never
  idles): ``y = Σ (β0 + β1·prefill_s + β2·decode_s) = β · (n, Σ prefill, Σ decode)`` -- a
  linear row per request whose noise is only that of its two token times, however long it
  ran.  Idle time the replay shows between them (a transfer wait) is taken off ``y``.
- **α**: its TTFT less what the replay spent between its queue entry and its first token
  (waiting and prefill, given β) and the fixed admission and routing latencies:
  ``z = (α0 + α2) + α1·L``.  Only α0 + α2 is identifiable; it is reported as α0, α2 = 0
  (no queue or step ordering depends on α2).  Fitted from the requests that found their
  instance idle (a step started when they were queued; their z does not depend on the α
  replayed) when MIN_IDLE_REQUESTS of them vary in length, else α1 is kept.  Then α0 is
  shifted until the simulated TTFT percentiles (p50, p90, p99) are off the observed ones
  by as much above as below (``_shift_alpha0``): the delays the engine does not model go
  into it.

The steps: a first β from the recording's own timeline (``_timeline_rows``: no
coefficient needed), then β refined by replays until the predicted decode times move by
less than REPLAY_CONVERGED (relative; at most REPLAY_ITERATIONS, the step halved when a
replay moves away), along with the emission gap (``emission_positions``); then α; β then
α FIT_ROUNDS times.  All fits are Huber fits (``fit.nonnegative_huber_fit``).  Several
instances are fine: the replay says which ran what.  docs/calibrate.md has the whole story.
Assumptions: the observer's requests are all the server saw; its engine is the config's
but for α/β.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from blis_fast.errors import ConfigError
from blis_fast.studies.fit import FittedCoefficients, nonnegative_huber_fit
from blis_fast.workload.formats.observed import Observation
from blis_fast.workload.generate import Requests

REPLAY_ITERATIONS = 20  # replays of one β fit at most
REPLAY_CONVERGED = 1e-3  # the largest change of a request's predicted decode time between replays, relative
FIT_ROUNDS = 2  # β then α, twice
MIN_REQUESTS = 5
MAX_REPLAY_TOKENS = 5_000_000  # a replay's token times as Python lists: ~40 bytes each
ALPHA_SHIFT_REPLAYS = 30  # replays of each phase of α0's search at most
ALPHA_SHIFT_TOLERANCE_US = 1.0  # the TTFT percentiles balanced to this (µs at the median)
ALPHA_SHIFT_RESOLUTION_US = 4.0  # or α0 bracketed to this (the percentiles are step functions of α0)
TTFT_PERCENTILES = ((50, 1), (90, 20), (99, 200))  # (percentile, requests needed) balanced by α0's shift
MIN_IDLE_REQUESTS = 10  # α is fitted from the requests that found their instance idle when this many vary in length
FEW_IDLE_REQUESTS = 100  # fewer: α1 is uncertain over HTTP (docs/calibrate.md, "The calibration workload"), a note says so


def _full_rank(x: np.ndarray) -> bool:
    """The β rows (n, Σ prefill, Σ decode) determine all three coefficients (columns scaled
    to 1 first: their magnitudes differ by orders)."""
    return len(x) >= MIN_REQUESTS and np.linalg.matrix_rank(x / np.maximum(np.abs(x).max(axis=0), 1.0)) == 3


def _varied(x: np.ndarray, minimum: int) -> bool:
    """At least ``minimum`` rows, and not all of one prompt length."""
    return len(x) >= minimum and bool(np.ptp(x[:, 1]) > 0)


def replay_workload(cfg, requests: Requests, obs: Observation):
    """The Workload the server got: the recording's requests up to its last sent one, each
    arriving at its send time (a closed-loop follower too: it was sent; one never sent
    keeps its recorded arrival, and may not be a follower)."""
    from blis_fast.run.resolve import assign_models, model_block_sizes  # deferred: the kernels

    sent = obs["send_us"] >= 0
    count = int(np.flatnonzero(sent)[-1]) + 1
    arrival = np.where(sent, obs["send_us"], requests["arrival_us"]).astype(np.int64)
    if (arrival[:count] < 0).any():
        bad = int(np.flatnonzero(arrival[:count] < 0)[0])
        raise ConfigError("--fit", f"request {bad} was never sent and arrives only after another (closed loop): "
                                   "the server's requests are not known; record the session whole")
    columns = dict(requests.columns)
    columns["arrival_us"] = np.maximum(arrival, 0)
    columns["next_request"] = np.full(len(requests), -1, np.int64)
    columns["follow_delay_us"] = np.zeros(len(requests), np.int64)
    block_size = model_block_sizes(cfg.deployment_list())[0]
    wl = replace(requests, columns=columns).to_workload(block_size, description={"kind": "observed"})
    return assign_models(cfg, wl).first(count), count


def emission_positions(replay, arrival: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per request, how many requests of its instance got a token at the same time before
    it (a server sends a step's tokens one request after another, oldest first), at its
    first token and at its last (0 for a request without tokens)."""
    counts = np.array([len(t) for t in replay.tokens], np.int64)
    n = len(counts)
    first_at = np.concatenate([[0], np.cumsum(counts)])[:-1]
    if counts.sum() == 0:
        return np.zeros(n, np.int64), np.zeros(n, np.int64)
    req = np.repeat(np.arange(n), counts)
    times = np.concatenate([np.asarray(t, np.int64) for t in replay.tokens if len(t)])
    order = np.lexsort((req, arrival[req], times, replay.instance[req]))
    inst_s, time_s = replay.instance[req][order], times[order]
    starts = np.flatnonzero(np.concatenate([[True], (inst_s[1:] != inst_s[:-1]) | (time_s[1:] != time_s[:-1])]))
    group_start = np.repeat(starts, np.diff(np.concatenate([starts, [len(order)]])))
    position = np.empty(len(order), np.int64)
    position[order] = np.arange(len(order)) - group_start
    has = counts > 0
    pos_first, pos_last = np.zeros(n, np.int64), np.zeros(n, np.int64)
    pos_first[has] = position[first_at[has]]
    pos_last[has] = position[first_at[has] + counts[has] - 1]
    return pos_first, pos_last


def _decode_rows(replay, done: np.ndarray, first_obs: np.ndarray, last_obs: np.ndarray, a2: int):
    """(x, y, requests) of the β fit (module docstring) over the completed requests with
    two tokens or more whose replay emitted as many."""
    steps = replay.steps
    rows, ys, ids = [], [], []
    for i in np.unique(steps["instance"]):
        on = steps[steps["instance"] == i]
        on = on[np.argsort(on["start_us"], kind="stable")]
        cum = [np.concatenate([[0], np.cumsum(col)]) for col in
               (np.ones(len(on)), on["prefill_tokens"], on["decode_requests"], on["end_us"] - on["start_us"])]
        for r in np.flatnonzero(done & (replay.instance == i)).tolist():
            times = replay.tokens[r]
            if len(times) < 2:
                continue
            k0 = int(np.searchsorted(on["start_us"], times[0] - a2, side="left"))
            k1 = int(np.searchsorted(on["end_us"], times[-1] - a2, side="right"))
            if k1 <= k0:
                continue
            sums = [c[k1] - c[k0] for c in cum]
            idle = (times[-1] - times[0]) - sums[3]
            rows.append(sums[:3])
            ys.append(float(last_obs[r] - first_obs[r] - idle))
            ids.append(r)
    return np.array(rows, np.float64).reshape(-1, 3), np.array(ys, np.float64), np.array(ids, np.int64)


def _woke_an_idle_instance(replay, ids: np.ndarray) -> np.ndarray:
    """Which of these requests had their instance start a step the moment they were queued
    (it was idle: nothing to wait for)."""
    steps = replay.steps
    woke = np.zeros(len(ids), bool)
    for i in np.unique(steps["instance"]):
        starts = np.sort(steps["start_us"][steps["instance"] == i])
        on = replay.instance[ids] == i
        q = replay.queued_us[ids[on]]
        k = np.minimum(np.searchsorted(starts, q), len(starts) - 1)
        woke[on] = starts[k] == q
    return woke


def _alpha_rows(replay, done: np.ndarray, ttft_obs: np.ndarray, lengths: np.ndarray, send: np.ndarray,
                alpha: np.ndarray):
    """(x, z, idle) of the α fit (module docstring) over the completed requests the replay
    ran; ``idle`` marks those that found their instance idle."""
    ids = np.flatnonzero(done & (replay.queued_us >= 0))
    first = np.array([replay.tokens[r][0] if replay.tokens[r] else -1 for r in ids], np.int64)
    keep = first >= 0
    ids, first = ids[keep], first[keep]
    a2 = int(alpha[2])
    queue_delay = np.trunc(alpha[0] + alpha[1] * lengths[ids].astype(np.float64))
    fixed = replay.queued_us[ids] - send[ids] - queue_delay  # admission + routing latencies
    z = ttft_obs[ids] - fixed - (first - a2 - replay.queued_us[ids])
    x = np.column_stack([np.ones(len(ids)), lengths[ids].astype(np.float64)])
    return x, z.astype(np.float64), _woke_an_idle_instance(replay, ids)


class _Replays:
    """The recording's requests replayed with given coefficients (``replay_live``),
    counted."""

    def __init__(self, cfg, wl):
        self.cfg, self.wl, self.count = cfg, wl, 0
        self.longest = int((wl.prompt_len + np.maximum(wl.output_len, 1)).max()) + 1

    def __call__(self, alpha, beta):
        from blis_fast.run.api import as_config  # deferred: the kernels
        from blis_fast.run.resolve import resolve  # deferred: as above
        from blis_fast.serve.engine import replay_live  # deferred: as above

        self.count += 1
        run_cfg = as_config(self.cfg, {"latency_model": "blackbox", "alpha_coeffs": [float(a) for a in alpha],
                                       "beta_coeffs": [float(b) for b in beta]})
        return replay_live(resolve(run_cfg), self.wl, capacity=max(len(self.wl), 1),
                           max_model_len=max(self.longest, 2), record_steps=True)


def _timeline_rows(obs: Observation, ok: np.ndarray, instance: np.ndarray, lengths: np.ndarray):
    """(x, y) of a first β fit from the recording's own timeline, no replay: for each
    completed request, its decode time y = last - first token, and over the steps in
    between (``n`` = its tokens - 1) the tokens the other requests of its instance got
    (decodes) and the prompts of those whose first token came (prefills), each counted when
    seen in (first + h, last + h], h half the shortest gap between two tokens of a request
    -- a step's tokens are seen together, give or take the timing jitter.  Approximate at a
    window's edges (a chunked prefill's earlier chunks), but it needs no coefficient: a
    start from which the replays converge."""
    count = len(instance)
    offsets = obs.token_offsets[:count + 1]
    times = obs.token_times_us[:offsets[-1]]
    per = np.diff(offsets)
    owner = np.repeat(np.arange(count), per)
    first_flag = np.zeros(len(times), bool)
    first_flag[offsets[:-1][per > 0]] = True
    gaps = np.diff(times)[(owner[1:] == owner[:-1])] if len(times) > 1 else np.zeros(0, np.int64)
    gaps = gaps[gaps > 0]
    h = 0.5 * float(np.percentile(gaps, 1)) if len(gaps) else 0.0
    rows, ys = [], []
    for i in np.unique(instance[instance >= 0]).tolist():
        mine = instance[owner] == i
        order = np.argsort(times[mine], kind="stable")
        t = times[mine][order]
        firsts = first_flag[mine][order]
        cum_d = np.concatenate([[0], np.cumsum(~firsts)])
        cum_p = np.concatenate([[0], np.cumsum(np.where(firsts, lengths[owner[mine][order]], 0))])
        for r in np.flatnonzero(ok & (instance == i) & (per >= 2)).tolist():
            a = int(np.searchsorted(t, times[offsets[r]] + h, side="right"))
            b = int(np.searchsorted(t, times[offsets[r + 1] - 1] + h, side="right"))
            rows.append((per[r] - 1, cum_p[b] - cum_p[a], cum_d[b] - cum_d[a]))
            ys.append(float(times[offsets[r + 1] - 1] - times[offsets[r]]))
    return np.array(rows, np.float64).reshape(-1, 3), np.array(ys, np.float64)


def _fit_beta(replays: _Replays, rec: dict, alpha: np.ndarray, beta: np.ndarray, notes: list[str]):
    """β (and the emission gap γ) with α held: replayed and refitted until the predicted
    decode times move by less than REPLAY_CONVERGED.  (β, γ, residuals µs, decode rows,
    history of the moves)."""
    history: list[float] = []
    step = 1.0
    for _ in range(REPLAY_ITERATIONS):
        replay = replays(alpha, beta)
        x, y, ids = _decode_rows(replay, rec["ok"], rec["first"], rec["last"], int(alpha[2]))
        pos_first, pos_last = emission_positions(replay, replays.wl.arrival_us)
        gap = (pos_last - pos_first)[ids].astype(np.float64)
        if not _full_rank(x):
            raise ConfigError("--fit", f"{len(y)} requests with two tokens or more do not vary enough to fit β0, β1, "
                                       "β2: record more requests at a load that batches them")
        step_notes: list[str] = []
        coef = nonnegative_huber_fit(np.column_stack([x, gap]), y, ["beta0", "beta1", "beta2", "emission_gap"],
                                     step_notes)
        new_beta, gamma = coef[:3], float(coef[3])
        if not (x @ new_beta > 0).all():
            raise ConfigError("--fit", "the fitted β gives some requests no decode time (every coefficient came out "
                                       "0): the recording's token times do not follow the step-time model")
        # (how much the fit changed what it predicts: the coefficients alone can trade off)
        history.append(float(np.max(np.abs(x @ (new_beta - beta)) / np.maximum(x @ new_beta, 1.0))))
        if len(history) > 1 and history[-1] > history[-2]:  # (moving away: smaller steps)
            step /= 2
        beta = beta + step * (new_beta - beta)
        if history[-1] < REPLAY_CONVERGED:
            break
    else:
        step_notes.append(f"the β replays did not settle within {REPLAY_ITERATIONS} (the last moved a decode time by "
                          f"{100 * history[-1]:.2g} %)")
    notes += step_notes
    return beta, gamma, y - gap * gamma - x @ beta, history


def _first_beta(replays: _Replays, rec: dict, obs: Observation, alpha: np.ndarray, beta: np.ndarray,
                notes: list[str]) -> np.ndarray:
    """β from the recording's timeline (``_timeline_rows``; the instances as a replay with
    the given coefficients routes the requests), or the given β when that fit fails."""
    replay = replays(alpha, beta)
    x, y = _timeline_rows(obs, rec["ok"], replay.instance, rec["lengths"])
    if not _full_rank(x):
        return beta
    first = nonnegative_huber_fit(x, y, ["beta0", "beta1", "beta2"], [])
    return first if (x @ first > 0).all() else beta


def _ttft_offset(replays: _Replays, rec: dict, alpha: np.ndarray, beta: np.ndarray) -> float:
    """How far the simulated TTFT percentiles are above the observed ones, balanced, of a
    replay with these coefficients, over the completed requests: the mean of the
    largest and the smallest relative error of p50, p90 and p99 (each taken when
    TTFT_PERCENTILES says there are requests enough), times the observed median (µs).  0
    when the percentiles are off by as much above as below."""
    replay = replays(alpha, beta)
    ids = np.flatnonzero(rec["ok"])
    first = np.array([replay.tokens[r][0] if replay.tokens[r] else -1 for r in ids], np.int64)
    ids, first = ids[first >= 0], first[first >= 0]
    qs = [q for q, least in TTFT_PERCENTILES if len(ids) >= least]
    sim, obs = np.percentile(first - rec["send"][ids], qs), np.percentile(rec["ttft"][ids], qs)
    scale = max(float(obs[0]), 1.0)
    errors = (sim - obs) / np.maximum(obs, 1.0)
    return float((errors.max() + errors.min()) / 2 * scale)


def _shift_alpha0(replays: _Replays, rec: dict, alpha: np.ndarray, beta: np.ndarray, notes: list[str]) -> np.ndarray:
    """α with α0 moved so that the simulated TTFT percentiles are off the observed ones by as
    much above as below (``_ttft_offset``; the smallest worst error one constant can
    give): the delays the engine does not model (the client's, the HTTP stack's, a busy
    server's emission) are taken into α0.  Every percentile moves monotonically with α0 (a
    later queue entry never gives an earlier token), so does the balance: bracketed, then
    narrowed by false position."""
    def at(a0: float) -> np.ndarray:
        return np.array([a0, alpha[1], alpha[2]])

    lo_a, lo_r = float(alpha[0]), _ttft_offset(replays, rec, alpha, beta)
    if abs(lo_r) <= ALPHA_SHIFT_TOLERANCE_US:
        return alpha
    step = -lo_r  # (an idle request's TTFT moves by the shift: the first guess)
    hi_a, hi_r = lo_a, lo_r
    for _ in range(ALPHA_SHIFT_REPLAYS):
        hi_a = max(lo_a + step, 0.0)
        hi_r = _ttft_offset(replays, rec, at(hi_a), beta)
        if hi_a == 0.0 or (hi_r > 0) != (lo_r > 0) or abs(hi_r) <= ALPHA_SHIFT_TOLERANCE_US:
            break
        lo_a, lo_r, step = hi_a, hi_r, 2 * step
    if hi_a == 0.0 and hi_r > ALPHA_SHIFT_TOLERANCE_US:
        notes.append(f"the simulated TTFTs stay {hi_r / 1000:.3g} ms above the observed ones at alpha0 = 0: alpha0 "
                     "set to 0")
        return at(0.0)
    for _ in range(ALPHA_SHIFT_REPLAYS):
        width = abs(hi_a - lo_a)
        if abs(hi_r) <= ALPHA_SHIFT_TOLERANCE_US or width <= ALPHA_SHIFT_RESOLUTION_US:
            break
        # (false position, kept to the middle half: the balance is nearly linear in α0)
        mid = lo_a - lo_r * (hi_a - lo_a) / (hi_r - lo_r) if hi_r != lo_r else (lo_a + hi_a) / 2
        mid = min(max(mid, min(lo_a, hi_a) + width / 4), max(lo_a, hi_a) - width / 4)
        mid_r = _ttft_offset(replays, rec, at(mid), beta)
        if (mid_r > 0) == (lo_r > 0):
            lo_a, lo_r = mid, mid_r
        else:
            hi_a, hi_r = mid, mid_r
    return at(hi_a if abs(hi_r) <= abs(lo_r) else lo_a)


def _fit_alpha(replays: _Replays, rec: dict, alpha: np.ndarray, beta: np.ndarray, notes: list[str]):
    """α from the requests that found their instance idle (α1 kept when too few), then α0
    shifted to the median TTFT (``_shift_alpha0``).  (α, its source, requests used)."""
    replay = replays(alpha, beta)
    xa, za, idle = _alpha_rows(replay, rec["ok"], rec["ttft"], rec["lengths"], rec["send"], alpha)
    if _varied(xa[idle], MIN_IDLE_REQUESTS):
        a01 = nonnegative_huber_fit(xa[idle], za[idle], ["alpha0", "alpha1"], notes)
        alpha, source, used = np.array([a01[0], a01[1], 0.0]), "idle requests", int(idle.sum())
        if used < FEW_IDLE_REQUESTS:
            notes.append(f"alpha1 comes from only {used} requests that found their instance idle: through a "
                         "network's jitter it may be tens of % off; end the recording with requests spaced further "
                         "apart than one takes (docs/calibrate.md, 'The calibration workload')")
    else:
        notes.append(f"{int(idle.sum())} requests found their instance idle (fewer than {MIN_IDLE_REQUESTS}, or of "
                     "one length): alpha1 kept")
        alpha, source, used = np.array([alpha[0] + alpha[2], alpha[1], 0.0]), "given", 0
    before = float(alpha[0])
    alpha = _shift_alpha0(replays, rec, alpha, beta, notes)
    return alpha, source, used, float(alpha[0]) - before


def fit_by_replay(cfg, requests: Requests, obs: Observation, done: np.ndarray, alpha0, beta0) -> FittedCoefficients:
    """α and β of ``cfg``'s engine from the recording by replaying it (module docstring),
    starting from the coefficients ``alpha0``, ``beta0`` (the config's)."""
    ok = done & (obs["send_us"] >= 0)
    if int(ok.sum()) < MIN_REQUESTS:
        raise ConfigError("--fit", f"needs at least {MIN_REQUESTS} completed requests, the recording has "
                                   f"{int(ok.sum())}")
    wl, count = replay_workload(cfg, requests, obs)
    tokens = int(np.maximum(wl.output_len, 1).sum())
    if tokens > MAX_REPLAY_TOKENS:
        raise ConfigError("--fit", f"the recording's sent requests ask for {tokens:,} tokens; the replay fit takes at "
                                   f"most {MAX_REPLAY_TOKENS:,} (each replay keeps every token time): fit a shorter "
                                   "recording, or use --fit-method steps")
    send = obs["send_us"][:count]
    rec = {"ok": ok[:count], "lengths": requests["prompt_len"][:count], "send": send,
           "first": obs["first_token_us"][:count], "last": obs["last_token_us"][:count],
           "ttft": (obs["first_token_us"][:count] - send).astype(np.float64)}
    replays = _Replays(cfg, wl)
    alpha, beta = np.asarray(alpha0, np.float64), np.asarray(beta0, np.float64)
    notes: list[str] = []
    moves = []
    beta = _first_beta(replays, rec, obs, alpha, beta, notes)
    for _ in range(FIT_ROUNDS):  # (β's batches depend on α's queue entries, and α's prefill times on β)
        round_notes: list[str] = []
        beta, gamma, resid, history = _fit_beta(replays, rec, alpha, beta, round_notes)
        alpha, source, used, shift = _fit_alpha(replays, rec, alpha, beta, round_notes)
        moves.append(history)
    notes += round_notes
    notes.append("alpha0 is alpha0 + alpha2 (only their sum is identifiable); alpha2 is reported as 0")
    details = {"method": "replay (Huber IRLS on each request's decode time; alpha from idle requests and the "
                         "TTFT percentiles)",
               "replays": replays.count, "beta_moves": moves, "requests_beta": int(len(resid)),
               "requests_alpha": used, "alpha_source": source, "alpha0_shift_us": shift,
               "emission_gap_us": gamma,
               "decode_residual_ms": {"median_abs": float(np.median(np.abs(resid))) / 1000,
                                      "max_abs": float(np.max(np.abs(resid))) / 1000},
               "notes": notes}
    return FittedCoefficients(tuple(float(a) for a in alpha), tuple(float(b) for b in beta), details)
