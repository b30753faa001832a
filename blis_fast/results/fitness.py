"""Fitness of a run: a weighted sum of normalized components (docs/semantics.md §8).

throughput = rps / (rps + 100); tokens_per_sec = tps / (tps + 10000); latency keys
(p99_ttft, p50_ttft, mean_ttft, p99_e2e, p50_e2e, mean_e2e) = 1 / (1 + value_µs / 1000).
Every component lies in (0, 1], higher is better; score = Σ weight · component.
"""

from __future__ import annotations

import numpy as np

FITNESS_UNITS = {"throughput": "req/s", "tokens_per_sec": "tokens/s"}  # every latency key: µs
def _latency_component(values_us: np.ndarray, how: str) -> tuple[float, float]:
    if values_us.size == 0:
        return 0.0, 0.0  # nothing measured: no credit
    v = float(np.mean(values_us)) if how == "mean" else float(np.percentile(values_us, int(how[1:])))
    return v, 1.0 / (1.0 + v / 1000.0)


def fitness(weights: dict[str, float], responses_per_sec: float, tokens_per_sec: float,
            ttft_us: np.ndarray, e2e_us: np.ndarray) -> dict:
    """{"score", "components": {key: component}, "values": {key: raw value}, "units": {key:
    unit of its value}, "weights"}."""
    comps: dict[str, float] = {}
    values: dict[str, float] = {}
    for key in weights:
        if key == "throughput":
            values[key] = responses_per_sec
            comps[key] = responses_per_sec / (responses_per_sec + 100.0)
        elif key == "tokens_per_sec":
            values[key] = tokens_per_sec
            comps[key] = tokens_per_sec / (tokens_per_sec + 10000.0)
        else:
            how, _, metric = key.partition("_")
            values[key], comps[key] = _latency_component(ttft_us if metric == "ttft" else e2e_us, how)
    score = float(sum(weights[k] * comps[k] for k in weights))
    units = {k: FITNESS_UNITS.get(k, "µs") for k in weights}  # BLIS's keys carry no unit: say it beside them
    return {"score": score, "components": comps, "values": values, "units": units, "weights": dict(weights)}
