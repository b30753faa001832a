"""Step-time and α-delay kernels (SEMANTICS §5).

Blackbox: β/α coefficients passed as scalars (they live in the instance table).  Roofline: a float64 parameter vector
built by ``blis_fast.config.latency.roofline_params``; its layout is the ``RF_*``
constants below.  The engine loop calls :func:`roofline_entry` once per batch entry,
sums the three quantities per phase (prefill entries, decode entries) and then calls
:func:`roofline_step_us`.  Neither allocates.

MoE: ``RF_MLP_WIDTH_ACTIVE`` is experts_per_token·expert width + shared width, so FLOPs
count only the experts a token is routed to; ``RF_WEIGHT_BYTES`` holds every expert, so
the memory term streams all experts' weights each step (an upper bound that is tight for
batches large enough to touch every expert).
"""

from __future__ import annotations

import numpy as np
from .jit import helper

# ---- roofline parameter vector layout (float64) ----------------------------------------
RF_LAYERS = 0              # ℓ, decoder layers
RF_HIDDEN = 1              # d, model width
RF_HEADS = 2               # h, query heads
RF_HEAD_DIM = 3            # d_head
RF_Q_DIM = 4               # h·d_head (== d unless the config sets head_dim)
RF_KV_DIM = 5              # d_kv = h_kv·d_head
RF_MLP_WIDTH_ACTIVE = 6    # d_ff (dense) or k·d_expert + d_shared (MoE): MLP width per token
RF_KV_BYTES_PER_TOKEN = 7  # 2·ℓ·h_kv·d_head·b, bytes of K+V per token (all layers)
RF_ACT_BYTES_PER_TOKEN = 8  # ℓ·d·b, activation bytes per new token
RF_WEIGHT_BYTES = 9        # W = ℓ·b·(d(d_q + 2d_kv) + d_q·d + 3·d·d_ff_all), bytes (all experts)
RF_TP = 10                 # tensor parallelism
RF_PEAK_FLOPS = 11         # TFlopsPeak·1e12, FLOP/s
RF_VECTOR_PEAK_FLOPS = 12  # 0.1·peak, FLOP/s
RF_BANDWIDTH = 13          # BwPeakTBs·1e12·BwEffConstant, bytes/s
RF_MFU_PREFILL = 14        # MFU of the prefill phase
RF_MFU_DECODE = 15         # MFU of the decode phase
RF_LAYER_OVERHEAD_US = 16  # ℓ·perLayerOverhead, µs
RF_ALLREDUCE_US = 17       # 2ℓ·allReduceLatency if TP > 1 else 0, µs
RF_STEP_OVERHEAD_US = 18   # TOverheadMicros, µs
RF_NPARAMS = 19            # length of the vector


@helper
def blackbox_step_us(beta0, beta1, beta2, n_prefill_tokens, n_decode):
    """Blackbox step time in µs: trunc(β0 + β1·P + β2·D) for P prefill tokens and D decode requests."""
    return np.int64(beta0 + beta1 * np.float64(n_prefill_tokens) + beta2 * np.float64(n_decode))


@helper
def queueing_delay_us(alpha0, alpha1, prompt_len):
    """Arrival-to-queue delay in µs: trunc(α0 + α1·L) for a prompt of L tokens."""
    return np.int64(alpha0 + alpha1 * np.float64(prompt_len))


@helper
def output_token_delay_us(alpha2):
    """Per-output-token processing delay in µs: trunc(α2)."""
    return np.int64(alpha2)


@helper
def roofline_entry(params, s, t):
    """(gemm FLOPs, vector FLOPs, dynamic bytes) of one batch entry with context s and t new tokens."""
    s = np.float64(s)
    t = np.float64(t)
    layers = params[RF_LAYERS]
    d = params[RF_HIDDEN]
    h = params[RF_HEADS]
    d_head = params[RF_HEAD_DIM]
    d_q = params[RF_Q_DIM]
    d_kv = params[RF_KV_DIM]
    d_ff = params[RF_MLP_WIDTH_ACTIVE]
    # mean attended context of the t new tokens (causal: token i sees s + i earlier ones)
    c = s if t <= 1.0 else s + (t - 1.0) / 2.0
    gemm = layers * (2.0 * t * (d * d_q + 2.0 * d * d_kv) + 2.0 * t * d_q * d
                     + 4.0 * h * t * c * d_head + 2.0 * t * 3.0 * d * d_ff)
    vector = layers * (5.0 * h * t * c + 2.0 * t * d)
    dynamic = params[RF_KV_BYTES_PER_TOKEN] * (s + t) + params[RF_ACT_BYTES_PER_TOKEN] * t
    return gemm, vector, dynamic


@helper
def _phase_seconds(params, gemm, vector, dynamic, mfu):
    """max(compute, memory) seconds of one phase from its summed FLOPs and bytes."""
    tp = params[RF_TP]
    compute = gemm / tp / (params[RF_PEAK_FLOPS] * mfu) + vector / tp / params[RF_VECTOR_PEAK_FLOPS]
    memory = (params[RF_WEIGHT_BYTES] / tp + dynamic / tp) / params[RF_BANDWIDTH]
    return max(compute, memory)


@helper
def roofline_step_us(params, pre_gemm, pre_vec, pre_dyn, n_pre, dec_gemm, dec_vec, dec_dyn, n_dec):
    """Roofline step time in µs (rounded half away from zero) from per-phase sums of roofline_entry."""
    seconds = 0.0
    if n_pre > 0:
        seconds += _phase_seconds(params, pre_gemm, pre_vec, pre_dyn, params[RF_MFU_PREFILL])
    if n_dec > 0:
        seconds += _phase_seconds(params, dec_gemm, dec_vec, dec_dyn, params[RF_MFU_DECODE])
    x = (1e6 * seconds + params[RF_LAYER_OVERHEAD_US] + params[RF_ALLREDUCE_US]
         + params[RF_STEP_OVERHEAD_US])
    r = np.int64(x)  # trunc; x > 0
    if x - np.float64(r) >= 0.5:
        r += 1
    return r
