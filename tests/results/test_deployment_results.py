"""Results per deployment and per model (blis_fast.results.deployments): the summary's
``deployments`` and ``models`` groups, the per-request ``model`` and ``deployment`` fields,
the ``deployment`` column of time series and decision traces, and the ``[deployment=D]`` /
``[model=M]`` selectors.

Groups and columns appear only with two or more deployments.  Until the event loop runs
several deployments, the multi-deployment results are built from a single-deployment run of
four identical instances and a Setup that splits them into two deployment records (2 + 2)
of the same model: the grouping reads only Setup.deployments, the request table's
``instance`` and Workload.model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import blis_fast
from blis_fast.errors import ConfigError
from blis_fast.results.metrics import summarize_group
from blis_fast.results.objectives import check_selectors, metric_value
from blis_fast.results.result import Result
from blis_fast.results.scorecard import group_metrics, instance_metrics
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

LLAMA = "meta-llama/llama-3.1-8b-instruct"
RUN = dict(num_instances=4, rate=40.0, num_requests=240, seed=3)


@pytest.fixture(scope="module")
def single():
    return blis_fast.simulate(**RUN, trace_level="full", sample_interval_ms=500)


def split(result: Result, served=(LLAMA, LLAMA), model_ids=None) -> Result:
    """``result`` seen as two deployments "a" (instances 0, 1) and "b" (2, 3) serving
    ``served``; ``model_ids``: each request's model (index into the served names)."""
    first = result.setup.deployments[0]
    pool = first.pools[0]
    a = replace(first, name="a", served_model_name=served[0], instances=2, first_instance=0,
                pools=(replace(pool, instances=2, first_instance=0),))
    b = replace(first, name="b", served_model_name=served[1], instances=2, first_instance=2,
                pools=(replace(pool, instances=2, first_instance=2),))
    workload = result.workload
    if model_ids is not None:
        workload = replace(workload, model=model_ids.astype(np.int32), models=tuple(dict.fromkeys(served)))
    return Result(replace(result.setup, deployments=(a, b)), workload, result.state)


@pytest.fixture(scope="module")
def two(single):
    return split(single)


def expected_group(result: Result, requests: np.ndarray, instances: list[int]) -> dict:
    """summarize_group over exactly these requests and instances, computed here from the
    kernel's tables."""
    reqs = result.reqs
    done = reqs["state"] == blis_fast.results.metrics.REQ_COMPLETED
    values, counts = result._itl.histogram(done & requests)
    _, clocks = result._clocks
    out = summarize_group("", result._cols, np.flatnonzero(requests), result.state.inst[instances], values,
                          counts, result.compat, int(clocks[instances].max()))
    del out["instance_id"]
    return out


def test_single_deployment_outputs_have_no_groups_or_columns(single, tmp_path):
    summary = single.summary()
    assert "deployments" not in summary and "models" not in summary
    doc = json.loads(single.results_json())
    assert "deployments" not in doc and "models" not in doc
    assert not {"model", "deployment"} & set(doc["requests"][0])
    assert not {"model", "deployment"} & set(single.requests_table().column_names)
    assert "deployment" not in single.decision_table().column_names
    assert "deployment" not in single.timeseries.columns()
    # the multi-deployment view of the same run: the same cluster, instances and records, plus the new keys
    two = split(single)
    assert two.cluster == single.cluster and two.instances == single.instances
    records = two.request_records()
    assert [{k: v for k, v in r.items() if k not in ("model", "deployment")} for r in records] == \
        single.request_records()
    single.write_requests(tmp_path / "one.csv")
    two.write_requests(tmp_path / "two.csv")
    one_rows = (tmp_path / "one.csv").read_text().splitlines()
    two_rows = (tmp_path / "two.csv").read_text().splitlines()
    assert one_rows[0] + ',"model","deployment"' == two_rows[0]


