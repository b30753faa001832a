"""The compiled-kernel cache heals itself (``blis_fast_kernels.cache.heal``, driven by
``blis_fast.paths.guard_kernel_cache`` on ``import blis_fast``): a damaged cache file is
found, the cache is cleared and the kernels compile again, with one notice line on stderr;
a cold cache announces its compile; a warm one prints nothing.  Checking costs no numba
import."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import blis_fast_kernels as kernels
from blis_fast import paths as P
from blis_fast_kernels import cache as C

ROOT = Path(kernels.__file__).resolve().parent.parent


def _env(cache_dir: Path) -> dict:
    # the JIT kernels' cache: BLIS_FAST_KERNELS=jit, or runs would use the compiled module
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT), "BLIS_FAST_KERNELS": "jit"}
    env.pop("NUMBA_DISABLE_JIT", None)
    return env


def _python(code: str, cache_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=_env(cache_dir), capture_output=True, text=True,
                          timeout=600, cwd=str(ROOT))


# ----------------------------------------------------------------------------- unit: intact / heal


def _fake_cache(monkeypatch, tmp_path) -> list[Path]:
    """Index and data files, valid pickles in numba's layout, in every cache folder."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    files = []
    for i, d in enumerate(C.cache_dirs()):
        d.mkdir(parents=True, exist_ok=True)
        nbi = d / f"mod.f{i}-1.py311.nbi"
        nbi.write_bytes(pickle.dumps("0.68.1", protocol=-1) + pickle.dumps(("stamp", {"key": "x.nbc"}), protocol=-1))
        nbc = d / f"mod.f{i}-1.py311.1.nbc"
        nbc.write_bytes(pickle.dumps((b"\0" * 5000, {"a": [1, 2.5, None]}, Path("x")), protocol=-1))
        files += [nbi, nbc]
    return files


