"""``blis-fast clear-cache``: delete the compiled-kernel cache (kernels.cache)."""

from __future__ import annotations

import typer

from blis_fast.cli.app import app


@app.command("clear-cache")
def clear_cache() -> None:
    """Delete blis-fast's compiled-kernel cache (in $NUMBA_CACHE_DIR, or next to the kernels)."""
    from kernels.cache import cache_dirs, clear

    removed = clear()
    typer.echo(f"removed {removed} cache files of blis-fast's kernels (folders: {cache_dirs()[0].parent} ...)")
