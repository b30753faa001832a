"""GEPA adapter (extra ``blis-fast[gepa]``; checked against gepa 0.1.4).

``BlisGEPAAdapter`` follows gepa's adapter protocol (a structural Protocol: no base class):

- a candidate is ``{component: yaml_text}`` -- ``policy`` (a whole bundle) and/or bundle
  sections (``admission``, ``routing``, ``scheduler``, ...), so GEPA can reflect on one
  section at a time;
- a data instance is a scenario name (``adapter.names``: pass them as trainset/valset);
- ``evaluate(batch, candidate, capture_traces)`` returns scores in [0, 1] (higher is
  better), ``objective_scores`` (each normalized objective, for Pareto fronts with
  ``frontier_type="objective"|"hybrid"``), small picklable outputs, and with traces the
  feedback text (``adapters.core.feedback_text``, incl. the run's trace summary); a bad
  candidate scores 0 with the validation error -- nothing is raised;
- ``make_reflective_dataset`` gives each component one record per scenario: Inputs (the
  scenario and the component's text; for a component holding expression or tree policies
  also each program in canonical form and the features it reads), Generated Outputs (key
  metrics, and ``program_faults`` when the run reports them), Feedback.

``optimize_anything_evaluator(...)`` returns ``fn(candidate, example=None) -> (score,
side_info)`` for ``gepa.optimize_anything``; ``side_info["scores"]`` carries the objective
vector, ``side_info["Feedback"]`` the text.

    from blis_fast.adapters.gepa import BlisGEPAAdapter
    adapter = BlisGEPAAdapter("configs/evaluate/scenarios.yaml")
    result = gepa.optimize(seed_candidate={"routing": "round-robin"}, trainset=adapter.names,
                           adapter=adapter, reflection_lm=my_lm, max_metric_calls=200)

``REFLECTION_TEMPLATE`` (also ``BlisGEPAAdapter.reflection_template``) is a reflection
prompt that lists the allowed policy names and the expression and tree forms of every
slot (``program_forms``) and asks for one fenced YAML block: pass it as
``reflection_prompt_template=``.  gepa itself is imported only to build its
``EvaluationBatch``.
"""

from __future__ import annotations

from typing import Any

from blis_fast.adapters.core import FitnessSet, bundle_of_components, describe_scenario, feedback_text
from blis_fast.batch.scenarios import MAX_SCENARIOS
from blis_fast.config.expression import ALLOWED_SYNTAX  # the compiler's own one-line syntax
from blis_fast.config.expression import FEATURES, MAX_TREE_DEPTH, decompile, reads
from blis_fast.config.policy import PROGRAM_FORMS, PROGRAM_SLOTS, bundle_to_settings, program_kind, program_row
from blis_fast.config.validate import MAX_STR_LEN, as_bool, as_list, as_mapping, as_str, show
from blis_fast.errors import ConfigError

# A reflection prompt that knows what a component is (gepa's template variables: <curr_param>,
# <side_info>); pass it as gepa.optimize(reflection_prompt_template=REFLECTION_TEMPLATE).
REFLECTION_TEMPLATE = """You are tuning one component of a request-routing and scheduling policy for a cluster of \
LLM inference servers, evaluated by the blis-fast simulator. The component is YAML (a section of a blis-fast \
policy bundle, or a whole bundle):
```
<curr_param>
```

Allowed values: admission: always-admit | token-bucket (params capacity, refill_rate); routing: round-robin | \
least-loaded | weighted (params scorers: queue-depth, kv-utilization, load-balance, prefix-affinity, each a \
positive weight) | prefix-affinity; priority: constant | slo-based | inverted-slo (params slo_class_weights: a \
list of numbers); scheduler: fcfs | priority-fcfs | sjf | reverse-priority | sort (params priority, arrival, \
prompt_len, output_len); preemption: victim last | lowest-priority. \
For scenarios with autoscaled pools, autoscale: policy none | threshold (params signal, up, down: scale out \
when the signal exceeds up, in when it falls below down; for slo_attainment out below up, in above down) | \
target (params signal, target: desired = ceil(current x signal / target)) | saturation (params kv_up, kv_down) | \
oscillator (params period_ticks); signal one of kv_utilization (0..1), waiting, in_flight, arrival_rate (each \
per serving instance), ttft_p90_ms, slo_attainment. flow_control (a queue in front of the router while the \
instances are saturated): policy never | concurrency (params concurrency_limit: in flight per instance) | \
utilization (params queue_threshold, kv_threshold 0..1) | free-slot (late binding) | expression (its formulas: \
below), each but never with params \
dispatch_order fifo | priority | deadline and fairness strict | round-robin. A misspelled name or a non-finite \
number scores 0.

<programs>

How the current component did on each scenario (objectives, targets, misses and the run's main problems):
```
<side_info>
```

Propose an improved version of this component that meets more objectives. Answer with the new YAML only, \
inside one fenced code block."""

