"""``State``: every array of one run, as one record the event loop and its handlers take.

The whole run lives in these arrays -- tables, the event heap, the loop record, logs,
policy parameters and scratch space -- so a run can stop at any event boundary and go on
later, or be copied (``copy_state``) and continued differently.
``blis_fast.run.tables.build_state`` allocates it; the field types never depend on the
configuration, so the kernels compile once.
"""

from typing import NamedTuple

import numpy as np

from .tables import (ADMIT_DT, EVENT_DT, INSTANCE_DT, IRR_DT, KV_BLOCK_DT, LOOP_DT, PREEMPT_DT, REQUEST_DT,
                     ROUTE_DT, SCHED_DT, SETTINGS_DT, STEP_DT)


class State(NamedTuple):
    # --- run settings and the loop's own state
    settings: np.ndarray  # SETTINGS_DT[1]
    loop: np.ndarray  # LOOP_DT[1]
    # --- requests and the workload's prefix keys
    reqs: np.ndarray  # REQUEST_DT[n]
    arrival_order: np.ndarray  # int64: requests whose arrival is known up front, by (arrival, id)
    keys: np.ndarray  # int64: prompt-block keys; request r's are [key_start, key_start + key_count)
    key_shared: np.ndarray  # uint8 per key: 1 if its value occurs at another position of keys too
    req_blocks: np.ndarray  # int32: KV block ids (< 2^31); request r's slice is [block_start, block_start + block_cap)
    # --- instances: batches and their per-step scratch
    inst: np.ndarray  # INSTANCE_DT[n_inst]
    batch: np.ndarray  # int64[n_inst, max_num_seqs]: running requests in batch order
    batch_seq: np.ndarray  # int64[n_inst, max_num_seqs]: their admission numbers (ascending)
    work: np.ndarray  # int64[max_num_seqs]: tokens each batch slot / explicit entry computes this step
    context: np.ndarray  # int64[max_num_seqs]: tokens already in KV for each batch slot / explicit entry
    explicit: np.ndarray  # int64[max_num_seqs]: the step's explicit entries (requests visited one by one)
    due: np.ndarray  # int64[max_num_seqs]: requests taken from the calendar this step
    done: np.ndarray  # int64[max_num_seqs]: requests completed by this step
    calendar: np.ndarray  # int64[n_inst, calendar_size]: bucket heads (engine/calendar.py), -1 = empty
    ride_phase: np.ndarray  # int64[n_inst, block_size]: counted riders (engine/calendar.py) by the step phase of their new blocks
    # --- KV cache
    blocks: np.ndarray  # KV_BLOCK_DT[n_inst * kv_total]
    kv_table: np.ndarray  # int64[rows, 2]: shared key value -> block + 1, one slice of rows per instance
    kv_slot: np.ndarray  # int32 per key: block + 1 caching an unshared key, 0 = none (kv/cache.py)
    kv_memo: np.ndarray  # int64[n_inst, N_KV_MEMO + KV_MEMO_BLOCKS]: each instance's last prompt lookup (KvMemo)
    # --- events and logs
    heap: np.ndarray  # EVENT_DT
    step_log: np.ndarray  # STEP_DT (grows between calls: Status.LOG_FULL)
    irr_log: np.ndarray  # IRR_DT (grows likewise)
    route_log: np.ndarray  # ROUTE_DT: one row per routing decision (1 row when not tracing)
    admit_log: np.ndarray  # ADMIT_DT: one row per admission decision (likewise)
    preempt_log: np.ndarray  # PREEMPT_DT: one row per preemption (grows: Status.LOG_FULL)
    sched_log: np.ndarray  # SCHED_DT: scheduling records at TraceLevel.FULL (grows likewise; 1 row otherwise)
    sched_open: np.ndarray  # int64[n_inst]: row of the instance's open BLOCKED episode, -1 = none (FULL only)
    # --- latency model
    roofline: np.ndarray  # float64[N_ROOFLINE]
    # --- the policy candidate (kinds + parameter matrix) and its state
    policy_kind: np.ndarray  # int64[N_POLICY_SLOTS]
    policy_param: np.ndarray  # float64[N_POLICY_SLOTS, POLICY_WIDTH]
    cohort: np.ndarray  # float64[k, POLICY_WIDTH]: routing parameters of the k candidates run as one (row 0 = policy_param's)
    cohort_choice: np.ndarray  # int64[k] scratch: each member's instance for the request they disagree on
    tb_tokens: np.ndarray  # float64[n_tenants]: token-bucket levels
    tb_last_us: np.ndarray  # int64[n_tenants]: last refill time
    snap: np.ndarray  # float64[n_inst, N_SNAP]: the router's view of each instance
    snap_refreshed: np.ndarray  # int64[N_SNAP]: last refresh time per field, -1 = never
    affinity: np.ndarray  # int64[n_inst] scratch: matched leading prefix blocks per instance
    route_scores: np.ndarray  # float64[n_inst] scratch: the routing policy's score per instance
    alive: np.ndarray  # int64[ceil(n_inst / 64)] scratch: instance bit mask
    pi_state: np.ndarray  # int64[n_inst, 4]: router prefix index header per instance (IndexState)
    pi_table: np.ndarray  # int64[rows, IndexRow]: (key, stamp, record slot) rows, one slice per instance
    pi_ring: np.ndarray  # int64[n_inst, ring]: touch records (ids) in the order last touched; -n = n place-holders
    pi_records: np.ndarray  # int64[n_inst, ring, IndexRecord]: touch records (runs of keys touched together)
    gmap: np.ndarray  # int64[rows, 1 + words]: key -> bit mask of instances whose index holds it
    pi_memo: np.ndarray  # int64[N_ROUTER_MEMO + 2 * words]: cluster-map changes, where the last leading-key walk resumes
    # --- scheduler sort scratch (structs/sort.py)
    sort_ids: np.ndarray  # int64[n or 1]
    sort_k1: np.ndarray  # float64
    sort_k2: np.ndarray  # int64
    tmp_ids: np.ndarray  # int64
    tmp_k1: np.ndarray  # float64
    tmp_k2: np.ndarray  # int64


