"""The expression language of policies (blis_fast/config/expression.py) and its interpreter
(kernels/policies/program.py): hand-computed values, the kernel against a direct evaluator
of the syntax tree (tests/naive/expression.py) on random expressions and features, trees,
decompiling, and hostile programs -- refused when compiled, or evaluated safely."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_fast.config.expression import (FEATURES, MAX_EXPRESSION_CHARS, compile_expression, compile_tree, decompile,
                                         reads)
from blis_fast.errors import ConfigError
from blis_fast_kernels import schema as S
from blis_fast_kernels.policies.program import evaluate_program, evaluate_program_rows
from naive.expression import evaluate, evaluate_tree

ROUTE = list(FEATURES["routing"])


def run(row: np.ndarray, values: dict[str, float], slot: str = "routing") -> float:
    """The program's value from the scalar interpreter -- and, for an expression, the same
    from the row interpreter (every value once, in three columns)."""
    f = np.zeros((1, S.N_PROGRAM_FEATURES))
    for name, v in values.items():
        f[0, FEATURES[slot][name]] = v
    scalar = float(evaluate_program(row, f)[0])
    if row[S.ProgramHeader.FORM] == S.ProgramForm.EXPRESSION:
        rows = evaluate_program_rows(row, np.repeat(f, 3, axis=0))
        assert np.array_equal(rows, np.full(3, scalar), equal_nan=True)
    return scalar


def value(text: str, slot: str = "routing", **values) -> float:
    return run(compile_expression(text, slot, "x"), values, slot)


# ============================================================================ hand-computed values

@pytest.mark.parametrize("text, values, expected", [
    ("-load", dict(load=7), -7.0),
    ("hit_blocks**2 - 0.3*queue/(1 + kv_free)", dict(hit_blocks=3, queue=10, kv_free=0.5), 9 - 3.0 / 1.5),
    ("load / 0", dict(load=5), 0.0),  # protected division
    ("queue / (running - running)", dict(queue=5, running=2), 0.0),
    ("load ** -2", dict(load=4), 1 / 16),
    ("load ** 0.5", dict(load=-9), 0.0),  # sqrt of max(x, 0)
    ("load ** 0", dict(load=0), 1.0),
    ("sqrt(load) + log1p(queue)", dict(load=16, queue=-5), 4.0),  # log1p(max(x, 0))
    ("exp(1000)", {}, math.exp(50)),  # clamped argument
    ("exp(-1000)", {}, math.exp(-50)),
    ("min(load, queue, 3)", dict(load=5, queue=4), 3.0),
    ("max(load, queue, 3)", dict(load=5, queue=4), 5.0),
    ("abs(-load)", dict(load=2.5), 2.5),
    ("floor(load / 4) + floor(-queue / 4)", dict(load=7, queue=1), 1.0 - 1.0),
    ("1 < load <= 5", dict(load=5), 1.0),
    ("1 < load <= 5", dict(load=6), 0.0),
    ("load == 2 or queue != 0", dict(load=1, queue=0), 0.0),
    ("load and not queue", dict(load=3, queue=0), 1.0),
    ("queue if load > 2 else -queue", dict(load=3, queue=4), 4.0),
    ("queue if load > 2 else -queue", dict(load=1, queue=4), -4.0),
    ("(1 if hit_blocks > 0 else 2) if max_hit > 0 else (3 if queue else 4)", dict(max_hit=0, queue=0), 4.0),
    ("True + False", {}, 1.0),
    ("+load", dict(load=3), 3.0),
])
def test_hand_computed_values(text, values, expected):
    assert value(text, **values) == pytest.approx(expected, rel=1e-15)


def test_other_slots_read_their_own_features():
    assert value("prompt_tokens > 1000 and waiting < 8", "admission", prompt_tokens=2000, waiting=3) == 1.0
    assert value("1e-6*age_us + (3 if slo_class == 0 else 0)", "priority", age_us=2e6, slo_class=0) == 5.0
    assert value("-priority + prompt_tokens", "scheduler", priority=2, prompt_tokens=10) == 8.0
    with pytest.raises(ConfigError, match="unknown name 'priority'"):
        compile_expression("priority + 1", "priority", "policy.priority_program")  # what it computes


def test_row_layout_features_and_length():
    row = compile_expression("hit_blocks - load", "routing", "x")
    assert row.shape == (S.POLICY_WIDTH,)
    assert int(row[S.ProgramHeader.FEATURES]) == (1 << S.RouteFeature.HIT_BLOCKS) | (1 << S.RouteFeature.LOAD)
    # hit_blocks pushed, then one instruction: minus the feature load
    assert list(row[:7]) == [row[0], 4, S.ProgramForm.EXPRESSION, S.Op.FEATURE, S.RouteFeature.HIT_BLOCKS,
                             S.Op.SUB + S.OP_FEATURE_RIGHT, S.RouteFeature.LOAD]
    assert not row[7:].any()
    assert reads(row, "routing") == ("load", "hit_blocks")


# ============================================================================ the kernel = the syntax tree

NAMES = st.sampled_from(["load", "queue", "kv_free", "hit_blocks", "candidates"])
NUMBERS = st.sampled_from([0, 1, 2, 0.5, 3.25, 100, 1e-3])


def expressions(depth: int = 4):
    leaf = st.one_of(NAMES, NUMBERS.map(repr))
    if depth == 0:
        return leaf
    sub = expressions(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(sub, st.sampled_from(["+", "-", "*", "/", "<", "<=", ">", ">=", "==", "!=", "and", "or"]), sub)
        .map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["min", "max"]), sub, sub).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        st.tuples(st.sampled_from(["abs", "sqrt", "log1p", "exp", "floor", "-", "not "]), sub)
        .map(lambda t: f"{t[0]}({t[1]})" if t[0][-1].isalpha() and t[0] != "not " else f"({t[0]}{t[1]})"),
        st.tuples(sub, st.sampled_from(["2", "3", "-1", "-2", "0.5", "0"])).map(lambda t: f"({t[0]} ** {t[1]})"),
        st.tuples(sub, sub, sub).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
    )


FEATURE_VALUES = st.sampled_from([0.0, 1.0, -1.0, 2.5, 7.0, 1e6, -3.0, 0.25, 1e-9])


@settings(max_examples=300, deadline=None)
@given(expressions(), st.lists(FEATURE_VALUES, min_size=len(ROUTE), max_size=len(ROUTE)))
def test_kernel_equals_the_syntax_tree(text, values):
    features = dict(zip(ROUTE, values))
    want = evaluate(text, features)
    got = run(compile_expression(text, "routing", "x"), features)
    if math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(want, rel=1e-12, abs=0) or got == want


@settings(max_examples=200, deadline=None)
@given(expressions())
def test_decompile_compiles_back_to_the_same_program(text):
    row = compile_expression(text, "routing", "x")
    assert np.array_equal(compile_expression(decompile(row, "routing"), "routing", "x"), row)


# ============================================================================ trees

TREE = {"feature": "hit_blocks", "threshold": 0,
        "left": "-load",
        "right": {"feature": "queue", "threshold": 4, "left": {"value": "hit_blocks"}, "right": 0.5}}


@pytest.mark.parametrize("values, expected", [
    (dict(hit_blocks=0, load=3), -3.0), (dict(hit_blocks=2, queue=4), 2.0), (dict(hit_blocks=2, queue=5), 0.5)])
def test_tree_hand_computed(values, expected):
    assert run(compile_tree(TREE, "routing", "x"), values) == expected


def test_tree_layout_and_decompile():
    row = compile_tree(TREE, "routing", "x")
    assert row[S.ProgramHeader.FORM] == S.ProgramForm.TREE
    code = row[S.ProgramHeader.CODE:S.ProgramHeader.CODE + int(row[S.ProgramHeader.LENGTH])]
    assert code[0] == S.Op.BRANCH and code[1] == S.RouteFeature.HIT_BLOCKS and code[2] == 0
    assert decompile(row, "routing") == "((-load) if hit_blocks <= 0 else (hit_blocks if queue <= 4 else 0.5))"


def trees(depth: int):
    leaf = st.one_of(NUMBERS, st.just("-load"), st.just("hit_blocks - queue"))
    if depth == 0:
        return leaf
    return st.one_of(leaf, st.fixed_dictionaries({
        "feature": NAMES, "threshold": NUMBERS, "left": trees(depth - 1), "right": trees(depth - 1)}))


@settings(max_examples=200, deadline=None)
@given(trees(5), st.lists(FEATURE_VALUES, min_size=len(ROUTE), max_size=len(ROUTE)))
def test_tree_equals_walking_it(tree, values):
    features = dict(zip(ROUTE, values))
    row = compile_tree(tree, "routing", "x")
    assert run(row, features) == evaluate_tree(tree, features)
    # its decompiled expression has the same value
    assert run(compile_expression(decompile(row, "routing"), "routing", "x"), features) == evaluate_tree(tree, features)


@pytest.mark.parametrize("tree, message", [
    ({"feature": "load", "threshold": 1, "left": 1}, "missing: right"),
    ({"feature": "load", "threshold": 1, "left": 1, "right": 2, "gini": 0}, "unknown: gini"),
    ({"feature": "lod", "threshold": 1, "left": 1, "right": 2}, "did you mean load"),
    ({"feature": "load", "threshold": "x", "left": 1, "right": 2}, "threshold: must be a number"),
    ({"feature": "load", "threshold": 1, "left": [1], "right": 2}, "x.left: must be a node"),
    ({"feature": "load", "threshold": 1, "left": "load +", "right": 2}, "x.left: invalid syntax at its end"),
    ({"feature": "load", "threshold": float("nan"), "left": 1, "right": 2}, "finite"),
])
def test_bad_trees_refused(tree, message):
    with pytest.raises(ConfigError, match=message):
        compile_tree(tree, "routing", "x")


def test_tree_depth_limited():
    tree = 1.0
    for _ in range(9):
        tree = {"feature": "load", "threshold": 0, "left": tree, "right": 0}
    with pytest.raises(ConfigError, match="deeper than 8 levels"):
        compile_tree(tree, "routing", "x")


def test_a_full_depth_5_tree_fits():
    def full(d):
        return 1.0 if d == 0 else {"feature": "queue", "threshold": d, "left": full(d - 1), "right": full(d - 1)}
    row = compile_tree(full(5), "routing", "x")
    assert int(row[1]) <= S.MAX_PROGRAM_CODE


# ============================================================================ hostile programs

@pytest.mark.parametrize("text, message", [
    ("x.y", "column 1: attribute access"),
    ("load.__class__", "attribute access"),
    ("__import__('os').system('true')", "call of"),
    ("open('f')", "call of open is not allowed; functions: min, max"),
    ("load[0]", "indexing"),
    ("kv_fre", "unknown name 'kv_fre' \\(did you mean kv_free\\?\\); allowed names: load, queue"),
    ("lambda: 1", "lambda"),
    ("[load for load in queue]", "comprehension"),
    ("(y := 1)", "assignment"),
    ("load % 2", "operator % is not allowed"),
    ("load ** load", "exponent of \\*\\* must be a constant"),
    ("load ** 10", "exponent"),
    ("load in queue", "comparison"),
    ("'text'", "expected a number"),
    ("1e999", "finite"),
    ("10**400", "exponent"),
    ("1j", "expected a number"),
    ("load +", "at its end: the expression is incomplete"),
    ("load queue", "column 6: invalid syntax"),
    ("", "empty"),
    ("min(load)", "at least 2 arguments"),
    ("sqrt(load, 2)", "takes 1 argument"),
    ("max(*load)", "plain arguments"),
    ("abs(x=load)", "plain arguments"),
    ("(" * 300 + "1" + ")" * 300, "nested"),
    ("-" * 4000 + "1", "nested too deeply"),
    ("1" + "+1" * 2000, "nested too deeply"),
    ("load " * 10**6, f"at most {MAX_EXPRESSION_CHARS}"),
    ("f'{load}'", "f-string"),
])
def test_hostile_expressions_refused_with_one_line(text, message):
    with pytest.raises(ConfigError, match=message) as e:
        compile_expression(text, "routing", "policy.routing_program")
    assert "\n" not in str(e.value) and str(e.value).startswith("policy.routing_program: ")


def test_programs_too_long_or_too_deep_refused():
    with pytest.raises(ConfigError, match="compiles to .* code values, at most"):
        compile_expression("max(" + ", ".join(["load"] * 130) + ")", "routing", "x")  # 2 + 2 x 129
    deep = "load"
    for _ in range(40):  # queue - (queue - (... - load)): each level keeps one more value on the stack (the innermost fused)
        deep = f"(queue - {deep})"
    with pytest.raises(ConfigError, match="needs a stack of 40 values, at most 32"):
        compile_expression(deep, "routing", "x")


def test_non_string_refused():
    for bad in (3, None, ["load"], {"a": 1}):
        with pytest.raises(ConfigError, match="must be an expression"):
            compile_expression(bad, "routing", "x")


def test_overflow_and_nan_evaluate_safely():
    assert run(compile_expression("1e300 * load", "routing", "x"), dict(load=1e300)) == math.inf
    assert math.isnan(run(compile_expression("1e300 * load - 1e300 * load", "routing", "x"), dict(load=1e300)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64) | st.integers(-5, 40).map(float),
                min_size=S.POLICY_WIDTH, max_size=S.POLICY_WIDTH),
       st.integers(0, 60))
def test_random_rows_never_crash_or_hang(row, length):
    """A row that is not a compiled program (garbage code, lengths, jumps, feature indices,
    exponents) gives some float -- NaN when it cannot run -- without reading or writing out
    of bounds and in at most its length of instructions."""
    prog = np.array(row, np.float64)
    prog[S.ProgramHeader.LENGTH] = length
    for form in (S.ProgramForm.EXPRESSION, S.ProgramForm.TREE):
        prog[S.ProgramHeader.FORM] = form
        assert evaluate_program(prog, np.ones((3, S.N_PROGRAM_FEATURES))).shape == (3,)
        assert evaluate_program_rows(prog, np.ones((3, S.N_PROGRAM_FEATURES))).shape == (3,)


def test_the_docs_name_every_feature_and_key():
    from builders import ROOT
    from blis_fast.config.policy import PROGRAM_SLOTS

    text = (ROOT / "docs" / "policies.md").read_text()
    for slot, names in FEATURES.items():
        for name in names:
            assert f"`{name}`" in text, (slot, name)
    for _, _, key in PROGRAM_SLOTS.values():
        assert f"`{key}`" in text, key


def test_the_docs_bundle_of_expressions_parses(tmp_path):
    import re

    from builders import ROOT
    from blis_fast.config.policy import PolicyConfig, load_policy_bundle

    text = (ROOT / "docs" / "policies.md").read_text()
    section = text[text.index("## Expression and tree policies"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    (tmp_path / "b.yaml").write_text(block)
    settings = load_policy_bundle(tmp_path / "b.yaml")
    p = PolicyConfig(**settings)
    assert (p.routing, p.admission, p.priority, p.scheduler, p.preemption_victim, p.pd_decider, p.autoscaler,
            p.dispatch_order, p.flow_control) == ("expression", "expression", "tree", "expression", "expression",
                                                  "expression", "expression", "expression", "expression")
    assert p.flow_saturated_program == "total <= in_routing" and p.flow_recheck == "concurrency"
