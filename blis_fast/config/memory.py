"""The memory budget of a run (``simulation.max_memory``, ``--max-memory``).

Before anything large is allocated -- the workload's arrays and block keys, a spec's
prefix token ids, the run's tables, grown logs -- its size is estimated from the inputs
and charged to the budget in force; a charge that would exceed it raises a one-line
``ConfigError`` naming the setting and what needs the memory, before the allocation.

The budget in force is set by ``memory_budget(limit)`` (``blis_fast.simulate`` and the
CLI commands do); outside one, every charge is checked alone against the default, half
the machine's RAM (or of the cgroup limit, whichever is smaller).
"""

from __future__ import annotations

import contextvars
import os
import re
import time
from contextlib import contextmanager
from typing import Any

from blis_fast.config.validate import as_int, parse_decimal, show
from blis_fast.errors import ConfigError

FIELD = "simulation.max_memory"
MAX_BYTES = 2**62
_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6, "mib": 2**20,
          "g": 2**30, "gb": 10**9, "gib": 2**30, "t": 2**40, "tb": 10**12, "tib": 2**40}
_SIZE = re.compile(r"\s*([0-9.eE+-]+)\s*([a-zA-Z]*)\s*")


_MACHINE_READ: list = [float("-inf"), 0]  # (time.monotonic() of the last reading, its bytes)
MACHINE_REREAD_S = 1.0


def machine_memory() -> int:
    """Physical RAM in bytes, or the cgroup (v2 or v1) memory limit if smaller; read again
    at most once a second (a batch evaluation asks for every candidate)."""
    now = time.monotonic()
    if now - _MACHINE_READ[0] < MACHINE_REREAD_S:
        return _MACHINE_READ[1]
    total = _read_machine_memory()
    _MACHINE_READ[:] = [now, total]
    return total


def _read_machine_memory() -> int:
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover -- not Linux/macOS
        total = 8 * 2**30
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return int(total)


def default_max_memory() -> int:
    """Half the machine's memory."""
    return machine_memory() // 2


def parse_bytes(value: Any, field: str = FIELD) -> int:
    """A size in bytes: an integer, or text such as ``4GB`` (10^9), ``512MiB`` (2^20),
    ``4G`` (= GiB), ``1e9``; at least 1 MiB, at most 2^62."""
    what = "a size such as 4GB, 512MiB or a number of bytes"
    if isinstance(value, str):
        m = _SIZE.fullmatch(value)
        unit = m.group(2).lower() if m else None
        num = parse_decimal(m.group(1)) if m else None
        if m is None or num is None or unit not in _UNITS:
            raise ConfigError(field, f"must be {what}, got {show(value)}")
        value = num * _UNITS[unit]
        if value != value.to_integral_value():
            value = value.to_integral_value(rounding="ROUND_FLOOR")
        value = int(value) if value.adjusted() < 30 else MAX_BYTES + 1
    return as_int(value, field, 2**20, MAX_BYTES, unit="bytes; " + what)


def fmt_bytes(n: float) -> str:
    """1.5 GiB, 300.0 MiB, 12 KiB ..."""
    n = float(n)
    for unit, size in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


class MemoryBudget:
    """Bytes a run may allocate; ``charge`` adds up what is allocated and refuses what
    would not fit."""

    def __init__(self, limit: int | None = None, field: str = FIELD):
        self.limit = int(limit) if limit is not None else default_max_memory()
        self.field = field
        self.used = 0

    def check(self, nbytes: float, what: str, hint: str = "") -> None:
        """ConfigError if ``nbytes`` more would exceed the budget (nothing is charged)."""
        total = self.used + max(float(nbytes), 0.0)
        if total > self.limit:
            also = f" (with {fmt_bytes(self.used)} already in use)" if self.used else ""
            raise ConfigError(self.field, f"{what} needs about {fmt_bytes(nbytes)}{also}, more than the memory "
                                          f"budget of {fmt_bytes(self.limit)}; {hint or 'make the workload smaller'}"
                                          " or raise --max-memory")

    def charge(self, nbytes: float, what: str, hint: str = "") -> None:
        """``check``, then count ``nbytes`` as used."""
        self.check(nbytes, what, hint)
        self.used += int(max(float(nbytes), 0.0))


_CURRENT: contextvars.ContextVar[MemoryBudget | None] = contextvars.ContextVar("blis_fast_memory_budget",
                                                                                 default=None)


def current_budget() -> MemoryBudget:
    """The budget in force, else a fresh default one (each charge then stands alone)."""
    b = _CURRENT.get()
    return b if b is not None else MemoryBudget()


@contextmanager
def memory_budget(limit: int | None = None, field: str = FIELD):
    """Make a budget of ``limit`` bytes (default: half the machine's memory) the one in
    force inside the ``with`` block; yields it."""
    budget = MemoryBudget(limit, field)
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


def charge(nbytes: float, what: str, hint: str = "") -> None:
    """Charge the budget in force (see ``MemoryBudget.charge``)."""
    current_budget().charge(nbytes, what, hint)


def check(nbytes: float, what: str, hint: str = "") -> None:
    """Check against the budget in force without charging."""
    current_budget().check(nbytes, what, hint)
