"""Results of a run with KV cache tiers (docs/kv-tiers.md; kernels/kv/tiers.py): where the
prefix hits were found, what was stored, loaded and evicted per tier, how long requests
waited for their loads, and how hard the GPU cache thrashed.

Definitions (per run, over every instance with tiers):

- ``prefix_hit_tokens_gpu`` / ``_cpu`` / ``_disk``: prompt tokens an admission did not
  compute because their blocks were found on the GPU, or loaded from the CPU or disk tier
  (each admission counts, a readmission after a preemption too); ``prefix_query_tokens``
  the prompt tokens admissions looked up; the ``prefix_hit_rate_*`` are their ratios.
- per tier: ``stored_blocks`` the blocks written into it (stores from the GPU into the first
  tier, demotions from the one above into the second), ``loads`` the load transfers out of
  it (one per request and tier), ``loaded_blocks``, ``evictions`` (entries dropped for room;
  an entry evicted from the first tier is demoted to the second when there is one),
  ``write_drops`` (writes not made: the writer's queue full, or every entry pinned by a
  load), ``peak_used_blocks``; bytes are blocks x the block's bytes per TP rank.
- ``load_requests``: requests that loaded from a tier (in a P/D run, by their prefill leg
  too); ``load_wait_mean_ms`` / ``_p99_ms``: per such request, its time waiting for loads --
  from the admission that found the blocks to the end of the last of its transfers
  (latency included), summed over its loads; ``load: step`` loads wait for nothing (their
  time is in the admitting step).
- ``thrashing_rate``: blocks loaded back from a tier / GPU blocks evicted holding shared
  content (``gpu_evictions``: content another request may ask for) -- of the cached blocks
  the GPU cache had to evict, the fraction it later brought back.  Near 0 the
  tiers hold content nobody asks for again; near 1 the working set does not fit on the GPU
  and lives off the tiers.
"""

from __future__ import annotations

import numpy as np

from blis_fast_kernels.schema import N_TIERS

from .metrics import percentile_us

TIER_NAMES = ("cpu", "disk")


def has_tiers(setup) -> bool:
    """True if any pool of the run has KV tiers."""
    return any(p.kv_tiers is not None for d in setup.deployments for p in d.pools)


def tier_names(setup) -> list[list[str]]:
    """Each instance row's tier names, in order."""
    out = []
    for d in setup.deployments:
        for p in d.pools:
            names = [t.name for t in p.kv_tiers.tiers] if p.kv_tiers is not None else []
            out.extend([names] * p.rows)
    return out


def tier_columns(result) -> dict[str, np.ndarray]:
    """Per request row of ``result.state``: tokens loaded from each named tier over the run
    and the summed load wait (µs; -1 = it never loaded).  In a P/D run a request's prefill
    leg (its row + ``pd_base``) loads on the prefill instance: its loads count as the
    request's."""
    st = result.full_state
    n = len(result.state.reqs)
    tr = st.tier_reqs
    names = tier_names(result.setup)
    rows_all = min(len(tr), len(st.reqs))
    inst = st.reqs["instance"][:rows_all]
    bs = np.where(inst >= 0, st.inst["block_size"][np.maximum(inst, 0)], 0).astype(np.int64)
    loaded = {f"loaded_tokens_{name}": np.zeros(rows_all, np.int64) for name in TIER_NAMES}
    for k in range(N_TIERS):
        blocks = tr[f"loaded_blocks_{k}"][:rows_all].astype(np.int64)
        for i, tiers in enumerate(names):
            if k < len(tiers):
                on = inst == i
                loaded[f"loaded_tokens_{tiers[k]}"][on] += blocks[on] * bs[on]
    started = tr["load_start_us"][:rows_all] >= 0
    wait = np.where(started, tr["load_wait_us"][:rows_all], 0).astype(np.int64)
    out = {key: v[:n].copy() for key, v in loaded.items()}
    waited, loads = wait[:n].copy(), started[:n].copy()
    base = int(st.settings[0]["pd_base"])
    if base > 0 and rows_all >= 2 * n:  # fold each prefill leg's loads onto its request
        for key, v in loaded.items():
            out[key] += v[base:base + n]
        waited += wait[base:base + n]
        loads |= started[base:base + n]
    out["load_wait_us"] = np.where(loads, waited, -1)
    return out


TIER_REQUEST_FIELD_TYPES = {"loaded_tokens_cpu": "int64", "loaded_tokens_disk": "int64", "load_wait_ms": "float64"}


def request_fields(result, sel: np.ndarray, missing=None) -> dict[str, list]:
    """The per-request tier fields of rows ``sel``: ``loaded_tokens_cpu``,
    ``loaded_tokens_disk`` and ``load_wait_ms`` (``missing`` for a request that never loaded)."""
    c = tier_columns(result)
    wait = c["load_wait_us"][sel]
    return {"loaded_tokens_cpu": c["loaded_tokens_cpu"][sel].tolist(),
            "loaded_tokens_disk": c["loaded_tokens_disk"][sel].tolist(),
            "load_wait_ms": [x if ok else missing for x, ok in zip((wait / 1000.0).tolist(), (wait >= 0).tolist())]}


