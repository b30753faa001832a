"""Reference for kernels/latency/steptime.py: docs/semantics.md §5 written out directly."""

from __future__ import annotations

import math


def naive_blackbox_us(beta, n_prefill_tokens: int, n_decode: int) -> int:
    """trunc(β0 + β1·P + β2·D)."""
    return int(beta[0] + beta[1] * float(n_prefill_tokens) + beta[2] * float(n_decode))


def naive_roofline_us(model, hw, tp, prefills, decodes) -> int:
    """Roofline step time (dense model, d_q = d) of prefill entries (context s, new tokens
    t) and decode contexts, from the model and hardware configs, rounded half up."""
    l, d, h, hkv, dff, b = (model.num_layers, model.hidden_size, model.num_heads, model.num_kv_heads,
                            model.intermediate_size, model.dtype_bytes)
    dh = d / h
    dkv = hkv * dh
    peak = hw.tflops_peak * 1e12
    bw = hw.bw_peak_tbs * 1e12 * hw.bw_eff_constant
    w = l * b * (d * (d + 2 * dkv) + d * d + 3 * d * dff)
    total = 0.0
    for entries, mfu in ((prefills, hw.mfu_prefill), ([(s, 1) for s in decodes], hw.mfu_decode)):
        if not entries:
            continue
        g = v = m = 0.0
        for s, t in entries:
            c = s if t <= 1 else s + (t - 1) / 2
            g += l * (2 * t * (d * d + 2 * d * dkv) + 2 * t * d * d + 4 * h * t * c * dh + 2 * t * 3 * d * dff)
            v += l * (5 * h * t * c + 2 * t * d)
            m += 2 * l * hkv * dh * b * (s + t) + l * d * b * t
        total += max(g / tp / (peak * mfu) + v / tp / (0.1 * peak), (w / tp + m / tp) / bw)
    x = 1e6 * total + l * hw.per_layer_overhead_us + (2 * l * hw.all_reduce_latency_us if tp > 1 else 0)
    x += hw.t_overhead_us
    return math.floor(x + 0.5)