_I64, _F64, _I32, _U8 = np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.int32), np.dtype(np.uint8)

#: Every State field's element type and number of dimensions; every array is C-contiguous
#: (and aligned).  The ahead-of-time compiled kernels (kernels/aot.py) are built for exactly
#: these types and check a State against them before each call, since compiled code
#: cannot check them itself; build_state's States are tested against them.
STATE_LAYOUT: dict[str, tuple[np.dtype, int]] = {
    "settings": (SETTINGS_DT, 1), "loop": (LOOP_DT, 1),
    "reqs": (REQUEST_DT, 1), "arrival_order": (_I64, 1), "keys": (_I64, 1), "key_shared": (_U8, 1),
    "req_blocks": (_I32, 1),
    "inst": (INSTANCE_DT, 1), "batch": (_I64, 2), "batch_seq": (_I64, 2), "work": (_I64, 1),
    "context": (_I64, 1), "explicit": (_I64, 1), "due": (_I64, 1), "done": (_I64, 1), "calendar": (_I64, 2),
    "ride_phase": (_I64, 2),
    "blocks": (KV_BLOCK_DT, 1), "kv_table": (_I64, 2), "kv_slot": (_I32, 1), "kv_memo": (_I64, 2),
    "heap": (EVENT_DT, 1), "step_log": (STEP_DT, 1), "irr_log": (IRR_DT, 1), "route_log": (ROUTE_DT, 1),
    "admit_log": (ADMIT_DT, 1), "preempt_log": (PREEMPT_DT, 1), "sched_log": (SCHED_DT, 1),
    "sched_open": (_I64, 1),
    "roofline": (_F64, 1),
    "policy_kind": (_I64, 1), "policy_param": (_F64, 2), "cohort": (_F64, 2), "cohort_choice": (_I64, 1),
    "tb_tokens": (_F64, 1), "tb_last_us": (_I64, 1),
    "snap": (_F64, 2), "snap_refreshed": (_I64, 1), "affinity": (_I64, 1), "route_scores": (_F64, 1),
    "alive": (_I64, 1), "pi_state": (_I64, 2), "pi_table": (_I64, 2), "pi_ring": (_I64, 2), "pi_records": (_I64, 3),
    "gmap": (_I64, 2),
    "pi_memo": (_I64, 1),
    "sort_ids": (_I64, 1), "sort_k1": (_F64, 1), "sort_k2": (_I64, 1), "tmp_ids": (_I64, 1), "tmp_k1": (_F64, 1),
    "tmp_k2": (_I64, 1),
}
assert tuple(STATE_LAYOUT) == State._fields, "STATE_LAYOUT must list State's fields in order"


def copy_array(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """A copy of ``a`` (into ``out`` if given: same shape and dtype).  A contiguous table of
    records is copied as bytes: numpy copies records field by field, ~10x slower (a
    100K-request table: ~40 ms instead of ~4)."""
    if out is None:
        out = np.empty_like(a)
    if a.dtype.fields is not None and a.size and a.flags.c_contiguous and out.flags.c_contiguous:
        np.copyto(out.reshape(-1).view(np.uint8), a.reshape(-1).view(np.uint8))
    else:
        np.copyto(out, a)
    return out


def copy_state(state: State) -> State:
    """A deep copy: continuing it never touches ``state``."""
    return State(*[copy_array(a) for a in state])
