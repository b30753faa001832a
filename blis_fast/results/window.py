"""The measurement window (``simulation.warmup_s``, ``simulation.cooldown_s``).

Statistics over a run that starts empty and ends draining are biased: the first requests
find idle instances (warm-up), the last ones find the load falling off (cool-down).  With a
window, the request statistics -- latencies and their percentiles, counts, SLO attainment --
cover only the requests that *arrived* in

    [first arrival + warmup_s,  last arrival - cooldown_s]   (both ends included)

and the per-second rates (responses_per_sec, tokens_per_sec, goodput_rps) are the
throughput *during* the window: requests whose last token became visible inside it
(whenever they arrived), divided by its span -- past saturation they level off at the
cluster's capacity instead of following the arrival rate.  Engine
counters that are not per request (steps, batch sizes, KV peaks, busy fraction,
utilization) still cover the whole run.  Without warm-up and cool-down every request counts
and nothing changes.  A window that holds no request is an error naming the setting.
"""

from __future__ import annotations

import numpy as np

from blis_fast.errors import ConfigError


def measurement_window(arrival_us: np.ndarray, warmup_s: float, cooldown_s: float) -> tuple[int, int] | None:
    """(first, last) arrival time in µs of the measured requests, or None when every
    request counts (no warm-up and no cool-down).  ``arrival_us`` < 0 are requests that
    never arrived (closed-loop turns not released).  ConfigError if no request is left."""
    if not warmup_s and not cooldown_s:
        return None
    arrived = arrival_us[arrival_us >= 0]
    if arrived.size == 0:
        return None
    first, last = int(arrived.min()), int(arrived.max())
    lo = first + int(round(warmup_s * 1e6))
    hi = last - int(round(cooldown_s * 1e6))
    if lo > hi or not ((arrived >= lo) & (arrived <= hi)).any():
        field = "simulation.warmup_s" if warmup_s else "simulation.cooldown_s"
        raise ConfigError(f"{field} (--{field.split('.')[1].replace('_', '-')})",
                          f"warm-up {warmup_s:g} s and cool-down {cooldown_s:g} s leave no request to measure: "
                          f"arrivals span {first / 1e6:.6g} s to {last / 1e6:.6g} s")
    return lo, hi


def window_mask(arrival_us: np.ndarray, window: tuple[int, int]) -> np.ndarray:
    """bool per request: it arrived inside ``window`` (µs, both ends included)."""
    lo, hi = window
    return (arrival_us >= lo) & (arrival_us <= hi)
