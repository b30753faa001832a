"""``blis-fast agents run`` and ``blis_fast.agents.run_scenario`` (issue 26) over the
tools-only fair-share driver: the exact cases, the JSON shape, mean ± std over runs,
determinism, the per-request table, refusals, and M/M/1 under processor sharing."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest
import yaml

from blis_fast.agents import AgentResult, run_scenario
from blis_fast.errors import ConfigError
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

CONFIGS = Path(__file__).resolve().parents[2] / "configs/agents"


def scenario(nodes: dict, *, rate_per_min: float = 1.0, duration_s: float = 600.0, runs: int = 1, **extra) -> dict:
    """One type ``t`` of ``nodes`` on cpu (100 units/s) and io (50 units/s).  At 1 request
    per minute and well under a second per request, every request runs alone."""
    return {"resources": {"cpu": 100, "io": 50}, "types": {"t": {"nodes": nodes}},
            "arrivals": {"t": rate_per_min}, "duration_s": duration_s, "seed": 3, "runs": runs, **extra}


def one_type(result: AgentResult) -> dict:
    return result.to_dict()["types"]["t"]


def node_rows(result: AgentResult) -> dict:
    """(request, node) -> (arrival, start, finish) µs of the per-request table."""
    rows = result.requests_table().to_pylist()
    return {(r["request"], r["node"]): (r["arrival_us"], r["start_us"], r["finish_us"]) for r in rows}


def assert_every_latency(result: AgentResult, seconds: float) -> None:
    t = one_type(result)
    assert t["completed"] >= 5
    for key in ("latency_mean_s", "latency_p50_s", "latency_p95_s", "latency_p99_s"):
        assert t[key] == pytest.approx(seconds, abs=1e-9), key


def test_one_tool_alone_takes_work_over_capacity_and_utilization_is_work_over_capacity_span():
    result = run_scenario(scenario({"a": {"work": {"cpu": 20}}}), keep_requests=True)
    assert_every_latency(result, 0.2)
    run = result.per_run[0]
    # utilization = work done / (capacity x span): each request did 20 units of cpu
    assert result.to_dict()["resources"]["cpu"]["utilization"] == pytest.approx(
        run["requests"] * 20 / (100 * run["span_s"]), rel=1e-12)
    assert result.to_dict()["resources"]["io"]["utilization"] == 0.0
    rows = node_rows(result)
    assert all(finish - start == 200_000 and start == arrival for arrival, start, finish in rows.values())


def test_two_identical_tools_finish_at_twice_the_solo_time():
    result = run_scenario(scenario({"a": {"work": {"cpu": 20}}, "b": {"work": {"cpu": 20}}}), keep_requests=True)
    assert_every_latency(result, 0.4)
    assert all(finish - arrival == 400_000 for arrival, _, finish in node_rows(result).values())


def test_the_bottleneck_resource_decides():
    assert_every_latency(run_scenario(scenario({"a": {"work": {"cpu": 20, "io": 25}}})), 0.5)


def test_a_then_b_takes_the_sum():
    result = run_scenario(scenario({"a": {"work": {"cpu": 20}}, "b": {"work": {"io": 10}, "after": ["a"]}}),
                          keep_requests=True)
    assert_every_latency(result, 0.4)
    rows = node_rows(result)
    for (q, node), (arrival, start, _) in rows.items():
        if node == "b":
            assert start == rows[q, "a"][2] == arrival + 200_000


def test_c_after_a_and_b_starts_at_the_later_finish():
    result = run_scenario(scenario({"a": {"work": {"cpu": 20}}, "b": {"work": {"io": 5}},
                                    "c": {"work": {"cpu": 10}, "after": ["a", "b"]}}), keep_requests=True)
    assert_every_latency(result, 0.3)
    rows = node_rows(result)
    for (q, node), (arrival, start, _) in rows.items():
        if node == "c":
            assert start == max(rows[q, "a"][2], rows[q, "b"][2]) == arrival + 200_000


@pytest.mark.parametrize("share, seconds", [("dynamic", 0.5), ("static", 0.6)])
def test_the_share_mode_reaches_the_kernel(share, seconds):
    # a: cpu 0.4 s alone, io 5 units; b: io 20 units.  dynamic: a leaves io at 0.2 s (io shared: 5 / 25),
    # b has 15 left alone (0.3 s): 0.5 s.  static: a holds its io share until 0.4 s, b has 10 left: 0.6 s
    nodes = {"a": {"work": {"cpu": 40, "io": 5}}, "b": {"work": {"io": 20}}}
    assert_every_latency(run_scenario(scenario(nodes, share=share)), seconds)


def test_a_run_without_requests_or_with_nodes_that_never_finish_reports_nulls_not_nan():
    # capacity 10^-300 with work 10^15: a finish beyond 2^62 µs, never; b finishes (1 µs)
    nodes = {"a": {"work": {"cpu": 1e15}}, "b": {"work": {"io": 1}}}
    data = scenario(nodes, rate_per_min=10, duration_s=60, resources={"cpu": 1e-300, "io": 1e6})
    result = run_scenario(data, keep_requests=True)
    doc = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert doc["per_run"][0]["requests"] > 0 and doc["types"]["t"]["completed"] == 0
    assert doc["types"]["t"]["latency_p99_s"] is None and doc["resources"]["cpu"]["utilization"] == 0.0
    rows = result.requests_table().to_pylist()
    assert all(r["end_us"] is None and (r["finish_us"] is None) == (r["node"] == "a") for r in rows)
    empty = run_scenario(scenario(nodes, rate_per_min=0), keep_requests=True)
    assert empty.to_dict()["types"]["t"]["completed"] == 0 and empty.requests_table().num_rows == 0
    assert empty.to_dict()["resources"]["io"]["utilization"] == 0.0


def test_the_json_shape_and_mean_std_over_runs(tmp_path):
    code, out, err = cli_in_process("agents", "run", "--scenario", CONFIGS / "tools-only.yaml", "--runs", "3", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc["types"]) == {"diamond", "ping"} and set(doc["resources"]) == {"cpu", "io"}
    keys = {"completed", "latency_mean_s", "latency_p50_s", "latency_p95_s", "latency_p99_s"}
    for entry in doc["types"].values():
        assert set(entry) == keys | {"std"} and set(entry["std"]) == keys
    for entry in doc["resources"].values():
        assert set(entry) == {"utilization", "std"} and 0 < entry["utilization"] < 1
    assert doc["runs"] == len(doc["per_run"]) == 3
    assert [r["seed"] for r in doc["per_run"]] == [7, 8, 9]  # run k: seed + k
    for name, entry in doc["types"].items():
        for key in keys:
            values = [r["types"][name][key] for r in doc["per_run"]]
            assert entry[key] == pytest.approx(statistics.fmean(values), rel=1e-12)
            assert entry["std"][key] == pytest.approx(statistics.stdev(values), rel=1e-9, abs=1e-15)
    assert len({r["types"]["diamond"]["latency_mean_s"] for r in doc["per_run"]}) == 3  # the runs differ
    # one run: no spread to report
    one = run_scenario(CONFIGS / "tools-only.yaml", runs=1).to_dict()
    assert one["runs"] == 1 and one["types"]["ping"]["std"]["latency_mean_s"] is None
    assert one["per_run"][0] == doc["per_run"][0]


def test_the_terminal_table_names_types_and_resources():
    code, out, err = cli_in_process("agents", "run", "--scenario", CONFIGS / "tools-only.yaml")
    assert code == 0, err
    assert "diamond" in out and "ping" in out and "cpu" in out and "io" in out and "±" in out


def test_runs_are_deterministic_to_the_byte(tmp_path):
    outputs = []
    for k in range(2):
        table = tmp_path / f"requests{k}.csv"
        code, out, err = cli_in_process("agents", "run", "--scenario", CONFIGS / "tools-only.yaml", "--json",
                                        "--per-request-out", table)
        assert code == 0, err
        outputs.append((out, table.read_bytes()))
    assert outputs[0] == outputs[1]
    rows = list(csv.DictReader(outputs[0][1].decode().splitlines()))
    per_run = json.loads(outputs[0][0])["per_run"]
    assert len({(r["run"], r["request"]) for r in rows}) == sum(r["requests"] for r in per_run)
    assert {r["node"] for r in rows if r["type"] == "diamond"} == {"fetch", "parse", "embed", "merge"}


def test_the_per_request_table_writes_parquet(tmp_path):
    import pyarrow.parquet as pq

    path = tmp_path / "requests.parquet"
    code, _, err = cli_in_process("agents", "run", "--scenario", CONFIGS / "tools-only.yaml", "--runs", "1",
                                  "--per-request-out", path)
    assert code == 0, err
    table = pq.read_table(path)
    assert table.column_names == ["run", "request", "type", "arrival_us", "end_us", "latency_s", "node", "start_us",
                                  "finish_us"]
    assert table.num_rows > 0 and table.column("finish_us").null_count == 0


def write_yaml(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


LLM_NODE = {"llm": {"model": "m", "prompt_tokens": 100, "output_tokens": 10}}


@pytest.mark.parametrize("data, flags, field, needles", [
    (scenario({"a": {"work": {"cpu": 1}}, "plan": LLM_NODE}), (), "cluster", ["required"]),
    (scenario({"a": {"work": {"cpu": 1}}}), ("--runs", "0"), "--runs", ["[1, 10000]"]),
    (scenario({"a": {"work": {"cpu": 1}}}), ("--runs", "x"), "--runs", ["integer"]),
    (scenario({"a": {"work": {"cpu": -1}}}), (), "types.t.nodes.a.work.cpu", [">= 0"]),
    (scenario({"a": {"work": {"cpu": 1}, "after": ["b"]}, "b": {"work": {"cpu": 1}, "after": ["a"]}}), (),
     "types.t.nodes.a.after", ["cycle"]),
    ({**scenario({"a": {"work": {"cpu": 1}}}), "types": {"t": {"weight": 1.5, "nodes": {"a": {"work": {"cpu": 1}}}}}},
     (), "types.t.weight", ["integer"]),
    (scenario({"a": {"work": {"cpu": 1}}}), ("--per-request-out", "out.txt"), "--per-request-out", [".parquet"]),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, data, flags, field, needles):
    path = write_yaml(tmp_path, data)
    flags = tuple(str(tmp_path / f) if f == "out.txt" else f for f in flags)
    line = assert_clean_error(*cli_in_process("agents", "run", "--scenario", path, *flags), needles)
    assert line.startswith(f"error: {field}: "), line


def test_refusals_leave_the_scenario_alone_and_name_missing_files(tmp_path):
    path = write_yaml(tmp_path, scenario({"a": {"work": {"cpu": 1}}}))
    before = path.read_bytes()
    twin = tmp_path / "s.csv"
    twin.symlink_to(path)
    assert_clean_error(*cli_in_process("agents", "run", "--scenario", path, "--per-request-out", twin),
                       ["input"])
    assert path.read_bytes() == before
    assert_clean_error(*cli_in_process("agents", "run", "--scenario", tmp_path / "nope.yaml"), ["--scenario"])
    # nor a file the scenario names (an empirical work distribution)
    works = tmp_path / "works.csv"
    works.write_text("10\n20\n")
    named = write_yaml(tmp_path, scenario({"a": {"work": {"cpu": {"type": "empirical", "file": "works.csv"}}}}))
    assert_clean_error(*cli_in_process("agents", "run", "--scenario", named, "--per-request-out", works),
                       ["--per-request-out", "input"])
    assert works.read_text() == "10\n20\n"
    # nor its cluster: config file (a tools-only scenario may name one)
    cluster = tmp_path / "cluster.csv"
    cluster.write_text("model: meta-llama/llama-3.1-8b-instruct\n")
    with_cluster = write_yaml(tmp_path, scenario({"a": {"work": {"cpu": 1}}}, cluster="cluster.csv"))
    assert_clean_error(*cli_in_process("agents", "run", "--scenario", with_cluster, "--per-request-out", cluster),
                       ["--per-request-out", "input"])
    assert cluster.read_text() == "model: meta-llama/llama-3.1-8b-instruct\n"


def test_the_api_refuses_with_config_errors():
    with pytest.raises(ConfigError) as exc:
        run_scenario(scenario({"plan": LLM_NODE}))  # llm nodes need a cluster to be sent to
    assert exc.value.field == "cluster"
    with pytest.raises(ConfigError) as exc:
        run_scenario(scenario({"a": {"work": {"cpu": 1}}}), runs=0)
    assert exc.value.field == "runs"
    with pytest.raises(ValueError):
        run_scenario(scenario({"a": {"work": {"cpu": 1}}})).requests_table()  # not kept


@pytest.mark.parametrize("share", ["dynamic", "static"])
def test_mm1_under_processor_sharing_mean_latency_near_one_over_mu_minus_lambda(share):
    # one tool, exponential work of mean 0.1 s on a resource of capacity 1: mu = 10/s; lambda = 5/s (rho 0.5)
    data = {"resources": {"cpu": 1}, "types": {"t": {"nodes": {"a": {"work": {"cpu": {"type": "exponential",
                                                                                      "mean": 0.1}}}}}},
            "arrivals": {"t": 300}, "duration_s": 4000, "seed": 11, "share": share}
    t = one_type(run_scenario(data))
    assert t["latency_mean_s"] == pytest.approx(1 / (10 - 5), rel=0.08)
