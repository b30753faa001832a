"""The expression-search demo (docs/expression-search.md), offline: on the RAG scenarios of
configs/evaluate/expression-demo.yaml a nonlinear routing expression beats the best
weighted-scorer setting, and gepa.optimize with a scripted reflection that edits
expressions starts from the best weights and finds it."""

from __future__ import annotations

import re

import pytest

from blis_fast.studies import expression_demo as demo

gepa = pytest.importorskip("gepa")  # CI installs the gepa extra (README, .ci): this runs there

from blis_fast.adapters.gepa import BlisGEPAAdapter  # noqa: E402

# the scripted reflection's edits, tried in order: the first whose result is not there yet
EDITS = (("1/(1 + load)", "1/(1 + running) + 1/(1 + queue)"),  # queued and running requests apart
         ("1/(1 + queue)", "1/(1 + queue)**2"))  # a queue weighs more than its length


class Quiet:
    def log(self, message: str) -> None:
        pass


PROMPTS: list[str] = []


def editing_reflection(prompt: str) -> str:
    """A deterministic 'LLM' that edits expressions: reads the current component (the
    prompt's first fenced block); weighted scorers become their formula; then the first
    edit of EDITS not applied yet."""
    PROMPTS.append(prompt)
    current = re.search(r"```(?:[a-z]*)\n(.*?)```", prompt, re.S).group(1).strip()
    found = re.search(r'score: "(.*)"', current)
    expression = found.group(1) if found else demo.BEST_WEIGHTS_FORMULA
    for old, new in EDITS:
        if old in expression and new not in expression:
            expression = expression.replace(old, new)
            break
    return f"```yaml\n{demo.expression_routing(expression)}\n```"


@pytest.fixture(scope="module")
def quick():
    return demo.compare(quick=True, workers=2)


def test_the_expression_beats_the_best_weights(quick):
    best_weights, best = quick["weighted"][0]
    assert best_weights == demo.BEST_WEIGHTS
    assert quick["expression"] > best
    assert all(quick["expression"] > s for s in quick["templates"].values())
    # the formula of the best weights routes like them (the search's starting point)
    assert quick["templates"]["best weights as a formula"] == pytest.approx(best, abs=1e-12)


def test_the_demo_command_prints_the_comparison(capsys, monkeypatch):
    monkeypatch.setattr(demo, "compare", lambda quick=False, workers=None: {
        "weighted": [(demo.BEST_WEIGHTS, 0.5)], "templates": {"least-loaded": 0.25}, "expression": 0.75})
    assert demo.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "(0, 1, 1, 2)  0.5000" in out and "least-loaded  0.2500" in out and demo.WINNING_EXPRESSION in out
    assert demo.main(["--quik\x1b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: arguments:") and "\x1b" not in err and err.count("\n") == 1


@pytest.mark.slow
def test_the_full_grid_is_beaten():
    full = demo.compare(workers=2)
    assert len(full["weighted"]) == 255 and full["weighted"][0][0] == demo.BEST_WEIGHTS
    assert full["expression"] > full["weighted"][0][1]


def test_gepa_edits_expressions_past_the_best_weights(quick):
    adapter = BlisGEPAAdapter(demo.demo_scenarios(), workers=2)
    seed = {"routing": demo.weighted_routing(demo.BEST_WEIGHTS)}
    result = gepa.optimize(seed_candidate=seed, trainset=adapter.names, adapter=adapter,
                           reflection_lm=editing_reflection, max_metric_calls=20, reflection_minibatch_size=2,
                           reflection_prompt_template=adapter.reflection_template, logger=Quiet(), seed=0)
    scores = result.val_aggregate_scores
    best = result.best_candidate["routing"]
    assert scores[result.best_idx] > scores[0]
    assert scores[result.best_idx] > quick["weighted"][0][1]  # beats the whole quick grid's best
    assert demo.WINNING_EXPRESSION in best
    # the reflection saw the program in canonical form and the features it reads
    assert any("routing program" in p and "running" in p for p in PROMPTS)
