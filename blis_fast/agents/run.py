"""Running an agent scenario's runs (issue 26): run k draws its requests from seed + k
(``generate.generate_run``) and runs them through the tools-only fair-share driver
(kernels/agents/fairshare.py ``run_tool_dags``); ``results.py`` turns the runs into the
per-type latencies and per-resource utilizations.

The driver call is ``simulate_run`` alone: when llm nodes run on the cluster's event loop,
that one function changes and everything built on ``AgentRunOutput`` stays.  Until then a
scenario with an llm node is refused (``refuse_llm_nodes``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from blis_fast.agents.generate import AgentRun, AgentTemplates, build_templates, generate_run, successors_csr
from blis_fast.agents.scenario import MAX_RUNS, Scenario, load_scenario, parse_scenario
from blis_fast.config.validate import INT64_MAX, as_int, key_name
from blis_fast.errors import ConfigError, SimulationError

if TYPE_CHECKING:
    from blis_fast.run.agents import AgentTables


# the driver's ``mode`` argument (kernels/agents/fairshare.py DYNAMIC, STATIC), spelled out
# here: importing the kernel module for them would load numba even when the compiled
# driver runs
SHARE_MODE_CODES = {"dynamic": 0, "static": 1}


@dataclass(frozen=True, eq=False)
class AgentRunOutput:
    """One run's outcome: the generated ``run`` and, per node (rows of the run's node
    table), its start and finish in µs (-1: never started / finished); per resource the
    µs it had a consumer (``busy_us``) and the work units its finished nodes did there
    (``work_done``); ``events`` the driver handled."""

    run: AgentRun
    node_start_us: np.ndarray
    node_finish_us: np.ndarray
    busy_us: np.ndarray
    work_done: np.ndarray
    events: int


def refuse_llm_nodes(scenario: Scenario) -> None:
    """ConfigError at the first llm node: only tools run for now (the cluster's event
    loop will run llm nodes)."""
    for t in scenario.types:
        for n in t.nodes:
            if n.llm is not None:
                raise ConfigError(f"{n.path}.llm", f"node {key_name(n.name)} of type {key_name(t.name)}: llm nodes "
                                                   "run on the cluster: not yet (give it work on a resource instead)")


def agent_tables(scenario: Scenario, templates: AgentTemplates, run: AgentRun,
                 node_request: np.ndarray | None = None) -> "AgentTables":
    """One run's agent tables (blis_fast.run.agents.AgentTables): its requests, nodes, loads
    (a node's in resource order), successors and the resources; ``node_request``: each llm
    node's request row in the cluster workload (None: tools only)."""
    from blis_fast.run.agents import AgentTables

    n = run.num_nodes
    rows, cols = np.nonzero(run.node_work > 0)  # row-major: a node's loads in resource order
    load_ptr = np.zeros(n + 1, dtype=np.int64)
    load_ptr[1:] = np.cumsum(np.bincount(rows, minlength=n))
    succ_ptr, succ = successors_csr(run, templates)
    return AgentTables(
        arrival_us=run.request_arrival_us.astype(np.int64), first_node=run.request_first_node.astype(np.int64),
        pending=run.node_n_pred.astype(np.int64),
        weight=templates.type_weight[run.request_type[run.node_request]].astype(np.int64), load_ptr=load_ptr,
        load_res=cols.astype(np.int64), load_work=np.ascontiguousarray(run.node_work[rows, cols]),
        succ_ptr=succ_ptr.astype(np.int64), succ=succ.astype(np.int64),
        node_request=(np.full(n, -1, np.int64) if node_request is None else node_request.astype(np.int64)),
        capacity=np.ascontiguousarray(templates.resource_capacity, np.float64),
        max_consumers=np.maximum(templates.resource_max_consumers, 0).astype(np.int64),
        share=SHARE_MODE_CODES[scenario.share])


def simulate_run(scenario: Scenario, templates: AgentTemplates, run: AgentRun) -> AgentRunOutput:
    """Run one generated run of a tools-only scenario through the fair-share driver."""
    from blis_fast_kernels.native import run_tool_dags  # deferred: the kernels, compiled ahead of time where possible

    t = agent_tables(scenario, templates, run)
    start, finish, busy, work, events, status = run_tool_dags(
        t.arrival_us, t.first_node, t.pending, t.weight, t.load_ptr, t.load_res, t.load_work, t.succ_ptr, t.succ,
        t.capacity, t.max_consumers, t.share)
    if status != 0:
        raise SimulationError(f"agents: the fair-share driver stopped with status {int(status)} (run "
                              f"{run.run_index}, seed {run.seed})")
    return AgentRunOutput(run=run, node_start_us=start, node_finish_us=finish, busy_us=busy, work_done=work,
                          events=int(events))


def scenario_of(path_or_dict: str | Path | dict | Scenario) -> Scenario:
    """A validated scenario from a YAML path, a dict (the parsed YAML) or a Scenario."""
    if isinstance(path_or_dict, Scenario):
        return path_or_dict
    if isinstance(path_or_dict, dict):
        return parse_scenario(path_or_dict)
    if isinstance(path_or_dict, (str, Path)):
        return load_scenario(path_or_dict)
    raise ConfigError("scenario", f"must be a YAML file path, a mapping or a Scenario, got "
                                  f"{type(path_or_dict).__name__}")


def with_runs(scenario: Scenario, runs: Any, field: str = "runs") -> Scenario:
    """``scenario`` with ``runs`` runs (None: its own), checked as the file's ``runs``."""
    if runs is None:
        return scenario
    n = as_int(runs, field, 1, MAX_RUNS)
    if scenario.seed + n - 1 > INT64_MAX:
        raise ConfigError(field, f"the scenario's seed + runs - 1 must be <= 2^63-1 (run k uses seed + k), got "
                                 f"{n} runs from seed {scenario.seed}")
    return dataclasses.replace(scenario, runs=n)


def run_runs(scenario: Scenario, on_run: Callable[[AgentRunOutput], None]) -> None:
    """Generate and simulate each of the scenario's runs in order, handing each to
    ``on_run`` (one run's arrays are alive at a time)."""
    refuse_llm_nodes(scenario)
    templates = build_templates(scenario)
    for k in range(scenario.runs):
        on_run(simulate_run(scenario, templates, generate_run(scenario, k)))


__all__ = ["AgentRunOutput", "refuse_llm_nodes", "simulate_run", "scenario_of", "with_runs", "run_runs"]
