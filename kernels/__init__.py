"""Numba kernels of blis-fast: everything that runs per event, per step or per token.

    schema/    enums, table dtypes and the State record (the data model, one place)
    structs/   heap, linked lists, hash tables, sort, key counting, 64-bit mixing
    engine/    the event loop, its handlers and the engine step
    kv/        the paged KV cache with prefix caching
    policies/  admission, routing (+ router snapshot, prefix index), priority, scheduler, victim
    latency/   step-time models
    workload/  prefix-block keys, trace CSV scanning

Kernels import only numpy, numba and each other, never ``blis_fast``.  Python calls the
entry kernels through ``native.py``: compiled ahead of time when the package was installed
(``aot.py``), else JIT.  On import, a stale JIT cache is dropped (``cache.py``).
"""

from .cache import drop_stale as _drop_stale

_drop_stale()
