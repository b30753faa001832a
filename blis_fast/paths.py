"""Where the shipped data (model configs, hardware, coefficients) lives."""

from __future__ import annotations

import os
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
    import blis_fast_configs  # installed wheel: configs/ shipped as a data package

    return Path(blis_fast_configs.__file__).resolve().parent
