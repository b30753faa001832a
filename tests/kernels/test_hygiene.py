"""Decorator and import hygiene of kernels/, over every module of every subpackage: every
function is compiled with caching (so a second process loads machine code instead of
compiling), no kernel imports the Python layer (``blis_fast``, which imports the kernels)
-- not even inside a function --, relative imports stay inside the
package, the schema pins its dtypes; and editing any kernel source drops the whole
package's compiled cache."""

import ast
from pathlib import Path

import numpy as np
import pytest

import blis_fast_kernels as kernels
from blis_fast_kernels import cache as C
from blis_fast_kernels import schema as S

KERNELS = Path(kernels.__file__).resolve().parent
ALLOWED_IMPORTS = {"numpy", "numba", "llvmlite", "math", "__future__", "blis_fast_kernels"}  # llvmlite: numba's code generator
PLUMBING_IMPORTS = {"cache.py": {"hashlib", "os", "pathlib"}, "schema": {"typing"},  # plain Python parts
                    "aot.py": {"dataclasses", "importlib", "os"},
                    "native.py": {"importlib", "os"}}
# the package's plumbing: plain Python by design (byref: a numba type extension)
PYTHON_ONLY = {"aot.py", "byref.py", "cache.py", "jit.py", "native.py"}
SUBPACKAGES = {"schema", "structs", "engine", "kv", "policies", "latency", "workload", "results", "agents"}


def _modules():
    return sorted(p for p in KERNELS.rglob("*.py") if "__pycache__" not in p.parts)


def _rel(path):
    return path.relative_to(KERNELS).as_posix()


def test_modules_cover_every_subpackage():
    mods = _modules()
    found = {p.parent.name for p in mods if p.parent != KERNELS}
    assert found == SUBPACKAGES, found
    for sub in SUBPACKAGES:  # each is a package with at least one module besides __init__
        assert (KERNELS / sub / "__init__.py").is_file()
        assert any(p.parent.name == sub and p.name != "__init__.py" for p in mods), sub
    # no stray source folder the checks below would miss
    dirs = {d.name for d in KERNELS.iterdir() if d.is_dir() and d.name != "__pycache__"}
    assert dirs == SUBPACKAGES, dirs


def _decorator_names(fn):
    return [ast.unparse(d) for d in fn.decorator_list]


def test_every_kernel_function_is_compiled_and_cached():
    checked = 0
    for path in _modules():
        if path.parent == KERNELS and path.name in PYTHON_ONLY or path.parent.name == "schema":
            continue  # the schema is data (NamedTuples, dtypes, the State record)
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                raise AssertionError(f"{_rel(path)}:{node.name}: classes belong in the schema")
            if isinstance(node, ast.FunctionDef):
                decos = _decorator_names(node)
                ok = any(d in ("kernel", "helper") or ("njit" in d and "cache=True" in d) for d in decos)
                assert ok, f"{_rel(path)}:{node.name} is not @kernel/@helper/@njit(cache=True): {decos}"
                assert not any("jitclass" in d for d in decos)
                checked += 1
    assert checked > 50  # the walk really saw the kernels


def test_kernels_import_only_numpy_numba_and_themselves():
    for path in _modules():
        tree = ast.parse(path.read_text())
        depth = len(path.relative_to(KERNELS).parts) - 1  # 0 for kernels/x.py, 1 for kernels/sub/x.py
        allowed = ALLOWED_IMPORTS | PLUMBING_IMPORTS.get(path.name if depth == 0 else path.parent.name, set())
        for node in ast.walk(tree):  # every import, also inside functions
            if isinstance(node, ast.Import):
                for a in node.names:
                    assert a.name.split(".")[0] in allowed, f"{_rel(path)} imports {a.name}"
                    assert not a.name.startswith("blis_fast")
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    assert node.module.split(".")[0] in allowed, f"{_rel(path)} imports {node.module}"
                    assert not node.module.startswith("blis_fast")
                else:  # relative: must not climb out of the kernels package
                    assert node.level <= depth + 1, f"{_rel(path)}: from {'.' * node.level}{node.module or ''}"
            elif isinstance(node, ast.Call):  # importlib.import_module("blis_fast..."), __import__(...)
                for a in node.args:
                    assert not (isinstance(a, ast.Constant) and isinstance(a.value, str)
                                and a.value.startswith("blis_fast")), f"{_rel(path)} loads {a.value}"


