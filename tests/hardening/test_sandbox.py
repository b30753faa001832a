"""The sandbox of ``.py`` policy candidates (blis_fast/batch/program.py and
sandbox_supervisor.py), escapes run for real: signals to the caller, its group, a
bystander process and every process (-1); forks and new sessions left behind; writes to
the batch's inputs and outside the program's folder; reads of a secret carried into the
row's message; junk, huge and deep data on the result channel; wrong return types;
busy loops and memory bombs.  Each escape is also run with only one layer on (the others
turned off with ``layers_off``) to show what that layer holds alone, as docs/limits.md
states.  The caller is this pytest process: a broken layer kills or stops it.

The acceptance campaign (``-m slow``) runs 1,000 random hostile programs through
``evaluate_many`` (``HARDENING_HOSTILE_PROGRAMS=N`` runs N); its fast twin runs 30.
``kill(-1)`` and signals to random PIDs run only where the PID namespace or the seccomp
filter is verified active: without them they would reach every process of this user.
An escape whose guarantee this machine's layers do not give is skipped, with the reason.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_fast.batch.candidates import load_candidate
from blis_fast.batch.evaluate import evaluate_many
from blis_fast.batch.program import (LAYERS, MAX_MESSAGE_CHARS, ProgramError, allow_programs, run_policy_program,
                                     sandbox_status, stop_all_programs)
from blis_fast.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CLEAN = {"ok", "program_error", "invalid_policy"}
SCENARIO = [{"name": "tiny", "config": {"num_instances": 2, "workload": "chatbot", "rate": 40, "num_requests": 30},
             "seed": 1}]
VALID = "{'routing': {'type': 'least-loaded'}}"
SECRET = "TOPSECRET-7f3a"


@pytest.fixture(scope="module")
def layers():
    status = sandbox_status()
    assert set(status) >= {"namespaces", "tmpfs", "rlimits", "user", "landlock", "seccomp"}, status
    assert status["rlimits"]["active"]
    return status


def active(layers, *names) -> bool:
    return all(layers[n]["active"] for n in names)


def signal_safe(layers) -> bool:
    """A signal to any PID cannot leave the sandbox (PID namespace or seccomp filter)."""
    return layers["namespaces"]["active"] or layers["seccomp"]["active"]


def guarded(layers, guarantee: str) -> None:
    """Skip unless this machine's layers give ``guarantee`` (docs/limits.md): without it
    the escape would really happen -- to this process, for signals."""
    nobody = "nobody" in layers["user"]["detail"] and layers["user"]["active"]
    scoped = layers["landlock"]["active"] and "signals scoped" in layers["landlock"]["detail"]
    holds = {"signals": signal_safe(layers) or scoped or nobody,
             "writes": layers["landlock"]["active"],
             "reads": layers["landlock"]["active"]}[guarantee]
    if not holds:
        pytest.skip(f"no layer here keeps a program from {guarantee} outside its sandbox")


# one layer on at a time (rlimits are always on); "none": only the supervisor's
# subreaper and process-group kill
ONLY = {name: tuple(x for x in LAYERS if x != name) for name in ("namespaces", "seccomp", "landlock", "user")}
ONLY["none"] = LAYERS
ONLY["all"] = ()


def need(layers, config: str) -> None:
    """Skip unless ``config`` ("all", "none" or one layer alone) can run here."""
    if config in ("all", "none"):
        return
    if not layers[config]["active"]:
        pytest.skip(f"layer {config} not active here: {layers[config]['detail']}")
    if config == "user" and "nobody" not in layers["user"]["detail"]:
        pytest.skip("not root: the runner keeps the caller's user (no protection of its own)")
    if config == "landlock" and "signals scoped" not in layers["landlock"]["detail"]:
        pytest.skip("Landlock below ABI 6 does not scope signals")


@pytest.fixture
def world(tmp_path, monkeypatch):
    """The caller's world: a marker in every sandbox's path (to find its processes), input
    files, a secret, a world-writable folder outside, a bystander process."""
    marker = f"sbxmark{uuid.uuid4().hex[:12]}"
    temp = tmp_path / marker
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "scenarios.yaml").write_text("scenarios: []\n")
    (inputs / "other.py").write_text(f"def get_policy():\n    return {VALID}\n")
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    outside = tmp_path / "outside"
    outside.mkdir()
    outside.chmod(0o777)
    bystander = subprocess.Popen(["sleep", "120"])
    w = dict(marker=marker, inputs=inputs, secret=secret, outside=outside, bystander=bystander.pid,
             caller=os.getpid(), caller_group=os.getpgrp(), escape=f"/tmp/{marker}-escape", tmp=tmp_path)
    w["hashes"] = _hashes(inputs)
    yield w
    bystander.kill()
    bystander.wait()
    if os.path.exists(w["escape"]):
        os.unlink(w["escape"])


def _hashes(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def program(world, body: str, name: str = "prog.py", header: str = "") -> Path:
    """A program file whose get_policy() runs ``body``; names of ``world`` are globals."""
    values = {k: (str(v) if isinstance(v, Path) else v) for k, v in world.items() if k != "hashes"}
    src = "import os, signal, socket, sys, threading, time\n"
    src += "".join(f"{k.upper()} = {v!r}\n" for k, v in values.items())
    src += textwrap.dedent(header) + "\ndef get_policy():\n" + textwrap.indent(textwrap.dedent(body), "    ")
    p = world["tmp"] / "progs" / name
    p.parent.mkdir(exist_ok=True)
    p.write_text(src)
    return p


def processes_with(marker: str) -> list[int]:
    """PIDs whose command line holds ``marker`` (a sandbox's supervisor, runner, or a
    process forked from them)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def assert_world_intact(world) -> None:
    """The caller's world after programs ran: bystander running (not stopped), inputs
    unchanged, nothing created outside, no process of any program left."""
    assert os.waitpid(world["bystander"], os.WNOHANG) == (0, 0), "the bystander process was killed"
    with open(f"/proc/{world['bystander']}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    assert state not in "Tt", "the bystander process was stopped"
    assert _hashes(world["inputs"]) == world["hashes"], "an input file changed"
    assert list(world["outside"].iterdir()) == [], "a file was created outside the program's folder"
    assert not os.path.exists(world["escape"]), "a file was created in /tmp"
    deadline = time.monotonic() + 2
    while processes_with(world["marker"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(world["marker"]) == [], "a process of a program is left"


def assert_clean(status: str, message: str) -> None:
    assert status in CLEAN, (status, message)
    assert "\n" not in message and len(message) <= 500 and message.isprintable(), message
    assert SECRET not in message


def outcome(path: Path, timeout_s: float = 5, layers_off=()) -> tuple[str, str]:
    """(status, message) of the candidate row program ``path`` gets ("ok", "" when usable)."""
    if layers_off:
        try:
            data = run_policy_program(path, timeout_s, layers_off=layers_off)
        except ProgramError as exc:
            return "program_error", str(exc)
        from blis_fast.batch.candidates import program_settings

        try:
            program_settings(data, "get_policy()")
        except ConfigError as exc:
            return "invalid_policy", str(exc)
        return "ok", ""
    cand = load_candidate(path, "p", program_timeout_s=timeout_s)
    return cand.error if cand.error is not None else ("ok", "")


# ----------------------------------------------------------------------------- (a) signals


@pytest.mark.parametrize("config", ["all", "namespaces", "seccomp", "landlock", "user"])
def test_signals_reach_no_process_outside(world, layers, config):
    need(layers, config)
    guarded(layers, "signals")
    targets = [("bystander", "BYSTANDER", "signal.SIGSTOP"), ("bystander", "BYSTANDER", "signal.SIGKILL"),
               ("caller", "CALLER", "signal.SIGKILL"), ("group", "-CALLER_GROUP", "signal.SIGKILL"),
               ("parent", "os.getppid() or os.getpid()", "signal.SIGSTOP"),
               ("parent", "os.getppid() or os.getpid()", "signal.SIGKILL")]
    if config in ("all", "namespaces", "seccomp") and signal_safe(layers):
        targets.append(("everyone", "-1", "signal.SIGKILL"))
    lines = ["out = []"]
    for name, pid, sig in targets:
        lines += ["try:", f"    os.kill({pid}, {sig}); out.append('{name} SENT')",
                  "except OSError as e:", f"    out.append('{name} ' + str(e.errno))"]
    lines.append("raise RuntimeError(' '.join(out))")
    status, message = outcome(program(world, "\n".join(lines)), layers_off=ONLY[config])
    assert status == "program_error" and "RuntimeError" in message, message
    sent = set(re.findall(r"(\w+) SENT", message))
    # in a PID namespace the runner's parent is invisible (getppid() is 0): "parent" is itself
    assert sent <= ({"parent"} if config in ("all", "namespaces") else set()), message
    assert_world_intact(world)


def test_signals_to_the_runner_itself_are_harmless(world, layers):
    guarded(layers, "signals")
    body = """
        os.kill(os.getpid(), signal.SIGSTOP)
        os.kill(0, signal.SIGKILL)
        return """ + VALID
    status, message = outcome(program(world, body), timeout_s=2)
    assert_clean(status, message)
    assert_world_intact(world)


# ----------------------------------------------------------------------------- (b) processes left behind


@pytest.mark.parametrize("config", ["all", "namespaces", "seccomp", "none"])
def test_no_process_outlives_the_program(world, layers, config):
    need(layers, config)
    body = """
        for _ in range(3):
            try:
                if os.fork() == 0:
                    os.setsid()
                    if os.fork() == 0:
                        os.setsid()
                        time.sleep(60)
                    os._exit(0)
            except OSError:
                pass
        return """ + VALID
    status, message = outcome(program(world, body), layers_off=ONLY[config])
    assert status == "ok", message
    assert_world_intact(world)


def test_exec_and_threads(world, layers):
    body = """
        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()  # threads are allowed
        os.execv("/bin/sleep", ["sleep", "60"])
    """
    status, message = outcome(program(world, body))
    assert status == "program_error", message
    if active(layers, "seccomp"):
        assert "Operation not permitted" in message or "Permission denied" in message, message
    assert_world_intact(world)


# ----------------------------------------------------------------------------- (c) writes


@pytest.mark.parametrize("config", ["all", "landlock", "user"])
def test_no_write_outside_its_folder(world, layers, config):
    need(layers, config)
    if config == "all":
        guarded(layers, "writes")
    body = """
        out = []
        for attempt in (lambda: open(INPUTS + "/scenarios.yaml", "w").write("pwned"),
                        lambda: open(INPUTS + "/other.py", "a").write("raise SystemExit"),
                        lambda: os.truncate(INPUTS + "/other.py", 0),
                        lambda: os.rename(INPUTS + "/other.py", INPUTS + "/moved.py"),
                        lambda: os.unlink(INPUTS + "/scenarios.yaml"),
                        lambda: os.symlink(INPUTS + "/scenarios.yaml", "link") or open("link", "w").write("x"),
                        lambda: os.link(INPUTS + "/scenarios.yaml", "hard") or open("hard", "w").write("x"),
                        lambda: open(OUTSIDE + "/new.txt", "w").write("x"),
                        lambda: open(ESCAPE, "w").write("x")):
            try:
                attempt()
                out.append("DONE")
            except OSError as e:
                out.append(str(e.errno))
        open("mine.txt", "w").write("its own folder is writable")
        raise RuntimeError(" ".join(out))
    """
    status, message = outcome(program(world, body), layers_off=ONLY[config])
    assert status == "program_error" and "RuntimeError" in message, message
    if config == "user":  # another uid cannot touch the caller's files; world-writable folders stay open
        Path(world["escape"]).unlink(missing_ok=True)
        for p in world["outside"].iterdir():
            p.unlink()
    assert_world_intact(world)


# ----------------------------------------------------------------------------- (d) reads


@pytest.mark.parametrize("config", ["all", "landlock"])
@pytest.mark.parametrize("how", ["raise", "return", "caller_proc", "listdir"])
def test_secrets_never_reach_the_row(world, layers, config, how):
    need(layers, config)
    guarded(layers, "reads")
    body = {
        "raise": "raise RuntimeError(open(SECRET).read())",
        "return": "return {'routing': open(SECRET).read()}",
        "caller_proc": "raise RuntimeError(open(f'/proc/{CALLER}/environ').read()[:200] + open(SECRET).read())",
        "listdir": "raise RuntimeError(str(os.listdir(os.path.dirname(SECRET))) + open(SECRET).read())",
    }[how]
    status, message = outcome(program(world, body), layers_off=ONLY[config])
    assert_clean(status, message)
    assert status == "program_error" and ("Permission denied" in message or "No such file" in message), message
    assert "secret.txt" not in message.replace(str(world["secret"]), "")  # (the path it tried may be named)
    assert_world_intact(world)


def test_error_lines_are_one_short_escaped_line(world):
    status, message = outcome(program(world, "raise RuntimeError('bell \\x07 and\\nnew line ' + 'x' * 100000)"))
    assert_clean(status, message)
    assert "\\x07" in message and len(message) <= MAX_MESSAGE_CHARS + 100


# ----------------------------------------------------------------------------- (e, f) the result channel


JUNK = {  # expressions the program evaluates (a 2 MiB literal would exceed the program size limit)
    "not json": "b'\\xff\\xfe garbage'",
    "huge": "b'[' + b'1,' * (1 << 20) + b'1]'",
    "deep": "b'[' * 100000",
    "deep dict": "b'{\"a\":' * 5000 + b'1' + b'}' * 5000",
    "wrong shape": "b'{\"policy\": {}, \"also\": 1}'",
    "error not text": "b'{\"error\": [1, 2]}'",
    "long integer": "b'{\"policy\": ' + b'9' * 100000 + b'}'",
}


@pytest.mark.parametrize("junk", sorted(JUNK))
def test_junk_on_the_result_channel_is_a_clean_error(world, junk):
    header = f"JUNK = {JUNK[junk]}\n"
    body = """
        for fd in os.listdir("/proc/self/fd"):
            try:
                os.write(int(fd), JUNK)
            except OSError:
                pass
        os._exit(0)
    """
    status, message = outcome(program(world, body, header=header))
    assert status == "program_error", (status, message)
    assert_clean(status, message)
    assert_world_intact(world)


def test_a_forged_valid_answer_is_just_its_answer(world):
    body = """
        for fd in os.listdir("/proc/self/fd"):
            try:
                os.write(int(fd), b'{"policy": {"routing": {"type": "least-loaded"}}}')
            except OSError:
                pass
        os._exit(0)
    """
    assert outcome(program(world, body)) == ("ok", "")


@pytest.mark.parametrize("ret,needle", [
    ("x = []\nfor _ in range(10**5):\n    x = [x]\nreturn x", "RecursionError"),
    ("x = {}\nfor _ in range(70):\n    x = {'a': x}\nreturn x", "nested deeper than 64"),
    ("return {'routing': 'x' * (2 * 2**20)}", "more than 1024 KiB"),
])
def test_deep_and_giant_returns_are_clean_errors(world, ret, needle):
    status, message = outcome(program(world, ret))
    assert status == "program_error" and needle in message, message
    assert_clean(status, message)


# ----------------------------------------------------------------------------- (g) return types


@pytest.mark.parametrize("body,shown", [
    ("return None", "returned None"),
    ("return 3", "returned 3 (int)"),
    ("return []", "returned [] (list)"),
    ("return ''", "text that is not a bundle mapping"),
    ("return '- routing'", "text that is not a bundle mapping"),
])
def test_get_policy_must_return_a_bundle(world, body, shown):
    status, message = outcome(program(world, body))
    assert status == "invalid_policy" and shown in message and "must return the policy bundle" in message, message


def test_policy_none_is_refused_and_text_accepted(world):
    p = world["tmp"] / "policy_none.py"
    p.write_text("POLICY = None\n")
    status, message = outcome(p)
    assert status == "invalid_policy" and "returned None" in message
    text = program(world, "return 'routing: {type: least-loaded}'")
    assert outcome(text) == ("ok", "")


# ----------------------------------------------------------------------------- (h, i) time and memory


def test_busy_loop_is_a_timeout_row(world):
    status, message = outcome(program(world, "while True:\n    pass"), timeout_s=0.5)
    assert status == "program_error" and "within 0.5 s" in message, message
    assert_world_intact(world)


def test_memory_bomb_is_a_memory_row(world):
    status, message = outcome(program(world, "a = []\nwhile True:\n    a.append(b'x' * 10**7)"))
    assert status == "program_error" and "memory" in message, message
    assert_world_intact(world)


def test_disk_filling_stays_in_its_folder(world, layers):
    need(layers, "tmpfs")
    body = """
        for i in range(1000):
            with open(f"f{i}", "wb") as f:
                f.write(b"x" * 2**20)
        return """ + VALID
    status, message = outcome(program(world, body))
    assert status == "program_error" and ("No space left" in message or "File too large" in message), message
    assert_world_intact(world)


# ----------------------------------------------------------------------------- arguments


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "1", True, 0, -1, 3601, [1]])
def test_program_timeout_is_checked(bad):
    with pytest.raises(ConfigError, match="program_timeout_s"):
        evaluate_many([VALID], SCENARIO, program_timeout_s=bad)
    with pytest.raises(ConfigError, match="program_timeout_s"):
        run_policy_program(__file__, bad)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-10**30, max_value=10**30),
                 st.text(max_size=20), st.booleans(), st.lists(st.integers(), max_size=2)))
