"""Run adequacy: does a run's measurement say anything about steady state?

A simulation starts with an empty cluster and ends when its arrivals stop, so every run
has a ramp-up (the first requests meet no queue) and a drain.  A run that is short against
its own latencies measures mostly these transients -- and is optimistic: a cluster offered
four times its capacity for 0.1 s "serves" every request with its unloaded latency.  A run
offered more than its capacity for long enough has a backlog that grows without bound:
its latencies measure the run's length, not the cluster.  ``adequacy(result)`` checks a
finished run for both, from the request table alone (O(requests), no extra simulation):

- ``arrival_span_s``: last arrival - first arrival; ``e2e_p99_s``: the run's E2E p99 (of
  the measurement window if there is one); ``span_over_e2e_p99``: their ratio.  The run is
  **too short** when the span is under ``MIN_SPAN_OVER_E2E`` (10) E2E p99s: then more than
  about a fifth of its requests arrive within one E2E p99 of the start or the end
  (``transient_fraction``), or when no request completed.
- The last quarter of the arrival span (the *tail*): ``arrival_rate_rps`` and
  ``completion_rate_rps`` are its arrivals and completions per second, ``backlog_growth``
  the requests it added to the cluster's backlog (arrivals - completions - rejections) as
  a fraction of its arrivals (~0 in steady state).  The run is **saturated** when
  the backlog grew by more than ``SATURATION_GROWTH`` (10 %) of the tail's arrivals -- and
  by more than three standard deviations of Poisson noise -- while completions had levelled
  off (the tail completed no more than ``LEVELLED`` x the previous quarter, and each of them
  at least ``MIN_COMPLETIONS``): the cluster delivers its capacity and the queue grows by
  the difference.  A
  run still ramping up (its completions rising) is too short, not saturated.
- ``in_flight_at_end``: requests arrived but neither completed nor rejected (nor dropped,
  timed out or shed) when the run ended (only a ``--horizon`` leaves any); the run is **unfinished** when they are more than
  ``MAX_IN_FLIGHT_FRACTION`` (5 %) of the arrivals: the statistics leave them out.

``verdict`` is the first of saturated, too_short, unfinished that applies, else ok;
``reasons`` says why, one short sentence per finding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from blis_fast.config.sim import MAX_REQUESTS
from blis_fast_kernels.schema import RequestState

MIN_SPAN_OVER_E2E = 10.0  # arrival span / E2E p99 below this: too short
SATURATION_GROWTH = 0.1  # the tail's backlog growth / its arrivals above this: saturated ...
LEVELLED = 1.25  # ... if the tail completed at most this x the previous quarter (completions levelled off)
MIN_COMPLETIONS = 20  # ... and each of the two quarters completed at least this many (the cluster is delivering)
MAX_IN_FLIGHT_FRACTION = 0.05  # requests in flight at the end / arrivals above this: unfinished
VERDICTS = ("ok", "unfinished", "too_short", "saturated")  # from the best to the worst

# leave the cluster without completing: as they arrive, or (flow control, deadlines) timed out or shed
_LEFT = (RequestState.REJECTED, RequestState.DROPPED, RequestState.TIMED_OUT, RequestState.SHED)
_BY_REQUESTS = "--num-requests"  # what lengthens a generated workload's run


@dataclass(frozen=True)
class Adequacy:
    """The adequacy of one run (module docstring); times in seconds, rates per second."""

    verdict: str
    arrival_span_s: float
    e2e_p99_s: float | None
    span_over_e2e_p99: float | None
    transient_fraction: float | None
    in_flight_at_end: int
    backlog_growth: float | None
    arrival_rate_rps: float | None
    completion_rate_rps: float | None
    arrived_requests: int
    reasons: tuple[str, ...]
    lengthen: str = _BY_REQUESTS  # the setting that lengthens the run (not in the JSON)

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def to_dict(self) -> dict:
        """The summary JSON's ``adequacy`` object."""
        return {
            "verdict": self.verdict, "arrival_span_s": self.arrival_span_s, "e2e_p99_s": self.e2e_p99_s,
            "span_over_e2e_p99": self.span_over_e2e_p99, "transient_fraction": self.transient_fraction,
            "in_flight_at_end": self.in_flight_at_end, "backlog_growth": self.backlog_growth,
            "arrival_rate_rps": self.arrival_rate_rps, "completion_rate_rps": self.completion_rate_rps,
            "reasons": list(self.reasons),
        }

    @property
    def span_needed_s(self) -> float | None:
        """The arrival span that would not be too short at this run's E2E p99 (None: unknown)."""
        return None if self.e2e_p99_s is None else MIN_SPAN_OVER_E2E * self.e2e_p99_s

    def warning(self) -> str | None:
        """One line for a person (``blis-fast run`` prints it on stderr); None when ok."""
        if self.ok:
            return None
        if self.verdict == "saturated":
            return (f"blis-fast: warning: the cluster is saturated: arrivals {self.arrival_rate_rps:.4g} req/s, "
                    f"completions {self.completion_rate_rps:.4g} req/s over the last quarter of the run; the backlog "
                    f"grows with the run's length, so do its latencies (lower the rate or add capacity)")
        if self.verdict == "too_short" and self.e2e_p99_s is None:  # nothing to size a longer run from
            return f"blis-fast: warning: the run measured no latency: {self.reasons[0]}"
        if self.verdict == "too_short":
            return f"blis-fast: warning: the run is too short for steady state: {self.reasons[0]}; {self._lengthen()}"
        return (f"blis-fast: warning: the run ended with {self.in_flight_at_end:,} of {self.arrived_requests:,} "
                f"requests in flight, left out of the statistics (raise --horizon)")

    def _lengthen(self) -> str:
        need = self.span_needed_s
        if need is None or not self.arrived_requests or self.arrival_span_s <= 0:
            return f"run longer ({self.lengthen})"
        want = math.ceil(self.arrived_requests * need / self.arrival_span_s)
        how = self.lengthen
        if self.lengthen == _BY_REQUESTS:
            how = (f"--num-requests {want} at this rate" if want <= MAX_REQUESTS else
                   f"more than the {MAX_REQUESTS} requests a run may have at this rate: a lower --rate")
        return f"run arrivals over at least {_secs(need)} s ({how})"


