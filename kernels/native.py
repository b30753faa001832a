"""The entry kernels Python calls, from the ahead-of-time compiled module when it can be
used, else JIT-compiled: ``from blis_fast_kernels.native import run_events``.

The compiled module (``_native``, built by ``aot.build`` when the package is installed)
is used when
  * it is importable and was built from exactly these kernel sources (its ``built_from()``
    holds ``cache.sources_digest()``'s first 64 bits: an edited kernel falls back to JIT
    instead of running stale code),
  * the call's arguments have the types it was compiled for (``aot.args_match``), and
  * ``BLIS_FAST_KERNELS`` is not ``jit`` and ``NUMBA_DISABLE_JIT`` is not set (the
    interpreted kernels are for tests and debugging).
Otherwise the call goes to the JIT kernel, which gives the same result (the tests compare
them byte for byte); only then is numba imported.  ``BLIS_FAST_KERNELS=native`` makes a
missing or stale module, or a call it cannot take, an error instead (CI uses it, so a
path that would silently fall back is caught).
"""

from __future__ import annotations

import os
from importlib import import_module

from . import aot

_MODES = ("auto", "native", "jit")


class NativeUnavailable(RuntimeError):
    """BLIS_FAST_KERNELS=native, but the compiled module cannot serve a call."""


def mode() -> str:
    """``BLIS_FAST_KERNELS``: auto (default), native or jit."""
    m = os.environ.get("BLIS_FAST_KERNELS", "auto").strip().lower() or "auto"
    if m not in _MODES:
        raise NativeUnavailable(f"BLIS_FAST_KERNELS must be one of {', '.join(_MODES)}, got {m!r}")
    if os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
        return "jit"
    return m


_status: dict = {}  # "module": the loaded module or None, "why": the reason it is None


def _why_unusable() -> str | None:
    """None if the compiled module is usable (and loaded into _status), else the reason."""
    try:
        module = import_module(f"{__package__}.{aot.MODULE}")
        built_from = getattr(module, aot.BUILT_FROM)()
    except ImportError:
        return "the package was installed without its compiled kernels"
    except Exception as e:  # noqa: BLE001 -- a broken module: run JIT and say why
        return f"the compiled kernels do not load ({type(e).__name__}: {e})"
    from .cache import sources_digest

    if built_from != aot.digest_value(sources_digest()):
        return "the compiled kernels were built from other kernel sources"
    _status["module"] = module
    return None


def compiled_module():
    """The compiled module, or None (``status()`` says why)."""
    if "why" not in _status:
        _status["module"] = None
        _status["why"] = _why_unusable()
    return _status["module"]


def status() -> str:
    """One line: which kernels the calls of this process use, and if not the compiled
    ones, why."""
    m = mode()
    if m == "jit":
        return "JIT (BLIS_FAST_KERNELS=jit or NUMBA_DISABLE_JIT)"
    if compiled_module() is not None:
        return "compiled ahead of time"
    return f"JIT: {_status['why']}"


class _EntryKernel:
    """Calls the compiled kernel ``entry`` when it can take the arguments, else the JIT one."""

    def __init__(self, entry: aot.Entry):
        self.entry = entry
        self.__name__ = entry.name
        self.__doc__ = f"{entry.module}.{entry.name}, compiled ahead of time where possible (native.py)."

    def jit(self):
        """The JIT kernel (imports numba)."""
        return getattr(import_module(f"{__package__}.{self.entry.module}"), self.entry.name)

    def __call__(self, *args):
        m = mode()
        if m != "jit":
            mod = compiled_module()
            if mod is not None and aot.args_match(self.entry, args):
                return getattr(mod, self.entry.name)(*args)
            if m == "native":
                why = _status["why"] if mod is None else aot.mismatch(self.entry, args)
                raise NativeUnavailable(f"BLIS_FAST_KERNELS=native: cannot run {self.entry.name} compiled: {why}")
        return self.jit()(*args)


run_events = _EntryKernel(aot.BY_NAME["run_events"])
run_minimal = _EntryKernel(aot.BY_NAME["run_minimal"])
flag_keys = _EntryKernel(aot.BY_NAME["flag_keys"])
gather_words = _EntryKernel(aot.BY_NAME["gather_words"])
group_steps = _EntryKernel(aot.BY_NAME["group_steps"])
run_cover = _EntryKernel(aot.BY_NAME["run_cover"])
count_inversions = _EntryKernel(aot.BY_NAME["count_inversions"])
hash_chain_states = _EntryKernel(aot.BY_NAME["hash_chain_states"])
hash_sequence_blocks = _EntryKernel(aot.BY_NAME["hash_sequence_blocks"])
chain_sequence_keys = _EntryKernel(aot.BY_NAME["chain_sequence_keys"])
scan_csv_records = _EntryKernel(aot.BY_NAME["scan_csv_records"])
parse_int_lists = _EntryKernel(aot.BY_NAME["parse_int_lists"])
run_tool_dags = _EntryKernel(aot.BY_NAME["run_tool_dags"])
