"""A heap the garbage collector leaves alone while the wall clock matters.

CPython's full collection walks every tracked object, and a process that has loaded numpy,
the kernels, starlette and httpx holds a few hundred thousand of them: one collection stops
the event loop for tens of milliseconds (50-80 ms measured in ``blis-fast serve`` under the
calibration spec's peak load).  For the server, that is every open stream's tokens late at
once; for the observer, every token that comes meanwhile stamped late -- a delay in the
tail of TTFT that no engine has (docs/calibrate.md, "Precision, over real sockets").
``quiet_heap`` collects once, then freezes what is alive (``gc.freeze``: a permanent
generation the collector no longer walks), so later collections see only what the run
itself allocates; on leaving, the objects go back to the collector."""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def quiet_heap():
    """Collect, then freeze the surviving objects for the block (see the module docstring);
    nested or concurrent blocks (a server and an observer in one process) are fine: the
    first to leave unfreezes, which only brings back the usual collections."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
