"""How kernels are compiled: two decorators, one place to change them.

``kernel``  -- ``njit(cache=True)``: entry points and anything that allocates.
``helper``  -- ``njit(cache=True, _nrt=False)``: allocation-free helpers called per step,
per token or per KV block.  Numba otherwise wraps every call in atomic reference-count
increments/decrements of each array argument (``NRT_incref``/``NRT_decref``); on the
100K x 16 benchmark those atomics took ~60% of the kernel time (4.1 s -> 0.8 s without
them).  A helper cannot allocate (numba refuses to compile it if it tries), which is
exactly the rule for the hot loop anyway.  ``_nrt`` is a long-standing but underscored
numba option: if a numba release drops it, change it here only.
"""

from numba import njit

kernel = njit(cache=True)
helper = njit(cache=True, _nrt=False)
