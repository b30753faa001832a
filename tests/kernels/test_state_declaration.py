"""Every State field is declared once (kernels/schema/state.py STATE_FIELDS); the State
record, STATE_LAYOUT, the allocation (run.tables.build_state), the memory estimate
(estimate_state_bytes) and the growth of the logs (run.runner.grow_logs) follow from it."""

from __future__ import annotations

import numpy as np
import pytest

import entry as E
from blis_fast.run.runner import grow_logs
from blis_fast.run.tables import estimate_state_bytes, field_bytes, state_sizes
from blis_fast_kernels.schema import TraceLevel
from blis_fast_kernels.schema.state import (GIVEN, INITS, SHAPE_CONSTANTS, SIZE_NAMES, STATE_FIELDS, STATE_LAYOUT,
                                            State, event_capacity, field_shape, log_room,
                                            state_shapes)
from builders import lengths_workload
from states import make_state, setup_of


def test_state_and_layout_are_the_declaration():
    assert State._fields == tuple(f.name for f in STATE_FIELDS) == tuple(STATE_LAYOUT)
    for f in STATE_FIELDS:
        assert STATE_LAYOUT[f.name] == (np.dtype(f.dtype), len(f.shape))
        assert f.init in INITS and f.doc
        for expr in f.shape:  # shapes read only the named sizes and schema constants
            names = compile(expr, "<shape>", "eval").co_names
            assert set(names) <= set(SIZE_NAMES) | set(SHAPE_CONSTANTS), (f.name, expr)


CASES = {
    "default": {},
    "full-trace-sort-index": {"trace_level": TraceLevel.FULL, "scheduler": "sjf", "routing_policy": "prefix-affinity",
                              "prefix_index_capacity": 24},
    "decisions-no-caching": {"trace_level": TraceLevel.DECISIONS, "enable_prefix_caching": False},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_allocation_and_estimate_follow_the_declaration(case):
    """Every built array has its declared type and shape for the run's sizes, and the
    memory estimate is exactly the bytes of the fields it counts (a workload without
    shared keys: its sharing is known)."""
    from blis_fast.policy import compile_policies
    from blis_fast.run import build_state

    flat = dict(CASES[case])
    level = flat.pop("trace_level", TraceLevel.NONE)
    wl = lengths_workload(np.arange(30) * 1000, [40 + i for i in range(30)], [5] * 30)
    setup = setup_of(num_instances=3, block_size_in_tokens=16, **flat)
    pol = compile_policies(setup.config.policy)
    st = build_state(setup, wl, pol, trace_level=level)
    use_index = pol.uses_prefix_index or level >= TraceLevel.DECISIONS
    n_blocks = len(st.req_blocks)
    sizes = state_sizes(setup.config, setup.latency, len(wl), len(wl.block_keys), n_blocks, 0, use_index,
                        pol.scheduler_kind, level)
    assert set(sizes) == set(SIZE_NAMES)
    for f, a in zip(STATE_FIELDS, st):
        assert a.dtype == f.dtype and a.shape == field_shape(f, sizes), f.name
    parts = estimate_state_bytes(setup.config, setup.latency, len(wl), len(wl.block_keys), n_blocks, use_index,
                                 pol.scheduler_kind, n_shared=0, trace_level=level)
    counted = sum(a.nbytes for f, a in zip(STATE_FIELDS, st) if f.family)
    assert sum(parts.values()) == counted == sum(b for f, b in zip(STATE_FIELDS, field_bytes(sizes).values())
                                                if f.family)


def test_heap_capacity_is_one_event_per_request_and_instance():
    st = make_state(lengths_workload([0] * 12, [30] * 12, [3] * 12), num_instances=5)
    assert len(st.heap) == event_capacity(12, 5) == 12 + 5


@pytest.mark.parametrize("level", [TraceLevel.NONE, TraceLevel.DECISIONS, TraceLevel.FULL])
def test_grow_logs_grows_the_declared_logs_and_the_kernel_agrees(level):
    """grow_logs makes room for one step in exactly the logs declared with a Growth at the
    trace level, and the loop's log_room (engine/trace.py) asks for the same room: one row
    fewer in any of them and it says no."""
    from blis_fast.run import build_state

    wl = lengths_workload([0] * 4, [30] * 4, [3] * 4)
    st = build_state(setup_of(num_instances=2, max_num_seqs=8, block_size_in_tokens=16), wl, trace_level=level)
    empty = {f.name: np.zeros(0, f.dtype) for f in STATE_FIELDS if f.growth is not None}
    grown = grow_logs(st._replace(**empty))
    written = [f for f in STATE_FIELDS if f.growth is not None and level >= f.growth.level and not f.growth.autoscaled]
    assert {f.name for f in written} >= {"step_log", "irr_log"}
    for f in STATE_FIELDS:
        if f.growth is None:
            continue
        a = getattr(grown, f.name)
        assert (len(a) >= log_room(f.growth, 8)) == (f in written), f.name
    assert E.log_room(grown, 0)
    for f in written:
        room = log_room(f.growth, 8)
        grown.loop[0][f.growth.counter] = len(getattr(grown, f.name)) - room + 1
        assert not E.log_room(grown, 0), f.name
        grown.loop[0][f.growth.counter] = 0


@pytest.mark.parametrize("level", [TraceLevel.NONE, TraceLevel.DECISIONS])
def test_an_autoscaled_run_grows_its_own_logs_and_the_kernel_agrees(level):
    """With an autoscaler, grow_logs also makes room in the logs declared for it (the
    lifecycle and tick logs, and when tracing the routing log: a request can be routed
    twice), and the loop's scale_log_room asks for the same room before every event."""
    from blis_fast.run import build_state

    wl = lengths_workload([0] * 4, [30] * 4, [3] * 4)
    setup = setup_of(num_instances=1, max_instances=3, autoscaler="threshold", max_num_seqs=8)
    st = build_state(setup, wl, trace_level=level)
    own = [f for f in STATE_FIELDS if f.growth is not None and f.growth.autoscaled and level >= f.growth.level]
    assert {f.name for f in own} == {"life_log", "scale_log"} | ({"route_log"} if level else set())
    grown = grow_logs(st._replace(**{f.name: np.zeros(0, f.dtype) for f in own}))
    assert E.scale_log_room(grown)
    for f in own:
        assert len(getattr(grown, f.name)) >= log_room(f.growth, 8, 3), f.name
        grown.loop[0][f.growth.counter] = len(getattr(grown, f.name)) - log_room(f.growth, 8, 3) + 1
        assert not E.scale_log_room(grown), f.name
        grown.loop[0][f.growth.counter] = 0


def test_a_given_array_that_contradicts_the_declaration_is_refused():
    from blis_fast.run.tables import StateArrays, allocate_state

    setup = setup_of(num_instances=2)
    sizes = state_sizes(setup.config, setup.latency, 3, 0, 0, 0, False, 0)
    assert state_shapes(**sizes) == tuple(field_shape(f, sizes) for f in STATE_FIELDS)
    given = {f.name: np.zeros(field_shape(f, sizes), f.dtype) for f in STATE_FIELDS if f.init == GIVEN}
    allocate_state(sizes, given, StateArrays())
    given["reqs"] = given["reqs"][:2]
    with pytest.raises(AssertionError, match="State.reqs"):
        allocate_state(sizes, given, StateArrays())
