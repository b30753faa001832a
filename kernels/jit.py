"""How kernels are compiled: two decorators, one place to change them.

``kernel``  -- ``njit(cache=True)``: entry points called from Python, and anything that
allocates.
``helper``  -- allocation-free functions called only from other kernels (per event, per
step, per token or per KV block):
  * ``_nrt=False``: numba otherwise wraps every call in atomic reference-count updates
    of each array argument; on the 100K x 16 benchmark those took ~60% of the kernel time.
    A helper cannot allocate (numba refuses to compile it if it tries), which is the
    rule for the hot loop anyway.
  * ``no_cpython_wrapper`` / ``no_cfunc_wrapper``: a helper is never called from Python,
    and the wrappers (which unbox every array of the State record) cost ~0.25 s of
    compile time per helper.  Tests reach helpers through kernel entry points.
A helper called with a literal constant (``f(st, 1)``) is compiled once more for that
literal's type: call sites pass such constants as ``np.int64(1)``.
``_nrt`` and the wrapper flags are long-standing but underscored or internal numba
options: if a numba release drops one, change it here only.
"""

from numba import njit

kernel = njit(cache=True, nogil=True)
helper = njit(cache=True, _nrt=False, no_cpython_wrapper=True, no_cfunc_wrapper=True)
