"""An agent run's llm nodes as a workload of the simulated cluster (docs/agents.md "llm
nodes", docs/semantics.md §17): one request per llm node, in node order, whose arrival the
run decides (``Workload.agent_node``: the node it is the call of; arrival -1 until the node
starts).

A node's prompt is its prefix group's shared prefix (when it names one: the prefix's tokens
come from the group's own stream, as a workload spec's prefix groups), then its own
``prompt_tokens``, plus the outputs of its direct llm predecessors when it includes them
(``generate.py`` drew them); its fresh blocks are its own (a content seed per request).
The keys are built by the workload generator's key builder (``Requests.to_workload``), so
two calls with the same prefix share its blocks on the cluster exactly as two requests of a
workload spec do.  Each request asks for its node's ``model`` among the cluster's served
models (keyed per model block size when those differ).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from blis_fast.agents.generate import AgentRun
from blis_fast.agents.scenario import Scenario, check_models
from blis_fast.config.deployments import model_block_sizes
from blis_fast.config.validate import MAX_REQUEST_TOKENS, key_name
from blis_fast.errors import ConfigError
from blis_fast.rng import subsystem_rng
from blis_fast.workload.generate import Requests, prefix_tables
from blis_fast.workload.workload import Workload


def llm_node_rows(scenario: Scenario, run: AgentRun) -> np.ndarray:
    """The rows of ``run``'s llm nodes, in node order: request k of the llm workload is node
    ``llm_node_rows(scenario, run)[k]``."""
    type_offset = np.cumsum([0] + [len(t.nodes) for t in scenario.types])
    is_llm = np.array([n.llm is not None for t in scenario.types for n in t.nodes], bool)
    return np.flatnonzero(is_llm[type_offset[run.request_type[run.node_request]] + run.node_template])


def node_requests(workload: Workload, num_nodes: int) -> np.ndarray:
    """int64[num_nodes]: each node's request row in ``workload`` (an llm workload), -1 for a
    tool."""
    out = np.full(num_nodes, -1, np.int64)
    out[workload.agent_node] = np.arange(len(workload), dtype=np.int64)
    return out


def _template_models(scenario: Scenario, served: tuple[str, ...]) -> tuple[np.ndarray, list]:
    """(served-model id per template node, -1 for a tool; the template nodes in order)."""
    index = {m: k for k, m in enumerate(served)}
    nodes = [n for t in scenario.types for n in t.nodes]
    return np.array([index[n.llm.model] if n.llm is not None else -1 for n in nodes], np.int32), nodes


def llm_workload(scenario: Scenario, run: AgentRun, setup) -> Workload:
    """The cluster workload of ``run``'s llm nodes (module docstring) for ``setup`` (a
    resolved cluster config, blis_fast.run.resolve).  ConfigError naming the node's
    ``prompt_tokens`` when a prompt with its prefix and the output would exceed a request's
    token limit."""
    served = tuple(setup.served_models)
    check_models(scenario, served)
    idx = llm_node_rows(scenario, run)
    n = idx.size
    type_offset = np.cumsum([0] + [len(t.nodes) for t in scenario.types])
    template = type_offset[run.request_type[run.node_request[idx]]] + run.node_template[idx]
    model_of, templates = _template_models(scenario, served)
    info, prefix_tokens, prefix_names = prefix_tables(scenario.prefix_groups, run.seed)
    group_names = list(scenario.prefix_groups)
    prefix_id = np.full(n, -1, np.int64)
    prefix_len = np.zeros(n, np.int64)
    grouped = run.node_prefix_group[idx] >= 0
    for g, name in enumerate(group_names):
        mine = grouped & (run.node_prefix_group[idx] == g)
        if mine.any():
            base, lens, _ = info[name]
            k = run.node_prefix_index[idx][mine].astype(np.int64)
            prefix_id[mine], prefix_len[mine] = base + k, lens[k]
    own, output = run.node_prompt_tokens[idx], run.node_output_tokens[idx]
    for values, what, low in ((own, "prompt_tokens", 1), (output, "output_tokens", 0)):
        if n and int(values.min()) < low:  # (a distribution's draws are checked when drawn: a hand-built run)
            node = templates[int(template[int(np.argmin(values))])]
            raise ConfigError(f"{node.llm.path}.{what}", f"node {key_name(node.name)}: must be >= {low} tokens, "
                                                         f"got {int(values.min())}")
    prompt = prefix_len + own
    if n and int((prompt + output).max()) > MAX_REQUEST_TOKENS:
        worst = int(np.argmax(prompt + output))
        node = templates[int(template[worst])]
        raise ConfigError(f"{node.llm.path}.prompt_tokens",
                          f"node {key_name(node.name)}: its prefix ({int(prefix_len[worst])} tokens), prompt and "
                          f"output reach {int(prompt[worst] + output[worst])} tokens, more than {MAX_REQUEST_TOKENS}")
    i32, i64 = np.zeros(n, np.int32), np.int64
    columns = {
        "arrival_us": np.full(n, -1, i64), "client": i32, "tenant": i32.copy(), "slo_class": i32.copy(),
        "priority_class": i32.copy(), "session": np.full(n, -1, i64), "turn": i32.copy(),
        "prompt_len": prompt.astype(i64), "output_len": output.astype(i64), "prefix_id": prefix_id,
        "prefix_len": prefix_len, "content_seed": subsystem_rng(run.seed, "agents.llm.content").integers(
            0, 1 << 62, size=n, dtype=i64),
        "next_request": np.full(n, -1, i64), "follow_delay_us": np.zeros(n, i64),
    }
    names = {"client": ["agents"], "tenant": ["default"], "slo_class": ["default"], "priority_class": ["default"],
             "prefix": prefix_names}
    requests = Requests(columns, names, {}, prefix_tokens)
    description = {"kind": "agents", "scenario": scenario.name, "run": run.run_index, "seed": run.seed}
    sizes = model_block_sizes(setup.config.deployment_list())
    model = model_of[template] if n else np.zeros(0, np.int32)
    wl = replace(requests.to_workload(sizes[0], description, validate=False), model=model, models=served)
    if len(set(sizes)) > 1:  # each request keyed for its model's block size
        keyed = {bs: requests.to_workload(bs, description, validate=False) for bs in sorted(set(sizes))}
        wl = wl.with_model_keys(sizes, keyed)
    wl = replace(wl, agent_node=idx.astype(np.int64))
    wl.validate()
    return wl


__all__ = ["llm_node_rows", "node_requests", "llm_workload"]
