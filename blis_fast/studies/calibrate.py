"""Calibration: how far the simulator's latencies are from what an observer recorded
(``blis-fast calibrate --observed T.parquet``), and α/β fitted from the recording
(``--fit``; the fit itself is ``blis_fast.studies.fit``).  docs/calibrate.md.

The compared requests are the recording's *completed* ones: HTTP status 200, not timed
out, no error, and every token received (``max(output_len, 1)`` token times).  Their
observed latencies are measured from the send time on the recording's timeline:

    TTFT = first token - send,  E2E = last token - send,
    ITL  = (last token - first token) / (tokens - 1)   (requests with >= 2 tokens)

The simulated ones come from a run of the same requests, each arriving at its send time
(when the server got it; a request never sent is not simulated), with the engine settings
given: TTFT and E2E from the arrival, ITL the request's mean ITL.  Per metric: mean,
p50, p90, p99 of each side and their relative error (sim - obs) / obs; per request the
MAPE (mean |sim - obs| / obs over obs > 0), Pearson r, and the bias (mean of
(sim - obs) / obs: > 0 over-predicts); a grade (GRADES).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import yaml

from blis_fast.config.outputs import atomic_write
from blis_fast.config.sim import SimConfig
from blis_fast.config.validate import show
from blis_fast.errors import ConfigError
from blis_fast.studies import fit as fitting
from blis_fast.studies.replay_fit import fit_by_replay
from blis_fast.workload.formats.observed import Observation, read_observed
from blis_fast.workload.generate import Requests

METRICS = ("ttft", "itl", "e2e")
STATISTICS = ("mean", "p50", "p90", "p99")
# (grade, MAPE below, Pearson r above): the reference simulator's four quality levels
# (excellent / good / fair / poor, its sim/workload/calibrate.go) as letters.  A metric
# whose r is undefined (fewer than 3 requests, or one side constant) is graded on its
# MAPE alone; the overall grade is the worst of the metrics'.
GRADES = (("A", 0.10, 0.95), ("B", 0.20, 0.85), ("C", 0.35, 0.70))
LOWEST_GRADE = "D"
HTTP_OK = 200


def grade(mape: float, pearson_r: float | None) -> str:
    """The letter of a metric's per-request MAPE (a fraction) and Pearson r (GRADES)."""
    for letter, mape_below, r_above in GRADES:
        if mape < mape_below and (pearson_r is None or pearson_r > r_above):
            return letter
    return LOWEST_GRADE


def worst_grade(grades) -> str:
    """The worst of some grades (A best)."""
    order = [g for g, _, _ in GRADES] + [LOWEST_GRADE]
    return max(grades, key=order.index) if grades else LOWEST_GRADE


# ------------------------------------------------------------------------- the recording


def expected_tokens(requests: Requests) -> np.ndarray:
    """Tokens each request should stream: its output length, at least 1."""
    return np.maximum(requests["output_len"], 1)


def token_counts(obs: Observation) -> np.ndarray:
    return np.diff(obs.token_offsets)


def completed_requests(requests: Requests, obs: Observation) -> np.ndarray:
    """Mask of the completed requests: status 200, sent, not timed out, no error, every
    token received."""
    no_error = np.array([e == "" for e in obs.error], bool)
    counts = token_counts(obs)
    done = ((obs["status"] == HTTP_OK) & (obs["send_us"] >= 0) & ~obs["timed_out"] & no_error
            & (counts == expected_tokens(requests)))
    # and times that make sense: the first token after the send, the others in order
    first = np.full(len(obs), -1, np.int64)
    first[counts > 0] = obs.token_times_us[obs.token_offsets[:-1][counts > 0]]
    backwards = np.zeros(len(obs), bool)
    steps_back = np.flatnonzero(np.diff(obs.token_times_us) < 0) + 1  # positions whose time is below the previous
    owner = np.searchsorted(obs.token_offsets, steps_back, side="right") - 1
    inside = steps_back != obs.token_offsets[owner]  # (not a request's first token)
    backwards[owner[inside]] = True
    return done & (first >= obs["send_us"]) & ~backwards


