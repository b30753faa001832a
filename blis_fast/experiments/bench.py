"""The standard benchmark scenarios and ``blis-fast bench``.

Three figures, measured separately (each is a cost a user sees, and they differ by orders
of magnitude):

* **warm throughput** -- seconds of ``RunSession.run`` once compiled, per scenario: the
  workload is generated once (untimed), one untimed warm-up run is checked for
  correctness (every request completed, status OK), then ``repeats`` timed runs each on a
  fresh state (``RunSession.prepare`` is untimed; the run mutates the state).  Best and
  median kernel seconds, simulated requests/s and engine steps/s (both from the best).
* **floor** -- in the same process, per scenario, seconds of a *minimal
  continuous-batching loop* (``blis_fast_kernels.engine.minimal.run_minimal``: round-robin
  instances, a FIFO queue, max_num_seqs and the token budget, chunked prefill then one
  token per decode per step, the same blackbox step time; no events, KV cache, policies
  or logs) on the scenario's workload, timed like the kernel (one untimed warm-up, best
  of ``repeats``).  ``x floor`` = kernel best / floor best: what the full model costs
  over the least any engine simulator must do.
* **first run** -- wall time of ``blis-fast run --num-requests 100`` in a fresh process
  with an empty ``NUMBA_CACHE_DIR``: the first run after installing.  With the kernels
  compiled ahead of time at install (``blis_fast_kernels.native``) nothing compiles;
  otherwise every kernel JIT-compiles here.
* **cached start-up** -- the same command again (best of 3), plus the time of the first
  ``simulate()`` call inside a fresh process next to a second, warm call.
* **JIT fallback** -- when the compiled kernels are installed, the first two figures
  again with ``BLIS_FAST_KERNELS=jit`` (what a run costs where they could not be built:
  the cold compile, then numba's start-up from its cache).

Start-up is measured with ``sys.executable -m blis_fast.cli`` so it needs no console
script on PATH.  ``calibrate()`` re-derives the arrival rates of the scenario table.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from importlib.metadata import PackageNotFoundError, version

from blis_fast.config.validate import as_int, as_list, as_str
from blis_fast.errors import BlisFastError, ConfigError
from blis_fast.experiments.scenarios import (BASE, BASELINES, CALIBRATION_BURST, FIXED_RATE, NOT_DEFAULT,
                                           SATURATION_RPS_PER_INSTANCE, SCENARIOS, SEED, TARGET_LOAD, scenario_overrides,
                                           text_table)
from blis_fast.version import __version__
from blis_fast.experiments.agents_bench import AGENT_SCENARIOS, bench_agents, format_agents, relate
from blis_fast.experiments.serve_bench import SERVE_SCENARIOS, bench_live, format_live
from blis_fast.experiments.batch_bench import BATCH_SCENARIOS, bench_batch, format_batch
from blis_fast_kernels.schema import RequestState

MAX_REPEATS = 1000  # timed repetitions per scenario (--repeats is in [1, MAX_REPEATS])

# summary fields reported beside the timings, for sanity (a fast wrong run is no result)
# the states a request of a scenario may end in (only a run with deadlines has the last two)
ENDED_STATES = (RequestState.COMPLETED, RequestState.TIMED_OUT, RequestState.SHED)
SANITY_METRICS = ("completed_requests", "ttft_p99_ms", "e2e_p99_ms", "prefix_cache_hit_rate",
                  "mean_batch_size", "busy_fraction", "preemption_count", "vllm_estimated_duration_s")

STARTUP_ARGS = ("run", "--num-requests", "100")
_FIRST_CALL_SCRIPT = """
import json, time
t0 = time.perf_counter()
from blis_fast.run.api import simulate
t1 = time.perf_counter()
simulate(num_requests=100)
t2 = time.perf_counter()
simulate(num_requests=100)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "first_call_s": t2 - t1, "second_call_s": t3 - t2}))
"""


def calibrate(burst: int = CALIBRATION_BURST, load: float = TARGET_LOAD, seed: int = SEED) -> dict:
    """Re-measure the saturation throughput of one instance and the scenario rates.

    Runs a ``burst``-request burst of the BASE workload on one instance and returns the
    steady-state completion rate (10th..90th percentile completions), the whole-burst
    completed/duration figure, and ``rates`` = round(load x steady x num_instances, 1) per
    scenario -- the values to paste into SCENARIOS / SATURATION_RPS_PER_INSTANCE.
    """
    from blis_fast.config.sim import build_config  # deferred: yaml
    from blis_fast.run import RunSession, build_workload, resolve  # deferred: yaml

    cfg = build_config({}, {**BASE, "seed": seed, "num_requests": burst, "num_instances": 1,
                            "rate": 1e6})  # mean gap 1 µs: everything arrives at once
    setup = resolve(cfg)
    state = RunSession(setup, build_workload(cfg)).run().state
    reqs = state.reqs
    done = reqs["state"] == RequestState.COMPLETED
    if not done.all():
        raise BlisFastError(f"calibration burst: only {int(done.sum())} of {burst} requests completed")
    t = np.sort(reqs["last_token_us"][done])
    lo, hi = int(0.1 * len(t)), int(0.9 * len(t))
    steady = (hi - lo) / ((t[hi] - t[lo]) / 1e6)
    duration_s = float(state.inst["last_step_end_us"].max()) / 1e6
    return {
        "burst_requests": burst,
        "seed": seed,
        "load": load,
        "saturation_rps_per_instance": round(float(steady), 2),
        "completed_per_duration_rps": round(burst / duration_s, 2),
        "burst_duration_s": duration_s,
        "rates": {name: round(load * float(steady) * row["num_instances"], 1) for name, row in SCENARIOS.items()
                  if name not in FIXED_RATE},
    }


def machine_info() -> dict:
    """Where the figures were measured, and with which kernels."""
    from blis_fast_kernels import native  # deferred: blis_fast_kernels.native

    try:
        numba_version = version("numba")  # (without importing numba)
    except PackageNotFoundError:
        numba_version = None

    info = {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba_version,
        "blis_fast": __version__,
        "kernels": native.status(),
    }
    try:
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not on every platform
        info["load_average"] = None
    return info


def bench_scenario(name: str, repeats: int = 3) -> dict:
    """Warm kernel timings and sanity metrics of one scenario (see the module docstring)."""
    from blis_fast.config.sim import build_config  # deferred: yaml
    from blis_fast.run import RunSession, build_workload, resolve  # deferred: yaml
    from blis_fast.studies.sweep import offered_rate  # deferred: yaml

    repeats = as_int(repeats, "--repeats", 1, MAX_REPEATS)
    overrides = scenario_overrides(name)
    cfg = build_config({}, overrides)
    setup = resolve(cfg)
    wl = build_workload(cfg)
    n = len(wl)

    from blis_fast.run.api import trace_level_code  # deferred: yaml

    level = trace_level_code(cfg)
    # untimed warm-up (compiles or loads the kernels) doubling as the correctness check
    warm = RunSession(setup, wl, trace_level=level).run()  # raises SimulationError on a bad status
    ref = warm.state
    # every request completed -- or, with deadlines, timed out or was shed on its last attempt
    # (docs/semantics.md §16) -- (a P/D run's legs follow)
    ended = np.isin(ref.reqs["state"][:n], ENDED_STATES)
    if not ended.all():
        raise BlisFastError(f"scenario {name}: only {int(ended.sum())} of {n} requests completed or ended by "
                            "their deadline")
    steps, events = int(ref.loop[0]["steps"]), int(ref.loop[0]["events"])
    cluster = warm.finish().cluster

    times = []
    for _ in range(repeats):
        session = RunSession(setup, wl, trace_level=level).prepare()
        state = session.run().state
        times.append(session.kernel_s)
        if int(state.loop[0]["steps"]) != steps or int(state.loop[0]["events"]) != events:
            raise BlisFastError(f"scenario {name}: a repeat differs from the warm-up run (not deterministic)")
    best = min(times)
    floor = bench_floor(setup, wl, repeats)
    return {
        "name": name,
        "num_requests": n,
        "num_instances": sum(d.instances for d in setup.deployments),
        "rate": float(overrides["rate"]) if "rate" in overrides else offered_rate(cfg),
        "overrides": overrides,
        "repeats": repeats,
        "kernel_times_s": times,
        "kernel_best_s": best,
        "kernel_median_s": statistics.median(times),
        "requests_per_s": n / best,
        "steps_per_s": steps / best,
        "events": events,
        "steps": steps,
        "metrics": {k: cluster[k] for k in SANITY_METRICS},
        "floor": floor,
        "x_floor": best / floor["best_s"] if floor and floor["best_s"] > 0 else None,
    }


def floor_inputs(setup, wl) -> dict:
    """The arguments of ``blis_fast_kernels.engine.minimal.run_minimal`` for a scenario: the requests
    with a known arrival time in arrival order (closed-loop followers, whose arrival is
    decided during the run, are left out), the engine limits and the β coefficients."""
    arrival = np.asarray(wl.arrival_us, np.int64)
    rows = np.flatnonzero(arrival >= 0)
    rows = rows[np.argsort(arrival[rows], kind="stable")]
    eng = setup.config.engine
    beta = [float(x) for x in setup.latency.beta]
    return {
        "arrival_us": np.ascontiguousarray(arrival[rows]),
        "prompt_len": np.ascontiguousarray(np.asarray(wl.prompt_len, np.int64)[rows]),
        "output_len": np.ascontiguousarray(np.asarray(wl.output_len, np.int64)[rows]),
        "num_instances": int(setup.config.deployment.num_instances),
        "max_num_seqs": int(eng.max_num_seqs),
        "token_budget": int(eng.max_num_batched_tokens),
        "beta0": beta[0], "beta1": beta[1], "beta2": beta[2],
    }


def run_floor(inputs: dict) -> tuple[int, np.ndarray, np.ndarray]:
    """Run the minimal loop once: (steps, first token µs, last token µs) per request of
    ``inputs`` (arrival order)."""
    from blis_fast_kernels.native import run_minimal  # deferred: blis_fast_kernels.native -- compiled like the kernel it is compared with

    n = inputs["arrival_us"].shape[0]
    first, last = np.empty(n, np.int64), np.empty(n, np.int64)
    steps = run_minimal(inputs["arrival_us"], inputs["prompt_len"], inputs["output_len"], inputs["num_instances"],
                        inputs["max_num_seqs"], inputs["token_budget"], inputs["beta0"], inputs["beta1"],
                        inputs["beta2"], first, last)
    return int(steps), first, last


def bench_floor(setup, wl, repeats: int = 3) -> dict | None:
    """Timings of the minimal continuous-batching loop on a scenario's workload (see the
    module docstring); None unless the latency model is blackbox."""
    if setup.latency.kind != "blackbox":
        return None
    inputs = floor_inputs(setup, wl)
    n = inputs["arrival_us"].shape[0]
    steps, _, last = run_floor(inputs)  # untimed warm-up: compiles or loads the kernel
    if int((last >= 0).sum()) != n:
        raise BlisFastError(f"floor: only {int((last >= 0).sum())} of {n} requests completed")
    from blis_fast_kernels.native import run_minimal  # deferred: blis_fast_kernels.native

    first, last = np.empty(n, np.int64), np.empty(n, np.int64)
    args = [inputs[k] for k in ("arrival_us", "prompt_len", "output_len", "num_instances", "max_num_seqs",
                                "token_budget", "beta0", "beta1", "beta2")]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run_minimal(*args, first, last)
        times.append(time.perf_counter() - t0)
    best = min(times)
    return {"times_s": times, "best_s": best, "median_s": statistics.median(times), "steps": steps,
            "requests": n, "steps_per_s": steps / best}


def _run_timed(args: list[str], env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(args, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise BlisFastError(f"start-up measurement failed ({' '.join(args[1:3])} ...): {last}")
    return wall, proc.stdout


def bench_startup(cached_repeats: int = 3) -> dict:
    """First run after install and cached start-up, each in a fresh process, and the same
    for the JIT fallback when the compiled kernels are in use (see the module docstring)."""
    from blis_fast_kernels import native  # deferred: blis_fast_kernels.native

    cmd = [sys.executable, "-m", "blis_fast.cli", *STARTUP_ARGS]
    compiled = native.mode() != "jit" and native.compiled_module() is not None
    out: dict = {"command": "python -m blis_fast.cli " + " ".join(STARTUP_ARGS), "kernels": native.status()}
    with tempfile.TemporaryDirectory(prefix="blis-fast-bench-cache-") as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        env.pop("NUMBA_DISABLE_JIT", None)
        out["cold_compile_s"], _ = _run_timed(cmd, env)
        cached = [_run_timed(cmd, env)[0] for _ in range(cached_repeats)]
        out["cached_startup_s"], out["cached_startup_times_s"] = min(cached), cached
        _, calls = _run_timed([sys.executable, "-c", _FIRST_CALL_SCRIPT], env)
        out.update(json.loads(calls.strip().splitlines()[-1]))
        if compiled:
            env["BLIS_FAST_KERNELS"] = "jit"
            out["jit_cold_compile_s"], _ = _run_timed(cmd, env)
            out["jit_cached_startup_s"] = min(_run_timed(cmd, env)[0] for _ in range(cached_repeats))
    return out


def run_bench(scenarios: list[str] | None = None, repeats: int = 3, startup: bool = True,
              progress=None) -> dict:
    """Benchmark the named scenarios (default: all but ``NOT_DEFAULT`` and batch-100k) and
    optionally start-up; JSON-ready dict.
    ``progress(phase, done, total, unit)`` (as ``blis_fast.run.api.run_config`` takes it) is
    told each step as it starts."""
    repeats = as_int(repeats, "--repeats", 1, MAX_REPEATS)
    if scenarios is None:
        names = [n for n in SCENARIOS if n not in NOT_DEFAULT] + ["batch-10k", *AGENT_SCENARIOS]
    else:
        names = [as_str(s, "--scenarios", max_len=64).strip()
                 for s in as_list(scenarios, "--scenarios", max_len=len(SCENARIOS) + len(BATCH_SCENARIOS) + len(AGENT_SCENARIOS)
                                 + len(SERVE_SCENARIOS) + 8)]
        names = list(dict.fromkeys(n for n in names if n))
        if not names:
            raise ConfigError("--scenarios", "names no scenario")
    batches = [n for n in names if n in BATCH_SCENARIOS]
    agents = [n for n in names if n in AGENT_SCENARIOS]
    live = [n for n in names if n in SERVE_SCENARIOS]
    names = [n for n in names if n not in BATCH_SCENARIOS and n not in AGENT_SCENARIOS and n not in SERVE_SCENARIOS]
    for name in names:
        scenario_overrides(name)  # fail fast on a typo, before minutes of measuring
    total = len(names) + len(batches) + len(agents) + len(live) + int(startup)
    done = 0

    def step(label: str, measure, *args):
        nonlocal done
        if progress is not None:
            progress(f"bench: {label}", done, total, "steps")
        out = measure(*args)
        done += 1
        return out

    report = {
        "machine": machine_info(),
        "settings": {"seed": SEED, "repeats": repeats, "target_load": TARGET_LOAD,
                     "saturation_rps_per_instance": SATURATION_RPS_PER_INSTANCE, "base": dict(BASE)},
        "scenarios": [step(name, bench_scenario, name, repeats) for name in names],
        "batch": [step(name, bench_batch, name, None, None, repeats) for name in batches],
        "agents": [step(name, bench_agents, name, repeats) for name in agents],
        "live": [step(name, bench_live, name, repeats) for name in live],
        "startup": step("start-up (fresh processes)", bench_startup) if startup else None,
    }
    relate(report["agents"])
    best = {r["name"]: r["kernel_best_s"] for r in report["scenarios"]}
    for r in report["scenarios"]:
        base = BASELINES.get(r["name"])
        if base in best and best[base] > 0:
            r["relative_to"] = {"scenario": base, "ratio": round(r["kernel_best_s"] / best[base], 3)}
    try:
        report["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        report["machine"]["load_average_after"] = None
    return report


def _si(x: float) -> str:
    """3 significant digits with a k/M suffix (for rates)."""
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def format_report(report: dict) -> str:
    """The report as aligned plain-text tables."""
    m = report["machine"]
    out = [
        f"blis-fast {m.get('blis_fast')}  python {m['python']}  numpy {m['numpy']}  numba {m['numba']}",
        f"{m['platform']}  cpus {m['cpu_count']}  load avg {m.get('load_average')} -> {m.get('load_average_after')}",
        f"kernels: {m.get('kernels', '?')}",
    ]
    s = report.get("settings", {})
    if s:
        out.append(f"workload {s.get('base')}  load {s.get('target_load')} of "
                   f"{s.get('saturation_rps_per_instance')} req/s per instance  repeats {s.get('repeats')}")
    sc = report["scenarios"]
    if sc:
        out += ["", "warm kernel (compiled; best of repeats, fresh state each run)"]
        out += text_table(
            ["scenario", "requests", "inst", "rate/s", "best s", "median s", "sim req/s", "steps/s", "events", "steps",
             "x base"],
            [[r["name"], str(r["num_requests"]), str(r["num_instances"]), f"{r['rate']:g}",
              f"{r['kernel_best_s']:.4f}", f"{r['kernel_median_s']:.4f}", _si(r["requests_per_s"]),
              _si(r["steps_per_s"]), str(r["events"]), str(r["steps"]),
              f"{r['relative_to']['ratio']:.2f} ({r['relative_to']['scenario']})" if r.get("relative_to") else "-"]
             for r in sc],
        )
        out += ["", "sanity (simulated results)"]
        out += text_table(
            ["scenario", "completed", "ttft p99 ms", "e2e p99 ms", "prefix hit", "mean batch", "busy", "preempt", "sim s"],
            [[r["name"], str(r["metrics"]["completed_requests"]), f"{r['metrics']['ttft_p99_ms']:.1f}",
              f"{r['metrics']['e2e_p99_ms']:.1f}", f"{r['metrics']['prefix_cache_hit_rate']:.3f}",
              f"{r['metrics']['mean_batch_size']:.1f}", f"{r['metrics']['busy_fraction']:.3f}",
              str(r["metrics"]["preemption_count"]), f"{r['metrics']['vllm_estimated_duration_s']:.1f}"]
             for r in sc],
        )
    floors = [r for r in sc if r.get("floor")]
    if floors:
        out += ["", "floor (minimal continuous-batching loop: same workload, limits and step time; "
                    "no events, KV cache or policies)"]
        out += text_table(
            ["scenario", "floor best s", "floor steps", "floor steps/s", "kernel best s", "x floor"],
            [[r["name"], f"{r['floor']['best_s']:.4f}", str(r["floor"]["steps"]), _si(r["floor"]["steps_per_s"]),
              f"{r['kernel_best_s']:.4f}", f"{r['x_floor']:.1f}"]
             for r in floors],
        )
    if report.get("batch"):
        out += format_batch(report["batch"])
    if report.get("agents"):
        out += format_agents(report["agents"])
    if report.get("live"):
        out += format_live(report["live"])
    st = report.get("startup")
    if st:
        out += ["", f"start-up (fresh processes: {st['command']}; kernels: {st.get('kernels', '?')})"]
        rows = [
            ["first run: cold compile (empty NUMBA_CACHE_DIR)", f"{st['cold_compile_s']:.2f}"],
            ["cached start-up (best of 3)", f"{st['cached_startup_s']:.2f}"],
        ]
        if "jit_cold_compile_s" in st:
            rows += [["JIT fallback: cold compile (BLIS_FAST_KERNELS=jit)", f"{st['jit_cold_compile_s']:.2f}"],
                     ["JIT fallback: cached start-up (best of 3)", f"{st['jit_cached_startup_s']:.2f}"]]
        for key, label in (("import_s", "import blis_fast.run"),
                           ("first_call_s", "first simulate() call, cached"),
                           ("second_call_s", "second simulate() call")):
            if key in st:
                rows.append([label, f"{st[key]:.3f}"])
        out += text_table(["figure", "seconds"], rows)
    return "\n".join(out)
