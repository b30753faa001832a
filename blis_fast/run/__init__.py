"""Running a simulation: resolve the config (``resolve``), allocate the kernel's tables
(``tables``), drive the resumable event loop to the end (``runner``) -- both through one
``session.RunSession`` per run; ``api.simulate`` does all of it."""

from blis_fast.run.api import simulate
from blis_fast.run.resolve import Setup, build_workload, distribution_spec, resolve
from blis_fast.run.runner import run_to_end
from blis_fast.run.session import RunSession
from blis_fast.run.tables import build_state

__all__ = ["RunSession", "Setup", "build_state", "build_workload", "distribution_spec", "resolve", "run_to_end",
           "simulate"]
