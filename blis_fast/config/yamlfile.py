"""The one YAML loader for every file users hand us: run configs, policy bundles, workload
specs and rich-trace headers.

Safe against hostile input: the text is size-limited, and a first pass over the parser's
events (iterative, never recursive) rejects deep nesting, too many nodes, and alias
"bombs" -- the node count includes every alias expansion, so a 400-byte file that expands
to a billion nodes is refused before anything is built.  Only then are Python objects
constructed (safe tags only), and a mapping that repeats a key is an error.  Every
failure is one line naming the file and line.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from blis_fast.config.validate import show
from blis_fast.errors import ConfigError

MAX_YAML_BYTES = 16 * 2**20  # a config, bundle or spec file
MAX_DEPTH = 64  # nested mappings / sequences
MAX_NODES = 500_000  # scalars + collections, counting every alias expansion (at the limit: ~3 s, ~200 MB to load)
MAX_ALIASES = 10_000

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_Loader):
    """The safe loader (libyaml's parser when installed: a 16 MiB file in seconds, not a
    minute) that refuses duplicate keys."""


def _construct_mapping(loader: _StrictLoader, node, deep: bool = False):
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # merged keys (<<: *base) may be overridden; written keys may not repeat
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, "found an unhashable key (a list or mapping)",
                                                    key_node.start_mark) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {show(key)}", key_node.start_mark)
        seen.add(key)
    return yaml.constructor.SafeConstructor.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _where(exc: Exception) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return f" line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""


def _one_line(exc: Exception) -> str:
    msg = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc)
    return " ".join(str(msg).split())[:200]


def _prescan(text: str, where: str, error, max_depth: int, max_nodes: int) -> None:
    """Walk the parser's events: depth, nodes (with alias expansions) and alias counts."""
    anchors: dict[str, int] = {}
    stack: list[list] = []  # [anchor, expanded nodes so far] per open collection
    total = 0
    aliases = 0
    try:
        for ev in yaml.parse(text, Loader=_Loader):
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                if len(stack) >= max_depth:
                    raise error(where, f"nested more than {max_depth} levels deep")
                stack.append([ev.anchor, 1])
                total += 1
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                anchor, size = stack.pop()
                if anchor is not None:
                    anchors[anchor] = size
                if stack:
                    stack[-1][1] += size
            elif isinstance(ev, yaml.ScalarEvent):
                total += 1
                if ev.anchor is not None:
                    anchors[ev.anchor] = 1
                if stack:
                    stack[-1][1] += 1
            elif isinstance(ev, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise error(where, f"more than {MAX_ALIASES} aliases (*name)")
                if any(entry[0] == ev.anchor for entry in stack):
                    raise error(where, f"alias *{ev.anchor} refers to a value that contains it (recursive)")
                size = anchors.get(ev.anchor, 1)
                total += size
                if stack:
                    stack[-1][1] += size
            elif isinstance(ev, yaml.DocumentStartEvent) and total:
                raise error(where, "holds more than one YAML document")
            if total > max_nodes:
                raise error(where, f"more than {max_nodes} values (counting every alias expansion)")
    except yaml.YAMLError as exc:
        raise error(f"{where}{_where(exc)}", f"malformed YAML: {_one_line(exc)}") from None


def load_yaml_text(text: str, where: str, error: type[ConfigError] = ConfigError, *,
                   max_bytes: int = MAX_YAML_BYTES, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES):
    """Parse YAML ``text`` (one document) within the limits; ``error(where ..., message)``
    on anything wrong.  Returns the Python value (None for an empty document)."""
    if len(text) > max_bytes:
        raise error(where, f"is larger than the {max_bytes // 2**20} MiB allowed for YAML ({len(text)} characters)")
    _prescan(text, where, error, max_depth, max_nodes)
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 -- a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise error(f"{where}{_where(exc)}", f"malformed YAML: {_one_line(exc)}") from None
    except RecursionError:  # pragma: no cover -- the depth limit comes first
        raise error(where, "nested too deeply") from None


def read_text_limited(path: str | Path, flag: str, error: type[ConfigError] = ConfigError, *,
                      max_bytes: int = MAX_YAML_BYTES) -> str:
    """The UTF-8 text of a user file of at most ``max_bytes`` bytes (one-line errors)."""
    p = Path(path)
    try:
        if not p.is_file():
            raise error(flag, f"file not found: {show(str(p))}" if not p.is_dir() else f"{show(str(p))} is a directory")
        size = p.stat().st_size
        if size > max_bytes:
            raise error(flag, f"{show(str(p))} is larger than the {max_bytes // 2**20} MiB allowed ({size} bytes)")
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise error(flag, f"cannot read {show(str(p))}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise error(flag, f"{show(str(p))} is larger than the {max_bytes // 2**20} MiB allowed")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(flag, f"{show(str(p))} is not UTF-8 text (byte {exc.start})") from None


def read_yaml_mapping(path: str | Path, flag: str, error: type[ConfigError] = ConfigError) -> dict:
    """The mapping in YAML file ``path``; ``error(flag ..., message)`` when the file is
    missing, unreadable, too large, malformed (with its line), not a mapping, or beyond
    the loader's limits."""
    p = Path(path)
    text = read_text_limited(p, flag, error)
    data = load_yaml_text(text, f"{flag} {show(str(p))}", error)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise error(f"{flag} {show(str(p))}", "must be a mapping of settings")
    return data
