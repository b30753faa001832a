"""α/β fitted from an observed recording (``blis-fast calibrate --fit``), by robust least
squares: Huber's M-estimator solved by iteratively reweighted least squares (IRLS).

**Steps from token times** (one continuous-batching instance, docs/semantics.md §3): every
engine step emits one token to each request it computes one for, all visible at the
step's end + α2.  So the recording's token times, sorted, fall in clusters: tokens closer
than ``tolerance_us`` to the previous one belong to the same step (its time: their mean).  A
step's prefill tokens are the prompt lengths of the requests whose *first* token it emits
(the server's ``usage.prompt_tokens`` when it reported them, else the trace's); its decode
requests the others it emits a token for.  Its duration is the gap to the previous step
when the instance was busy in between -- some request had a token in the previous step
and a later one (a running batch steps back to back, §3.5); the first step of a busy
period has no duration.  Then ``duration = β0 + β1·prefill + β2·decode`` is fitted.

**α from the requests that found the instance idle**: a request whose first token comes
from a step that opens a busy period and holds only its prefill entered the queue at that
step's start, so ``TTFT = (α0 + α1·L) + (β0 + β1·L) + α2``: with β known, TTFT - (β0 + β1·L)
= (α0 + α2) + α1·L.  Only the sum α0 + α2 is identifiable: the fit reports it as α0, with
α2 = 0.  On one instance nothing is lost: every queue entry α2 later shifts the engine's
whole timeline by α2, so every token is visible when it was (to the µs of truncation).

**α from queue entries** when too few requests found the instance idle (sustained load):
``fit_alpha_from_queued``.

**Robustness**: Huber weights min(1, k·s/|r|) with k = 1.345 (95 % efficiency on normal
errors) and s = MAD(residuals) / 0.6745, from an ordinary least-squares start, at most
MAX_IRLS_ITERATIONS rounds.  Coefficients are non-negative (as the engine requires): one
that comes out negative is set to 0 and the others refitted, and the fit says so.

**Chunked prefill**: steps that may hold a prefill chunk the token times do not show are
left out (``chunked_prefill_steps``), given the engine's step budget (``StepBudget``).

**Assumptions** (docs/calibrate.md): one instance; no prefix-cache hits (a cached
prompt's prefill is shorter than its length); the step budget and prefill cap of the run
settings; no preemption; every step emits a token the recording saw (a request the
observer abandoned still decodes on the server unseen).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from blis_fast.config.validate import MAX_REQUEST_TOKENS
from blis_fast.errors import ConfigError
from blis_fast.workload.formats.observed import Observation
from blis_fast.workload.generate import Requests

# the default step tolerance: half this percentile of the gaps between consecutive tokens
# of one request (each such gap is at least one step, less the timing jitter)
TOLERANCE_GAP_PERCENTILE = 1.0
HUBER_K = 1.345
MAD_TO_SIGMA = 0.6745
MAX_IRLS_ITERATIONS = 100
IRLS_TOLERANCE = 1e-9
MIN_ALPHA_REQUESTS = 3
# the α fit from queue entries (interval_center_fit): the share of intervals a bound may
# leave out (timing outliers), the slope grid's points and refinements, the requests used
INTERVAL_QUANTILE = 0.2
INTERVAL_GRID = 101
INTERVAL_REFINEMENTS = 3
MAX_INTERVAL_REQUESTS = 20_000
MIN_TOKEN_STEP_RATIO = 0.98  # below it the fit warns that the steps look split (Steps.token_step_ratio)
MAX_FIT_TOKENS = 20_000_000  # token times a fit takes (about 60 bytes each while it runs)


@dataclass(frozen=True)
class StepBudget:
    """The engine's step limits (the server's, as the run settings give them): the token
    budget B of a step and the per-request prefill cap T (0 = none)."""

    tokens: int = 2048
    per_request: int = 0


@dataclass
class Steps:
    """The steps rebuilt from a recording's token times (module docstring)."""

    time_us: np.ndarray  # float64: the mean time of each step's tokens, ascending
    prefill: np.ndarray  # int64: prompt tokens of the requests whose first token it emits
    decode: np.ndarray  # int64: the other requests it emits a token for
    busy: np.ndarray  # bool: the instance ran a batch since the previous step (its duration is known)
    first_step: np.ndarray  # int64 per request: the step of its first token, -1: none
    # tokens / the steps from each request's first token to its last: 1 when every request
    # has a token in each step of its run, as continuous batching gives; below 1 when steps
    # were split (a tolerance under the jitter) or the server skipped or preempted requests
    token_step_ratio: float = 1.0

    @property
    def duration_us(self) -> np.ndarray:
        """Each busy step's duration (gap to the previous step); NaN elsewhere."""
        gap = np.full(len(self.time_us), np.nan)
        gap[1:] = np.diff(self.time_us)
        return np.where(self.busy, gap, np.nan)