def test_groups_equal_summarize_group_over_their_instances_and_requests(two):
    summary = two.summary()
    assert list(summary)[:4] == ["cluster", "instances", "deployments", "models"]
    inst = two.reqs["instance"]
    groups = summary["deployments"]
    assert list(groups) == ["a", "b"]
    for name, rows in (("a", [0, 1]), ("b", [2, 3])):
        g = groups[name]
        assert (g["model"], g["hardware"], g["tp"], g["num_instances"]) == (LLAMA, "H100", 1, 2)
        expected = expected_group(two, np.isin(inst, rows), rows)
        assert {k: g[k] for k in expected} == expected
        assert g["completed_requests"] == sum(i["completed_requests"] for i in two.instances
                                              if i["instance_id"] in (f"instance_{r}" for r in rows))
    assert groups["a"]["completed_requests"] + groups["b"]["completed_requests"] == \
        summary["cluster"]["completed_requests"]
    (model_name, m), = summary["models"].items()
    assert model_name == LLAMA and m["deployments"] == ["a", "b"] and m["num_instances"] == 4
    everything = expected_group(two, np.ones(len(inst), bool), [0, 1, 2, 3])
    assert {k: m[k] for k in everything} == everything
    assert m["ttft_p99_ms"] == summary["cluster"]["ttft_p99_ms"]
    doc = json.loads(two.results_json())
    assert doc["deployments"] == json.loads(json.dumps(groups)) and list(doc["models"]) == [LLAMA]


def test_two_models_group_by_request_model(single):
    ids = (single.reqs["instance"] >= 2).astype(np.int64)  # requests on instances 2, 3 ask for model "m2"
    two = split(single, served=("m1", "m2"), model_ids=ids)
    models = two.summary()["models"]
    assert list(models) == ["m1", "m2"]
    assert models["m1"]["deployments"] == ["a"] and models["m2"]["deployments"] == ["b"]
    expected = expected_group(two, ids == 1, [2, 3])
    assert {k: models["m2"][k] for k in expected} == expected
    records = two.request_records()
    assert {(r["model"], r["deployment"]) for r in records} == {("m1", "a"), ("m2", "b")}
    table = two.requests_table()
    assert table["model"].to_pylist() == ["m2" if k else "m1" for k in ids.tolist()]


def test_request_columns_name_model_and_deployment(two, tmp_path):
    inst = two.reqs["instance"].tolist()
    table = two.requests_table()
    assert table["deployment"].to_pylist() == [None if i < 0 else "a" if i < 2 else "b" for i in inst]
    assert set(table["model"].to_pylist()) == {LLAMA}
    cols = table.column_names
    assert cols[cols.index("completion_s") + 1: cols.index("completion_s") + 3] == ["model", "deployment"]
    two.write_requests(tmp_path / "r.parquet")
    assert pq.read_table(tmp_path / "r.parquet")["deployment"].to_pylist() == table["deployment"].to_pylist()
    line = (tmp_path / "r.jsonl")
    two.write_requests(line)
    first = json.loads(line.read_text().splitlines()[0])
    assert first["deployment"] in ("a", "b") and first["model"] == LLAMA


def test_decision_trace_names_each_records_deployment(two):
    t = two.decision_table()
    cols = t.column_names
    assert cols[cols.index("instance") + 1] == "deployment"
    for record, instance, deployment in zip(t["record"].to_pylist(), t["instance"].to_pylist(),
                                            t["deployment"].to_pylist()):
        if record == "admission":
            assert deployment is None
        elif instance is not None:
            assert deployment == ("a" if instance < 2 else "b")
    assert {d for r, d in zip(t["record"].to_pylist(), t["deployment"].to_pylist()) if r == "scheduled"} == {"a", "b"}


def test_time_series_names_the_deployment(monkeypatch):
    # the run's wiring (run.api -> results.deployments.instance_labels): with groups forced on,
    # every instance row names its (single) deployment and the cluster rows are null
    import blis_fast.results.deployments as deployments

    monkeypatch.setattr(deployments, "has_groups", lambda setup: True)
    r = blis_fast.simulate(num_instances=2, rate=20.0, num_requests=60, seed=1, sample_interval_ms=500)
    cols = r.timeseries.columns()
    assert list(cols)[:4] == ["time_us", "time_s", "instance", "deployment"]
    assert [d for i, d in zip(cols["instance"].tolist(), cols["deployment"].tolist()) if i < 0] == \
        [None] * int((cols["instance"] < 0).sum())
    assert {d for i, d in zip(cols["instance"].tolist(), cols["deployment"].tolist()) if i >= 0} == {LLAMA}
    assert r.timeseries.table()["deployment"].type == "string"


