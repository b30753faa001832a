"""OpenEvolve evaluator (extra ``blis-fast[openevolve]``; checked against openevolve 0.4.0).

OpenEvolve imports an *evaluation file* and calls ``evaluate(program_path)`` (and, with
cascade evaluation, ``evaluate_stage1``/``evaluate_stage2``) in worker threads.  Ours is
one line (``blis-fast openevolve init DIR`` writes it)::
    from blis_fast.adapters.openevolve import evaluators_for; evaluate, evaluate_stage1, evaluate_stage2 = evaluators_for(__file__)

which binds the scenarios file beside it (``scenarios.yaml``; the environment variable
``BLIS_FAST_SCENARIOS`` names another one -- inherited by OpenEvolve's worker processes).
The module-level ``evaluate``/``evaluate_stage1``/``evaluate_stage2`` read
``BLIS_FAST_SCENARIOS`` only.

A program is a policy bundle (``.yaml``/``.yml``) or a ``.py`` module whose
``get_policy()`` returns one (run in a sandbox with a time limit and a memory cap:
``blis_fast.batch.program``; ``BLIS_FAST_PROGRAM_TIMEOUT_S`` sets its time limit, default
10 s).  Stage 1 parses the program and runs the first scenario of
the file (put a short one first); stage 2 runs them all.  Every result carries
``combined_score`` in [0, 1] (the mean score; OpenEvolve's fitness), the score per
scenario, and every metric of ``FEATURE_METRICS`` (averaged over the scenarios) -- also
when the program fails (then 0), because OpenEvolve drops a result that lacks a feature
dimension, and aborts the run when it is the initial program's.  Feedback goes to the
artifacts as short lines (``feedback``; ``error`` and ``failure_stage`` on failure).
Nothing here raises: a raise would cost OpenEvolve's retries.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any, Callable

from blis_fast.adapters.core import FitnessSet, feedback_text
from blis_fast.errors import BlisFastError, ConfigError
from blis_fast.batch.candidates import load_candidate
from blis_fast.batch.program import MAX_TIMEOUT_S
from blis_fast.config.validate import as_float, as_str, show

MAX_PROGRAM_BYTES = 16 * 2**20  # a program file (policy YAML or Python), as a YAML file's limit

SCENARIOS_ENV = "BLIS_FAST_SCENARIOS"
PROGRAM_TIMEOUT_ENV = "BLIS_FAST_PROGRAM_TIMEOUT_S"  # seconds a .py program may take (default 10)
SIDECAR = "scenarios.yaml"
# raw metrics every result carries (MAP-Elites feature dimensions may name any of them)
FEATURE_METRICS = ("slo_attainment", "goodput_rps", "ttft_p99_ms", "e2e_p99_ms", "utilization_imbalance",
                   "rejected_requests", "preemption_count", "completed_requests", "responses_per_sec")
MAX_ARTIFACT_CHARS = 8000  # of the feedback: well under OpenEvolve's 20 KB prompt limit
_CANDIDATE_CACHE = 256

_lock = threading.Lock()
_fitness: dict[tuple, FitnessSet] = {}
_candidates: dict[str, Any] = {}


def evaluate(program_path: str):
    """All scenarios of ``$BLIS_FAST_SCENARIOS``."""
    return _evaluate(program_path, _env_scenarios(), stage=2)


def evaluate_stage1(program_path: str):
    """Parse the program and run the first scenario of ``$BLIS_FAST_SCENARIOS``."""
    return _evaluate(program_path, _env_scenarios(), stage=1)


def evaluate_stage2(program_path: str):
    """All scenarios of ``$BLIS_FAST_SCENARIOS``."""
    return _evaluate(program_path, _env_scenarios(), stage=2)


def evaluators_for(evaluation_file: str) -> tuple[Callable, Callable, Callable]:
    """(evaluate, evaluate_stage1, evaluate_stage2) on the scenarios file beside
    ``evaluation_file`` (``$BLIS_FAST_SCENARIOS`` when set)."""
    if not isinstance(evaluation_file, (str, os.PathLike)):
        raise ConfigError("evaluation_file", f"must be the evaluator file's path (__file__), "
                                             f"got {show(evaluation_file)}")
    sidecar = Path(as_str(os.fspath(evaluation_file), "evaluation_file")).resolve().with_name(SIDECAR)

    def scenarios() -> Path:
        env = os.environ.get(SCENARIOS_ENV)
        return Path(env) if env else sidecar

    def evaluate(program_path: str):
        return _evaluate(program_path, scenarios(), stage=2)

    def evaluate_stage1(program_path: str):
        return _evaluate(program_path, scenarios(), stage=1)

    def evaluate_stage2(program_path: str):
        return _evaluate(program_path, scenarios(), stage=2)

    return evaluate, evaluate_stage1, evaluate_stage2


def _env_scenarios() -> Path | None:
    env = os.environ.get(SCENARIOS_ENV)
    return Path(env) if env else None


def fitness_for(path: Path) -> FitnessSet:
    """The scenarios of ``path``, prepared once per process (again if the file changes)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    with _lock:
        if key not in _fitness:
            _fitness[key] = FitnessSet(path)
        return _fitness[key]


