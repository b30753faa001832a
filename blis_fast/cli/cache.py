"""``blis-fast clear-cache``: delete the compiled-kernel cache (blis_fast_kernels.cache); and the
command's lean start-up with cached kernels (``skip_numba_blas_probe``)."""

from __future__ import annotations

import typer

from blis_fast.cli.app import app
from blis_fast.paths import skip_numba_blas_probe

# The command runs only blis-fast's kernels: numba's registry set-up need not load SciPy's
# linear algebra (0.2-0.35 s of every run's start-up; blis_fast.paths.skip_numba_blas_probe).
skip_numba_blas_probe()


@app.command("clear-cache")
def clear_cache() -> None:
    """Delete blis-fast's compiled-kernel cache (in $NUMBA_CACHE_DIR, or next to the kernels)."""
    from blis_fast_kernels.cache import cache_dirs, clear

    removed = clear()
    typer.echo(f"removed {removed} cache files of blis-fast's kernels (folders: {cache_dirs()[0].parent} ...)")
