"""Agent scenario files (blis_fast/agents/scenario.py) and the arrays of a run
(blis_fast/agents/generate.py): parsing, every refusal (one line naming the field),
deterministic generation, topological layout, the shipped scenarios."""

import copy
from pathlib import Path

import numpy as np
import pytest

from blis_fast.agents.generate import build_templates, generate_run, successors_csr
from blis_fast.agents.scenario import (
    MAX_NODES_PER_TYPE,
    MAX_RESOURCES,
    check_models,
    load_scenario,
    parse_scenario,
)
from blis_fast.errors import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "agents"

BASE = {
    "resources": {"cpu": 100, "net": {"capacity": 50, "max_consumers": 4}},
    "types": {
        "t": {
            "weight": 2,
            "nodes": {
                # declared out of order on purpose: the topological order is c, a, b, d
                "a": {"work": {"cpu": 10}, "after": ["c"]},
                "b": {"llm": {"model": "m", "prompt_tokens": 100, "output_tokens": 7}, "after": ["c"]},
                "c": {"work": {"cpu": {"type": "exponential", "mean": 2}, "net": 5}},
                "d": {"llm": {"model": "m", "prompt_tokens": 10, "output_tokens": 3,
                              "include_predecessor_outputs": True}, "after": ["a", "b"]},
            },
        },
        "solo": {"nodes": {"only": {"work": {"net": 1}}}},
    },
    "arrivals": {"t": 600, "solo": 1200},
    "duration_s": 30,
    "seed": 5,
    "runs": 3,
}


def scenario_with(edit=None, **top):
    data = copy.deepcopy(BASE)
    data.update(top)
    if edit is not None:
        edit(data)
    return data


def refused(data) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_scenario(data)
    err = info.value
    assert "\n" not in str(err)
    return err


# ----------------------------------------------------------------------------- parsing


def test_parse_fields_defaults_and_topological_order():
    s = parse_scenario(copy.deepcopy(BASE))
    assert [r.name for r in s.resources] == ["cpu", "net"]
    assert s.resources[0].capacity == 100.0 and s.resources[0].max_consumers is None
    assert s.resources[1].max_consumers == 4
    t, solo = s.types
    assert [n.name for n in t.nodes] == ["c", "a", "b", "d"]
    assert [n.index for n in t.nodes] == [0, 1, 2, 3]
    assert t.node("d").after == (1, 2) and t.node("c").successors == (1, 2)
    assert all(p < n.index for n in t.nodes for p in n.after)
    assert t.weight == 2.0 and solo.weight == 1.0
    assert t.rate_per_min == 600 and solo.rate_per_min == 1200
    assert s.share == "dynamic" and s.seed == 5 and s.runs == 3 and s.run_seed(2) == 7
    assert t.node("c").work[0].type == "exponential" and t.node("c").work[1].value == 5
    assert t.node("b").is_llm and t.node("d").llm.include_predecessor_outputs
    assert not t.node("b").llm.include_predecessor_outputs
    assert s.models() == ["m"]


def test_defaults_and_static_share():
    data = scenario_with(share="static")
    del data["seed"], data["runs"]
    s = parse_scenario(data)
    assert s.share == "static" and s.seed == 42 and s.runs == 1


def test_type_without_arrivals_gets_rate_zero_and_no_requests():
    s = parse_scenario(scenario_with(arrivals={"t": 60}))
    assert s.types[1].rate_per_min == 0.0
    run = generate_run(s, 0)
    assert run.num_requests > 0 and not (run.request_type == 1).any()


def test_check_models():
    s = parse_scenario(copy.deepcopy(BASE))
    check_models(s, ["m", "other"])
    with pytest.raises(ConfigError) as info:
        check_models(s, ["other"])
    assert info.value.field == "types.t.nodes.b.llm.model"
    assert "not served" in info.value.message and "other" in info.value.message


# ----------------------------------------------------------------------------- refusals


def _set_node(name, value, type_name="t"):
    def edit(d):
        d["types"][type_name]["nodes"][name] = value
    return edit


