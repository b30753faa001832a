"""Where the shipped data (model configs, hardware, coefficients) lives, and the guard of
the compiled-kernel cache (``guard_kernel_cache``: self-healing and the first-compile
notice, on ``import blis_fast``)."""

from __future__ import annotations

import os
import stat
import sys
import re
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def configs_dir() -> Path:
    """The ``configs/`` folder: ``$BLIS_FAST_CONFIGS`` if set, else the source checkout's
    top-level ``configs/``, else the copy installed as the ``blis_fast_configs`` package."""
    env = os.environ.get("BLIS_FAST_CONFIGS")
    if env:
        return Path(env)
    source = Path(__file__).resolve().parent.parent / "configs"
    if (source / "hardware_config.json").is_file():
        return source
    import blis_fast_configs  # deferred: blis_fast_configs -- installed wheel only: configs/ shipped as a data package

    return Path(blis_fast_configs.__file__).resolve().parent


# ----------------------------------------------------------------------------- compiled kernels

NOTICE = "blis-fast: compiling kernels (first run after install or upgrade; about {seconds} s)..."
NOTICE_HEALED = ("blis-fast: a compiled-kernel cache entry was damaged ({file}) and has been removed; "
                 "compiling kernels again (up to about {seconds} s)...")
COMPILE_SECONDS = 40  # a cold `blis-fast run` on a 2-core machine (bench/README.md: start-up)


