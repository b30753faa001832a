"""The interpreter of expression and decision-tree policies: a program (float64 code
compiled by ``blis_fast.config.expression``; layout ``ProgramHeader``, instructions ``Op``)
over a row of features (``run_program``), or over many rows at once (``run_program_rows``:
one routing decision scores every instance in one pass over the code, so the cost of
dispatching an instruction is paid once per decision, not once per instance).

Safe by construction: the code has no loops (a tree's branches only jump forward, so a
program runs at most its length of instructions), reads only its features and writes
only its stack, and every operation is total (protected division, clamped ``exp``,
``sqrt``/``log1p`` of max(x, 0)).  The compiler checks a program's length and stack
depth; the interpreter checks them again, so a hand-made row cannot read or write out of
bounds either: a row it cannot run gives NaN, which every call site turns into the slot's
worst value and counts (``State.prog_faults``).
"""

import math

import numpy as np

from ..jit import helper, kernel
from ..schema import EXP_LIMIT, OP_CONST_RIGHT, OP_FEATURE_RIGHT, PROGRAM_STACK, Op, ProgramForm, ProgramHeader


@helper
def _power(a, k):
    """a ** k for a constant exponent k: an integer -4..4 by repeated products (a reciprocal,
    protected, for k < 0), or 0.5 as sqrt(max(a, 0))."""
    if k == 0.5:
        return math.sqrt(a) if a > 0.0 else 0.0
    if not abs(k) <= 4.0 or abs(k) != np.floor(abs(k)):  # (not an exponent the compiler gives)
        return np.nan
    n = np.int64(abs(k))
    p = 1.0
    for _ in range(n):
        p *= a
    if k < 0:
        return 1.0 / p if p != 0.0 else 0.0
    return p


@helper
def _binary(op, a, b):
    if op == Op.ADD:
        return a + b
    if op == Op.SUB:
        return a - b
    if op == Op.MUL:
        return a * b
    if op == Op.DIV:
        return a / b if b != 0.0 else 0.0
    if op == Op.MIN:
        return b if b < a else a
    if op == Op.MAX:
        return b if b > a else a
    if op == Op.LT:
        return 1.0 if a < b else 0.0
    if op == Op.LE:
        return 1.0 if a <= b else 0.0
    if op == Op.GT:
        return 1.0 if a > b else 0.0
    if op == Op.GE:
        return 1.0 if a >= b else 0.0
    if op == Op.EQ:
        return 1.0 if a == b else 0.0
    if op == Op.NE:
        return 1.0 if a != b else 0.0
    if op == Op.AND:
        return 1.0 if a != 0.0 and b != 0.0 else 0.0
    return 1.0 if a != 0.0 or b != 0.0 else 0.0  # Op.OR


@helper
def _unary(op, a, k):
    """Unary operator ``op`` of a (``k``: POW's exponent)."""
    if op == Op.NEG:
        return -a
    if op == Op.ABS:
        return abs(a)
    if op == Op.NOT:
        return 1.0 if a == 0.0 else 0.0
    if op == Op.SQRT:
        return math.sqrt(a) if a > 0.0 else 0.0
    if op == Op.LOG1P:
        return math.log1p(a) if a > 0.0 else 0.0
    if op == Op.POW:
        return _power(a, k)
    if op == Op.FLOOR:
        return np.floor(a)
    # Op.EXP
    if a > EXP_LIMIT:
        a = EXP_LIMIT
    elif a < -EXP_LIMIT:
        a = -EXP_LIMIT
    return math.exp(a)


@helper
def _code_end(prog):
    """The column after the program's code; -1 if its length does not fit its row."""
    end = ProgramHeader.CODE + np.int64(prog[ProgramHeader.LENGTH])
    if end > prog.shape[0] or end <= ProgramHeader.CODE:
        return np.int64(-1)
    return end


@helper
def _operands(op):
    """How many floats follow instruction ``op`` (-1: not an instruction)."""
    if op == Op.CONST or op == Op.FEATURE or op == Op.POW or op > OP_CONST_RIGHT:
        return np.int64(1)
    if op == Op.BRANCH:
        return np.int64(3)
    if op >= Op.CONST and op <= Op.RETURN:
        return np.int64(0)
    return np.int64(-1)