def load_recording(path: str | Path) -> tuple[Requests, dict, Observation, np.ndarray]:
    """(requests, header, observation, completed mask) of a recording; ConfigError
    naming --observed when no request completed."""
    if Path(path).suffix.lower() not in (".parquet", ".pq"):  # (before a trace reader takes it for a CSV)
        raise ConfigError("--observed", f"{show(Path(path).name)} is not a recording: a recording is a Parquet "
                                        "file (blis-fast observe --out T.parquet)")
    requests, header, obs = read_observed(path)
    done = completed_requests(requests, obs)
    if not done.any():
        raise ConfigError("--observed", f"{show(Path(path).name)} has no completed request (HTTP 200 with every "
                                        f"token received) of {len(requests)}: nothing to compare")
    return requests, header, obs, done


def observed_latencies(obs: Observation, done: np.ndarray) -> dict[str, np.ndarray]:
    """{"ttft", "e2e", "itl"} µs (float64) of the completed requests, in request order;
    ITL only of those with two tokens or more (``itl_rows``: their positions among the
    completed)."""
    ids = np.flatnonzero(done)
    start = obs.token_offsets[ids]
    end = obs.token_offsets[ids + 1]
    first = obs.token_times_us[start].astype(np.float64)
    last = obs.token_times_us[end - 1].astype(np.float64)
    send = obs["send_us"][ids].astype(np.float64)
    n = (end - start).astype(np.float64)
    multi = n > 1
    return {"ttft": first - send, "e2e": last - send,
            "itl": (last[multi] - first[multi]) / (n[multi] - 1), "itl_rows": np.flatnonzero(multi)}


