"""blis-fast: a Numba-accelerated simulator of vLLM-style LLM inference serving clusters.

Python API::

    import blis_fast
    result = blis_fast.simulate(num_instances=4, rate=20, num_requests=1000)
    result.cluster["ttft_p99_ms"]          # summary metrics (dict)
    result.requests_table()                 # per-request pyarrow Table

See README.md and docs/ for the model and its semantics.

Importing the package is cheap (the names below load on first use), so that the
``blis-fast`` command can arm its Ctrl-C handling before numpy and the config load.
"""

from __future__ import annotations

import importlib

from blis_fast.errors import BlisFastError, ConfigError, SimulationError, WorkloadError
from blis_fast.paths import guard_kernel_cache as _guard_kernel_cache
from blis_fast.version import __version__

_guard_kernel_cache()  # a damaged compiled cache is cleared; a cold one announces its compile


_LAZY = {"SimConfig": "blis_fast.config.sim", "build_config": "blis_fast.config.sim",
         "load_yaml": "blis_fast.config.sim", "simulate": "blis_fast.run.api", "Result": "blis_fast.results.result"}
_SUBPACKAGES = {"batch", "cli", "config", "experiments", "policy", "results", "run", "studies", "workload", "errors", "paths",
                "rng", "version"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBPACKAGES:  # ``import blis_fast; blis_fast.workload...``
        return importlib.import_module(f"blis_fast.{name}")
    raise AttributeError(f"module 'blis_fast' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def capacity(slo, config=None, **options):
    """The highest rate (or fewest instances) meeting SLOs; see :func:`blis_fast.studies.capacity.capacity`."""
    from blis_fast.studies.capacity import capacity as _capacity  # deferred: yaml, numpy, blis_fast_kernels.native

    return _capacity(slo, config, **options)


def sweep(sets, config=None, **options):
    """Metrics over a grid of settings; see :func:`blis_fast.studies.sweep.sweep`."""
    from blis_fast.studies.sweep import sweep as _sweep  # deferred: yaml, numpy, blis_fast_kernels.native

    return _sweep(sets, config, **options)


def compare(configs, sets=(), **options):
    """Configurations side by side on the same workload and seeds; see :func:`blis_fast.studies.sweep.compare`."""
    from blis_fast.studies.sweep import compare as _compare  # deferred: yaml, numpy, blis_fast_kernels.native

    return _compare(configs, sets, **options)


def evaluate_many(candidates, scenarios, objectives=None, budget=None, workers=None, executor=None, **options):
    """Evaluate policy candidates on scenarios in parallel; see
    :func:`blis_fast.batch.evaluate.evaluate_many`."""
    from blis_fast.batch.evaluate import evaluate_many as _evaluate_many  # deferred: yaml, numpy

    return _evaluate_many(candidates, scenarios, objectives, budget, workers, executor, **options)


__all__ = [
    "BlisFastError", "ConfigError", "Result", "SimConfig", "SimulationError", "WorkloadError",
    "build_config", "capacity", "compare", "evaluate_many", "load_yaml", "simulate", "sweep", "__version__",
]
