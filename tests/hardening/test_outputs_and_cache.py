"""Hardening II, the output and cache surfaces: no command's output lands on one of its
inputs (every scenario's run config, spec and trace for ``evaluate``; every grid point's
files for ``sweep``/``compare``), ``openevolve init`` is all or nothing and never writes
through a symlink, a path longer than the file system allows is one line, a Dask scheduler
address is checked before connecting, and the kernel cache survives what it did not write
(``run`` and ``clear-cache`` keep working).  Inputs are compared on disk (hashes) before
and after."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blis_fast import paths as P
from blis_fast.batch.scheduler import parse_scheduler_address
from blis_fast.config.outputs import check_path_length, write_new_files
from blis_fast.errors import ConfigError
from builders import make_trace, write
from hardening_helpers import assert_clean_error, cli_in_process, digest

RUN = {"num_instances": 1, "rate": 20, "num_requests": 15}
SPEC = """\
seed: 3
duration_s: 1
clients:
  - {name: a, rate: 10, prompt_tokens: 100, output_tokens: 20}
"""
POLICY = "routing: least-loaded\n"


@pytest.fixture()
def batch(tmp_path):
    """A scenarios file naming a run-config file, a workload spec and a trace, and a
    folder of two candidates."""
    d = tmp_path
    files = {
        "run": write(d, "run.yaml", RUN),
        "spec": write(d, "spec.yaml", SPEC),
        "trace": make_trace(d / "trace.csv", n=10),
    }
    files["scenarios"] = write(d, "scenarios.yaml", {
        "objectives": "slo_attainment:max",
        "scenarios": [{"name": "from-file", "config": "run.yaml"},
                      {"name": "spec", "config": {"num_instances": 1}, "workload_spec": "spec.yaml"},
                      {"name": "trace", "config": {"num_instances": 1}, "trace": "trace.csv"}]})
    (d / "pol").mkdir()
    files["candidate"] = write(d / "pol", "a.yaml", POLICY)
    files["program"] = write(d / "pol", "b.py", f"def get_policy():\n    return {POLICY!r}\n")
    return files


def _evaluate(batch, out):
    return cli_in_process("evaluate", "--policies", batch["candidate"].parent, "--scenarios", batch["scenarios"],
                          "--out", out, "--workers", "1")


# ============================================================================ A. outputs onto inputs


@pytest.mark.parametrize("target", ["run", "spec", "trace", "scenarios", "candidate", "program"])
@pytest.mark.parametrize("how", ["same path", "symlink", "hard link"])
def test_evaluate_out_never_lands_on_an_input(batch, tmp_path, target, how):
    before = digest(*batch.values())
    out = batch[target]
    if how == "symlink":
        out = tmp_path / "link.parquet"
        out.symlink_to(batch[target])
    elif how == "hard link":
        out = tmp_path / "hard.parquet"
        os.link(batch[target], out)
    line = assert_clean_error(*_evaluate(batch, out), needles=["--out", "refusing to overwrite an input"])
    if target == "run":
        assert "scenario 'from-file': config" in line
    assert digest(*batch.values()) == before


def test_evaluate_out_beside_its_inputs_is_written(batch, tmp_path):
    before = digest(*batch.values())
    code, out, err = _evaluate(batch, tmp_path / "rows.parquet")
    assert code == 0, err
    assert (tmp_path / "rows.parquet").stat().st_size > 0
    assert digest(*batch.values()) == before
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write's temporary file is gone


def test_sweep_out_never_lands_on_a_swept_trace(tmp_path):
    """The trace of one grid point only (not the base config's) is still an input."""
    base, other = make_trace(tmp_path / "a.csv", n=10), make_trace(tmp_path / "b.csv", n=10, seed=2)
    before = digest(base, other)
    for flag in ("--out", "--plot"):
        target = other if flag == "--out" else tmp_path / "c.png"
        if flag == "--plot":
            make_trace(target, n=10)  # a trace named like a figure
            before[str(target)] = digest(target)[str(target)]
        line = assert_clean_error(*cli_in_process(
            "sweep", "--workload", "traces", "--workload-traces-filepath", base,
            "--set", f"workload_traces_filepath={base},{target}", "--num-instances", "1", flag, target),
            needles=[flag, "grid point"])
        assert "refusing to overwrite an input" in line
    assert digest(*before) == before


def test_compare_out_never_lands_on_a_compared_config_or_swept_spec(tmp_path):
    a, b = write(tmp_path, "a.yaml", RUN), write(tmp_path, "b.yaml", {**RUN, "routing_policy": "round-robin"})
    trace = make_trace(tmp_path / "t.csv", n=10)
    before = digest(a, b, trace)
    assert_clean_error(*cli_in_process("compare", a, b, "--workload", "traces", "--workload-traces-filepath",
                                       tmp_path / "other.csv", "--set", f"workload_traces_filepath={trace}",
                                       "--out", trace), needles=["--out", "grid point"])
    link = tmp_path / "b-link.csv"
    link.symlink_to(trace)
    assert_clean_error(*cli_in_process("sweep", "--workload", "traces", "--workload-traces-filepath", trace,
                                       "--set", "num_instances=1,2", "--out", link), needles=["--out"])
    assert digest(a, b, trace) == before


def test_capacity_and_workload_generate_outputs_never_land_on_inputs(tmp_path):
    cfg = write(tmp_path, "run.yaml", RUN)
    spec = write(tmp_path, "spec.yaml", SPEC)
    before = digest(cfg, spec)
    assert_clean_error(*cli_in_process("capacity", "--config", cfg, "--slo", "ttft_p99_ms<=500", "--out", cfg),
                       needles=["--out", "--config"])
    assert_clean_error(*cli_in_process("workload", "generate", "--spec", spec, "--out", spec), needles=["--out"])
    assert digest(cfg, spec) == before


@pytest.mark.parametrize("name", ["n" * 300, "/".join(["d" * 200] * 25) + "/x.json"])
def test_output_path_too_long_for_the_file_system_is_one_line(tmp_path, name):
    out = tmp_path / name
    assert_clean_error(*cli_in_process("run", "--num-requests", "5", "--results-path", out),
                       needles=["--results-path", "allows"])


def test_an_output_path_with_control_characters_is_shown_escaped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short path: the message shortens long ones (xdist's tmp paths are long)
    line = assert_clean_error(*cli_in_process("run", "--num-requests", "5", "--results-path",
                                              Path("no\x07such") / "r.json"), needles=["--results-path"])
    assert "\x07" not in line and "\\x07" in line


def test_check_path_length_counts_bytes_and_components(tmp_path):
    check_path_length("F", tmp_path / ("é" * 127))  # 254 bytes
    with pytest.raises(ConfigError, match="name 256 bytes long"):
        check_path_length("F", tmp_path / ("é" * 128))  # 256 bytes
    with pytest.raises(ConfigError, match="NUL"):
        check_path_length("F", "a\x00b")


# ============================================================================ B. openevolve init


def test_openevolve_init_never_writes_through_a_symlink(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    dangling = outside / "created-through-the-link.py"
    (project / "evaluator.py").symlink_to(dangling)  # dangling: its target does not exist
    victim = write(outside, "victim.yaml", "keep: me\n")
    (project / "scenarios.yaml").symlink_to(victim)
    before = digest(victim)
    assert_clean_error(*cli_in_process("openevolve", "init", project),
                       needles=["DIR", "evaluator.py", "scenarios.yaml", "nothing was written"])
    assert not dangling.exists() and digest(victim) == before
    assert sorted(p.name for p in project.iterdir()) == ["evaluator.py", "scenarios.yaml"]


def test_openevolve_init_leaves_nothing_after_a_failure(tmp_path, monkeypatch):
    """A name that appears between the check and the write (planted meanwhile) fails the
    exclusive create: every file and folder the call made is removed, the planted file
    is untouched."""
    project = tmp_path / "new" / "project"
    planted = {"name": "config.yaml"}
    real_lexists = os.path.lexists

    def lexists_then_plant(p):
        if Path(p).name == planted["name"] and "done" not in planted:
            return False  # checked as free ...
        return real_lexists(p)

    real_open = os.open

    def open_after_plant(path, flags, *args):
        if Path(path).name == planted["name"] and "done" not in planted:
            Path(path).write_text("planted\n")  # ... and planted just before the create
            planted["done"] = True
        return real_open(path, flags, *args)

    monkeypatch.setattr(os.path, "lexists", lexists_then_plant)
    monkeypatch.setattr(os, "open", open_after_plant)
    with pytest.raises(ConfigError, match="nothing was left behind"):
        write_new_files(project, {"a.txt": "a", "config.yaml": "b", "z.txt": "z"}, "DIR")
    monkeypatch.undo()
    assert sorted(p.name for p in project.iterdir()) == ["config.yaml"]
    assert (project / "config.yaml").read_text() == "planted\n"
    # with nothing planted, a failure removes the folders it made too
    (project / "config.yaml").unlink()
    project.rmdir()
    project.parent.rmdir()
    monkeypatch.setattr(os, "fdopen", lambda *a, **k: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(ConfigError, match="No space left"):
        write_new_files(project, {"a.txt": "a"}, "DIR")
    monkeypatch.undo()
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("name", ["p" * 256, "/".join(["q" * 250] * 20)])
def test_openevolve_init_folder_name_too_long_is_one_line(tmp_path, name):
    assert_clean_error(*cli_in_process("openevolve", "init", tmp_path / name), needles=["DIR", "allows"])
    assert list(tmp_path.iterdir()) == []


def test_openevolve_init_on_a_file_or_with_a_bell_in_its_name(tmp_path):
    f = write(tmp_path, "file", "x")
    assert_clean_error(*cli_in_process("openevolve", "init", f), needles=["DIR", "not a folder"])
    code, out, err = cli_in_process("openevolve", "init", tmp_path / "bell\x07")
    assert code == 0, err
    assert "\x07" not in out and "\\x07" in out
    assert (tmp_path / "bell\x07" / "evaluator.py").is_file()


# ============================================================================ C. Dask addresses (no Dask needed)


@pytest.mark.parametrize("address", [
    "tcp://127.0.0.1:0", "tcp://127.0.0.1:65536", "tcp://127.0.0.1:99999999", "localhost", "tcp://localhost",
    "inproc://10.0.0.1/1/2", "ws://h:1", "http://h:1", "TCP://h:1", "tcp://h:1/path", "tcp://user@h:1",
    "tcp:// h:1", "tcp://h:1 ", "tcp://h:-1", "tcp://h:+1", "tcp://1.2.3.256:1", "tcp://[::g]:1", "tcp://h\x07:1",
    "", "tcp://" + "h" * 400 + ":1", "tcp://" + ".".join(["a" * 63] * 5) + ":1", "tcp://h:1\n"])
def test_malformed_dask_address_is_one_line_before_anything_is_read(tmp_path, address):
    line = assert_clean_error(*cli_in_process("evaluate", "--policies", tmp_path / "missing", "--scenarios",
                                              tmp_path / "missing.yaml", "--out", tmp_path / "o.parquet",
                                              "--dask-scheduler", address), needles=["--dask-scheduler"])
    assert "\x07" not in line


@pytest.mark.parametrize("address, parsed", [
    ("tcp://127.0.0.1:8786", ("tcp", "127.0.0.1", 8786)), ("127.0.0.1:1", ("tcp", "127.0.0.1", 1)),
    ("tls://scheduler.example.com:65535", ("tls", "scheduler.example.com", 65535)),
    ("tcp://[::1]:8786", ("tcp", "::1", 8786)), ("tcp://node-7:8786", ("tcp", "node-7", 8786))])
def test_valid_dask_addresses_parse(address, parsed):
    assert parse_scheduler_address(address) == parsed


ADDRESS_LIKE = r"(tcp|tls|inproc|ws)?(://)?[a-z0-9.\[\]:-]{0,80}(:[0-9+-]{0,8})?"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=400), st.from_regex(ADDRESS_LIKE, fullmatch=True)))
def test_any_text_as_a_dask_address_parses_or_is_a_config_error(address):
    try:
        scheme, host, port = parse_scheduler_address(address)
    except ConfigError as exc:
        assert exc.field == "--dask-scheduler" and len(str(exc)) < 600
        assert not any(ord(c) < 32 for c in str(exc))  # control characters escaped
        return
    assert scheme in ("tcp", "tls") and 1 <= port <= 65535 and host and len(address) <= 300


@pytest.mark.parametrize("value", ["nan", "0", "-1", "1e9", "ten"])
def test_dask_timeout_variable_is_checked(tmp_path, monkeypatch, value):
    monkeypatch.setenv("BLIS_FAST_DASK_TIMEOUT_S", value)
    assert_clean_error(*cli_in_process("evaluate", "--policies", tmp_path, "--scenarios", tmp_path / "s.yaml",
                                       "--out", tmp_path / "o.parquet", "--dask-scheduler", "tcp://127.0.0.1:8786"),
                       needles=["BLIS_FAST_DASK_TIMEOUT_S"])


# ============================================================================ D. the kernel cache


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    """$NUMBA_CACHE_DIR in a temporary folder, its package-root folder holding a numba
    cache entry and strays numba never wrote."""
    from blis_fast_kernels.cache import cache_dirs

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    root = cache_dirs()[0]
    root.mkdir(parents=True)
    import pickle

    ours = root / "mod.f-1.py311.nbi"
    ours.write_bytes(pickle.dumps("0.6", protocol=-1) + pickle.dumps(("stamp", {}), protocol=-1))
    (root / "mod.g-2.py311.nbi").mkdir()  # a folder in numba's naming
    (root / "stray.nbi").mkdir()
    (root / "stray.nbi" / "inside").write_text("x")
    (root / "junk.nbc").write_text("not numba's")
    outside = write(tmp_path, "outside.txt", "keep\n")
    (root / "mod.h-3.py311.nbi").symlink_to(outside)  # a link in numba's naming
    return {"root": root, "ours": ours, "outside": outside}


def test_heal_leaves_what_numba_did_not_write(cache_dir):
    from blis_fast_kernels import cache

    before = digest(cache_dir["outside"], cache_dir["root"] / "junk.nbc")
    assert cache.heal(P._intact_or_foreign) is None
    assert (cache_dir["root"] / "stray.nbi" / "inside").is_file() and (cache_dir["root"] / "mod.g-2.py311.nbi").is_dir()
    assert (cache_dir["root"] / "mod.h-3.py311.nbi").is_symlink() and cache_dir["ours"].is_file()
    assert digest(cache_dir["outside"], cache_dir["root"] / "junk.nbc") == before


def test_clear_cache_removes_only_what_numba_wrote(cache_dir):
    before = digest(cache_dir["outside"])
    code, out, err = cli_in_process("clear-cache")
    assert code == 0, err
    assert out.startswith("removed 1 cache files") and "left 4 entries numba did not write" in err
    assert not cache_dir["ours"].exists()
    assert sorted(p.name for p in cache_dir["root"].iterdir() if p.suffix in (".nbi", ".nbc")) == \
        ["junk.nbc", "mod.g-2.py311.nbi", "mod.h-3.py311.nbi", "stray.nbi"]
    assert digest(cache_dir["outside"]) == before
    code, out, err = cli_in_process("clear-cache")  # and again: still works
    assert code == 0 and out.startswith("removed 0 cache files"), err


def test_the_kernels_own_clearing_and_healing_skip_folders_and_links(tmp_path, monkeypatch):
    """kernels/cache.py of this checkout (imported from its file: the installed copy may be
    older): ``clear`` (run on import when the sources changed) removes every numba file
    past a stray ``*.nbi`` folder instead of stopping at it, and ``heal`` skips it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("checkout_kernel_cache",
                                                  Path(__file__).resolve().parents[2] / "kernels" / "cache.py")
    cache = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cache)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    root = cache.cache_dirs()[0]
    root.mkdir(parents=True)
    names = [f"{c}.f-1.py311.nbi" for c in "abcdefgh"]
    for name in names:
        (root / name).write_bytes(b"garbage")
    (root / "d.stray.nbi").mkdir()
    outside = write(tmp_path, "outside.txt", "keep\n")
    (root / "z.link.nbi").symlink_to(outside)
    assert cache.heal(lambda p: p.name != "c.f-1.py311.nbi") == "c.f-1.py311.nbi"
    assert cache.clear() == len(names) - 1
    assert sorted(p.name for p in root.iterdir() if p.suffix == ".nbi") == ["d.stray.nbi", "z.link.nbi"]
    assert outside.read_text() == "keep\n"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / ("c" * 300)))
    assert cache.clear() == 0 and cache.heal(lambda p: True) is None


@pytest.mark.parametrize("value", ["/tmp/" + "c" * 300, "/".join(["/tmp"] + ["c" * 250] * 20), "/tmp/a\x00b"])
def test_clear_cache_refuses_a_cache_path_the_file_system_cannot_hold(monkeypatch, value):
    assert P.cache_dir_problem(value) is not None
    if "\x00" in value:
        return  # the environment cannot hold a NUL either
    monkeypatch.setenv("NUMBA_CACHE_DIR", value)
    assert_clean_error(*cli_in_process("clear-cache"), needles=["NUMBA_CACHE_DIR", "nothing was removed"])


@pytest.mark.slow  # fresh processes: the guard runs on `import blis_fast`
def test_run_and_clear_cache_in_fresh_processes_with_a_hostile_cache(tmp_path):
    from blis_fast_kernels.cache import cache_dirs

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    root = Path(subprocess.run([sys.executable, "-c", "from blis_fast_kernels.cache import cache_dirs; "
                                "print(cache_dirs()[0])"], env=env, capture_output=True, text=True,
                               check=True).stdout.strip())
    root.mkdir(parents=True, exist_ok=True)
    (root / "stray.nbi").mkdir()
    (root / "engine.nbi").write_bytes(b"garbage")
    del cache_dirs
    for args in (["run", "--num-requests", "5", "--json"], ["clear-cache"], ["clear-cache"]):
        p = subprocess.run([sys.executable, "-m", "blis_fast.cli", *args], env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert (root / "stray.nbi").is_dir()
    long_env = {**env, "NUMBA_CACHE_DIR": str(tmp_path / ("c" * 300))}
    p = subprocess.run([sys.executable, "-m", "blis_fast.cli", "run", "--num-requests", "5", "--json"], env=long_env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stderr.startswith("blis-fast: NUMBA_CACHE_DIR ignored"), p.stderr[-2000:]
    p = subprocess.run([sys.executable, "-m", "blis_fast.cli", "clear-cache"], env=long_env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.splitlines()[-1].startswith("error: NUMBA_CACHE_DIR: "), p.stderr


# ============================================================================ all outputs or none


def test_a_failed_output_leaves_every_output_of_the_command_as_it_was(tmp_path, monkeypatch):
    """``run`` writes its outputs staged (config/outputs.staged_outputs): when the second
    one fails (a full disk), the first -- already written to its temporary file -- is not
    renamed over its old content, and no temporary file stays."""
    from blis_fast.results.result import Result

    results, table = write(tmp_path, "r.json", "old results\n"), write(tmp_path, "t.csv", "old table\n")
    before = digest(results, table)

    def disk_full(self, path, fmt):
        Path(path).write_text("half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Result, "write_requests", disk_full)
    assert_clean_error(*cli_in_process("run", "--num-requests", "5", "--results-path", results,
                                       "--per-request-out", table), needles=["--per-request-out", "No space left"])
    assert digest(results, table) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "t.csv"]
    monkeypatch.undo()
    code, out, err = cli_in_process("run", "--num-requests", "5", "--results-path", results, "--per-request-out", table)
    assert code == 0, err
    after = digest(results, table)
    assert all(after[k][0] != before[k][0] for k in before)  # both rewritten
    assert results.read_text().startswith("{")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "t.csv"]


@pytest.mark.slow  # a fresh process
@pytest.mark.parametrize("cache", ["ok", "c" * 300])
def test_import_stays_light_with_numba_cache_dir_set(tmp_path, cache):
    """The cache guard on ``import blis_fast`` checks $NUMBA_CACHE_DIR without loading the
    config package or numpy (the CLI arms Ctrl-C before they load)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / cache)}
    p = subprocess.run([sys.executable, "-c", "import sys, blis_fast; print('numpy' in sys.modules, "
                        "'blis_fast.config' in sys.modules)"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.split() == ["False", "False"], p.stderr