def _secs(x: float) -> str:
    """Seconds for a message: 3 significant digits, whole seconds from 100 s on (no exponent)."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _lengthen_setting(cfg, horizon_cut: bool) -> str:
    """The setting that lengthens a run of ``cfg``'s workload (``horizon_cut``: the horizon
    ended the run before every request arrived)."""
    w = cfg.workload
    if horizon_cut:
        return "raise --horizon"
    if w.spec_filepath:
        if w.num_requests is not None:  # it replaced the spec's own cap
            return "a larger --num-requests (the spec's cap) or the workload spec's duration_s"
        return "the workload spec's duration_s or num_requests"
    if w.type == "traces":
        if w.num_requests is not None:  # the replay may have been cut to the trace's first requests
            return "a larger --num-requests (the trace's first N requests) or a longer trace"
        return "a longer trace"
    return _BY_REQUESTS


def worst_verdict(verdicts) -> str:
    """The worst of ``verdicts`` (saturated, too_short, unfinished, ok; "ok" if none): the
    verdict of a study point, over its seeds' runs."""
    return max(verdicts, key=VERDICTS.index, default="ok")


def adequacy(result) -> Adequacy:
    """The adequacy of ``result``'s run (a ``Result``)."""
    reqs = result.reqs
    state = reqs["state"]
    cfg = result.setup.config
    lengthen = _lengthen_setting(cfg, cfg.simulation.horizon is not None and bool((state == RequestState.PENDING).any()))
    arrived = state != RequestState.PENDING  # pending: never arrived (a horizon, an unreleased session turn)
    arrival = reqs["arrival_us"][arrived]
    n_arrived = int(arrival.size)
    e2e_sorted = result.ordered_latencies["e2e"]
    e2e_p99 = float(np.percentile(e2e_sorted, 99)) / 1e6 if e2e_sorted.size else None
    arrived_state = state[arrived]
    left = np.isin(arrived_state, _LEFT)
    done = arrived_state == RequestState.COMPLETED
    in_flight = int(n_arrived - done.sum() - left.sum())
    reasons: list[str] = []
    if n_arrived == 0:
        return Adequacy("too_short", 0.0, e2e_p99, None, None, 0, None, None, None, 0, ("no request arrived",),
                        lengthen)
    t0, t1 = int(arrival.min()), int(arrival.max())
    span_s = (t1 - t0) / 1e6
    ratio = span_s / e2e_p99 if e2e_p99 else None

    # the tail: the last quarter of the arrival span, and the quarter before it
    finish = reqs["last_token_us"][arrived]
    q3_start, tail_start = t0 + (t1 - t0) // 2, t1 - (t1 - t0) // 4
    tail_s = (t1 - tail_start) / 1e6
    growth = arrival_rate = completion_rate = None
    saturated = False
    if tail_s > 0:
        tail_arrivals = int(np.count_nonzero(arrival > tail_start))
        tail_done = int(np.count_nonzero(done & (finish > tail_start) & (finish <= t1)))
        q3_done = int(np.count_nonzero(done & (finish > q3_start) & (finish <= tail_start)))
        tail_left = int(np.count_nonzero(left & (arrival > tail_start)))
        added = tail_arrivals - tail_done - tail_left
        arrival_rate, completion_rate = tail_arrivals / tail_s, tail_done / tail_s
        if tail_arrivals:
            growth = added / tail_arrivals
            levelled = min(q3_done, tail_done) >= MIN_COMPLETIONS and tail_done <= LEVELLED * q3_done
            saturated = (growth > SATURATION_GROWTH and added > 3 * math.sqrt(tail_arrivals) and levelled)
    if saturated:
        reasons.append(f"the backlog grew by {growth:.0%} of the arrivals over the last quarter of the run "
                       f"(arrivals {arrival_rate:.4g} req/s, completions {completion_rate:.4g} req/s)")

    too_short = e2e_p99 is None or ratio < MIN_SPAN_OVER_E2E
    if e2e_p99 is None:
        n_left = int(left.sum())
        reasons.append(f"no request completed ({n_left:,} of {n_arrived:,} rejected or dropped)" if n_left else
                       "no request completed")
    elif too_short:
        reasons.append(f"arrivals span {_secs(span_s)} s, under {MIN_SPAN_OVER_E2E:g} x the E2E p99 ({_secs(e2e_p99)} s)")

    transient = None
    if e2e_p99 is not None:  # measured requests within one E2E p99 of the first or the last arrival
        window = result.in_window
        measured = reqs["arrival_us"][arrived & window] if window is not None else arrival
        edge = int(e2e_p99 * 1e6)
        if measured.size:
            transient = float(np.count_nonzero((measured < t0 + edge) | (measured > t1 - edge))) / measured.size

    unfinished = in_flight > MAX_IN_FLIGHT_FRACTION * n_arrived
    if in_flight:
        reasons.append(f"{in_flight:,} of {n_arrived:,} requests still in flight at the end")
    verdict = "saturated" if saturated else "too_short" if too_short else "unfinished" if unfinished else "ok"
    return Adequacy(verdict, span_s, e2e_p99, ratio, transient, in_flight, growth, arrival_rate, completion_rate,
                    n_arrived, tuple(reasons), lengthen)
