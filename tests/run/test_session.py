"""The run session (blis_fast/run/session.py): the one place a run's State is allocated
and its loop driven -- a session's Result equals ``simulate``'s, a run paused and resumed
equals one run through, a copy is independent, a forced routing decision is obeyed, and
no other module of blis_fast calls ``build_state``."""

from __future__ import annotations

import ast
from pathlib import Path

import blis_fast
from blis_fast.config.sim import build_config
from blis_fast.run import RunSession, build_workload, resolve
from blis_fast.run.api import trace_level_code

SETTINGS = dict(num_requests=60, rate=30, num_instances=3, workload="chatbot", prefix_tokens=64, seed=9)
PKG = Path(blis_fast.__file__).resolve().parent


def _session(**extra) -> RunSession:
    cfg = build_config({}, {**SETTINGS, **extra})
    return RunSession(resolve(cfg), build_workload(cfg), trace_level=trace_level_code(cfg))


def test_a_session_gives_simulates_result():
    assert _session().run().finish().results_json() == blis_fast.simulate(**SETTINGS).results_json()


def test_run_until_then_run_equals_one_run_and_copies_are_independent():
    whole = _session().run().finish().results_json()
    paused = _session().prepare().run_until(500_000)
    assert int(paused.state.loop[0]["clock_us"]) <= 500_000
    twin = paused.copy()
    assert twin.state.reqs is not paused.state.reqs
    assert paused.run().finish().results_json() == whole
    assert twin.run().finish().results_json() == whole


def test_force_routing_sends_the_request_where_told():
    base = _session().run()
    r = 7
    other = (int(base.state.reqs["instance"][r]) + 1) % SETTINGS["num_instances"]
    forced = _session().prepare().force_routing(r, other).run()
    assert int(forced.state.reqs["instance"][r]) == other
    assert forced.kernel_s > 0 and forced.finish().wall_time_s == forced.kernel_s


def test_only_the_session_builds_states():
    callers = set()
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name == "build_state":
                    callers.add(path.relative_to(PKG).as_posix())
    assert callers == {"run/session.py"}
