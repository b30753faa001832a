"""The P/D study's shipped examples (configs/examples/pd/, docs/disaggregation.md): the
configurations and workload specs load as documented, run, and keep the page's findings on
small runs -- disaggregation steadies ITL, costs TTFT by the KV transfer, and that cost is
the transfer time the bandwidth gives, request by request."""

from __future__ import annotations


import numpy as np
import pytest

import blis_fast
from blis_fast.workload.spec import load_spec
from builders import ROOT, doc_commands, run_cli

PD = ROOT / "configs" / "examples" / "pd"
CONFIGS = ("monolithic", "2p6d", "4p4d")
# llama-3.1-8b's KV per token: 2 (K, V) x 32 layers x 8 KV heads x 128 head dim x 2 bytes
KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2


def run(config: str, spec: str, rate_scale: float, **settings) -> blis_fast.Result:
    return blis_fast.simulate(config=str(PD / f"{config}.yaml"), workload_spec=str(PD / f"{spec}.yaml"),
                              num_requests=200, rate_scale=rate_scale, **settings)


def test_configs_split_the_same_eight_gpus():
    pools = {}
    for name in CONFIGS:
        cfg = blis_fast.build_config(blis_fast.load_yaml(PD / f"{name}.yaml"))
        (dep,) = cfg.deployment_list()
        assert (dep.model, dep.hardware, dep.engine.tp) == ("meta-llama/llama-3.1-8b-instruct", "H100", 1)
        assert dep.instances == 8
        pools[name] = {role: pool.instances for role, pool in dep.pools}
        if dep.disaggregated:
            assert dep.pd.decider == "always" and dep.pd.transfer.bandwidth_gbps == 25
    assert pools == {"monolithic": {}, "2p6d": {"prefill": 2, "decode": 6}, "4p4d": {"prefill": 4, "decode": 4}}


def test_specs_have_the_documented_lognormal_lengths():
    """The specs' comments state each length distribution's medians and means; one
    request per second, so --rate-scale R offers R req/s."""
    z90 = 1.2815515655446004
    for name, prompt, output in (("long-prompts", (2000, 6000, 2890), (200, 432, 240)),
                                 ("short-prompts", (160, 377, 200), (499, 1086, 600))):
        spec = load_spec(PD / f"{name}.yaml")
        (client,) = spec.clients
        assert client.rate == 1
        for dist, (p50, p90, mean) in ((client.prompt_tokens, prompt), (client.output_tokens, output)):
            assert dist.type == "lognormal"
            mu, sigma = dist.mu, dist.sigma
            assert np.exp(mu) == pytest.approx(p50, rel=0.005)
            assert np.exp(mu + z90 * sigma) == pytest.approx(p90, rel=0.005)
            assert np.exp(mu + sigma**2 / 2) == pytest.approx(mean, rel=0.005)


def test_disaggregation_steadies_itl_and_costs_ttft():
    """Long prompts at 16 req/s: prefill chunks in the monolithic decode steps lift its ITL
    p99 far above one decode step; the decode pools stay at one step.  The transfer and
    the decode step before the first token make disaggregated TTFT longer."""
    mono = run("monolithic", "long-prompts", 16).cluster
    assert mono["completed_requests"] == 200 and mono["itl_p99_ms"] > 20
    for name in ("2p6d", "4p4d"):
        pd = run(name, "long-prompts", 16).cluster
        assert pd["completed_requests"] == 200
        assert pd["itl_p99_ms"] < 6.5 < mono["itl_p99_ms"]
        assert pd["ttft_mean_ms"] > mono["ttft_mean_ms"]
    for name in CONFIGS:  # the decode-heavy spec runs everywhere too
        assert run(name, "short-prompts", 100).cluster["completed_requests"] == 200


def test_transfer_bandwidth_adds_the_transfer_time_to_each_ttft():
    """Without link contention a request's TTFT at 1 GB/s exceeds its TTFT at 100 GB/s by
    the extra transfer time of its prompt's KV, give or take the alignment to a decode
    step (under 6 ms here)."""
    slow, fast = (run("2p6d", "long-prompts", 16, pd_transfer_bandwidth_gbps=bw).requests_table().to_pydict()
                  for bw in (1, 100))
    assert slow["requestID"] == fast["requestID"]
    extra_ms = np.asarray(slow["num_prefill_tokens"]) * KV_BYTES_PER_TOKEN * (1 / 1e9 - 1 / 100e9) * 1e3
    residual = np.asarray(slow["ttft_ms"]) - np.asarray(fast["ttft_ms"]) - extra_ms
    assert extra_ms.max() > 1000  # the long prompts take seconds at 1 GB/s
    assert np.abs(residual).max() < 10


def test_cli_compare_on_the_shipped_files(capsys):
    code, out, err = run_cli(capsys, "compare", *(PD / f"{name}.yaml" for name in CONFIGS),
                             "--workload-spec", PD / "long-prompts.yaml", "--num-requests", "200",
                             "--set", "rate_scale=8,16")
    assert code == 0, err
    rows = [line.split() for line in out.split("\n\n")[1].splitlines()[1:]]
    assert [(r[0], r[1]) for r in rows] == [(c, s) for c in CONFIGS for s in ("8", "16")]


def page_commands() -> list[list[str]]:
    return doc_commands("disaggregation.md")


def test_the_page_commands_run_small(capsys, monkeypatch, tmp_path):
    """Every command of docs/disaggregation.md runs as written, made small: 200 requests,
    one seed, no measurement window (200 requests span less than its 10 s), its table file
    in a temporary directory and no figure."""
    commands = page_commands()
    assert [c[1] for c in commands] == ["run", "compare", "compare", "compare", "compare", "sweep", "compare", "sweep"]
    assert {c[0] for c in commands} == {"blis-fast"}
    monkeypatch.chdir(ROOT)  # the page's paths are relative to the repository
    for k, command in enumerate(commands):
        args, it = [], iter(command[1:])
        for a in it:
            if a in ("--plot", "--out", "--num-requests", "--seeds", "--warmup-s", "--cooldown-s"):
                next(it)  # (its value)
                if a == "--out":
                    args += ["--out", tmp_path / f"{k}.parquet"]
            else:
                args.append(a)
        code, out, err = run_cli(capsys, *args, "--num-requests", "200")
        assert code == 0, (command, err)
        assert "--out" not in command or (tmp_path / f"{k}.parquet").exists()
