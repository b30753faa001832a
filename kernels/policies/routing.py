"""Routing: the router's snapshot of the instances and the routing decision."""

import math

import numpy as np

from ..jit import helper
from ..kv.cache import kv_free_blocks
from ..schema import (N_ROUTE_FEATURES, N_SNAP, PolicySlot, ProgramForm, ProgramHeader, RouteFeature, RouteWeight,
                      RoutingKind, SnapField)
from .program import run_program, run_program_rows


# the snapshot fields anything reads: the load (choose_instance, the decision trace) and the KV
# utilization (weighted routing, the trace); the others need no refresh in a run
ROUTER_SNAP_FIELDS = ((1 << SnapField.QUEUE_DEPTH) | (1 << SnapField.BATCH_SIZE) | (1 << SnapField.PENDING)
                      | (1 << SnapField.KV_UTILIZATION))


@helper
def refresh_snapshot(inst, snap, refreshed_us, interval_us, now, fields):
    """Bring each snapshot field in the bit mask ``fields`` up to date if its refresh
    interval has elapsed (interval 0 = always live).  snap[i, f] holds field f of instance i
    as the router sees it."""
    for f in range(N_SNAP):
        if not (fields >> f) & 1:
            continue
        iv = np.int64(interval_us[f])
        if iv > 0 and refreshed_us[f] >= 0 and now - refreshed_us[f] < iv:
            continue
        refreshed_us[f] = now
        for i in range(inst.shape[0]):
            if f == SnapField.QUEUE_DEPTH:
                v = np.float64(inst[i]["wq_len"])
            elif f == SnapField.BATCH_SIZE:
                v = np.float64(inst[i]["batch_len"])
            elif f == SnapField.KV_UTILIZATION:
                v = inst[i]["kv_allocated"] / inst[i]["kv_total"]
            elif f == SnapField.FREE_BLOCKS:
                v = np.float64(kv_free_blocks(inst, i))
            elif f == SnapField.CACHE_HIT_RATE:
                q = inst[i]["prefix_query_tokens"]
                v = inst[i]["prefix_hit_tokens"] / q if q > 0 else 0.0
            elif f == SnapField.PENDING:
                v = np.float64(inst[i]["routed_pending"])
            else:  # SnapField.IN_FLIGHT
                v = np.float64(inst[i]["routed_pending"] + inst[i]["wq_len"] + inst[i]["batch_len"])
            snap[i, f] = v


@helper
def is_candidate(inst, i, group):
    """True if instance i may take a request of routing group ``group`` (a served model,
    or a disaggregated model's prefill pools): it is active and in that group (a request
    never goes to another model's instance).  (``route_alt`` is read only for instances
    of other groups: a `both` pool's second group.)"""
    return inst[i]["active"] != 0 and (inst[i]["route_id"] == group or inst[i]["route_alt"] == group)


@helper
def _load(snap, i):
    """Effective load the router sees: queue depth + batch size + pending."""
    return snap[i, SnapField.QUEUE_DEPTH] + snap[i, SnapField.BATCH_SIZE] + snap[i, SnapField.PENDING]


@helper
def _clamp01(x):
    if x < 0.0:
        return 0.0
    if x > 1.0:
        return 1.0
    return x


@helper
def request_route_features(feats, req):
    """Fill the request's columns of a routing program's feature row (the others are each
    candidate's: ``choose_instance``)."""
    feats[RouteFeature.PROMPT_TOKENS] = req["prompt_len"]
    feats[RouteFeature.SLO_CLASS] = req["slo_class"]
    feats[RouteFeature.TENANT] = req["tenant"]


@helper
def route_scratch(st):
    """The scratch of a routing program (``choose_instance``'s ``scratch``)."""
    return st.prog_features, st.prog_stack, st.prog_rows, st.prog_row_stack, st.prog_faults


