"""The typer application every command registers on, and the helpers commands share:
option help taken from the config dataclasses (one source of truth), output-path checks."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import typer

from blis_fast.config.engine import EngineConfig
from blis_fast.config.policy import PolicyConfig
from blis_fast.config.sim import FLAG_PATHS, DeploymentConfig, SimConfig, SimulationConfig, WorkloadConfig
from blis_fast.errors import ConfigError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: long BLIS flag names are never truncated
    help="blis-fast: fast, deterministic simulation of vLLM-style LLM inference clusters.",
)

_SECTION_CLASSES = {"engine": EngineConfig, "deployment": DeploymentConfig, "workload": WorkloadConfig,
                    "simulation": SimulationConfig, "policy": PolicyConfig}


def field_help(flag: str) -> str:
    """Help text of a flat setting, taken from its dataclass field (one source of truth)."""
    section, _, name = FLAG_PATHS[flag].rpartition(".")
    cls = _SECTION_CLASSES.get(section, SimConfig)
    for f in fields(cls):
        if f.name == name:
            return f.metadata.get("help", "")
    return ""


def option(*names: str, flag: str | None = None, help: str | None = None):
    key = flag or names[0].lstrip("-").replace("-", "_")
    return typer.Option(*names, help=help if help is not None else field_help(key), show_default=False)


def check_writable(flag: str, path: Path | None) -> None:
    """ConfigError unless ``path`` can be created (its folder exists and is writable)."""
    import os

    if path is None:
        return
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ConfigError(flag, f"{path} is a directory")
    if not parent.is_dir():
        raise ConfigError(flag, f"folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ConfigError(flag, f"folder {parent} is not writable")


