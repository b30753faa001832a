"""``EvaluationResult``: one run judged against objectives, as one object / one JSON
document (``--evaluation-out``): the score in [0, 1], the normalized objective vector, the
raw metrics, what was evaluated (policy id, workload id, seed) and, when asked, the trace
summary.  Everything but ``wall_time_s`` is deterministic; ``to_dict()`` leaves the wall
time out unless asked, so identical inputs give byte-identical files.

- ``policy_id``: the first 16 hex digits of SHA-256 over the compiled policy arrays (kind
  codes, parameter matrix), the router's prefix-index capacity and, when the policy routes
  some model by its own routing, every served model's routing row -- equal ids mean the
  kernels saw the same candidate;
- ``workload_id``: likewise over the workload's arrays (arrivals, prompt and output
  lengths, block keys and their offsets, labels, closed-loop links, block size).
"""

from __future__ import annotations

import hashlib
import json
import weakref
from dataclasses import dataclass, field

import numpy as np
from blis_fast_kernels.schema import PolicySlot
from blis_fast.results.objectives import judge, parse_objectives, weighted_score

STATUS_OK = "ok"


@dataclass
class EvaluationResult:
    """A run judged against objectives (module docstring).  ``status`` is "ok" or an
    error status (set by batch evaluators for candidates that could not run; then
    ``score`` is 0 and ``message`` says why)."""

    score: float
    objectives: dict[str, float]  # metric -> normalized value in [0, 1]
    metrics: dict[str, float]  # raw values: every whole-run metric + each objective's metric
    policy_id: str = ""
    workload_id: str = ""
    seed: int | None = None
    simulated_duration_s: float = 0.0
    wall_time_s: float | None = None
    status: str = STATUS_OK
    message: str = ""
    summary_text: str | None = None
    # per objective: {metric, direction, target, weight, value, normalized, met}
    details: list[dict] = field(default_factory=list)
    counterfactuals: list[dict] = field(default_factory=list)  # exact replays (run.counterfactual)

    def to_dict(self, include_wall_time: bool = False) -> dict:
        """A JSON-able dict (keys in a fixed order); ``wall_time_s`` only when asked."""
        out = {
            "status": self.status,
            "message": self.message,
            "score": self.score,
            "objectives": dict(self.objectives),
            "details": [dict(d) for d in self.details],
            "policy_id": self.policy_id,
            "workload_id": self.workload_id,
            "seed": self.seed,
            "simulated_duration_s": self.simulated_duration_s,
            "metrics": dict(self.metrics),
        }
        if include_wall_time:
            out["wall_time_s"] = self.wall_time_s
        if self.counterfactuals:
            out["counterfactuals"] = [dict(c) for c in self.counterfactuals]
        if self.summary_text is not None:
            out["summary_text"] = self.summary_text
        return out

    def to_json(self, include_wall_time: bool = False) -> str:
        """``to_dict`` as indented JSON text (NaN-free) with a final newline."""
        return json.dumps(self.to_dict(include_wall_time), indent=2, allow_nan=False) + "\n"

    @classmethod
    def failed(cls, status: str, message: str, *, policy_id: str = "", workload_id: str = "",
               seed: int | None = None, wall_time_s: float | None = None) -> "EvaluationResult":
        """The result of a candidate that could not be evaluated: score 0, no metrics."""
        return cls(0.0, {}, {}, policy_id, workload_id, seed, 0.0, wall_time_s, status, message)


def _digest(parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, np.ndarray):
            a = np.ascontiguousarray(p)
            h.update(str(a.dtype).encode() + str(a.shape).encode())
            h.update(a.tobytes())
        else:
            h.update(repr(p).encode())
        h.update(b"|")
    return h.hexdigest()[:16]


TEMPLATE_WIDTH = 64


