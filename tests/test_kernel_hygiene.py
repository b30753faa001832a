"""Decorator and import hygiene of kernels/ (STYLE.md §3-4): every function is compiled
with caching, no kernel imports the Python layer, the schema pins its dtypes."""

import ast
from pathlib import Path

import numpy as np

import kernels
from kernels import dtypes as D

KERNELS = Path(kernels.__file__).parent
ALLOWED_IMPORTS = {"numpy", "numba", "__future__", "kernels"}


def _modules():
    return sorted(p for p in KERNELS.glob("*.py") if p.name != "__init__.py")


def _decorator_names(fn):
    out = []
    for d in fn.decorator_list:
        src = ast.unparse(d)
        out.append(src)
    return out


def test_every_kernel_function_is_compiled_and_cached():
    for path in _modules():
        if path.name in ("dtypes.py", "jit.py"):
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                decos = _decorator_names(node)
                ok = any(d in ("kernel", "helper") or ("njit" in d and "cache=True" in d) for d in decos)
                assert ok, f"{path.name}:{node.name} is not @kernel/@helper/@njit(cache=True): {decos}"
                assert not any("jitclass" in d for d in decos)


def test_kernels_import_only_numpy_numba_and_themselves():
    for path in _modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    assert a.name.split(".")[0] in ALLOWED_IMPORTS, f"{path.name} imports {a.name}"
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    assert node.module.split(".")[0] in ALLOWED_IMPORTS, f"{path.name} imports {node.module}"


def test_schema_is_pinned():
    # a change to a table layout must be deliberate: update these numbers with it
    for dt in (D.REQUEST_DT, D.INSTANCE_DT, D.KV_BLOCK_DT, D.EVENT_DT, D.SIM_DT, D.RUN_STATS_DT):
        assert dt.isalignedstruct
        for name in dt.names:
            assert dt.fields[name][0].kind in "iuf", name
    assert D.KV_BLOCK_DT.itemsize == 24
    assert D.EVENT_DT.names == ("time_us", "priority", "seq", "request")
    assert all(dt == np.int64 for dt in (D.EVENT_DT.fields[n][0] for n in D.EVENT_DT.names))


def test_event_kind_order_is_the_tie_break_order():
    assert D.EV_CLUSTER_ARRIVAL < D.EV_ADMISSION_DECISION < D.EV_ROUTING_DECISION < D.N_CLUSTER_KINDS
    assert D.EV_QUEUED < D.EV_STEP < D.N_INSTANCE_KINDS


def test_stale_kernel_cache_is_dropped(tmp_path, monkeypatch):
    """Editing any kernel source must invalidate every cached kernel (numba only checks a
    function's own file; the engine compiles all helpers into itself)."""
    import kernels as K

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    cached = tmp_path / "work" / "kernels" / "engine.simulate_cluster-1.py311.nbi"
    other = tmp_path / "elsewhere" / "other.f-1.py311.nbi"
    for p in (cached, other):
        p.parent.mkdir(parents=True)
        p.write_text("x")
    (tmp_path / K._STAMP).write_text("an old digest")
    K._drop_stale_cache()
    assert not cached.exists() and other.exists()
    assert (tmp_path / K._STAMP).read_text() == K._sources_digest()
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text("x")
    K._drop_stale_cache()  # digest unchanged: the cache is kept
    assert cached.exists()
