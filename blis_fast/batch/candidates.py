"""Policy candidates of a batch: bundle YAML text, a parsed bundle (dict), a bundle file
(``.yaml``/``.yml``) or a policy program (``.py``, run by ``batch.program``).

Loading never raises for a bad candidate: ``load_candidate`` returns a Candidate whose
``error`` holds (status, one-line message) and whose row in the batch says why, so one
malformed candidate among thousands costs nothing but its own row.  A good candidate holds
its policy settings (``PolicyConfig`` fields); each scenario's own policy settings fill in
what the candidate leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from dataclasses import replace

from blis_fast.config.policy import PolicyConfig, bundle_to_settings
from blis_fast.config.validate import show
from blis_fast.config.yamlfile import load_yaml_text, read_text_limited
from blis_fast.errors import BlisFastError
from blis_fast.batch.program import check_timeout
from blis_fast.batch.program import ProgramError
from blis_fast.errors import ConfigError
from blis_fast.batch.program import TIMEOUT_S, run_policy_program

BUNDLE_SUFFIXES = (".yaml", ".yml")
PROGRAM_SUFFIXES = (".py",)
INVALID = "invalid_policy"  # the candidate's text or values are wrong
PROGRAM_FAILED = "program_error"  # a .py program raised, looped or ran out of memory


@dataclass(frozen=True)
class Candidate:
    """One policy candidate: ``settings`` (PolicyConfig fields it sets) or ``error``
    (status, message) when it cannot be used."""

    id: str
    settings: dict | None = None
    error: tuple[str, str] | None = None


def load_candidate(source: Any, candidate_id: str, program_timeout_s: float | None = None) -> Candidate:
    """A Candidate from bundle YAML text, a bundle dict, or a file path (``Path``, or a
    string naming an existing ``.yaml``/``.yml``/``.py`` file).  Never raises for bad
    content; a bad ``program_timeout_s`` (seconds a ``.py`` program may take, a number
    in (0, 3600]; None = 10) is a ConfigError."""
    if program_timeout_s is not None:  # a bad argument, not a bad candidate: raised
        check_timeout(program_timeout_s)
    try:
        if isinstance(source, Candidate):
            return source
        if isinstance(source, Path) or (isinstance(source, str) and _names_file(source)):
            return _from_file(Path(source), candidate_id, program_timeout_s)
        if isinstance(source, str):
            data = load_yaml_text(source, "policy bundle")
            return Candidate(candidate_id, settings_of(data, "policy bundle", looks_like_path=_looks_like_path(source)))
        if isinstance(source, Mapping):
            return Candidate(candidate_id, settings_of(dict(source), "policy bundle"))
        return Candidate(candidate_id, error=(INVALID, f"a candidate must be bundle YAML text, a dict or a file path, "
                                                       f"got {show(source)}"))
    except BlisFastError as exc:
        return Candidate(candidate_id, error=(PROGRAM_FAILED if isinstance(exc, ProgramError) else INVALID,
                                              _one_line(str(exc))))


def settings_of(data: Any, where: str, looks_like_path: bool = False) -> dict:
    """The PolicyConfig fields a parsed bundle sets, validated (ConfigError naming the
    bundle path otherwise).  A ``fitness`` section is refused: a candidate is scored by
    its batch's objectives, so its own weights would change nothing."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        hint = " (if it is a file name: no such .yaml/.yml/.py file)" if looks_like_path else ""
        raise ConfigError(where, f"must be a mapping of policy sections (admission, routing, priority, scheduler, "
                                 f"preemption, observability), got {show(data)}{hint}")
    if "fitness" in data:
        raise ConfigError(f"{where}: fitness", "not allowed in a candidate: candidates are scored by the batch's "
                                              "objectives; remove the fitness section")
    settings = bundle_to_settings(data, where)
    PolicyConfig(**settings)  # every value checked now, not per scenario
    return settings


def program_settings(value: Any, where: str) -> dict:
    """The PolicyConfig fields of what a program's get_policy() (or POLICY) returned: a
    bundle dict, or bundle YAML text; anything else -- None, a list, a number, text that
    is not a mapping -- is a ConfigError saying what it returned."""
    expected = ("it must return the policy bundle as a dict (or bundle YAML text), e.g. "
                "{'routing': {'type': 'least-loaded'}}")
    if isinstance(value, str):
        data = load_yaml_text(value, where)
        if not isinstance(data, dict):
            raise ConfigError(where, f"returned text that is not a bundle mapping (it holds {show(data, 60)}); "
                                     f"{expected}")
        return settings_of(data, where)
    if not isinstance(value, dict):
        raise ConfigError(where, f"returned {show(value, 60)} ({type(value).__name__}); {expected}")
    return settings_of(value, where)


def merged_policy(base: PolicyConfig, settings: dict) -> PolicyConfig:
    """The scenario's policy settings overridden by the candidate's."""
    return replace(base, **settings)


def _names_file(text: str) -> bool:
    return "\n" not in text and text.endswith(BUNDLE_SUFFIXES + PROGRAM_SUFFIXES) and Path(text).is_file()


def _looks_like_path(text: str) -> bool:
    return "\n" not in text and ":" not in text and text.strip().endswith(BUNDLE_SUFFIXES + PROGRAM_SUFFIXES)


def _from_file(path: Path, candidate_id: str, program_timeout_s: float | None) -> Candidate:
    if path.suffix in PROGRAM_SUFFIXES:
        data = run_policy_program(path, TIMEOUT_S if program_timeout_s is None else program_timeout_s)
        return Candidate(candidate_id, program_settings(data, f"get_policy() of {path.name}"))
    if path.suffix not in BUNDLE_SUFFIXES:
        raise ConfigError(str(path), "a candidate file must be a .yaml/.yml policy bundle or a .py policy program")
    text = read_text_limited(path, "policy bundle")
    return Candidate(candidate_id, settings_of(load_yaml_text(text, path.name), path.name))


def _one_line(text: str, limit: int = 500) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def candidate_files(paths: list[str | Path]) -> list[Path]:
    """The candidate files named by ``paths``: files as given, folders expanded to their
    ``.yaml``/``.yml``/``.py`` files (sorted by name, not recursive).  ConfigError
    (``--policies``) for a missing path or a folder without candidates."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in BUNDLE_SUFFIXES + PROGRAM_SUFFIXES)
            if not found:
                raise ConfigError("--policies", f"folder {show(str(p))} holds no .yaml, .yml or .py candidates")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise ConfigError("--policies", f"no such file or folder: {show(str(p))}")
    return out


def candidate_ids(sources: list[Any]) -> list[str]:
    """Row names of a candidate list: a file's name without its suffix (its path when two
    files share a name), ``candidate_<i>`` for text and dicts."""
    names = [Path(s).stem if isinstance(s, Path) or (isinstance(s, str) and _names_file(s)) else None
             for s in sources]
    ids = []
    for i, (src, name) in enumerate(zip(sources, names)):
        if isinstance(src, Candidate):
            ids.append(src.id)
        elif name is None:
            ids.append(f"candidate_{i}")
        else:
            ids.append(name if names.count(name) == 1 else str(src))
    return ids