def test_selectors_give_the_groups_metrics(two):
    inst = two.reqs["instance"]
    on_a = (inst >= 0) & (inst < 2)
    assert metric_value(two, "ttft_p99_ms[deployment=a]") == group_metrics(two, on_a)["ttft_p99_ms"]
    assert metric_value(two, "ttft_p99_ms[deployment=a]") == two.summary()["deployments"]["a"]["ttft_p99_ms"]
    assert metric_value(two, "completed_requests[deployment=b]") == group_metrics(two, inst >= 2)["completed_requests"]
    assert metric_value(two, "utilization[deployment=b]") == instance_metrics(two, np.array([2, 3]))["utilization"]
    assert metric_value(two, f"e2e_p99_ms[model={LLAMA}]") == group_metrics(two, np.ones(len(inst), bool))["e2e_p99_ms"]
    assert 0 <= two.evaluate("ttft_p99_ms[deployment=a]:min:200,utilization[model=" + LLAMA + "]").score <= 1
    for bad, needle in (("ttft_p99_ms[deployment=c]", "its deployments: a, b"),
                        ("ttft_p99_ms[model=other]", f"its served models: {LLAMA}"),
                        ("jain_fairness[deployment=a]", "unknown metric for [deployment=...]")):
        with pytest.raises(ConfigError, match=r"\[") as exc:
            metric_value(two, bad)
        assert needle in str(exc.value)


def test_selectors_checked_before_the_run(single):
    check_selectors([("f", "ttft_p99_ms[deployment=a]"), ("f", "goodput_rps[model=m]")], single.workload, 4,
                    [("a", "m"), ("b", "m")])
    with pytest.raises(ConfigError, match="no deployment 'c'; its deployments: a, b") as exc:
        check_selectors([("objectives[0].metric", "ttft_p99_ms[deployment=c]")], single.workload, 4,
                        [("a", "m"), ("b", "m")])
    assert exc.value.field == "objectives[0].metric"
    # a single-deployment run is named by its model id (config.deployment_list)
    r = blis_fast.simulate(num_requests=20, objectives=f"ttft_p99_ms[deployment={LLAMA}]:min")
    assert r.summary()["evaluation"]["values"][f"ttft_p99_ms[deployment={LLAMA}]"] == r.cluster["ttft_p99_ms"]


def test_cli_refuses_an_unknown_deployment_or_model_before_the_run():
    code, out, err = cli_in_process("run", "--num-requests", "20", "--objectives", "ttft_p99_ms[deployment=h200]:min")
    assert_clean_error(code, out, err, ("objectives[0].metric", "no deployment 'h200'", LLAMA))
    code, out, err = cli_in_process("run", "--num-requests", "20", "--objectives", "ttft_p99_ms[model=qwen]:min")
    assert_clean_error(code, out, err, ("no deployment serving model 'qwen'",))
    code, out, err = cli_in_process("sweep", "--set", "rate=5,10", "--num-requests", "20",
                                    "--metrics", "ttft_p99_ms[deployment=nope]")
    assert_clean_error(code, out, err, ("no deployment 'nope'",))


def test_cli_checks_selectors_against_a_configs_deployments():
    hetero = Path(__file__).resolve().parents[2] / "configs" / "examples" / "hetero-fleet.yaml"
    code, out, err = cli_in_process("run", "--config", hetero, "--num-requests", "20",
                                    "--objectives", "ttft_p99_ms[deployment=h200]:min")
    assert_clean_error(code, out, err, ("objectives[0].metric", "its deployments: h100, a100"))
    code, out, err = cli_in_process("run", "--config", hetero, "--num-requests", "20",
                                    "--objectives", "ttft_p99_ms[model=llama]:min")
    assert_clean_error(code, out, err, (f"its served models: {LLAMA}",))


def test_terminal_view_shows_the_deployments_table(two):
    from rich.console import Console

    from blis_fast.cli.output import render

    console = Console(width=200, record=True)
    render(two.summary(), console=console)
    text = console.export_text()
    assert "deployments (times in ms" in text
    rows = [line.split() for line in text.splitlines() if line.split()[:1] in (["a"], ["b"])]
    # one served model: the headline names it with every deployment's instances, the table leaves it out
    assert text.splitlines()[0].startswith("llama-3.1-8b-instruct on 2 × H100 TP1 + 2 × H100 TP1 · ")
    assert [r[:4] for r in rows] == [["a", "H100", "TP1", "2"], ["b", "H100", "TP1", "2"]]
    console = Console(width=200, record=True)
    render(blis_fast.simulate(num_requests=20, num_instances=2).summary(), console=console)
    assert "deployments (" not in console.export_text()
