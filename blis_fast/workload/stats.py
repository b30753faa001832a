"""Summaries of a workload (``blis-fast workload stats``): counts and rates per client,
tenant and SLO class, length percentiles, sessions, and the ideal prefix hit rate."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from blis_fast.errors import ConfigError, WorkloadError
from blis_fast.workload.formats.rich_trace import is_rich_trace, load_trace
from blis_fast.workload.workload import Workload
from blis_fast.workload.generate import generate_from_spec
from blis_fast.workload.spec import load_spec
from blis_fast.workload.formats.blis_csv import load_blis_trace
from blis_fast_kernels.schema import KeyFlagMode


def _pct(a: np.ndarray) -> dict:
    if a.size == 0:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0}
    q = np.percentile(a, [50, 90, 99])
    return {"mean": round(float(a.mean()), 3), "p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2]),
            "max": int(a.max())}


def workload_stats(wl: Workload) -> dict:
    """Summary of a workload: request counts and rates per client, tenant and SLO class,
    prompt/output length percentiles, sessions, and prefix sharing -- the *ideal* prefix
    hit rate, the fraction of prompt tokens in full prompt blocks whose key occurred in an
    earlier request's sequence keys, prompt or output (an infinite cache that also keeps
    generated blocks, as vLLM's does; the simulated one evicts and is per instance).
    "Earlier" is request order."""
    n = len(wl)
    arr = wl.arrival_us
    indep = arr >= 0
    t0 = int(arr[indep].min()) if indep.any() else 0
    span_s = (int(arr[indep].max()) - t0) / 1e6 if indep.any() else 0.0
    prompt, output = wl.prompt_len, wl.output_len
    bs = wl.block_size
    nk = np.diff(wl.key_offsets)
    keys = wl.block_keys
    from blis_fast_kernels.native import flag_keys  # deferred: blis_fast_kernels.native

    with np.errstate(over="ignore"):  # uint64 wrap-around is intended (NUMBA_DISABLE_JIT)
        repeated = flag_keys(keys, KeyFlagMode.REPEATED)[0].view(bool)  # an earlier occurrence exists
    # (a chained key cannot repeat within one request: its earlier occurrence is in an
    # earlier request, up to 2^-64 collisions)
    owner = np.repeat(np.arange(n), nk)
    in_prompt = np.arange(keys.shape[0]) - np.repeat(wl.key_offsets[:-1], nk) < np.repeat(prompt // bs, nk)
    hit_blocks = np.bincount(owner[repeated & in_prompt], minlength=n)
    session = wl.column("session")
    out = {
        "num_requests": n,
        "independent_requests": int(indep.sum()),
        "closed_loop_followers": int((~indep).sum()),
        "sessions": int(np.unique(session[session >= 0]).size),
        "span_s": span_s,
        "rate_per_s": round(n / span_s, 6) if span_s > 0 else 0.0,
        "block_size": bs,
        "prompt_tokens": _pct(prompt),
        "output_tokens": _pct(output),
        "total_prompt_tokens": int(prompt.sum()),
        "total_output_tokens": int(output.sum()),
        "ideal_prefix_hit_rate": round(float(hit_blocks.sum() * bs / prompt.sum()), 6) if n else 0.0,
    }

    def group(col: str) -> dict:
        ids = wl.column(col)
        names = wl.names.get(col) or [str(i) for i in range(int(ids.max()) + 1 if n else 0)]
        res = {}
        for i, name in enumerate(names):
            m = ids == i
            if not m.any():
                continue
            cnt = int(m.sum())
            s = session[m]
            res[name] = {
                "requests": cnt,
                "share": round(cnt / n, 6),
                "rate_per_s": round(cnt / span_s, 6) if span_s > 0 else 0.0,
                "sessions": int(np.unique(s[s >= 0]).size),
                "prompt_tokens": _pct(prompt[m]),
                "output_tokens": _pct(output[m]),
                "ideal_prefix_hit_rate": round(float(hit_blocks[m].sum() * bs / prompt[m].sum()), 6),
            }
        return res

    out["clients"] = group("client")
    out["tenants"] = group("tenant")
    out["slo_classes"] = group("slo_class")
    return out


def stats_of_file(path: str | Path, block_size: int = 16, seed: int | None = None) -> dict:
    """``workload_stats`` of a rich trace, a BLIS trace CSV or a workload spec (.yaml/.yml,
    generated with ``seed``, default the spec's)."""
    p = Path(path)
    if seed is not None and p.suffix.lower() not in (".yaml", ".yml"):
        raise ConfigError("--seed", "has no effect with a trace: it records its requests, so nothing is drawn at "
                                    "random; the seed applies to a workload spec (.yaml)")
    if p.suffix.lower() in (".yaml", ".yml"):
        wl = generate_from_spec(load_spec(p), seed, block_size)
    elif is_rich_trace(p):
        wl = load_trace(p, block_size)
    else:
        if not p.is_file():
            raise WorkloadError(str(p), "trace file not found")
        wl = load_blis_trace(p, block_size)
    return {"file": str(p), **workload_stats(wl)}
