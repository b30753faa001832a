"""Compiled entry points to the kernels' helpers, for the unit tests.

A ``blis_fast_kernels.jit.helper`` has no CPython wrapper: with the JIT on it cannot be called from
Python.  Each function here is a small ``@njit`` wrapper that calls one helper (or a short,
fixed sequence of helpers) and returns its results; with ``NUMBA_DISABLE_JIT=1`` it is
plain Python calling plain Python.  The wrappers add no logic of their own beyond what a
kernel caller does (e.g. probe a row, then write it).

The wrappers are cached by numba, but numba revalidates a cached function only against its
own source file, and each wrapper compiles the helpers it calls into itself.  So, like
``blis_fast_kernels.cache``, on import we compare a digest of the kernel sources (and this file) with
a stamp next to this module's cache and drop this module's cache files when it differs.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
from numba import njit

from blis_fast_kernels import cache as _kcache
from blis_fast_kernels.engine.events import event_kind_instance as _event_kind_instance
from blis_fast_kernels.engine.events import event_priority as _event_priority
from blis_fast_kernels.engine.events import push_event as _push_event
from blis_fast_kernels.engine.events import push_event_with as _push_event_with
from blis_fast_kernels.engine.phases import end_phase as _end_phase
from blis_fast_kernels.engine.trace import log_room as _log_room
from blis_fast_kernels.engine.trace import scale_log_room as _scale_log_room
from blis_fast_kernels.kv import cache as _kv
from blis_fast_kernels.latency import steptime as _lat
from blis_fast_kernels.policies import prefix_index as _pi
from blis_fast_kernels.policies.admission import admit as _admit
from blis_fast_kernels.policies.priority import request_priority as _request_priority
from blis_fast_kernels.policies.priority import update_wait_queue_priorities as _update_prios
from blis_fast_kernels.policies.routing import choose_instance as _choose_instance
from blis_fast_kernels.policies.routing import refresh_snapshot as _refresh_snapshot
from blis_fast_kernels.policies.scheduler import reorder_wait_queue as _reorder_wait_queue
from blis_fast_kernels.policies.victim import choose_victim as _choose_victim
from blis_fast_kernels.schema import (N_POLICY_SLOTS, N_PROGRAM_FEATURES, N_ROUTE_FEATURES, N_SNAP, PROGRAM_STACK, PolicySlot, PriorityKind,
                                     RouteFeature, SchedulerKind)
from blis_fast_kernels.structs import dlist as _dl
from blis_fast_kernels.structs import hashtable as _ht
from blis_fast_kernels.structs import heap as _heap
from blis_fast_kernels.structs import mix as _mix
from blis_fast_kernels.structs import sort as _sort

# ----------------------------------------------------------------------------- stale cache

_HERE = Path(__file__).resolve()
_STAMP = "blis_fast_test_entry.digest"


def _cache_dir() -> Path:
    """Where numba caches the functions of this module (see kernels/cache.py)."""
    d = _HERE.parent
    root = os.environ.get("NUMBA_CACHE_DIR")
    if not root:
        return d / "__pycache__"
    sub = os.path.abspath(d)
    return Path(root) / f"{os.path.basename(sub)}_{hashlib.sha1(sub.encode()).hexdigest()}"


def _drop_stale() -> None:
    digest = hashlib.sha256((_kcache.sources_digest() + hashlib.sha256(_HERE.read_bytes()).hexdigest()).encode())
    digest = digest.hexdigest()
    d = _cache_dir()
    stamp = d / _STAMP
    try:
        if stamp.is_file() and stamp.read_text() == digest:
            return
        for p in d.glob(f"{_HERE.stem}.*.nb[ic]") if d.is_dir() else []:
            p.unlink(missing_ok=True)
        d.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
    except OSError:
        pass


_drop_stale()

entry = njit(cache=True)

# ----------------------------------------------------------------------------- structs: heap


@entry
def heap_push(heap, size, t, p, s, r, a2):
    return _heap.heap_push(heap, size, t, p, s, r, a2)


@entry
def heap_pop(heap, size):
    return _heap.heap_pop(heap, size)


@entry
def event_before(ta, pa, sa, tb, pb, sb):
    return _heap.event_before(ta, pa, sa, tb, pb, sb)


# ----------------------------------------------------------------------------- structs: dlist


@entry
def dl_push_back(prev, nxt, head, tail, length, o, e):
    _dl.dl_push_back(prev, nxt, head, tail, length, o, e)


@entry
def dl_push_front(prev, nxt, head, tail, length, o, e):
    _dl.dl_push_front(prev, nxt, head, tail, length, o, e)


@entry
def dl_remove(prev, nxt, head, tail, length, o, e):
    _dl.dl_remove(prev, nxt, head, tail, length, o, e)


@entry
def dl_pop_front(prev, nxt, head, tail, length, o):
    return _dl.dl_pop_front(prev, nxt, head, tail, length, o)


@entry
def dl_relink(prev, nxt, head, tail, o, order, n):
    _dl.dl_relink(prev, nxt, head, tail, o, order, n)


# ----------------------------------------------------------------------------- structs: hashtable


@entry
def table_home(key, mask):
    return _ht.table_home(key, mask)


@entry
def table_find(rows, off, mask, key):
    return _ht.table_find(rows, off, mask, key)


@entry
def table_find_many(rows, off, mask, keys):
    """table_find of each of ``keys``."""
    out = np.empty(keys.shape[0], np.int64)
    for k in range(keys.shape[0]):
        out[k] = _ht.table_find(rows, off, mask, keys[k])
    return out


@entry
def table_probe(rows, off, mask, key):
    return _ht.table_probe(rows, off, mask, key)


@entry
def table_put(rows, off, mask, key, values):
    """Probe for ``key`` and write (key, values...) into its row; returns (row, found)."""
    h, found = _ht.table_probe(rows, off, mask, key)
    rows[off + h, 0] = key
    for w in range(values.shape[0]):
        rows[off + h, 1 + w] = values[w]
    return h, found


@entry
def table_delete(rows, off, mask, key):
    """Find ``key`` and delete its row; True if it was present."""
    h = _ht.table_find(rows, off, mask, key)
    if h < 0:
        return False
    _ht.table_delete_at(rows, off, mask, h)
    return True


# ----------------------------------------------------------------------------- structs: sort, mix


@entry
def merge_sort(ids, k1, k2, tmp_ids, tmp_k1, tmp_k2, n):
    return _sort.merge_sort(ids, k1, k2, tmp_ids, tmp_k1, tmp_k2, n)


@entry
def fmix64(x):
    return _mix.fmix64(x)


@entry
def combine64(h, v):
    return _mix.combine64(h, v)


# ----------------------------------------------------------------------------- engine: events


@entry
def event_priority(kind, instance):
    return _event_priority(kind, instance)


@entry
def event_kind_instance(priority):
    return _event_kind_instance(priority)


@entry
def push_event(st, t, priority, request):
    _push_event(st, t, priority, request)


@entry
def log_room(st, i):
    return _log_room(st, i)


@entry
def scale_log_room(st):
    return _scale_log_room(st)


@entry
def end_phase(st, i, r, phase, now, step_idx):
    _end_phase(st, i, r, phase, now, step_idx)


@entry
def push_event_with(st, t, priority, request, arg2):
    _push_event_with(st, t, priority, request, arg2)


# ----------------------------------------------------------------------------- kv cache


@entry
def prefix_lookup(st, i, key):
    return _kv.prefix_lookup(st, i, key)


@entry
def prefix_lookup_many(st, i, keys):
    """prefix_lookup of each of ``keys``."""
    out = np.empty(keys.shape[0], np.int64)
    for k in range(keys.shape[0]):
        out[k] = _kv.prefix_lookup(st, i, keys[k])
    return out


@entry
def key_lookup(st, i, q):
    return _kv.key_lookup(st, i, q)


@entry
def prefix_register(st, i, key, block):
    return _kv.prefix_register(st, i, key, block)


@entry
def prefix_forget(st, i, key, block):
    _kv.prefix_forget(st, i, key, block)


@entry
def kv_free_blocks(inst, i):
    return _kv.kv_free_blocks(inst, i)


@entry
def kv_grow(st, i, r, n):
    return _kv.kv_grow(st, i, r, n)


@entry
def kv_admit(st, i, r, budget, cap):
    return _kv.kv_admit(st, i, r, budget, cap, True)


@entry
def kv_forget_chunk(st, i, r, c, n):
    _kv.kv_forget_chunk(st, i, r, c, n)


@entry
def kv_release(st, i, r):
    _kv.kv_release(st, i, r)


# ----------------------------------------------------------------------------- latency


@entry
def blackbox_step_us(beta0, beta1, beta2, n_prefill_tokens, n_decode):
    return _lat.blackbox_step_us(beta0, beta1, beta2, n_prefill_tokens, n_decode)


@entry
def queueing_delay_us(alpha0, alpha1, prompt_len):
    return _lat.queueing_delay_us(alpha0, alpha1, prompt_len)


@entry
def output_token_delay_us(alpha2):
    return _lat.output_token_delay_us(alpha2)


@entry
def roofline_entry(params, s, t):
    return _lat.roofline_entry(params, s, t)


@entry
def roofline_step_us(params, pre_gemm, pre_vec, pre_dyn, n_pre, dec_gemm, dec_vec, dec_dyn, n_dec):
    return _lat.roofline_step_us(params, pre_gemm, pre_vec, pre_dyn, n_pre, dec_gemm, dec_vec, dec_dyn, n_dec)


# ----------------------------------------------------------------------------- policies


@entry
def admit(kind, params, tb_tokens, tb_last_us, tenant, cost, now):
    return _admit(kind, params, tb_tokens, tb_last_us, tenant, cost, now)


@entry
def refresh_snapshot(inst, snap, refreshed_us, interval_us, now):
    _refresh_snapshot(inst, snap, refreshed_us, interval_us, now, (1 << N_SNAP) - 1)  # every field


def _route(kind, weights, inst, snap, affinity, n_keys, rr_next, model, prompt, slo_class, tenant):
    scores = np.empty(inst.shape[0], np.float64)
    feats = np.zeros(N_PROGRAM_FEATURES, np.float64)
    feats[RouteFeature.PROMPT_TOKENS] = prompt
    feats[RouteFeature.SLO_CLASS] = slo_class
    feats[RouteFeature.TENANT] = tenant
    stack = np.empty(PROGRAM_STACK, np.float64)
    n = inst.shape[0]
    rows = np.full((N_ROUTE_FEATURES, n), np.nan)  # (scratch: what the program does not read stays NaN)
    row_stack = np.full((PROGRAM_STACK, n), np.nan)
    faults = np.zeros(N_POLICY_SLOTS, np.int64)
    best, rr = _choose_instance(kind, weights, inst, snap, affinity, n_keys, rr_next, scores, np.int32(model),
                                (feats, stack, rows, row_stack, faults))
    return best, rr, scores, faults[PolicySlot.ROUTING]


_route = njit(cache=True)(_route)


@entry
def choose_instance(kind, weights, inst, snap, affinity, n_keys, rr_next, model=0):
    best, rr, _, _ = _route(kind, weights, inst, snap, affinity, n_keys, rr_next, model, 0.0, 0.0, 0.0)
    return best, rr


@entry
def choose_instance_scores(kind, weights, inst, snap, affinity, n_keys, rr_next, model=0, prompt=0.0, slo_class=0.0,
                           tenant=0.0):
    """(instance, cursor, scores, routing-program faults); a routing program reads the
    request's ``prompt``, ``slo_class`` and ``tenant``."""
    return _route(kind, weights, inst, snap, affinity, n_keys, rr_next, model, prompt, slo_class, tenant)


