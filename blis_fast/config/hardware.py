"""GPU specifications from ``configs/hardware_config.json`` (docs/semantics.md §5) and GPU name aliases.

The BLIS hardware file and the BLIS coefficient file spell the A100 differently
(``A100-SXM`` vs ``A100-80``); :func:`canonical_gpu` maps every accepted spelling to the
hardware-file name and :func:`coefficient_gpu_name` to the coefficient-file name.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from blis_fast.errors import ConfigError
from blis_fast.paths import configs_dir

# lower-case alias -> hardware_config.json name
_ALIASES = {
    "h100": "H100",
    "a100": "A100-SXM",
    "a100-80": "A100-SXM",
    "a100-sxm": "A100-SXM",
}
# hardware_config.json name -> defaults.yaml (coefficient file) name
_COEFFICIENT_NAMES = {"H100": "H100", "A100-SXM": "A100-80"}

# hardware_config.json key -> HardwareConfig field
_KEYS = {
    "TFlopsPeak": "tflops_peak",
    "BwPeakTBs": "bw_peak_tbs",
    "BwEffConstant": "bw_eff_constant",
    "TOverheadMicros": "t_overhead_us",
    "perLayerOverhead": "per_layer_overhead_us",
    "mfuPrefill": "mfu_prefill",
    "mfuDecode": "mfu_decode",
    "allReduceLatency": "all_reduce_latency_us",
    "MemoryGiB": "memory_gib",
}


def _help(text: str):
    return field(metadata={"help": text})


@dataclass(frozen=True)
class HardwareConfig:
    """One GPU type's roofline constants."""

    name: str = _help("GPU name as spelled in hardware_config.json (e.g. H100, A100-SXM)")
    tflops_peak: float = _help("dense peak tensor throughput, TFLOP/s (TFlopsPeak)")
    bw_peak_tbs: float = _help("peak HBM bandwidth, TB/s (BwPeakTBs)")
    bw_eff_constant: float = _help("achievable fraction of peak bandwidth (BwEffConstant)")
    t_overhead_us: float = _help("fixed per-step overhead, µs (TOverheadMicros)")
    per_layer_overhead_us: float = _help("per-layer per-step overhead, µs (perLayerOverhead)")
    mfu_prefill: float = _help("model FLOPs utilisation in prefill (mfuPrefill)")
    mfu_decode: float = _help("model FLOPs utilisation in decode (mfuDecode)")
    all_reduce_latency_us: float = _help("one all-reduce, µs; 2 per layer when TP > 1 (allReduceLatency)")
    memory_gib: float = _help("GPU memory, GiB (MemoryGiB; added by blis-fast, not in BLIS)")

    @property
    def peak_flops(self) -> float:
        """Peak tensor FLOP/s."""
        return self.tflops_peak * 1e12

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Effective memory bandwidth, bytes/s: BwPeakTBs·1e12·BwEffConstant."""
        return self.bw_peak_tbs * 1e12 * self.bw_eff_constant

    @property
    def memory_bytes(self) -> float:
        """GPU memory in bytes (GiB·2^30)."""
        return self.memory_gib * 2.0**30

    @property
    def coefficient_name(self) -> str:
        """This GPU's spelling in the coefficient file (defaults.yaml)."""
        return coefficient_gpu_name(self.name)


def _hardware_file() -> Path:
    return configs_dir() / "hardware_config.json"


@lru_cache(maxsize=None)
def _load_table(path: str) -> dict[str, HardwareConfig]:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(path, f"cannot read hardware table: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(path, "expected a JSON object of GPU name -> specification")
    table = {}
    for gpu, spec in raw.items():
        values = {}
        for key, fname in _KEYS.items():
            v = spec.get(key) if isinstance(spec, dict) else None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"{path}: {gpu}.{key}", f"must be a finite number >= 0, got {v!r}")
            values[fname] = float(v)
        for fname in ("tflops_peak", "bw_peak_tbs", "bw_eff_constant", "mfu_prefill", "mfu_decode", "memory_gib"):
            if values[fname] <= 0:
                raise ConfigError(f"{path}: {gpu}", f"{fname} must be > 0")
        table[gpu] = HardwareConfig(name=gpu, **values)
    return table


def known_gpus() -> list[str]:
    """GPU names in hardware_config.json."""
    return list(_load_table(str(_hardware_file())))


def _resolve(name: str) -> str | None:
    """Hardware-file spelling of ``name`` (aliases, any case), or None if unknown."""
    key = str(name).strip().lower()
    if key in _ALIASES:
        return _ALIASES[key]
    for gpu in known_gpus():
        if gpu.lower() == key:
            return gpu
    return None


def canonical_gpu(name: str) -> str:
    """The hardware_config.json name of ``name`` (H100; A100 = A100-80 = A100-SXM; any case)."""
    gpu = _resolve(name)
    if gpu is None:
        raise ConfigError("hardware", f"unknown GPU {name!r}; known: {', '.join(known_gpus())} "
                                      f"(aliases: {', '.join(sorted(_ALIASES))})")
    return gpu


def coefficient_gpu_name(name: str) -> str:
    """The coefficient-file (defaults.yaml) spelling of ``name``: A100-SXM -> A100-80.

    Unknown names come back unchanged so that coefficient files for other GPUs still match.
    """
    gpu = _resolve(name)
    if gpu is None:
        return str(name)
    return _COEFFICIENT_NAMES.get(gpu, gpu)


def load_hardware(name: str) -> HardwareConfig:
    """The HardwareConfig of GPU ``name`` (aliases accepted); ConfigError('hardware') if unknown."""
    return _load_table(str(_hardware_file()))[canonical_gpu(name)]
