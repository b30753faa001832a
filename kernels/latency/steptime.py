"""Step-time and α-delay kernels (docs/semantics.md §5).

Blackbox: β/α coefficients passed as scalars (they live in the instance table).  Roofline: a float64 parameter vector
built by ``blis_fast.config.latency.roofline_params``; its layout is
``schema.Roofline``.  The engine calls :func:`roofline_entry` once per prefill entry and
sums the three quantities in batch order; the decode entries' sums come from their count
and total context (:func:`roofline_decode_sums`: the same quantities, exact in integers,
so no visit per decode request is needed); then :func:`roofline_step_us`.  Nothing here
allocates.

MoE: ``Roofline.MLP_WIDTH_ACTIVE`` is experts_per_token·expert width + shared width, so FLOPs
count only the experts a token is routed to; ``Roofline.WEIGHT_BYTES`` holds every expert, so
the memory term streams all experts' weights each step (an upper bound that is tight for
batches large enough to touch every expert).
"""

from __future__ import annotations

import numpy as np
from ..jit import helper
from ..schema import Roofline

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
    layers = params[Roofline.LAYERS]
    d = params[Roofline.HIDDEN]
    h = params[Roofline.HEADS]
    d_head = params[Roofline.HEAD_DIM]
    d_q = params[Roofline.Q_DIM]
    d_kv = params[Roofline.KV_DIM]
    d_ff = params[Roofline.MLP_WIDTH_ACTIVE]
    # mean attended context of the t new tokens (causal: token i sees s + i earlier ones)
    c = s if t <= 1.0 else s + (t - 1.0) / 2.0
    gemm = layers * (2.0 * t * (d * d_q + 2.0 * d * d_kv) + 2.0 * t * d_q * d
                     + 4.0 * h * t * c * d_head + 2.0 * t * 3.0 * d * d_ff)
    vector = layers * (5.0 * h * t * c + 2.0 * t * d)
    dynamic = params[Roofline.KV_BYTES_PER_TOKEN] * (s + t) + params[Roofline.ACT_BYTES_PER_TOKEN] * t
    return gemm, vector, dynamic


@helper
def roofline_decode_sums(params, n_dec, ctx_sum):
    """(gemm FLOPs, vector FLOPs, dynamic bytes) of ``n_dec`` decode entries (one new token
    each) whose contexts add up to ``ctx_sum``: Σ roofline_entry(s, 1), from two integers."""
    n = np.float64(n_dec)
    cs = np.float64(ctx_sum)
    layers = params[Roofline.LAYERS]
    d = params[Roofline.HIDDEN]
    h = params[Roofline.HEADS]
    d_head = params[Roofline.HEAD_DIM]
    d_q = params[Roofline.Q_DIM]
    d_kv = params[Roofline.KV_DIM]
    d_ff = params[Roofline.MLP_WIDTH_ACTIVE]
    gemm = layers * (n * (2.0 * (d * d_q + 2.0 * d * d_kv) + 2.0 * d_q * d + 2.0 * 3.0 * d * d_ff)
                     + 4.0 * h * d_head * cs)
    vector = layers * (5.0 * h * cs + 2.0 * d * n)
    dynamic = params[Roofline.KV_BYTES_PER_TOKEN] * (cs + n) + params[Roofline.ACT_BYTES_PER_TOKEN] * n
    return gemm, vector, dynamic


@helper
def _phase_seconds(params, gemm, vector, dynamic, mfu):
    """max(compute, memory) seconds of one phase from its summed FLOPs and bytes."""
    tp = params[Roofline.TP]
    compute = gemm / tp / (params[Roofline.PEAK_FLOPS] * mfu) + vector / tp / params[Roofline.VECTOR_PEAK_FLOPS]
    memory = (params[Roofline.WEIGHT_BYTES] / tp + dynamic / tp) / params[Roofline.BANDWIDTH]
    return max(compute, memory)


@helper
def roofline_step_us(params, pre_gemm, pre_vec, pre_dyn, n_pre, dec_gemm, dec_vec, dec_dyn, n_dec):
    """Roofline step time in µs (rounded half away from zero) from per-phase sums of roofline_entry."""
    seconds = 0.0
    if n_pre > 0:
        seconds += _phase_seconds(params, pre_gemm, pre_vec, pre_dyn, params[Roofline.MFU_PREFILL])
    if n_dec > 0:
        seconds += _phase_seconds(params, dec_gemm, dec_vec, dec_dyn, params[Roofline.MFU_DECODE])
    x = (1e6 * seconds + params[Roofline.LAYER_OVERHEAD_US] + params[Roofline.ALLREDUCE_US]
         + params[Roofline.STEP_OVERHEAD_US])
    r = np.int64(x)  # trunc; x > 0
    if x - np.float64(r) >= 0.5:
        r += 1
    return r
