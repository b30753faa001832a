"""Agent DAGs whose llm nodes are requests to the simulated cluster, in one event loop with
the tools (kernels/engine/agents.py, docs/semantics.md §17): causality between nodes and
their requests, prefix-group cache hits, latency that grows with the cluster's load while a
tools-only type's does not, determinism, refusals."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from blis_fast.agents import run_scenario
from blis_fast.agents.generate import build_templates, generate_run
from blis_fast.agents.run import scenario_of, simulate_run
from blis_fast.agents.scenario import cluster_setup
from blis_fast.errors import ConfigError
from blis_fast_kernels.schema import RequestState
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

MODEL = "meta-llama/llama-3.1-8b-instruct"
CLUSTER = {"model": MODEL, "hardware": "H100", "deployment": {"num_instances": 2},
           "simulation": {"check_invariants": True}}


def scenario(rate_agent=30.0, rate_tools=30.0, instances=2, prefix=True, duration_s=20.0):
    """Two types: ``agent`` (a tool, then two llm calls sharing a system prompt when
    ``prefix``, then a tool) and ``tools`` (tools only, on a resource of its own)."""
    llm = {"model": MODEL, "prompt_tokens": {"type": "uniform", "min": 200, "max": 600},
           "output_tokens": {"type": "uniform", "min": 20, "max": 60}}
    if prefix:
        llm["prefix_group"] = "system"
    return {
        "name": "llm-test",
        "cluster": {**CLUSTER, "deployment": {"num_instances": instances}},
        "resources": {"cpu": 100, "io": 100},
        "prefix_groups": {"system": {"count": 1, "length": {"type": "constant", "value": 1024}}},
        "types": {
            "agent": {"nodes": {"fetch": {"work": {"cpu": 2}},
                                "plan": {"llm": llm, "after": ["fetch"]},
                                "act": {"llm": {**llm, "include_predecessor_outputs": True}, "after": ["plan"]},
                                "store": {"work": {"cpu": 1}, "after": ["act"]}}},
            "tools": {"nodes": {"a": {"work": {"io": {"type": "exponential", "mean": 5}}},
                                "b": {"work": {"io": 2}, "after": ["a"]}}},
        },
        "arrivals": {"agent": rate_agent, "tools": rate_tools},
        "duration_s": duration_s, "seed": 3, "runs": 1,
    }


def one_run(data):
    sc = scenario_of(data)
    templates, run = build_templates(sc), generate_run(sc, 0)
    return sc, run, simulate_run(sc, templates, run, cluster_setup(sc))


def test_llm_nodes_are_cluster_requests_released_at_their_start_and_done_at_their_last_token():
    sc, run, out = one_run(scenario())
    st = out.cluster.state
    assert st.loop[0]["status"] == 0
    assert (out.node_finish_us >= 0).all()  # every node of every request finished
    llm = np.flatnonzero(run.node_prompt_tokens >= 0)
    reqs = st.reqs[:llm.size]
    assert (reqs["state"] == RequestState.COMPLETED).all()
    # request k is llm node llm[k]: it arrives when the node starts, the node ends at its last token
    assert np.array_equal(reqs["arrival_us"], out.node_start_us[llm])
    assert np.array_equal(reqs["last_token_us"], out.node_finish_us[llm])
    # the prompt: the group's 1,024-token system prompt, then the node's own (and predecessors') tokens
    assert np.array_equal(reqs["prompt_len"], 1024 + run.node_prompt_tokens[llm])
    assert (reqs["first_token_us"] > reqs["arrival_us"]).all()
    # every node starts when its last predecessor finishes (roots: at their request's arrival)
    templates = build_templates(sc)
    from blis_fast.agents.generate import successors_csr
    ptr, succ = successors_csr(run, templates)
    last_pred = np.full(run.num_nodes, -1, np.int64)
    for n in range(run.num_nodes):
        for s in succ[ptr[n]:ptr[n + 1]]:
            last_pred[s] = max(last_pred[s], out.node_finish_us[n])
    roots = run.node_n_pred == 0
    assert np.array_equal(out.node_start_us[~roots], last_pred[~roots])
    assert np.array_equal(out.node_start_us[roots], run.request_arrival_us[run.node_request[roots]])


def test_an_llm_node_that_includes_its_predecessors_outputs_sends_them_in_its_prompt():
    _, run, out = one_run(scenario(duration_s=4.0))
    agent = run.request_type[run.node_request] == 0
    plan, act = agent & (run.node_template == 1), agent & (run.node_template == 2)
    own = run.node_prompt_tokens[act] - run.node_output_tokens[plan]  # act's own part of its prompt
    assert own.min() >= 200 and own.max() <= 600
    assert not np.array_equal(run.node_prompt_tokens[act], own)
    reqs = out.cluster.state.reqs
    rows = np.cumsum(run.node_prompt_tokens >= 0) - 1  # request row of each llm node
    assert np.array_equal(reqs["prompt_len"][rows[act]], 1024 + run.node_prompt_tokens[act])


def test_llm_nodes_of_a_prefix_group_hit_the_clusters_prefix_cache():
    shared = run_scenario(scenario()).llm
    alone = run_scenario(scenario(prefix=False)).llm
    assert shared["requests"] == alone["requests"] > 0
    assert shared["prefix_cache_hit_rate"] > 0.5  # the 1,024-token system prompt of every call is cached
    assert shared["prefix_cache_hit_rate"] > alone["prefix_cache_hit_rate"] + 0.3


def test_agent_latency_grows_with_cluster_load_while_a_tools_only_types_does_not():
    light = run_scenario(scenario(rate_agent=30.0)).types
    heavy = run_scenario(scenario(rate_agent=1500.0, instances=1)).types
    assert heavy["agent"]["latency_mean_s"] > 1.5 * light["agent"]["latency_mean_s"]
    assert heavy["agent"]["latency_p95_s"] > light["agent"]["latency_p95_s"]
    # the tools-only type draws its own arrivals and work and shares no resource with the agents
    assert heavy["tools"] == light["tools"]


def test_runs_are_deterministic_and_the_json_names_the_llm_calls(tmp_path):
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario(duration_s=5.0)))
    a = cli_in_process("agents", "run", "--scenario", path, "--json")
    b = cli_in_process("agents", "run", "--scenario", path, "--json")
    assert a[0] == 0 and a[1] == b[1]
    doc = json.loads(a[1])
    assert set(doc["types"]) == {"agent", "tools"} and doc["llm"]["completed"] == doc["llm"]["requests"] > 0
    assert doc["types"]["agent"]["completed"] > 0


def test_a_config_given_apart_replaces_the_scenarios_cluster(tmp_path):
    import yaml

    data = scenario(duration_s=5.0)
    cfg = tmp_path / "cluster.yaml"
    cfg.write_text(yaml.safe_dump({**CLUSTER, "deployment": {"num_instances": 1}}))
    one = run_scenario(data, config=cfg).types["agent"]
    assert one == run_scenario({**data, "cluster": {**CLUSTER, "deployment": {"num_instances": 1}}}).types["agent"]
    assert one != run_scenario(data).types["agent"]


def test_refusals_name_the_node_or_the_cluster(tmp_path):
    bad = copy.deepcopy(scenario())
    bad["types"]["agent"]["nodes"]["plan"]["llm"]["model"] = "no-such-model"
    with pytest.raises(ConfigError) as exc:
        run_scenario(bad)
    assert exc.value.field == "types.agent.nodes.plan.llm.model"
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(bad))
    line = assert_clean_error(*cli_in_process("agents", "run", "--scenario", path), ["no-such-model"])
    assert line.startswith("error: types.agent.nodes.plan.llm.model: ")
    missing = {k: v for k, v in scenario().items() if k != "cluster"}
    with pytest.raises(ConfigError) as exc:
        run_scenario(missing)
    assert exc.value.field == "cluster"


def test_the_clusters_answer_to_an_agents_calls_is_that_to_the_same_requests_sent_at_those_times():
    """Exact: replaying the llm nodes' requests as an ordinary workload, each arriving when
    its node started, gives every request the same first and last token to the µs (the
    cluster cannot tell where a request came from)."""
    from dataclasses import replace

    from blis_fast.agents.llm import llm_workload
    from blis_fast.run.session import RunSession

    sc, run, out = one_run(scenario(rate_agent=600.0, duration_s=10.0))
    agent_reqs = out.cluster.state.reqs
    wl = llm_workload(sc, run, cluster_setup(sc))
    plain = replace(wl, agent_node=None, arrival_us=agent_reqs["arrival_us"][:len(wl)].copy())
    st = RunSession(cluster_setup(sc), plain).run().state
    for f in ("arrival_us", "first_token_us", "last_token_us", "instance"):
        assert np.array_equal(st.reqs[f][:len(wl)], agent_reqs[f][:len(wl)]), f
    assert len(wl) > 100 and st.loop[0]["steps"] == out.cluster.state.loop[0]["steps"]
