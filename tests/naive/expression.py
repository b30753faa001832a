"""A direct evaluator of policy expressions -- a walk of the Python syntax tree with the
documented semantics (docs/policies.md, "Expression and tree policies") -- against which
the compiled programs and the kernel interpreter are checked.  Obviously correct, slow."""

from __future__ import annotations

import ast
import math


def _truth(x: float) -> bool:
    return x != 0.0  # (NaN is true, as in Python)


def _pow(a: float, k: float) -> float:
    if k == 0.5:
        return math.sqrt(a) if a > 0 else 0.0
    p = 1.0
    for _ in range(int(abs(k))):
        p *= a
    if k < 0:
        return 1.0 / p if p != 0 else 0.0
    return p


def evaluate(text: str, features: dict[str, float]) -> float:
    """The value of expression ``text`` with the feature values ``features``."""
    return _eval(ast.parse(text.strip(), mode="eval").body, features)


def _eval(node, f) -> float:
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        return float(f[node.id])
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.operand, ast.Constant) and isinstance(node.op, ast.USub):
            return -float(node.operand.value)
        a = _eval(node.operand, f)
        return {ast.USub: lambda: -a, ast.UAdd: lambda: a, ast.Not: lambda: 0.0 if _truth(a) else 1.0}[type(node.op)]()
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow):
            right = node.right
            k = -float(right.operand.value) if isinstance(right, ast.UnaryOp) and isinstance(right.op, ast.USub) \
                else float(right.operand.value) if isinstance(right, ast.UnaryOp) else float(right.value)
            return _pow(_eval(node.left, f), k)
        a, b = _eval(node.left, f), _eval(node.right, f)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        return a / b if b != 0 else 0.0  # Div, protected
    if isinstance(node, ast.BoolOp):
        vals = [_truth(_eval(v, f)) for v in node.values]
        return 1.0 if (all(vals) if isinstance(node.op, ast.And) else any(vals)) else 0.0
    if isinstance(node, ast.Compare):
        left = _eval(node.left, f)
        ok = True
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, f)
            ok = ok and {ast.Lt: left < right, ast.LtE: left <= right, ast.Gt: left > right, ast.GtE: left >= right,
                         ast.Eq: left == right, ast.NotEq: left != right}[type(op)]
            left = right
        return 1.0 if ok else 0.0
    if isinstance(node, ast.IfExp):
        return _eval(node.body, f) if _truth(_eval(node.test, f)) else _eval(node.orelse, f)
    if isinstance(node, ast.Call):
        args = [_eval(a, f) for a in node.args]
        name = node.func.id
        if name == "min":
            out = args[0]
            for x in args[1:]:
                out = x if x < out else out
            return out
        if name == "max":
            out = args[0]
            for x in args[1:]:
                out = x if x > out else out
            return out
        a = args[0]
        if name == "abs":
            return abs(a)
        if name == "sqrt":
            return math.sqrt(a) if a > 0 else 0.0
        if name == "log1p":
            return math.log1p(a) if a > 0 else 0.0
        if name == "floor":
            return float(math.floor(a)) if math.isfinite(a) else a
        return math.exp(min(max(a, -50.0), 50.0))  # exp
    raise AssertionError(f"not an expression the compiler accepts: {ast.dump(node)}")


def evaluate_tree(tree, features: dict[str, float]) -> float:
    """The value of a decision tree (``{feature, threshold, left, right}``; leaves are
    numbers, expressions or ``{value: ...}``)."""
    while isinstance(tree, dict) and "feature" in tree:
        tree = tree["left"] if features[tree["feature"]] <= tree["threshold"] else tree["right"]
    if isinstance(tree, dict):
        tree = tree["value"]
    return evaluate(tree, features) if isinstance(tree, str) else float(tree)
