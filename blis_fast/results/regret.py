"""Estimated regret of routing decisions, from what the router saw (the decision trace).

The model estimates the extra TTFT a request pays on instance x as

    est(x) = load_x · slot_us + (L - block_size · matched_x) · token_us

- load_x: the snapshot's effective load of x (queue + batch + routed-pending requests);
- slot_us = mean E2E of the run's completed requests / max_num_seqs: the time for one batch
  slot to free up, i.e. what each request ahead costs a newcomer on average;
- matched_x: the leading prompt blocks x's prefix index holds (cached prefill is free);
- token_us = the run's busy time per computed token (prefill + decode), a crude per-token
  prefill cost that works for every latency model.

regret = max(0, est(chosen) - min over the traced alternatives est(alt)), in µs.  It only
ranks decisions; the exact effect of a decision comes from replaying it
(``blis_fast.run.counterfactual``).
"""

from __future__ import annotations

import numpy as np


def routing_log(result) -> np.ndarray:
    """The run's routing records (ROUTE_DT), empty when decisions were not traced."""
    st = result.state
    return st.route_log[: int(st.loop[0]["route_records"])]


def model_constants(result) -> tuple[float, float]:
    """(slot_us, token_us) of the model (module docstring)."""
    st = result.state
    lat = result.latencies
    e2e = lat["e2e_us"][lat["done"]]
    seqs = max(int(result.setup.config.engine.max_num_seqs), 1)
    slot_us = float(e2e.mean()) / seqs if e2e.size else 0.0
    inst = st.inst
    tokens = int(inst["prefill_tokens"].sum() + inst["decode_tokens"].sum())
    token_us = float(inst["busy_us"].sum()) / tokens if tokens else 0.0
    return slot_us, token_us


def estimated_costs(result, log: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(est of the chosen instance [n], est of each alternative [n, k]; +inf where there is
    no alternative), µs."""
    log = routing_log(result) if log is None else log
    slot_us, token_us = model_constants(result)
    reqs = result.state.reqs
    # each request's matched blocks are of its instances' block size (its model's)
    bs = result.state.inst["block_size"][log["chosen_instance"]].astype(np.float64)
    prompt = reqs["prompt_len"][log["request"]].astype(np.float64)

    def est(load, matched):
        shape = (-1,) + (1,) * (np.ndim(load) - 1)
        uncached = np.maximum(prompt.reshape(shape) - bs.reshape(shape) * matched, 0)
        return load * slot_us + uncached * token_us

    chosen = est(log["chosen_load"], log["chosen_matched_blocks"])
    alts = est(log["alt_load"], log["alt_matched_blocks"])
    alts = np.where(log["alt_instance"] >= 0, alts, np.inf)
    return chosen, alts


def estimated_regret(result, log: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(regret µs per routing record, index of the best alternative per record (-1: none))."""
    log = routing_log(result) if log is None else log
    if len(log) == 0:
        return np.zeros(0), np.zeros(0, np.int64)
    chosen, alts = estimated_costs(result, log)
    best = np.argmin(alts, axis=1)
    best_cost = alts[np.arange(len(log)), best]
    has = np.isfinite(best_cost)
    regret = np.where(has, np.maximum(chosen - np.where(has, best_cost, 0.0), 0.0), 0.0)
    return regret, np.where(has, best, -1)


__all__ = ["estimated_costs", "estimated_regret", "model_constants", "routing_log"]
