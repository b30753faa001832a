"""Typed exceptions of the Python API.

Every user-facing error carries the *field* it is about (a YAML path or a CLI flag name)
so that the CLI can print one line -- ``error: <field>: <message>`` -- and exit with
code 2, and API callers can catch a precise type.
"""

from __future__ import annotations


class BlisFastError(Exception):
    """Base class of every error blis-fast raises on purpose."""


class ConfigError(BlisFastError, ValueError):
    """An invalid configuration value. ``field`` names it (e.g. ``engine.max_num_seqs``)."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class WorkloadError(ConfigError):
    """An invalid workload specification or a malformed trace file (``field`` names the
    file and row, e.g. ``trace.csv row 12``)."""


class SimulationError(BlisFastError, RuntimeError):
    """The kernel stopped with a bad status (a preallocated table overflowed, a clock went
    backwards).  The message names the setting to raise where one exists."""
