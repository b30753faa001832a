"""Drive the resumable event loop (blis_fast_kernels.engine.loop.run_events) to the end of a run.

The loop returns whenever the logs need room (Status.LOG_FULL: we grow them and call
again), after a chunk of events (Status.CHUNK_DONE: progress, Ctrl-C) or when the
simulated clock passes the pause time (Status.PAUSED: a sample is taken).  Any other
status but OK is an error."""

from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np

from blis_fast.errors import SimulationError
from blis_fast_kernels import schema as S
from blis_fast_kernels.schema import State, Status
from blis_fast_kernels.schema.state import STATE_FIELDS, log_room
from blis_fast.config import memory

STATUS_MESSAGES = {
    Status.HEAP_FULL: "the event heap overflowed (internal sizing error; please report)",
    Status.CLOCK_BACKWARDS: ("the simulated clock overflowed (an event fell before the current time): step or "
                             "delay times are too large; lower alpha_coeffs / beta_coeffs or "
                             "engine.max_num_batched_tokens, or use a smaller model (roofline)"),
    Status.NO_INSTANCE: "a request could not be routed: no active instance",
    Status.STALL: "an instance has waiting requests but could not form a batch (would stall)",
    Status.INVARIANT_KV: "KV block conservation violated (allocated + free != total)",
    Status.INVARIANT_BATCH: "batch size exceeded max_num_seqs",
    Status.MAX_EVENTS: "the run reached max_events before finishing; raise simulation.max_events",
    Status.UNKNOWN_EVENT: "an event of unknown kind {kind} reached the event loop (internal error; please report)",
    Status.AGENT_HEAP_FULL: "the agents' finish-event heap overflowed (internal sizing error; please report)",
}


def default_workers() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover -- not Linux
        return max(1, os.cpu_count() or 1)


def _kind_name(state: State) -> str:
    """'cluster kind 5' / 'instance kind 3': the unknown event's kind code and band."""
    lp = state.loop[0]
    band = "instance" if lp["error_instance"] >= 0 else "cluster"
    return f"{band} kind {int(lp['error_kind'])}"


def _with_room(log: np.ndarray, used: int, extra: int, what: str, hint: str) -> np.ndarray:
    """``log`` if it has room for ``extra`` rows after its ``used`` ones, else a copy grown
    to at least twice its size, charged to the memory budget in force as ``what`` (a
    format string of ``used`` and ``rows``)."""
    if used + extra <= log.shape[0]:
        return log
    rows = max(2 * log.shape[0], used + extra, 1024)
    memory.charge(rows * log.dtype.itemsize, what.format(used=used, rows=rows), hint)
    out = np.zeros(rows, log.dtype)
    out[:used] = log[:used]
    return out


def grow_logs(state: State) -> State:
    """A State whose logs have room for at least one more step of any instance (the used
    rows are kept): every field declared with a ``Growth`` (kernels/schema/state.py) that
    is written at the run's trace level -- the step and irregular-ITL logs, and when
    tracing the preemption and scheduling logs.  The growth is charged to the memory budget
    in force (ConfigError naming simulation.max_memory when it does not fit)."""
    lp = state.loop[0]
    seqs = int(state.inst["max_num_seqs"].max()) if state.inst.size else 1
    level = int(state.settings[0]["trace_level"])
    autoscaled = state.settings[0]["autoscaled"] != 0
    grown = {}
    for f in STATE_FIELDS:
        if f.growth is not None and level >= f.growth.level and (autoscaled or not f.growth.autoscaled):
            grown[f.name] = _with_room(getattr(state, f.name), int(lp[f.growth.counter]),
                                       log_room(f.growth, seqs, len(state.inst)), f.growth.what, f.growth.hint)
    return state._replace(**grown)


CHUNK_EVENTS = 200_000  # events in the first kernel call; later calls are sized to take about
CHUNK_SECONDS = 0.2  # this long, so that an interrupt or a progress update is never far away
#                      (a call costs microseconds: no measurable cost) even when events are slow
MIN_CHUNK_EVENTS, MAX_CHUNK_EVENTS = 10_000, 20_000_000


def _next_chunk(chunk: int, seconds: float) -> int:
    """The next call's event budget: ``chunk`` events took ``seconds``; aim at
    CHUNK_SECONDS, changing by at most 4x per call."""
    if seconds <= 0:
        return min(chunk * 4, MAX_CHUNK_EVENTS)
    want = chunk * CHUNK_SECONDS / seconds
    return int(min(max(want, chunk / 4, MIN_CHUNK_EVENTS), chunk * 4, MAX_CHUNK_EVENTS))