REFUSALS = [
    # (case, data, field, words in the message)
    ("cycle", scenario_with(_set_node("c", {"work": {"cpu": 1}, "after": ["d"]})),
     "types.t.nodes.a.after", ["cycle", "a -> d -> c -> a"]),  # b waits on the cycle but is not on it
    ("self loop", scenario_with(_set_node("a", {"work": {"cpu": 1}, "after": ["a"]})),
     "types.t.nodes.a.after", ["cycle", "a -> a"]),
    ("unknown predecessor", scenario_with(_set_node("a", {"work": {"cpu": 1}, "after": ["zz"]})),
     "types.t.nodes.a.after", ["unknown predecessor", "zz"]),
    ("duplicate predecessor", scenario_with(_set_node("a", {"work": {"cpu": 1}, "after": ["c", "c"]})),
     "types.t.nodes.a.after", ["twice"]),
    ("negative work", scenario_with(_set_node("a", {"work": {"cpu": -3}})),
     "types.t.nodes.a.work.cpu", [">= 0"]),
    ("negative gaussian work", scenario_with(_set_node("a", {"work": {"cpu": {"type": "gaussian", "mean": -1, "std": 1}}})),
     "types.t.nodes.a.work.cpu.mean", [">= 0"]),
    ("negative work min", scenario_with(_set_node("a", {"work": {"cpu": {"type": "uniform", "min": -1, "max": 3}}})),
     "types.t.nodes.a.work.cpu.min", ["[0, 1e+15]"]),
    ("unknown resource in work", scenario_with(_set_node("a", {"work": {"gpu": 1}})),
     "types.t.nodes.a.work.gpu", ["unknown resource"]),
    ("empty work", scenario_with(_set_node("a", {"work": {}})),
     "types.t.nodes.a.work", ["at least one resource"]),
    ("work and llm", scenario_with(_set_node("a", {"work": {"cpu": 1}, "llm": {"model": "m"}})),
     "types.t.nodes.a", ["exactly one of work"]),
    ("neither work nor llm", scenario_with(_set_node("a", {"after": ["c"]})),
     "types.t.nodes.a", ["exactly one of work"]),
    ("negative capacity", scenario_with(resources={"cpu": -5, "net": 1}),
     "resources.cpu", ["(0, 1e+15]", "units per second"]),
    ("zero capacity", scenario_with(resources={"cpu": 0, "net": 1}),
     "resources.cpu", ["(0, 1e+15]"]),
    ("resource without capacity", scenario_with(resources={"cpu": 100, "net": {"max_consumers": 3}}),
     "resources.net.capacity", ["required"]),
    ("resource null", scenario_with(resources={"cpu": 100, "net": None}),
     "resources.net", ["required"]),
    ("bad max_consumers", scenario_with(resources={"cpu": 100, "net": {"capacity": 1, "max_consumers": 0}}),
     "resources.net.max_consumers", ["[1, "]),
    ("unknown top key", scenario_with(duration=3), "duration", ["unknown key"]),
    ("unknown node key", scenario_with(_set_node("a", {"work": {"cpu": 1}, "afterr": ["c"]})),
     "types.t.nodes.a.afterr", ["unknown key"]),
    ("unknown resource key", scenario_with(resources={"cpu": {"capacity": 1, "speed": 2}, "net": 1}),
     "resources.cpu.speed", ["unknown key"]),
    ("unknown llm key", scenario_with(_set_node("b", {"llm": {"model": "m", "prompt_tokens": 1, "output_tokens": 1,
                                                              "temperature": 0}})),
     "types.t.nodes.b.llm.temperature", ["unknown key"]),
    ("llm without model", scenario_with(_set_node("b", {"llm": {"prompt_tokens": 1, "output_tokens": 1}})),
     "types.t.nodes.b.llm.model", ["required"]),
    ("llm negative output", scenario_with(_set_node("b", {"llm": {"model": "m", "prompt_tokens": 1,
                                                                  "output_tokens": -2}})),
     "types.t.nodes.b.llm.output_tokens", [">= 0"]),
    ("llm unknown prefix group", scenario_with(_set_node("b", {"llm": {"model": "m", "prompt_tokens": 1,
                                                                       "output_tokens": 1, "prefix_group": "g"}})),
     "types.t.nodes.b.llm.prefix_group", ["unknown prefix group"]),
    ("llm include not bool", scenario_with(_set_node("b", {"llm": {"model": "m", "prompt_tokens": 1, "output_tokens": 1,
                                                                   "include_predecessor_outputs": "yes"}})),
     "types.t.nodes.b.llm.include_predecessor_outputs", ["true or false"]),
    ("bad distribution", scenario_with(_set_node("a", {"work": {"cpu": {"type": "zeta"}}})),
     "types.t.nodes.a.work.cpu.type", ["unknown distribution"]),
    ("arrival of unknown type", scenario_with(arrivals={"t": 1, "nope": 2}), "arrivals.nope", ["unknown request type"]),
    ("negative rate", scenario_with(arrivals={"t": -1}), "arrivals.t", ["requests per minute"]),
    ("rate too high", scenario_with(arrivals={"t": 1e12}), "arrivals.t", ["requests per minute"]),
    ("zero duration", scenario_with(duration_s=0), "duration_s", ["(0, 1e+09]"]),
    ("duration too long", scenario_with(duration_s=1e12), "duration_s", ["(0, 1e+09]"]),
    ("too many requests", scenario_with(arrivals={"t": 6e7}, duration_s=1e6), "arrivals", ["more than"]),
    ("runs zero", scenario_with(runs=0), "runs", ["[1, 10000]"]),
    ("runs not integral", scenario_with(runs=1.5), "runs", ["integer"]),
    ("negative seed", scenario_with(seed=-1), "seed", ["integer"]),
    ("bad share", scenario_with(share="fair"), "share", ["dynamic, static"]),
    ("negative weight", scenario_with(lambda d: d["types"]["t"].update(weight=-1)), "types.t.weight", ["[1, 1000000]"]),
    ("fractional weight", scenario_with(lambda d: d["types"]["t"].update(weight=1.5)), "types.t.weight", ["integer"]),
    ("missing nodes", scenario_with(lambda d: d["types"]["t"].pop("nodes")), "types.t.nodes", ["required"]),
    ("empty nodes", scenario_with(lambda d: d["types"]["t"].update(nodes={})), "types.t.nodes", ["non-empty"]),
    ("missing resources", scenario_with(lambda d: d.pop("resources")), "resources", ["required"]),
    ("missing duration", scenario_with(lambda d: d.pop("duration_s")), "duration_s", ["required"]),
    ("too many resources", scenario_with(resources={f"r{k}": 1 for k in range(MAX_RESOURCES + 1)}),
     "resources", [f"at most {MAX_RESOURCES}"]),
    ("too many nodes", scenario_with(lambda d: d["types"]["solo"].update(
        nodes={f"n{k}": {"work": {"cpu": 1}} for k in range(MAX_NODES_PER_TYPE + 1)})),
     "types.solo.nodes", [f"at most {MAX_NODES_PER_TYPE}"]),
    ("node description not text", scenario_with(_set_node("a", {"work": {"cpu": 1}, "description": 5})),
     "types.t.nodes.a.description", ["string"]),
    ("not a mapping", ["resources"], "", ["mapping"]),
]


