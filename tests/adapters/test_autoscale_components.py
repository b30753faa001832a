"""The adapters on an autoscaled scenario (docs/autoscaling.md): a candidate's
``autoscale`` component (docs/policies.md "Autoscaling") changes its runs like any other
policy section; a bad one is an invalid candidate naming the key, not a crash; GEPA's
evaluate and OpenEvolve's evaluator score an autoscale section and their feedback names
the pool's bounds; the reflection prompt and the seed program list the section's keys.

The scenario is configs/examples/autoscaling/diurnal.yaml on the compressed day cut to its
night and morning ramp (the first 1,500 s), where the autoscaler has to scale out."""

from __future__ import annotations

import pytest
import yaml

import blis_fast
from blis_fast.adapters.core import SECTIONS, FitnessSet
from builders import ROOT

EXAMPLES = ROOT / "configs" / "examples" / "autoscaling"
OBJECTIVES = "slo_attainment:max,ttft_p99_ms:min:1000"
EAGER = "policy: threshold\nparams: {signal: in_flight, up: 20, down: 8}"
FRUGAL = "policy: threshold\nparams: {signal: in_flight, up: 120, down: 40}"


@pytest.fixture(scope="module")
def scenarios_file(tmp_path_factory):
    """A scenarios file: the example deployment on the day's first 1,500 s."""
    d = tmp_path_factory.mktemp("autoscale")
    spec = blis_fast.load_yaml(EXAMPLES / "diurnal-day.yaml")
    spec["duration_s"] = 1500
    (d / "morning.yaml").write_text(yaml.safe_dump(spec))
    (d / "scenarios.yaml").write_text(yaml.safe_dump({
        "objectives": OBJECTIVES, "budget": {"max_wall_s": 60},
        "scenarios": [{"name": "morning", "config": str(EXAMPLES / "diurnal.yaml"), "workload_spec": "morning.yaml"}]}))
    return d / "scenarios.yaml"


@pytest.fixture(scope="module")
def fitness(scenarios_file):
    return FitnessSet(str(scenarios_file), workers=1)


def test_the_autoscale_component_is_searched_like_the_other_sections(fitness):
    assert "autoscale" in SECTIONS
    eager = fitness.run({"autoscale": EAGER})[0]
    frugal = fitness.run({"routing": "type: least-loaded", "autoscale": FRUGAL})[0]
    assert eager.status == frugal.status == "ok"
    assert eager.metrics["ttft_p99_ms"] < 1000 < frugal.metrics["ttft_p99_ms"]
    assert eager.score > frugal.score and eager.policy_id != frugal.policy_id


@pytest.mark.parametrize("component, needle", [
    ("policy: threshold\nparams: {signal: in_flight, up: 20, down: 8, target: 3}", "autoscale.params.target"),
    ("policy: threshold\nparams: {signal: queue, up: 20, down: 8}", "autoscale"),
    ("policy: elastic", "autoscale"),
])
def test_a_bad_autoscale_component_is_an_invalid_candidate_not_a_crash(fitness, component, needle):
    (row,) = fitness.run({"autoscale": component})
    assert row.status == "invalid_policy" and needle in row.message and row.score == 0.0


def test_gepa_scores_an_autoscale_component_and_tells_the_bounds(scenarios_file):
    pytest.importorskip("gepa")
    from blis_fast.adapters.gepa import REFLECTION_TEMPLATE, BlisGEPAAdapter

    for key in ("autoscale", "threshold", "in_flight", "kv_up", "period_ticks"):
        assert key in REFLECTION_TEMPLATE
    adapter = BlisGEPAAdapter(str(scenarios_file), workers=1)
    batch = adapter.evaluate(adapter.names, {"autoscale": EAGER}, capture_traces=True)
    assert batch.scores[0] > 0.9
    assert "2 instances (autoscaled within 1-8 instances) of meta-llama/llama-3.1-70b-instruct" in \
        batch.trajectories[0]["feedback"]
    data = adapter.make_reflective_dataset({"autoscale": EAGER}, batch, ["autoscale"])
    assert data["autoscale"][0]["Inputs"]["current text"] == EAGER


def test_openevolve_scores_an_autoscale_program(scenarios_file, tmp_path, monkeypatch):
    from blis_fast.adapters.openevolve import SCENARIOS_ENV, evaluators_for
    from blis_fast.adapters.openevolve_starter import PROGRAM_YAML

    assert "autoscale" in PROGRAM_YAML and "in_flight" in PROGRAM_YAML
    monkeypatch.setenv(SCENARIOS_ENV, str(scenarios_file))
    evaluate, _, _ = evaluators_for(str(tmp_path / "evaluator.py"))
    scores = {}
    for name, section in (("eager", EAGER), ("frugal", FRUGAL)):
        program = tmp_path / f"{name}.yaml"
        program.write_text("routing: least-loaded\nautoscale:\n  " + section.replace("\n", "\n  ") + "\n")
        result = evaluate(str(program))
        metrics = result.metrics if hasattr(result, "metrics") else result  # (a dict without openevolve)
        scores[name] = metrics["combined_score"]
        assert metrics["completed_requests"] > 0
    assert scores["eager"] > scores["frugal"] > 0

