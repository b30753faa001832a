"""Expression and decision-tree policies compiled to programs the kernels interpret.

An *expression* is a Python-like formula over the named features of a decision point
(``FEATURES``: a routing candidate's load, queue, KV utilization, prefix hits, ...; an
admission's request and cluster; a request's age, tokens and class), e.g.
``hit_blocks**2 - 0.3*queue/(1 + kv_free)``.  It is parsed with ``ast`` and only a
whitelist is accepted: numbers, feature names, ``+ - * /`` (protected: x/0 = 0), ``**``
with a constant exponent (an integer -4..4, or 0.5), ``min``, ``max``, ``abs``,
``log1p``, ``sqrt``, ``exp`` (argument clamped to ±50), comparisons (1.0 / 0.0),
``and``/``or``/``not`` (1.0 / 0.0; any non-zero is true) and ``a if c else b`` (only the
branch taken is evaluated).  A *decision tree* is a YAML mapping ``{feature, threshold,
left, right}`` (``left`` when feature <= threshold) with leaves that are numbers or
expressions.

Both compile to one program (``compile_expression``, ``compile_tree``): a float64 row of
the slot's parameters -- a feature bit mask, a length, then postfix code with forward
jumps only (layout ``ProgramHeader``, instructions ``Op``) -- that
``kernels/policies/program.py`` runs at kernel speed.  Length and stack depth are checked
here; anything else (unknown names, attribute access, calls outside the whitelist, a
formula too long or nested too deeply) is refused with one line naming the column, what
was found and what is allowed, so an LLM proposing policies can fix its candidate.
``decompile`` writes a program back as an expression (the form the GEPA reflective
dataset shows).
"""

from __future__ import annotations

import ast
import difflib
import math
from typing import Any

import numpy as np

from blis_fast.errors import ConfigError
from blis_fast_kernels import schema as S

MAX_EXPRESSION_CHARS = 4096  # refused before parsing: a formula, not a program
MAX_NESTING = 48  # depth of the expression's syntax tree
MAX_TREE_DEPTH = 8  # decision levels of a tree (its program's length limits it too)
POW_EXPONENTS = (-4, -3, -2, -1, 0, 0.5, 1, 2, 3, 4)
MAX_CONSTANT = 1e300  # constants are finite and at most this large

# the features each slot's programs read: name -> column of the feature row
FEATURES: dict[str, dict[str, int]] = {
    "routing": {name: k for k, name in enumerate(S.ROUTE_FEATURE_NAMES)},
    "admission": {name: k for k, name in enumerate(S.ADMIT_FEATURE_NAMES)},
    # a priority program computes the priority: it cannot read it; a place in a queue or batch exists
    # only where a scheduler sorts and a victim is chosen
    "priority": {name: k for k, name in enumerate(S.REQUEST_FEATURE_NAMES) if name not in ("priority", "position")},
    "scheduler": {name: k for k, name in enumerate(S.REQUEST_FEATURE_NAMES)},
    "victim": {name: k for k, name in enumerate(S.REQUEST_FEATURE_NAMES)},
    "dispatch": {name: k for k, name in enumerate(S.REQUEST_FEATURE_NAMES) if name != "position"},
    "pd": {name: k for k, name in enumerate(S.PD_FEATURE_NAMES)},
    "autoscale": {name: k for k, name in enumerate(S.SCALE_FEATURE_NAMES)},
    "flow_instance": {name: k for k, name in enumerate(S.FLOW_INSTANCE_FEATURE_NAMES)},
    "flow_saturated": {name: k for k, name in enumerate(S.FLOW_MODEL_FEATURE_NAMES)},
}
FUNCTIONS = {"min": S.Op.MIN, "max": S.Op.MAX, "abs": S.Op.ABS, "log1p": S.Op.LOG1P, "sqrt": S.Op.SQRT,
             "exp": S.Op.EXP, "floor": S.Op.FLOOR}
