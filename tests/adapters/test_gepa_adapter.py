"""BlisGEPAAdapter with the real gepa package, offline: gepa.optimize with a deterministic
fake reflection improves a deliberately bad seed policy on a contention scenario,
reproducibly; bad candidates score 0 with an actionable message; optimize_anything."""

from __future__ import annotations

import re

import pytest

gepa = pytest.importorskip("gepa")  # CI installs the gepa extra (README, .ci): this runs there

from blis_fast.adapters.gepa import BlisGEPAAdapter, optimize_anything_evaluator  # noqa: E402
from blis_fast.errors import ConfigError  # noqa: E402

CONTENTION = [  # two instances near saturation: where a request goes decides its TTFT
    {"name": "busy", "config": {"num_instances": 2, "workload": "chatbot", "rate": 300, "num_requests": 200,
                                "max_num_seqs": 32}, "seed": 1, "slo_classes": {"chat": {"ttft_ms": 250}}},
    {"name": "burst", "config": {"num_instances": 2, "workload": "chatbot", "rate": 400, "num_requests": 120},
     "seed": 2, "slo_classes": {"chat": {"ttft_ms": 400}}},
]
OBJECTIVES = "slo_attainment:max,ttft_p99_ms:min:250"
# the fake reflection's idea of progress: each step a better routing policy
NEXT = {"always-busiest": "round-robin", "round-robin": "least-loaded", "least-loaded": "least-loaded"}


class Quiet:
    def log(self, message: str) -> None:
        pass


def fake_reflection(prompt) -> str:
    """Deterministic 'LLM': reads the current component text (the prompt's first fenced
    block) and answers with the next policy of NEXT in a fenced block."""
    current = re.search(r"```(?:[a-z]*)\n(.*?)```", prompt, re.S).group(1).strip()
    return f"```yaml\n{NEXT.get(current, 'least-loaded')}\n```"


@pytest.fixture(scope="module")
def adapter():
    return BlisGEPAAdapter(CONTENTION, objectives=OBJECTIVES, workers=2)


PROMPTS: list[str] = []


def recording_reflection(prompt) -> str:
    PROMPTS.append(prompt)
    return fake_reflection(prompt)


def optimize(adapter, tmp_path=None):
    return gepa.optimize(seed_candidate={"routing": "always-busiest"}, trainset=adapter.names, adapter=adapter,
                         reflection_lm=recording_reflection, max_metric_calls=16, reflection_minibatch_size=2,
                         reflection_prompt_template=adapter.reflection_template,
                         logger=Quiet(), seed=0, run_dir=None if tmp_path is None else str(tmp_path))


def test_optimize_improves_a_bad_seed_reproducibly(adapter):
    first = optimize(adapter)
    assert first.val_aggregate_scores[0] < max(first.val_aggregate_scores)
    assert first.best_candidate["routing"].strip() in ("round-robin", "least-loaded")
    assert first.best_idx != 0
    # the reflection saw our prompt, the current text and the scenarios' feedback
    assert "blis-fast simulator" in PROMPTS[0] and "always-busiest" in PROMPTS[0] and "Scenario busy" in PROMPTS[0]
    again = optimize(adapter)
    assert again.val_aggregate_scores == first.val_aggregate_scores
    assert again.candidates == first.candidates


def test_evaluate_contract(adapter):
    batch = adapter.evaluate(adapter.names, {"routing": "least-loaded"}, capture_traces=True)
    assert len(batch.outputs) == len(batch.scores) == len(batch.trajectories) == len(batch.objective_scores) == 2
    assert all(0.0 <= s <= 1.0 for s in batch.scores)
    assert set(batch.objective_scores[0]) == {"slo_attainment", "ttft_p99_ms"}
    assert "Scenario busy" in batch.trajectories[0]["feedback"] and "# Run summary" in batch.trajectories[0]["feedback"]
    plain = adapter.evaluate(adapter.names, {"routing": "least-loaded"})
    assert plain.trajectories is None and plain.scores == batch.scores
    data = adapter.make_reflective_dataset({"routing": "least-loaded"}, batch, ["routing"])
    rec = data["routing"][0]
    assert set(rec) == {"Inputs", "Generated Outputs", "Feedback"}
    assert rec["Inputs"]["current text"] == "least-loaded"
    import json

    json.dumps(data)  # JSON-serialisable, as gepa requires


@pytest.mark.parametrize("candidate,needle", [
    ({"routing": "[least-loaded"}, "malformed YAML"),
    ({"routing": "{type: weighted, params: {scorers: {queue-lenght: 1}}}"}, "queue-lenght"),
    ({"routing": "{type: weighted, params: {scorers: {queue-depth: .nan}}}"}, "finite"),
    ({"policy": "- not a mapping"}, "mapping of policy sections"),
])
def test_bad_candidates_score_zero_with_a_message(adapter, candidate, needle):
    batch = adapter.evaluate(adapter.names, candidate, capture_traces=True)
    assert batch.scores == [0.0, 0.0]
    assert all(o == {"slo_attainment": 0.0, "ttft_p99_ms": 0.0} for o in batch.objective_scores)
    fb = batch.trajectories[0]["feedback"]
    assert "FAILED (invalid_policy)" in fb and needle in fb


