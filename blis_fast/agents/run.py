"""Running an agent scenario's runs (issue 26): run k draws its requests from seed + k
(``generate.generate_run``) and runs them -- a scenario with llm nodes in the simulator's
event loop beside its cluster (``simulate_cluster_run``: kernels/engine/agents.py), a
tools-only one through the fair-share driver (kernels/agents/fairshare.py
``run_tool_dags``: the same arithmetic without a cluster); ``results.py`` turns the runs
into the per-type latencies and per-resource utilizations.  ``simulate_run`` is the one
place that chooses.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from blis_fast.agents.generate import AgentRun, AgentTemplates, build_templates, generate_run, successors_csr
from blis_fast.agents.scenario import MAX_RUNS, Scenario, cluster_setup, load_scenario, parse_scenario
from blis_fast.config.validate import INT64_MAX, as_int, key_name
from blis_fast.errors import ConfigError, SimulationError
from blis_fast_kernels.schema import AgentCounter

if TYPE_CHECKING:
    from blis_fast.results.result import Result
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
    (``work_done``); ``events``: the agents' arrivals and resource finish events handled;
    ``cluster``: the Result of the cluster run its llm nodes were requests of."""

    run: AgentRun
    node_start_us: np.ndarray
    node_finish_us: np.ndarray
    busy_us: np.ndarray
    work_done: np.ndarray
    events: int
    cluster: "Result | None" = None  # the cluster run of the llm nodes' requests (None: tools only)
    kernel_s: float = 0.0  # wall seconds in the kernel (the driver, or the event loop)


def has_llm_nodes(scenario: Scenario) -> bool:
    """True if some request type has an llm node (its runs then need the cluster)."""
    return any(n.llm is not None for t in scenario.types for n in t.nodes)


def agent_tables(scenario: Scenario, templates: AgentTemplates, run: AgentRun,
                 node_request: np.ndarray | None = None) -> "AgentTables":
    """One run's agent tables (blis_fast.run.agents.AgentTables): its requests, nodes, loads
    (a node's in resource order), successors and the resources; ``node_request``: each llm
    node's request row in the cluster workload (None: tools only)."""
    from blis_fast.run.agents import AgentTables  # deferred: blis_fast.run's package loads the config machinery

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


def simulate_run(scenario: Scenario, templates: AgentTemplates, run: AgentRun, setup=None) -> AgentRunOutput:
    """Run one generated run: with ``setup`` (a resolved cluster config, blis_fast.run.resolve)
    its llm nodes are requests to that cluster, in the simulator's event loop
    (``simulate_cluster_run``); without, a tools-only run goes through the fair-share driver
    (the same arithmetic, kernels/agents/fairshare.py, without a cluster beside it)."""
    if setup is not None:
        return simulate_cluster_run(scenario, templates, run, setup)
    from blis_fast_kernels.native import run_tool_dags  # deferred: the kernels, compiled ahead of time where possible

    t = agent_tables(scenario, templates, run)
    started = time.perf_counter()
    start, finish, busy, work, events, status = run_tool_dags(
        t.arrival_us, t.first_node, t.pending, t.weight, t.load_ptr, t.load_res, t.load_work, t.succ_ptr, t.succ,
        t.capacity, t.max_consumers, t.share)
    kernel_s = time.perf_counter() - started
    if status != 0:
        raise SimulationError(f"agents: the fair-share driver stopped with status {int(status)} (run "
                              f"{run.run_index}, seed {run.seed})")
    return AgentRunOutput(run=run, node_start_us=start, node_finish_us=finish, busy_us=busy, work_done=work,
                          events=int(events), kernel_s=kernel_s)


def simulate_cluster_run(scenario: Scenario, templates: AgentTemplates, run: AgentRun, setup) -> AgentRunOutput:
    """One run in the simulator's event loop: the tools share the scenario's resources, each
    llm node is a request of a cluster workload (``llm.llm_workload``) sent when the node
    starts (kernels/engine/agents.py)."""
    from blis_fast.agents.llm import llm_workload, node_requests  # deferred: the workload generator and its kernels
    from blis_fast.run.session import RunSession  # deferred: the run machinery and its kernels

    workload = llm_workload(scenario, run, setup)
    tables = agent_tables(scenario, templates, run, node_requests(workload, run.num_nodes))
    session = RunSession(setup, workload, agents=tables).run()
    st = session.state
    n, n_loads, n_res = run.num_nodes, tables.load_res.shape[0], tables.capacity.shape[0]
    nodes = st.agent_nodes[:n]
    finished = np.repeat(nodes["finish_us"] >= 0, np.diff(tables.load_ptr))
    # summed load by load in load order, as the driver's kernel does: the same floats
    work = np.bincount(tables.load_res[finished], weights=tables.load_work[finished], minlength=n_res)
    return AgentRunOutput(run=run, node_start_us=nodes["start_us"].copy(), node_finish_us=nodes["finish_us"].copy(),
                          busy_us=st.agent_res["busy_us"][:n_res].copy(), work_done=work[:n_res].astype(np.float64),
                          events=int(st.agent_ctr[AgentCounter.EVENTS]), cluster=session.finish(),
                          kernel_s=session.kernel_s)


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


def run_setup(scenario: Scenario, config=None):
    """The resolved cluster a scenario's llm nodes are sent to (``scenario.cluster_setup``;
    ``config``: a simulator config path, mapping or SimConfig replacing the scenario's
    ``cluster``), None for a tools-only scenario (its runs need no cluster).  ConfigError
    if it is missing or does not serve a node's model."""
    return cluster_setup(scenario, config) if has_llm_nodes(scenario) else None


def run_runs(scenario: Scenario, on_run: Callable[[AgentRunOutput], None], config=None) -> None:
    """Generate and simulate each of the scenario's runs in order, handing each to
    ``on_run`` (one run's arrays are alive at a time); ``config``: as ``cluster_setup``."""
    setup = run_setup(scenario, config)
    templates = build_templates(scenario)
    for k in range(scenario.runs):
        on_run(simulate_run(scenario, templates, generate_run(scenario, k), setup))


__all__ = ["AgentRunOutput", "has_llm_nodes", "agent_tables", "simulate_run", "simulate_cluster_run", "scenario_of",
           "with_runs", "run_setup", "run_runs"]