_BINARY = {ast.Add: S.Op.ADD, ast.Sub: S.Op.SUB, ast.Mult: S.Op.MUL, ast.Div: S.Op.DIV}
_COMPARE = {ast.Lt: S.Op.LT, ast.LtE: S.Op.LE, ast.Gt: S.Op.GT, ast.GtE: S.Op.GE, ast.Eq: S.Op.EQ,
            ast.NotEq: S.Op.NE}
_SYMBOL = {S.Op.ADD: "+", S.Op.SUB: "-", S.Op.MUL: "*", S.Op.DIV: "/", S.Op.LT: "<", S.Op.LE: "<=",
           S.Op.GT: ">", S.Op.GE: ">=", S.Op.EQ: "==", S.Op.NE: "!=", S.Op.AND: "and", S.Op.OR: "or"}
# what an expression may contain, in one line (the errors end with it; the adapters' prompts quote it)
ALLOWED_SYNTAX = ("numbers, the feature names, + - * / **, min max abs log1p sqrt exp floor, < <= > >= == !=, "
                  "and or not, a if c else b")
_OPERATORS_NOT_ALLOWED = {ast.Mod: "%", ast.FloorDiv: "//", ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>",
                          ast.BitOr: "|", ast.BitAnd: "&", ast.BitXor: "^"}


class _Code:
    """Code under construction: floats, the features read, the deepest stack."""

    def __init__(self, features: dict[str, int], field: str, text: str):
        self.out: list[float] = []
        self.features = features
        self.mask = 0
        self.form = S.ProgramForm.EXPRESSION
        self.field = field
        self.text = text

    def emit(self, *values: float) -> int:
        self.out.extend(float(v) for v in values)
        return len(self.out)

    def column(self) -> int:
        """The absolute row column of the next float (a jump target)."""
        return S.ProgramHeader.CODE + len(self.out)

    def error(self, node: ast.AST | None, what: str) -> ConfigError:
        where = f"column {node.col_offset + 1}: " if node is not None and hasattr(node, "col_offset") else ""
        return ConfigError(self.field, f"{where}{what}")

    def feature(self, name: str, node: ast.AST | None) -> int:
        if name not in self.features:
            close = difflib.get_close_matches(name, list(self.features), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise self.error(node, f"unknown name {name!r}{hint}; allowed names: {', '.join(self.features)}")
        k = self.features[name]
        self.mask |= 1 << k
        return k


def _constant(code: _Code, node: ast.AST, value: Any) -> float:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if not isinstance(value, (int, float)):
        raise code.error(node, f"expected a number or a feature name, got {value!r}; allowed: {ALLOWED_SYNTAX}")
    try:
        x = float(value)
    except OverflowError:
        x = math.inf
    if not math.isfinite(x) or abs(x) > MAX_CONSTANT:
        raise code.error(node, f"constants must be finite numbers of magnitude <= {MAX_CONSTANT:g}")
    return x


def _negated_constant(node: ast.AST) -> bool:
    return (isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd))
            and isinstance(node.operand, ast.Constant))


def _constant_value(code: _Code, node: ast.AST) -> float | None:
    """The value of a literal number (``2``, ``-0.5``), None for anything else."""
    if isinstance(node, ast.Constant):
        return _constant(code, node, node.value)
    if _negated_constant(node):
        x = _constant(code, node.operand, node.operand.value)
        return -x if isinstance(node.op, ast.USub) else x
    return None


# operators whose operands can trade places without changing a bit of the result (min and
# max cannot: with a NaN operand they keep the first), and the comparisons by their mirror
_MIRRORED = {S.Op.ADD: S.Op.ADD, S.Op.MUL: S.Op.MUL, S.Op.EQ: S.Op.EQ, S.Op.NE: S.Op.NE, S.Op.AND: S.Op.AND,
             S.Op.OR: S.Op.OR, S.Op.LT: S.Op.GT, S.Op.GT: S.Op.LT, S.Op.LE: S.Op.GE, S.Op.GE: S.Op.LE}


def _leaf(code: _Code, node: ast.AST) -> bool:
    return _constant_value(code, node) is not None or isinstance(node, ast.Name)


