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
  instance idle (a step started when they were queued) when there are MIN_IDLE_REQUESTS of
  them: their z does not depend on the α replayed.  Otherwise from every request, each
  replay moving α by ALPHA_DAMPING of the way: a busy instance's queue wait shrinks as α
  grows, so z follows α and the fixed point is reached slowly.

Both are Huber fits (``fit.nonnegative_huber_fit``).  The compositions depend on the
coefficients (timing decides who shares a step), so the replay is repeated with the fitted
ones until every coefficient moves by less than REPLAY_CONVERGED (relative) or
REPLAY_ITERATIONS replays.  Several instances are fine: the replay says which ran what.
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

REPLAY_ITERATIONS = 20
REPLAY_CONVERGED = 1e-3  # the largest change of a request's predicted decode time or TTFT between replays, relative
MIN_REQUESTS = 5
ALPHA_DAMPING = 0.5  # each replay moves α half way to its new fit (when fitted from busy requests)
MIN_IDLE_REQUESTS = 10  # α is fitted from the requests that found their instance idle when this many vary in length


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


def fit_by_replay(cfg, requests: Requests, obs: Observation, done: np.ndarray, alpha0, beta0) -> FittedCoefficients:
    """α and β of ``cfg``'s engine from the recording by replaying it (module docstring),
    starting from the coefficients ``alpha0``, ``beta0`` (the config's)."""
    from blis_fast.run.api import as_config  # deferred: the kernels
    from blis_fast.run.resolve import resolve  # deferred: as above
    from blis_fast.serve.engine import replay_live  # deferred: as above

    ok = done & (obs["send_us"] >= 0)
    if int(ok.sum()) < MIN_REQUESTS:
        raise ConfigError("--fit", f"needs at least {MIN_REQUESTS} completed requests, the recording has "
                                   f"{int(ok.sum())}")
    wl, count = replay_workload(cfg, requests, obs)
    ok = ok[:count]
    lengths = requests["prompt_len"][:count]
    send = obs["send_us"][:count]
    first_obs, last_obs = obs["first_token_us"][:count], obs["last_token_us"][:count]
    ttft_obs = (first_obs - send).astype(np.float64)
    alpha, beta = np.asarray(alpha0, np.float64), np.asarray(beta0, np.float64)
    notes: list[str] = []
    history = []
    longest = int((wl.prompt_len + np.maximum(wl.output_len, 1)).max()) + 1
    for iteration in range(REPLAY_ITERATIONS):
        run_cfg = as_config(cfg, {"latency_model": "blackbox", "alpha_coeffs": list(alpha), "beta_coeffs": list(beta)})
        replay = replay_live(resolve(run_cfg), wl, capacity=max(len(wl), 1), max_model_len=max(longest, 2),
                             record_steps=True)
        x, y, _ = _decode_rows(replay, ok, first_obs, last_obs, int(alpha[2]))
        if len(y) < MIN_REQUESTS or np.linalg.matrix_rank(x / np.maximum(np.abs(x).max(axis=0), 1.0)) < 3:
            raise ConfigError("--fit", f"{len(y)} requests with two tokens or more do not vary enough to fit β0, β1, "
                                       "β2: record more requests at a load that batches them")
        step_notes: list[str] = []
        new_beta = nonnegative_huber_fit(x, y, ["beta0", "beta1", "beta2"], step_notes)
        xa, za, idle = _alpha_rows(replay, ok, ttft_obs, lengths, send, alpha)
        from_idle = _varied(xa[idle], MIN_IDLE_REQUESTS)
        if from_idle:  # (their TTFT less the replay's prefill is α's alone, whatever α the replay had)
            xa, za = xa[idle], za[idle]
        new_alpha01 = nonnegative_huber_fit(xa, za, ["alpha0", "alpha1"], step_notes)
        if iteration > 0 and not from_idle:  # (α's fixed point oscillates: the queue waits move with it)
            new_alpha01 = alpha[:2] + ALPHA_DAMPING * (new_alpha01 - alpha[:2])
        new_alpha = np.array([new_alpha01[0], new_alpha01[1], 0.0])
        alpha_source = "requests that found their instance idle" if from_idle else "every request (damped)"
        if not (x @ new_beta > 0).all():
            raise ConfigError("--fit", "the fitted β gives some requests no decode time (every coefficient came out "
                                       "0): the recording's token times do not follow the step-time model")
        # (how much the fit changed what it predicts: the coefficients alone can trade off)
        moved = max(float(np.max(np.abs(x @ (new_beta - beta)) / np.maximum(x @ new_beta, 1.0))),
                    float(np.max(np.abs(xa @ (new_alpha01 - alpha[:2])) / np.maximum(np.abs(xa @ new_alpha01), 1e3))))
        history.append(float(moved))
        alpha, beta = new_alpha, new_beta
        if moved < REPLAY_CONVERGED:
            notes += step_notes
            break
    else:
        notes += step_notes
        notes.append(f"the replays did not settle within {REPLAY_ITERATIONS} (the last moved a coefficient by "
                     f"{100 * history[-1]:.2g} %)")
    notes.append("alpha0 is alpha0 + alpha2 (only their sum is identifiable); alpha2 is reported as 0")
    resid = y - x @ beta
    details = {"method": "replay (Huber IRLS on each request's decode time and TTFT)",
               "replays": len(history), "moved": history, "requests_beta": int(len(y)),
               "requests_alpha": int(len(za)), "alpha_source": alpha_source,
               "decode_residual_ms": {"median_abs": float(np.median(np.abs(resid))) / 1000,
                                      "max_abs": float(np.max(np.abs(resid))) / 1000},
               "notes": notes}
    return FittedCoefficients(tuple(float(a) for a in alpha), tuple(float(b) for b in beta), details)
