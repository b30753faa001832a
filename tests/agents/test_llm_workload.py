"""Agent scenarios' llm nodes as cluster requests: the ``cluster:`` key and its resolution
(blis_fast/agents/scenario.py ``cluster_setup``/``cluster_config``) and the per-run
workload (blis_fast/agents/llm.py ``llm_workload``)."""

import copy
from pathlib import Path

import numpy as np
import pytest

from blis_fast.agents.generate import generate_run
from blis_fast.agents.llm import llm_node_rows, llm_workload, node_requests
from blis_fast.agents.scenario import MAX_CLUSTER_PATH_LEN, cluster_config, cluster_setup, load_scenario, parse_scenario
from blis_fast.config.sim import SimConfig
from blis_fast.errors import ConfigError

LLAMA = "meta-llama/llama-3.1-8b-instruct"
QWEN = "qwen/qwen2.5-7b-instruct"
ONE_MODEL = {"model": LLAMA, "hardware": "H100"}
TWO_MODELS = {"deployments": [  # different KV block sizes: each request keyed for its model's
    {"name": "llama", "model": LLAMA, "hardware": "H100", "instances": 1, "engine": {"block_size": 16}},
    {"name": "qwen", "model": QWEN, "hardware": "A100-80", "instances": 1, "engine": {"block_size": 32}},
]}

SCENARIO = {
    "resources": {"cpu": 100},
    "prefix_groups": {"sys": {"count": 2, "length": 64}},
    "types": {
        "t": {"nodes": {
            # plan and check share the system prompt (group sys, drawn index), answer has none
            "plan": {"llm": {"model": LLAMA, "prompt_tokens": 100, "output_tokens": 20, "prefix_group": "sys"}},
            "tool": {"work": {"cpu": 1}, "after": ["plan"]},
            "check": {"llm": {"model": LLAMA, "prompt_tokens": 80, "output_tokens": 5, "prefix_group": "sys"},
                      "after": ["plan"]},
            "answer": {"llm": {"model": LLAMA, "prompt_tokens": 50, "output_tokens": {"type": "exponential", "mean": 30},
                               "include_predecessor_outputs": True}, "after": ["tool", "check"]},
        }},
        "tools": {"nodes": {"only": {"work": {"cpu": 2}}}},
    },
    "arrivals": {"t": 120, "tools": 60},
    "duration_s": 10,
    "cluster": ONE_MODEL,
}


def scenario(**changes):
    d = copy.deepcopy(SCENARIO)
    d.update(changes)
    return parse_scenario(d)


@pytest.fixture(scope="module")
def built():
    sc = scenario()
    setup = cluster_setup(sc)
    run = generate_run(sc, 0)
    return sc, setup, run, llm_workload(sc, run, setup)


def test_one_request_per_llm_node_in_node_order_with_exact_lengths(built):
    sc, _setup, run, wl = built
    rows = llm_node_rows(sc, run)
    assert rows.size == 3 * int((run.request_type == 0).sum()) and rows.size > 10
    assert np.array_equal(wl.agent_node, rows) and np.all(np.diff(rows) > 0)
    # a prompt: its prefix group's shared prefix (64 tokens here), then its own tokens
    prefix = np.where(run.node_prefix_group[rows] >= 0, 64, 0)
    assert np.array_equal(wl.prompt_len, prefix + run.node_prompt_tokens[rows])
    assert np.array_equal(wl.output_len, run.node_output_tokens[rows])
    assert np.all(wl.arrival_us == -1)
    assert wl.is_dependent.all()
    wl.validate()
    mapping = node_requests(wl, run.num_nodes)
    assert np.array_equal(mapping[rows], np.arange(len(wl)))
    tools = np.setdiff1d(np.arange(run.num_nodes), rows)
    assert np.all(mapping[tools] == -1)


def test_include_predecessor_outputs_adds_the_llm_predecessors_outputs(built):
    sc, _setup, run, wl = built
    t = sc.types[0]
    answer, check = t.node("answer").index, t.node("check").index
    first = run.request_first_node[:-1][run.request_type == 0]
    # answer's direct llm predecessor is check (tool is not an llm node)
    assert np.array_equal(run.node_prompt_tokens[first + answer], 50 + run.node_output_tokens[first + check])
    req = node_requests(wl, run.num_nodes)
    assert np.array_equal(wl.prompt_len[req[first + answer]], 50 + wl.output_len[req[first + check]])


