"""Active tools over time and Little's law for agent runs (issue 26): the ``active``
summary of ``summarize_run`` and ``active_windows`` -- hand-computed step functions (ties,
zero-length and never-finished nodes, llm nodes), windows that add up to the span's mean,
Little's law exactly and on an M/M/1 processor-sharing queue, determinism, the JSON and
the table, and the refusal of a bad window count."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from blis_fast.agents.generate import AgentRun, build_templates, generate_run
from blis_fast.agents.results import (ACTIVE_METRICS, MAX_WINDOWS, AgentResult, active_windows, run_scenario,
                                     summarize_run)
from blis_fast.agents.run import AgentRunOutput, run_runs, scenario_of, simulate_run
from blis_fast.errors import ConfigError
from tests.hardening.hardening_helpers import cli_in_process

CONFIGS = Path(__file__).resolve().parents[2] / "configs/agents"


def scenario(nodes: dict, *, rate_per_min: float = 1.0, duration_s: float = 600.0, **extra) -> dict:
    """One type ``t`` of ``nodes`` on cpu (100 units/s) and io (50 units/s); at 1 request a
    minute every request runs alone."""
    return {"resources": {"cpu": 100, "io": 50}, "types": {"t": {"nodes": nodes}},
            "arrivals": {"t": rate_per_min}, "duration_s": duration_s, "seed": 3, **extra}


def first_run(data) -> tuple:
    """(scenario, the output of its run 0)."""
    sc = scenario_of(data)
    return sc, simulate_run(sc, build_templates(sc), generate_run(sc, 0))


def hand_output(arrivals, first_node, starts, finishes, llm) -> AgentRunOutput:
    """A run's output from given times (µs) alone, on the two resources of ``scenario``: what
    the summaries read of it."""
    n = len(starts)
    node_request = np.repeat(np.arange(len(arrivals)), np.diff(first_node))

    def ints(values) -> np.ndarray:
        return np.asarray(values, np.int64)

    run = AgentRun(run_index=0, seed=0, request_type=np.zeros(len(arrivals), np.int32),
                   request_arrival_us=ints(arrivals), request_first_node=ints(first_node),
                   node_request=node_request.astype(np.int32), node_template=np.zeros(n, np.int32),
                   node_n_pred=np.zeros(n, np.int32), node_work=np.zeros((n, 2)),
                   node_prompt_tokens=np.where(llm, 100, -1), node_output_tokens=np.where(llm, 10, -1),
                   node_prefix_group=np.full(n, -1), node_prefix_index=np.full(n, -1))
    return AgentRunOutput(run=run, node_start_us=ints(starts), node_finish_us=ints(finishes),
                          busy_us=np.zeros(2, np.int64), work_done=np.zeros(2), events=0)


# request 0 arrives at 0: tool a [0, 100], tool b [100, 300] after it (a tie: never both
# counted), llm c [50, 250]; request 1 arrives at 200: tool d [200, 200] (0 µs), tool e
# starts at 250 and never finishes (active to the span's end, 300), so request 1 never ends
HAND = dict(arrivals=[0, 200], first_node=[0, 3, 5], starts=[0, 100, 50, 200, 250],
            finishes=[100, 300, 250, 200, -1], llm=[False, False, True, False, False])


def test_hand_computed_step_functions():
    sc = scenario_of(scenario({"a": {"work": {"cpu": 1}}}))
    active = summarize_run(sc, hand_output(**HAND))["active"]
    assert active == {"tools_mean": 350 / 300, "tools_peak": 2,  # a 100 + b 200 + e 50; b and e at 250..300
                      "llm_mean": 200 / 300, "llm_peak": 1,
                      "requests_mean": 400 / 300, "requests_peak": 2}  # request 0: 300, request 1: 100
    edges, tools, llm, requests = active_windows(hand_output(**HAND), windows=3)
    assert edges.tolist() == pytest.approx([0, 100e-6, 200e-6, 300e-6], abs=1e-15)
    assert tools.tolist() == pytest.approx([1.0, 1.0, 1.5], rel=1e-12)
    assert llm.tolist() == pytest.approx([0.5, 1.0, 0.5], rel=1e-12)
    assert requests.tolist() == pytest.approx([1.0, 1.0, 2.0], rel=1e-12)


def test_nothing_finished_or_no_request_is_all_zeros_not_nan():
    sc = scenario_of(scenario({"a": {"work": {"cpu": 1}}}))
    stuck = hand_output(arrivals=[0], first_node=[0, 1], starts=[0], finishes=[-1], llm=[False])
    assert summarize_run(sc, stuck)["active"] == {m: 0 for m in ACTIVE_METRICS}
    empty = hand_output(arrivals=[], first_node=[0], starts=[], finishes=[], llm=[])
    edges, *averages = active_windows(empty, windows=4)
    assert edges[-1] - edges[0] == pytest.approx(1.0) and all((a == 0).all() for a in averages)


def test_two_overlapping_tools():
    # a: cpu 20 / 100 = 0.2 s; b: io 5 / 50 = 0.1 s, both from the arrival: two active for 0.1 s
    sc, out = first_run(scenario({"a": {"work": {"cpu": 20}}, "b": {"work": {"io": 5}}}))
    run = summarize_run(sc, out)
    n, span = run["requests"], run["span_s"]
    assert n >= 5
    active = run["active"]
    assert active["tools_mean"] == pytest.approx(n * 0.3 / span, rel=1e-9) and active["tools_peak"] == 2
    assert active["requests_mean"] == pytest.approx(n * 0.2 / span, rel=1e-9) and active["requests_peak"] == 1
    assert active["llm_mean"] == 0.0 and active["llm_peak"] == 0


def test_a_chain_is_one_tool_at_a_time():
    # a (0.2 s) then b (io 10 / 50 = 0.2 s): b starts at a's finish, never two at once
    sc, out = first_run(scenario({"a": {"work": {"cpu": 20}}, "b": {"work": {"io": 10}, "after": ["a"]}}))
    run = summarize_run(sc, out)
    n, span = run["requests"], run["span_s"]
    assert run["active"]["tools_mean"] == pytest.approx(n * 0.4 / span, rel=1e-9)
    assert run["active"]["requests_mean"] == pytest.approx(n * 0.4 / span, rel=1e-9)
    assert run["active"]["tools_peak"] == run["active"]["requests_peak"] == 1


def littles_law_mean(run: dict) -> float:
    """(requests / span) x their mean latency, from the per-type summaries of a completed run."""
    types = run["types"].values()
    assert sum(t["completed"] for t in types) == run["requests"]  # every request completed
    mean_latency = sum(t["completed"] * t["latency_mean_s"] for t in types if t["completed"]) / run["requests"]
    return run["requests"] / run["span_s"] * mean_latency


def test_windows_add_up_to_the_span_mean_and_littles_law_holds():
    sc, out = first_run(CONFIGS / "tools-only.yaml")
    run = summarize_run(sc, out)
    assert run["active"]["requests_mean"] == pytest.approx(littles_law_mean(run), rel=1e-9)
    edges, tools, llm, requests = active_windows(out, windows=50)
    assert edges.shape == (51,) and tools.shape == llm.shape == requests.shape == (50,)
    assert edges[0] == out.run.request_arrival_us[0] / 1e6 and edges[-1] == pytest.approx(edges[0] + run["span_s"])
    width = np.diff(edges)
    for kind, averages in (("tools", tools), ("llm", llm), ("requests", requests)):
        assert (averages >= 0).all()
        assert float(np.sum(averages * width)) / run["span_s"] == pytest.approx(run["active"][f"{kind}_mean"],
                                                                                 rel=1e-9, abs=1e-12)
        assert averages.max() <= run["active"][f"{kind}_peak"] + 1e-9  # an average never tops the peak


@pytest.mark.parametrize("share", ["dynamic", "static"])
def test_mm1_processor_sharing_mean_in_system_is_rho_over_one_minus_rho(share):
    # one tool, exponential work of mean 0.1 s on a capacity of 1: mu = 10/s; lambda = 5/s, rho 0.5: L = 1
    data = {"resources": {"cpu": 1}, "types": {"t": {"nodes": {"a": {"work": {"cpu": {"type": "exponential",
                                                                                      "mean": 0.1}}}}}},
            "arrivals": {"t": 300}, "duration_s": 4000, "seed": 11, "share": share}
    run = run_scenario(data).per_run[0]
    active = run["active"]
    assert active["requests_mean"] == pytest.approx(littles_law_mean(run), rel=1e-9)
    assert active["requests_mean"] == pytest.approx(0.5 / (1 - 0.5), rel=0.05)
    # a lone tool starts at its request's arrival and ends it: the same step function
    assert active["tools_mean"] == pytest.approx(active["requests_mean"], rel=1e-12)
    assert active["tools_peak"] == active["requests_peak"] > 1


def test_deterministic():
    first = first_run(CONFIGS / "tools-only.yaml")
    again = first_run(CONFIGS / "tools-only.yaml")
    assert summarize_run(*first)["active"] == summarize_run(*again)["active"]
    for a, b in zip(active_windows(first[1]), active_windows(again[1])):
        assert a.tobytes() == b.tobytes()


def test_the_json_and_the_table_report_active_means_and_peaks():
    code, out, err = cli_in_process("agents", "run", "--scenario", CONFIGS / "tools-only.yaml", "--runs", "3", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc["active"]) == set(ACTIVE_METRICS) | {"std"} and set(doc["active"]["std"]) == set(ACTIVE_METRICS)
    for m in ACTIVE_METRICS:
        values = [r["active"][m] for r in doc["per_run"]]
        assert doc["active"][m] == pytest.approx(sum(values) / 3, rel=1e-12)
        assert doc["active"]["std"][m] is not None
    assert doc["active"]["tools_peak"] >= 1 and doc["active"]["llm_peak"] == 0
    code, out, err = cli_in_process("agents", "run", "--scenario", CONFIGS / "tools-only.yaml", "--runs", "1")
    assert code == 0, err
    lines = out.splitlines()
    head = next(k for k, line in enumerate(lines) if line.split()[:3] == ["active", "mean", "peak"])
    rows = {" ".join(line.split()[:-2]): line.split()[-2:] for line in lines[head + 1:head + 4]}
    run = json.loads(cli_in_process("agents", "run", "--scenario", CONFIGS / "tools-only.yaml", "--runs", "1",
                                    "--json")[1])["per_run"][0]["active"]
    assert rows["tool calls"] == [f"{run['tools_mean']:.3f}", str(run["tools_peak"])]
    assert rows["requests"] == [f"{run['requests_mean']:.3f}", str(run["requests_peak"])]


@pytest.mark.parametrize("windows", [0, MAX_WINDOWS + 1, 2.5, "x", True])
def test_a_bad_window_count_is_refused(windows):
    _, out = first_run(scenario({"a": {"work": {"cpu": 1}}}))
    with pytest.raises(ConfigError) as exc:
        active_windows(out, windows=windows)
    assert exc.value.field == "windows" and "[1, 1000000]" in str(exc.value)


def test_the_first_runs_windows_are_kept_for_the_plot():
    sc, out = first_run(scenario({"a": {"work": {"cpu": 20}}}))
    result = AgentResult(scenario_of(scenario({"a": {"work": {"cpu": 20}}}, runs=2)), keep_windows=True)
    run_runs(result.scenario, result.add)
    assert len(result.per_run) == 2
    for kept, fresh in zip(result.active_windows, active_windows(out)):
        assert kept.tobytes() == fresh.tobytes()
    assert AgentResult(sc).active_windows is None  # not kept unless asked
