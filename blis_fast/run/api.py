"""``simulate()``, the public entry point of one run:

    resolve (model, GPU, latency model, KV blocks) -> build the workload -> allocate the
    state (run.tables) -> the event loop (run.runner) -> Result (blis_fast.results)

Numba is imported only when a run actually starts, so the CLI's ``--help`` and config
validation stay instant.
"""

from __future__ import annotations

from blis_fast.config.sim import SimConfig, build_config
from blis_fast.run.resolve import build_workload, resolve
from blis_fast.run.runner import run_to_end
from blis_fast.run.tables import build_state
from blis_fast.workload import Workload


def simulate(config: SimConfig | dict | None = None, workload: Workload | None = None, **overrides):
    """Simulate one run and return a :class:`blis_fast.results.Result`.

    ``config`` is a SimConfig, a dict shaped like the YAML file, or None (defaults);
    ``overrides`` are flat setting names as on the CLI (``num_instances=4``, ``rate=20``).
    ``workload`` replaces the one the config describes (it must use the engine's block size);
    a string is taken as the workload type (``workload="chatbot"``).
    """
    from blis_fast.results.result import Result

    if isinstance(workload, str):  # the flat setting ``workload="chatbot"``, not a Workload
        overrides["workload"] = workload
        workload = None
    if isinstance(config, SimConfig):
        cfg = build_config(config.to_dict(), overrides) if overrides else config
    else:
        cfg = build_config(config or {}, overrides)
    setup = resolve(cfg)
    wl = workload if workload is not None else build_workload(cfg)
    state = run_to_end(build_state(setup, wl))
    return Result(setup, wl, state)