def program_forms() -> str:
    """The reflection prompt's paragraph on expression and tree policies, generated from
    ``PROGRAM_FORMS`` (each slot's bundle form and meaning) and ``FEATURES`` (each slot's
    feature names), so it lists exactly what the compiler accepts."""
    forms = [f"{form} ({meaning}; features: {', '.join(FEATURES[slot])})"
             for slot, (form, meaning) in PROGRAM_FORMS.items()]
    return ("Every slot can also hold a program instead of a named policy: " + "; ".join(forms) + ". Each also "
            "takes a decision tree: type: tree (victim: tree, dispatch_order: tree, decider: tree, policy: tree "
            "where those name the policy) and tree: {...} instead of the formula's key. "
            f"An expression may use {ALLOWED_SYNTAX}; a tree is {{feature, threshold, left, right}} (left when "
            f"feature <= threshold, at most {MAX_TREE_DEPTH} levels; leaves are numbers or expressions). A "
            "program that does not compile scores 0; a value that is not finite counts as a program fault and "
            "gets the slot's worst value.")


REFLECTION_TEMPLATE = REFLECTION_TEMPLATE.replace("<programs>", program_forms())

OUTPUT_METRICS = ("slo_attainment", "goodput_rps", "ttft_p99_ms", "e2e_p99_ms", "rejected_requests",
                  "preemption_count", "simulated_duration_s")


class BlisGEPAAdapter:
    """gepa adapter over blis-fast scenarios (module docstring).  ``scenarios``: a
    scenarios file or scenario dicts/objects; ``objectives``/``budget`` default to the
    file's; ``workers``: threads per ``evaluate`` call (default all cores)."""

    propose_new_texts = None  # gepa's default: LLM reflection on make_reflective_dataset
    reflection_template = REFLECTION_TEMPLATE

    def __init__(self, scenarios, objectives=None, budget=None, workers: int | None = None):
        self.fitness = FitnessSet(scenarios, objectives, budget, workers)

    @property
    def names(self) -> list[str]:
        """The scenario names: gepa's data instances."""
        return self.fitness.names

    def evaluate(self, batch: list, candidate: dict[str, str], capture_traces: bool = False):
        """Scores of ``candidate`` on the scenarios of ``batch``.  A candidate whose text is
        not a valid policy scores 0 with the error in its trajectory (gepa's contract: one
        bad example never raises); a call of the wrong shape -- ``batch`` not a list of
        scenario names, ``candidate`` not a mapping {component: text} -- is the caller's
        mistake and raises ConfigError naming the argument."""
        from gepa import EvaluationBatch  # deferred: gepa

        batch = check_batch(batch, self.fitness)
        candidate = check_components(candidate)
        capture_traces = as_bool(capture_traces, "capture_traces", text=False)
        results = self.fitness.run(candidate, batch, summarize=capture_traces)
        outputs, trajectories = [], []
        for item, ev in zip(batch, results):
            ps = self.fitness.scenario(item)
            out = {"scenario": ps.name, "status": ev.status, "score": float(ev.score),
                   "metrics": {k: float(ev.metrics[k]) for k in OUTPUT_METRICS if k in ev.metrics}}
            faults = {k[len(FAULTS_PREFIX):]: int(v) for k, v in ev.metrics.items() if k.startswith(FAULTS_PREFIX)}
            if faults:  # (only a run with expression or tree policies reports them)
                out["program_faults"] = faults
            outputs.append(out)
            if capture_traces:
                trajectories.append({"scenario": ps.name, "status": ev.status, "feedback": feedback_text(ev, ps)})
        return EvaluationBatch(
            outputs=outputs,
            scores=[float(ev.score) for ev in results],
            trajectories=trajectories if capture_traces else None,
            objective_scores=[{k: float(v) for k, v in ev.objectives.items()} for ev in results],
        )

    def make_reflective_dataset(self, candidate: dict[str, str], eval_batch, components_to_update: list[str]) -> dict:
        """One record per scenario of ``eval_batch`` (what ``evaluate`` returned with
        ``capture_traces=True``) for each component; ConfigError naming the argument when
        one is not what gepa passes."""
        candidate = check_components(candidate)
        components = [as_str(c, f"components_to_update[{k}]", max_len=MAX_STR_LEN)
                      for k, c in enumerate(as_list(components_to_update, "components_to_update",
                                                    max_len=MAX_COMPONENTS, what="a list of component names"))]
        outputs, trajectories = _batch_rows(eval_batch)
        records = []
        for out, traj in zip(outputs, trajectories):
            ps = self.fitness.scenario(traj["scenario"])
            generated = {"status": out["status"], "score": round(out["score"], 4)}
            generated.update({k: round(v, 4) for k, v in out["metrics"].items()})
            if out.get("program_faults"):
                generated["program_faults"] = dict(out["program_faults"])
            records.append((ps, generated, traj["feedback"]))
        programs = {comp: program_inputs(comp, candidate.get(comp, "")) for comp in components}
        return {
            comp: [{"Inputs": {"scenario": f"{ps.name}: {describe_scenario(ps)}",
                               "component": comp, "current text": _text(candidate.get(comp, "")), **programs[comp]},
                    "Generated Outputs": generated,
                    "Feedback": feedback} for ps, generated, feedback in records]
            for comp in components
        }


