"""``blis-fast bench`` live-engine scenario: what serving costs beyond a batch run.

    live-10k   10K requests (random token ids, half of them behind a shared 96-token
               prefix) arriving at 150 req/s on 4 instances, injected one by one into the
               live engine (blis_fast/serve/engine.py) and run event time by event time,
               as ``blis-fast serve``'s driver does, without the wall clock and HTTP

Untimed: the workload is generated, one drive loads the kernels and checks that it gives
the batch run's first and last token times.  Timed: ``repeats`` drives (engine creation,
every submit, advance and release) and ``repeats`` batch runs of the same workload (the
event loop only: ``RunSession.run``); "x base" is the best drive over the best batch loop.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from blis_fast.errors import BlisFastError
from blis_fast.experiments.scenarios import text_table

SERVE_SCENARIOS = {"live-10k": {"n": 10_000, "rate": 150.0, "instances": 4}}


def live_requests(n: int, rate: float, seed: int = 7) -> list[tuple[int, np.ndarray, int]]:
    """(arrival µs, prompt ids, output tokens) of n Poisson arrivals at ``rate`` req/s."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1e6 / rate, n)).astype(np.int64)
    prefix = rng.integers(0, 32_000, 96)
    lengths = np.clip(rng.lognormal(5.5, 0.6, n), 1, 3000).astype(np.int64)
    outputs = np.clip(rng.lognormal(4.5, 0.6, n), 1, 1000).astype(np.int64)
    out = []
    for k in range(n):
        body = rng.integers(0, 32_000, int(lengths[k]))
        out.append((int(arrivals[k]), np.concatenate([prefix, body]) if k % 2 else body, int(outputs[k])))
    return out


def live_workload(requests, block_size: int):
    """The Workload of ``requests`` (prompt keys hashed from their ids, as the server does)."""
    from blis_fast.workload.workload import Workload  # deferred: the kernels

    ids = np.concatenate([r[1] for r in requests])
    offsets = np.concatenate([[0], np.cumsum([len(r[1]) for r in requests])]).astype(np.int64)
    return Workload.from_tokens(np.array([r[0] for r in requests], np.int64), ids, offsets,
                                np.array([r[2] for r in requests], np.int64), block_size,
                                content_seed=np.arange(1, len(requests) + 1, dtype=np.int64))


def drive(setup, wl) -> tuple[list, int]:
    """Run ``wl`` through a live engine as the server's driver would (``replay_live``):
    (each request's token times, engine steps)."""
    from blis_fast.serve.engine import replay_live  # deferred: the kernels

    replay = replay_live(setup, wl, record_steps=True)
    return replay.tokens, len(replay.steps)


def bench_live(name: str, repeats: int = 3) -> dict:
    """Timings of one live-engine scenario (module docstring)."""
    from blis_fast.run.api import as_config  # deferred: yaml
    from blis_fast.run.resolve import resolve  # deferred: the shipped data
    from blis_fast.run.session import RunSession  # deferred: the kernels
    spec = SERVE_SCENARIOS[name]
    setup = resolve(as_config(None, {"num_instances": spec["instances"]}))
    reqs = live_requests(spec["n"], spec["rate"])
    wl = live_workload(reqs, int(setup.config.engine.block_size))
    tokens, steps = drive(setup, wl)
    batch = RunSession(setup, wl, event_skipping=False).run().state.reqs
    firsts = np.array([tokens[j][0] for j in range(len(reqs))])
    lasts = np.array([tokens[j][-1] for j in range(len(reqs))])
    if not (np.array_equal(firsts, batch["first_token_us"]) and np.array_equal(lasts, batch["last_token_us"])):
        raise BlisFastError(f"scenario {name}: the live engine's token times differ from the batch run's")
    drives, loops = [], []
    for _ in range(max(1, repeats)):
        started = time.perf_counter()
        drive(setup, wl)
        drives.append(time.perf_counter() - started)
        session = RunSession(setup, wl, event_skipping=False).prepare()
        started = time.perf_counter()
        session.run()
        loops.append(time.perf_counter() - started)
    return {"name": name, "requests": len(reqs), "instances": spec["instances"], "steps": steps,
            "drive_best_s": min(drives), "drive_median_s": statistics.median(drives),
            "batch_loop_best_s": min(loops), "x_base": min(drives) / min(loops),
            "tokens": int(sum(len(t) for t in tokens.values()))}


def format_live(rows: list[dict]) -> list[str]:
    """The live-engine table of ``blis-fast bench``."""
    if not rows:
        return []
    header = ["scenario", "requests", "inst", "steps", "tokens", "drive best s", "drive median s",
              "batch loop s", "x batch"]
    body = [[r["name"], str(r["requests"]), str(r["instances"]), str(r["steps"]), str(r["tokens"]),
             f"{r['drive_best_s']:.3f}", f"{r['drive_median_s']:.3f}", f"{r['batch_loop_best_s']:.3f}",
             f"{r['x_base']:.1f}"] for r in rows]
    return ["", "live engine (blis-fast serve's driver without the clock and HTTP; x batch: over the batch "
                "run's event loop)", *text_table(header, body)]