def _number_or_none(value):
    """A header's number as it is, None for anything else (text, NaN: a report is JSON)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return value if ok else None


def _model_entries(header: dict) -> list | None:
    """The server's model entries the observer recorded (``observed.server_models``: its
    ``/v1/models`` data list; a whole response ``{"data": [...]}`` is read too)."""
    models = (header.get("observed") or {}).get("server_models")
    if isinstance(models, dict):
        models = models.get("data")
    return models if isinstance(models, list) else None


def instances_of(header: dict) -> int | None:
    """How many instances served the recording, as its server said (``observed.
    server_models``: a blis-fast server's ``/v1/models``); None when it did not say."""
    data = _model_entries(header)
    if not data:
        return None
    total = 0
    for entry in data:
        info = entry.get("blis_fast") if isinstance(entry, dict) else None
        count = info.get("instances") if isinstance(info, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            return None
        total += count
    return total


def server_coefficients(header: dict) -> dict | None:
    """The α and β a blis-fast server said it runs (its ``/v1/models`` entry's
    ``blis_fast``: one entry, 3 finite numbers each); None otherwise."""
    data = _model_entries(header)
    info = data[0].get("blis_fast") if isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict) \
        else None
    if not isinstance(info, dict):
        return None
    out = {}
    for key in ("alpha_coeffs", "beta_coeffs"):
        values = info.get(key)
        if not isinstance(values, list) or len(values) != 3 or any(_number_or_none(v) is None for v in values):
            return None
        out[key] = [float(v) for v in values]
    return out


# ------------------------------------------------------------------------- the simulation


def sent_requests(requests: Requests, obs: Observation) -> tuple[Requests, int]:
    """(the requests as the server got them -- each arriving at its send time --, how many
    of them, from the first, are simulated).  Requests never sent are left out when they
    are the recording's tail (an interrupted observer); anywhere else they keep their
    recorded arrival.  A closed-loop follower (arrival -1) stays one."""
    send = obs["send_us"]
    arrival = requests["arrival_us"]
    sent = send >= 0
    positions = np.flatnonzero(sent)
    count = int(positions[-1]) + 1 if positions.size else 0
    columns = dict(requests.columns)
    columns["arrival_us"] = np.where(sent & (arrival >= 0), send, arrival).astype(np.int64)
    return replace(requests, columns=columns), count


def simulate_recording(cfg: SimConfig, requests: Requests, obs: Observation):
    """The run of the recording's requests as the server got them (``sent_requests``) with
    ``cfg``'s engine: (Result, number of requests simulated)."""
    from blis_fast.run.api import run_config  # deferred: blis_fast_kernels.native
    from blis_fast.run.resolve import (  # deferred: blis_fast_kernels.native
        assign_models, config_deadlines, model_block_sizes, with_deadlines)

    sent, count = sent_requests(requests, obs)
    sizes = model_block_sizes(cfg.deployment_list())
    if len(set(sizes)) > 1:
        raise ConfigError("deployments", "a calibration simulates one model; its deployments must share one "
                                         "block size")
    wl = sent.to_workload(sizes[0], description={"kind": "observed", "requests": count}).first(count)
    wl = with_deadlines(assign_models(cfg, wl), config_deadlines(cfg))
    return run_config(cfg, wl), count


def simulated_latencies(result, done: np.ndarray, itl_rows: np.ndarray) -> dict[str, np.ndarray]:
    """The simulated {"ttft", "e2e", "itl"} µs of the completed requests (-1 µs where the
    simulation did not finish one: a horizon, a rejection)."""
    cols = result.request_columns()
    ids = np.flatnonzero(done)
    finished = cols["completion_us"][ids] >= 0
    ttft = np.where(finished, cols["ttft_us"][ids], -1).astype(np.float64)
    e2e = np.where(finished, cols["e2e_us"][ids], -1).astype(np.float64)
    first = cols["first_token_us"][ids].astype(np.float64)
    last = cols["completion_us"][ids].astype(np.float64)
    n = cols["generated_tokens"][ids].astype(np.float64)
    itl = np.where(finished & (n > 1), (last - first) / np.maximum(n - 1, 1), -1.0)
    return {"ttft": ttft, "e2e": e2e, "itl": itl[itl_rows], "finished": finished}


# ------------------------------------------------------------------------- the comparison


def pearson_r(x: np.ndarray, y: np.ndarray) -> float | None:
    """Pearson's r of two samples; None for fewer than 3 pairs or a constant side."""
    if len(x) < 3:
        return None
    dx = x - x.mean()
    dy = y - y.mean()
    den = math.sqrt(float(dx @ dx) * float(dy @ dy))
    if den == 0.0 or not math.isfinite(den):
        return None
    return float(min(1.0, max(-1.0, float(dx @ dy) / den)))


def _stats(values: np.ndarray) -> dict[str, float]:
    p50, p90, p99 = np.percentile(values, (50, 90, 99)) if values.size else (0.0, 0.0, 0.0)
    return {"mean": float(values.mean()) if values.size else 0.0, "p50": float(p50), "p90": float(p90),
            "p99": float(p99)}


def _relative(sim: float, obs: float) -> float | None:
    return (sim - obs) / obs if obs > 0 else None


def compare_metric(observed: np.ndarray, simulated: np.ndarray) -> dict:
    """One metric's comparison (values µs; reported in ms): the statistics of each side and
    their relative errors, the per-request MAPE, Pearson r and bias, the grade."""
    count = len(observed)
    if count == 0:
        return {"count": 0}
    o, s = _stats(observed), _stats(simulated)
    positive = observed > 0
    rel = (simulated[positive] - observed[positive]) / observed[positive]
    mape = float(np.abs(rel).mean()) if rel.size else 0.0
    bias = float(rel.mean()) if rel.size else 0.0
    r = pearson_r(observed, simulated)
    return {
        "count": count,
        "observed_ms": {k: v / 1000 for k, v in o.items()},
        "simulated_ms": {k: v / 1000 for k, v in s.items()},
        "relative_error": {k: _relative(s[k], o[k]) for k in STATISTICS},
        "mape": mape, "pearson_r": r, "bias": bias,
        "grade": grade(mape, r),
    }


def compare(observed: dict[str, np.ndarray], simulated: dict[str, np.ndarray]) -> dict:
    """Every metric's comparison over the requests both sides completed, and the overall
    grade (the worst of them)."""
    finished = simulated["finished"]
    itl_ok = simulated["itl"] >= 0
    out = {"requests_compared": int(finished.sum()), "requests_unfinished_in_simulation": int((~finished).sum())}
    grades = []
    for name in METRICS:
        keep = itl_ok if name == "itl" else finished
        doc = compare_metric(observed[name][keep], simulated[name][keep])
        out[name] = doc
        if doc["count"]:
            grades.append(doc["grade"])
    out["grade"] = worst_grade(grades) if finished.any() else LOWEST_GRADE
    return out


FIT_METHODS = ("replay", "steps")


def calibrate(cfg: SimConfig, path: str | Path, *, fit: bool = False, step_tolerance_us: int | None = None,
              fit_method: str = "replay") -> dict:
    """The calibration report of recording ``path`` against ``cfg``'s engine (module
    docstring); with ``fit``, α/β fitted from the recording (``blis_fast.studies.fit``)
    and the comparison with them ("after")."""
    from blis_fast.run.api import as_config  # deferred: blis_fast_kernels.native

    requests, header, obs, done = load_recording(path)
    instances = instances_of(header)
    if fit and fit_method == "steps" and instances is not None and instances > 1:
        raise ConfigError("--fit", f"fits one instance; the recording's server had {instances} "
                                   "(observed.server_models): record a single-instance server")
    observed = observed_latencies(obs, done)
    result, simulated_count = simulate_recording(cfg, requests, obs)
    before = compare(observed, simulated_latencies(result, done, observed["itl_rows"]))
    info = result.run_info()
    report = {
        "recording": {"requests": len(requests), "completed": int(done.sum()),
                      "simulated": simulated_count, "instances": instances,
                      "time_scale": _number_or_none((header.get("observed") or {}).get("time_scale")),
                      "server_coefficients": server_coefficients(header)},
        "coefficients_before": {"alpha_coeffs": info["alpha_coeffs"], "beta_coeffs": info["beta_coeffs"],
                                "latency_model": info["latency_model"]},
        "before": before, "grade_before": before["grade"],
    }
    if not fit:
        return report
    if instances is not None and instances != len(result.state.inst):
        raise ConfigError("--fit", f"the recording's server had {instances} instances (observed.server_models), "
                                   f"the run settings {len(result.state.inst)}: give the server's engine settings "
                                   "(--num-instances, --config)")
    if fit_method == "replay":
        fitted = fit_by_replay(cfg, requests, obs, done, info["alpha_coeffs"], info["beta_coeffs"])
    else:
        engine = cfg.deployment_list()[0].engine
        budget = fitting.StepBudget(int(engine.max_num_batched_tokens), int(engine.long_prefill_token_threshold or 0))
        fitted = fitting.fit_coefficients(requests, obs, step_tolerance_us, given_alpha=info["alpha_coeffs"],
                                          budget=budget)
    # (the fitted set is a blackbox model whatever the config's latency model was)
    after_cfg = as_config(cfg, {"latency_model": "blackbox", "alpha_coeffs": list(fitted.alpha),
                                "beta_coeffs": list(fitted.beta)})
    after_result, _ = simulate_recording(after_cfg, requests, obs)
    after = compare(observed, simulated_latencies(after_result, done, observed["itl_rows"]))
    report["fitted"] = {"alpha_coeffs": list(fitted.alpha), "beta_coeffs": list(fitted.beta)}
    report["fit"] = fitted.details
    report["after"] = after
    report["grade_after"] = after["grade"]
    report["coefficients_set"] = coefficient_entry(info, cfg, fitted.alpha, fitted.beta)
    return report


def coefficient_entry(info: dict, cfg: SimConfig, alpha, beta) -> dict:
    """The fitted set as one ``models:`` entry of a coefficients file
    (configs/defaults.yaml's format): the run's model, GPU, TP and KV blocks."""
    engine = cfg.deployment_list()[0].engine
    return {
        "GPU": str(info["hardware"]),
        "alpha_coeffs": [float(a) for a in alpha],
        "beta_coeffs": [float(b) for b in beta],
        "id": str(info["model"]),
        "tensor_parallelism": int(engine.tp),
        "total_kv_blocks": int(info["total_kv_blocks_per_instance"]),
        "vllm_version": str(cfg.vllm_version or "calibrated"),
    }


def write_coefficients(path: str | Path, entry: dict) -> Path:
    """Write ``{"models": [entry]}`` (the coefficients file format) to ``path``, atomically."""
    text = yaml.safe_dump({"models": [entry]}, sort_keys=True)
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"), "--fit-out")
