"""blis-fast: a Numba-accelerated simulator of vLLM-style LLM inference serving clusters.

Python API::

    import blis_fast
    result = blis_fast.simulate(num_instances=4, rate=20, num_requests=1000)
    result.cluster["ttft_p99_ms"]          # summary metrics (dict)
    result.requests_table()                 # per-request pyarrow Table

See README.md and docs/ for the model and its semantics.
"""

from blis_fast.config.sim import SimConfig, build_config, load_yaml
from blis_fast.errors import BlisFastError, ConfigError, SimulationError, WorkloadError
from blis_fast.paths import guard_kernel_cache as _guard_kernel_cache

_guard_kernel_cache()  # a damaged compiled cache is cleared; a cold one announces its compile

__version__ = "0.1.0"


def simulate(config=None, workload=None, **overrides):
    """Run one simulation; see :func:`blis_fast.run.api.simulate`."""
    from blis_fast.run.api import simulate as _simulate

    return _simulate(config, workload, **overrides)


def capacity(slo, config=None, **options):
    """The highest rate (or fewest instances) meeting SLOs; see :func:`blis_fast.studies.capacity.capacity`."""
    from blis_fast.studies.capacity import capacity as _capacity

    return _capacity(slo, config, **options)


def evaluate_many(candidates, scenarios, objectives=None, budget=None, workers=None, executor=None, **options):
    """Evaluate policy candidates on scenarios in parallel; see
    :func:`blis_fast.batch.evaluate.evaluate_many`."""
    from blis_fast.batch.evaluate import evaluate_many as _evaluate_many

    return _evaluate_many(candidates, scenarios, objectives, budget, workers, executor, **options)


__all__ = [
    "BlisFastError", "ConfigError", "SimConfig", "SimulationError", "WorkloadError",
    "build_config", "capacity", "evaluate_many", "load_yaml", "simulate", "__version__",
]