@helper
def run_program(prog, features, stack):
    """The value of program ``prog`` (a row: ProgramHeader, then code) on ``features``,
    with ``stack`` as its scratch; NaN if the row is not a program it can run (too long,
    a stack it would overflow or underflow, a feature or jump out of range) -- or if the
    arithmetic gave NaN."""
    n_feat = features.shape[0]
    depth = stack.shape[0]
    end = _code_end(prog)
    if end < 0:
        return np.nan
    pc = np.int64(ProgramHeader.CODE)
    sp = np.int64(0)  # the number of values on the stack
    while pc < end:
        op = np.int64(prog[pc])
        n_opd = _operands(op)
        if n_opd < 0 or pc + n_opd >= end:
            return np.nan
        x = prog[pc + 1] if n_opd > 0 else 0.0
        if op == Op.FEATURE or op > OP_FEATURE_RIGHT:
            f = np.int64(x)
            if f < 0 or f >= n_feat:
                return np.nan
            x = features[f]
        if op == Op.FEATURE or op == Op.CONST:
            if sp >= depth:
                return np.nan
            stack[sp] = x
            sp += 1
        elif op > OP_CONST_RIGHT:  # a binary operator with its right operand in the code
            base = op - (OP_FEATURE_RIGHT if op > OP_FEATURE_RIGHT else OP_CONST_RIGHT)
            if sp < 1 or base < Op.ADD or base > Op.OR:
                return np.nan
            stack[sp - 1] = _binary(base, stack[sp - 1], x)
        elif op <= Op.OR:
            if sp < 2:
                return np.nan
            sp -= 1
            stack[sp - 1] = _binary(op, stack[sp - 1], stack[sp])
        elif op <= Op.FLOOR:
            if sp < 1:
                return np.nan
            stack[sp - 1] = _unary(op, stack[sp - 1], x)
        elif op == Op.SELECT:
            if sp < 3:
                return np.nan
            sp -= 2
            stack[sp - 1] = stack[sp] if stack[sp - 1] != 0.0 else stack[sp + 1]
        elif op == Op.BRANCH:
            f = np.int64(prog[pc + 1])
            target = np.int64(prog[pc + 3])
            if f < 0 or f >= n_feat or target <= pc + 3 or target >= end:
                return np.nan
            if not features[f] <= prog[pc + 2]:
                pc = target
                continue
        else:  # Op.RETURN
            break
        pc += 1 + n_opd
    if sp < 1:
        return np.nan
    return stack[sp - 1]


@helper
def run_program_rows(prog, features, n, stack, out):
    """``out[i]`` = the value of expression program ``prog`` on feature column i
    (``features[f, i]``), for i < n, in one pass over the code (``stack``: PROGRAM_STACK x
    n scratch); every out[i] is NaN if the row is not an expression it can run (a tree's
    path depends on the column: it runs one column at a time, ``run_program``)."""
    n_feat = features.shape[0]
    depth = stack.shape[0]
    end = _code_end(prog)
    bad = end < 0 or prog[ProgramHeader.FORM] != ProgramForm.EXPRESSION or n > stack.shape[1]
    pc = np.int64(ProgramHeader.CODE)
    sp = np.int64(0)
    while not bad and pc < end:
        op = np.int64(prog[pc])
        n_opd = _operands(op)
        if n_opd < 0 or pc + n_opd >= end:
            bad = True
            break
        x = prog[pc + 1] if n_opd > 0 else 0.0
        f = np.int64(-1)
        if op == Op.FEATURE or op > OP_FEATURE_RIGHT:
            f = np.int64(x)
            if f < 0 or f >= n_feat:
                bad = True
                break
        if op == Op.FEATURE or op == Op.CONST:
            if sp >= depth:
                bad = True
                break
            if f >= 0:
                for i in range(n):
                    stack[sp, i] = features[f, i]
            else:
                for i in range(n):
                    stack[sp, i] = x
            sp += 1
        elif op > OP_CONST_RIGHT:
            base = op - (OP_FEATURE_RIGHT if op > OP_FEATURE_RIGHT else OP_CONST_RIGHT)
            if sp < 1 or base < Op.ADD or base > Op.OR:
                bad = True
                break
            if f >= 0:
                _binary_rows(base, stack[sp - 1], features[f], n)
            else:
                _binary_rows_const(base, stack[sp - 1], x, n)
        elif op <= Op.OR:
            if sp < 2:
                bad = True
                break
            sp -= 1
            _binary_rows(op, stack[sp - 1], stack[sp], n)
        elif op <= Op.FLOOR:
            if sp < 1:
                bad = True
                break
            a = stack[sp - 1]
            for i in range(n):
                a[i] = _unary(op, a[i], x)
        elif op == Op.SELECT:
            if sp < 3:
                bad = True
                break
            sp -= 2
            c, a, b = stack[sp - 1], stack[sp], stack[sp + 1]
            for i in range(n):
                c[i] = a[i] if c[i] != 0.0 else b[i]
        else:  # BRANCH, RETURN: not in an expression
            bad = True
            break
        pc += 1 + n_opd
    if bad or sp < 1:
        for i in range(n):
            out[i] = np.nan
        return
    top = stack[sp - 1]
    for i in range(n):
        out[i] = top[i]