def _set_slot(st, slot, kind, params):
    st.policy_kind[slot] = kind
    st.policy_param[slot, :] = 0.0
    st.policy_param[slot, :params.shape[0]] = params


_set_slot = njit(cache=True)(_set_slot)


@entry
def request_priority(st, params, r, now):
    """The priority of request r of ``st`` under the age-and-class weights ``params``."""
    _set_slot(st, PolicySlot.PRIORITY, PriorityKind.AGE_AND_CLASS, params)
    return _request_priority(st, r, now)


@entry
def update_wait_queue_priorities(st, i, params, now):
    _set_slot(st, PolicySlot.PRIORITY, PriorityKind.AGE_AND_CLASS, params)
    _update_prios(st, i, now)


@entry
def reorder_wait_queue(st, i, weights):
    _set_slot(st, PolicySlot.SCHEDULER, SchedulerKind.SORT, weights)
    _reorder_wait_queue(st, i, np.int64(0))


@entry
def choose_victim(st, i, kind, prio_params, now):
    _set_slot(st, PolicySlot.PRIORITY, PriorityKind.AGE_AND_CLASS, prio_params)
    return _choose_victim(st, i, kind, now)


# ----------------------------------------------------------------------------- router prefix index


@entry
def index_touch(st, capacity, rows_per_inst, i, pos):
    _pi.index_touch(st, capacity, rows_per_inst, i, pos)


@entry
def index_insert_unshared(st, capacity, rows_per_inst, i, count):
    _pi.index_insert_unshared(st, capacity, rows_per_inst, i, count)


@entry
def index_record_request(st, i, kstart, kcount):
    _pi.index_record_request(st, i, kstart, kcount)


@entry
def leading_matches(st, kstart, kcount):
    _pi.leading_matches(st, kstart, kcount)


@entry
def gmap_set_bit(gmap, key, i):
    _pi._gmap_set_bit(gmap, key, i)


@entry
def gmap_clear_bit(gmap, key, i):
    _pi._gmap_clear_bit(gmap, key, i)