def _binary(code: _Code, op: int, left: ast.AST, right: ast.AST, d: int, base: int = 0) -> int:
    """Emit ``left op right`` (``base``: values already on the stack); return the stack
    depth it needs.  ``2 * x`` is emitted as ``x * 2``, so the number fuses into the
    operator (``_right``)."""
    if op in _MIRRORED and _leaf(code, left) and not _leaf(code, right):
        op, left, right = _MIRRORED[op], right, left
    return max(base + _compile(code, left, d), _right(code, op, right, d, base))


def _right(code: _Code, op: int, right: ast.AST, d: int, base: int) -> int:
    """Emit ``op right`` with its left operand on the stack (``base`` values below it): a
    number or a feature name is fused into the operator (one instruction, no push)."""
    value = _constant_value(code, right)
    if value is not None:
        code.emit(op + S.OP_CONST_RIGHT, value)
        return base + 1
    if isinstance(right, ast.Name):
        code.emit(op + S.OP_FEATURE_RIGHT, code.feature(right.id, right))
        return base + 1
    need = base + 1 + _compile(code, right, d)
    code.emit(op)
    return need


def _compile(code: _Code, node: ast.AST, depth: int) -> int:
    """Emit ``node``'s code; return the stack depth it needs."""
    if depth > MAX_NESTING:
        raise code.error(node, f"nested too deeply (more than {MAX_NESTING} levels): simplify the expression")
    d = depth + 1
    value = _constant_value(code, node)
    if value is not None:
        code.emit(S.Op.CONST, value)
        return 1
    if isinstance(node, ast.Name):
        code.emit(S.Op.FEATURE, code.feature(node.id, node))
        return 1
    if isinstance(node, ast.UnaryOp):
        need = _compile(code, node.operand, d)
        if isinstance(node.op, ast.USub):
            code.emit(S.Op.NEG)
        elif isinstance(node.op, ast.Not):
            code.emit(S.Op.NOT)
        elif not isinstance(node.op, ast.UAdd):
            raise code.error(node, f"operator ~ is not allowed; allowed: {ALLOWED_SYNTAX}")
        return need
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow):
            k = _constant_value(code, node.right)
            if k is None or k not in POW_EXPONENTS:
                raise code.error(node.right, "the exponent of ** must be a constant among "
                                             f"{', '.join(f'{e:g}' for e in POW_EXPONENTS)}")
            need = _compile(code, node.left, d)
            code.emit(S.Op.POW, k)
            return need
        op = _BINARY.get(type(node.op))
        if op is None:
            sym = _OPERATORS_NOT_ALLOWED.get(type(node.op), type(node.op).__name__)
            raise code.error(node, f"operator {sym} is not allowed; allowed: {ALLOWED_SYNTAX}")
        return _binary(code, op, node.left, node.right, d)
    if isinstance(node, ast.BoolOp):
        op = S.Op.AND if isinstance(node.op, ast.And) else S.Op.OR
        return _chain(code, op, node.values, d)
    if isinstance(node, ast.Compare):
        # a < b < c = (a < b) and (b < c): b is computed twice (it has no side effects)
        need, left = 0, node.left
        for k, (cmp, right) in enumerate(zip(node.ops, node.comparators)):
            op = _COMPARE.get(type(cmp))
            if op is None:
                raise code.error(node, f"comparison {type(cmp).__name__} (in / is) is not allowed; allowed: "
                                       "< <= > >= == !=")
            need = max(need, _binary(code, op, left, right, d, base=0 if k == 0 else 1))
            if k > 0:
                code.emit(S.Op.AND)
            left = right
        return need
    if isinstance(node, ast.IfExp):  # both branches are computed (they have no side effects), then one kept
        need = _compile(code, node.test, d)
        need = max(need, 1 + _compile(code, node.body, d))
        need = max(need, 2 + _compile(code, node.orelse, d))
        code.emit(S.Op.SELECT)
        return need
    if isinstance(node, ast.Call):
        return _compile_call(code, node, d)
    raise code.error(node, f"{_describe(node)} is not allowed; allowed: {ALLOWED_SYNTAX}")


