"""The shared checkers (blis_fast.config.validate), the safe YAML loader, the memory
budget's size parser and the output-file helpers, under hand-picked and random input:
they raise only ConfigError (one line, naming the field), in bounded time and memory."""

from __future__ import annotations

import math
import os
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blis_fast.config.memory import MemoryBudget, fmt_bytes, memory_budget, parse_bytes
from blis_fast.config.outputs import atomic_write, check_outputs, same_file
from blis_fast.config.validate import (
    INT64_MAX,
    as_bool,
    as_choice,
    as_float,
    as_int,
    as_str,
    parse_decimal,
    show,
)
from blis_fast.config.yamlfile import MAX_DEPTH, MAX_NODES, load_yaml_text
from blis_fast.errors import ConfigError
from hardening_helpers import ALIAS_BOMB

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# values a hostile user could put anywhere
NASTY = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=2**62, max_value=2**200),
    st.integers(min_value=-2**200, max_value=-2**62), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([5e-324, 1e-310, 2.2250738585072014e-308, -0.0, 1.7976931348623157e308, 2.0**63, 2.0**64]),
    st.text(max_size=20), st.sampled_from(["1_0", "0x10", "1e8", " 7 ", "1e400", "nan", "inf", "-0", "+3", "１",
                                           "1,5", "", "   ", "9" * 500, "1e-400", "true", "2.5"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.binary(max_size=5),
)


# ============================================================================ show


def test_show_is_bounded_for_huge_values():
    nested = [[["x" * 1000] * 1000] * 1000] * 1000  # 10^9 strings by reference
    big = 10**100_000
    for v in (nested, big, "y" * 10**7, {i: list(range(1000)) for i in range(1000)}, b"\xff" * 10**6, object()):
        t0 = time.process_time()
        s = show(v)
        assert len(s) <= 80, s
        assert time.process_time() - t0 < 0.5  # CPU work bound: nothing is walked or formatted whole
    assert "digits" in show(big)


@FAST
@given(NASTY)
def test_show_never_fails(v):
    s = show(v)
    assert isinstance(s, str) and len(s) <= 80


# ============================================================================ numbers


@FAST
@given(NASTY, st.integers(-10, 10), st.integers(-10, 2**63 - 1))
def test_as_int_returns_in_range_or_raises_config_error(v, lo, hi):
    try:
        x = as_int(v, "f.x", lo, hi)
    except ConfigError as exc:
        assert exc.field == "f.x" and "\n" not in str(exc) and len(str(exc)) < 300
        return
    assert isinstance(x, int) and lo <= x <= hi <= INT64_MAX


@FAST
@given(NASTY, st.floats(-1e6, 0), st.floats(0, 1e300))
def test_as_float_returns_finite_normal_in_range_or_raises(v, lo, hi):
    try:
        x = as_float(v, "f.y", lo, hi)
    except ConfigError as exc:
        assert exc.field == "f.y" and "\n" not in str(exc) and len(str(exc)) < 300
        return
    assert isinstance(x, float) and math.isfinite(x) and lo <= x <= hi
    assert x == 0 or abs(x) >= 2.2250738585072014e-308


@pytest.mark.parametrize("text, value", [("12", 12), ("-3", -3), (" 7 ", 7), ("1e8", 10**8), ("2.0", 2),
                                         ("+5", 5), ("1E3", 1000)])
def test_as_int_text_accepted(text, value):
    assert as_int(text, "f") == value


@pytest.mark.parametrize("text", ["1_0", "0x10", "1.5", "1e-3", "nan", "inf", "", "1 0", "１", "1e400", "True",
                                  "9" * 5000, "1e99999999999"])
def test_as_int_text_refused(text):
    with pytest.raises(ConfigError):
        as_int(text, "f")


@pytest.mark.parametrize("text", ["1_0.5", "0x1p3", "٣", "1,5", "1e", ".", "--1", "nan", "inf", "5e-324"])
def test_as_float_text_refused(text):
    with pytest.raises(ConfigError):
        as_float(text, "f")


def test_strict_types_without_text():
    for bad in ("3", True, 3.0):
        with pytest.raises(ConfigError):
            as_int(bad, "f", text=False, integral_float=False)
    with pytest.raises(ConfigError):
        as_float("3", "f", text=False)
    with pytest.raises(ConfigError):
        as_bool(1, "f")
    with pytest.raises(ConfigError):
        as_str(5, "f")
    with pytest.raises(ConfigError, match="allowed"):
        as_choice("x", "f", ("a", "b"))
    with pytest.raises(ConfigError, match="one of"):
        as_choice(["a"], "f", ("a", "b"))  # a list is not 'unhashable', just wrong


@FAST
@given(st.text(max_size=30))
def test_parse_decimal_agrees_with_float_on_plain_numbers(s):
    d = parse_decimal(s)
    if d is not None:
        assert float(d) == float(s.strip(" \t\r\n"))
        assert "_" not in s and s.strip(" \t\r\n").isascii()


# ============================================================================ memory sizes


@pytest.mark.parametrize("text, n", [("4GB", 4 * 10**9), ("512MiB", 512 * 2**20), ("4G", 4 * 2**30),
                                     ("2000000000", 2 * 10**9), ("1.5GiB", 3 * 2**29), ("1e9", 10**9),
                                     (" 3 GiB ", 3 * 2**30), (2**30, 2**30)])
def test_parse_bytes(text, n):
    assert parse_bytes(text) == n


@pytest.mark.parametrize("text", ["4XB", "-1GB", "1e400", "GB", "", "0", "1", 2**70, "4 G B", True, 1.5e30, "nan"])
def test_parse_bytes_refused(text):
    with pytest.raises(ConfigError, match="max_memory"):
        parse_bytes(text)


def test_budget_charges_and_refuses():
    b = MemoryBudget(100 * 2**20)
    b.charge(60 * 2**20, "first")
    with pytest.raises(ConfigError, match="second needs about 50.0 MiB .*already in use.*100.0 MiB"):
        b.charge(50 * 2**20, "second")
    assert b.used == 60 * 2**20
    with memory_budget(2**20) as inner:
        from blis_fast.config import memory

        assert memory.current_budget() is inner
        with pytest.raises(ConfigError):
            memory.charge(2**21, "x")
    assert fmt_bytes(3 * 2**40) == "3.0 TiB"


# ============================================================================ the YAML loader


@pytest.mark.parametrize("text, needle", [
    (ALIAS_BOMB, "alias expansion"),
    ("a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested"),
    ("a: " + "{b: " * 2000 + "1" + "}" * 2000, "nested"),
    ("a: 1\na: 2\n", "duplicate key 'a'"),
    ("a: {b: 1, b: 2}\n", "duplicate key 'b'"),
    ("a: &x [*x]\n", "recursive"),
    ("a: 1\n---\nb: 2\n", "more than one"),
    ("a: !!python/object:os.system ls\n", "malformed YAML"),
    ("a: *nowhere\n", "malformed YAML"),
    ("\t- x\n", "malformed YAML"),
    ("[" * 5000, "nest"),
])
def test_loader_refuses(text, needle):
    tracemalloc.start()
    t0 = time.process_time()
    with pytest.raises(ConfigError, match=needle) as ei:
        load_yaml_text(text, "f.yaml")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "\n" not in str(ei.value) and len(str(ei.value)) < 400
    assert time.process_time() - t0 < 2.0 and peak < 50 * 2**20  # CPU work, not wall time


def test_loader_refuses_one_value_too_many_quickly():
    """A flat list one value past MAX_NODES is refused by the first pass, in a fraction of
    the time loading it would take."""
    text = "x:\n" + "- 1\n" * MAX_NODES
    t0 = time.process_time()
    with pytest.raises(ConfigError, match=f"more than {MAX_NODES} values"):
        load_yaml_text(text, "f.yaml")
    assert time.process_time() - t0 < 5.0  # CPU work, not wall time


@pytest.mark.slow
def test_loader_loads_the_largest_file_it_accepts_within_the_hardening_bounds():
    """The worst file the limits let through -- MAX_NODES values, the most Python objects
    per byte -- loads in well under 10 s of CPU (libyaml's parser; the pure-Python one took
    about a minute for 2,000,000 values) and well under 1 GB."""
    text = "x:\n" + "- 1\n" * (MAX_NODES - 5)
    t0 = time.process_time()
    assert len(load_yaml_text(text, "f.yaml")["x"]) == MAX_NODES - 5
    assert time.process_time() - t0 < 10.0


def test_loader_keeps_merge_keys_and_small_aliases():
    data = load_yaml_text("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 5\nd: [*b, *b]\n", "f")
    assert data["c"] == {"x": 5, "y": 2} and data["d"] == [{"x": 1, "y": 2}] * 2


def test_loader_size_limit():
    with pytest.raises(ConfigError, match="larger than"):
        load_yaml_text("a: 1\n" * 10, "f", max_bytes=20)


@FAST
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\" \n\t,?#%@`0123456789.eE+")), max_size=200))
def test_loader_random_text_only_config_errors(text):
    try:
        load_yaml_text(text, "f.yaml")
    except ConfigError as exc:
        assert "\n" not in str(exc)