def prompt_tokens(requests: Requests, obs: Observation) -> np.ndarray:
    """Each request's prompt length as the server counted it (``usage.prompt_tokens``),
    else as the trace says."""
    reported = obs["reported_prompt_tokens"]
    if reported.size and int(reported.max()) > MAX_REQUEST_TOKENS:
        bad = int(np.argmax(reported))
        raise ConfigError(f"--observed row {bad + 1} column reported_prompt_tokens",
                          f"must be at most {MAX_REQUEST_TOKENS} tokens, got {int(reported[bad])}")
    return np.where(reported >= 0, reported, requests["prompt_len"]).astype(np.int64)


def default_tolerance_us(obs: Observation) -> int:
    """The step tolerance when none is given: half the TOLERANCE_GAP_PERCENTILE-th
    percentile of the gaps between consecutive tokens of one request, at least 1 µs."""
    gaps = np.diff(obs.token_times_us)
    starts = obs.token_offsets[1:-1]  # (a gap across two requests' times is no gap)
    inside = np.ones(gaps.size, bool)
    inside[starts[(starts > 0) & (starts <= gaps.size)] - 1] = False
    gaps = gaps[inside]
    if gaps.size == 0:
        raise ConfigError("--fit", "no request of the recording has two tokens: its steps cannot be rebuilt")
    return max(1, int(np.percentile(gaps, TOLERANCE_GAP_PERCENTILE) // 2))


def check_one_token_per_step(step_of: np.ndarray, request_of: np.ndarray, times: np.ndarray, tolerance_us: int,
                             defaulted: bool) -> None:
    """ConfigError when a step holds two tokens of one request: the recording's times
    cannot be split so (two tokens at one µs) or the tolerance is too wide."""
    order = np.lexsort((step_of, request_of))
    same = (np.diff(step_of[order]) == 0) & (np.diff(request_of[order]) == 0)
    if not same.any():
        return
    at = int(np.flatnonzero(same)[0])
    k = int(request_of[order[at]])
    a, b = int(times[order[at]]), int(times[order[at + 1]])
    if a == b:
        raise ConfigError(f"--observed row {k + 1} column token_times_us",
                          f"two tokens at the same time ({a} µs): the engine's steps cannot be told apart (tokens "
                          "merged on the way?); --fit needs one time per step")
    how = "the default (half the 1st percentile of a request's token gaps)" if defaulted else "it"
    raise ConfigError("--step-tolerance-ms", f"{tolerance_us / 1000:g} ms joins two tokens of one request "
                                             f"(row {k + 1}: {a} and {b} µs) into one step; {how} must be below "
                                             "the shortest step: give a smaller one")


def reconstruct_steps(requests: Requests, obs: Observation, tolerance_us: int, defaulted: bool = False) -> Steps:
    """The steps of a recording (module docstring); ConfigError naming --step-tolerance-ms
    when it puts two tokens of one request in one step (``defaulted``: it was not given)."""
    n = len(obs)
    counts = np.diff(obs.token_offsets)
    times = obs.token_times_us
    if times.size == 0:
        raise ConfigError("--fit", "the recording has no token times to rebuild the engine's steps from")
    if times.size > MAX_FIT_TOKENS:
        raise ConfigError("--fit", f"the recording has {times.size} token times, more than {MAX_FIT_TOKENS} "
                                   "(the fit holds about 60 bytes per token): record fewer requests")
    request_of = np.repeat(np.arange(n, dtype=np.int64), counts)
    is_first = np.zeros(times.size, bool)
    is_first[obs.token_offsets[:-1][counts > 0]] = True
    order = np.argsort(times, kind="stable")
    ordered = times[order]
    opens = np.ones(ordered.size, bool)
    opens[1:] = np.diff(ordered) >= tolerance_us
    step_sorted = np.cumsum(opens) - 1
    n_steps = int(step_sorted[-1]) + 1
    step_of = np.empty(times.size, np.int64)
    step_of[order] = step_sorted
    tokens_in = np.bincount(step_sorted, minlength=n_steps)
    time_us = np.bincount(step_sorted, weights=ordered.astype(np.float64), minlength=n_steps) / tokens_in
    check_one_token_per_step(step_of, request_of, times, tolerance_us, defaulted)
    lengths = prompt_tokens(requests, obs)
    prefill = np.bincount(step_of[is_first], weights=lengths[request_of[is_first]].astype(np.float64),
                          minlength=n_steps).astype(np.int64)
    decode = np.bincount(step_of[~is_first], minlength=n_steps).astype(np.int64)
    has = counts > 0
    first_step = np.full(n, -1, np.int64)
    first_step[has] = step_of[obs.token_offsets[:-1][has]]
    last_step = step_of[obs.token_offsets[1:][has] - 1]
    # a request's tokens come from consecutive steps: steps first+1 .. last had it running before them
    cover = (np.bincount(first_step[has] + 1, minlength=n_steps + 1)
             - np.bincount(last_step + 1, minlength=n_steps + 1))
    busy = np.cumsum(cover)[:n_steps] > 0
    spans = int((last_step - first_step[has] + 1).sum())
    return Steps(time_us, prefill, decode, busy, first_step, int(counts.sum()) / spans if spans else 1.0)


def huber_fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(coefficients, final weights) of Huber's M-estimator of y ≈ x·c by IRLS (module
    docstring)."""
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    weights = np.ones(len(y))
    for _ in range(MAX_IRLS_ITERATIONS):
        resid = y - x @ coef
        scale = float(np.median(np.abs(resid - np.median(resid)))) / MAD_TO_SIGMA
        if scale <= 0.0:
            break  # (more than half the points fit exactly: nothing to down-weight)
        u = np.abs(resid) / (HUBER_K * scale)
        weights = np.where(u <= 1.0, 1.0, 1.0 / np.maximum(u, 1.0))
        root = np.sqrt(weights)
        new = np.linalg.lstsq(x * root[:, None], y * root, rcond=None)[0]
        done = np.max(np.abs(new - coef)) <= IRLS_TOLERANCE * (1.0 + np.max(np.abs(coef)))
        coef = new
        if done:
            break
    return coef, weights


def nonnegative_huber_fit(x: np.ndarray, y: np.ndarray, names: list[str], notes: list[str]) -> np.ndarray:
    """``huber_fit`` with every coefficient >= 0: a negative one is set to 0 and the fit
    repeated without it (each such choice added to ``notes``)."""
    free = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while free:
        c, _ = huber_fit(x[:, free], y)
        if not np.isfinite(c).all():
            raise ConfigError("--fit", "the least-squares fit did not converge (the recording's times are too large "
                                       "or too spread for float64)")
        negative = [j for j, v in zip(free, c) if v < 0]
        if not negative:
            coef[free] = c
            break
        worst = min(negative, key=lambda j: c[free.index(j)])
        notes.append(f"{names[worst]} came out negative ({c[free.index(worst)]:.6g}): set to 0, the others refitted")
        free.remove(worst)
    return coef


def chunked_prefill_steps(steps: Steps, send_us: np.ndarray, lengths: np.ndarray, budget: StepBudget) -> np.ndarray:
    """Mask of the steps that may hold a prefill chunk the token times do not show.

    A request's prefill is split over steps (chunked prefill, docs/semantics.md §3.2) when
    it is longer than the per-request cap T, or than the token budget B left in a step
    after the decodes and the other prefills.  Its first token then comes from the last
    chunk's step, which holds only the remainder, and the earlier chunks' steps show no
    prefill.  Without a cap T, at most one prefill per step is cut (the budget is then
    spent), so a request chunked into its first-token step f had the cut chunk of step
    f - 1: step f - 1 ended after its send and its room as the token times show it
    (B - decodes - prefills) is below the request's prompt.  Such a request -- or one
    longer than B or T -- has every step from its send to its first token marked."""
    n_steps = len(steps.time_us)
    k = np.flatnonzero((steps.first_step >= 0) & (send_us >= 0))
    first = steps.first_step[k]
    window_start = np.minimum(np.searchsorted(steps.time_us, send_us[k], side="right"), first)
    cap = budget.tokens if budget.per_request <= 0 else min(budget.tokens, budget.per_request)
    room = budget.tokens - steps.decode - steps.prefill
    before = np.maximum(first - 1, 0)
    chunked = (lengths[k] > cap) | ((window_start < first) & (lengths[k] > room[before]))
    marks = (np.bincount(window_start[chunked], minlength=n_steps + 1)
             - np.bincount(first[chunked] + 1, minlength=n_steps + 1))
    return np.cumsum(marks)[:n_steps] > 0


def fit_beta(steps: Steps, notes: list[str], excluded: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """(β, number of steps fitted) from the busy steps' durations, but the ``excluded``."""
    keep = steps.busy if excluded is None else steps.busy & ~excluded
    count = int(keep.sum())
    x = np.column_stack([np.ones(count), steps.prefill[keep], steps.decode[keep]]).astype(np.float64)
    y = steps.duration_us[keep]
    if count < 3 or np.linalg.matrix_rank(x / np.maximum(np.abs(x).max(axis=0), 1.0)) < 3:
        raise ConfigError("--fit", f"the recording's {count} back-to-back steps do not vary enough to fit β0, β1, "
                                   "β2 (they need different prefill tokens and decode counts): record more requests "
                                   "at a load that keeps the instance busy")
    return nonnegative_huber_fit(x, y, ["beta0", "beta1", "beta2"], notes), count


def fit_alpha(requests: Requests, obs: Observation, steps: Steps, beta: np.ndarray, notes: list[str],
              chunked: np.ndarray) -> tuple[np.ndarray | None, int]:
    """(α, number of requests fitted) from the requests that found the instance idle (and
    whose first step is not ``chunked``: an idle request's earlier chunks emit no token);
    (None, count) when fewer than MIN_ALPHA_REQUESTS with two prompt lengths or more did."""
    lengths = prompt_tokens(requests, obs)
    k = np.flatnonzero((steps.first_step >= 0) & (obs["send_us"] >= 0))
    s = steps.first_step[k]
    idle = ~steps.busy[s] & (steps.decode[s] == 0) & (steps.prefill[s] == lengths[k]) & ~chunked[s]
    k, s = k[idle], s[idle]
    # (the prefill test alone would pass a second request with an empty prompt in the step)
    first_tokens = np.bincount(steps.first_step[steps.first_step >= 0], minlength=len(steps.time_us))
    alone = first_tokens[s] == 1
    k, s = k[alone], s[alone]
    count = len(k)
    if count < MIN_ALPHA_REQUESTS or np.unique(lengths[k]).size < 2:
        return None, count
    first = obs.token_times_us[obs.token_offsets[k]].astype(np.float64)
    ttft = first - obs["send_us"][k]
    length = lengths[k].astype(np.float64)
    y = ttft - (beta[0] + beta[1] * length)
    x = np.column_stack([np.ones(count), length])
    c = nonnegative_huber_fit(x, y, ["alpha0 + alpha2", "alpha1"], notes)
    return np.array([c[0], c[1], 0.0]), count


def interval_center_fit(low: np.ndarray, high: np.ndarray, lengths: np.ndarray) -> tuple[float, float]:
    """(c, a) with c + a·L_k inside (low_k, high_k] for (nearly) every k: for each slope a
    on a grid, the c range the intervals leave is [the INTERVAL_QUANTILE-th highest of
    low_k - a·L_k, the INTERVAL_QUANTILE-th lowest of high_k - a·L_k] (a few timing
    outliers may fall outside); the slope where that range is widest, refined twice on a
    finer grid, and the middle of its range.  With exact times the true (c, a) is inside
    every interval, and many requests squeeze the feasible set around it."""
    length = lengths.astype(np.float64)
    ratio = high / np.maximum(length, 1.0)
    top = max(float(np.percentile(ratio, INTERVAL_QUANTILE)), 0.0)  # c >= 0: a <= high_k / L_k

    def bounds(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lower = low[None, :] - a[:, None] * length[None, :]
        upper = high[None, :] - a[:, None] * length[None, :]
        return np.percentile(lower, 100 - INTERVAL_QUANTILE, axis=1), np.percentile(upper, INTERVAL_QUANTILE, axis=1)

    lo_a, hi_a = 0.0, top
    best = 0.0
    for _ in range(INTERVAL_REFINEMENTS):
        grid = np.linspace(lo_a, hi_a, INTERVAL_GRID)
        c_low, c_high = bounds(grid)
        at = int(np.argmax(c_high - c_low))
        best = float(grid[at])
        step = (hi_a - lo_a) / (INTERVAL_GRID - 1)
        lo_a, hi_a = max(0.0, best - step), best + step
    c_low, c_high = bounds(np.array([best]))
    return float(c_low[0] + c_high[0]) / 2, best


def fit_alpha_from_queued(requests: Requests, obs: Observation, steps: Steps, beta: np.ndarray, notes: list[str],
                          chunked: np.ndarray) -> tuple[np.ndarray | None, int]:
    """(α, number of requests fitted) from requests that arrived while the instance ran,
    for a recording where too few found it idle; (None, count) when fewer than
    MIN_ALPHA_REQUESTS with two prompt lengths or more qualify.

    Such a request, admitted in step f that followed step f - 1 back to back, entered the
    queue while f - 1 ran: its entry send + (α0 + α2) + α1·L lies in (start of f - 1,
    start of f], the starts taken on the token timeline (a step's token time less its
    duration from β).  ``interval_center_fit`` finds the (α0 + α2, α1) inside them."""
    lengths = prompt_tokens(requests, obs)
    k = np.flatnonzero((steps.first_step >= 1) & (obs["send_us"] >= 0))
    f = steps.first_step[k]
    ok = steps.busy[f] & ~chunked[f] & ~chunked[f - 1]
    k, f = k[ok], f[ok]
    start = steps.time_us - (beta[0] + beta[1] * steps.prefill + beta[2] * steps.decode)
    send = obs["send_us"][k].astype(np.float64)
    low, high = start[f - 1] - send, start[f] - send  # (f - 1 may start before the send)
    keep = high > 0  # (an entry before the send: timing noise)
    k, low, high = k[keep], low[keep], high[keep]
    count = len(k)
    if count < MIN_ALPHA_REQUESTS or np.unique(lengths[k]).size < 2:
        return None, count
    if count > MAX_INTERVAL_REQUESTS:  # (the grid search holds grid x requests floats: an even sample)
        pick = np.linspace(0, count - 1, MAX_INTERVAL_REQUESTS).astype(np.int64)
        k, low, high = k[pick], low[pick], high[pick]
    c, a = interval_center_fit(low, high, lengths[k])
    if c < 0:
        notes.append(f"alpha0 + alpha2 came out negative ({c:.6g}): set to 0")
        c = 0.0
    return np.array([c, a, 0.0]), count


@dataclass
class FittedCoefficients:
    alpha: tuple[float, float, float]
    beta: tuple[float, float, float]
    details: dict = field(default_factory=dict)


def fit_coefficients(requests: Requests, obs: Observation, tolerance_us: int | None = None,
                     given_alpha=(0.0, 0.0, 0.0), budget: StepBudget = StepBudget()) -> FittedCoefficients:
    """α and β of one instance from a recording (module docstring); α stays ``given_alpha``
    when too few requests found the instance idle (the details say which).
    ``tolerance_us`` None: ``default_tolerance_us``; ``budget``: the engine's step limits
    (steps that may hold hidden prefill chunks are left out of the β fit)."""
    notes: list[str] = []
    defaulted = tolerance_us is None
    if defaulted:
        tolerance_us = default_tolerance_us(obs)
    steps = reconstruct_steps(requests, obs, tolerance_us, defaulted)
    chunked = chunked_prefill_steps(steps, obs["send_us"], prompt_tokens(requests, obs), budget)
    if (chunked & steps.busy).any():
        notes.append(f"{int((chunked & steps.busy).sum())} steps left out of the beta fit: they may hold prefill "
                     f"chunks (prompts longer than the step's room, budget {budget.tokens} tokens)")
    if steps.token_step_ratio < MIN_TOKEN_STEP_RATIO:
        notes.append(f"the rebuilt steps hold {100 * steps.token_step_ratio:.1f} % of the tokens their running "
                     "requests should emit (one each per step): the step tolerance may be under the timing jitter "
                     "(give --step-tolerance-ms), or the server skipped or preempted requests")
    beta, n_steps = fit_beta(steps, notes, chunked)
    alpha, n_idle = fit_alpha(requests, obs, steps, beta, notes, chunked)
    alpha_source, alpha_requests = "idle requests", n_idle
    if alpha is None:
        alpha, alpha_requests = fit_alpha_from_queued(requests, obs, steps, beta, notes, chunked)
        alpha_source = "queue entries"
        notes.append(f"{n_idle} requests found the instance idle (the fit wants {MIN_ALPHA_REQUESTS} with two "
                     "prompt lengths): alpha comes from the steps the others entered the queue in")
    if alpha is None:
        alpha, alpha_source = np.asarray(given_alpha, np.float64), "given"
        notes.append(f"alpha kept as given: too few requests to fit it ({alpha_requests})")
    else:
        notes.append("alpha0 is alpha0 + alpha2 (only their sum is identifiable); alpha2 is reported as 0")
    fitted = steps.busy & ~chunked
    durations = steps.duration_us[fitted]
    x = np.column_stack([np.ones(n_steps), steps.prefill[fitted], steps.decode[fitted]])
    resid = durations - x @ beta
    details = {
        "method": f"Huber IRLS (k = {HUBER_K})",
        "step_tolerance_ms": tolerance_us / 1000,
        "steps": len(steps.time_us), "steps_fitted": n_steps,
        "steps_left_out_chunked": int((chunked & steps.busy).sum()),
        "token_step_ratio": steps.token_step_ratio,
        "beta_residual_ms": {"median_abs": float(np.median(np.abs(resid))) / 1000,
                             "max_abs": float(np.max(np.abs(resid))) / 1000},
        "alpha_source": alpha_source,
        "alpha_requests": alpha_requests,
        "notes": notes,
    }
    return FittedCoefficients(tuple(float(a) for a in alpha), tuple(float(b) for b in beta), details)