def _chain(code: _Code, op: int, operands: list, d: int) -> int:
    """``a op b op c ...`` from the left (min, max, and, or of several operands)."""
    need = _compile(code, operands[0], d)
    for right in operands[1:]:
        need = max(need, _right(code, op, right, d, 0))
    return need


def _compile_call(code: _Code, node: ast.Call, d: int) -> int:
    name = node.func.id if isinstance(node.func, ast.Name) else None
    if name not in FUNCTIONS:
        called = name if name is not None else _describe(node.func)
        raise code.error(node, f"call of {called} is not allowed; functions: {', '.join(FUNCTIONS)}")
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        raise code.error(node, f"{name}() takes plain arguments only")
    if name in ("min", "max"):
        if len(node.args) < 2:
            raise code.error(node, f"{name}() needs at least 2 arguments, got {len(node.args)}")
        return _chain(code, FUNCTIONS[name], node.args, d)
    if len(node.args) != 1:
        raise code.error(node, f"{name}() takes 1 argument, got {len(node.args)}")
    need = _compile(code, node.args[0], d)
    code.emit(FUNCTIONS[name])
    return need


def _describe(node: ast.AST) -> str:
    kinds = {ast.Attribute: "attribute access (x.y)", ast.Subscript: "indexing (x[i])", ast.Lambda: "lambda",
             ast.List: "a list", ast.Tuple: "a tuple", ast.Dict: "a dict", ast.Set: "a set",
             ast.ListComp: "a comprehension", ast.GeneratorExp: "a generator", ast.NamedExpr: "assignment (:=)",
             ast.JoinedStr: "an f-string", ast.Await: "await", ast.Starred: "*args"}
    return kinds.get(type(node), type(node).__name__)


def _finish(code: _Code, need: int) -> np.ndarray:
    if need > S.PROGRAM_STACK:
        raise ConfigError(code.field, f"needs a stack of {need} values, at most {S.PROGRAM_STACK}: nest fewer "
                                      "sub-expressions on the right of operators")
    if len(code.out) > S.MAX_PROGRAM_CODE:
        raise ConfigError(code.field, f"compiles to {len(code.out)} code values, at most {S.MAX_PROGRAM_CODE}: "
                                      "simplify it (each number or name takes 2, each operator 1)")
    row = np.zeros(S.POLICY_WIDTH, np.float64)
    row[S.ProgramHeader.FEATURES] = float(code.mask)
    row[S.ProgramHeader.LENGTH] = float(len(code.out))
    row[S.ProgramHeader.FORM] = float(code.form)
    row[S.ProgramHeader.CODE:S.ProgramHeader.CODE + len(code.out)] = code.out
    return row


def _parse(text: Any, field: str) -> ast.AST:
    if not isinstance(text, str):
        raise ConfigError(field, f"must be an expression (a string), got {type(text).__name__}")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ConfigError(field, f"is {len(text)} characters long, at most {MAX_EXPRESSION_CHARS}")
    if not text.strip():
        raise ConfigError(field, "is empty: give a formula, e.g. -load")
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        if e.offset:
            raise ConfigError(field, f"column {e.offset}: invalid syntax ({e.msg}); allowed: {ALLOWED_SYNTAX}") from None
        raise ConfigError(field, f"invalid syntax at its end: the expression is incomplete; allowed: {ALLOWED_SYNTAX}") \
            from None
    except (RecursionError, MemoryError, ValueError):
        raise ConfigError(field, "nested too deeply to parse: simplify the expression") from None


def compile_expression(text: str, slot: str, field: str) -> np.ndarray:
    """The program (a POLICY_WIDTH row) of expression ``text`` over ``FEATURES[slot]``;
    ConfigError naming ``field`` if it is not a valid expression."""
    node = _parse(text, field)
    code = _Code(FEATURES[slot], field, text)
    need = _compile(code, node, 0)
    return _finish(code, need)


