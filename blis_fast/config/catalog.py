"""What blis-fast knows about each model: its fitted coefficient sets
(``configs/defaults.yaml``) and whether an architecture config ships
(``configs/models/``), for ``blis-fast models`` and for the error of a feature that
needs a model's architecture when none is known.

A blackbox run needs only a coefficient set (or explicit α, β and KV blocks); the
architecture -- layers, heads, KV bytes per token, weights -- is read only by the
roofline latency model, KV blocks derived from GPU memory, KV cache tiers (their block
bytes) and prefill/decode disaggregation (its KV transfer sizes).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from blis_fast.config.coefficients import CoefficientSet, coefficient_sets
from blis_fast.config.model import known_models, shipped_config_path
from blis_fast.config.validate import show
from blis_fast.errors import ConfigError

ARCHITECTURE_FACTS = "layers, hidden size, attention and KV heads, head size, MLP width, weight dtype"


@dataclass(frozen=True)
class KnownModel:
    """One model blis-fast knows: ``name`` its id (as in the coefficient file when it has
    sets there, else its shipped config's folder name), its coefficient sets in file order
    (duplicates dropped) and its shipped config.json (None without one)."""

    name: str
    sets: tuple[CoefficientSet, ...]
    config: Path | None

    @property
    def latency_models(self) -> tuple[str, ...]:
        """The latency models that can run it: blackbox with a coefficient set, roofline
        with a config."""
        return (("blackbox",) if self.sets else ()) + (("roofline",) if self.config is not None else ())

    def as_dict(self) -> dict:
        """Its JSON form (``blis-fast models --json``)."""
        return {"model": self.name, "config": None if self.config is None else self.config.parent.name,
                "latency_models": list(self.latency_models),
                "coefficient_sets": [{"gpu": s.gpu, "tp": s.tp, "vllm_version": s.vllm_version,
                                      "total_kv_blocks": s.total_kv_blocks, "alpha": list(s.alpha),
                                      "beta": list(s.beta)} for s in self.sets]}


def _short(model_id: str) -> str:
    return model_id.rstrip("/").rsplit("/", 1)[-1].lower()


def known_model_list() -> list[KnownModel]:
    """Every known model, sorted by name: each model id of the coefficient file (with its
    shipped config when one's folder is named after the id's last part), then each
    shipped config no id names."""
    by_id: dict[str, list[CoefficientSet]] = {}
    for s in coefficient_sets():
        sets = by_id.setdefault(s.model_id, [])
        if s not in sets:  # (the file repeats some sets verbatim)
            sets.append(s)
    out = [KnownModel(model_id, tuple(sets), shipped_config_path(model_id)) for model_id, sets in by_id.items()]
    named = {_short(m) for m in by_id}
    out += [KnownModel(name, (), shipped_config_path(name)) for name in known_models() if name.lower() not in named]
    return sorted(out, key=lambda m: m.name.lower())


def find_known_model(name: str) -> KnownModel | None:
    """The known model ``name`` names (its full id or its part after the last '/', any
    case), else None."""
    want = name.strip().lower()
    for m in known_model_list():
        if want == m.name.lower() or ("/" not in want and want == _short(m.name)):
            return m
    return None


def did_you_mean(name: str) -> str:
    """`` (did you mean X?)`` naming the known models closest to ``name``, or "" (also
    for a known name)."""
    if find_known_model(name) is not None:
        return ""
    names = {m.name.lower(): m.name for m in known_model_list()}
    shorts = {_short(m): m for m in names.values()}
    want = name.strip().lower()
    close = difflib.get_close_matches(want, list(names), n=3, cutoff=0.6)
    close += [shorts[s] for s in difflib.get_close_matches(_short(want), list(shorts), n=3, cutoff=0.6)]
    close = list(dict.fromkeys(names.get(c, c) for c in close))[:3]
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def architecture_needed(model_id: str, needed_by: str) -> ConfigError:
    """The one-line error of ``needed_by`` (a feature reading a model's architecture) for
    a model without a config: which facts, and how to give them; for a model blis-fast
    does not know at all, the close names or else the shipped configs."""
    if find_known_model(model_id) is not None:
        why = "no config is shipped for it"
    else:
        close = did_you_mean(model_id)
        why = "an unknown model" + (close or f" (shipped configs: {', '.join(known_models())})")
    return ConfigError("model", f"{needed_by} needs the architecture of {show(model_id)} ({ARCHITECTURE_FACTS}), "
                                f"{why}: give its HuggingFace config.json as the model (--model "
                                "path/to/config.json); blis-fast models lists the known models")


__all__ = ["ARCHITECTURE_FACTS", "KnownModel", "architecture_needed", "did_you_mean", "find_known_model",
           "known_model_list"]