# ============================================================================ outputs


def test_same_file_through_links(tmp_path):
    a = tmp_path / "a"
    a.write_text("x")
    (tmp_path / "l").symlink_to(a)
    os.link(a, tmp_path / "h")
    assert same_file(a, tmp_path / "l") and same_file(a, tmp_path / "h")
    assert same_file(tmp_path / "new", tmp_path / "." / "new")
    assert not same_file(a, tmp_path / "b")


def test_check_outputs(tmp_path):
    a = tmp_path / "in.yaml"
    a.write_text("x")
    with pytest.raises(ConfigError, match="--out.*input file of --spec"):
        check_outputs([("--out", a)], [("--spec", a)])
    with pytest.raises(ConfigError, match="also the output of --a"):
        check_outputs([("--a", tmp_path / "o"), ("--b", tmp_path / "o")])
    with pytest.raises(ConfigError, match="is a directory"):
        check_outputs([("--a", tmp_path)])
    with pytest.raises(ConfigError, match="does not exist"):
        check_outputs([("--a", tmp_path / "x" / "y")])
    check_outputs([("--a", tmp_path / "o1"), ("--b", tmp_path / "o2")], [("--spec", a)])


def test_atomic_write_keeps_the_target_on_failure(tmp_path):
    t = tmp_path / "t.json"
    t.write_text("old")

    def fail(p):
        p.write_text("partial")
        raise OSError(5, "I/O error")

    with pytest.raises(ConfigError, match="--x: cannot write .*I/O error"):
        atomic_write(t, fail, "--x")
    assert t.read_text() == "old" and os.listdir(tmp_path) == ["t.json"]

    def boom(p):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(t, boom, "--x")
    assert os.listdir(tmp_path) == ["t.json"]
    atomic_write(t, lambda p: p.write_text("new"), "--x")
    assert t.read_text() == "new" and os.listdir(tmp_path) == ["t.json"]


def test_atomic_write_to_a_device_writes_in_place():
    atomic_write("/dev/null", lambda p: open(p, "w").write("x"), "--x")
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
