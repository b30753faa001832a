"""Where numba caches this package's compiled kernels, and keeping that cache honest.

numba revalidates a cached function only against its *own* source file, but a kernel
compiles every helper it calls into itself: after an edit to, say, ``kv/cache.py``, a
cached ``engine.loop.run_events`` would silently keep the old helper.  So on import
(``kernels/__init__.py``) we compare a digest of all kernel sources with the one stored
next to the cache and drop this package's cache files when they differ (``drop_stale``).

This module also finds what the first-run notice and self-healing need, with nothing but
the file system (both are driven by ``blis_fast.paths.guard_kernel_cache`` when
``blis_fast`` is imported; neither imports numba):

* ``entry_cached``: whether the main entry kernel ``engine.loop.run_events`` has a cache
  index (if not, the next run compiles);
* ``heal(intact)``: numba unpickles a cache file without catching errors, so one
  truncated or overwritten ``.nbi``/``.nbc`` file would fail every later run.  ``heal``
  passes each cache file not yet seen intact to ``intact`` and records intact files by
  (size, mtime) in ``blis_fast_kernels.checked``, so a warm start only lists the folders
  (~2 ms); a damaged file clears this package's cache, and the kernels compile again.

numba writes the cache of the functions in folder D to ``D/__pycache__``, or, when
``NUMBA_CACHE_DIR`` is set, to ``$NUMBA_CACHE_DIR/<basename of D>_<sha1 of D's path>``;
``cache_dirs`` lists exactly those folders, so clearing never touches other packages'
caches.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_SRC = Path(__file__).resolve().parent
_STAMP = "blis_fast_kernels.digest"
_CHECKED = "blis_fast_kernels.checked"
ENTRY_KERNEL = ("engine", "loop.run_events-")  # (source folder, index file prefix) of the main entry kernel


def _source_dirs() -> list[Path]:
    return sorted({p.parent for p in _SRC.rglob("*.py") if "__pycache__" not in p.parts})


def _cache_dir(source: Path) -> Path:
    """Where numba caches the kernels defined in folder ``source``."""
    root = os.environ.get("NUMBA_CACHE_DIR")
    if not root:
        return source / "__pycache__"
    sub = os.path.abspath(source)
    return Path(root) / f"{os.path.basename(sub)}_{hashlib.sha1(sub.encode()).hexdigest()}"


def cache_dirs() -> list[Path]:
    """The folders numba caches this package's kernels in (they may not exist yet); the
    package root's folder first."""
    return [_cache_dir(d) for d in _source_dirs()]


def cache_files() -> list[Path]:
    """numba's index (.nbi) and data (.nbc) files of this package's kernels: regular files
    only (a folder or a symlink named ``*.nbi`` is not numba's, and is left alone)."""
    out = []
    for d in cache_dirs():
        try:
            entries = list(os.scandir(d))
        except OSError:  # missing, unreadable, or a path the file system cannot hold
            continue
        out += [Path(e.path) for e in entries if e.name.endswith((".nbi", ".nbc")) and _regular(e)]
    return out


def _regular(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def clear() -> int:
    """Delete this package's cache files; returns how many were removed (a file that
    cannot be removed is left: clearing never fails on what a folder holds)."""
    n = 0
    for p in cache_files():
        try:
            p.unlink()
            n += 1
        except OSError:
            pass
    try:
        (cache_dirs()[0] / _CHECKED).unlink()
    except OSError:
        pass
    return n


def sources_digest() -> str:
    """sha256 over every kernel source file (name and bytes); this file, which holds no
    kernel, is left out, so editing it does not recompile everything."""
    h = hashlib.sha256()
    this = Path(__file__).resolve()
    for p in sorted(_SRC.rglob("*.py")):
        if "__pycache__" in p.parts or p == this:
            continue
        h.update(str(p.relative_to(_SRC)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def drop_stale() -> bool:
    """Clear the cache if the kernel sources changed since it was written; True if it did."""
    stamp = cache_dirs()[0] / _STAMP  # the package root's cache folder
    digest = sources_digest()
    try:
        if stamp.is_file() and stamp.read_text() == digest:
            return False
        clear()
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
        return True
    except OSError:  # a read-only install: numba will not cache there either
        return False


# ----------------------------------------------------------------------------- damaged files (heal)


def _listing() -> dict[str, tuple[int, int]]:
    """{path: (size, mtime_ns)} of this package's cache files."""
    out = {}
    for d in cache_dirs():
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.name.endswith((".nbi", ".nbc")) and _regular(e):
                try:
                    st = e.stat()
                except OSError:
                    continue
                out[e.path] = (st.st_size, st.st_mtime_ns)
    return out


def _read_checked(record: Path) -> dict[str, tuple[int, int]]:
    """The record of intact files: one ``size mtime_ns path`` line each."""
    out = {}
    try:
        for line in record.read_text().splitlines():
            size, mtime, path = line.split(" ", 2)
            out[path] = (int(size), int(mtime))
    except (OSError, ValueError):
        return {}
    return out


def _entry_files(path: Path) -> list[Path]:
    """The files of the cache entry ``path`` belongs to: one function's index
    ``mod.func-LINE.pyXY.nbi`` and its data files ``mod.func-LINE.pyXY.N.nbc`` (the index
    names the data files, so neither is usable without the other)."""
    stem = path.name.split(".py", 1)[0]  # "mod.func-LINE"
    parts = path.name[len(stem):].split(".")
    if len(parts) < 3:  # not in numba's naming: only the file itself
        return [path]
    tag = parts[1]  # "pyXY"
    return [p for p in path.parent.glob(f"{stem}.{tag}*") if p.name.endswith((".nbi", ".nbc"))]


def heal(intact) -> str | None:
    """Pass every cache file not yet seen intact to ``intact`` (Path -> bool); remove each
    damaged file's whole entry (that function alone then recompiles: a damaged helper does
    not cost a full compile) and return the first damaged file's name (else None).  Intact
    files are recorded in ``blis_fast_kernels.checked`` so that they are not checked again."""
    root = cache_dirs()[0]
    record = root / _CHECKED
    checked = _read_checked(record)
    now = _listing()
    fresh = sorted(name for name, sig in now.items() if checked.get(name) != sig)
    if not fresh:
        return None
    damaged = None
    for name in fresh:
        path = Path(name)
        if path.exists() and not intact(path):
            damaged = damaged or path.name
            for f in _entry_files(path):
                try:
                    f.unlink()
                except OSError:
                    pass
    if damaged is not None:
        now = _listing()  # without the removed entries
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = record.with_name(f"{record.name}.{os.getpid()}.tmp")
        tmp.write_text("".join(f"{size} {mtime} {path}\n" for path, (size, mtime) in sorted(now.items())))
        os.replace(tmp, record)
    except OSError:
        pass
    return damaged


# ----------------------------------------------------------------------------- cold cache


def entry_cached() -> bool:
    """True if the main entry kernel (``engine.loop.run_events``) has a cache index."""
    folder, prefix = ENTRY_KERNEL
    d = _cache_dir(_SRC / folder)
    try:
        return any(n.startswith(prefix) and n.endswith(".nbi") for n in os.listdir(d))
    except OSError:
        return False