def test_program_timeout_accepts_exactly_finite_seconds_in_range(value):
    ok = not isinstance(value, (bool, str, list)) and math.isfinite(value) and 0 < value <= 3600 \
        and not (value != 0 and abs(value) < 2.2250738585072014e-308)
    try:
        cand = load_candidate(VALID, "c", program_timeout_s=value)  # (bundle text: the timeout is checked first)
    except ConfigError as exc:
        assert not ok and exc.field == "program_timeout_s", value
        assert "\n" not in str(exc) and len(str(exc)) < 300
    else:
        assert ok and cand.error is None, value


@pytest.mark.parametrize("bad", ["nan", "inf", "-1", "0", "3601", "x", "1e400"])
def test_program_timeout_flag_is_checked(tmp_path, bad):
    from hardening_helpers import assert_clean_error, cli_in_process

    scen = tmp_path / "scen.yaml"
    scen.write_text("scenarios:\n  - {name: a, config: {num_instances: 2}}\n")
    prog = tmp_path / "p.py"
    prog.write_text(f"def get_policy():\n    return {VALID}\n")
    assert_clean_error(*cli_in_process("evaluate", "--policies", prog, "--scenarios", scen, "--out",
                                       tmp_path / "o.parquet", "--program-timeout-s", bad),
                       needles=["--program-timeout-s"])
    assert not (tmp_path / "o.parquet").exists()


