"""Expression and tree candidates in batch evaluation (docs/policies.md, "Expression and
tree policies"): a template and its expression restatement score the same, a formula is a
candidate like any bundle (also from a .py program), a broken formula is a row with its
one-line error, and the table is the same serial and parallel."""

from __future__ import annotations

import pytest

from blis_fast.batch import evaluate_many
from blis_fast.config.expression import routing_template_expression

SMALL = {"num_instances": 3, "workload": "chatbot", "prefix_tokens": 256, "rate": 120, "num_requests": 200}
SCENARIOS = [{"name": "chat", "config": SMALL, "seed": 3, "slo_classes": {"default": {"ttft_ms": 200}}},
             {"name": "burst", "config": {**SMALL, "rate": 400}, "seed": 4}]
OBJECTIVES = "slo_attainment:max,ttft_p99_ms:min:300"
SCORERS = {"prefix-affinity": 3.0, "queue-depth": 2.0, "kv-utilization": 2.0}
CANDIDATES = {
    "weighted": {"routing": {"type": "weighted", "params": {"scorers": SCORERS}}},
    "weighted-as-expression": {"routing": {"type": "expression",
                                           "score": routing_template_expression("weighted", SCORERS)}},
    "nonlinear": {"routing": {"type": "expression", "score": "hit_blocks**2 - 0.3*queue/(1 + kv_free)"},
                  "scheduler": {"type": "expression", "key": "prompt_tokens - 1e-4*age_us"}},
    "tree": {"routing": {"type": "tree", "tree": {"feature": "max_hit", "threshold": 0, "left": "-load",
                                                  "right": "hit_blocks - queue"}}},
    "broken": "routing: {type: expression, score: \"load.__class__\"}\n",
    "concurrency": {"flow_control": {"policy": "concurrency", "concurrency_limit": 3}},
    "concurrency-as-expression": {"flow_control": {"policy": "expression", "instance": "max(0, 3 - in_flight)"}},
}


@pytest.fixture(scope="module")
def table():
    return evaluate_many(CANDIDATES, SCENARIOS, OBJECTIVES, workers=1).table.to_pylist()


def rows(table, candidate):
    return [r for r in table if r["candidate"] == candidate]


@pytest.mark.parametrize("template, restated", [("weighted", "weighted-as-expression"),
                                               ("concurrency", "concurrency-as-expression")])
def test_a_restatement_scores_as_its_template(table, template, restated):
    assert len(rows(table, template)) == len(SCENARIOS)
    for a, b in zip(rows(table, template), rows(table, restated)):
        assert a["status"] == b["status"] == "ok"
        assert {k: v for k, v in a.items() if k not in ("candidate", "policy_id")} == \
            {k: v for k, v in b.items() if k not in ("candidate", "policy_id")}


def test_formulas_run_and_a_broken_one_is_a_row(table):
    for name in ("nonlinear", "tree"):
        assert all(r["status"] == "ok" and r["score"] > 0 for r in rows(table, name)), name
    assert [r["score"] for r in rows(table, "nonlinear")] != [r["score"] for r in rows(table, "weighted")]
    broken = rows(table, "broken")
    assert all(r["status"] == "invalid_policy" and r["score"] == 0 for r in broken)
    assert broken[0]["message"].startswith("routing.score: column 1: attribute access (x.y) is not allowed")
    assert "\n" not in broken[0]["message"]


def test_parallel_equals_serial(table):
    assert evaluate_many(CANDIDATES, SCENARIOS, OBJECTIVES, workers=2).table.to_pylist() == table


def test_a_python_program_can_return_a_formula(tmp_path):
    program = tmp_path / "formula.py"
    program.write_text("def get_policy():\n    return {'routing': {'type': 'expression', 'score': '-load'}}\n")
    ll = evaluate_many({"ll": {"routing": "least-loaded"}, "py": str(program)}, SCENARIOS, OBJECTIVES,
                       workers=1).table.to_pylist()
    assert [r["score"] for r in ll if r["candidate"] == "py"] == [r["score"] for r in ll if r["candidate"] == "ll"]
