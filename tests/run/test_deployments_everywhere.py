"""Multi-deployment configs (docs/architecture.md "Deployments") through every surface above
one run: batch evaluation, cohorts, counterfactual replays, capacity, sweep and compare.
Each works, and gives what the ordinary runs it stands for give; what cannot be meaningful
with several deployments (an instance search, sweeping a per-deployment setting) is refused
with the reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

import blis_fast
from blis_fast.batch import Budget, evaluate_many
from blis_fast.batch.candidates import load_candidate
from blis_fast.batch.evaluate import evaluate_prepared
from blis_fast.batch.scenarios import Scenario, prepare
from blis_fast.config.sim import build_config
from blis_fast.errors import ConfigError
from blis_fast.run.counterfactual import forced_session, replays, worst_decisions
from builders import expect_cli_error, run_cli

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "configs" / "examples"
LLAMA, QWEN = "meta-llama/llama-3.1-8b-instruct", "qwen/qwen2.5-7b-instruct"
OBJECTIVES = f"ttft_p99_ms[deployment=a100]:min:200,e2e_p99_ms[model={LLAMA}]:min,utilization[deployment=h100]"


def hetero(num_requests=300, rate=30) -> dict:
    """configs/examples/hetero-fleet.yaml (llama on 2 x H100 + 2 x A100-80), made short."""
    doc = yaml.safe_load((EXAMPLES / "hetero-fleet.yaml").read_text())
    doc["workload"].update(num_requests=num_requests, rate=rate)
    return doc


def two_models_file(tmp_path, duration_s=8, **deployment_changes) -> Path:
    """configs/examples/two-models.yaml (llama on 2 x H100, qwen on 2 x A100-80) written to
    ``tmp_path`` with a copy of its spec made ``duration_s`` long; ``deployment_changes``
    update every deployment entry."""
    doc = yaml.safe_load((EXAMPLES / "two-models.yaml").read_text())
    spec = yaml.safe_load((ROOT / "configs" / "workloads" / "two-models.yaml").read_text())
    spec["duration_s"] = duration_s
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    doc["workload"]["spec_filepath"] = str(tmp_path / "spec.yaml")
    for dep in doc["deployments"]:
        dep.update(deployment_changes)
    path = tmp_path / f"two-models-{len(list(tmp_path.glob('two-models-*')))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def two_models(tmp_path_factory) -> str:
    return str(two_models_file(tmp_path_factory.mktemp("two-models")))


# -- batch evaluation -------------------------------------------------------------------


def test_evaluate_many_on_a_multi_deployment_scenario_with_selector_objectives():
    cands = {"rr": {"routing": "round-robin"}, "ll": {"routing": "least-loaded"}}
    scen = [{"name": "het", "config": hetero(), "seed": 7}]
    table, results = evaluate_many(cands, scen, objectives=OBJECTIVES, workers=1)
    rows = table.to_pylist()
    assert [(r["candidate"], r["status"]) for r in rows] == [("rr", "ok"), ("ll", "ok")]
    for row in rows:
        assert 0 <= row["score"] <= 1
        for objective in OBJECTIVES.split(","):
            assert 0 <= row["objective." + objective.split(":")[0]] <= 1
    # each row is the evaluation of an ordinary run of that candidate on the scenario
    for result, policy in zip(results, ("round-robin", "least-loaded")):
        plain = blis_fast.simulate(config=hetero(), seed=7, routing_policy=policy).evaluate(OBJECTIVES)
        assert result.to_dict() == plain.to_dict()
    assert results[0].to_dict()["metrics"] != results[1].to_dict()["metrics"]  # the policies differ


def test_evaluate_many_refuses_a_selector_the_scenario_does_not_have():
    with pytest.raises(ConfigError, match="its deployments: h100, a100"):
        evaluate_many({"rr": {"routing": "round-robin"}}, [{"name": "het", "config": hetero()}],
                      objectives="ttft_p99_ms[deployment=v100]:min", workers=1)


# -- cohorts ----------------------------------------------------------------------------


def weighted(**w) -> dict:
    return {"routing": {"type": "weighted", "params": {"scorers": {k.replace("_", "-"): v for k, v in w.items()}}}}


@pytest.mark.parametrize("which", ["hetero", "two-models"])
def test_a_cohort_on_a_multi_deployment_scenario_gives_each_member_its_own_runs_row(which, two_models):
    cfg = build_config(hetero(num_requests=400, rate=60)) if which == "hetero" else build_config(blis_fast.load_yaml(two_models))
    scenario = prepare(Scenario("multi", cfg), "slo_attainment:max,ttft_p99_ms:min:300,e2e_p99_ms:min")
    cands = {"qd": weighted(queue_depth=1.0), "qd2": weighted(queue_depth=2.0), "kv": weighted(kv_utilization=1.0),
             "mix": weighted(queue_depth=1.0, kv_utilization=2.0, load_balance=0.5)}
    cands = [load_candidate(c, n) for n, c in cands.items()]
    alone = evaluate_prepared(cands, [scenario], Budget(max_wall_s=None), 1, cohorts=False)
    together = evaluate_prepared(cands, [scenario], Budget(max_wall_s=None), 1, cohorts=True)
    assert [r.to_dict() for r in together] == [r.to_dict() for r in alone]
    assert all(r.status == "ok" for r in together)
    assert together[0].metrics == together[1].metrics  # qd and qd2 decide alike


# -- counterfactual replays -------------------------------------------------------------


def test_counterfactual_replays_on_the_heterogeneous_fleet():
    r = blis_fast.simulate(config=hetero(num_requests=400, rate=60), counterfactual_k=2, trace_level="decisions")
    assert len(r.counterfactuals) == 2
    for rep in r.counterfactuals:
        # one model on four instances: every other instance is an alternative
        assert {a["instance"] for a in rep["alternatives"]} | {rep["chosen_instance"]} == {0, 1, 2, 3}
        assert all(a["ttft_ms"] is not None for a in rep["alternatives"])


def test_counterfactual_replays_stay_among_the_requests_models_instances(two_models):
    base = blis_fast.simulate(config=two_models, trace_level="decisions")
    model_of_instance = base.state.inst["model"]
    seen = 0
    for row, j, replayed in replays(base, worst_decisions(base, 3).tolist()):
        r = int(base.state.route_log["request"][row])
        assert model_of_instance[j] == base.state.reqs["model"][r]
        assert replayed.state.reqs["instance"][r] == j
        # a forced routing sends nothing else astray: every request on its own model's instances
        assert (model_of_instance[replayed.state.reqs["instance"]] == replayed.state.reqs["model"]).all()
        seen += 1
    assert seen > 0
    # forcing a request onto an instance of another model is refused, naming the ones serving it
    qwen_request = int(np.flatnonzero(base.state.reqs["model"] == 1)[0])
    with pytest.raises(ConfigError, match=r"forced_instance.*\[2, 3\]") as e:
        forced_session(base, qwen_request, 0)
    assert e.value.field == "forced_instance"


# -- capacity ---------------------------------------------------------------------------


def test_capacity_rate_search_on_a_multi_deployment_config():
    r = blis_fast.capacity("ttft_p99_ms[deployment=a100]<=300", config=hetero(num_requests=300), seeds=1,
                           tolerance=0.25, max_probes=6)
    assert r.answer is not None and r.answer > 0
    at = [p for p in r.probes if p.value == r.answer][0]
    assert at.met
    # the probe's metric is the one of an ordinary run of the config at that rate
    # (a probe runs at least the config's num_requests, more when its runs are too short)
    plain = blis_fast.simulate(config=hetero(num_requests=at.num_requests or 300), rate=r.answer)
    assert at.stats["ttft_p99_ms[deployment=a100]"].values == (plain.summary()["deployments"]["a100"]["ttft_p99_ms"],)


def test_capacity_instance_search_is_refused_with_several_deployments(capsys):
    with pytest.raises(ConfigError, match="deployments: list") as e:
        blis_fast.capacity("ttft_p99_ms<=300", config=hetero(), search="instances")
    assert e.value.field == "--search"
    expect_cli_error(capsys, "capacity", "--config", EXAMPLES / "hetero-fleet.yaml", "--search", "instances",
                     "--slo", "ttft_p99_ms<=200", needles=("--search", "deployments: list", "--search rate"))


# -- sweep ------------------------------------------------------------------------------


def test_sweep_rate_on_a_multi_deployment_config():
    s = blis_fast.sweep(["rate=20,40"], config=hetero(num_requests=200), metrics="ttft_p99_ms[deployment=h100]")
    assert [p["rate"] for p in s.points] == [20, 40]
    for pt, st in zip(s.points, s.stats):
        plain = blis_fast.simulate(config=hetero(num_requests=200), rate=pt["rate"])
        assert st["ttft_p99_ms"].values == (plain.cluster["ttft_p99_ms"],)
        assert st["ttft_p99_ms[deployment=h100]"].values == (plain.summary()["deployments"]["h100"]["ttft_p99_ms"],)


def test_sweep_rate_scale_on_a_multi_deployment_spec(tmp_path, capsys):
    """A spec sets its clients' rates: --set rate is refused (sweep rate_scale, which scales
    every client); rate_scale points are the runs at that scale."""
    path = two_models_file(tmp_path, duration_s=6)
    s = blis_fast.sweep(["rate_scale=0.5,1"], config=str(path))
    assert [r["offered_rate"] for r in s.rows()] == [6.0, 12.0]  # the clients' 8 + 4 req/s, scaled
    for pt, st in zip(s.points, s.stats):
        plain = blis_fast.simulate(config=str(path), rate_scale=pt["rate_scale"])
        assert st["completed_requests"].values == (plain.cluster["completed_requests"],)
    expect_cli_error(capsys, "sweep", "--config", path, "--set", "rate=4,8", needles=("rate_scale",))


@pytest.mark.parametrize("setting", ["num_instances=2,3", "max_num_seqs=64,128"])
def test_sweeping_a_per_deployment_setting_is_refused_with_the_reason(capsys, setting):
    expect_cli_error(capsys, "sweep", "--config", EXAMPLES / "hetero-fleet.yaml", "--set", setting,
                     needles=(f"--set {setting.split(',')[0]}", "per-deployment setting", "deployments[i]"))


# -- compare ----------------------------------------------------------------------------


def test_compare_two_multi_deployment_configs(tmp_path, capsys):
    a = two_models_file(tmp_path, duration_s=6)
    b = two_models_file(tmp_path, duration_s=6, max_num_seqs=4)
    c = blis_fast.compare([str(a), str(b)], metrics="ttft_p99_ms[model=" + QWEN + "]")
    rows = c.rows()
    assert len(rows) == 2
    for path, st in zip((a, b), c.stats):
        plain = blis_fast.simulate(config=str(path))
        assert st["ttft_p99_ms"].values == (plain.cluster["ttft_p99_ms"],)
        assert st[f"ttft_p99_ms[model={QWEN}]"].values == (plain.summary()["models"][QWEN]["ttft_p99_ms"],)
    assert c.stats[0]["ttft_p99_ms"].values != c.stats[1]["ttft_p99_ms"].values  # 4 running requests queue more
    code, out, err = run_cli(capsys, "compare", a, b)
    assert code == 0 and a.stem in out and b.stem in out, err[-2000:]


# -- the terminal view ------------------------------------------------------------------


def test_terminal_view_of_two_models_names_each_models_instances(two_models):
    from rich.console import Console

    from blis_fast.cli.output import render

    console = Console(width=200, record=True)
    render(blis_fast.simulate(config=two_models).summary(), console=console)
    lines = console.export_text().splitlines()
    assert lines[0].startswith("llama-3.1-8b-instruct on 2 × H100 TP1 + qwen2.5-7b-instruct on 2 × A100-SXM TP1 · ")
    rows = [line.split() for line in lines if line.split()[:1] in (["llama-h100"], ["qwen-a100"])]
    assert [r[:3] for r in rows] == [["llama-h100", "llama-3.1-8b-instruct", "H100"],
                                     ["qwen-a100", "qwen2.5-7b-instruct", "A100-SXM"]]