def compile_tree(tree: Any, slot: str, field: str) -> np.ndarray:
    """The program of decision tree ``tree``: a mapping ``{feature, threshold, left,
    right}`` (``left`` taken when feature <= threshold), or a leaf (a number, an expression
    string, or ``{value: number | expression}``); at most MAX_TREE_DEPTH levels."""
    code = _Code(FEATURES[slot], field, "")
    code.form = S.ProgramForm.TREE
    need = _tree(code, tree, field, 0)
    return _finish(code, need)


def _tree(code: _Code, node: Any, path: str, depth: int) -> int:
    if isinstance(node, dict) and set(node) == {"value"}:
        node = node["value"]
    if isinstance(node, bool) or not isinstance(node, (dict, int, float, str)):
        raise ConfigError(path, "must be a node {feature, threshold, left, right} or a leaf (a number, an "
                                f"expression or {{value: ...}}), got {type(node).__name__}")
    if not isinstance(node, dict):  # a leaf: its value, then stop
        if isinstance(node, str):
            leaf = _Code(code.features, path, node)
            leaf.out, leaf.mask = code.out, code.mask  # append to the tree's code
            need = _compile(leaf, _parse(node, path), 0)
            code.mask = leaf.mask
        else:
            code.emit(S.Op.CONST, _constant(code, None, node))
            need = 1
        code.emit(S.Op.RETURN)
        return need
    if depth >= MAX_TREE_DEPTH:
        raise ConfigError(path, f"the tree is deeper than {MAX_TREE_DEPTH} levels")
    keys = {"feature", "threshold", "left", "right"}
    unknown = sorted(str(k) for k in set(node) - keys)
    missing = sorted(keys - set(node))
    if unknown or missing:
        raise ConfigError(path, f"a node has exactly feature, threshold, left, right (left when feature <= "
                                f"threshold); {'unknown: ' + ', '.join(unknown) if unknown else ''}"
                                f"{'; ' if unknown and missing else ''}{'missing: ' + ', '.join(missing) if missing else ''}")
    if not isinstance(node["feature"], str):
        raise ConfigError(f"{path}.feature", f"must be a feature name, got {node['feature']!r}")
    code.field = f"{path}.feature"
    f = code.feature(node["feature"], None)
    threshold = node["threshold"]
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise ConfigError(f"{path}.threshold", f"must be a number, got {threshold!r}")
    code.field = f"{path}.threshold"
    thr = _constant(code, None, threshold)
    code.emit(S.Op.BRANCH, f, thr, 0)
    patch = len(code.out) - 1
    need = _tree(code, node["left"], f"{path}.left", depth + 1)
    code.out[patch] = float(code.column())
    need = max(need, _tree(code, node["right"], f"{path}.right", depth + 1))
    code.field = path
    return need


def is_program(row: np.ndarray) -> bool:
    """True if ``row`` holds a program (its length is set)."""
    return row[S.ProgramHeader.LENGTH] > 0


def reads(row: np.ndarray, slot: str) -> tuple[str, ...]:
    """The feature names program ``row`` reads."""
    mask = int(row[S.ProgramHeader.FEATURES])
    return tuple(name for name, k in FEATURES[slot].items() if mask >> k & 1)


def decompile(row: np.ndarray, slot: str) -> str:
    """Program ``row`` written back as an expression (trees as nested ``a if c else b``;
    fully parenthesized, so it compiles back to the same program but for a tree's jumps)."""
    names = {k: name for name, k in FEATURES[slot].items()}
    end = S.ProgramHeader.CODE + int(row[S.ProgramHeader.LENGTH])
    text, _ = _decompile(row, S.ProgramHeader.CODE, end, names)
    return text


def _number(x: float) -> str:
    return repr(int(x)) if x == int(x) and abs(x) < 1e15 else repr(float(x))


