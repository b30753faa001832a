"""The KV tiers study's shipped examples (configs/examples/kv-tiers/, docs/kv-tiers.md): the
configurations and the chat spec load as documented and run, the page's findings hold on a
smaller version of the study -- a larger CPU tier never finds less, a fast one lowers the
TTFT, a slow one raises it -- and every command of the page runs, made small."""

from __future__ import annotations

import importlib.util

import pytest

import blis_fast
from blis_fast.workload.spec import load_spec
from builders import ROOT, doc_commands, run_cli
from tests.hardening.hardening_helpers import assert_clean_error

TIERS = ROOT / "configs" / "examples" / "kv-tiers"
CONFIGS = ("cluster", "cluster-cpu", "cluster-cpu-disk")


def small_run(**settings) -> blis_fast.Result:
    """The study's workload made small: its first 1,500 requests on GPUs of 2,000 KV blocks
    (half the study's), so that the conversations outgrow them within the shorter run."""
    return blis_fast.simulate(config=str(TIERS / "cluster.yaml"), workload_spec=str(TIERS / "long-chat.yaml"),
                              num_requests=1500, total_kv_blocks=2000, **settings)


def test_hit_rate_never_falls_as_the_cpu_tier_grows_and_bandwidth_decides_the_ttft():
    """At 32 GB/s, CPU tiers from the GPU's size up: the prefix hit rate (GPU + CPU) is
    non-decreasing in the tier's size and rises well above the GPU's alone; the largest
    tier's TTFT mean is below the no-tier run's, while at 0.5 GB/s the same hits cost more
    TTFT than recomputing them."""
    none = small_run().cluster
    rates, ttft = [none["prefix_cache_hit_rate"]], {}
    for blocks in (2500, 5000, 10000, 25000):
        c = small_run(kv_cpu_blocks=blocks, kv_cpu_read_gbps=32).cluster
        assert c["completed_requests"] == 1500
        assert c["prefix_cache_hit_rate"] == pytest.approx(c["prefix_hit_rate_gpu"] + c["prefix_hit_rate_cpu"])
        rates.append(c["prefix_cache_hit_rate"])
        ttft[blocks] = c["ttft_mean_ms"]
    assert rates == sorted(rates), rates
    assert rates[-1] > rates[0] + 0.2
    assert ttft[25000] < none["ttft_mean_ms"]
    slow = small_run(kv_cpu_blocks=10000, kv_cpu_read_gbps=0.5)
    assert slow.cluster["ttft_mean_ms"] > none["ttft_mean_ms"]
    assert slow.kv_tiers["load_wait_mean_ms"] > 20 * small_run(kv_cpu_blocks=10000, kv_cpu_read_gbps=32).kv_tiers[
        "load_wait_mean_ms"]


def test_shipped_files_load_and_run():
    """The configurations' tiers, the spec's sessions as the page describes them, and a
    200-request run of each configuration: tier results only where there are tiers."""
    tiers = {}
    for name in CONFIGS:
        cfg = blis_fast.build_config(blis_fast.load_yaml(TIERS / f"{name}.yaml"))
        (dep,) = cfg.deployment_list()
        assert (dep.model, dep.hardware, dep.engine.tp, dep.instances) == (
            "meta-llama/llama-3.1-8b-instruct", "H100", 1, 4)
        assert dep.engine.total_kv_blocks == 4000 and cfg.policy.routing == "weighted"
        r = blis_fast.simulate(config=str(TIERS / f"{name}.yaml"), workload_spec=str(TIERS / "long-chat.yaml"),
                               num_requests=200)
        assert r.cluster["completed_requests"] == 200
        tiers[name] = r.kv_tiers and {t: v["capacity_blocks"] // v["instances"] for t, v in r.kv_tiers["tiers"].items()}
    assert tiers == {"cluster": None, "cluster-cpu": {"cpu": 20000}, "cluster-cpu-disk": {"cpu": 5000, "disk": 50000}}
    spec = load_spec(TIERS / "long-chat.yaml")
    (client,) = spec.clients
    assert client.rate == 2 and spec.num_requests == 5000
    assert client.session.turns.mean == 8


def page_commands() -> list[list[str]]:
    return doc_commands("kv-tiers.md")


def study_script():
    """configs/examples/kv-tiers/study.py as a module."""
    spec = importlib.util.spec_from_file_location("kv_tiers_study", TIERS / "study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_commands_run_small(capsys, monkeypatch, tmp_path):
    """Every command of docs/kv-tiers.md runs as written, made small: 200 requests, one
    seed, no measurement window, its files in a temporary directory.  The study script
    draws its figure and prints its table: a row per point, 0 blocks once."""
    pytest.importorskip("matplotlib")
    commands = page_commands()
    assert [c[:2] for c in commands] == [["blis-fast", "run"], ["blis-fast", "sweep"],
                                         ["python", "configs/examples/kv-tiers/study.py"],
                                         ["blis-fast", "compare"], ["blis-fast", "sweep"]]
    monkeypatch.chdir(ROOT)  # the page's paths are relative to the repository
    for k, command in enumerate(commands):
        args, it = [], iter(command[2:] if command[0] == "python" else command[1:])
        for a in it:
            if a in ("--plot", "--out", "--num-requests", "--seeds", "--warmup-s", "--cooldown-s"):
                value = next(it)
                if a in ("--out", "--plot"):
                    args += [a, tmp_path / f"{k}-{value}"]
            else:
                args.append(a)
        if command[0] == "python":
            study_script().main([str(a) for a in args] + ["--num-requests", "200", "--seeds", "1"])
            rows = capsys.readouterr().out.splitlines()[2:]
            assert len(rows) == 1 + 5 * 4 and rows[0].startswith("| 0 | - |")
        else:
            code, out, err = run_cli(capsys, *args, "--num-requests", "200")
            assert code == 0, (command, err)
        for a, value in zip(command, command[1:]):
            if a in ("--out", "--plot"):
                assert (tmp_path / f"{k}-{value}").is_file(), value


@pytest.mark.parametrize("args, needle", [
    (["--seeds", "0"], "--seeds: must be an integer in [1, 1000]"),
    (["--seeds", "1e9"], "--seeds"),
    (["--seeds", "600"], "simulations, more than the 10000"),
    (["--jobs", "-1"], "--jobs"),
    (["--num-requests", "0"], "--num-requests"),
    (["--plot", "figure.pdf"], "--plot: must end in .png or .svg"),
    (["--bogus"], "unrecognized arguments"),
])
def test_the_study_script_refuses_bad_input_in_one_line(capsys, args, needle):
    """Before anything runs: one line, exit code 2."""
    with pytest.raises(SystemExit) as exc:
        study_script().main(args)
    out = capsys.readouterr()
    assert_clean_error(exc.value.code, out.out, out.err, [needle])