@helper
def _route_feature(f, i, snap, affinity, feats):
    """Feature f of candidate i; the features of the request and of the candidates as a
    whole are in ``feats`` already."""
    if f == RouteFeature.LOAD:
        return _load(snap, i)
    if f == RouteFeature.QUEUE:
        return snap[i, SnapField.QUEUE_DEPTH]
    if f == RouteFeature.RUNNING:
        return snap[i, SnapField.BATCH_SIZE]
    if f == RouteFeature.PENDING:
        return snap[i, SnapField.PENDING]
    if f == RouteFeature.KV_UTILIZATION:
        return snap[i, SnapField.KV_UTILIZATION]
    if f == RouteFeature.KV_FREE:
        return 1.0 - snap[i, SnapField.KV_UTILIZATION]
    if f == RouteFeature.HIT_BLOCKS:
        return np.float64(affinity[i])
    return feats[f]


@helper
def _program_scores(prog, inst, snap, affinity, scores, model, scratch):
    """Every instance's score under routing program ``prog`` (``scratch``: the feature row
    with the request's and the candidates' common features filled, a stack, the same as
    one column per instance, the fault counters).  An expression scores every instance in
    one pass over its code; a tree walks each candidate's path.  Non-candidates get -inf,
    and so does a value that is not finite (counted)."""
    feats, stack, rows, stack_rows, faults = scratch
    n = inst.shape[0]
    mask = np.int64(prog[ProgramHeader.FEATURES])
    if prog[ProgramHeader.FORM] == ProgramForm.TREE:
        for i in range(n):
            if is_candidate(inst, i, model):
                for f in range(RouteFeature.HIT_BLOCKS + 1):  # (the per-candidate features)
                    if (mask >> f) & 1:
                        feats[f] = _route_feature(f, i, snap, affinity, feats)
                scores[i] = run_program(prog, feats, stack)
    else:
        for f in range(N_ROUTE_FEATURES):
            if (mask >> f) & 1:
                for i in range(n):
                    rows[f, i] = _route_feature(f, i, snap, affinity, feats)
        run_program_rows(prog, rows, n, stack_rows, scores)
    for i in range(n):
        if not is_candidate(inst, i, model):
            scores[i] = -np.inf
        elif not (scores[i] > -np.inf and scores[i] < np.inf):
            scores[i] = -np.inf  # the worst score
            faults[PolicySlot.ROUTING] += 1