@pytest.mark.parametrize("case,data,field,words", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_field(case, data, field, words):
    err = refused(data)
    assert err.field == (field or err.field)
    if field:
        assert str(err).startswith(field + ":")
    for w in words:
        assert w in err.message, (case, err.message)


def test_long_names_are_shortened_and_escaped_in_messages():
    err = refused(scenario_with(_set_node("a", {"work": {"cpu": 1}, "after": ["\x1b[31m" + "x" * 5000]})))
    assert "\x1b" not in str(err) and len(str(err)) < 800


def test_load_scenario_reads_a_file_and_refuses_a_missing_one(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_scenario(tmp_path / "missing.yaml")
    assert info.value.field.startswith("--scenario")
    f = tmp_path / "s.yaml"
    f.write_text("resources: {cpu: 10}\ntypes: {a: {nodes: {x: {work: {cpu: 1}}}}}\narrivals: {a: 6}\n"
                 "duration_s: 10\n")
    s = load_scenario(f)
    assert s.source == str(f) and s.types[0].nodes[0].work[0].value == 1.0


# ----------------------------------------------------------------------------- generation


def test_generation_is_deterministic_per_run_and_differs_between_runs():
    s = parse_scenario(copy.deepcopy(BASE))
    a, b, c = generate_run(s, 1), generate_run(parse_scenario(copy.deepcopy(BASE)), 1), generate_run(s, 2)
    for name in ("request_type", "request_arrival_us", "request_first_node", "node_work", "node_prompt_tokens",
                 "node_output_tokens"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.seed == 6 and c.seed == 7
    assert not np.array_equal(a.request_arrival_us, c.request_arrival_us)


def test_adding_a_type_does_not_change_another_types_draws():
    s1 = parse_scenario(scenario_with(arrivals={"t": 600}))
    s2 = parse_scenario(copy.deepcopy(BASE))
    r1, r2 = generate_run(s1, 0), generate_run(s2, 0)
    m1, m2 = r1.request_type == 0, r2.request_type == 0
    assert np.array_equal(r1.request_arrival_us[m1], r2.request_arrival_us[m2])
    rows1 = r1.node_request >= 0
    rows1 = np.isin(r1.node_request, np.flatnonzero(m1)) & rows1
    rows2 = np.isin(r2.node_request, np.flatnonzero(m2))
    assert np.array_equal(r1.node_work[rows1], r2.node_work[rows2])


def test_counts_arrivals_and_layout():
    s = parse_scenario(scenario_with(duration_s=600))
    run = generate_run(s, 0)
    n_t = int((run.request_type == 0).sum())
    n_solo = int((run.request_type == 1).sum())
    # Poisson counts: mean 6000 and 12000, well within 5 standard deviations
    assert abs(n_t - 6000) < 5 * 6000**0.5 and abs(n_solo - 12000) < 5 * 12000**0.5
    assert run.num_nodes == 4 * n_t + n_solo
    assert np.all(np.diff(run.request_arrival_us) >= 0)
    assert run.request_arrival_us[0] >= 0 and run.request_arrival_us[-1] <= 600 * 10**6
    assert np.array_equal(np.diff(run.request_first_node), np.where(run.request_type == 0, 4, 1))
    assert run.node_work.shape == (run.num_nodes, 2) and run.node_work.dtype == np.float64
    t_rows = run.request_first_node[:-1][run.request_type == 0]
    # template c (index 0): cpu ~ exponential(2), net 5; a: cpu 10; b, d: llm (no work)
    assert np.all(run.node_work[t_rows, 1] == 5) and abs(run.node_work[t_rows, 0].mean() - 2) < 0.2
    assert np.all(run.node_work[t_rows + 1] == [10, 0]) and np.all(run.node_work[t_rows + 2] == 0)
    assert np.all(run.node_prompt_tokens[t_rows + 2] == 100) and np.all(run.node_output_tokens[t_rows + 2] == 7)
    # d includes its llm predecessor b's output (7) but not the tool a
    assert np.all(run.node_prompt_tokens[t_rows + 3] == 17) and np.all(run.node_output_tokens[t_rows + 3] == 3)
    assert np.all(run.node_prompt_tokens[t_rows] == -1) and np.all(run.node_prefix_group == -1)
    assert np.array_equal(run.node_n_pred[t_rows[:3][:, None] + np.arange(4)], [[0, 1, 1, 2]] * 3)


def test_successors_follow_a_topological_order():
    s = parse_scenario(copy.deepcopy(BASE))
    run = generate_run(s, 0)
    templates = build_templates(s)
    assert templates.type_node_offset.tolist() == [0, 4, 5]
    assert templates.template_n_pred.tolist() == [0, 1, 1, 2, 0]
    assert templates.template_is_llm.tolist() == [False, False, True, True, False]
    assert templates.resource_max_consumers.tolist() == [-1, 4] and templates.type_weight.tolist() == [2.0, 1.0]
    offset, succ = successors_csr(run, templates)
    # every edge goes forward within its request, and the in-degrees are the pending counts
    src = np.repeat(np.arange(run.num_nodes), np.diff(offset))
    assert np.all(succ > src) and np.array_equal(run.node_request[succ], run.node_request[src])
    assert np.array_equal(np.bincount(succ, minlength=run.num_nodes), run.node_n_pred)
    # an event loop over the arrays finishes every node, each after its predecessors
    pending = run.node_n_pred.copy()
    done = np.zeros(run.num_nodes, bool)
    for q in range(run.num_requests):
        stack = [i for i in range(run.request_first_node[q], run.request_first_node[q + 1]) if pending[i] == 0]
        while stack:
            i = stack.pop()
            done[i] = True
            for j in succ[offset[i]:offset[i + 1]]:
                pending[j] -= 1
                if pending[j] == 0:
                    stack.append(j)
    assert done.all()


def test_prefix_groups_are_drawn_by_popularity():
    data = scenario_with(
        _set_node("b", {"llm": {"model": "m", "prompt_tokens": 5, "output_tokens": 1, "prefix_group": "sys"},
                         "after": ["c"]}),
        prefix_groups={"sys": {"count": 3, "length": 100, "popularity": {"type": "weights", "weights": [1, 0, 1]}}})
    run = generate_run(parse_scenario(data), 0)
    rows = run.request_first_node[:-1][run.request_type == 0] + 2
    assert np.all(run.node_prefix_group[rows] == 0)
    assert set(run.node_prefix_index[rows].tolist()) == {0, 2}
    assert np.sum(run.node_prefix_group >= 0) == rows.size


def test_prompt_overflow_with_predecessor_outputs_is_refused():
    data = scenario_with(_set_node("b", {"llm": {"model": "m", "prompt_tokens": 1, "output_tokens": 2**31 - 2},
                                         "after": ["c"]}))
    with pytest.raises(ConfigError) as info:
        generate_run(parse_scenario(data), 0)
    assert info.value.field == "types.t.nodes.d.llm.prompt_tokens"


def test_run_index_out_of_range_is_refused():
    with pytest.raises(ConfigError) as info:
        generate_run(parse_scenario(copy.deepcopy(BASE)), 3)
    assert info.value.field == "runs"


# ----------------------------------------------------------------------------- shipped scenarios


@pytest.mark.parametrize("name", ["web-search", "deep-research-sla", "mixed", "tools-only"])
def test_shipped_scenarios_load_and_generate(name):
    s = load_scenario(CONFIGS / f"{name}.yaml")
    run = generate_run(s, 0)
    expected_requests, expected_nodes = s.expected_size()
    assert abs(run.num_requests - expected_requests) < 5 * expected_requests**0.5 + 1
    assert np.all(run.node_work >= 0) and run.num_nodes > run.num_requests


def test_founding_scenarios_parameters():
    web = load_scenario(CONFIGS / "web-search.yaml")
    caps = {r.name: r.capacity for r in web.resources}
    assert caps == {"cpu": 1000, "npu": 256, "memory": 1024000, "network": 10000, "disk": 5000}
    assert (web.types[0].rate_per_min, web.duration_s, web.runs, web.seed) == (100, 3600, 10, 42)
    mixed = load_scenario(CONFIGS / "mixed.yaml")
    assert {t.name: t.rate_per_min for t in mixed.types} == {"web-search": 60, "product-matching": 30,
                                                             "deep-research": 10}


# ----------------------------------------------------------------------------- hostile values

HOSTILE = [None, True, -1, 0, 1e308, float("nan"), float("inf"), "x", "", "\x00", [], {}, [1, 2],
           {"type": "constant"}, {"type": "lognormal", "mu": 99, "sigma": 99}, 2**70, "1e6", {"a": 1}, ["c", "c"],
           {"capacity": None}, 5e-324]


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for k, v in enumerate(value):
            yield from _paths(v, prefix + (k,))


def test_hostile_values_anywhere_give_a_one_line_config_error_or_a_valid_run():
    import random

    rng = random.Random(26)
    paths = [p for p in _paths(BASE) if p]
    outcomes = set()
    for _ in range(300):
        data = copy.deepcopy(BASE)
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(paths)
            parent = data
            try:
                for k in path[:-1]:
                    parent = parent[k]
                parent[path[-1]] = rng.choice(HOSTILE)
            except (KeyError, IndexError, TypeError):
                continue  # an earlier change removed the path
        try:
            run = generate_run(parse_scenario(data), 0)
        except ConfigError as err:
            assert "\n" not in str(err) and len(str(err)) < 1000
            outcomes.add("refused")
        else:
            assert np.all(np.isfinite(run.node_work)) and np.all(run.node_work >= 0)
            outcomes.add("ran")
    assert outcomes == {"refused", "ran"}
