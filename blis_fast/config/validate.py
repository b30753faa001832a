"""Shared checkers of every input surface: CLI flags, run-config YAML, policy bundles,
workload specs, trace files and the Python API.

One mechanism instead of one guard per call site:
- ``as_int`` / ``as_float`` / ``as_bool`` / ``as_str`` / ``as_choice`` convert and check one
  value.  Integers are always checked against int64 (and a documented range) *before* any
  numpy conversion; floats must be finite and normal (no NaN, no infinity, no subnormal
  such as 5e-324) and in range; text is parsed strictly (``"1_0"``, ``"0x10"`` and
  ``" 1 0"`` are not numbers).  ``text=False`` refuses strings (values given through the
  Python API must already have the right type).
- ``setting(default, help, lo=..., hi=...)`` declares a dataclass field with its help text
  and limits; ``check_fields(obj, section)`` checks every field of a settings dataclass
  against them (``__post_init__`` of every config section).
- ``show(value)`` is the offending value as it appears in messages: at most 80 characters,
  computed in bounded time and memory whatever the value (a huge integer, an aliased
  YAML structure, a long string).

Every failure raises ``error(field, message)`` (``ConfigError`` by default, ``WorkloadError``
for workload inputs): one line naming the field (YAML path or flag) and the allowed range.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
import sys
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np

from blis_fast.errors import ConfigError

# ----------------------------------------------------------------------------- limits (documented in docs/limits.md)

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
MAX_TIME_US = 2**62  # every time in µs stays below this: the int64 clock cannot overflow
MAX_REQUESTS = 100_000_000  # requests of one workload
MAX_INSTANCES = 65_536  # instances of one deployment (num/min/max_instances)
MAX_REQUEST_TOKENS = INT32_MAX  # prompt + output tokens of one request
MAX_KEYS = INT32_MAX  # block keys of one workload (the KV block table stores key numbers as int32)
MAX_STR_LEN = 4096  # names, paths, choices
MAX_POLICY_WEIGHT = 1e100  # |weight| of scheduler / priority terms: sort keys stay finite
MAX_SHOWN = 80  # characters of an offending value shown in a message
FLOAT_TINY = sys.float_info.min  # smallest normal float: smaller non-zero values are refused


# ----------------------------------------------------------------------------- messages


def show(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr``-like text of ``value``, at most ``limit`` characters, in bounded time."""
    parts: list[str] = []
    _emit(value, parts, [limit + 4], 0)
    s = "".join(parts)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _emit(v: Any, out: list[str], budget: list[int], depth: int) -> None:
    if budget[0] <= 0:
        return
    if depth > 16:
        out.append("...")
        budget[0] -= 3
        return
    if isinstance(v, bool) or v is None:
        s = repr(v)
    elif isinstance(v, numbers.Integral):
        iv = int(v)
        s = str(iv) if iv.bit_length() <= 240 else f"<integer of about {int(iv.bit_length() * 0.30103) + 1} digits>"
    elif isinstance(v, float):
        s = repr(v)
    elif isinstance(v, str) and "/" in v and len(v) > budget[0] - 6 > 8:
        # a long path: its end (the file name) says more than its start
        s = repr("..." + v[-(budget[0] - 9):])
    elif isinstance(v, (str, bytes)):
        s = repr(v[: budget[0] + 2])
        if len(v) > budget[0] + 2:
            s = s[:-1] + "..." + s[-1]
    elif isinstance(v, dict):
        out.append("{")
        budget[0] -= 1
        for k, (key, item) in enumerate(v.items()):
            if budget[0] <= 0:
                return
            if k:
                out.append(", ")
                budget[0] -= 2
            _emit(key, out, budget, depth + 1)
            out.append(": ")
            budget[0] -= 2
            _emit(item, out, budget, depth + 1)
        out.append("}")
        budget[0] -= 1
        return
    elif isinstance(v, (list, tuple)):
        close = "]" if isinstance(v, list) else ")"
        out.append("[" if isinstance(v, list) else "(")
        budget[0] -= 1
        for k, item in enumerate(v):
            if budget[0] <= 0:
                return
            if k:
                out.append(", ")
                budget[0] -= 2
            _emit(item, out, budget, depth + 1)
        out.append(close)
        budget[0] -= 1
        return
    else:
        try:
            if isinstance(v, np.ndarray):
                s = f"<array of {v.size} {v.dtype}>"
            elif isinstance(v, np.generic):
                s = repr(v.item()) if v.dtype.kind in "biuf" else f"<{type(v).__name__}>"
            else:
                s = f"<{type(v).__name__}>"
        except Exception:  # noqa: BLE001 -- never fail while describing a value
            s = f"<{type(v).__name__}>"
    out.append(s)
    budget[0] -= len(s)


