"""States for kernel unit tests, allocated by the Python layer (``blis_fast.run.tables``)
exactly as a run allocates them; tests then replace single arrays (``State._replace``) when
they need a table of a particular size or content."""

from __future__ import annotations

import numpy as np

from builders import lengths_workload

_SETUPS: dict[str, object] = {}


def setup_of(**overrides):
    """A resolved config (``blis_fast.run.resolve``) of flat settings; memoised (Setups are
    not mutated by build_state)."""
    from blis_fast.config.sim import build_config
    from blis_fast.run import resolve

    key = repr(sorted(overrides.items()))
    if key not in _SETUPS:
        _SETUPS[key] = resolve(build_config({}, overrides))
    return _SETUPS[key]


def make_state(workload, **overrides):
    """``build_state`` of ``workload`` under the flat settings ``overrides``."""
    from blis_fast.run import build_state

    overrides.setdefault("block_size_in_tokens", workload.block_size)
    return build_state(setup_of(**overrides), workload)


def lengths_state(lens, outputs, arrivals=None, bs=16, **overrides):
    """A State of requests with prompts of the given lengths (distinct random tokens)."""
    n = len(lens)
    arrivals = np.zeros(n, np.int64) if arrivals is None else np.asarray(arrivals, np.int64)
    return make_state(lengths_workload(arrivals, list(lens), list(outputs), bs=bs), **overrides)
