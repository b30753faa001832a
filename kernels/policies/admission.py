"""Admission: always-admit, reject-all, a token bucket per tenant, or a program."""

import numpy as np

from ..jit import helper
from ..schema import AdmissionKind, AdmissionParam, AdmitFeature, PolicySlot, ProgramHeader
from .program import run_program


@helper
def _refilled(cap, refill_per_s, tb_tokens, tb_last_us, tenant, now):
    """The tenant's bucket refilled to ``now`` (elapsed·R/1e6, up to the capacity), stored."""
    tokens = tb_tokens[tenant] + (now - tb_last_us[tenant]) * refill_per_s / 1e6
    if tokens > cap:
        tokens = cap
    tb_last_us[tenant] = now
    tb_tokens[tenant] = tokens
    return tokens


@helper
def admit(kind, params, tb_tokens, tb_last_us, tenant, cost, now):
    """Admission decision for a request of ``cost`` prompt tokens from ``tenant`` at ``now``.
    Token bucket: starts full, refills elapsed·R/1e6 up to the capacity, admits iff
    tokens >= cost and then spends them.  Mutates tb_tokens, tb_last_us."""
    if kind == AdmissionKind.REJECT_ALL:
        return False
    if kind == AdmissionKind.TOKEN_BUCKET:
        tokens = _refilled(params[AdmissionParam.CAPACITY], params[AdmissionParam.REFILL_PER_S], tb_tokens,
                           tb_last_us, tenant, now)
        if tokens >= cost:
            tb_tokens[tenant] = tokens - cost
            return True
        return False
    return True


@helper
def admit_by_program(st, r, now):
    """The admission program's decision for request r at ``now``: admitted iff its value
    (AdmitFeature) is > 0; a value that is not finite rejects (counted in
    ``State.prog_faults``).  The cluster's features are summed only if the program reads
    them."""
    prog = st.policy_param[PolicySlot.ADMISSION]
    f = st.prog_features
    req = st.reqs[r]
    f[AdmitFeature.PROMPT_TOKENS] = req["prompt_len"]
    f[AdmitFeature.SLO_CLASS] = req["slo_class"]
    f[AdmitFeature.TENANT] = req["tenant"]
    f[AdmitFeature.TIME_S] = now / 1e6
    mask = np.int64(prog[ProgramHeader.FEATURES])
    bucket = (mask >> AdmitFeature.BUCKET_TOKENS) & 1 != 0
    tenant = req["tenant"]
    if bucket:  # refilled as the token-bucket template's
        tokens = _refilled(prog[AdmissionParam.PROGRAM_CAPACITY], prog[AdmissionParam.PROGRAM_REFILL_PER_S],
                           st.tb_tokens, st.tb_last_us, tenant, now)
        f[AdmitFeature.BUCKET_TOKENS] = tokens
    if mask >> AdmitFeature.IN_FLIGHT != 0:  # (the cluster's features are the last columns)
        inst = st.inst
        in_flight = 0
        waiting = 0
        running = 0
        active = 0
        kv = 0.0
        for i in range(inst.shape[0]):
            if inst[i]["active"] != 0:
                active += 1
                waiting += inst[i]["wq_len"]
                running += inst[i]["batch_len"]
                in_flight += inst[i]["routed_pending"] + inst[i]["wq_len"] + inst[i]["batch_len"]
                kv += inst[i]["kv_allocated"] / inst[i]["kv_total"]
        f[AdmitFeature.IN_FLIGHT] = in_flight
        f[AdmitFeature.WAITING] = waiting
        f[AdmitFeature.RUNNING] = running
        f[AdmitFeature.INSTANCES] = active
        f[AdmitFeature.KV_UTILIZATION] = kv / active if active > 0 else 0.0
    v = run_program(prog, f, st.prog_stack)
    admitted = v > 0.0
    if not (v > -np.inf and v < np.inf):
        st.prog_faults[PolicySlot.ADMISSION] += 1
        admitted = False
    if bucket and admitted:  # an admitted request spends its prompt tokens (the level may go below 0)
        st.tb_tokens[tenant] -= req["prompt_len"]
    return admitted