def escape_controls(text: str, keep: str = "") -> str:
    """``text`` with every character that is not printable (BEL, ESC and the other C0 and
    C1 controls, line and paragraph separators, ...) written as its Python escape
    (``\\x07``), so user text cannot ring the bell or drive the terminal; printable text
    (spaces included) and the characters of ``keep`` (``"\\n"`` for multi-line text) are
    left as they are."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)


def show_text(value: Any, limit: int = MAX_SHOWN) -> str:
    """User text as it appears in a table or a message without quotes: at most ``limit``
    characters, control characters escaped (``show`` quotes it as repr does)."""
    s = value if isinstance(value, str) else str(value)
    s = escape_controls(s[: limit + 1])
    return s if len(s) <= limit else s[: limit - 3] + "..."


def key_name(key: Any, limit: int = 60) -> str:
    """A mapping key or setting name as it appears in a field path (shortened, unquoted)."""
    if isinstance(key, str) and 0 < len(key) <= limit and key.isprintable():
        return key
    return show(key, limit)


def fmt_num(x: Any) -> str:
    """A limit as it reads in messages (``2^63-1``, ``1e+100``, ``65536``)."""
    named = {INT64_MAX: "2^63-1", MAX_TIME_US: "2^62"}
    if isinstance(x, int) and not isinstance(x, bool):
        return named.get(x, str(x))
    return f"{x:g}"


def range_text(lo: Any = None, hi: Any = None, lo_open: bool = False, hi_open: bool = False) -> str:
    """``in [lo, hi]``, ``> lo``, ``<= hi`` ..."""
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{fmt_num(lo)}, {fmt_num(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {fmt_num(lo)}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {fmt_num(hi)}"
    return ""


# ----------------------------------------------------------------------------- strict text parsing

_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SPECIAL_FLOATS = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "infinity": math.inf,
                   "+infinity": math.inf, "-infinity": -math.inf, "nan": math.nan, "+nan": math.nan,
                   "-nan": math.nan}


def parse_decimal(text: str) -> Decimal | None:
    """A decimal number written the plain way (``12``, ``-1.5``, ``2e-3``; spaces around
    allowed), else None: no ``_`` separators, no hex, no non-ASCII digits, at most 400
    characters."""
    s = text.strip(" \t\r\n")
    if len(s) > 400 or not _FLOAT_TEXT.fullmatch(s):
        return None
    try:
        return Decimal(s)
    except InvalidOperation:  # pragma: no cover -- the pattern admits only valid literals
        return None


def parse_float_text(text: str) -> float | None:
    """``parse_decimal`` as a float (inf / nan spelled out are returned as such, for the
    finiteness check to name them), else None."""
    special = _SPECIAL_FLOATS.get(text.strip(" \t\r\n").lower())
    if special is not None:
        return special
    d = parse_decimal(text)
    if d is None:
        return None
    try:
        return float(d)
    except (OverflowError, ValueError):  # pragma: no cover
        return math.inf


# ----------------------------------------------------------------------------- checkers


def as_int(value: Any, field: str, lo: int | None = None, hi: int | None = None, *, error=ConfigError,
           text: bool = True, integral_float: bool = True, unit: str = "", nullable: bool = False) -> int:
    """``value`` as a Python int in [lo, hi] (hi defaults to 2^63-1).  Accepts ints and numpy
    ints (not bools), integral floats (``integral_float``) and, with ``text``, strings of a
    decimal integer or an integral number in scientific notation (``1e6``)."""
    shown_hi = hi
    hi = INT64_MAX if hi is None else hi
    unit_s = f" ({unit})" if unit else ""
    none_s = " or null" if nullable else ""

    def bad() -> ConfigError:
        rng = range_text(lo, shown_hi) if (lo is not None or shown_hi is not None) else range_text(None, INT64_MAX)
        return error(field, f"must be an integer {rng}{unit_s}{none_s}, got {show(value)}")

    v: int | None = None
    if isinstance(value, bool):
        raise bad()
    if isinstance(value, numbers.Integral):
        v = int(value)
    elif isinstance(value, (float,)) or (isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral)):
        try:
            x = float(value)
        except (OverflowError, ValueError, TypeError):
            raise bad() from None
        if not integral_float or not math.isfinite(x) or not x.is_integer():
            raise bad()
        v = int(x)
    elif isinstance(value, str) and text:
        s = value.strip(" \t\r\n")
        if _INT_TEXT.fullmatch(s) and len(s) <= 400:
            v = int(s)
        else:
            d = parse_decimal(s)
            if d is None or not d.is_finite() or d != d.to_integral_value():
                raise bad()
            if d.adjusted() > 40:
                raise bad()  # far out of any range: do not build the integer
            v = int(d)
    else:
        raise bad()
    if (lo is not None and v < lo) or v > hi:
        raise bad()
    return v


def as_float(value: Any, field: str, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
             hi_open: bool = False, error=ConfigError, text: bool = True, unit: str = "",
             nullable: bool = False) -> float:
    """``value`` as a finite, normal float in the given range.  Accepts ints (any size, not
    bools), floats, numpy numbers and, with ``text``, strict decimal strings."""
    unit_s = f" ({unit})" if unit else ""
    none_s = " or null" if nullable else ""
    rng = range_text(lo, hi, lo_open, hi_open)

    def bad(why: str = "") -> ConfigError:
        return error(field, f"must be a finite number{' ' + rng if rng else ''}{unit_s}{none_s}{why}, got {show(value)}")

    if isinstance(value, bool):
        raise bad()
    if isinstance(value, numbers.Real):
        try:
            x = float(value)
        except (OverflowError, ValueError, TypeError):
            raise bad() from None
    elif isinstance(value, str) and text:
        x = parse_float_text(value)
        if x is None:
            raise bad()
    else:
        raise bad()
    if not math.isfinite(x):
        raise bad()
    if x != 0.0 and abs(x) < FLOAT_TINY:
        raise bad(" (not subnormal: |x| >= 2.2e-308 or 0)")
    if lo is not None and (x < lo or (lo_open and x == lo)):
        raise bad()
    if hi is not None and (x > hi or (hi_open and x == hi)):
        raise bad()
    return x


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def as_bool(value: Any, field: str, *, error=ConfigError, text: bool = True) -> bool:
    """A bool (with ``text``: also true/false/yes/no/on/off/1/0 as strings)."""
    if isinstance(value, bool):
        return value
    try:
        if isinstance(value, np.bool_):
            return bool(value)
    except ImportError:  # pragma: no cover
        pass
    if text and isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise error(field, f"must be true or false, got {show(value)}")


def as_str(value: Any, field: str, *, error=ConfigError, max_len: int = MAX_STR_LEN, numbers_ok: bool = False,
           nonempty: bool = True) -> str:
    """A string of at most ``max_len`` characters (``numbers_ok``: a YAML number is taken as
    its text, e.g. ``hardware: 100``)."""
    if isinstance(value, str):
        s = value
    elif numbers_ok and isinstance(value, (int, float)) and not isinstance(value, bool) and (
            not isinstance(value, int) or value.bit_length() < 200):
        s = str(value)
    else:
        raise error(field, f"must be a string, got {show(value)}")
    if nonempty and not s:
        raise error(field, "must be a non-empty string")
    if len(s) > max_len:
        raise error(field, f"must be at most {max_len} characters, got {len(s)}: {show(s)}")
    if "\x00" in s:
        raise error(field, f"must not contain NUL characters, got {show(s)}")
    return s


def as_choice(value: Any, field: str, choices, *, error=ConfigError) -> str:
    """One of ``choices`` (strings)."""
    allowed = ", ".join(choices)
    if not isinstance(value, str):
        raise error(field, f"must be one of {allowed}, got {show(value)}")
    if value not in choices:
        raise error(field, f"unknown value {show(value)}; allowed: {allowed}")
    return value


def as_mapping(value: Any, field: str, allowed=None, *, error=ConfigError, what: str = "a mapping") -> dict:
    """A dict whose keys are strings (in ``allowed`` when given)."""
    if not isinstance(value, dict):
        raise error(field, f"must be {what}, got {show(value)}")
    for k in value:
        if not isinstance(k, str):
            raise error(field, f"keys must be strings, got {show(k)}")
        if allowed is not None and k not in allowed:
            raise error(f"{field}.{key_name(k)}" if field else key_name(k),
                        f"unknown key; known: {', '.join(sorted(allowed))}")
    return value


def as_list(value: Any, field: str, *, error=ConfigError, min_len: int = 0, max_len: int | None = None,
            what: str = "a list") -> list:
    """A list (or tuple) of ``min_len`` .. ``max_len`` entries."""
    if not isinstance(value, (list, tuple)):
        raise error(field, f"must be {what}, got {show(value)}")
    if len(value) < min_len:
        raise error(field, f"must be {what} of at least {min_len} entries, got {len(value)}")
    if max_len is not None and len(value) > max_len:
        raise error(field, f"must be {what} of at most {max_len} entries, got {len(value)}")
    return list(value)


# ----------------------------------------------------------------------------- settings dataclasses


@dataclass(frozen=True)
class Limits:
    """The allowed values of one setting (``setting(...)``)."""

    lo: Any = None
    hi: Any = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple | None = None
    unit: str = ""
    max_len: int = MAX_STR_LEN  # strings; lists and mappings: entries
    numbers_ok: bool = True  # a string setting accepts a YAML number (hardware: 100)


def setting(default: Any, help_text: str, *, lo=None, hi=None, lo_open: bool = False, hi_open: bool = False,
            choices=None, unit: str = "", max_len: int = MAX_STR_LEN, **extra):
    """A dataclass field with help text and limits (``metadata["help"]``,
    ``metadata["limits"]``); mutable defaults are copied per instance."""
    meta = {"help": help_text,
            "limits": Limits(lo, hi, lo_open, hi_open, tuple(choices) if choices else None, unit, max_len), **extra}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def annotation_kind(annotation: Any) -> tuple[str, bool]:
    """(base type text, optional) of a field annotation (a string under __future__)."""
    t = str(annotation)
    optional = "None" in t
    return t.replace(" | None", "").replace("None | ", "").strip(), optional


def check_value(value: Any, annotation: Any, limits: Limits | None, field: str, *, error=ConfigError,
                text: bool = False) -> Any:
    """``value`` checked (and, for surface input with ``text``, converted) against a field's
    type and limits; returns the value to store.  Without ``text`` the type must already
    be right (the Python API): no strings for numbers, no numbers for strings or bools."""
    lim = limits or Limits()
    base, optional = annotation_kind(annotation)
    if value is None:
        if optional:
            return None
        raise error(field, "must not be null")
    if base == "int":
        return as_int(value, field, lim.lo, lim.hi, error=error, text=text, integral_float=text, unit=lim.unit,
                      nullable=optional)
    if base == "float":
        return as_float(value, field, lim.lo, lim.hi, lo_open=lim.lo_open, hi_open=lim.hi_open, error=error,
                        text=text, unit=lim.unit, nullable=optional)
    if base == "bool":
        return as_bool(value, field, error=error, text=text)
    if base == "str":
        if lim.choices:
            return as_choice(value, field, lim.choices, error=error)
        return as_str(value, field, error=error, max_len=lim.max_len, numbers_ok=text and lim.numbers_ok)
    if base == "list[float]":
        items = value
        if text and isinstance(value, str):
            if len(value) > 100_000:
                raise error(field, f"must be a list of numbers, got {show(value)}")
            items = [x for x in value.replace(" ", "").split(",") if x != ""]
        items = as_list(items, field, error=error, max_len=lim.max_len, what="a list of numbers")
        return [as_float(x, f"{field}[{k}]", lim.lo, lim.hi, lo_open=lim.lo_open, hi_open=lim.hi_open,
                         error=error, text=text, unit=lim.unit) for k, x in enumerate(items)]
    return value


def check_fields(obj: Any, section: str, *, error=ConfigError) -> None:
    """Check every field of a settings dataclass against its type and ``setting`` limits;
    raise ``error("<section>.<field>", ...)`` on the first bad one (strict types)."""
    for f in dataclasses.fields(obj):
        if "limits" not in f.metadata and str(f.type).replace(" | None", "") not in (
                "int", "float", "bool", "str", "list[float]"):
            continue
        check_value(getattr(obj, f.name), f.type, f.metadata.get("limits"),
                    f"{section}.{f.name}" if section else f.name, error=error, text=False)


__all__ = [
    "INT64_MAX", "INT32_MAX", "MAX_TIME_US", "MAX_REQUESTS", "MAX_INSTANCES", "MAX_REQUEST_TOKENS", "MAX_KEYS",
    "MAX_STR_LEN", "MAX_POLICY_WEIGHT", "MAX_SHOWN", "show", "show_text", "escape_controls", "key_name", "fmt_num", "range_text", "parse_decimal",
    "parse_float_text", "as_int", "as_float", "as_bool", "as_str", "as_choice", "as_mapping", "as_list", "Limits",
    "setting", "check_value", "check_fields", "annotation_kind",
]
