"""Reading the YAML files users hand us (run configs, policy bundles, workload specs)."""

from __future__ import annotations

from pathlib import Path

import yaml

from blis_fast.errors import ConfigError


def read_yaml_mapping(path: str | Path, flag: str, error: type[ConfigError] = ConfigError) -> dict:
    """The mapping in YAML file ``path``; ``error(flag ..., message)`` when the file is
    missing, unreadable, malformed (with its line) or not a mapping."""
    p = Path(path)
    if not p.is_file():
        raise error(flag, f"file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise error(f"{flag} {p}{where}", f"malformed YAML: {getattr(exc, 'problem', exc)}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(flag, f"cannot read {p}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise error(f"{flag} {p}", "must be a mapping of settings")
    return data
