"""Every ```bash block of README.md runs as written.

Each block's commands run in order in a fresh temporary directory holding a ``configs``
link to the repository's ``configs/`` (so the README's relative paths resolve and every
output file lands in the temporary directory):

- fast: every ``blis-fast`` command but the studies and the bench, in this process
  (``blis_fast.cli.main``), a block at a time;
- slow: every block, studies and bench included, as one bash script in a fresh process,
  ``blis-fast`` being ``python -m blis_fast`` of this environment with the checkout first on
  the path (the compiled kernels come from the install), so the README is checked against
  the code beside it.

Commands that are not run at all are listed in ``NOT_RUN`` with the reason; a README line
that is neither a ``blis-fast`` command nor listed there fails the test, so a new kind of
command cannot slip past it.
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from builders import ROOT

README = ROOT / "README.md"

# the start of a command never run here -> why
NOT_RUN = {
    "python3 -m venv": "creates a virtual environment: the tests already run in one",
    ". .venv/bin/activate": "activates that environment",
    "pip install": "installs the package: the tests run on the installed package already",
    "python -m pytest": "runs the test suite or the benchmarks' pytest suite, which holds this test",
    "blis-fast serve": "serves until stopped: tests/serve/test_serve_cli.py starts a server process, asks it, stops it",
    "blis-fast observe": "needs a server to observe: tests/observe runs it against one",
    "blis-fast calibrate --observed observed.parquet": "reads the recording the observe line above makes: "
                                                       "tests/serve/test_realtime.py runs the pair",
}
# blis-fast subcommands run by the slow variant only -> why
SLOW_ONLY = {
    "bench": "about a minute: it compiles the JIT kernels once to time them",
    "capacity": "dozens of simulations of 6,000 requests per search",
    "sweep": "60 simulations of 4,000 requests",
    "compare": "each configuration runs the whole grid",
    "agents capacity": "about ten probes of 20 runs each (tests/agents/test_agents_capacity.py runs the same search)",
}
GROUPS = {"agents"}  # command groups: their subcommand is the group and its command ("agents capacity")


def bash_blocks() -> list[str]:
    """The text of every ```bash block of the README, in order."""
    return re.findall(r"^```bash\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)


def commands(block: str) -> list[str]:
    """A block's commands: continuation lines joined, comments dropped, ``a && b`` split."""
    out = []
    for line in re.sub(r"\\\n\s*", " ", block).splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()  # (no README command has '#' inside quotes)
        if line and not line.startswith("#"):
            out += [part.strip() for part in line.split(" && ")]
    return out


def not_run_reason(command: str) -> str | None:
    return next((why for start, why in NOT_RUN.items() if command.startswith(start)), None)


def runnable(block: str) -> list[str]:
    return [c for c in commands(block) if not_run_reason(c) is None]


def subcommand(command: str) -> str:
    words = shlex.split(command)
    return " ".join(words[1:3]) if words[1] in GROUPS else words[1]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    (tmp_path / "configs").symlink_to(ROOT / "configs", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_readme_command_is_run_or_listed_with_a_reason():
    blocks = bash_blocks()
    assert len(blocks) >= 10  # (the README's blocks were found at all)
    for block in blocks:
        for command in commands(block):
            assert command.startswith("blis-fast ") or command == "blis-fast" or not_run_reason(command), (
                f"README command neither run by this test nor listed in NOT_RUN: {command}")
    run = [c for b in blocks for c in runnable(b)]
    assert {subcommand(c) for c in run} >= {"run", "evaluate", "workload", "capacity", "sweep", "compare", "bench"}
    assert set(SLOW_ONLY) <= {subcommand(c) for c in run}  # (a renamed command must not leave a stale entry)


def _in_process(command: str) -> tuple[int, str]:
    from blis_fast.cli import main

    args = []
    for word in shlex.split(command)[1:]:
        args += sorted(glob.glob(word)) or [word]  # as bash expands a pattern (kept when nothing matches)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue()


OUTPUT_FLAGS = r"--(?:results-path|per-request-out|evaluation-out|timeseries-out|trace-out|out) (\S+)"
FAST_BLOCKS = [k for k, b in enumerate(bash_blocks()) if any(subcommand(c) not in SLOW_ONLY for c in runnable(b))]


@pytest.mark.parametrize("k", FAST_BLOCKS)
def test_readme_block_runs_in_process(workdir, capsys, k):
    """The block's blis-fast commands but the studies and the bench: exit code 0; `run`
    prints its summary as JSON (stdout is not a terminal here)."""
    for command in runnable(bash_blocks()[k]):
        if subcommand(command) in SLOW_ONLY:
            continue
        code, out = _in_process(command)
        assert code == 0, f"{command}\n{capsys.readouterr().err}"
        if subcommand(command) == "run":
            assert json.loads(out)["cluster"]["completed_requests"] > 0, command
        for name in re.findall(OUTPUT_FLAGS, command):
            assert (workdir / name).is_file(), f"{name} of {command}"  # outputs land in the temporary directory


@pytest.mark.slow
@pytest.mark.parametrize("k", range(len(bash_blocks())))
def test_readme_block_runs_as_written_in_a_fresh_shell(tmp_path, k):
    """The whole block (studies and bench included) in bash, `set -e`, as written."""
    script = runnable(bash_blocks()[k])
    if not script:
        pytest.skip(f"block {k} holds only commands listed in NOT_RUN")
    (tmp_path / "configs").symlink_to(ROOT / "configs", target_is_directory=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    text = f'set -euo pipefail\nblis-fast() {{ "{sys.executable}" -m blis_fast "$@"; }}\n' + "\n".join(
        f"{c} > /dev/null" for c in script) + "\n"
    p = subprocess.run(["bash", "-c", text], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, f"{script}\n{p.stderr[-2000:]}"


def test_every_image_has_the_command_that_draws_it_beside_it():
    """An image of README.md or docs/ is drawn by a command printed in the same section
    (``--plot NAME.png`` in a bash block above it), so it can be drawn again."""
    images = 0
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"!\[[^\]]*\]\(([^)]+\.png)\)", text):
            images += 1
            name = Path(match.group(1)).name
            section = text[text.rfind("\n## ", 0, match.start()):match.start()]
            blocks = re.findall(r"^```bash\n(.*?)^```", section, re.S | re.M)
            assert any(f"--plot {name}" in b for b in blocks), f"{page.name}: no command drawing {name} above it"
            assert (page.parent / match.group(1)).is_file(), match.group(1)
    assert images >= 4