def _evaluate(program_path: str, scenarios: Path | None, stage: int):
    """The OpenEvolve result (EvaluationResult when openevolve is importable, else the
    metrics dict) of one program at one stage; never raises."""
    try:
        if scenarios is None:
            return _failure(None, "setup", f"no scenarios: set {SCENARIOS_ENV} to a scenarios file "
                                           "(docs/batch.md) or use evaluators_for(__file__) with a scenarios.yaml")
        try:
            fitness = fitness_for(scenarios)
        except OSError as exc:
            return _failure(None, "setup", f"cannot read the scenarios file {scenarios}: {exc.strerror or exc}")

        if not isinstance(program_path, (str, os.PathLike)) or not str(program_path) or "\0" in str(program_path):
            return _failure(fitness, f"stage{stage}", f"program_path must be the path of a program file, got "
                                                      f"{show(program_path)}")
        try:
            cand = _candidate(program_path)
        except OSError as exc:
            return _failure(fitness, f"stage{stage}", f"cannot read the program: {exc.strerror or exc}")
        except BlisFastError as exc:  # the program, not the setup
            return _failure(fitness, f"stage{stage}", str(exc))
        names = fitness.names[:1] if stage == 1 else fitness.names
        results = fitness.run(cand, names, summarize=True)
        return _result(fitness, names, results, stage)
    except BlisFastError as exc:  # a bad scenarios file: the same for every program
        return _failure(None, "setup", str(exc))
    except Exception as exc:  # noqa: BLE001 -- never raise into OpenEvolve (it would retry)
        return _failure(None, f"stage{stage}", f"{type(exc).__name__}: {exc} (a blis-fast bug; please report)")


def _candidate(program_path: str):
    """The Candidate of a program file, cached by content (stage 2 reuses stage 1's)."""
    p = Path(program_path)
    with open(p, "rb") as f:
        data = f.read(MAX_PROGRAM_BYTES + 1)  # bounded: the file is the LLM's output
    if len(data) > MAX_PROGRAM_BYTES:
        raise ConfigError("program", f"is larger than {MAX_PROGRAM_BYTES} bytes (the size of a YAML file's limit)")
    key = hashlib.sha256(p.suffix.encode() + b"\0" + data).hexdigest()
    with _lock:
        if key in _candidates:
            return _candidates[key]
    cand = load_candidate(p, "program", program_timeout())
    with _lock:
        if len(_candidates) >= _CANDIDATE_CACHE:
            _candidates.pop(next(iter(_candidates)))
        _candidates[key] = cand
    return cand


def program_timeout() -> float | None:
    """``$BLIS_FAST_PROGRAM_TIMEOUT_S`` (ConfigError naming it when not a number in (0, 3600])."""
    text = os.environ.get(PROGRAM_TIMEOUT_ENV)
    return None if not text else as_float(text, PROGRAM_TIMEOUT_ENV, 0, MAX_TIMEOUT_S, lo_open=True)


def _result(fitness: FitnessSet, names: list[str], results: list, stage: int):
    n = len(results)
    metrics: dict[str, float] = {"combined_score": sum(float(ev.score) for ev in results) / n}
    for name, ev in zip(names, results):
        metrics[f"score.{name}"] = float(ev.score)
    for m in FEATURE_METRICS:
        metrics[m] = sum(float(ev.metrics.get(m, 0.0)) for ev in results) / n
    lines = [feedback_text(ev, fitness.scenario(name)) for name, ev in zip(names, results)]
    artifacts = {"feedback": _clip("\n\n".join(lines))}
    bad = [ev for ev in results if ev.status != "ok"]
    if bad:
        artifacts["error"] = _clip(f"{bad[0].status}: {bad[0].message}", 1000)
        artifacts["failure_stage"] = f"stage{stage}"
    return _wrap(metrics, artifacts)


def _failure(fitness: FitnessSet | None, stage: str, message: str):
    metrics = {"combined_score": 0.0, **{m: 0.0 for m in FEATURE_METRICS}}
    if fitness is not None:
        metrics.update({f"score.{n}": 0.0 for n in fitness.names})
    return _wrap(metrics, {"error": _clip(message, 1000), "failure_stage": stage, "feedback": _clip(message)})


def _clip(text: str, limit: int = MAX_ARTIFACT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 20] + "\n... (truncated)"


def _wrap(metrics: dict, artifacts: dict):
    try:
        from openevolve.evaluation_result import EvaluationResult  # deferred: openevolve
    except ImportError:  # OpenEvolve's legacy contract: the metrics alone
        return dict(metrics)
    return EvaluationResult(metrics=metrics, artifacts=artifacts)
