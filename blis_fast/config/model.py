"""Model architecture from a HuggingFace ``config.json`` (docs/semantics.md §5, §6).

Only what the step-time and KV-cache models need: layer/head/MLP sizes, the bytes per
parameter, and the mixture-of-experts (MoE) shape.  Parameter counts cover embeddings,
attention projections and MLP/expert weights; norms, biases and the MoE router are
ignored (< 0.1 % of any shipped model).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from blis_fast.errors import ConfigError
from blis_fast.paths import configs_dir

# torch_dtype -> bytes per parameter (docs/semantics.md §5).
_DTYPE_BYTES = {
    "float32": 4, "fp32": 4,
    "float16": 2, "fp16": 2, "half": 2, "bfloat16": 2, "bf16": 2,
    "int8": 1, "uint8": 1, "fp8": 1, "int4": 1,
}
_QUANT_1_BYTE = {"fp8", "fbgemm_fp8", "awq", "gptq", "bitsandbytes", "mxfp4", "int8", "int4"}


def _help(text: str, default=None):
    """A dataclass field carrying help text (``metadata["help"]``)."""
    if default is None:
        return field(metadata={"help": text})
    return field(default=default, metadata={"help": text})


@dataclass(frozen=True)
class ModelConfig:
    """Transformer shape of one model; validated on construction."""

    name: str = _help("short model name (the configs/models/ folder name or the config's folder)")
    num_layers: int = _help("decoder layers ℓ (num_hidden_layers)")
    hidden_size: int = _help("model width d (hidden_size)")
    num_heads: int = _help("attention (query) heads h (num_attention_heads)")
    num_kv_heads: int = _help("key/value heads h_kv (num_key_value_heads; 0/missing -> h)")
    intermediate_size: int = _help("dense MLP width d_ff (intermediate_size; 0/missing -> 4d)")
    dtype_bytes: int = _help("bytes per weight and KV element b: 4, 2 or 1 (torch_dtype / quantization)")
    head_dim: int = _help("per-head width d_head (explicit head_dim, else d/h)")
    vocab_size: int = _help("vocabulary size (embedding rows)", 0)
    tie_word_embeddings: bool = _help("input embedding and LM head share weights", False)
    num_experts: int = _help("routed experts per MoE layer (0 = dense model)", 0)
    experts_per_token: int = _help("routed experts each token uses (num_experts_per_tok)", 0)
    expert_intermediate_size: int = _help("routed expert MLP width (moe_intermediate_size)", 0)
    shared_expert_intermediate_size: int = _help(
        "total width of the always-active shared expert MLP(s) (0 = none)", 0)

    def __post_init__(self) -> None:
        self.validate()

    # ---- validation -------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ConfigError naming the first invalid field."""
        for fname, lo in (("num_layers", 1), ("hidden_size", 1), ("num_heads", 1),
                          ("num_kv_heads", 1), ("intermediate_size", 1), ("head_dim", 1),
                          ("vocab_size", 0), ("num_experts", 0), ("experts_per_token", 0),
                          ("expert_intermediate_size", 0), ("shared_expert_intermediate_size", 0)):
            v = getattr(self, fname)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ConfigError(f"model.{fname}", f"must be an integer >= {lo}, got {v!r}")
        if self.num_kv_heads > self.num_heads or self.num_heads % self.num_kv_heads:
            raise ConfigError(
                "model.num_kv_heads",
                f"num_key_value_heads must be in [1, num_attention_heads={self.num_heads}] and divide it, "
                f"got {self.num_kv_heads}")
        if self.dtype_bytes not in (1, 2, 4) or isinstance(self.dtype_bytes, bool):
            raise ConfigError("model.dtype_bytes", f"must be one of {{1, 2, 4}}, got {self.dtype_bytes!r}")
        if self.num_experts > 0:
            if not 1 <= self.experts_per_token <= self.num_experts:
                raise ConfigError(
                    "model.experts_per_token",
                    f"num_experts_per_tok must be in [1, num_experts={self.num_experts}] for an MoE model, "
                    f"got {self.experts_per_token}")
            if self.expert_intermediate_size < 1:
                raise ConfigError("model.expert_intermediate_size",
                                  "must be >= 1 for an MoE model (moe_intermediate_size)")

    # ---- derived sizes ----------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model."""
        return self.num_experts > 0

    @property
    def q_dim(self) -> int:
        """Width of the query / attention output (h·d_head; equals d unless head_dim is explicit)."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of K (or V) per token per layer: h_kv·d_head."""
        return self.num_kv_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token over all layers (whole model, not per TP shard): 2·ℓ·h_kv·d_head·b."""
        return 2 * self.num_layers * self.kv_dim * self.dtype_bytes

    @property
    def attention_params_per_layer(self) -> int:
        """Q, K, V and O projection weights of one layer."""
        d = self.hidden_size
        return d * (self.q_dim + 2 * self.kv_dim) + self.q_dim * d

    @property
    def mlp_width_total(self) -> int:
        """Summed gated-MLP width held in memory per layer (all experts + shared for MoE)."""
        if self.is_moe:
            return self.num_experts * self.expert_intermediate_size + self.shared_expert_intermediate_size
        return self.intermediate_size

    @property
    def mlp_width_active(self) -> int:
        """Summed gated-MLP width one token passes through (top-k experts + shared for MoE)."""
        if self.is_moe:
            return self.experts_per_token * self.expert_intermediate_size + self.shared_expert_intermediate_size
        return self.intermediate_size

    @property
    def embedding_params(self) -> int:
        """Input embedding plus LM head (once if tied)."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    @property
    def layer_weight_bytes(self) -> int:
        """Bytes of all decoder-layer weights (every expert; no embeddings): the roofline W."""
        per_layer = self.attention_params_per_layer + 3 * self.hidden_size * self.mlp_width_total
        return self.num_layers * per_layer * self.dtype_bytes

    @property
    def total_params(self) -> int:
        """All parameters: embeddings + attention + MLP (every expert)."""
        per_layer = self.attention_params_per_layer + 3 * self.hidden_size * self.mlp_width_total
        return self.embedding_params + self.num_layers * per_layer

    @property
    def active_params(self) -> int:
        """Parameters one token touches: like total_params but only top-k + shared experts."""
        per_layer = self.attention_params_per_layer + 3 * self.hidden_size * self.mlp_width_active
        return self.embedding_params + self.num_layers * per_layer

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights (total_params·b), used to derive the KV-block budget."""
        return self.total_params * self.dtype_bytes

    # ---- construction -----------------------------------------------------------------
    @classmethod
    def from_hf_dict(cls, cfg: dict, name: str, source: str = "config.json") -> "ModelConfig":
        """Build from a parsed HuggingFace config (``text_config`` keys override top-level ones)."""
        if not isinstance(cfg, dict):
            raise ConfigError(source, "expected a JSON object")
        merged = dict(cfg)
        if isinstance(cfg.get("text_config"), dict):
            merged.update(cfg["text_config"])

        def get(*keys, default=None):
            for k in keys:
                v = merged.get(k)
                if v is not None:
                    return v
            return default

        def need(key: str, fname: str):
            v = merged.get(key)
            if v is None:
                raise ConfigError(f"model.{fname}", f"{source} has no '{key}'")
            return v

        layers = need("num_hidden_layers", "num_layers")
        hidden = need("hidden_size", "hidden_size")
        heads = need("num_attention_heads", "num_heads")
        kv_heads = get("num_key_value_heads", default=0) or heads
        inter = get("intermediate_size", default=0) or (4 * hidden if isinstance(hidden, int) else 0)
        head_dim = get("head_dim", default=0)
        if not head_dim:
            if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 and hidden % heads:
                raise ConfigError("model.hidden_size",
                                  f"hidden_size={hidden} must be divisible by num_attention_heads={heads} "
                                  "when head_dim is not given")
            head_dim = hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 else 0
        n_exp = get("num_local_experts", "num_experts", "n_routed_experts", default=0)
        moe = isinstance(n_exp, int) and n_exp > 0
        moe_inter = get("moe_intermediate_size", default=0) or inter
        shared = get("shared_expert_intermediate_size", default=0)
        if not shared and get("n_shared_experts", default=0):
            shared = get("n_shared_experts") * get("moe_intermediate_size", default=moe_inter)
        return cls(
            name=name,
            num_layers=layers,
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=kv_heads,
            intermediate_size=inter,
            dtype_bytes=_dtype_bytes(merged),
            head_dim=head_dim,
            vocab_size=get("vocab_size", default=0),
            tie_word_embeddings=bool(get("tie_word_embeddings", default=False)),
            num_experts=n_exp if moe else 0,
            experts_per_token=get("num_experts_per_tok", default=0) if moe else 0,
            expert_intermediate_size=moe_inter if moe else 0,
            shared_expert_intermediate_size=shared if moe else 0,
        )

    @classmethod
    def from_json_file(cls, path: str | Path, name: str | None = None) -> "ModelConfig":
        """Read a HuggingFace ``config.json``; ``name`` defaults to its folder's name."""
        path = Path(path)
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError("model", f"file not found: {path}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(str(path), f"malformed JSON: {e}") from None
        return cls.from_hf_dict(cfg, name or path.resolve().parent.name, source=str(path))


def _dtype_bytes(cfg: dict) -> int:
    """Bytes per parameter from ``quantization_config`` (if recognisable) else ``torch_dtype``."""
    q = cfg.get("quantization_config")
    if isinstance(q, dict):
        bits = q.get("bits") or q.get("weight_bits") or q.get("w_bit")
        for group in (q.get("config_groups") or {}).values():  # compressed-tensors
            if isinstance(group, dict) and isinstance(group.get("weights"), dict):
                bits = bits or group["weights"].get("num_bits")
        if isinstance(bits, int) and not isinstance(bits, bool) and 0 < bits <= 8:
            return 1
        if str(q.get("quant_method", "")).lower() in _QUANT_1_BYTE:
            return 1
    raw = cfg.get("torch_dtype", cfg.get("dtype"))
    if raw is None:
        return 2  # HF default for modern checkpoints
    key = str(raw).lower().removeprefix("torch.")
    if key.startswith("float8") or key.startswith("fp8"):
        return 1
    if key not in _DTYPE_BYTES:
        raise ConfigError("model.torch_dtype",
                          f"unknown dtype {raw!r}; expected one of float32, float16, bfloat16, int8, fp8/float8*, int4")
    return _DTYPE_BYTES[key]


def _models_dir() -> Path:
    return configs_dir() / "models"


def known_models() -> list[str]:
    """Short names of the shipped model configs (folders of configs/models/)."""
    d = _models_dir()
    if not d.is_dir():
        return []
    return sorted(p.name for p in d.iterdir() if (p / "config.json").is_file())


def shipped_config_path(model_id: str) -> Path | None:
    """The shipped config.json of model id ``model_id`` (``org/name`` or ``name``, any
    case: its folder is named after the part after the last '/'), else None."""
    short = str(model_id).rstrip("/").rsplit("/", 1)[-1].lower()
    for known in known_models():
        if known.lower() == short:
            return _models_dir() / known / "config.json"
    return None


def names_a_file(name_or_path: str | Path) -> bool:
    """True if ``name_or_path`` is a path to a model config (an existing config.json or a
    folder holding one, or any name ending in .json) rather than a model id."""
    p = Path(name_or_path)
    return p.is_file() or (p.is_dir() and (p / "config.json").is_file()) or str(name_or_path).endswith(".json")


def load_model_config(name_or_path: str | Path) -> ModelConfig:
    """Load a model by path (config.json or its folder) or id (``org/name`` or ``name``, any case)."""
    p = Path(name_or_path)
    if p.is_file():
        return ModelConfig.from_json_file(p)
    if p.is_dir() and (p / "config.json").is_file():
        return ModelConfig.from_json_file(p / "config.json", name=p.resolve().name)
    text = str(name_or_path)
    if text.endswith(".json"):
        raise ConfigError("model", f"file not found: {text}")
    shipped = shipped_config_path(text)
    if shipped is not None:
        return ModelConfig.from_json_file(shipped, name=shipped.parent.name)
    raise ConfigError("model", f"unknown model {text!r}; known: {', '.join(known_models())} "
                               "(or pass a path to a HuggingFace config.json)")

