"""A run's requests and instances grouped by deployment and by served model (README
"Deployments"): what the summary's ``deployments`` and ``models`` groups, the per-request
``model`` and ``deployment`` fields, the ``[deployment=D]`` / ``[model=M]`` selectors and
the ``deployment`` column of time series and decision traces are computed from.

Only three things define the groups: the run's deployments (``Setup.deployments``:
deployment d owns instance rows [first_instance, first_instance + instances)), each
request's instance (the request table's ``instance``, -1 if it was never routed) and each
request's model (``Workload.model``, an index into ``Workload.models``).

- a deployment's requests are those routed to one of its instances; its instances are its
  rows the run used (active or served something), as the cluster summary's;
- a model's requests are every request asking for it (rejected ones included, as the
  cluster's are every request); its instances are those of the deployments serving it.

The output groups and columns appear only when the run has two or more deployments
(``has_groups``): a single-deployment run's files stay byte-identical to those of the
versions before deployments.  The selectors work with any number.
"""

from __future__ import annotations

import numpy as np

from blis_fast.config.disaggregation import any_disaggregated


def has_groups(setup) -> bool:
    """True when the run's results carry deployment and model groups and columns (>= 2
    deployments)."""
    return len(setup.deployments) >= 2


def instance_deployment(setup, n_inst: int) -> np.ndarray:
    """int64 [n_inst]: the index of the deployment owning each instance row (-1: none)."""
    out = np.full(n_inst, -1, np.int64)
    for d, dep in enumerate(setup.deployments):
        out[dep.first_instance: dep.first_instance + dep.rows] = d
    return out


def deployment_names_of(setup, instances: np.ndarray) -> list[str | None]:
    """The deployment name of each instance id of ``instances`` (None for -1 or a row no
    deployment owns)."""
    names = [dep.name for dep in setup.deployments]
    owner = instance_deployment(setup, max(int(instances.max()) + 1, 0) if instances.size else 0)
    return [names[owner[i]] if i >= 0 and owner[i] >= 0 else None for i in instances.tolist()]


def instance_labels(setup, instances: np.ndarray) -> dict[str, list]:
    """Labels of instance ids ``instances`` for a result's per-instance rows, by column: the
    deployment names (``deployment``, with two or more deployments) and the pool roles
    (``pool``: mono, prefill, decode or both, in a run with prefill/decode disaggregation)."""
    out: dict[str, list] = {}
    if has_groups(setup):
        out["deployment"] = deployment_names_of(setup, instances)
    if any_disaggregated(setup.deployments):
        role = {}
        for d in setup.deployments:
            for p in d.pools:
                role.update(dict.fromkeys(range(p.first_instance, p.first_instance + p.rows), p.role))
        out["pool"] = [role.get(i) for i in instances.tolist()]
    return out


def request_model_ids(setup, workload, n: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """(int64 model id per request, the served model names they index): the workload's
    assignment, or every request the first served model's when it has none."""
    if workload.model is not None and workload.models:
        return workload.model[:n].astype(np.int64), tuple(workload.models)
    return np.zeros(n, np.int64), tuple(setup.served_models)


def deployment_selection(result, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(request mask, instance rows used) of deployment ``name``; None if the run has none
    of that name."""
    setup = result.setup
    for dep in setup.deployments:
        if dep.name == name:
            used = result._used_instances()
            rows = used[(used >= dep.first_instance) & (used < dep.first_instance + dep.rows)]
            inst = result.reqs["instance"]
            mask = (inst >= dep.first_instance) & (inst < dep.first_instance + dep.rows)
            return mask, rows
    return None


def model_selection(result, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(request mask, instance rows used) of served model ``name``; None if no deployment
    serves it."""
    setup = result.setup
    serving = [dep for dep in setup.deployments if dep.served_model_name == name]
    if not serving:
        return None
    ids, names = request_model_ids(setup, result.workload, len(result.reqs))
    mask = ids == names.index(name) if name in names else np.zeros(len(ids), bool)
    used = result._used_instances()
    mine = np.zeros(len(used), bool)
    for dep in serving:
        mine |= (used >= dep.first_instance) & (used < dep.first_instance + dep.rows)
    return mask, used[mine]


def selection(result, kind: str, name: str):
    """``deployment_selection`` or ``model_selection`` by selector kind."""
    return (deployment_selection if kind == "deployment" else model_selection)(result, name)


def group_names(setup, kind: str) -> list[str]:
    """The names a ``[deployment=...]`` or ``[model=...]`` selector may take."""
    if kind == "deployment":
        return [dep.name for dep in setup.deployments]
    return list(dict.fromkeys(dep.served_model_name for dep in setup.deployments))


def request_fields(result, rows: np.ndarray) -> dict[str, list]:
    """The per-request ``model`` and ``deployment`` fields of request ids ``rows``
    (deployment None for a request never routed)."""
    ids, names = request_model_ids(result.setup, result.workload, len(result.reqs))
    inst = np.asarray(result.reqs["instance"])[rows]
    return {"model": [names[k] for k in ids[rows].tolist()],
            "deployment": deployment_names_of(result.setup, inst.astype(np.int64))}


__all__ = ["deployment_names_of", "deployment_selection", "group_names", "has_groups", "instance_deployment",
           "instance_labels", "model_selection", "request_fields", "request_model_ids", "selection"]
