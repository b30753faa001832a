"""The interpreter of expression and decision-tree policies: one function runs a program
(float64 code compiled by ``blis_fast.policy.expression``; layout ``ProgramHeader``,
instructions ``Op``) over a row of features.

Safe by construction: the code has no loops (jumps only go forward, so a program runs at
most its length of instructions), reads only its feature row and writes only its stack,
and every operation is total (protected division, clamped ``exp``, ``sqrt``/``log1p`` of
max(x, 0)).  The compiler checks a program's length and stack depth; the interpreter
checks them again, so a hand-made row cannot read or write out of bounds either: a row
it cannot run gives NaN, which every call site turns into the slot's worst value and
counts (``State.prog_faults``).
"""

import math

import numpy as np

from ..jit import helper, kernel
from ..schema import EXP_LIMIT, PROGRAM_STACK, Op, ProgramHeader


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
def _unary(op, a):
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
    # Op.EXP
    if a > EXP_LIMIT:
        a = EXP_LIMIT
    elif a < -EXP_LIMIT:
        a = -EXP_LIMIT
    return math.exp(a)


@helper
def run_program(prog, features, stack):
    """The value of program ``prog`` (a row: ProgramHeader, then code) on ``features``,
    with ``stack`` as its scratch; NaN if the row is not a program it can run (too long,
    a stack it would overflow or underflow, a feature or jump out of range) -- or if the
    arithmetic gave NaN."""
    width = prog.shape[0]
    n_feat = features.shape[0]
    depth = stack.shape[0]
    end = ProgramHeader.CODE + np.int64(prog[ProgramHeader.LENGTH])
    if end > width or end <= ProgramHeader.CODE:
        return np.nan
    pc = np.int64(ProgramHeader.CODE)
    sp = np.int64(0)  # the number of values on the stack
    while pc < end:
        op = np.int64(prog[pc])
        if op == Op.FEATURE or op == Op.CONST:
            if pc + 1 >= end or sp >= depth:
                return np.nan
            if op == Op.FEATURE:
                f = np.int64(prog[pc + 1])
                if f < 0 or f >= n_feat:
                    return np.nan
                stack[sp] = features[f]
            else:
                stack[sp] = prog[pc + 1]
            sp += 1
            pc += 2
        elif op == Op.POW:
            if sp < 1 or pc + 1 >= end:
                return np.nan
            stack[sp - 1] = _power(stack[sp - 1], prog[pc + 1])
            pc += 2
        elif op >= Op.ADD and op <= Op.MAX or op >= Op.LT and op <= Op.OR:  # (POW is taken above)
            if sp < 2:
                return np.nan
            sp -= 1
            stack[sp - 1] = _binary(op, stack[sp - 1], stack[sp])
            pc += 1
        elif op >= Op.ABS and op <= Op.EXP or op == Op.NOT:
            if sp < 1:
                return np.nan
            stack[sp - 1] = _unary(op, stack[sp - 1])
            pc += 1
        elif op == Op.JUMP_IF_FALSE or op == Op.JUMP:
            if pc + 1 >= end:
                return np.nan
            target = np.int64(prog[pc + 1])
            if target <= pc + 1 or target > end:  # forward only: no loops
                return np.nan
            if op == Op.JUMP:
                pc = target
            else:
                if sp < 1:
                    return np.nan
                sp -= 1
                pc = target if stack[sp] == 0.0 else pc + 2
        elif op == Op.BRANCH:
            if pc + 3 >= end:
                return np.nan
            f = np.int64(prog[pc + 1])
            target = np.int64(prog[pc + 2 + 1])
            if f < 0 or f >= n_feat or target <= pc + 3 or target >= end:
                return np.nan
            pc = pc + 4 if features[f] <= prog[pc + 2] else target
        elif op == Op.RETURN:
            break
        else:
            return np.nan
    if sp < 1:
        return np.nan
    return stack[sp - 1]


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
    run: the kernel interpreter as the tests and ``blis_fast.policy.expression`` call it."""
    n = features.shape[0]
    out = np.empty(n, np.float64)
    stack = np.empty(PROGRAM_STACK, np.float64)
    for k in range(n):
        out[k] = run_program(prog, features[k], stack)
    return out
