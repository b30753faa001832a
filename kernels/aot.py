"""Ahead-of-time compiled entry kernels: the kernels Python calls, compiled once when the
package is built (``setup.py``), into the extension module ``blis_fast_kernels._native``.

Why: a process that runs JIT-compiled kernels must load numba and llvmlite and set up
their compiler even when every kernel comes from the on-disk cache -- on a 2-core machine
that alone is ~1.2 s and ~200 MB of every run.  The extension module is plain machine code
that needs only numpy, so a run that finds it never imports numba (``native.py`` picks it).

This module declares each entry kernel's one compiled signature in numpy terms (``ENTRIES``),
which serves twice: ``build`` turns it into numba types and compiles, and ``native.py``
checks every call's arguments against it before handing them to compiled code (which
cannot check them itself: a wrong dtype would read garbage).  A call whose arguments do
not match runs the JIT kernel instead, with the same result.

Importing this module does not import numba; ``build`` does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .schema.state import STATE_LAYOUT, State

MODULE = "_native"  # blis_fast_kernels._native
BUILT_FROM = "built_from"  # its function returning digest_value() of the sources it was compiled from


def digest_value(digest: str) -> int:
    """The int64 a compiled module returns for the sources digest ``digest`` (hex): its
    first 64 bits.  Kept inside the module, it travels with it wherever an installer
    copies it (a file beside it would not: editable installs copy the module alone)."""
    return int(digest[:16], 16) - (1 << 63)


@dataclass(frozen=True)
class Arr:
    """A C-contiguous, aligned numpy array of ``dtype`` with ``ndim`` dimensions."""
    dtype: np.dtype
    ndim: int = 1


class _Scalar:
    def __init__(self, name: str, kinds: tuple):
        self.name, self.kinds = name, kinds

    def __repr__(self) -> str:
        return self.name


I64 = _Scalar("int64", (int, np.integer))
F64 = _Scalar("float64", (float, int, np.floating, np.integer))
BOOL = _Scalar("boolean", (bool, np.bool_))
STATE = "State"  # a kernels.schema.State laid out as STATE_LAYOUT says
NONE = None  # returns nothing

_i64, _f64, _u8, _u64 = np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.uint8), np.dtype(np.uint64)


@dataclass(frozen=True)
class Entry:
    """An entry kernel: ``module.name`` (relative to blis_fast_kernels), its argument
    types and its return type (a type, a tuple of types, or NONE)."""
    name: str
    module: str
    args: tuple
    returns: object


ENTRIES: tuple[Entry, ...] = (
    Entry("run_events", "engine.loop", (STATE,), NONE),
    Entry("run_minimal", "engine.minimal",
          (Arr(_i64), Arr(_i64), Arr(_i64), I64, I64, I64, F64, F64, F64, Arr(_i64), Arr(_i64)), I64),
    Entry("flag_keys", "structs.keycount", (Arr(_i64), I64), (Arr(_u8), I64)),
    Entry("gather_words", "results.columns", (Arr(_u64, 2), Arr(_i64), Arr(_u64, 2)), NONE),
    Entry("group_steps", "results.itl", (Arr(_i64), I64), (Arr(_i64), Arr(_i64))),
    Entry("run_cover", "results.itl", (Arr(_i64), Arr(_i64), Arr(_i64)), Arr(_i64)),
    Entry("count_inversions", "results.inversions", (Arr(_f64), Arr(_i64), Arr(_i64), F64), I64),
    Entry("hash_chain_states", "workload.keys", (Arr(_i64), Arr(_i64), I64), (Arr(_i64), Arr(_i64))),
    Entry("hash_sequence_blocks", "workload.keys",
          (Arr(_i64), Arr(_i64), Arr(_i64), Arr(_i64), Arr(_i64), Arr(_i64), I64), (Arr(_i64), Arr(_i64))),
    Entry("chain_sequence_keys", "workload.keys",
          (Arr(_i64), Arr(_i64), Arr(_i64), Arr(_i64), Arr(_i64), Arr(_i64), Arr(_i64), Arr(_i64), Arr(_i64),
           Arr(_u8)), NONE),
    Entry("scan_csv_records", "workload.trace_csv", (Arr(_u8), I64, I64),
          (I64, I64, Arr(_i64, 2), Arr(_i64, 2), Arr(_u8, 2), Arr(_i64), Arr(_i64))),
    # compiled ahead of time, its prange loops run serially (the JIT kernel is parallel)
    Entry("parse_int_lists", "workload.trace_csv", (Arr(_u8), Arr(_i64), Arr(_i64), BOOL), (Arr(_i64), Arr(_i64), I64)),
    # the agents' tools-only driver: plain arrays (requests, node DAG CSR, loads, resources), a mode
    Entry("run_tool_dags", "agents.fairshare",
          (Arr(_i64), Arr(_i64), Arr(_i64), Arr(_i64), Arr(_i64), Arr(_i64), Arr(_f64), Arr(_i64), Arr(_i64),
           Arr(_f64), Arr(_i64), I64),
          (Arr(_i64), Arr(_i64), Arr(_i64), Arr(_f64), I64, I64)),
)
BY_NAME = {e.name: e for e in ENTRIES}


# ----------------------------------------------------------------------------- checking a call


def _array_ok(a, dtype: np.dtype, ndim: int) -> bool:
    return (type(a) is np.ndarray and a.dtype == dtype and a.ndim == ndim and a.flags.c_contiguous
            and a.flags.aligned)


def _describe(a) -> str:
    if type(a) is not np.ndarray:
        return type(a).__name__
    flags = [f for f in ("c_contiguous", "aligned", "writeable") if not getattr(a.flags, f)]
    return f"{a.ndim}-d {a.dtype} array" + (f" (not {', '.join(flags)})" if flags else "")


def _problem(want, a) -> str | None:
    """None if ``a`` has the compiled type ``want``, else what it is instead."""
    if want is STATE:
        if type(a) is not State:
            return f"is a {_describe(a)}, not a State"
        for name, (dtype, ndim), x in zip(State._fields, STATE_LAYOUT.values(), a):
            if not (_array_ok(x, dtype, ndim) and x.flags.writeable):  # the loop writes every table
                return f"State.{name} is a {_describe(x)}, not a writable C-ordered {ndim}-d {dtype} array"
        return None
    if isinstance(want, Arr):
        ok = _array_ok(a, want.dtype, want.ndim)
    else:
        ok = isinstance(a, want.kinds) and (want is BOOL or not isinstance(a, (bool, np.bool_)))
    return None if ok else f"is a {_describe(a)}, not {want}"


def mismatch(entry: Entry, args: tuple) -> str | None:
    """None if ``args`` have exactly the types ``entry`` was compiled for, else which
    argument (or State field) does not, and what it is (for an error message)."""
    if len(args) != len(entry.args):
        return f"{len(args)} arguments, not {len(entry.args)}"
    for k, (want, a) in enumerate(zip(entry.args, args)):
        problem = _problem(want, a)
        if problem is not None:
            return problem if problem.startswith("State.") else f"argument {k + 1} {problem}"
    return None


def args_match(entry: Entry, args: tuple) -> bool:
    """True if ``args`` have exactly the types ``entry`` was compiled for."""
    return mismatch(entry, args) is None


# ----------------------------------------------------------------------------- building


def _numba_type(t):
    from numba import types
    from numba.np.numpy_support import from_dtype

    if t is STATE:
        return types.NamedTuple([types.Array(from_dtype(dt), nd, "C") for dt, nd in STATE_LAYOUT.values()], State)
    if isinstance(t, Arr):
        return types.Array(from_dtype(t.dtype), t.ndim, "C")
    if isinstance(t, tuple):
        return types.Tuple([_numba_type(x) for x in t])
    if t is NONE:
        return types.none
    return getattr(types, str(t))


def build(output_dir: str, digest: str, verbose: bool = False) -> str:
    """Compile every entry of ENTRIES, and ``built_from() -> digest_value(digest)``
    (``digest``: ``cache.sources_digest()`` of the sources compiled), into
    ``output_dir``/_native<ext suffix>; returns the module's path.  The compiled module
    releases the GIL while a kernel runs, as the JIT entry kernels do (``jit.kernel``:
    nogil), so batch evaluation runs on every core."""
    from importlib import import_module

    import numba.pycc.compiler as pycc_compiler
    from numba.pycc import CC

    cc = CC(MODULE, source_module=__name__.rsplit(".", 1)[0])
    cc.output_dir = output_dir
    cc.verbose = verbose
    for e in ENTRIES:
        fn = getattr(import_module(f"{__package__}.{e.module}"), e.name)
        cc.export(e.name, _numba_type(e.returns)(*[_numba_type(a) for a in e.args]))(fn.py_func)
    namespace: dict = {}
    exec(f"def {BUILT_FROM}():\n    return {digest_value(digest)}\n", namespace)
    cc.export(BUILT_FROM, "int64()")(namespace[BUILT_FROM])
    # pycc has no nogil option: its wrappers are compiled with the compiler flags it
    # creates, so give those flags release_gil for the duration of the build
    flags_class = pycc_compiler.Flags

    class _NoGilFlags(flags_class):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.release_gil = True

    pycc_compiler.Flags = _NoGilFlags
    try:
        cc.compile()
    finally:
        pycc_compiler.Flags = flags_class
    return os.path.join(output_dir, cc.output_file)
