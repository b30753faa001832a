"""The tables of prefill/decode disaggregation (kernels/engine/disaggregation.py): routing
groups, each served model's P/D settings, and the workload's prefill legs.

Routing groups: served model m's requests route among group m (its monolithic, decode and
`both` instances); a disaggregated model's prefill legs among group ``n_models + k`` (its
prefill and `both` instances), k counting the disaggregated models in order.
"""

from __future__ import annotations

import numpy as np

from blis_fast.errors import ConfigError
from blis_fast_kernels import schema as S

ROLE_CODES = {"mono": S.PoolRole.MONO, "prefill": S.PoolRole.PREFILL, "decode": S.PoolRole.DECODE,
              "both": S.PoolRole.BOTH}
DECIDER_CODES = {**{name: code for code, name in enumerate(S.PD_DECIDER_NAMES)}, "tree": S.PdDecider.EXPRESSION}


def disaggregated_models(deployments, served: tuple[str, ...]) -> tuple[int, ...]:
    """The served-model ids whose deployments are disaggregated, in order."""
    ids = dict.fromkeys(served.index(d.served_model_name) for d in deployments if d.pd is not None)
    return tuple(ids)


def prefill_groups(deployments, served: tuple[str, ...]) -> dict[int, int]:
    """{served-model id: its prefill routing group} of the disaggregated models."""
    return {m: len(served) + k for k, m in enumerate(disaggregated_models(deployments, served))}


def routing_group_rows(policy, setup) -> tuple[np.ndarray, np.ndarray]:
    """(routing kind, parameter row) per routing group: each served model's
    (``CompiledPolicies.routing_rows``), then each disaggregated model's prefill group
    with its model's -- or the policy's ``prefill_routing``."""
    served = setup.served_models
    kinds, params = policy.routing_rows(served)
    models = list(disaggregated_models(setup.deployments, served))
    if not models:
        return kinds, params
    leg_kinds, leg_params = kinds[models], params[models]
    if policy.prefill_routing is not None:  # the policy routes every prefill leg its own way
        leg_kinds = np.full(len(models), policy.prefill_routing[0], np.int64)
        leg_params = np.tile(np.asarray(policy.prefill_routing[1], np.float64), (len(models), 1))
    return np.concatenate([kinds, leg_kinds]), np.ascontiguousarray(np.concatenate([params, leg_params]))


def check_pd_policy(policy, setup) -> None:
    """A policy's P/D settings (``routing.prefill``, ``pd.decider``, ``pd.threshold``) need a
    disaggregated deployment, and a threshold needs the prefix-threshold decider: otherwise
    they would change nothing (ConfigError naming the policy field)."""
    set_fields = [name for name, v in (("prefill_routing", policy.prefill_routing), ("pd_decider", policy.pd_decider),
                                       ("pd_threshold", policy.pd_threshold)) if v is not None]
    if not set_fields:
        return
    pd_deps = [d for d in setup.deployments if d.pd is not None]
    if not pd_deps:
        raise ConfigError(f"policy.{set_fields[0]}", "needs a deployment with prefill and decode pools (no request "
                                                     "of this run is disaggregated)")
    if policy.pd_threshold is not None:
        deciders = {policy.pd_decider or d.pd.decider for d in pd_deps}
        if "prefix-threshold" not in deciders:
            raise ConfigError("policy.pd_threshold", f"applies only to the prefix-threshold decider; the decider is "
                                                     f"{', '.join(sorted(deciders))}")


def pd_model_rows(setup, policy=None) -> np.ndarray:
    """PD_MODEL_DT rows, one per served model (enabled 0 for a monolithic one); the
    policy's decider and threshold (``CompiledPolicies.pd_decider``, ``pd_threshold``)
    replace the deployments' when it sets them."""
    served = setup.served_models
    rows = np.zeros(len(served), S.PD_MODEL_DT)
    groups = prefill_groups(setup.deployments, served)
    for d in setup.deployments:
        if d.pd is None:
            continue
        m = served.index(d.served_model_name)
        pd, tr = d.pd, d.pd.transfer
        prefill = next(p for p in d.pools if p.role == "prefill")
        row = rows[m]
        row["enabled"] = 1
        decider = pd.decider if policy is None or policy.pd_decider is None else policy.pd_decider
        threshold = pd.threshold if policy is None or policy.pd_threshold is None else policy.pd_threshold
        row["decider"] = DECIDER_CODES[decider]
        row["prefill_group"] = groups[m]
        row["threshold"] = threshold
        row["first_token_prefill"] = int(pd.first_token == "prefill")
        row["drop_when_full"] = int(pd.on_decode_full == "drop")
        row["charge_full_prompt"] = int(tr.charge == "full-prompt")
        row["link_contention"] = int(tr.contention == "link")
        # each TP rank sends its share of the KV over its own link
        row["kv_bytes_per_token"] = d.model.kv_bytes_per_token / prefill.engine.tp
        row["bytes_per_us"] = tr.bandwidth_gbps * 1e9 / 1e6
        row["base_latency_us"] = tr.base_latency_ms * 1000.0
    return rows


def add_prefill_legs(reqs: np.ndarray, n_blocks: int, pd_models: np.ndarray, block_sizes) -> tuple[np.ndarray, int]:
    """The request table and block-slot count with one prefill leg per request appended
    (rows n .. 2n-1: request r's leg is r + n).  A leg of a disaggregated model's request
    has its request's prompt and prompt keys (the same key positions: a shared key is
    cached per instance; an unshared one the leg never registers, kernels/kv/cache.py
    ``key_deferred``), one output token that is never shown, no arrival of its own and
    its own block slots; other legs are empty and never used."""
    n = len(reqs)
    used = pd_models["enabled"][reqs["model"]] != 0 if n else np.zeros(0, bool)
    legs = reqs.copy()
    bs = np.broadcast_to(np.asarray(block_sizes, np.int64), (n,))
    slots = np.where(used, (reqs["prompt_len"] + bs - 1) // bs, 0)
    legs["output_len"] = 1
    legs["requested_output"] = 0
    legs["arrival_us"] = -1
    legs["next_request"] = -1
    legs["follow_delay_us"] = 0
    legs["key_count"] = np.where(used, reqs["prompt_key_count"], 0)
    legs["prompt_key_count"] = legs["key_count"]
    legs["block_cap"] = slots
    legs["block_start"] = n_blocks + np.concatenate(([0], np.cumsum(slots)[:-1])) if n else []
    return np.concatenate([reqs, legs]), n_blocks + int(slots.sum())


def pd_instance_rows(roles, rows) -> np.ndarray:
    """PD_INST_DT rows of the instance table: each pool's ``rows`` instances with its role,
    every queue and link empty."""
    out = np.zeros(sum(rows), S.PD_INST_DT)
    out["role"] = np.repeat(np.asarray(roles, np.int32), rows)
    for f in ("xq_head", "xq_tail", "rx_head", "rx_tail", "link_head", "link_tail"):
        out[f] = -1
    return out


def pd_request_rows(n: int) -> np.ndarray:
    """PD_REQ_DT rows of n requests: nothing disaggregated yet."""
    rows = np.zeros(max(n, 1), S.PD_REQ_DT)
    for f in ("prefill_instance", "prefill_done_us", "wait_start_us", "transfer_start_us", "transfer_data_us",
              "transfer_end_us", "link_prev", "link_next"):
        rows[f] = -1
    return rows
