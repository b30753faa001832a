"""The budget of one evaluation: a runaway candidate ends with status ``budget_exceeded``
(score 0) instead of running for ever.

Three limits, each optional:
* ``max_events`` -- events the kernel may process (deterministic: the same candidate
  always stops at the same event);
* ``max_simulated_s`` -- simulated seconds: a run whose next event lies beyond this
  time has not finished in time (deterministic);
* ``max_wall_s`` -- wall-clock seconds, a safety net checked every ``CHUNK_EVENTS``
  events (machine-dependent: whether it trips depends on the machine's speed, so keep
  it well above a normal evaluation's time and rely on the first two for search).

``run_within(session, budget)`` runs a ``blis_fast.run.session.RunSession`` with them: the
kernel returns to Python every ``CHUNK_EVENTS`` events (the wall clock is read there) and
pauses at ``max_simulated_s`` (the loop stops there having processed every earlier event).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from blis_fast.config.validate import MAX_TIME_US, as_float, as_int, as_mapping, show
from blis_fast.errors import BlisFastError, ConfigError, SimulationError
from blis_fast_kernels.schema import Status

CHUNK_EVENTS = 100_000  # ~0.2 s of kernel time: the wall clock is read at least this often
MAX_WALL_S = 1e7
MAX_SIMULATED_S = MAX_TIME_US / 1e6


class BudgetExceeded(BlisFastError):
    """An evaluation hit one of its budget's limits (the message names which)."""


@dataclass(frozen=True)
class Budget:
    """Limits of one evaluation (None = no limit of that kind).  The default caps the
    wall clock only, at 60 s."""

    max_events: int | None = None
    max_simulated_s: float | None = None
    max_wall_s: float | None = 60.0

    def __post_init__(self) -> None:
        if self.max_events is not None:
            as_int(self.max_events, "budget.max_events", 1, MAX_TIME_US, text=False)
        if self.max_simulated_s is not None:
            as_float(self.max_simulated_s, "budget.max_simulated_s", 0, MAX_SIMULATED_S, lo_open=True, text=False)
        if self.max_wall_s is not None:
            as_float(self.max_wall_s, "budget.max_wall_s", 0, MAX_WALL_S, lo_open=True, text=False)

    @classmethod
    def parse(cls, value: Any, field: str = "budget") -> "Budget":
        """A Budget from None (the default), a Budget, or a mapping with the keys
        max_events, max_simulated_s, max_wall_s (null = no limit)."""
        if value is None:
            return cls()
        if isinstance(value, Budget):
            return value
        as_mapping(value, field, {"max_events", "max_simulated_s", "max_wall_s"},
                   what="a mapping with max_events, max_simulated_s, max_wall_s")
        try:
            return cls(**value)
        except ConfigError as exc:
            raise ConfigError(exc.field.replace("budget", field, 1), exc.message) from None

    def to_dict(self) -> dict:
        return {"max_events": self.max_events, "max_simulated_s": self.max_simulated_s,
                "max_wall_s": self.max_wall_s}


def run_within(session, budget: Budget, deadline: float | None = None, chunk_events: int = CHUNK_EVENTS):
    """Run ``session`` (a prepared RunSession) to the end within ``budget``; returns it or raises
    BudgetExceeded (one line naming the limit).  ``deadline`` (time.monotonic()) overrides
    the wall-clock limit's start (e.g. to include preparation time); the wall clock is
    read every ``chunk_events`` events."""
    if budget.max_events is not None:
        session.limit_events(budget.max_events)
    if deadline is None and budget.max_wall_s is not None:
        deadline = time.monotonic() + float(budget.max_wall_s)

    def check_wall(st) -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise BudgetExceeded(f"stopped after {budget.max_wall_s:g} s of wall-clock time (budget.max_wall_s) "
                                 f"at simulated t={int(st.loop[0]['clock_us']) / 1e6:.3f} s; the policy is too "
                                 "slow to simulate or the machine is overloaded")

    def over_time(st, t_us: int, repeats: int) -> None:
        raise BudgetExceeded(f"the run had not finished after {budget.max_simulated_s:g} simulated seconds "
                             f"(budget.max_simulated_s; {int(st.inst['completed'].sum())} requests completed): "
                             "requests pile up under this policy")

    sample = None
    if budget.max_simulated_s is not None:
        sample = max(1, int(math.ceil(float(budget.max_simulated_s) * 1e6)))
    try:
        return session.run(progress=check_wall, sample_every_us=sample, on_sample=over_time,
                           chunk_events=chunk_events)
    except SimulationError:
        state = session.state
        if budget.max_events is not None and int(state.loop[0]["status"]) == Status.MAX_EVENTS:
            raise BudgetExceeded(f"the run had not finished after {show(budget.max_events)} events "
                                 f"(budget.max_events) at simulated t={int(state.loop[0]['clock_us']) / 1e6:.3f} s, "
                                 f"{int(state.inst['completed'].sum())} requests completed") from None
        raise