class _Anything:
    """Stands in for every class a cache pickle names, so that ``intact`` checks a
    pickle's structure without importing numba or running its reducers."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Anything()

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):  # SETITEM(S) on a reduced mapping
        pass

    def append(self, item):  # APPEND(S) on a reduced sequence
        pass

    def extend(self, items):
        pass

    def add(self, item):  # ADDITEMS on a reduced set
        pass


def intact(path: Path) -> bool:
    """True if ``path`` is a complete numba cache file: an index (.nbi) is two pickles back
    to back (numba's version, then the index), a data file (.nbc) one pickle.  Parsed with
    every class replaced by a stand-in: nothing is imported or run.  A file that vanished
    counts as intact (numba copes with missing files)."""
    import pickle  # deferred: pickle (start-up of import blis_fast)

    class Structural(pickle.Unpickler):
        def find_class(self, module, name):
            return _Anything

    try:
        with open(path, "rb") as f:
            if f.read(1) != b"\x80":  # PROTO
                return False
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b".":  # STOP
                return False
            size = f.tell()
            f.seek(0)
            for _ in range(2 if path.suffix == ".nbi" else 1):
                Structural(f).load()
            return f.tell() == size
    except FileNotFoundError:
        return True
    except Exception:  # noqa: BLE001 -- unreadable or unparsable: damaged
        return False


def _is_ours(dispatcher) -> bool:
    module = getattr(getattr(dispatcher, "py_func", None), "__module__", None) or ""
    return module.split(".")[0] == "blis_fast_kernels"


def _install_notice(message: str) -> None:
    """Log ``message`` (a warning of the ``blis_fast`` logger: on stderr unless the CLI's
    --quiet) when numba starts compiling one of our kernels (once)."""
    import logging  # deferred: logging (start-up of import blis_fast)

    from numba.core import event  # deferred: numba

    class Notice(event.Listener):
        done = False

        def on_start(self, ev):
            if not self.done and _is_ours((ev.data or {}).get("dispatcher")):
                self.done = True
                logging.getLogger("blis_fast").warning(message + _why_jit())

        def on_end(self, ev):
            pass

    event.register("numba:compile", Notice())


def _why_jit() -> str:
    """Why the kernels compile now although an install compiles them ahead of time (the
    kernels' ``native.status()``), as a notice's last words; '' if that says nothing."""
    try:
        from blis_fast_kernels import native  # deferred: blis_fast_kernels.native

        status = native.status()
    except Exception:  # noqa: BLE001 -- a notice must never break a run
        return ""
    return f" [kernels: {status}]" if status.startswith("JIT") else ""


class _OnImport:
    """A one-shot meta-path finder: when module ``fullname`` is next imported, its code runs
    as ``around(exec_module, module)`` instead of ``exec_module(module)``."""

    def __init__(self, fullname: str, around):
        self.fullname = fullname
        self.around = around

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.fullname:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            return None
        spec = None
        for finder in sys.meta_path:  # the usual search, without this finder
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module, around = loader.exec_module, self.around
        loader.exec_module = lambda module: around(exec_module, module)
        return spec


def _on_import(fullname: str, around) -> None:
    if not any(isinstance(f, _OnImport) and f.fullname == fullname for f in sys.meta_path):
        sys.meta_path.insert(0, _OnImport(fullname, around))


def arm_compile_notice(message: str) -> None:
    """Print ``message`` on stderr when numba first compiles one of our kernels in this
    process (at most once).  numba is not imported for it: the listener is registered
    right after numba's own import."""
    def install():
        try:
            _install_notice(message)
        except Exception:  # noqa: BLE001 -- a notice must never break a run
            pass

    def exec_then_install(exec_module, module):
        exec_module(module)
        install()

    if "numba" in sys.modules:
        install()
    else:
        _on_import("numba", exec_then_install)


class _NoScipyLinalg:
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "scipy.linalg" or fullname.startswith("scipy.linalg."):
            raise ImportError("scipy.linalg is not loaded during numba's set-up (blis_fast.paths)")
        return None


def skip_numba_blas_probe() -> None:
    """For a process that runs only blis-fast's kernels (the ``blis-fast`` command): when
    numba sets up its implementation registry (the first kernel call), its module
    ``numba.np.arraymath`` probes for BLAS by importing ``scipy.linalg`` -- 0.2-0.35 s, a
    fifth of a cached run's start-up, for functions our kernels never use.  This makes that
    one import fail while the module runs, if SciPy's linalg is not loaded yet.  The only
    effect: numba's ``np.correlate``/``np.convolve`` use their plain inner product in this
    process; numba's linear algebra still loads SciPy when it compiles."""
    def without_scipy_linalg(exec_module, module):
        if "scipy.linalg" in sys.modules:
            return exec_module(module)
        blocker = _NoScipyLinalg()
        sys.meta_path.insert(0, blocker)
        try:
            exec_module(module)
        finally:
            sys.meta_path.remove(blocker)

    if "numba.np.arraymath" not in sys.modules:
        _on_import("numba.np.arraymath", without_scipy_linalg)


# numba's names for a function's cache files: the index ``<qualname>-<line>.py<XY>.nbi`` and
# its data ``<qualname>-<line>.py<XY>.<n>.nbc``.  Anything else in a cache folder (a stray
# ``*.nbi`` folder, a symlink, someone's notes) was not written by numba: left alone.
_NUMBA_CACHE_NAME = re.compile(r"^[^/]+-\d+\.py\d+(?:\.\d+)?\.nb[ic]$")
# our own bookkeeping files in the package root's cache folder (blis_fast_kernels.cache)
_BOOKKEEPING = ("blis_fast_kernels.digest", "blis_fast_kernels.checked")
CACHE_DIR_ENV = "NUMBA_CACHE_DIR"
NOTICE_CACHE_DIR = ("blis-fast: NUMBA_CACHE_DIR ignored ({why}); the kernels' cache stays in its default folder")
ignored_cache_dir: str | None = None  # why guard_kernel_cache dropped $NUMBA_CACHE_DIR, if it did


def written_by_numba(path: Path) -> bool:
    """True if ``path`` is a regular file (not a link, not a folder) named as numba names
    cache files: the only entries of a cache folder that healing or clearing touches."""
    if not _NUMBA_CACHE_NAME.match(path.name):
        return False
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _intact_or_foreign(path: Path) -> bool:
    """``intact`` for numba's own cache files; True (leave it be) for anything else."""
    return intact(path) if written_by_numba(path) else True


PATH_MAX = 4096  # bytes of a path (Linux), where os.pathconf cannot say
NAME_MAX = 255  # bytes of one path component (every common Linux file system), likewise


def _limit(folder: str, name: str, default: int) -> int:
    try:
        return int(os.pathconf(folder, name))
    except (OSError, ValueError, AttributeError):
        return default


def path_length_problem(path) -> str | None:
    """What makes ``path`` one the file system cannot hold -- as bytes in the file-system
    encoding, longer than PATH_MAX or a component longer than NAME_MAX (both of the
    nearest existing folder's file system), or a NUL byte -- or None.  (Here, not in
    blis_fast.config, because ``import blis_fast`` needs it and must stay light.)"""
    text = os.fspath(path)
    if "\x00" in text:
        return "holds a NUL byte"
    try:
        whole = os.fsencode(os.path.abspath(text))
    except UnicodeError:
        return "cannot be encoded as a file name"
    anchor = os.path.dirname(os.path.abspath(text)) or "/"
    while not os.path.isdir(anchor) and anchor != os.path.dirname(anchor):
        anchor = os.path.dirname(anchor)
    path_max = _limit(anchor, "PC_PATH_MAX", PATH_MAX)
    if len(whole) >= path_max:
        return f"is {len(whole)} bytes long as a full path; the file system allows {path_max - 1}"
    name_max = _limit(anchor, "PC_NAME_MAX", NAME_MAX)
    longest = max(whole.split(b"/"), key=len)
    if len(longest) > name_max:
        return f"has a name {len(longest)} bytes long; the file system allows {name_max}"
    return None


def cache_dir_problem(value: str | None) -> str | None:
    """Why ``value`` (of $NUMBA_CACHE_DIR) cannot be a cache folder (``path_length_problem``),
    or None."""
    problem = path_length_problem(value) if value else None
    return None if problem is None else f"the path {problem}"


def clear_kernel_cache() -> tuple[int, list[Path]]:
    """Delete the compiled-kernel cache files numba wrote for our kernels (and our record
    files beside them); returns (files removed, entries left alone because numba did not
    write them).  Never raises on what a folder holds: a file that cannot be removed is
    left, a folder that cannot be listed skipped."""
    from blis_fast_kernels.cache import cache_dirs  # deferred: blis_fast_kernels (its import reads NUMBA_CACHE_DIR)

    removed, foreign = 0, []
    folders = cache_dirs()
    for d in folders:
        try:
            entries = [Path(e.path) for e in os.scandir(d)]
        except OSError:
            continue
        for p in entries:
            if written_by_numba(p):
                try:
                    p.unlink()
                    removed += 1
                except OSError:
                    pass
            elif p.name.endswith((".nbi", ".nbc")):
                foreign.append(p)
    for name in _BOOKKEEPING[1:]:  # the record of checked files (the digest stays: it is still true)
        try:
            (folders[0] / name).unlink()
        except OSError:
            pass
    return removed, foreign


def guard_kernel_cache() -> str | None:
    """Run on ``import blis_fast``: remove damaged compiled-kernel cache entries
    (``blis_fast_kernels.cache.heal``; entries numba did not write are left alone:
    ``written_by_numba``) and, if the kernels will have to compile, arm a one-line
    notice on stderr for the moment they start.  A $NUMBA_CACHE_DIR the file system
    cannot hold (``cache_dir_problem``) is dropped from the environment with a notice.
    Returns the damaged file's name, if any.  A warm cache costs ~2 ms here and prints
    nothing."""
    global ignored_cache_dir
    problem = cache_dir_problem(os.environ.get(CACHE_DIR_ENV))
    if problem is not None:
        import logging  # deferred: logging (start-up of import blis_fast)

        ignored_cache_dir = problem
        os.environ.pop(CACHE_DIR_ENV)  # before numba reads it (numba is imported later, on first use)
        logging.getLogger("blis_fast").warning(NOTICE_CACHE_DIR.format(why=problem))
    from blis_fast_kernels import cache  # deferred: blis_fast_kernels -- its import reads NUMBA_CACHE_DIR, checked above

    if os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
        return None  # nothing compiles or loads
    try:
        damaged = cache.heal(_intact_or_foreign)
    except Exception:  # noqa: BLE001 -- a cache folder nobody can read: numba copes, a run must not fail here
        return None
    if damaged is not None:
        arm_compile_notice(NOTICE_HEALED.format(file=damaged, seconds=COMPILE_SECONDS))
    elif not cache.entry_cached():
        arm_compile_notice(NOTICE.format(seconds=COMPILE_SECONDS))
    return damaged