@helper
def choose_instance(kind, weights, inst, snap, affinity, n_keys, rr_next, scores, model, scratch):
    """The routing decision for a request of served model ``model``: (instance, new
    round-robin cursor of that model); -1 if no candidate.  The candidates are the active
    instances serving ``model`` (``is_candidate``): every scorer compares those only.
    ``scores[i]`` receives the policy's score of every instance (higher = preferred, -inf
    for the others): the decision is its argmax, ties to the lowest index -- the
    decision traces rank the alternatives by it.

    round-robin (score: minus the distance from the cursor); least-loaded (minus the
    effective load); always-busiest (the load); weighted (Σ w·clamp01(scorer), weights
    normalized: queue-depth (max−load)/(max−min), kv-utilization 1 − util, load-balance
    1/(1+load), prefix-affinity matched leading blocks / request blocks); prefix-affinity
    (matched blocks when any instance matches, else least-loaded); expression (``weights``
    is a program over RouteFeature: ``scratch`` = (feature row with the request's columns
    filled (``request_route_features``), stack, feature rows x instances, stacks x
    instances, fault counters); a value that is not finite ranks last and is counted).

    The weighted score cannot overflow: weights above 2^1000 (where Σ w could exceed the
    float range) are first scaled by a power of two, which changes no ratio and, below
    2^1000, nothing at all.  A score that is still not finite (NaN weights given to the
    kernel directly) ranks last, so an active instance is always chosen.
    """
    n_inst = inst.shape[0]
    if kind == RoutingKind.ROUND_ROBIN:
        best = np.int64(-1)
        start = rr_next % n_inst
        for d in range(n_inst):
            cand = start + d  # (rr_next + d) % n_inst, without a division per instance
            if cand >= n_inst:
                cand -= n_inst
            if is_candidate(inst, cand, model):
                scores[cand] = -np.float64(d)
                if best < 0:
                    best = cand
            else:
                scores[cand] = -np.inf
        if best < 0:
            return best, rr_next
        return best, (best + 1) % n_inst
    if kind == RoutingKind.PREFIX_AFFINITY:
        best = np.int64(-1)
        for i in range(n_inst):
            if is_candidate(inst, i, model) and affinity[i] > 0 and (best < 0 or affinity[i] > affinity[best]):
                best = i
        if best >= 0:
            for i in range(n_inst):
                scores[i] = np.float64(affinity[i]) if is_candidate(inst, i, model) else -np.inf
            return best, rr_next
        kind = RoutingKind.LEAST_LOADED
    lo = np.inf
    hi = -np.inf
    for i in range(n_inst):
        if is_candidate(inst, i, model):
            x = _load(snap, i)
            lo = min(lo, x)
            hi = max(hi, x)
    if kind == RoutingKind.EXPRESSION:
        n_cand = 0
        max_hit = 0
        for i in range(n_inst):
            if is_candidate(inst, i, model):
                n_cand += 1
                max_hit = max(max_hit, affinity[i])
        feats = scratch[0]
        feats[RouteFeature.MIN_LOAD] = lo
        feats[RouteFeature.MAX_LOAD] = hi
        feats[RouteFeature.MAX_HIT] = max_hit
        feats[RouteFeature.CANDIDATES] = n_cand
        feats[RouteFeature.REQUEST_BLOCKS] = n_keys
        _program_scores(weights, inst, snap, affinity, scores, model, scratch)
        best = np.int64(-1)
        for i in range(n_inst):  # argmax over the candidates, ties to the lowest index
            if is_candidate(inst, i, model) and (best < 0 or scores[i] > scores[best]):
                best = i
        return best, rr_next
    best = np.int64(-1)
    best_score = -np.inf
    w_qd = weights[RouteWeight.QUEUE_DEPTH]
    w_kv = weights[RouteWeight.KV_UTILIZATION]
    w_lb = weights[RouteWeight.LOAD_BALANCE]
    w_pa = weights[RouteWeight.PREFIX_AFFINITY]
    w_max = max(max(abs(w_qd), abs(w_kv)), max(abs(w_lb), abs(w_pa)))
    if w_max > 2.0**1000 and w_max < np.inf:  # exact power-of-two rescale: Σ w stays finite
        scale = math.ldexp(1.0, -math.frexp(w_max)[1])
        w_qd *= scale
        w_kv *= scale
        w_lb *= scale
        w_pa *= scale
    total_w = w_qd + w_kv + w_lb + w_pa
    for i in range(n_inst):
        if not is_candidate(inst, i, model):
            scores[i] = -np.inf
            continue
        load = _load(snap, i)
        if kind == RoutingKind.LEAST_LOADED:
            score = -load
        elif kind == RoutingKind.ALWAYS_BUSIEST:
            score = load
        else:  # RoutingKind.WEIGHTED
            qd = (hi - load) / (hi - lo) if hi > lo else 1.0
            kv = 1.0 - snap[i, SnapField.KV_UTILIZATION]
            lb = 1.0 / (1.0 + load)
            pa = affinity[i] / n_keys if n_keys > 0 else 0.0
            score = (w_qd * _clamp01(qd) + w_kv * _clamp01(kv) + w_lb * _clamp01(lb) + w_pa * _clamp01(pa))
            if total_w > 0:
                score /= total_w
        if not (score > -np.inf and score < np.inf):
            score = -np.inf  # not finite (NaN, ±inf): the worst score
        scores[i] = score
        if best < 0 or score > best_score:
            best_score = score
            best = i
    return best, rr_next