def test_optimize_anything_evaluator():
    fn = optimize_anything_evaluator(CONTENTION[:1], objectives=OBJECTIVES, workers=1)
    score, info = fn("routing: least-loaded\n")
    assert 0.0 < score <= 1.0 and set(info["scores"]) == {"slo_attainment", "ttft_p99_ms"}
    bad, info = fn("routing: nowhere\n", example="busy")
    assert bad == 0.0 and "nowhere" in info["Feedback"]
    from gepa.optimize_anything import EngineConfig, GEPAConfig, ReflectionConfig, optimize_anything

    config = GEPAConfig(engine=EngineConfig(max_metric_calls=6), reflection=ReflectionConfig(reflection_lm=fake_reflection))
    result = optimize_anything("always-busiest", evaluator=lambda c, **kw: fn(f"routing: {c}"), config=config)
    assert result.val_aggregate_scores[0] < max(result.val_aggregate_scores)
    assert result.best_candidate.strip() in ("round-robin", "least-loaded")


# ----------------------------------------------------------------------------- expression and tree policies

def test_reflection_template_names_every_program_form_and_feature():
    from blis_fast.config.expression import FEATURES
    from blis_fast.config.policy import PROGRAM_FORMS, PROGRAM_SLOTS

    template = BlisGEPAAdapter.reflection_template
    assert set(PROGRAM_FORMS) == set(PROGRAM_SLOTS) == set(FEATURES)
    for slot, (_, _, key) in PROGRAM_SLOTS.items():
        assert f"{key}: \"<expr>\"" in template
        for feature in FEATURES[slot]:
            assert re.search(rf"\b{feature}\b", template), (slot, feature)
    assert "type: tree" in template and "a if c else b" in template and "<programs>" not in template
    # gepa fills in exactly its own two variables
    assert template.count("<curr_param>") == 1 and template.count("<side_info>") == 1


def test_reflective_dataset_shows_the_program_and_its_faults(adapter):
    # 1e300 * 1e300 overflows to inf on every instance with a queue: a program fault each time
    candidate = {"routing": "{type: expression, score: \"1e300 * 1e300 * queue - load\"}"}
    batch = adapter.evaluate(adapter.names, candidate, capture_traces=True)
    assert batch.outputs[0]["program_faults"]["routing"] > 0
    rec = adapter.make_reflective_dataset(candidate, batch, ["routing"])["routing"][0]
    assert rec["Inputs"]["routing program"].replace(" ", "") == "(((1e+300*1e+300)*queue)-load)"
    assert set(rec["Inputs"]["routing reads"].split(", ")) == {"load", "queue"}
    assert rec["Generated Outputs"]["program_faults"] == batch.outputs[0]["program_faults"]
    # an eval_batch whose program_faults is not {slot: count} is refused naming the row
    bad = type(batch)(outputs=[dict(batch.outputs[0], program_faults="many")], scores=batch.scores[:1],
                      trajectories=batch.trajectories[:1])
    with pytest.raises(ConfigError, match=r"eval_batch\[0\]"):
        adapter.make_reflective_dataset(candidate, bad, ["routing"])
    # the counts are evaluation metrics too (program_faults_<slot>)
    ev = adapter.fitness.run(candidate, adapter.names[:1])[0]
    assert ev.metrics["program_faults_routing"] == batch.outputs[0]["program_faults"]["routing"]
    # a template policy reports no faults and shows no program
    plain = adapter.evaluate(adapter.names, {"routing": "least-loaded"}, capture_traces=True)
    assert "program_faults" not in plain.outputs[0]
    rec = adapter.make_reflective_dataset({"routing": "least-loaded"}, plain, ["routing"])["routing"][0]
    assert "routing program" not in rec["Inputs"]


def test_a_tree_shows_as_its_expression(adapter):
    candidate = {"routing": "{type: tree, tree: {feature: queue, threshold: 4, left: hit_blocks, right: -load}}"}
    batch = adapter.evaluate(adapter.names[:1], candidate, capture_traces=True)
    rec = adapter.make_reflective_dataset(candidate, batch, ["routing"])["routing"][0]
    assert "if" in rec["Inputs"]["routing program"] and "hit_blocks" in rec["Inputs"]["routing program"]
    assert set(rec["Inputs"]["routing reads"].split(", ")) == {"queue", "hit_blocks", "load"}


def test_an_expression_detector_shows_both_programs(adapter):
    candidate = {"flow_control": "{policy: tree, instance: {feature: in_flight, threshold: 3, left: 1, right: 0}, "
                                 "saturated: \"total < 1\", recheck: free-slot}"}
    batch = adapter.evaluate(adapter.names[:1], candidate, capture_traces=True)
    assert batch.outputs[0]["program_faults"] == {"flow_instance": 0, "flow_saturated": 0}
    rec = adapter.make_reflective_dataset(candidate, batch, ["flow_control"])["flow_control"][0]
    assert "if" in rec["Inputs"]["flow_instance program"] and rec["Inputs"]["flow_instance reads"] == "in_flight"
    assert rec["Inputs"]["flow_saturated program"].replace(" ", "") == "(total<1)"


@pytest.mark.parametrize("component,needle", [
    ("{type: expression, score: \"hit_blocks - lod\"}", "lod"),
    ("{type: expression, score: \"load +\"}", "incomplete"),
    ("{type: tree, tree: {feature: queue, threshold: 4, left: 1}}", "missing: right"),
])
def test_a_program_that_does_not_compile_scores_zero_with_its_error(adapter, component, needle):
    batch = adapter.evaluate(adapter.names, {"routing": component}, capture_traces=True)
    assert batch.scores == [0.0, 0.0]
    rec = adapter.make_reflective_dataset({"routing": component}, batch, ["routing"])["routing"][0]
    assert needle in rec["Feedback"] and "routing" in rec["Feedback"] and "routing program" not in rec["Inputs"]
    line = next(l for l in rec["Feedback"].splitlines() if "FAILED" in l)
    assert needle in line  # the compile error is one line