def test_evaluate_verbose_shows_the_sandbox_layers(tmp_path, layers):
    from hardening_helpers import cli_in_process

    scen = tmp_path / "scen.yaml"
    scen.write_text("scenarios:\n  - {name: a, config: {num_instances: 2, workload: chatbot, rate: 40, "
                    "num_requests: 30}}\n")
    prog = tmp_path / "p.py"
    prog.write_text(f"def get_policy():\n    return {VALID}\n")
    code, out, err = cli_in_process("evaluate", "--policies", prog, "--scenarios", scen, "--out",
                                    tmp_path / "o.parquet", "--program-timeout-s", "5", "-v")
    assert code == 0, err
    assert "policy program sandbox" in err
    for name, layer in layers.items():
        assert f"{'on ' if layer['active'] else 'off'}  {name}: " in err


def test_a_sandbox_that_cannot_be_set_up_is_a_clean_error(tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text(f"def get_policy():\n    return {VALID}\n")
    with pytest.raises(ProgramError, match="could not be set up: setup failed: OverflowError"):
        run_policy_program(prog, 2, memory_limit=2**70)  # setrlimit refuses it


def test_program_file_limits(tmp_path):
    with pytest.raises(ProgramError, match="not found"):
        run_policy_program(tmp_path / "missing.py")
    big = tmp_path / "big.py"
    big.write_bytes(b"#" * (2**20 + 1))
    with pytest.raises(ProgramError, match="larger than"):
        run_policy_program(big)
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    with pytest.raises(ProgramError, match="not a regular file"):
        run_policy_program(fifo)


# ----------------------------------------------------------------------------- interrupts


def test_an_interrupted_batch_kills_its_programs_at_once(world):
    """Ctrl-C in the caller while programs load on threads: KeyboardInterrupt within a
    second (not at the programs' time limit), nothing left, and programs run again."""
    busy = [program(world, "while True:\n    pass", f"busy{i}.py") for i in range(3)]
    timer = threading.Timer(1.0, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        evaluate_many(busy, SCENARIO, workers=3, program_timeout_s=60)
    assert time.monotonic() - t0 < 10  # (a safety net: the programs' limit is 60 s)
    assert_world_intact(world)
    assert outcome(world["inputs"] / "other.py") == ("ok", "")


def test_stop_all_programs_refuses_new_ones_until_allowed(world):
    stop_all_programs()
    try:
        status, message = outcome(world["inputs"] / "other.py")
        assert status == "program_error" and "stopping" in message
    finally:
        allow_programs()
    assert outcome(world["inputs"] / "other.py") == ("ok", "")


def _cli(args: list, world, **kw) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(Path(tempfile.tempdir)), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "blis_fast.cli", *map(str, args)], cwd=str(ROOT), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_evaluate_ends_with_its_programs_on_sigterm_and_sigint(world, sig, code):
    """``blis-fast evaluate`` on programs that loop and fork: the signal ends the command
    and every program within a second or two."""
    folder = world["tmp"] / "pol"
    folder.mkdir()
    for i in range(3):
        (folder / f"busy{i}.py").write_text(textwrap.dedent("""
            import os, time
            def get_policy():
                try:
                    if os.fork() == 0:
                        os.setsid()
                        time.sleep(120)
                except OSError:
                    pass
                while True:
                    pass
        """))
    scen = world["tmp"] / "scen.yaml"
    scen.write_text("scenarios:\n  - {name: a, config: {num_instances: 2, workload: chatbot, rate: 40, "
                    "num_requests: 30}}\n")
    from builders import default_sigint

    p = _cli(["evaluate", "--policies", folder, "--scenarios", scen, "--out", world["tmp"] / "o.parquet",
              "--workers", "2", "--program-timeout-s", "120"], world, preexec_fn=default_sigint)
    deadline = time.monotonic() + 60
    while len(processes_with(world["marker"])) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(world["marker"]), "no program started"
    t0 = time.monotonic()
    p.send_signal(sig)
    _, err = p.communicate(timeout=30)
    assert time.monotonic() - t0 < 2.5, "the command took too long to end"
    assert p.returncode == code, err
    assert err.strip().splitlines()[-1].startswith("blis-fast: "), err
    assert_world_intact(world)


@pytest.mark.slow
def test_a_killed_caller_leaves_no_program_behind(world):
    """The caller dies by SIGKILL (no clean-up of its own): its supervisors die with it
    (PR_SET_PDEATHSIG), their runners with them."""
    prog = program(world, "while True:\n    pass")
    code = ("import sys, tempfile; tempfile.tempdir = sys.argv[2]\n"
            "from blis_fast.batch.program import run_policy_program\nrun_policy_program(sys.argv[1], 120)\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(prog), tempfile.tempdir], cwd=str(ROOT),
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    while len(processes_with(world["marker"])) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    p.kill()
    p.wait()
    assert_world_intact(world)


# ----------------------------------------------------------------------------- the campaign


def hostile_program(rng: random.Random, world, safe_signals: bool) -> str:
    """The body of a random hostile get_policy(): 1-4 behaviours, each maybe inside
    try/except, then a return of a valid or a wrong policy."""
    pids = ["BYSTANDER", "CALLER", "-CALLER_GROUP", "os.getppid()", "0", "1", "os.getpid()"]
    if safe_signals:
        pids += ["-1"] + [str(rng.randrange(2, 4_000_000)) for _ in range(3)]
    sigs = ["signal.SIGKILL", "signal.SIGSTOP", "signal.SIGTERM", "signal.SIGSEGV"]
    outside = ["OUTSIDE + '/x'", "ESCAPE"]
    junk = sorted(JUNK.values()) + ["b'{'", "b''"]
    moves = {
        "kill": lambda: f"os.kill({rng.choice(pids)}, {rng.choice(sigs)})",
        "killpg": lambda: f"os.killpg(os.getpgid({rng.choice(['CALLER', 'BYSTANDER', '0'])}), signal.SIGKILL)",
        "fork": lambda: "if os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n    os._exit(0)",
        "double fork": lambda: "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                               "        time.sleep(60)\n    os._exit(0)",
        "exec": lambda: "os.execv('/bin/sleep', ['sleep', '60'])",
        "write input": lambda: f"open(INPUTS + {rng.choice(['/scenarios.yaml', '/other.py'])!r}, "
                               f"{rng.choice(['w', 'a'])!r}).write('pwned')",
        "truncate input": lambda: "os.truncate(INPUTS + '/scenarios.yaml', 0)",
        "write outside": lambda: f"open({rng.choice(outside)}, 'w').write('x')",
        "write own": lambda: "open('own.bin', 'wb').write(b'x' * 10**6)",
        "read secret": lambda: "raise RuntimeError(open(SECRET).read())",
        "return secret": lambda: "return {'routing': open(SECRET).read()}",
        "channel junk": lambda: f"[os.write(int(fd), {rng.choice(junk)}) for fd in os.listdir('/proc/self/fd')]",
        "giant": lambda: "return {'routing': 'x' * (2 * 2**20)}",
        "deep": lambda: f"x = []\nfor _ in range({rng.choice([70, 1000, 10**5])}):\n    x = [x]\nreturn x",
        "busy": lambda: "while True:\n    pass",
        "sleep": lambda: "time.sleep(60)",
        "memory": lambda: "a = []\nwhile True:\n    a.append(b'x' * 10**7)",
        "exit": lambda: f"os._exit({rng.choice([0, 1, 3])})",
        "raise": lambda: "raise ValueError('\\x07 bell' + 'y' * 5000)",
        "thread": lambda: "threading.Thread(target=lambda: time.sleep(60), daemon=True).start()",
        "net": lambda: "socket.create_connection(('1.1.1.1', 80), timeout=0.2)",
    }
    returns = [f"return {VALID}", "return None", "return 3", "return []", "return 'routing: least-loaded'",
               "return {'routing': {'type': 'nope'}}"]
    lines = []
    for _ in range(rng.randint(1, 4)):
        move = moves[rng.choice(sorted(moves))]()
        if rng.random() < 0.6:
            lines += ["try:", textwrap.indent(move, "    "), "except BaseException:", "    pass"]
        else:
            lines.append(move)
    lines.append(rng.choice(returns))
    return "\n".join(lines)


def run_campaign(world, layers, n: int, seed: int) -> None:
    for guarantee in ("signals", "writes", "reads"):
        guarded(layers, guarantee)
    rng = random.Random(seed)
    safe = signal_safe(layers)
    progs = [program(world, hostile_program(rng, world, safe), f"h{i:04d}.py") for i in range(n)]
    table = evaluate_many(progs + [world["inputs"] / "other.py"], SCENARIO, workers=4, program_timeout_s=0.5).table
    rows = table.select(["candidate", "status", "message"]).to_pylist()
    assert len(rows) == n + 1
    for r in rows:
        assert_clean(r["status"], r["message"])
    assert rows[-1]["status"] == "ok"  # the honest candidate among them
    statuses = {r["status"] for r in rows}
    assert {"ok", "program_error", "invalid_policy"} <= statuses, statuses
    assert_world_intact(world)


def test_campaign_fast_twin(world, layers):
    if not signal_safe(layers):
        pytest.skip("neither a PID namespace nor seccomp here: random signals would reach this user's processes")
    run_campaign(world, layers, 30, seed=7)


@pytest.mark.slow
def test_campaign_1000_hostile_programs(world, layers):
    if not signal_safe(layers):
        pytest.skip("neither a PID namespace nor seccomp here: random signals would reach this user's processes")
    run_campaign(world, layers, int(os.environ.get("HARDENING_HOSTILE_PROGRAMS", 1000)), seed=2026)


def test_the_checks_see_an_escape_when_every_layer_is_off(world):
    """The assertions above are not vacuous: with no layer but the rlimits, a program
    stops the bystander and writes outside its folder, and assert_world_intact says so."""
    body = """
        os.kill(BYSTANDER, signal.SIGSTOP)
        open(OUTSIDE + "/new.txt", "w").write("x")
        return """ + VALID
    assert outcome(program(world, body), layers_off=LAYERS) == ("ok", "")
    with pytest.raises(AssertionError, match="stopped"):
        assert_world_intact(world)
    os.kill(world["bystander"], signal.SIGCONT)
    with pytest.raises(AssertionError, match="outside"):
        assert_world_intact(world)
