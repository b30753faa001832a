"""Validated configuration: model shapes, GPUs, engine settings, BLIS coefficients, latency model.

Importing this package does not import numba (``roofline_params`` loads the kernel module
on first use), so config validation and ``--help`` stay instant.
"""

from blis_fast.config.coefficients import (
    CoefficientSet,
    DeploymentDefaults,
    coefficient_sets,
    coefficients_file,
    default_deployment,
    find_coefficients,
)
from blis_fast.config.engine import EngineConfig
from blis_fast.config.hardware import (
    HardwareConfig,
    canonical_gpu,
    coefficient_gpu_name,
    known_gpus,
    load_hardware,
)
from blis_fast.config.latency import (
    LATENCY_MODELS,
    LatencyModel,
    derive_kv_blocks,
    resolve_latency_model,
    roofline_params,
)
from blis_fast.config.model import ModelConfig, known_models, load_model_config

__all__ = [
    "CoefficientSet", "DeploymentDefaults", "coefficient_sets", "coefficients_file", "default_deployment",
    "find_coefficients", "EngineConfig", "HardwareConfig", "canonical_gpu", "coefficient_gpu_name",
    "known_gpus", "load_hardware", "LATENCY_MODELS", "LatencyModel", "derive_kv_blocks",
    "resolve_latency_model", "roofline_params", "ModelConfig", "known_models", "load_model_config",
]