def policy_id(kinds: np.ndarray, params: np.ndarray, prefix_index_capacity: int,
              routing_kind: np.ndarray | None = None, routing_param: np.ndarray | None = None,
              pd_decider: str | None = None, pd_threshold: int | None = None,
              flow_kind: np.ndarray | None = None, flow_param: np.ndarray | None = None) -> str:
    """Hash of a compiled policy candidate (module docstring).  ``routing_kind`` and
    ``routing_param``: the routing row of each routing group (``State.routing_kind``,
    ``routing_param``: served models, P/D prefill legs); hashed only when some row is not
    the ROUTING slot's, so a policy without routing per model keeps its id.  The P/D
    decider settings (``PolicyConfig.pd_decider``, ``pd_threshold``) are hashed when set, and
    the AUTOSCALE and FLOW slots when they hold a policy; ``flow_kind`` / ``flow_param``
    (``State.flow_kind``, ``flow_param``: each served model's flow control) only when some
    row is not the FLOW slot's (flow control per model)."""
    kinds, params = np.asarray(kinds, np.int64), np.asarray(params, np.float64)
    # parameter rows were TEMPLATE_WIDTH wide before programs: a policy using no more keeps its id
    rows = [params] + [np.asarray(a, np.float64) for a in (routing_param, flow_param) if a is not None]
    if not any(a[:, TEMPLATE_WIDTH:].any() for a in rows):
        params = params[:, :TEMPLATE_WIDTH]
        routing_param = None if routing_param is None else np.asarray(routing_param)[:, :TEMPLATE_WIDTH]
        flow_param = None if flow_param is None else np.asarray(flow_param)[:, :TEMPLATE_WIDTH]
    kinds_all, params_all = kinds, params
    # trailing slots that hold nothing (no flow control, no autoscaler) are left out, so a policy
    # keeps the id it had before those slots existed
    used = len(kinds)
    while used > PolicySlot.AUTOSCALE and kinds[used - 1] == 0 and not params[used - 1].any():
        used -= 1
    kinds, params = kinds[:used], params[:used]
    parts = [kinds, params, int(prefix_index_capacity)]
    if routing_kind is not None and (np.any(routing_kind != kinds[PolicySlot.ROUTING])
                                     or np.any(routing_param != params[PolicySlot.ROUTING])):
        parts += [np.asarray(routing_kind, np.int64), np.asarray(routing_param, np.float64)]
    if pd_decider is not None or pd_threshold is not None:
        parts += ["pd", pd_decider, pd_threshold]
    full_kinds, full_params = np.asarray(kinds_all, np.int64), np.asarray(params_all, np.float64)
    if flow_kind is not None and (np.any(flow_kind != full_kinds[PolicySlot.FLOW])
                                  or np.any(flow_param != full_params[PolicySlot.FLOW])):
        parts += ["flow", np.asarray(flow_kind, np.int64), np.asarray(flow_param, np.float64)]
    return _digest(parts)


_WORKLOAD_IDS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def workload_id(workload) -> str:
    """Hash of a workload's arrays (module docstring); computed once per Workload object
    (its arrays are never changed after it is built), so a batch evaluating thousands of
    candidates on one workload hashes it once (~12 ms for 10K requests)."""
    known = _WORKLOAD_IDS.get(workload)
    if known is not None:
        return known
    parts = [workload.arrival_us, workload.prompt_len, workload.output_len, workload.block_keys,
             workload.key_offsets, int(workload.block_size)]
    if workload.model_block_sizes:  # (keys per model: absent for one block size, so its id is unchanged)
        parts.append(np.asarray(workload.model_block_sizes, np.int64))
    for name in workload.ATTRIBUTES:
        parts.append(workload.column(name))
    if workload.has_deadlines:  # (absent without deadlines, so such a workload keeps its id)
        parts += [getattr(workload, name) for name in (*workload.DEADLINE_COLUMNS, "retry_backoff")]
    _WORKLOAD_IDS[workload] = out = _digest(parts)
    return out


def evaluate(result, objectives=None, summarize: bool = False) -> EvaluationResult:
    """Judge ``result`` against ``objectives`` (spec text, a list, or None: the run
    config's ``objectives`` setting, else ``objectives.DEFAULT_SPEC``)."""
    if objectives is None:
        objectives = result.setup.config.objectives
    objs = parse_objectives(objectives)
    details = judge(result, objs)
    total = weighted_score(details)
    normalized = {d["metric"]: d["normalized"] for d in details}
    metrics = dict(result.evaluation_metrics)
    metrics.update({d["metric"]: d["value"] for d in details})
    st = result.state
    cfg = result.setup.config
    return EvaluationResult(
        score=total,
        objectives=normalized,
        metrics=metrics,
        policy_id=policy_id(st.policy_kind, st.policy_param, cfg.policy.prefix_index_capacity, st.routing_kind,
                            st.routing_param, cfg.policy.pd_decider, cfg.policy.pd_threshold, st.flow_kind,
                            st.flow_param),
        workload_id=workload_id(result.workload),
        seed=result.seed,
        simulated_duration_s=float(metrics["simulated_duration_s"]),
        wall_time_s=result.wall_time_s,
        summary_text=result.summary_text(objs) if summarize else None,
        details=details,
        counterfactuals=list(result.counterfactuals),
    )


__all__ = ["EvaluationResult", "STATUS_OK", "evaluate", "policy_id", "workload_id"]