def hit_tokens(result) -> dict[str, int]:
    """{"gpu", "cpu", "disk": prompt tokens found there by admissions} and "query"."""
    st = result.full_state
    inst = st.inst
    bs = inst["block_size"].astype(np.int64)
    found = {name: 0 for name in TIER_NAMES}
    for i, tiers in enumerate(tier_names(result.setup)):
        for k, name in enumerate(tiers):
            found[name] += int(st.tiers[i * N_TIERS + k]["hit_blocks"]) * int(bs[i])
    total = int(inst["prefix_hit_tokens"].sum())
    return {"gpu": total - found["cpu"] - found["disk"], **found, "query": int(inst["prefix_query_tokens"].sum())}


def hit_fields(result) -> dict:
    """The cluster summary's tier split of the prefix hits (runs with tiers only)."""
    h = hit_tokens(result)
    q = h["query"]
    out = {f"prefix_hit_tokens_{name}": h[name] for name in ("gpu", *TIER_NAMES)}
    out.update({f"prefix_hit_rate_{name}": h[name] / q if q else 0.0 for name in ("gpu", *TIER_NAMES)})
    return out


def summary(result) -> dict:
    """The ``kv_tiers`` summary group (module docstring: definitions)."""
    st = result.full_state
    names = tier_names(result.setup)
    bytes_per_block = st.kv_tier_inst["block_bytes"]
    out = {"prefix_query_tokens": hit_tokens(result)["query"], **hit_fields(result)}
    tiers = {}
    for name in TIER_NAMES:
        rows = [(i, k) for i, t in enumerate(names) for k, n in enumerate(t) if n == name]
        if not rows:
            continue
        r = np.array([i * N_TIERS + k for i, k in rows], np.int64)
        bb = bytes_per_block[[i for i, _ in rows]]
        t = st.tiers[r]
        tiers[name] = {
            "instances": len(rows),
            "capacity_blocks": int(t["capacity"].sum()),
            "peak_used_blocks": int(t["peak_used"].max()),
            "used_blocks_at_end": int(t["used"].sum()),
            "stored_blocks": int(t["stored"].sum()),
            "stored_bytes": float((t["stored"] * bb).sum()),
            "loads": int(t["loads"].sum()),
            "loaded_blocks": int(t["hit_blocks"].sum()),  # (every block found in a tier is loaded)
            "loaded_bytes": float((t["hit_blocks"] * bb).sum()),
            "evictions": int(t["evictions"].sum()),
            "write_drops": int(t["write_drops"].sum()),
            "load_link_peak": int(t["link_peak"].max()),
        }
    out["tiers"] = tiers
    wait = tier_columns(result)["load_wait_us"]
    waits = wait[wait >= 0]
    out["load_requests"] = int(waits.size)
    out["load_wait_mean_ms"] = float(waits.mean()) / 1000.0 if waits.size else 0.0
    out["load_wait_p99_ms"] = percentile_us(waits, 99) / 1000.0 if waits.size else 0.0
    evicted = int(st.kv_tier_inst["gpu_evictions"].sum())
    brought_back = int(sum(int(st.tiers[i * N_TIERS + k]["hit_blocks"]) for i, t in enumerate(names)
                           for k in range(len(t))))
    out["gpu_evictions"] = evicted
    out["thrashing_rate"] = brought_back / evicted if evicted else 0.0
    return out


def unread_warning(result) -> str | None:
    """One line when the run has KV tiers but never found a block in one: then nothing was
    loaded, and their links and load mode mattered at most through the GPU blocks their
    stores held (the content the GPU cache evicted was never asked for again) -- said, not
    silent.  None otherwise."""
    if not has_tiers(result.setup) or int(result.full_state.tiers["hit_blocks"].sum()) > 0:
        return None
    stored = int(result.full_state.tiers["stored"].sum())
    return (f"blis-fast: warning: the KV tiers were never read ({stored} blocks stored, none found again): no request asked "
            f"for content the GPU cache had evicted, so nothing was loaded and the tiers' links and load mode "
            f"changed nothing but how long stores held GPU blocks; a workload whose reused prefixes outgrow the GPU cache (multi-turn sessions, many prefix "
            f"groups) or a smaller --total-kv-blocks exercises them")


LOAD_BOUND_SHARE = 0.5  # a run is load-bound when loads take at least this share of the loading requests' TTFT


def load_share(result) -> tuple[float, int]:
    """(the loading requests' summed load wait / their summed TTFT, how many they are):
    how much of the TTFT of the requests that loaded from a tier went to loading (``load:
    step`` loads wait for nothing: 0)."""
    c = tier_columns(result)
    ttft = result.latencies["ttft_us"]
    loaded = (c["load_wait_us"] >= 0) & result.latencies["has_first"]
    total = int(ttft[loaded].sum())
    return (int(c["load_wait_us"][loaded].sum()) / total if total > 0 else 0.0), int(loaded.sum())


__all__ = ["LOAD_BOUND_SHARE", "load_share", "unread_warning", "TIER_NAMES", "TIER_REQUEST_FIELD_TYPES", "has_tiers", "hit_fields", "hit_tokens", "request_fields",
           "summary", "tier_columns", "tier_names"]
