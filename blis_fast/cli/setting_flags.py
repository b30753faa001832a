"""The setting options of ``blis-fast run`` (and of the studies, blis_fast/cli/runflags.py),
built from one table: ``config.sim.FLAG_PATHS`` (flat name -> YAML path, in help order;
a path's later names are aliases of its first) and the dataclass fields it points to
(type, help text, default, metavar; ``cli_app.option``).  A setting added to the config
and to FLAG_PATHS becomes a flag of every such command, with nothing to repeat here.

``with_setting_flags(before=...)(command)`` gives a command whose own parameters end in
``**settings`` a signature typer reads: its own options with one option per setting
inserted before the parameter ``before`` (help lists options in signature order within
each group).
"""

from __future__ import annotations

import functools
import inspect
from typing import Annotated, Optional

import typer

from blis_fast.cli.app import field_help, option, panel_of, setting_field
from blis_fast.config.sim import FLAG_PATHS


def setting_names() -> dict[str, list[str]]:
    """Each CLI setting's parameter name -> its flag names (the first is the setting's own,
    the others its aliases), in FLAG_PATHS order; YAML-only fields (``cli=False``) left out."""
    by_path: dict[str, list[str]] = {}
    for flat, path in FLAG_PATHS.items():
        by_path.setdefault(path, []).append(flat)
    out = {}
    for flats in by_path.values():
        f = setting_field(flats[0])
        if f is not None and f.metadata.get("cli", True) is False:
            continue
        out[flats[0]] = ["--" + name.replace("_", "-") for name in flats]
    return out


def _parameter(name: str, flags: list[str]) -> inspect.Parameter:
    """The typer parameter of one setting: a value option (parsed by the config's own
    checkers), an on/off pair for a setting that defaults to on, a bare switch for one
    that defaults to off."""
    f = setting_field(name)
    kind = inspect.Parameter.KEYWORD_ONLY
    if str(f.type).replace(" | None", "").strip() != "bool":
        return inspect.Parameter(name, kind, default=None, annotation=Annotated[Optional[str], option(*flags)])
    text = field_help(name)
    if f.default is False:
        return inspect.Parameter(name, kind, default=False, annotation=Annotated[bool, typer.Option(
            *flags, rich_help_panel=panel_of(name), help=text)])
    stem = name.removeprefix("enable_").replace("_", "-")
    off = f"--disable-{stem}" if name.startswith("enable_") else f"--no-{stem}"
    return inspect.Parameter(name, kind, default=None, annotation=Annotated[Optional[bool], typer.Option(
        f"{flags[0]}/{off}", *flags[1:], rich_help_panel=panel_of(name), help=text, show_default=False)])


@functools.cache
def setting_parameters() -> tuple[inspect.Parameter, ...]:
    """One keyword-only parameter per CLI setting, in FLAG_PATHS order."""
    return tuple(_parameter(name, flags) for name, flags in setting_names().items())


def with_setting_flags(before: str):
    """Decorator: ``command``'s parameters but its ``**settings``, with every setting's
    option (``setting_parameters``) inserted before its parameter ``before``; typer
    passes the settings' values as keywords (into ``**settings``)."""
    def decorate(command):
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
               for p in inspect.signature(command, eval_str=True).parameters.values()
               if p.kind is not inspect.Parameter.VAR_KEYWORD]
        at = [p.name for p in own].index(before)
        taken = {p.name for p in own}
        params = own[:at] + [p for p in setting_parameters() if p.name not in taken] + own[at:]
        command.__signature__ = inspect.Signature(params)
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command
    return decorate


__all__ = ["setting_names", "setting_parameters", "with_setting_flags"]