MAX_COMPONENTS = 64  # components of a candidate (gepa mutates one at a time)
FAULTS_PREFIX = "program_faults_"  # a run's evaluation metrics: program_faults_<slot> (results.scorecard)


def program_inputs(component: str, text: Any) -> dict[str, str]:
    """For a component whose YAML holds expression or tree policies: each program in
    canonical form (the decompiled program: what the simulator runs) and the features it
    reads, e.g. ``{"routing program": "(-load)", "routing reads": "load"}``.  Empty for
    other components and for text that is not a valid policy (``evaluate``'s feedback
    carries that error)."""
    if not isinstance(text, str):
        return {}
    try:
        settings = bundle_to_settings(bundle_of_components({component: text}))
    except ConfigError:
        return {}
    out = {}
    for slot, (kind_field, program_field, _) in PROGRAM_SLOTS.items():
        if settings.get(program_field) is None or settings.get(kind_field) is None:
            continue
        row = program_row(program_kind(slot, settings[kind_field], settings[program_field]), settings[program_field],
                          slot, program_field)
        out[f"{slot} program"] = decompile(row, slot)
        out[f"{slot} reads"] = ", ".join(reads(row, slot)) or "no feature"
    return out


def check_batch(batch, fitness: FitnessSet) -> list:
    """``batch`` as a list of known scenario names (or scenarios carrying one)."""
    items = as_list(batch, "batch", max_len=MAX_SCENARIOS, what="a list of scenario names (adapter.names)")
    for k, item in enumerate(items):
        try:
            fitness.scenario(item)
        except ConfigError as exc:
            raise ConfigError(f"batch[{k}]", exc.message) from None
    return items


def check_components(candidate) -> dict:
    """A gepa candidate: a non-empty mapping {component name: text}.  Texts that are not
    valid YAML policy sections make an invalid candidate (score 0), not an error here."""
    as_mapping(candidate, "candidate", what="a mapping {component: text} (gepa's candidate)")
    if not candidate or len(candidate) > MAX_COMPONENTS:
        raise ConfigError("candidate", f"must have 1 to {MAX_COMPONENTS} components, got {len(candidate)}")
    for name in candidate:
        as_str(name, "candidate", max_len=MAX_STR_LEN)
    return dict(candidate)


def _batch_rows(eval_batch) -> tuple[list, list]:
    """(outputs, trajectories) of an EvaluationBatch made by ``evaluate``; no trajectories
    (``capture_traces=False``) gives no records."""
    what = "the EvaluationBatch evaluate() returned (with capture_traces=True)"
    outputs, trajectories = getattr(eval_batch, "outputs", None), getattr(eval_batch, "trajectories", None)
    if not isinstance(outputs, list):
        raise ConfigError("eval_batch", f"must be {what}, got {show(eval_batch)}")
    if trajectories is None:
        return outputs, []
    if not isinstance(trajectories, list) or len(trajectories) != len(outputs):
        raise ConfigError("eval_batch", f"must be {what}: its trajectories do not match its outputs")
    for k, (out, traj) in enumerate(zip(outputs, trajectories)):
        if not (isinstance(out, dict) and isinstance(out.get("status"), str) and isinstance(out.get("score"), float)
                and isinstance(out.get("metrics"), dict) and all(isinstance(v, float) for v in out["metrics"].values())
                and isinstance(traj, dict) and isinstance(traj.get("feedback"), str)
                and _faults_ok(out.get("program_faults", {}))):
            raise ConfigError(f"eval_batch[{k}]", f"must be a row of {what}, got {show(out)}")
    return outputs, trajectories


def _faults_ok(faults) -> bool:
    """A row's ``program_faults``: at most one count per program slot."""
    return isinstance(faults, dict) and len(faults) <= len(PROGRAM_SLOTS) and all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in faults.items())


def _text(value) -> str:
    """A component's text as the reflection prompt shows it (JSON-able whatever was passed)."""
    return value if isinstance(value, str) else show(value)


def optimize_anything_evaluator(scenarios, objectives=None, budget=None, workers: int | None = None):
    """``fn(candidate, example=None) -> (score, side_info)`` for ``gepa.optimize_anything``:
    ``candidate`` is bundle YAML text (a str seed) or components {name: yaml}; ``example``
    a scenario name (``dataset=fn.names``), or omitted: every scenario, scores averaged."""
    fitness = FitnessSet(scenarios, objectives, budget, workers)

    def evaluate(candidate: Any, example: Any = None, **_: Any):
        items = [example] if example is not None else None
        results = fitness.run(candidate, items, summarize=True)
        names = [example] if example is not None else fitness.names
        score = sum(ev.score for ev in results) / len(results)
        keys = list(dict.fromkeys(k for ev in results for k in ev.objectives))
        scores = {k: sum(ev.objectives.get(k, 0.0) for ev in results) / len(results) for k in keys}
        feedback = "\n\n".join(feedback_text(ev, fitness.scenario(n)) for ev, n in zip(results, names))
        return float(score), {"scores": scores, "Feedback": feedback}

    evaluate.names = fitness.names
    evaluate.fitness = fitness
    return evaluate
