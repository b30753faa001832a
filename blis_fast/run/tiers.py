"""The State rows of KV cache tiers (kernels/kv/tiers.py, kernels/engine/tiers.py): each
instance's tier settings and the sizes of the tiers' tables.

A pool's tiers (``ResolvedPool.kv_tiers``, blis_fast/config/kv_tiers.py) apply to each of
its instances.  A tier of C blocks holds each shared key value at most once, so its
entries and hash rows are sized by min(C, the workload's distinct shared key values): a
terabyte disk tier costs memory only for the content a run can put in it.  Tier 0's write
queue holds at most one store per GPU block (a store pins its block); tier k's queue of
demotions from tier k - 1 holds as many as tier k - 1 has entries (more are dropped and
counted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from blis_fast_kernels import schema as S
from blis_fast.run.sizing import next_pow2

GB_PER_S_TO_BYTES_PER_US = 1e3  # 1 GB/s = 1e9 bytes / 1e6 µs


@dataclass(frozen=True)
class TierLayout:
    """Per instance row and tier (arrays of shape (n_inst, N_TIERS)): entries, hash rows and
    write-queue rows, and the totals (at least 1 / 2 / 1: the fields keep their types)."""

    capacity: np.ndarray
    slot_rows: np.ndarray
    ht_rows: np.ndarray
    wr_cap: np.ndarray

    @property
    def enabled(self) -> bool:
        return bool(self.capacity.any())


def pool_tiers(fl) -> list:
    """Each instance row's ResolvedKvTiers (None: no tiers)."""
    out = []
    for tiers, rows in zip(fl.tiers, fl.rows):
        out.extend([tiers] * rows)
    return out


def tier_layout(fl, n_shared: int) -> TierLayout:
    n_inst = fl.n_inst
    shape = (n_inst, S.N_TIERS)
    capacity, slot_rows, ht_rows, wr_cap = (np.zeros(shape, np.int64) for _ in range(4))
    kv_total = [lat.total_kv_blocks for lat, rows in zip(fl.latencies, fl.rows) for _ in range(rows)]
    for i, tiers in enumerate(pool_tiers(fl)):
        if tiers is None:
            continue
        for k, tier in enumerate(tiers.tiers):
            capacity[i, k] = tier.blocks
            slot_rows[i, k] = max(1, min(tier.blocks, n_shared))
            ht_rows[i, k] = next_pow2(2 * slot_rows[i, k])
            wr_cap[i, k] = kv_total[i] if k == 0 else slot_rows[i, k - 1]
    return TierLayout(capacity, slot_rows, ht_rows, wr_cap)


def tier_sizes(layout: TierLayout, n_request_rows: int, n_blocks: int) -> dict[str, int]:
    """The State sizes of the tiers (schema.state.SIZE_NAMES)."""
    on = layout.enabled
    return {
        "n_tier_requests": n_request_rows if on else 1,
        "n_tier_blocks": n_blocks if on else 1,
        "tier_slot_rows": max(1, int(layout.slot_rows.sum())),
        "tier_table_rows": max(2, int(layout.ht_rows.sum())),
        "tier_write_rows": max(1, int(layout.wr_cap.sum())),
    }


def _offsets(a: np.ndarray) -> np.ndarray:
    flat = a.reshape(-1)
    return np.concatenate(([0], np.cumsum(flat)[:-1])).astype(np.int64)


def tier_rows(fl, layout: TierLayout) -> tuple[np.ndarray, np.ndarray]:
    """(KV_TIER_INST_DT rows, TIER_DT rows) of the instance table: every tier empty."""
    n_inst = fl.n_inst
    inst = np.zeros(n_inst, S.KV_TIER_INST_DT)
    rows = np.zeros(n_inst * S.N_TIERS, S.TIER_DT)
    rows["capacity"] = layout.capacity.reshape(-1)
    rows["slot_rows"] = layout.slot_rows.reshape(-1)
    rows["slot_offset"] = _offsets(layout.slot_rows)
    rows["virgin_next"] = rows["slot_offset"]
    rows["ht_offset"] = _offsets(layout.ht_rows)
    rows["ht_mask"] = np.maximum(layout.ht_rows.reshape(-1) - 1, 0)
    rows["wr_offset"] = _offsets(layout.wr_cap)
    rows["wr_cap"] = layout.wr_cap.reshape(-1)
    for f in ("lru_head", "lru_tail", "link_head", "link_tail"):
        rows[f] = -1
    for i, tiers in enumerate(pool_tiers(fl)):
        if tiers is None:
            continue
        inst[i]["n_tiers"] = len(tiers.tiers)
        inst[i]["store_all"] = int(tiers.store_all)
        inst[i]["load_step"] = int(tiers.load_step)
        inst[i]["block_bytes"] = float(tiers.block_bytes)
        for k, tier in enumerate(tiers.tiers):
            row = rows[i * S.N_TIERS + k:i * S.N_TIERS + k + 1]
            row["read_bytes_per_us"] = tier.read_gbps * GB_PER_S_TO_BYTES_PER_US
            row["write_bytes_per_us"] = tier.write_gbps * GB_PER_S_TO_BYTES_PER_US
            row["latency_us"] = math.ceil(tier.latency_us)
    return inst, rows


def tier_request_rows(n: int) -> np.ndarray:
    """TIER_REQ_DT rows of n request rows (1 when no tiers): nothing loaded yet."""
    rows = np.zeros(max(n, 1), S.TIER_REQ_DT)
    rows["load_start_us"] = -1
    rows["load_end_us"] = -1
    rows["load_record"] = -1
    return rows