def run_to_end(state: State, progress: Callable[[State], None] | None = None,
               sample_every_us: int | None = None, on_sample: Callable[[State, int, int], None] | None = None,
               chunk_events: int | None = None, until_us: int | None = None) -> State:
    """Run the loop until the simulation ends; returns the final State (the logs may have
    been replaced by larger ones).  Raises SimulationError on an error status.

    The kernel returns to Python every ``chunk_events`` events (default: as many as take
    about CHUNK_SECONDS of wall time; 0: never): ``progress(state)`` is called then (the
    simulated clock is ``state.loop[0]["clock_us"]``), and a Ctrl-C (KeyboardInterrupt)
    surfaces there.  Where the kernel returns does not change the run.  With ``sample_every_us``, the loop also stops at
    every multiple of it on the simulated clock -- having processed every event up to that
    time -- and ``on_sample(state, t_us, repeats)`` records what it needs (time series):
    the samples at ``t_us`` and the ``repeats - 1`` sample times after it, which see the
    same state (no event falls between them).  With
    ``until_us`` (not with sampling) it returns instead once every event at or before
    ``until_us`` is processed (``run_until``).  A cohort's state (blis_fast.batch.cohorts)
    also returns, with Status.COHORT_SPLIT, where its members part."""
    from blis_fast_kernels.native import run_events  # deferred: blis_fast_kernels.native -- compiled ahead of time, or numba loads here

    settings = state.settings
    adaptive = chunk_events is None
    settings["chunk_events"] = CHUNK_EVENTS if adaptive else max(int(chunk_events), 0)
    if sample_every_us:
        settings["pause_at_us"] = int(sample_every_us)
    if until_us is not None:
        settings["pause_at_us"] = int(until_us)
    while True:
        started = time.perf_counter()
        run_events(state)
        status = int(state.loop[0]["status"])
        if adaptive and status == Status.CHUNK_DONE:
            settings["chunk_events"] = _next_chunk(int(settings[0]["chunk_events"]), time.perf_counter() - started)
        if status == Status.OK:
            if until_us is not None:
                settings["pause_at_us"] = np.iinfo(np.int64).max
            return state
        if status == Status.LOG_FULL:
            state = grow_logs(state)
        elif status == Status.CHUNK_DONE:
            if progress is not None:
                progress(state)
        elif status == Status.COHORT_SPLIT:  # (only a cohort's state stops so: blis_fast.batch.cohorts)
            return state
        elif status == Status.PAUSED and until_us is not None:
            settings["pause_at_us"] = np.iinfo(np.int64).max
            return state
        elif status == Status.PAUSED:
            t = int(settings[0]["pause_at_us"])
            repeats = _unchanged_samples(state, t, int(sample_every_us))
            if on_sample is not None:
                on_sample(state, t, repeats)
            settings["pause_at_us"] = t + repeats * int(sample_every_us)
        else:
            raise SimulationError(describe_error(state))


def next_event_us(state: State) -> int | None:
    """When the loop's next event happens (the arrival stream's, the heap's or the agents'), None if
    no event is left."""
    lp = state.loop[0]
    times = []
    if int(lp["next_arrival"]) < len(state.arrival_order):
        times.append(int(state.reqs["arrival_us"][state.arrival_order[int(lp["next_arrival"])]]))
    if int(lp["heap_size"]) > 0:
        times.append(int(state.heap["time_us"][0]))
    if state.settings[0]["agents"] and int(state.agent_ctr[S.AgentCounter.NEXT_US]) < S.AGENT_NEVER_US:
        times.append(int(state.agent_ctr[S.AgentCounter.NEXT_US]))  # the agents' next instant (engine/agents.py)
    return min(times) if times else None


def _unchanged_samples(state: State, t: int, every: int) -> int:
    """How many sample times t, t + every, ... see the state the loop paused in: those
    before its next event (the kernel pauses only before an event beyond t).  Taking them
    at once makes a fine interval over idle stretches cost one sample, not one kernel
    call each; a next event beyond the horizon ends the run, so it leaves one."""
    e = next_event_us(state)
    if e is None or e > int(state.settings[0]["horizon_us"]) or e <= t:
        return 1
    return -(-(e - t) // every)


def run_until(state: State, t_us: int) -> State:
    """Run until every event at or before ``t_us`` is processed and the next one lies
    beyond it (or the run ends); the returned State continues with ``run_to_end``."""
    return run_to_end(state, until_us=t_us)


def describe_error(state: State) -> str:
    """One line: what went wrong, where and when."""
    lp = state.loop[0]
    status = int(lp["status"])
    where = []
    if lp["error_instance"] >= 0:
        where.append(f"instance_{lp['error_instance']}")
    if lp["error_request"] >= 0:
        where.append(f"request_{lp['error_request']}")
    at = f" ({', '.join(where)}, t={lp['clock_us']} µs)" if where else f" (t={lp['clock_us']} µs)"
    message = STATUS_MESSAGES.get(status, f"status {status}")
    if status == Status.UNKNOWN_EVENT:
        message = message.format(kind=_kind_name(state))
    return message + at