@pytest.mark.slow  # a subprocess
def test_kernel_modules_import_no_blis_fast_at_runtime():
    """Importing every kernel module in a fresh interpreter loads no blis_fast module."""
    import subprocess
    import sys

    names = [".".join(("blis_fast_kernels", *p.relative_to(KERNELS).with_suffix("").parts)).removesuffix(".__init__")
             for p in _modules()]
    code = ("import importlib, sys\n"
            f"for n in {names!r}: importlib.import_module(n)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'blis_fast'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "NUMBA_DISABLE_JIT": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_schema_is_pinned():
    # a change to a table layout must be deliberate: update these numbers with it
    tables = (S.REQUEST_DT, S.INSTANCE_DT, S.KV_BLOCK_DT, S.EVENT_DT, S.STEP_DT, S.IRR_DT, S.SETTINGS_DT, S.LOOP_DT)
    for dt in tables:
        assert dt.isalignedstruct
        for name in dt.names:
            assert dt.fields[name][0].kind in "iuf", name
    # small rows: block rows are loaded at random (only named blocks have one, kv/cache.py)
    assert S.KV_BLOCK_DT.itemsize == 20
    assert S.EVENT_DT.names == ("time_us", "priority", "seq", "request", "arg2")
    # 32-byte event records: the heap's sifts move whole records (structs/heap.py)
    assert [S.EVENT_DT.fields[n][0] for n in S.EVENT_DT.names] == [np.int64] * 3 + [np.int32] * 2
    assert S.EVENT_DT.itemsize == 32
    # the per-token hot fields of a request share its first cache line
    hot = ("computed", "prefill_target", "blocks_held", "generated", "output_len")
    assert all(S.REQUEST_DT.fields[f][1] < 64 for f in hot)
    assert set(S.State._fields) >= {"settings", "loop", "reqs", "inst", "blocks", "heap", "step_log", "irr_log"}


def test_event_kind_order_is_the_tie_break_order():
    assert S.ClusterEvent.ARRIVAL < S.ClusterEvent.ADMISSION < S.ClusterEvent.ROUTING < S.N_CLUSTER_KINDS
    assert S.InstanceEvent.QUEUED < S.InstanceEvent.STEP < S.N_INSTANCE_KINDS


def test_enum_groups_are_distinct_codes():
    for group in (S.RequestState, S.Status, S.PolicySlot, S.RoutingKind, S.AdmissionKind, S.PriorityKind,
                  S.SchedulerKind, S.VictimKind, S.SnapField, S.IndexState, S.Roofline, S.ScanStatus):
        assert len(set(group)) == len(group), type(group).__name__
    assert len(S.RequestState) == len(S.REQUEST_STATE_NAMES)
    assert len(S.SnapField) == S.N_SNAP == len(S.SNAPSHOT_FIELD_NAMES)
    assert len(S.Roofline) == S.N_ROOFLINE and len(S.PolicySlot) == S.N_POLICY_SLOTS
    assert len(S.RouteWeight) == S.N_ROUTE_WEIGHTS and len(S.SchedWeight) == S.N_SCHED_WEIGHTS
    assert S.Key.NONE == -1 and S.Key.REPLACEMENT != S.Key.NONE


def test_stale_kernel_cache_is_dropped(tmp_path, monkeypatch):
    """Editing any kernel source must invalidate every cached kernel (numba only checks a
    function's own file; the engine compiles all helpers into itself)."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    dirs = C.cache_dirs()
    assert len(dirs) == 1 + len(SUBPACKAGES) and all(d.parent == tmp_path for d in dirs)
    cached = [d / "mod.f-1.py311.nbi" for d in dirs] + [dirs[-1] / "mod.f-1.py311.nbc"]
    other = tmp_path / "elsewhere_0123" / "other.f-1.py311.nbi"
    for p in (*cached, other):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")
    stamp = dirs[0] / C._STAMP
    stamp.write_text("an old digest")
    C.drop_stale()
    assert not any(p.exists() for p in cached) and other.exists()
    assert stamp.read_text() == C.sources_digest()
    for p in cached:
        p.write_text("x")
    C.drop_stale()  # digest unchanged: the cache is kept
    assert all(p.exists() for p in cached)


def test_sources_digest_covers_every_module(tmp_path, monkeypatch):
    """The digest changes with the bytes of a module in any subpackage."""
    import shutil

    copy = tmp_path / "kernels"
    shutil.copytree(KERNELS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(C, "_SRC", copy)
    base = C.sources_digest()
    assert base == C.sources_digest()
    for sub in sorted(SUBPACKAGES):
        f = sorted((copy / sub).glob("*.py"))[-1]
        text = f.read_text()
        f.write_text(text + "\n# edit\n")
        assert C.sources_digest() != base, sub
        f.write_text(text)
    assert C.sources_digest() == base
