"""Numba kernels of blis-fast: state dtypes, event heap, KV cache, batch formation,
policies, engine loop.

numba's on-disk cache revalidates a compiled function only against its *own* source
file, but the engine kernel compiles every helper it calls into itself: after an edit to,
say, ``kvcache.py``, a cached ``engine.simulate_cluster`` would silently keep the old
helper.  So on import we compare a digest of all kernel sources with the one stored next
to the cache and drop this package's cache files when they differ.
"""

import hashlib
import os
from pathlib import Path

_SRC = Path(__file__).resolve().parent
_STAMP = "blis_fast_kernels.digest"


def _sources_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(_SRC.glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _cache_files(cache_dir: Path):
    if not cache_dir.is_dir():
        return []
    if os.environ.get("NUMBA_CACHE_DIR"):  # numba mirrors the source path below the root
        return [p for p in cache_dir.rglob("*.nb[ic]") if "kernels" in p.parent.parts]
    return list(cache_dir.glob("*.nb[ic]"))


def _drop_stale_cache() -> None:
    root = os.environ.get("NUMBA_CACHE_DIR")
    cache_dir = Path(root) if root else _SRC / "__pycache__"
    stamp = cache_dir / _STAMP
    digest = _sources_digest()
    try:
        if stamp.is_file() and stamp.read_text() == digest:
            return
        for p in _cache_files(cache_dir):
            p.unlink(missing_ok=True)
        cache_dir.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
    except OSError:  # a read-only install: numba will not cache there either
        pass


_drop_stale_cache()
