"""BLIS blackbox coefficient sets and deployment defaults from ``configs/defaults.yaml`` (docs/semantics.md §5).

A coefficient set is keyed by (model id, GPU, TP, vLLM version); lookups return the
*first* exact match in file order.  Model ids compare case-insensitively, and a request
without an organisation (``llama-3.1-8b-instruct``) matches on the part after the last
``/``.  GPU names go through the alias table of :mod:`blis_fast.config.hardware`.

Reading the file: PyYAML's pure-Python loader takes 0.1-0.3 s on the 42 KB
``defaults.yaml``, so a pre-parsed copy ships beside it, ``defaults.json``
(:func:`write_parsed_copy`; ``tests/config/test_parsed_defaults.py`` keeps the two
identical).  The copy carries the sha256 of the YAML bytes it was made from and is used
only while that still matches, so an edited ``defaults.yaml`` (or another file passed as
``path``) is always read itself -- with libyaml's ``CSafeLoader`` when PyYAML has it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from blis_fast.config.hardware import coefficient_gpu_name
from blis_fast.errors import ConfigError
from blis_fast.paths import configs_dir


def _help(text: str):
    return field(metadata={"help": text})


@dataclass(frozen=True)
class CoefficientSet:
    """One fitted BLIS blackbox latency model."""

    model_id: str = _help("model id as in defaults.yaml (e.g. meta-llama/llama-3.1-8b-instruct)")
    gpu: str = _help("GPU as spelled in defaults.yaml (H100, A100-80)")
    tp: int = _help("tensor parallelism the set was fitted at")
    vllm_version: str = _help("vLLM image the set was fitted on (e.g. vllm/vllm-openai:v0.8.4)")
    alpha: tuple[float, float, float] = _help(
        "α: queueing delay α0 + α1·L µs before a request enters the wait queue; α2 µs per output token")
    beta: tuple[float, float, float] = _help("β: step time β0 + β1·prefill tokens + β2·decode requests, µs")
    total_kv_blocks: int = _help("KV-cache blocks (of 16 tokens) one instance had")


@dataclass(frozen=True)
class DeploymentDefaults:
    """The default GPU / TP / vLLM version BLIS uses for a model (``defaults:`` section)."""

    model_id: str = _help("model id as in defaults.yaml")
    gpu: str = _help("GPU as spelled in defaults.yaml")
    tp: int = _help("tensor parallelism")
    vllm_version: str = _help("vLLM image")


def coefficients_file() -> Path:
    """The shipped coefficient file, ``configs/defaults.yaml``."""
    return configs_dir() / "defaults.yaml"


_REGENERATE = "python -c 'from blis_fast.config.coefficients import write_parsed_copy; write_parsed_copy()'"


def parsed_copy_path(path: str | Path) -> Path:
    """Where the pre-parsed JSON copy of coefficient file ``path`` lives (``defaults.yaml`` ->
    ``defaults.json``)."""
    path = Path(path)
    return path.with_suffix(".json")


def _yaml_load(text: str, source: str):
    import yaml  # deferred: yaml -- only when the pre-parsed copy cannot be used

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 -- a safe loader
    except yaml.YAMLError as e:
        raise ConfigError(source, f"cannot read coefficient file: {e}") from None


def parsed_copy_text(path: str | Path | None = None) -> str:
    """The text of the pre-parsed copy of ``path`` (default: the shipped ``defaults.yaml``):
    the YAML document as JSON, with the sha256 of the YAML bytes it was made from."""
    path = Path(path or coefficients_file())
    raw = path.read_bytes()
    doc = _yaml_load(raw.decode("utf-8"), str(path))
    body = {"source": path.name, "sha256": hashlib.sha256(raw).hexdigest(),
            "generated_by": _REGENERATE, "document": doc}
    return json.dumps(body, indent=1, allow_nan=False) + "\n"


def write_parsed_copy(path: str | Path | None = None) -> Path:
    """(Re)write the pre-parsed copy of ``path`` (default: the shipped ``defaults.yaml``)."""
    path = Path(path or coefficients_file())
    out = parsed_copy_path(path)
    out.write_text(parsed_copy_text(path), encoding="utf-8")
    return out


@lru_cache(maxsize=None)
def load_document(path: str | None = None):
    """The parsed coefficient file (default: the shipped ``defaults.yaml``), once per
    process and file: its pre-parsed JSON copy while that matches the YAML bytes, else the
    YAML itself.  Shared by everything that reads the file (coefficient sets, deployment
    defaults, workload presets); do not mutate it."""
    path = str(path or coefficients_file())
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(path, f"cannot read coefficient file: {e}") from None
    try:
        copy = json.loads(parsed_copy_path(path).read_text(encoding="utf-8"))
        if isinstance(copy, dict) and copy.get("sha256") == hashlib.sha256(raw).hexdigest():
            return copy["document"]
    except (OSError, ValueError, KeyError):
        pass  # no usable copy: read the YAML
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(path, f"cannot read coefficient file: {e}") from None
    return _yaml_load(text, path)


def _triple(entry: dict, key: str, where: str) -> tuple[float, float, float]:
    v = entry.get(key)
    if (not isinstance(v, list) or len(v) != 3
            or any(isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) for x in v)):
        raise ConfigError(f"{where}.{key}", f"must be a list of 3 finite numbers, got {v!r}")
    return (float(v[0]), float(v[1]), float(v[2]))


@lru_cache(maxsize=None)
def _parse(path: str) -> tuple[tuple[CoefficientSet, ...], tuple[DeploymentDefaults, ...]]:
    raw = load_document(path)
    if not isinstance(raw, dict):
        raise ConfigError(path, "expected a mapping with 'models' and 'defaults'")
    sets = []
    for i, entry in enumerate(raw.get("models") or []):
        where = f"{path}: models[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(where, "expected a mapping")
        try:
            sets.append(CoefficientSet(
                model_id=str(entry["id"]), gpu=str(entry["GPU"]), tp=int(entry["tensor_parallelism"]),
                vllm_version=str(entry.get("vllm_version", "")),
                alpha=_triple(entry, "alpha_coeffs", where), beta=_triple(entry, "beta_coeffs", where),
                total_kv_blocks=int(entry["total_kv_blocks"])))
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(where, f"missing or invalid key: {e}") from None
    defaults = []
    for model_id, d in (raw.get("defaults") or {}).items():
        try:
            defaults.append(DeploymentDefaults(model_id=str(model_id), gpu=str(d["GPU"]),
                                               tp=int(d["tensor_parallelism"]),
                                               vllm_version=str(d.get("vllm_version", ""))))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{path}: defaults.{model_id}", f"missing or invalid key: {e}") from None
    return tuple(sets), tuple(defaults)


def coefficient_sets(path: str | Path | None = None) -> tuple[CoefficientSet, ...]:
    """All coefficient sets in file order (parsed once per file)."""
    return _parse(str(path or coefficients_file()))[0]


def model_id_matches(requested: str, model_id: str) -> bool:
    """True if ``requested`` names ``model_id`` (the full id, or its name after the last '/')."""
    req = requested.strip().lower()
    mid = model_id.lower()
    if "/" in req:
        return req == mid
    return req == mid.rsplit("/", 1)[-1]


def _version_matches(requested: str | None, version: str) -> bool:
    if requested is None:
        return True
    req, ver = requested.strip().lower(), version.lower()
    return req == ver or req == ver.rsplit(":", 1)[-1] or "v" + req == ver.rsplit(":", 1)[-1]


def find_coefficients(model_id: str, gpu: str, tp: int, vllm_version: str | None = None,
                      path: str | Path | None = None) -> CoefficientSet | None:
    """First set matching (model id, GPU, TP[, vLLM version]) in file order, else None.

    ``vllm_version`` None matches any version; a bare tag (``v0.8.4``) matches the image tag.
    """
    want_gpu = coefficient_gpu_name(gpu).lower()
    for s in coefficient_sets(path):
        if (s.tp == tp and coefficient_gpu_name(s.gpu).lower() == want_gpu
                and model_id_matches(model_id, s.model_id) and _version_matches(vllm_version, s.vllm_version)):
            return s
    return None


def default_deployment(model_id: str, path: str | Path | None = None) -> DeploymentDefaults | None:
    """The ``defaults:`` entry for ``model_id`` (same id matching as find_coefficients), else None."""
    for d in _parse(str(path or coefficients_file()))[1]:
        if model_id_matches(model_id, d.model_id):
            return d
    return None

