"""``simulate()``, the public entry point of one run:
    resolve (model, GPU, latency model, KV blocks) -> check the expected size against the
    memory budget -> build the workload -> a RunSession (run.session: the state, the event
    loop) -> Result (blis_fast.results)

Numba is imported only when a run actually starts, so the CLI's ``--help`` and config
validation stay instant.  Everything a run allocates is charged to its memory budget
(``simulation.max_memory``, blis_fast.config.memory) before it is allocated.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from blis_fast.config import effective, memory
from blis_fast.config.policy import bundle_to_settings, load_policy_bundle
from blis_fast.config.sim import SimConfig, build_config, check_ready_workload, load_yaml, section_paths
from blis_fast.config.validate import show
from blis_fast.errors import ConfigError
from blis_fast.policy.compile import autoscale_row
from blis_fast.results.deployments import instance_labels
from blis_fast.run.resolve import build_workload, check_expected_size, resolve
from blis_fast.run.session import RunSession
from blis_fast.workload import Workload
from blis_fast.config.sim import validate
from blis_fast_kernels.schema import TraceLevel
from blis_fast.run.counterfactual import replay_worst_decisions

if TYPE_CHECKING:
    from blis_fast.results.result import Result

RESULT_BYTES_PER_REQUEST = 512  # metric arrays the Result computes per request


Progress = Callable[[str, float, "float | None", str], None]
"""A progress callback ``(phase, done, total, unit)``: the phase in words ('generating the
workload', 'simulating'), how far it is (``total`` None: unknown), and the unit counted."""


def simulate(config: SimConfig | Mapping[str, Any] | str | os.PathLike | None = None,
             workload: Workload | str | None = None, *,
             policy: Mapping[str, Any] | str | os.PathLike | None = None,
             progress: Progress | None = None,
             **settings: Any) -> Result:
    """Simulate one run and return its :class:`~blis_fast.results.result.Result`.

    Parameters
    ----------
    config:
        The run's settings: a :class:`~blis_fast.config.sim.SimConfig`, a dict shaped like
        a run-config YAML file (``{"engine": {"max_num_seqs": 128}, "num_instances": 4}``),
        the path of such a file (``configs/examples/cluster.yaml``), or None (defaults:
        llama-3.1-8b-instruct on one H100, 100 requests at 1 request/s).
    workload:
        A :class:`~blis_fast.workload.Workload` to run instead of the one the config
        describes (it must use the engine's block size), or a workload type name
        (``"chatbot"``, as ``--workload chatbot``).
    policy:
        A policy bundle -- the path of a bundle YAML (``configs/policies/slo-aware.yaml``)
        or a dict shaped like one (``{"routing": {"type": "least-loaded"}}``); it
        overrides the config's ``policy`` section, as ``--policy-config`` does.
    progress:
        Called as ``progress(phase, done, total, unit)`` at each phase and while the
        kernel runs (``blis_fast.cli.feedback.Bar.report`` draws it as a bar).
    **settings:
        Flat settings named like the CLI flags with ``_`` (``num_instances=4``,
        ``rate=20.0``, ``routing_policy="weighted"``; ``blis-fast run --help`` lists
        them); they override ``config`` and ``policy``.  ``deployments=[{...}, ...]``
        gives the run's deployments as a run-config file's ``deployments:`` list does
        (docs/architecture.md "Deployments").

    Raises
    ------
    ConfigError
        Bad input (a ValueError), naming the keyword argument or the YAML path at fault.
    WorkloadError
        A malformed trace or workload spec (a ConfigError).
    SimulationError
        The kernel stopped with an error status.
    """
    if isinstance(workload, str):  # the flat setting ``workload="chatbot"``, not a Workload
        settings["workload"] = workload
        workload = None
    if workload is not None and not isinstance(workload, Workload):
        raise ConfigError("workload", f"must be a blis_fast.Workload or a workload type name, got {show(workload)}")
    if workload is not None:
        check_ready_workload(settings)
    cfg = as_config(config, settings, policy=policy)
    return run_config(cfg, workload, progress=progress)


def as_config(config: SimConfig | Mapping[str, Any] | str | os.PathLike | None,
              overrides: Mapping[str, Any] | None = None, *,
              policy: Mapping[str, Any] | str | os.PathLike | None = None) -> SimConfig:
    """The validated SimConfig of ``config`` (a SimConfig, a dict shaped like the YAML file,
    a YAML file path or None) with a policy bundle and flat ``overrides`` on top, as
    ``simulate`` takes them; errors name the keyword argument (``config``, ``policy``,
    ``num_instances``) or the YAML path."""
    overrides = dict(overrides or {})
    bundle = None
    if isinstance(policy, (str, os.PathLike)):
        bundle = load_policy_bundle(policy, "policy")
    elif isinstance(policy, Mapping):
        bundle = bundle_to_settings(dict(policy), "policy")
    elif policy is not None:
        raise ConfigError("policy", f"must be a policy bundle YAML path or a dict shaped like one, got {show(policy)}")
    if isinstance(config, (str, os.PathLike)):
        config = load_yaml(config, "config")
    settled = []
    if isinstance(config, SimConfig):
        if not overrides and bundle is None:
            return config
        config = config.to_dict()
        settled = section_paths(config)  # (checked when it was built: only what changes on top is checked)
    elif config is not None and not isinstance(config, Mapping):
        raise ConfigError("config", f"must be a SimConfig, a dict of settings, a YAML file path or None, "
                                    f"got {show(config)}")
    return build_config(dict(config or {}), overrides, policy_settings=bundle, policy_origin="policy", keywords=True,
                        settled=settled)


def run_config(cfg: SimConfig, workload: Workload | None = None, *, output_bytes_per_request: int = 0,
               progress: Progress | None = None, selectors: Sequence[tuple[str, str]] = ()) -> Result:
    """Run a validated config (``simulate`` without the argument handling) inside its memory
    budget; ``output_bytes_per_request`` reserves memory for outputs the caller will write
    (the CLI's results file).  ``progress`` is told each phase and, while the kernel runs,
    the requests finished (or, with a horizon, the simulated seconds) about every
    ``run.runner.CHUNK_SECONDS`` -- at no cost to the kernel (blis_fast.cli.feedback draws
    it).  Once the workload is known, before anything is simulated, every selector of the
    config's objectives and of ``selectors`` ((field, metric) pairs the caller will read,
    e.g. a study's ``--slo``) must name a group of the workload or an instance of the
    deployment (``results.objectives.check_selectors``)."""
    if not isinstance(cfg, SimConfig):
        raise ConfigError("config", f"must be a SimConfig, got {show(cfg)}")
    validate(cfg)  # (a SimConfig built with dataclasses.replace skips build_config)
    with memory.memory_budget(cfg.simulation.max_memory):
        setup = resolve(cfg)
        if workload is None:
            check_expected_size(cfg, setup, output_bytes_per_request + RESULT_BYTES_PER_REQUEST)
            if progress is not None:
                progress("generating the workload", 0, None, "")
            wl = build_workload(cfg)
            effective.check_class_weights(cfg, wl)
        else:
            wl = workload
        effective.check_store_mode(cfg, setup, wl)
        effective.check_seed_used(cfg, wl)
        check_run_selectors(cfg, wl, selectors)
        memory.charge(len(wl) * (output_bytes_per_request + RESULT_BYTES_PER_REQUEST),
                      f"the results of {len(wl)} requests")
        if (wl.arrival_us >= 0).all():  # all arrivals known in advance: refuse an empty window before running
            from blis_fast.results.window import measurement_window  # deferred: blis_fast_kernels.native

            measurement_window(wl.arrival_us, cfg.simulation.warmup_s, cfg.simulation.cooldown_s)
        if progress is not None:
            progress("preparing the tables", 0, None, "")
        sim = cfg.simulation
        interval_us = sample_interval_us(cfg)
        if interval_us:
            from blis_fast.results.timeseries import check_sample_count  # deferred: blis_fast_kernels.native

            # the run lasts at least until its last known arrival (at most until the horizon):
            # a series that would exceed its maximum by then is refused before the run
            known = wl.arrival_us[wl.arrival_us >= 0]
            last_us = int(known.max()) if known.size else 0
            if sim.horizon is not None:
                last_us = min(last_us, int(sim.horizon))
            check_sample_count(last_us // interval_us, pool_size(cfg),
                               f"sampling every {interval_us} µs up to the last arrival at {last_us} µs")
        session = RunSession(setup, wl, trace_level=trace_level_code(cfg)).prepare()
        recorder = None
        if interval_us:
            from blis_fast.results.timeseries import TimeSeriesRecorder  # deferred: blis_fast_kernels.native

            from blis_fast.results.kv_tiers import has_tiers, tier_names  # deferred: blis_fast_kernels

            from blis_fast.results.autoscale import has_autoscaler  # deferred: blis_fast_kernels

            flow = session.state.settings[0]
            recorder = TimeSeriesRecorder(len(session.state.inst), interval_us,
                                          tier_names(setup) if has_tiers(setup) else None, has_autoscaler(setup),
                                          gateway=int(flow["flow"]) != 0,
                                          deadlines=int(flow["flow"]) != 0 or int(flow["deadlines"]) != 0)
        on_chunk = None
        if progress is not None:
            on_chunk = _kernel_progress(progress, len(wl), cfg.simulation.horizon)
            progress("simulating", 0, None if cfg.simulation.horizon else len(wl), "")
        result = session.run(progress=on_chunk, sample_every_us=interval_us, on_sample=recorder).finish()
        if progress is not None:
            progress("computing the results", 0, None, "")
        if recorder is not None:
            used = result._used_instances()
            result.timeseries = recorder.series(used, session.state, instance_labels(setup, used))
        if sim.counterfactual_k:
            if progress is not None:
                progress("replaying counterfactuals", 0, None, "")
            result.counterfactuals = replay_worst_decisions(result, sim.counterfactual_k)
        return result


def pool_size(cfg: SimConfig) -> int:
    """The instances of a run's deployment pool (rows of its instance table): with a
    deployments: list, every deployment's instances."""
    if cfg.deployments is not None:
        return sum(d.instances for d in cfg.deployments)
    dep = cfg.deployment
    return max(dep.num_instances, dep.max_instances or 0)


def deployment_names(cfg: SimConfig) -> list[tuple[str, str]]:
    """(name, served model name) of each of the run's deployments: what ``[deployment=...]``
    and ``[model=...]`` selectors may name."""
    return [(d.name, d.served_name) for d in cfg.deployment_list()]


def check_run_selectors(cfg: SimConfig, wl: Workload, selectors: Sequence[tuple[str, str]] = ()) -> None:
    """The selectors of the config's objectives and ``selectors`` checked against the
    workload and the deployment (``run_config``)."""
    from blis_fast.results.objectives import check_selectors  # deferred: blis_fast_kernels.native

    selected = list(selectors)
    if cfg.objectives is not None:
        selected += [(f"objectives[{k}].metric", o["metric"]) for k, o in enumerate(cfg.objectives)]
    if selected:
        check_selectors(selected, wl, pool_size(cfg), deployment_names(cfg))


def _kernel_progress(progress: Progress, n_requests: int, horizon_us: int | None):
    """run_to_end's per-chunk callback: requests finished (completed, rejected or dropped)
    out of all, or, with a horizon, simulated seconds out of the horizon's."""
    def on_chunk(state) -> None:
        loop = state.loop[0]
        if horizon_us:
            progress("simulating", int(loop["clock_us"]) // 1_000_000, horizon_us // 1_000_000, "simulated s")
        else:
            done = int(loop["rejected"]) + int(state.inst["completed"].sum()) + int(state.inst["dropped"].sum())
            progress("simulating", min(done, n_requests), n_requests, "requests")
    return on_chunk


def trace_level_code(cfg: SimConfig) -> int:
    """The kernel's TraceLevel of a config: as asked for (none | decisions | full), by default
    decisions when counterfactual replays need the decision records, else none."""
    level = cfg.simulation.trace_level
    if level is None:
        level = "decisions" if cfg.simulation.counterfactual_k else "none"
    return int(getattr(TraceLevel, level.upper()))


def sample_interval_us(cfg: SimConfig) -> int | None:
    """The time-series sampling interval in µs (None: no time series)."""
    ms = cfg.simulation.sample_interval_ms
    return None if ms is None else max(int(round(ms * 1000)), 1)
