"""``blis-fast clear-cache``: delete the compiled-kernel cache (blis_fast_kernels.cache); and the
command's lean start-up with cached kernels (``skip_numba_blas_probe``)."""

from __future__ import annotations

import os

import typer

from blis_fast.cli.app import app, printable_path
from blis_fast.paths import skip_numba_blas_probe
from blis_fast import paths
from blis_fast.config.validate import show
from blis_fast.errors import ConfigError
from blis_fast_kernels.cache import cache_dirs

# The command runs only blis-fast's kernels: numba's registry set-up need not load SciPy's
# linear algebra (0.2-0.35 s of every run's start-up; blis_fast.paths.skip_numba_blas_probe).
skip_numba_blas_probe()


@app.command("clear-cache")
def clear_cache() -> None:
    """Delete blis-fast's compiled-kernel cache (in $NUMBA_CACHE_DIR, or next to the kernels).
    Only the files numba wrote are removed; anything else in the folders is left and
    named in a notice.  A $NUMBA_CACHE_DIR the file system cannot hold is an error."""
    # a $NUMBA_CACHE_DIR the file system cannot hold: say so rather than clear the default folder
    problem = paths.ignored_cache_dir or paths.cache_dir_problem(os.environ.get(paths.CACHE_DIR_ENV))
    if problem is not None:
        raise ConfigError(paths.CACHE_DIR_ENV, f"{problem}; nothing was removed")
    removed, foreign = paths.clear_kernel_cache()
    folders = printable_path(cache_dirs()[0].parent)
    typer.echo(f"removed {removed} cache files of blis-fast's kernels (folders: {folders} ...)")
    if foreign:
        typer.echo(f"blis-fast: left {len(foreign)} entries numba did not write (e.g. {show(str(foreign[0]))}); "
                   "remove them by hand if they are yours to remove", err=True)
