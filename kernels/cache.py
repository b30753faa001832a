"""Where numba caches this package's compiled kernels, and keeping that cache honest.

numba revalidates a cached function only against its *own* source file, but a kernel
compiles every helper it calls into itself: after an edit to, say, ``kv/cache.py``, a
cached ``engine.loop.run_events`` would silently keep the old helper.  So on import
(``kernels/__init__.py``) we compare a digest of all kernel sources with the one stored
next to the cache and drop this package's cache files when they differ.

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


def _source_dirs() -> list[Path]:
    return sorted({p.parent for p in _SRC.rglob("*.py") if "__pycache__" not in p.parts})


def cache_dirs() -> list[Path]:
    """The folders numba caches this package's kernels in (they may not exist yet)."""
    root = os.environ.get("NUMBA_CACHE_DIR")
    if not root:
        return [d / "__pycache__" for d in _source_dirs()]
    out = []
    for d in _source_dirs():
        sub = os.path.abspath(d)
        out.append(Path(root) / f"{os.path.basename(sub)}_{hashlib.sha1(sub.encode()).hexdigest()}")
    return out


def cache_files() -> list[Path]:
    """numba's index (.nbi) and data (.nbc) files of this package's kernels."""
    return [p for d in cache_dirs() if d.is_dir() for p in d.glob("*.nb[ic]")]


def clear() -> int:
    """Delete this package's cache files; returns how many were removed."""
    n = 0
    for p in cache_files():
        try:
            p.unlink()
            n += 1
        except FileNotFoundError:
            pass
    return n


def sources_digest() -> str:
    """sha256 over every kernel source file (name and bytes)."""
    h = hashlib.sha256()
    for p in sorted(_SRC.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        h.update(str(p.relative_to(_SRC)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def drop_stale() -> None:
    """Clear the cache if the kernel sources changed since it was written."""
    stamp = cache_dirs()[0] / _STAMP  # the package root's cache folder
    digest = sources_digest()
    try:
        if stamp.is_file() and stamp.read_text() == digest:
            return
        clear()
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
    except OSError:  # a read-only install: numba will not cache there either
        pass
