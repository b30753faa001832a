"""Peak memory of hostile and large inputs, measured on a fresh process (``wait4`` rusage):
a run either stays within its memory budget (plus the interpreter and numba, ~250 MiB) or
is refused up front -- fast and small -- with one line naming ``simulation.max_memory``.
Subprocess-heavy: every test is marked slow."""

from __future__ import annotations

import pytest

from builders import write
from hardening_helpers import ALIAS_BOMB, assert_clean_error, cli_subprocess

pytestmark = pytest.mark.slow

BASE_MIB = 300  # interpreter + numpy + numba + compiled kernels


@pytest.mark.parametrize("args", [
    ["run", "--num-instances", "65536"],
    ["run", "--num-requests", "100000000"],
    ["run", "--num-requests", "10000000", "--num-instances", "64"],
    ["run", "--prefix-tokens", "1000000000"],
    ["run", "--num-requests", "1000000", "--max-memory", "1GiB"],
], ids=["instances-max", "requests-max", "1e7-on-64", "prefix-1e9", "1e6-in-1GiB"])
def test_refused_up_front_fast_and_small(args):
    code, out, err, rss, seconds = cli_subprocess(*args)
    if code == 0:  # a machine with enough memory for the default budget: it ran within it
        return
    assert_clean_error(code, out, err, ["simulation.max_memory"])
    assert rss < BASE_MIB, rss
    assert seconds < 10, seconds  # interpreter start-up included; the check itself takes < 1 s


@pytest.mark.parametrize("budget_mib", [400, 800])
def test_a_run_stays_within_its_budget(budget_mib):
    code, out, err, rss, _ = cli_subprocess("run", "--num-requests", "200000", "--rate", "1000", "--num-instances", "8",
                                            "--max-memory", f"{budget_mib}MiB")
    if code == 2:
        assert_clean_error(code, out, err, ["simulation.max_memory"])
        assert rss < BASE_MIB, rss
    else:
        assert code == 0, err
        assert rss < budget_mib + BASE_MIB, rss


def test_alias_bomb_config_is_small(tmp_path):
    cfg = write(tmp_path, "bomb.yaml", ALIAS_BOMB + "model: *a8\n")
    code, out, err, rss, seconds = cli_subprocess("run", "--config", cfg)
    assert_clean_error(code, out, err, ["alias"])
    assert rss < BASE_MIB and seconds < 10, (rss, seconds)


@pytest.mark.parametrize("spec", [
    "seed: 1\nduration_s: 10\nclients:\n  - {rate: 1, prompt_tokens: 5, output_tokens: 5, "
    "session: {turns: 5.0e7, think_time_s: 1}}\n",
    "seed: 1\nduration_s: 5\nprefix_groups:\n  docs: {count: 1000, length: 1000000}\n"
    "clients:\n  - {name: c, rate: 2, prompt_tokens: 5, output_tokens: 5, prefix: {group: docs}}\n",
    "seed: 1\nnum_requests: 100000000\nclients:\n  - {rate: 1000, prompt_tokens: 5, output_tokens: 5}\n",
], ids=["turns-5e7", "prefix-1000x1M", "requests-1e8"])
def test_workload_generate_refuses_before_generating(tmp_path, spec):
    s = write(tmp_path, "spec.yaml", spec)
    code, out, err, rss, seconds = cli_subprocess("workload", "generate", "--spec", s, "--out", tmp_path / "t.parquet",
                                                  "--max-memory", "2GiB")
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert rss < 2048 + BASE_MIB, rss
    assert not (tmp_path / "t.parquet").exists()
