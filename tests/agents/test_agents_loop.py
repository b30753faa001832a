"""Agent DAGs in the simulator's event loop (kernels/engine/agents.py): tools-only
workloads give exactly the fair-share driver's results (both call fs_instant, but through
different loops, tables built by different code and an empty cluster beside them), and a
run without agents is untouched by the agent tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_fast.agents.generate import build_templates, generate_run
from blis_fast.agents.run import agent_tables, scenario_of, simulate_run
from blis_fast.run.agents import AgentTables
from blis_fast.run.api import as_config
from blis_fast.run.resolve import resolve
from blis_fast.run.session import RunSession
from blis_fast.workload.workload import Workload
from blis_fast_kernels import schema as S
from test_fairshare import MODES, build, run, workloads

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "agents"
_SETUP = []


def setup():
    if not _SETUP:
        _SETUP.append(resolve(as_config(None)))
    return _SETUP[0]


def no_requests() -> Workload:
    z = np.zeros(0, np.int64)
    return Workload(arrival_us=z, prompt_len=z, output_len=z, block_keys=z, key_offsets=np.zeros(1, np.int64),
                    block_size=16)


def loop_run(tables: AgentTables, workload: Workload | None = None):
    """(node start, node finish, busy µs, work done, agent events, loop state) through the
    event loop."""
    st = RunSession(setup(), workload if workload is not None else no_requests(), agents=tables).run().state
    assert st.loop[0]["status"] == S.Status.OK
    nodes, loads = st.agent_nodes[:tables.n_nodes], st.agent_loads[:tables.load_res.shape[0]]
    work = np.zeros(tables.capacity.shape[0])
    for n in range(tables.n_nodes):  # in load order, as the driver sums
        if nodes["finish_us"][n] >= 0:
            for l in range(nodes["load_lo"][n], nodes["load_hi"][n]):
                work[loads["res"][l]] += loads["work"][l]
    busy = st.agent_res["busy_us"][:tables.capacity.shape[0]]
    return nodes["start_us"], nodes["finish_us"], busy, work, int(st.agent_ctr[S.AgentCounter.EVENTS]), st


def tables_of(requests, capacity, mode, caps) -> AgentTables:
    arrival, first, pending, weight, load_ptr, load_res, load_work, succ_ptr, succ = build(requests, len(capacity))
    return AgentTables(arrival_us=arrival, first_node=first, pending=pending, weight=weight, load_ptr=load_ptr,
                       load_res=load_res, load_work=load_work, succ_ptr=succ_ptr, succ=succ,
                       node_request=np.full(pending.shape[0], -1, np.int64),
                       capacity=np.array(capacity, np.float64), max_consumers=np.array(caps, np.int64), share=mode)


@settings(max_examples=40, deadline=None)
@given(workloads(), st.sampled_from(MODES))
def test_random_tool_dags_in_the_event_loop_equal_the_driver(case, mode):
    requests, capacity, caps = case
    want = run(requests, capacity, mode, caps)
    got = loop_run(tables_of(requests, capacity, mode, caps))
    for a, b in zip(want, got[:4]):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("share", ["dynamic", "static"])
def test_a_shipped_scenario_in_the_event_loop_equals_the_driver(share):
    import dataclasses

    sc = dataclasses.replace(scenario_of(CONFIGS / "tools-only.yaml"), share=share)
    templates, run0 = build_templates(sc), generate_run(sc, 0)
    want = simulate_run(sc, templates, run0)
    start, finish, busy, work, events, st = loop_run(agent_tables(sc, templates, run0))
    assert np.array_equal(start, want.node_start_us) and np.array_equal(finish, want.node_finish_us)
    assert np.array_equal(busy, want.busy_us) and np.array_equal(work, want.work_done)
    assert events == want.events and (finish >= 0).all()
    assert st.loop[0]["events"] >= 1  # the agents' instants are the loop's events


def test_the_agents_next_instant_is_the_first_arrival_and_none_after_the_run():
    t = tables_of([(5, [{"work": {0: 1.0}}], [])], [1.0], 0, [0])
    st = RunSession(setup(), no_requests(), agents=t).prepare().state
    assert st.agent_ctr[S.AgentCounter.NEXT_US] == 5 and st.settings[0]["agents"] == 1
    *_, st = loop_run(t)
    assert st.agent_ctr[S.AgentCounter.NEXT_US] == S.AGENT_NEVER_US
    assert st.loop[0]["clock_us"] == 5 + 1_000_000  # the tool's finish was the last event


def test_without_agents_the_agent_tables_are_minimal_and_unread():
    st = RunSession(setup(), no_requests()).prepare().state
    assert st.settings[0]["agents"] == 0
    assert st.agent_nodes.shape == (1,) and st.agent_res.shape == (1,) and st.agent_arrival.shape == (0,)
    assert st.agent_ctr[S.AgentCounter.NEXT_US] == S.AGENT_NEVER_US
