"""One run of the event loop, from its tables to its ``Result``: the one place that
allocates a run's State (``tables.build_state``) and drives the loop (``runner``).

``simulate`` (run/api.py), a batch evaluation and a cohort (blis_fast.batch), the
counterfactual replays (run/counterfactual.py) and the bench (blis_fast.experiments) all
go through ``RunSession``, so a new table or run setting is wired in here once::

    session = RunSession(setup, workload, trace_level=level)
    session.prepare()               # the State, charged to the memory budget in force
    session.run_until(t_us)         # optional: stop where a replay branches off
    branch = session.copy()         # an independent copy (counterfactuals, cohort splits)
    branch.force_routing(r, j)      # the kernel routes request r to instance j
    result = branch.run().finish()  # the loop to the end -> Result

``run`` takes the runner's hooks (a per-chunk ``progress`` callback, sampling on the
simulated clock): the time series and a batch evaluation's budget
(blis_fast.batch.budget) are built on them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

import numpy as np

from blis_fast.config.validate import show
from blis_fast.errors import ConfigError
from blis_fast.run.runner import run_to_end
from blis_fast.run.tables import ScenarioTables, StateArrays, build_state
from blis_fast_kernels.schema import TraceLevel
from blis_fast_kernels.schema.state import State, copy_state

if TYPE_CHECKING:
    from blis_fast.results.result import Result


class RunSession:
    """One run of ``workload`` under ``setup`` (a resolved config, blis_fast.run.resolve).

    ``policy``: a compiled policy (blis_fast.policy.CompiledPolicies; default the
    config's); ``trace_level``: the kernel's TraceLevel; ``event_skipping=False``: the
    reference path that visits every running request every step; ``scenario``
    (``tables.scenario_tables``) and ``arrays`` (``tables.StateArrays``): what many runs of
    one scenario share, and where the large arrays come from (a batch reuses a thread's);
    ``agents``: agent DAGs run with the cluster (run/agents.py ``AgentTables``; the
    workload holds their llm nodes' requests).  ``kernel_s`` sums the wall seconds the loop has run in this session."""

    def __init__(self, setup, workload, policy=None, *, trace_level: int = TraceLevel.NONE,
                 event_skipping: bool = True, scenario: ScenarioTables | None = None,
                 arrays: StateArrays | None = None, agents=None) -> None:
        self.setup = setup
        self.workload = workload
        self.policy = policy
        self.trace_level = int(trace_level)
        self.event_skipping = event_skipping
        self.scenario = scenario
        self.arrays = arrays
        self.agents = agents
        self.state: State | None = None
        self.kernel_s = 0.0

    def prepare(self) -> "RunSession":
        """Allocate and fill the run's State (``tables.build_state``: sized, checked and
        charged to the memory budget before anything large is allocated)."""
        self.state = build_state(self.setup, self.workload, self.policy, event_skipping=self.event_skipping,
                                 trace_level=self.trace_level, scenario=self.scenario, arrays=self.arrays,
                                 agents=self.agents)
        return self

    def _ready(self) -> State:
        if self.state is None:
            self.prepare()
        return self.state

    def run(self, progress: Callable[[State], None] | None = None, sample_every_us: int | None = None,
            on_sample: Callable[[State, int, int], None] | None = None,
            chunk_events: int | None = None) -> "RunSession":
        """Run the loop until the run ends (``runner.run_to_end``, whose hooks these are; a
        cohort's state also returns where its members part).  Raises SimulationError on
        an error status."""
        state = self._ready()
        started = time.perf_counter()
        try:
            self.state = run_to_end(state, progress=progress, sample_every_us=sample_every_us,
                                    on_sample=on_sample, chunk_events=chunk_events)
        finally:
            self.kernel_s += time.perf_counter() - started
        return self

    def run_until(self, t_us: int) -> "RunSession":
        """Process every event at or before ``t_us`` and stop before the next one (or at the
        end); ``run`` continues from there."""
        state = self._ready()
        started = time.perf_counter()
        try:
            self.state = run_to_end(state, until_us=t_us)
        finally:
            self.kernel_s += time.perf_counter() - started
        return self

    def force_routing(self, request: int, instance: int) -> "RunSession":
        """Route request ``request`` to ``instance`` whatever the policy says (the other
        decisions are the policy's): a counterfactual replay's one change.  The instance
        must serve the request's model (the kernel routes a forced request unchecked, and
        an instance of another model would serve it with that model's latency and cache)."""
        state = self._ready()
        n_instances = state.inst.shape[0]
        if not 0 <= request < state.reqs.shape[0]:
            raise ConfigError("forced_request", f"must be a request id in 0..{state.reqs.shape[0] - 1}, got {request}")
        if not 0 <= instance < n_instances or state.inst["model"][instance] != state.reqs["model"][request]:
            serving = np.flatnonzero(state.inst["model"] == state.reqs["model"][request]).tolist()
            raise ConfigError("forced_instance", f"must be an instance serving request {request}'s model "
                                                 f"({show(serving)}), got {instance}")
        settings = state.settings
        settings["forced_request"] = request
        settings["forced_instance"] = instance
        return self

    def limit_events(self, max_events: int) -> None:
        """Stop the loop (status max_events) after at most ``max_events`` events."""
        settings = self._ready().settings
        settings["max_events"] = min(int(settings[0]["max_events"]), int(max_events))

    def copy(self) -> "RunSession":
        """An independent session continuing from this one's state (its own arrays)."""
        twin = RunSession(self.setup, self.workload, self.policy, trace_level=self.trace_level,
                          event_skipping=self.event_skipping, scenario=self.scenario, agents=self.agents)
        twin.state = copy_state(self._ready())
        twin.kernel_s = self.kernel_s
        return twin

    def state_bytes(self) -> int:
        """Bytes of the session's State (what a copy costs)."""
        return sum(a.nbytes for a in self._ready())

    def finish(self, wall_time_s: float | None = None) -> "Result":
        """The run's Result; ``wall_time_s`` defaults to the loop's wall seconds."""
        from blis_fast.results.result import Result  # deferred: blis_fast_kernels.native

        return Result(self.setup, self.workload, self._ready(),
                      wall_time_s=self.kernel_s if wall_time_s is None else wall_time_s)


__all__ = ["RunSession"]
