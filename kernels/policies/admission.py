"""Admission: always-admit, reject-all, or a token bucket per tenant."""

from ..jit import helper
from ..schema import AdmissionKind, AdmissionParam


@helper
def admit(kind, params, tb_tokens, tb_last_us, tenant, cost, now):
    """Admission decision for a request of ``cost`` prompt tokens from ``tenant`` at ``now``.
    Token bucket: starts full, refills elapsed·R/1e6 up to the capacity, admits iff
    tokens >= cost and then spends them.  Mutates tb_tokens, tb_last_us."""
    if kind == AdmissionKind.REJECT_ALL:
        return False
    if kind == AdmissionKind.TOKEN_BUCKET:
        cap = params[AdmissionParam.CAPACITY]
        tokens = tb_tokens[tenant] + (now - tb_last_us[tenant]) * params[AdmissionParam.REFILL_PER_S] / 1e6
        if tokens > cap:
            tokens = cap
        tb_last_us[tenant] = now
        if tokens >= cost:
            tb_tokens[tenant] = tokens - cost
            return True
        tb_tokens[tenant] = tokens
        return False
    return True
