"""The ahead-of-time compiled entry kernels (kernels/aot.py, kernels/native.py): the State
layout they are compiled for is the one build_state makes; a call whose arguments do not
match goes to the JIT kernel (or, with BLIS_FAST_KERNELS=native, is refused) instead of
reaching compiled code; a module built from other sources is not used; and the compiled
kernels give byte-identical results to the JIT ones.

The comparisons need the compiled module, which a non-editable install builds (setup.py):
they are skipped without it, unless BLIS_FAST_KERNELS=native (CI) makes its absence a
failure."""

import os

import numpy as np
import pytest

from builders import lengths_workload, sim
from blis_fast.run.api import as_config
from blis_fast.run.resolve import build_workload, resolve
from blis_fast.run.tables import build_state
from blis_fast_kernels import aot, native
from blis_fast_kernels.schema import TraceLevel
from blis_fast_kernels.schema.state import STATE_LAYOUT, State

REQUIRED = os.environ.get("BLIS_FAST_KERNELS") == "native"


def _state(trace_level=0, **overrides):
    cfg = as_config(None, {"num_requests": 30, **overrides})
    return build_state(resolve(cfg), build_workload(cfg), trace_level=trace_level)


@pytest.fixture
def fresh_status(monkeypatch):
    """native's memo of the compiled module, emptied for this test and restored after it."""
    monkeypatch.setattr(native, "_status", {})


def _need_module():
    if native.mode() == "jit":
        pytest.skip("JIT kernels requested (BLIS_FAST_KERNELS=jit or NUMBA_DISABLE_JIT)")
    if native.compiled_module() is None:
        if REQUIRED:
            pytest.fail(f"BLIS_FAST_KERNELS=native but {native.status()}")
        pytest.skip(native.status())


@pytest.mark.parametrize("settings", [
    dict(trace_level=TraceLevel.NONE),
    dict(trace_level=TraceLevel.DECISIONS, routing_policy="prefix-affinity"),
    dict(trace_level=TraceLevel.FULL, scheduler="sjf", num_instances=3),
])
def test_build_state_makes_the_compiled_layout(settings):
    st = _state(**settings)
    assert type(st) is State
    for name, a in zip(State._fields, st):
        dtype, ndim = STATE_LAYOUT[name]
        assert a.dtype == dtype and a.ndim == ndim, name
        assert a.flags.c_contiguous and a.flags.aligned and a.flags.writeable, name
    assert aot.args_match(aot.BY_NAME["run_events"], (st,))


def test_arguments_of_other_types_do_not_match():
    st = _state()
    run_events = aot.BY_NAME["run_events"]
    assert not aot.args_match(run_events, (tuple(st),))  # a plain tuple is not a State
    assert not aot.args_match(run_events, (st, 1))
    assert not aot.args_match(run_events, (st._replace(keys=st.keys.astype(np.int32)),))
    assert not aot.args_match(run_events, (st._replace(batch=st.batch.ravel()),))
    assert not aot.args_match(run_events, (st._replace(batch=np.asfortranarray(np.zeros((3, 2), np.int64))),))
    frozen = st.reqs.copy()
    frozen.flags.writeable = False  # the loop writes every table of the State
    assert not aot.args_match(run_events, (st._replace(reqs=frozen),))
    assert aot.mismatch(run_events, (st._replace(reqs=frozen),)).startswith("State.reqs is a 1-d")
    assert "(not writeable)" in aot.mismatch(run_events, (st._replace(reqs=frozen),))
    flag_keys = aot.BY_NAME["flag_keys"]
    keys = np.arange(10, dtype=np.int64)
    assert aot.args_match(flag_keys, (keys, 0)) and aot.args_match(flag_keys, (keys, np.int64(1)))
    assert not aot.args_match(flag_keys, (keys, True))  # a bool is not an int64 here
    assert not aot.args_match(flag_keys, (keys, 1.0))
    assert not aot.args_match(flag_keys, (keys[::2], 0))  # not contiguous
    assert not aot.args_match(flag_keys, (keys.astype(np.uint64), 0))
    assert not aot.args_match(flag_keys, (keys.tolist(), 0))
    parse = aot.BY_NAME["parse_int_lists"]
    buf = np.frombuffer(b"[1, 2]", np.uint8)  # read-only: an input the kernel only reads
    assert aot.args_match(parse, (buf, np.array([0]), np.array([6]), True))
    assert not aot.args_match(parse, (buf, np.array([0]), np.array([6]), 1))  # an int is not a bool here


def test_every_entry_is_served_and_named_after_its_kernel():
    from importlib import import_module

    for e in aot.ENTRIES:
        assert getattr(native, e.name).entry is e
        assert hasattr(import_module(f"blis_fast_kernels.{e.module}"), e.name)


def test_a_call_the_module_cannot_take_runs_jit_or_is_refused(monkeypatch):
    monkeypatch.setenv("BLIS_FAST_KERNELS", "auto")
    keys = np.array([5, 1, 5, 2, 1, 5], np.int32)  # int32: not the compiled type
    want = native.flag_keys.jit()(keys.astype(np.int64), 0)
    got = native.flag_keys(keys, 0)
    assert np.array_equal(got[0], want[0]) and got[1] == want[1] == 2
    monkeypatch.setenv("BLIS_FAST_KERNELS", "native")
    if native.mode() == "jit":
        return  # NUMBA_DISABLE_JIT: interpreted kernels whatever BLIS_FAST_KERNELS says
    if native.compiled_module() is None:
        with pytest.raises(native.NativeUnavailable, match="flag_keys"):
            native.flag_keys(keys.astype(np.int64), 0)
    with pytest.raises(native.NativeUnavailable, match="flag_keys compiled: argument 1 is a 1-d int32 array, not"
                       if native.compiled_module() is not None else "flag_keys"):
        native.flag_keys(keys, 0)


