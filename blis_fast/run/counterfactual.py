"""Exact counterfactual replay of routing decisions: "what if request r had gone to
instance j instead", answered by simulating it.

A run is deterministic, so the run with only decision r changed is the original run with
``settings.forced_request = r, forced_instance = j`` (the kernel routes r to j and
everything else by the policy).  Replays resume from a copy of the state taken just
before r's decision time instead of starting over: one pass runs the workload up to each
replayed decision in time order (``RunSession.run_until``, run/session.py), and each alternative continues a
copy from there to the end, on a thread pool as far as cores and the memory budget allow.  The replayed run equals a full run with that decision forced
(tests/run/test_counterfactual.py).

The K decisions replayed are those with the highest positive estimated regret
(``blis_fast.results.regret``), ties to the lower request id; each is replayed under every
traced alternative (up to ``N_TRACE_ALTERNATIVES``).
"""

from __future__ import annotations

import numpy as np
from concurrent.futures import ThreadPoolExecutor

from blis_fast.run.session import RunSession
from blis_fast_kernels.schema import TraceLevel
from blis_fast.run.runner import default_workers
from blis_fast.config import memory


def _ms(us: int) -> float | None:
    return None if us < 0 else us / 1e3


def _outcome(result, r: int, objectives) -> dict:
    from blis_fast.results.objectives import score  # deferred: blis_fast_kernels.native

    lat = result.latencies
    total, vec = score(result, objectives)
    return {"instance": int(result.state.reqs["instance"][r]), "ttft_ms": _ms(int(lat["ttft_us"][r])),
            "e2e_ms": _ms(int(lat["e2e_us"][r])), "score": total, "objectives": vec}


def forced_session(result, request: int, instance: int, trace_level: int = TraceLevel.NONE) -> RunSession:
    """A fresh session of ``result``'s run with request ``request`` routed to ``instance``."""
    return RunSession(result.setup, result.workload, trace_level=trace_level).prepare().force_routing(request, instance)


def worst_decisions(result, k: int) -> np.ndarray:
    """Rows of the routing log with the ``k`` highest estimated regrets (> 0 only: a
    decision the model finds no better alternative for is not replayed), highest first,
    ties to the lower request id."""
    from blis_fast.results.regret import estimated_regret, routing_log  # deferred: blis_fast_kernels.native

    log = routing_log(result)
    regret, _best = estimated_regret(result, log)
    order = np.lexsort((log["request"], -regret))
    return order[regret[order] > 0][:max(k, 0)]


def replay_workers(session: RunSession, wanted: int) -> int:
    """Replays run at once: up to the cores this process may use and ``wanted``, and as
    many state copies as the memory budget in force still holds (ConfigError naming
    simulation.max_memory if not even one fits next to the pass's own state)."""
    per_copy = session.state_bytes()
    budget = memory.current_budget()
    room = int((budget.limit - budget.used) // max(per_copy, 1)) - 1
    workers = max(1, min(default_workers(), wanted, room))
    memory.check((workers + 1) * per_copy, f"counterfactual replays ({workers} state copies of "
                                           f"{memory.fmt_bytes(per_copy)} at once)",
                 "lower simulation.counterfactual_k or make the workload smaller")
    return workers


def replays(result, rows):
    """Yield (row, alternative instance, Result of the replay) for every traced alternative
    of the routing-log rows ``rows``, in decision-time order: one pass runs the workload to
    each decision, and a copy of the state continues from there under each alternative.
    The copies run on a thread pool (the kernels release the GIL) as far as cores and the
    memory budget allow; the results do not depend on it."""
    from blis_fast.results.regret import routing_log  # deferred: blis_fast_kernels.native

    log = routing_log(result)
    session = RunSession(result.setup, result.workload, trace_level=TraceLevel.NONE).prepare()
    tasks = []  # (row, alternative)
    for row in sorted(rows, key=lambda j: (int(log["time_us"][j]), int(log["request"][j]))):
        tasks += [(row, j) for j in log["alt_instance"][row].tolist() if j >= 0]
    if not tasks:
        return
    workers = replay_workers(session, len(tasks))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending = []  # futures in task order, at most ``workers`` ahead of the consumer
        for row, j in tasks:
            # every event before the decision's time, none at it (a no-op for the same row)
            session.run_until(int(log["time_us"][row]) - 1)
            replay = session.copy().force_routing(log["request"][row], j)
            pending.append((row, j, pool.submit(replay.run)))
            if len(pending) > workers:
                r0, j0, fut = pending.pop(0)
                yield r0, j0, fut.result().finish()
        for r0, j0, fut in pending:
            yield r0, j0, fut.result().finish()


def replay_worst_decisions(result, k: int, objectives=None) -> list[dict]:
    """Replay the ``k`` highest-regret routing decisions of a traced ``result`` under each
    traced alternative: per decision {request, time_us, chosen_instance,
    estimated_regret_ms, baseline: outcome, alternatives: [outcome, ...]}, where an outcome
    is {instance, ttft_ms, e2e_ms (None if it never got there), score, objectives} and the
    score is under ``objectives`` (default: the config's).  Highest estimated regret first."""
    from blis_fast.results.objectives import parse_objectives  # deferred: blis_fast_kernels.native
    from blis_fast.results.regret import estimated_regret, routing_log  # deferred: blis_fast_kernels.native

    log = routing_log(result)
    picked = worst_decisions(result, k).tolist()
    if not picked:
        return []
    objs = parse_objectives(objectives if objectives is not None else result.setup.config.objectives)
    regret, _best = estimated_regret(result, log)
    reports = {}
    for row in picked:
        r = int(log["request"][row])
        reports[row] = {"request": r, "time_us": int(log["time_us"][row]),
                        "chosen_instance": int(log["chosen_instance"][row]),
                        "estimated_regret_ms": float(regret[row]) / 1e3, "baseline": _outcome(result, r, objs),
                        "alternatives": []}
    for row, _j, replayed in replays(result, picked):
        reports[row]["alternatives"].append(_outcome(replayed, reports[row]["request"], objs))
    return [reports[row] for row in picked]


__all__ = ["forced_session", "replay_workers", "replay_worst_decisions", "replays", "worst_decisions"]