def test_intact_recognises_numba_layouts_and_damage(tmp_path, monkeypatch):
    nbi, nbc = _fake_cache(monkeypatch, tmp_path)[:2]
    assert P.intact(nbi) and P.intact(nbc)
    data = nbc.read_bytes()
    for name, bad in (("truncated", data[: len(data) // 2]), ("garbage", b"garbage" * 40), ("empty", b""),
                      ("tail cut", data[:-1]), ("trailing bytes", data + b".")):
        p = tmp_path / f"{name}.nbc"
        p.write_bytes(bad)
        assert not P.intact(p), name
    half = tmp_path / "half.nbi"
    half.write_bytes(pickle.dumps("0.68.1", protocol=-1))  # the version pickle only
    assert not P.intact(half)
    assert P.intact(tmp_path / "vanished.nbc")  # numba copes with a missing file


def test_heal_checks_each_file_once_and_removes_damaged_entries(tmp_path, monkeypatch):
    files = _fake_cache(monkeypatch, tmp_path)
    other = tmp_path / "elsewhere_0123" / "other.f-1.py311.nbi"  # another package's cache
    other.parent.mkdir()
    other.write_bytes(b"garbage")
    parsed = []

    def intact(p):
        parsed.append(p)
        return P.intact(p)

    assert C.heal(intact) is None and len(parsed) == len(files)
    parsed.clear()
    assert C.heal(intact) is None and parsed == []  # recorded as intact: not parsed again
    files[3].write_bytes(b"garbage")  # overwritten: new size and mtime
    assert C.heal(intact) == files[3].name
    assert parsed == [files[3]]
    # the damaged data file's entry (its index too) is gone; every other entry is kept
    assert [p.exists() for p in files] == [True, True, False, False] + [True] * (len(files) - 4)
    assert other.exists()
    parsed.clear()
    assert C.heal(intact) is None and parsed == []  # the rest was recorded intact


def test_entry_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert not C.entry_cached()
    d = C._cache_dir(C._SRC / "engine")
    d.mkdir(parents=True)
    (d / "loop.run_events-26.py311.nbi").write_bytes(b"")
    assert C.entry_cached()


# ----------------------------------------------------------------------------- unit: the notice


def test_help_and_config_validation_do_not_load_numba(tmp_path):
    """Even on a cold cache: --help and a config error import no numba and print no notice
    (both in one fresh process: neither may import it)."""
    code = ("import sys\n"
            "from blis_fast.cli import main\n"
            "for args in (['--help'], ['run', '--num-instances', '0']):\n"
            "    try:\n"
            "        main(args)\n"
            "    except SystemExit:\n"
            "        pass\n"
            "    assert 'numba' not in sys.modules, ('numba imported', args)\n")
    out = _python(code, tmp_path / "cold")
    assert out.returncode == 0, out.stderr
    assert "compiling kernels" not in out.stderr
    assert "Usage" in out.stdout and "error: " in out.stderr  # both commands ran


def test_cold_import_arms_the_notice_without_importing_numba(tmp_path):
    code = (
        "import sys\n"
        "import blis_fast\n"
        "assert 'numba' not in sys.modules, 'numba imported'\n"
        "from blis_fast import paths as P\n"
        "assert any(isinstance(f, P._OnImport) and f.fullname == 'numba' for f in sys.meta_path)\n"
        "import numba\n"
        "from numba.core import event\n"
        "class D:\n"
        "    def __init__(self, module):\n"
        "        self.py_func = type('F', (), {'__module__': module})()\n"
        "for module in ('somebody.else', 'blis_fast_kernels.engine.loop', 'blis_fast_kernels.engine.step'):\n"
        "    with event.trigger_event('numba:compile', data={'dispatcher': D(module)}):\n"
        "        print('compiled', module, flush=True)\n"
    )
    out = _python(code, tmp_path / "cold")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["compiled somebody.else", "compiled blis_fast_kernels.engine.loop",
                                       "compiled blis_fast_kernels.engine.step"]
    # once, at our first compile, with why the kernels compiled at install are not in use
    notice = P.NOTICE.format(seconds=P.COMPILE_SECONDS) + " [kernels: JIT (BLIS_FAST_KERNELS=jit or NUMBA_DISABLE_JIT)]"
    assert out.stderr.splitlines() == [notice]


def test_warm_import_arms_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    C.drop_stale()  # the stamp of the current sources
    d = C._cache_dir(C._SRC / "engine")
    d.mkdir(parents=True, exist_ok=True)
    (d / "loop.run_events-26.py311.nbi").write_bytes(pickle.dumps("v", protocol=-1) + pickle.dumps(0, protocol=-1))
    code = ("import sys, blis_fast\n"
            "from blis_fast import paths as P\n"
            "assert not any(isinstance(f, P._OnImport) and f.fullname == 'numba' for f in sys.meta_path)\n"
            "assert 'numba' not in sys.modules\n")
    out = _python(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


# ----------------------------------------------------------------------------- end to end


def _run(cache_dir: Path, n: int = 5) -> subprocess.CompletedProcess:
    # arrivals far apart: an adequate run, whose stderr holds only the compile notices
    return subprocess.run([sys.executable, "-m", "blis_fast.cli", "run", "--num-requests", str(n), "--rate", "0.02"],
                          env=_env(cache_dir), capture_output=True, text=True, timeout=900, cwd=str(ROOT))


def _warm_cache(tmp_path: Path) -> Path:
    """A cache folder with this package's kernels compiled: a copy of the session's cache
    when it has them, else compiled here (one notice line)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for d in C.cache_dirs():
        if d.is_dir() and os.environ.get("NUMBA_CACHE_DIR"):
            shutil.copytree(d, cache / d.name)
    first = _run(cache)
    assert first.returncode == 0, first.stderr
    assert first.stderr.count("blis-fast: compiling kernels") <= 1
    return cache


@pytest.mark.slow  # compiles the kernels (up to twice) in subprocesses
def test_damaged_cache_heals_with_one_notice(tmp_path, monkeypatch):
    cache = _warm_cache(tmp_path)
    warm = _run(cache)
    assert warm.returncode == 0 and warm.stderr == "", warm.stderr  # warm: not a word
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache))  # C.cache_dirs() -> the same folders
    dirs = [d for d in C.cache_dirs() if d.is_dir()]
    # two small functions of a default run (the entry kernel is left alone: its recompile
    # would cost ~40 s, and a damaged entry only recompiles that function)
    index = next(p for d in dirs for p in d.glob("keys.chain_sequence_keys-*.nbi"))
    data = next(p for d in dirs for p in d.glob("keys.hash_chain_states-*.nbc"))
    index.write_bytes(b"\x80garbage, not numba's index.")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # truncated
    intact_before = {p: p.read_bytes() for d in dirs for p in d.glob("loop.run_events-*")}
    healed = _run(cache)
    assert healed.returncode == 0, healed.stderr
    lines = healed.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("blis-fast:") and "compiling kernels" in lines[0], lines
    assert healed.stdout == warm.stdout  # the same results
    assert all(p.read_bytes() == b for p, b in intact_before.items())  # not recompiled
    again = _run(cache)
    assert again.returncode == 0 and again.stderr == "" and again.stdout == warm.stdout


# ----------------------------------------------------------------------------- lean numba set-up


def test_numba_set_up_skips_scipy_linalg(tmp_path):
    """skip_numba_blas_probe (the CLI's start-up): numba's registry set-up does not load
    scipy.linalg; numba still works, and scipy.linalg still imports afterwards."""
    pytest.importorskip("scipy")
    code = (
        "import sys\n"
        "from blis_fast.paths import skip_numba_blas_probe\n"
        "skip_numba_blas_probe()\n"
        "import numba\n"
        "from numba.core.registry import cpu_target\n"
        "cpu_target.target_context.refresh()\n"
        "assert 'numba.np.arraymath' in sys.modules\n"
        "assert 'scipy.linalg' not in sys.modules, 'scipy.linalg loaded'\n"
        "f = numba.njit(lambda a: a.sum() + 1)\n"
        "import numpy as np\n"
        "assert f(np.arange(4)) == 7\n"
        "import scipy.linalg\n"
        "print(len(sys.meta_path))\n"
    )
    out = _python(code, tmp_path)
    assert out.returncode == 0, out.stderr
    blocker = _python("import sys\nprint(len(sys.meta_path))\n", tmp_path)
    assert out.stdout == blocker.stdout  # every hook removed itself


def test_cli_installs_the_lean_set_up():
    code = ("import sys\n"
            "import blis_fast.cli\n"
            "from blis_fast.paths import _OnImport\n"
            "assert any(isinstance(f, _OnImport) and f.fullname == 'numba.np.arraymath' for f in sys.meta_path)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(ROOT),
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