def _decompile(row, pc: int, end: int, names) -> tuple[str, int]:
    """(text of the code in [pc, end), the column where it stopped: end or after a RETURN)."""
    stack: list[str] = []

    def feature(x: float) -> str:
        return names.get(int(x), f"feature_{int(x)}")

    def constant(x: float) -> str:
        return _number(x) if x >= 0 else f"({_number(x)})"

    while pc < end:
        op = int(row[pc])
        x = float(row[pc + 1]) if pc + 1 < len(row) else 0.0
        if op == S.Op.CONST:
            stack.append(constant(x))
        elif op == S.Op.FEATURE:
            stack.append(feature(x))
        elif op > S.OP_CONST_RIGHT:  # a binary operator with its right operand in the code
            fused = op > S.OP_FEATURE_RIGHT
            base = op - (S.OP_FEATURE_RIGHT if fused else S.OP_CONST_RIGHT)
            stack.append(_apply(base, stack.pop(), feature(x) if fused else constant(x)))
        elif op <= S.Op.OR and op >= S.Op.ADD:
            b, a = stack.pop(), stack.pop()
            stack.append(_apply(op, a, b))
        elif op == S.Op.POW:
            stack.append(f"({stack.pop()} ** {_number(x)})")
        elif op == S.Op.NEG:
            stack.append(f"(-{stack.pop()})")
        elif op == S.Op.NOT:
            stack.append(f"(not {stack.pop()})")
        elif op in (S.Op.ABS, S.Op.LOG1P, S.Op.SQRT, S.Op.EXP, S.Op.FLOOR):
            stack.append(f"{S.OP_NAMES[op - 1].lower()}({stack.pop()})")
        elif op == S.Op.SELECT:
            b, a, c = stack.pop(), stack.pop(), stack.pop()
            stack.append(f"({a} if {c} else {b})")
        elif op == S.Op.BRANCH:
            right_at = int(row[pc + 3])
            left, _ = _decompile(row, pc + 4, right_at, names)
            right, stop = _decompile(row, right_at, end, names)
            return f"({left} if {feature(row[pc + 1])} <= {_number(float(row[pc + 2]))} else {right})", stop
        elif op == S.Op.RETURN:
            return stack[-1], pc + 1
        else:
            raise ValueError(f"not a program: code {op} at column {pc}")
        pc += 1 + (1 if op in (S.Op.CONST, S.Op.FEATURE, S.Op.POW) or op > S.OP_CONST_RIGHT else 0)
    return (stack[-1] if stack else ""), pc


def _apply(op: int, a: str, b: str) -> str:
    if op in (S.Op.MIN, S.Op.MAX):
        return f"{'min' if op == S.Op.MIN else 'max'}({a}, {b})"
    return f"({a} {_SYMBOL[op]} {b})"


# ----------------------------------------------------------------------------- templates as expressions

_CLAMP01 = "min(max({}, 0), 1)"
_WEIGHTED_TERMS = {  # the weighted router's scorers (kernels/policies/routing.py), in its order of summation
    "queue-depth": _CLAMP01.format("((max_load - load) / (max_load - min_load) if max_load > min_load else 1)"),
    "kv-utilization": _CLAMP01.format("1 - kv_utilization"),
    "load-balance": _CLAMP01.format("1 / (1 + load)"),
    "prefix-affinity": _CLAMP01.format("(hit_blocks / request_blocks if request_blocks > 0 else 0)"),
}


def routing_template_expression(routing: str, scorers: dict[str, float] | None = None) -> str:
    """The expression that routes exactly as routing template ``routing`` (every one but
    round-robin, which keeps a cursor): the same scores in the same order of operations,
    so a run gives byte-identical results -- the seed a search starts from.  ``scorers``:
    the weighted router's weights (below 2^1000 each: above, the template rescales them)."""
    if routing == "least-loaded":
        return "-load"
    if routing == "always-busiest":
        return "load"
    if routing == "prefix-affinity":
        return "hit_blocks if max_hit > 0 else -load"
    if routing != "weighted":
        raise ConfigError("routing", f"{routing} has no expression form (it keeps state between decisions)")
    weights = {name: float((scorers or {}).get(name, 0.0)) for name in _WEIGHTED_TERMS}
    total = 0.0
    for name in _WEIGHTED_TERMS:  # (the kernel's order: the same float)
        total += weights[name]
    terms = [f"{weights[name]!r}*{term}" for name, term in _WEIGHTED_TERMS.items() if weights[name] != 0]
    return f"({' + '.join(terms)}) / {total!r}"