def test_prefix_group_shares_leading_prompt_keys_by_index(built):
    sc, _setup, run, wl = built
    rows = wl.agent_node
    group, index = run.node_prefix_group[rows], run.node_prefix_index[rows]
    prefix_blocks = 64 // wl.block_size
    with_group = np.flatnonzero(group >= 0)
    same = [(i, j) for i in with_group for j in with_group if i < j and index[i] == index[j]]
    other = [(i, j) for i in with_group for j in with_group if i < j and index[i] != index[j]]
    assert same and other
    for i, j in same[:50]:
        assert np.array_equal(wl.keys_of(i)[:prefix_blocks], wl.keys_of(j)[:prefix_blocks])
        assert wl.keys_of(i)[prefix_blocks] != wl.keys_of(j)[prefix_blocks]  # past the prefix: their own
        assert wl.shared_keys()[wl.key_offsets[i]:wl.key_offsets[i] + prefix_blocks].all()
    for i, j in other[:50]:
        assert not np.intersect1d(wl.keys_of(i), wl.keys_of(j)).size
    # a node without a prefix group shares nothing
    alone = np.flatnonzero(group < 0)
    assert alone.size
    assert not wl.shared_keys()[np.concatenate([np.arange(wl.key_offsets[i], wl.key_offsets[i + 1])
                                                for i in alone])].any()


def test_prefix_keys_are_the_workload_spec_generators():
    """The keys of a prefix-group node are those of a spec request starting with the same
    prefix (the same prefix tables and key chaining): checked against the prefix
    tokens hashed directly."""
    from blis_fast.workload.generate import prefix_tables
    from blis_fast.workload.workload import Workload

    sc = scenario()
    run = generate_run(sc, 0)
    wl = llm_workload(sc, run, cluster_setup(sc))
    _info, tokens, _names = prefix_tables(sc.prefix_groups, run.seed)
    i = int(np.flatnonzero(run.node_prefix_group[wl.agent_node] >= 0)[0])
    prefix = tokens[int(run.node_prefix_index[wl.agent_node[i]])]
    direct = Workload.from_tokens(np.zeros(1, np.int64), prefix, np.array([0, prefix.size]), np.zeros(1, np.int64),
                                  wl.block_size)
    assert np.array_equal(wl.keys_of(i)[:direct.block_keys.size], direct.block_keys)


