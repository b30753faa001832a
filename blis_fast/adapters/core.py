"""What the GEPA and OpenEvolve adapters share (no framework imports): a ``FitnessSet`` --
scenarios prepared once, then any candidate evaluated on any of them in parallel -- and
the feedback text an LLM reads to improve a candidate.

A candidate may also come as *components* ``{name: yaml_text}`` (GEPA mutates one at a
time): ``policy`` holds a whole bundle, and a bundle section's name (``admission``,
``routing``, ``priority``, ``scheduler``, ``preemption``, ``observability``, ``pd``,
``autoscale``, ``flow_control``) holds that section's YAML; they are merged into one bundle.
"""

from __future__ import annotations

from typing import Any, Sequence

from blis_fast.batch.budget import Budget
from blis_fast.batch.candidates import INVALID, Candidate, load_candidate
from blis_fast.batch.evaluate import MAX_WORKERS, default_workers, evaluate_prepared
from blis_fast.batch.scenarios import PreparedScenario, as_scenarios, load_scenarios_file, prepare
from blis_fast.config.validate import as_int, show
from blis_fast.errors import ConfigError
from blis_fast.results.objectives import known_list
from blis_fast.results.trace_summary import _fmt  # the trace summary's number format, for one voice
from blis_fast.config.yamlfile import load_yaml_text

SECTIONS = ("admission", "routing", "priority", "scheduler", "preemption", "observability", "pd", "autoscale",
            "flow_control")
WHOLE = "policy"  # the component holding a whole bundle
BUNDLE_HELP = ("a policy bundle is YAML with sections admission, routing, priority, scheduler, preemption, "
               "observability, flow_control, for prefill/decode pools pd and, for autoscaled pools, autoscale "
               "(docs/policies.md), "
               "e.g. 'routing: {type: weighted, params: {scorers: {queue-depth: 2, kv-utilization: 1}}}'")


class FitnessSet:
    """Scenarios prepared once, with objectives, a budget and a worker count; ``run``
    evaluates one candidate on some of them."""

    def __init__(self, scenarios, objectives=None, budget: Budget | dict | None = None, workers: int | None = None):
        # the cheap checks first, before any scenario file is read or workload built
        workers = default_workers() if workers is None else as_int(workers, "workers", 1, MAX_WORKERS, text=False,
                                                                   integral_float=False)
        if scenarios is None:
            raise ConfigError("scenarios", "must be a scenarios file, a scenario mapping or a list of them, got None")
        if isinstance(scenarios, str) or hasattr(scenarios, "__fspath__"):
            scen, file_objectives, file_budget = load_scenarios_file(scenarios)
            objectives = objectives if objectives is not None else file_objectives
            budget = budget if budget is not None else file_budget
        else:
            scen = as_scenarios(scenarios)
        self.budget = Budget.parse(budget)
        self.workers = workers
        self.prepared: dict[str, PreparedScenario] = {s.name: prepare(s, objectives) for s in scen}

    @property
    def names(self) -> list[str]:
        """Scenario names, in file order (GEPA's data instances)."""
        return list(self.prepared)

    def scenario(self, item: Any) -> PreparedScenario:
        """A prepared scenario by name (or a Scenario / mapping carrying its name)."""
        name = item if isinstance(item, str) else getattr(item, "name", None) or (
            item.get("name") if isinstance(item, dict) else None)
        if name not in self.prepared:
            raise ConfigError("scenario", f"unknown scenario {show(name)}; known: {known_list(self.prepared)}")
        return self.prepared[name]

    def run(self, candidate: Any, items: Sequence[Any] | None = None, summarize: bool = False,
            candidate_id: str = "candidate") -> list:
        """EvaluationResults of ``candidate`` (bundle text, dict, file, or components
        ``{name: yaml}``) on ``items`` (default: every scenario); never raises for a bad
        candidate."""
        prepared = [self.scenario(x) for x in items] if items is not None else list(self.prepared.values())
        cand = candidate_of(candidate, candidate_id)
        return evaluate_prepared([cand], prepared, self.budget, self.workers, summarize=summarize)


def candidate_of(candidate: Any, candidate_id: str) -> Candidate:
    """A Candidate from bundle text / dict / file, or from components {name: yaml_text}."""
    if isinstance(candidate, dict) and candidate and all(isinstance(v, str) for v in candidate.values()) \
            and set(candidate) <= {WHOLE, *SECTIONS}:
        try:
            return load_candidate(bundle_of_components(candidate), candidate_id)
        except ConfigError as exc:
            return Candidate(candidate_id, error=(INVALID, str(exc)))
    return load_candidate(candidate, candidate_id)


def bundle_of_components(components: dict[str, str]) -> dict:
    """One bundle from components (ConfigError naming the component)."""
    bundle: dict = {}
    for name in sorted(components, key=lambda n: (n != WHOLE, n)):  # the whole bundle first, sections override
        value = load_yaml_text(components[name], f"component {name}")
        if name == WHOLE:
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(f"component {name}", f"must be a mapping of policy sections; {BUNDLE_HELP}")
            bundle.update(value)
        elif value is not None:
            bundle[name] = value
    return bundle


def feedback_text(ev, ps: PreparedScenario) -> str:
    """Short lines an LLM can act on: the scenario, the score, each objective (value,
    target, met), then the trace summary when the run made one; for a failed run, the
    status and the message (with the bundle format for an invalid policy)."""
    lines = [f"Scenario {ps.name}: {describe_scenario(ps)}"]
    if ev.status != "ok":
        lines.append(f"FAILED ({ev.status}), score 0: {ev.message}")
        if ev.status == INVALID:
            lines.append(f"Fix the candidate: {BUNDLE_HELP}.")
        return "\n".join(lines)
    lines.append(f"Score {ev.score:.3f} (1 = every objective met).")
    for d in ev.details:
        target = "" if d["target"] is None else f", target {_fmt(d['target'])}"
        met = "" if d["met"] is None else (", met" if d["met"] else ", MISSED")
        lines.append(f"- {d['metric']} ({d['direction']}): {_fmt(d['value'])}{target}{met} "
                     f"(normalized {d['normalized']:.3f})")
    if ev.summary_text:
        lines += ["", ev.summary_text.strip()]
    return "\n".join(lines)


def describe_scenario(ps: PreparedScenario) -> str:
    """One line: instances (and the autoscaled bounds), model, workload, SLO targets."""
    cfg = ps.setup.config
    d = ps.workload.description or {}
    kind = d.get("kind", "workload")
    wl = f"{len(ps.workload)} requests ({kind}"
    if d.get("rate") is not None:
        wl += f" at {_fmt(d['rate'])} req/s"
    wl += ")"
    slo = "; ".join(f"{name}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in (t or {}).items() if v is not None)
                    for name, t in (ps.workload.slo_targets or {}).items())
    # the bounds of autoscaled deployments: what the candidate's autoscale section works within
    deployments = cfg.deployment_list()
    bounds = [f"{d.autoscale.min_instances}-{d.autoscale.max_instances}"
              + (f" ({d.name})" if len(deployments) > 1 else "") for d in deployments if d.autoscale is not None]
    scaled = f" (autoscaled within {', '.join(bounds)} instances)" if bounds else ""
    return (f"{cfg.deployment.num_instances} instances{scaled} of {cfg.model} on {cfg.hardware}, {wl}"
            + (f"; SLO targets {slo}" if slo else "") + ".")