@helper
def _binary_rows(op, a, b, n):
    """a[i] = a[i] op b[i] for i < n: one tight loop per common operator (the same
    arithmetic as ``_binary``)."""
    if op == Op.ADD:
        for i in range(n):
            a[i] = a[i] + b[i]
    elif op == Op.SUB:
        for i in range(n):
            a[i] = a[i] - b[i]
    elif op == Op.MUL:
        for i in range(n):
            a[i] = a[i] * b[i]
    elif op == Op.DIV:
        for i in range(n):
            a[i] = a[i] / b[i] if b[i] != 0.0 else 0.0
    elif op == Op.MIN:
        for i in range(n):
            a[i] = b[i] if b[i] < a[i] else a[i]
    elif op == Op.MAX:
        for i in range(n):
            a[i] = b[i] if b[i] > a[i] else a[i]
    else:
        for i in range(n):
            a[i] = _binary(op, a[i], b[i])


@helper
def _binary_rows_const(op, a, b, n):
    """a[i] = a[i] op b for i < n."""
    if op == Op.ADD:
        for i in range(n):
            a[i] = a[i] + b
    elif op == Op.SUB:
        for i in range(n):
            a[i] = a[i] - b
    elif op == Op.MUL:
        for i in range(n):
            a[i] = a[i] * b
    elif op == Op.DIV:
        for i in range(n):
            a[i] = a[i] / b if b != 0.0 else 0.0
    elif op == Op.MIN:
        for i in range(n):
            a[i] = b if b < a[i] else a[i]
    elif op == Op.MAX:
        for i in range(n):
            a[i] = b if b > a[i] else a[i]
    else:
        for i in range(n):
            a[i] = _binary(op, a[i], b)


@helper
def finite_or(value, worst, faults, slot):
    """``value`` if it is finite, else ``worst`` with one more fault counted for ``slot``."""
    if value > -np.inf and value < np.inf:
        return value
    faults[slot] += 1
    return worst


@kernel
def evaluate_program(prog, features):
    """The program's value on each row of ``features`` (n x features), NaN where it cannot
    run: the scalar interpreter as the tests and ``blis_fast.config.expression`` call it."""
    n = features.shape[0]
    out = np.empty(n, np.float64)
    stack = np.empty(PROGRAM_STACK, np.float64)
    for k in range(n):
        out[k] = run_program(prog, features[k], stack)
    return out


@kernel
def evaluate_program_rows(prog, features):
    """The same values from the row interpreter (``run_program_rows``) in one pass: an
    expression's value on each column of ``features.T``."""
    n = features.shape[0]
    out = np.empty(n, np.float64)
    stack = np.empty((PROGRAM_STACK, n), np.float64)
    cols = np.ascontiguousarray(features.T)
    run_program_rows(prog, cols, n, stack, out)
    return out