def test_deterministic_and_runs_differ():
    sc = scenario()
    setup = cluster_setup(sc)
    a = llm_workload(sc, generate_run(sc, 0), setup)
    b = llm_workload(sc, generate_run(sc, 0), cluster_setup(scenario()))
    for name in ("arrival_us", "prompt_len", "output_len", "block_keys", "key_offsets", "key_shared", "model",
                 "agent_node"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    c = llm_workload(sc, generate_run(dict_runs(2), 1), setup)
    assert not np.array_equal(a.block_keys[:10], c.block_keys[:10])


def dict_runs(runs):
    d = copy.deepcopy(SCENARIO)
    d["runs"] = runs
    return parse_scenario(d)


def test_models_index_served_models_with_their_block_sizes():
    d = copy.deepcopy(SCENARIO)
    d["types"]["t"]["nodes"]["check"]["llm"]["model"] = QWEN
    d["cluster"] = TWO_MODELS
    sc = parse_scenario(d)
    setup = cluster_setup(sc)
    run = generate_run(sc, 0)
    wl = llm_workload(sc, run, setup)
    wl.validate()
    assert wl.models == (LLAMA, QWEN) and wl.model_block_sizes == (16, 32)
    check = sc.types[0].node("check").index
    is_check = run.node_template[wl.agent_node] == check
    assert np.all(wl.model[is_check] == 1) and np.all(wl.model[~is_check] == 0)
    counts = np.diff(wl.key_offsets)
    assert np.array_equal(counts, (wl.prompt_len + wl.output_len) // np.where(is_check, 32, 16))
    # the qwen nodes share their 64-token prefix as 2 blocks of 32
    q = np.flatnonzero(is_check)
    same = [(i, j) for i in q for j in q if i < j and run.node_prefix_index[wl.agent_node[i]]
            == run.node_prefix_index[wl.agent_node[j]]]
    assert same
    i, j = same[0]
    assert np.array_equal(wl.keys_of(i)[:2], wl.keys_of(j)[:2])


def test_cluster_path_relative_to_the_scenario_file_and_override(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "cluster.yaml").write_text(f"model: {LLAMA}\nhardware: H100\nengine: {{block_size: 32}}\n")
    import yaml

    d = copy.deepcopy(SCENARIO)
    d["cluster"] = "sub/cluster.yaml"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(d))
    sc = load_scenario(tmp_path / "s.yaml")
    assert sc.cluster == str(tmp_path / "sub" / "cluster.yaml")
    cfg = cluster_config(sc)
    assert isinstance(cfg, SimConfig) and cfg.engine.block_size == 32
    # --config replaces the scenario's cluster (a path, a mapping or a SimConfig)
    assert cluster_config(sc, ONE_MODEL).engine.block_size != 32
    assert cluster_config(sc, cfg) is cfg


def test_missing_cluster_is_refused_naming_the_llm_nodes():
    d = copy.deepcopy(SCENARIO)
    del d["cluster"]
    sc = parse_scenario(d)  # parsed: --config may still give it
    with pytest.raises(ConfigError) as e:
        cluster_config(sc)
    assert e.value.field == "cluster"
    assert "required: the llm nodes" in e.value.message and "types.t.nodes.plan" in e.value.message
    assert cluster_config(sc, ONE_MODEL).model  # the override gives it


def test_unserved_model_is_refused_with_one_line():
    d = copy.deepcopy(SCENARIO)
    d["types"]["t"]["nodes"]["answer"]["llm"]["model"] = "no-such/model"
    sc = parse_scenario(d)
    with pytest.raises(ConfigError) as e:
        cluster_config(sc)
    assert e.value.field == "types.t.nodes.answer.llm.model"
    assert "not served" in e.value.message and LLAMA in e.value.message and "\n" not in str(e.value)
    run = generate_run(sc, 0)
    with pytest.raises(ConfigError, match="types.t.nodes.answer.llm.model"):
        llm_workload(sc, run, cluster_setup(scenario()))  # a setup resolved for another scenario


@pytest.mark.parametrize("cluster, field, words", [
    ("missing.yaml", "cluster", "file not found"),
    ("x" * (MAX_CLUSTER_PATH_LEN + 1), "cluster", "at most 4096 characters"),
    (12, "cluster", "YAML path or a mapping"),
    ([ONE_MODEL], "cluster", "YAML path or a mapping"),
    ({"engine": {"block_size": -3}}, "cluster.engine.block_size", ""),
    ({"no_such_key": 1}, "cluster.", ""),
])
def test_bad_cluster_is_refused_naming_the_field(tmp_path, cluster, field, words):
    d = copy.deepcopy(SCENARIO)
    d["cluster"] = cluster
    with pytest.raises(ConfigError) as e:
        cluster_config(parse_scenario(d, base_dir=tmp_path))
    assert e.value.field.startswith(field) and words in str(e.value)
    assert "\n" not in str(e.value)


def test_bad_cluster_file_names_the_file_and_the_field(tmp_path):
    (tmp_path / "c.yaml").write_text("engine: {block_size: -3}\n")
    d = copy.deepcopy(SCENARIO)
    d["cluster"] = "c.yaml"
    with pytest.raises(ConfigError) as e:
        cluster_config(parse_scenario(d, base_dir=tmp_path))
    assert e.value.field.startswith("cluster '") and e.value.field.endswith("engine.block_size")
    assert "c.yaml" in e.value.field


def test_prompt_under_one_token_is_refused_naming_the_node(built):
    sc, setup, run, _wl = built
    import dataclasses

    prompt = run.node_prompt_tokens.copy()
    prompt[llm_node_rows(sc, run)[4]] = 0
    with pytest.raises(ConfigError) as e:
        llm_workload(sc, dataclasses.replace(run, node_prompt_tokens=prompt), setup)
    assert e.value.field.endswith(".llm.prompt_tokens") and ">= 1" in e.value.message


def test_cluster_is_kept_unparsed_until_asked_for():
    """Fast twin of the fresh-process test below: the scenario keeps the mapping as given
    (a bad one parses; ``cluster_config`` refuses it)."""
    bad = {"engine": {"block_size": -3}}
    sc = scenario(cluster=bad)
    assert sc.cluster == bad
    assert scenario(cluster=None).cluster is None


@pytest.mark.slow
def test_a_scenario_with_a_cluster_parses_without_the_config_machinery():
    import json
    import subprocess
    import sys

    code = ("import json, sys\n"
            "from blis_fast.agents.scenario import parse_scenario\n"
            "from blis_fast.agents.generate import generate_run\n"
            f"generate_run(parse_scenario(json.loads({json.dumps(SCENARIO)!r})), 0)\n"
            "print([m for m in ('blis_fast.config.sim', 'blis_fast.run.resolve', 'numba') if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
