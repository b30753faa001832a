"""The State tables of agent DAGs run with the cluster (kernels/engine/agents.py): their
sizes and contents from an ``AgentTables`` (blis_fast.agents builds one per run).

Without agents (``None``) every table has its minimal size and the kernel never reads them:
the run is the one without agents, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blis_fast.errors import ConfigError
from blis_fast_kernels import schema as S


@dataclass(frozen=True, eq=False)
class AgentTables:
    """One run's agent requests, their DAG nodes and the shared resources, as flat arrays.

    Requests: ``arrival_us`` int64[Q] (non-decreasing), ``first_node`` int64[Q + 1]
    (request q owns nodes first_node[q] : first_node[q + 1]).  Nodes: ``pending`` int64[N]
    (predecessors; 0 = a root), ``weight`` int64[N] (>= 1), loads in CSR ``load_ptr``
    int64[N + 1] / ``load_res`` int64[L] / ``load_work`` float64[L] (units > 0), successors
    in CSR ``succ_ptr`` int64[N + 1] / ``succ`` int64[E] (node rows), ``node_request``
    int64[N] (an llm node's request row in the workload, -1 for a tool).  Resources:
    ``capacity`` float64[R] (units/s), ``max_consumers`` int64[R] (0 = no cap).
    ``share``: 0 dynamic, 1 static (kernels/agents/fairshare.py)."""

    arrival_us: np.ndarray
    first_node: np.ndarray
    pending: np.ndarray
    weight: np.ndarray
    load_ptr: np.ndarray
    load_res: np.ndarray
    load_work: np.ndarray
    succ_ptr: np.ndarray
    succ: np.ndarray
    node_request: np.ndarray
    capacity: np.ndarray
    max_consumers: np.ndarray
    share: int = 0

    @property
    def n_nodes(self) -> int:
        return int(self.pending.shape[0])

    def check(self, workload) -> None:
        """ConfigError unless the llm nodes and the workload's agent rows match one to one."""
        rows = self.node_request[self.node_request >= 0]
        n = len(workload)
        node_of = workload.agent_node if workload.agent_node is not None else np.full(n, -1, np.int64)
        if rows.size and (rows.max() >= n or np.any(node_of[rows] != np.flatnonzero(self.node_request >= 0))):
            raise ConfigError("workload.agent_node", "must name, for each agent llm node's request row, that node")
        if np.count_nonzero(node_of >= 0) != rows.size:
            raise ConfigError("workload.agent_node", "names a node that is not an llm node of the agent tables")


def agent_sizes(tables: AgentTables | None, n_requests: int) -> dict[str, int]:
    """The agents' sizes (schema.state.SIZE_NAMES)."""
    if tables is None:
        return {"n_agent_requests": 0, "n_agent_nodes": 1, "n_agent_loads": 1, "n_agent_edges": 1,
                "n_agent_res": 1, "n_agent_req_rows": 1}
    return {"n_agent_requests": int(tables.arrival_us.shape[0]), "n_agent_nodes": max(tables.n_nodes, 1),
            "n_agent_loads": max(int(tables.load_res.shape[0]), 1), "n_agent_edges": max(int(tables.succ.shape[0]), 1),
            "n_agent_res": max(int(tables.capacity.shape[0]), 1), "n_agent_req_rows": max(n_requests, 1)}


def agent_event_budget(tables: AgentTables | None) -> int:
    """Events the agents may add to a run: an AGENT instant per arrival, resource finish
    and llm completion, an AGENT_LLM_DONE per llm node (the max_events default's share)."""
    if tables is None:
        return 0
    return 2 * (int(tables.arrival_us.shape[0]) + int(tables.load_res.shape[0]) + 2 * tables.n_nodes)


def agent_settings(tables: AgentTables | None, workload, settings: np.ndarray) -> None:
    """Switch the agents on in a run's SETTINGS_DT record (after checking that the
    workload's agent rows are the tables' llm nodes); nothing without agents."""
    if tables is None:
        return
    tables.check(workload)
    settings["agents"] = 1
    settings["agent_share"] = tables.share


def agent_rows(tables: AgentTables | None, n_requests: int, sizes: dict[str, int]) -> dict[str, np.ndarray]:
    """The GIVEN agent fields of the State (minimal ones without agents)."""
    res = np.zeros(sizes["n_agent_res"], S.AGENT_RESOURCE_DT)
    loads = np.zeros(sizes["n_agent_loads"], S.AGENT_LOAD_DT)
    nodes = np.zeros(sizes["n_agent_nodes"], S.AGENT_NODE_DT)
    succ = np.zeros(sizes["n_agent_edges"], np.int64)
    req_node = np.full(sizes["n_agent_req_rows"], -1, np.int64)
    ctr = np.zeros(S.N_AGENT_COUNTERS, np.int64)
    ctr[S.AgentCounter.NEXT_US] = S.AGENT_NEVER_US
    if tables is None:
        return {"agent_res": res, "agent_loads": loads, "agent_nodes": nodes, "agent_succ": succ,
                "agent_arrival": np.zeros(0, np.int64), "agent_first_node": np.zeros(1, np.int64),
                "agent_req_node": req_node, "agent_ctr": ctr}
    t = tables
    n_res, n_loads = t.capacity.shape[0], t.load_res.shape[0]
    res["capacity"][:n_res] = t.capacity
    res["max_members"][:n_res] = t.max_consumers
    res["event_seq"] = -1
    res["n_loads"][:n_res] = np.bincount(t.load_res, minlength=n_res)
    res["slot_off"][:n_res] = np.concatenate(([0], np.cumsum(2 * res["n_loads"][:n_res])[:-1]))
    node_of_load = np.repeat(np.arange(t.n_nodes, dtype=np.int64), np.diff(t.load_ptr))
    loads["node"][:n_loads] = node_of_load
    loads["res"][:n_loads] = t.load_res
    loads["work"][:n_loads] = t.load_work
    loads["weight"][:n_loads] = t.weight[node_of_load]
    loads["heap_pos"] = -1
    loads["wait_pos"] = -1
    n = t.n_nodes
    nodes["pending"][:n] = t.pending
    nodes["start_us"] = -1
    nodes["finish_us"] = -1
    nodes["load_lo"][:n], nodes["load_hi"][:n] = t.load_ptr[:-1], t.load_ptr[1:]
    nodes["succ_lo"][:n], nodes["succ_hi"][:n] = t.succ_ptr[:-1], t.succ_ptr[1:]
    nodes["request"][:n] = t.node_request
    nodes["request"][n:] = -1
    succ[:t.succ.shape[0]] = t.succ
    llm = np.flatnonzero(t.node_request >= 0)
    req_node[t.node_request[llm]] = llm
    if t.arrival_us.shape[0]:
        ctr[S.AgentCounter.NEXT_US] = t.arrival_us[0]
    return {"agent_res": res, "agent_loads": loads, "agent_nodes": nodes, "agent_succ": succ,
            "agent_arrival": np.ascontiguousarray(t.arrival_us, np.int64),
            "agent_first_node": np.ascontiguousarray(t.first_node, np.int64), "agent_req_node": req_node,
            "agent_ctr": ctr}


__all__ = ["AgentTables", "agent_sizes", "agent_rows", "agent_event_budget", "agent_settings"]