def test_bad_mode_is_named(monkeypatch):
    monkeypatch.setenv("BLIS_FAST_KERNELS", "fast")
    with pytest.raises(native.NativeUnavailable, match="BLIS_FAST_KERNELS must be one of auto, native, jit"):
        native.mode()


def test_a_module_built_from_other_sources_is_not_used(monkeypatch, fresh_status):
    from blis_fast_kernels import cache

    monkeypatch.delenv("BLIS_FAST_KERNELS", raising=False)
    if native.mode() == "jit":
        pytest.skip("NUMBA_DISABLE_JIT")
    monkeypatch.setattr(cache, "sources_digest", lambda: "0123456789abcdef" * 4)  # another digest
    assert native.compiled_module() is None
    why = native.status()
    assert why.startswith("JIT: ") and ("other kernel sources" in why or "without its compiled kernels" in why)
    keys = np.array([3, 3, 4], np.int64)
    assert native.flag_keys(keys, 0)[1] == 1  # served by the JIT kernel


def _run(mode, monkeypatch, wl, **kw):
    monkeypatch.setenv("BLIS_FAST_KERNELS", mode)
    r = sim(wl, **kw)
    return r.results_json(), r.summary(), r.requests_table().to_pydict()


@pytest.mark.parametrize("settings", [
    dict(num_instances=3),
    # KV pressure: preemptions and readmissions, every decision and scheduling record traced
    dict(num_instances=2, total_kv_blocks=60, trace_level="full", scheduler="sjf", routing_policy="weighted"),
])
def test_compiled_kernels_equal_the_jit_ones(monkeypatch, settings):
    _need_module()
    rng = np.random.default_rng(5)
    n = 120
    families = [rng.integers(0, 128_000, 64) for _ in range(3)]  # shared prompt prefixes: cache hits
    wl = lengths_workload(np.sort(rng.integers(0, 3_000_000, n)), rng.integers(70, 600, n), rng.integers(1, 300, n),
                          prefixes=[families[k] for k in rng.integers(0, 3, n)], tenant=rng.integers(0, 2, n),
                          slo_class=rng.integers(0, 3, n))
    kw = dict(beta_coeffs=[3000, 10, 5], **settings)
    compiled = _run("native", monkeypatch, wl, **kw)
    assert compiled == _run("jit", monkeypatch, wl, **kw)
    if settings.get("total_kv_blocks"):
        assert compiled[1]["cluster"]["preemption_count"] > 0


def test_compiled_workload_kernels_equal_the_jit_ones(monkeypatch, tmp_path):
    from builders import make_trace, same_workload
    from blis_fast.workload import load_blis_trace

    _need_module()
    trace = make_trace(tmp_path / "trace.csv", n=60)
    made = {}
    for mode in ("native", "jit"):
        monkeypatch.setenv("BLIS_FAST_KERNELS", mode)
        cfg = as_config(None, {"num_requests": 500, "workload": "chatbot"})
        made[mode] = build_workload(cfg), load_blis_trace(trace, 16)
    for a, b in zip(made["native"], made["jit"]):
        assert same_workload(a, b) and np.array_equal(a.key_shared, b.key_shared)


def test_the_cli_names_a_bad_kernel_choice(monkeypatch, capsys):
    from builders import expect_cli_error

    monkeypatch.setenv("BLIS_FAST_KERNELS", "fast")
    expect_cli_error(capsys, "run", "--num-requests", "5", needles=("BLIS_FAST_KERNELS must be one of",))


def test_a_run_with_the_compiled_kernels_loads_no_numba_and_says_nothing(tmp_path):
    """An empty numba cache (the first run after installing): nothing compiles, so no
    notice; numba is never imported."""
    import subprocess
    import sys

    _need_module()
    code = ("import sys, blis_fast; blis_fast.simulate(num_requests=30, workload='chatbot'); "
            "print('numba' in sys.modules, 'llvmlite' in sys.modules)")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "empty"), "BLIS_FAST_KERNELS": "native"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "False"] and out.stderr == ""


def test_the_agents_share_modes_are_the_drivers_codes():
    from blis_fast.agents.run import SHARE_MODE_CODES
    from blis_fast_kernels.agents.fairshare import DYNAMIC, STATIC

    assert SHARE_MODE_CODES == {"dynamic": DYNAMIC, "static": STATIC}
    assert aot.args_match(aot.BY_NAME["run_tool_dags"], tuple(
        np.zeros(1, np.float64 if k in (6, 9) else np.int64) for k in range(11)) + (SHARE_MODE_CODES["static"],))


@pytest.mark.slow  # two fresh processes, the JIT one compiling the driver
def test_compiled_agents_driver_equals_the_jit_one_and_loads_no_numba(tmp_path):
    """``blis-fast agents run`` calls the compiled fair-share driver (run_tool_dags): its
    results equal the JIT ones, byte for byte, and the run never imports numba."""
    import subprocess
    import sys
    from pathlib import Path

    _need_module()
    scenario = Path(__file__).resolve().parents[2] / "configs" / "agents" / "tools-only.yaml"
    code = ("import json, sys; from blis_fast.agents import run_scenario; "
            f"print(json.dumps(run_scenario({str(scenario)!r}).to_dict())); print('numba' in sys.modules)")
    out = {}
    for mode in ("native", "jit"):
        env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / mode), "BLIS_FAST_KERNELS": mode}
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        out[mode] = run.stdout.split("\n")[:2]
    assert out["native"][0] == out["jit"][0]
    assert out["native"][1] == "False" and out["jit"][1] == "True"
