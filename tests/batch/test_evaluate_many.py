"""evaluate_many: one row per (candidate, scenario), bad candidates as rows (never raised),
budgets, serial == parallel byte for byte, scenario files."""

from __future__ import annotations

import io
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pyarrow.parquet as pq
import numpy as np
import pytest

from builders import ROOT, write

import blis_fast
from blis_fast.batch import Budget, evaluate_many, load_scenarios_file
from blis_fast.errors import ConfigError

SMALL = {"num_instances": 2, "workload": "chatbot", "rate": 40, "num_requests": 120}
SCENARIOS = [
    {"name": "chat", "config": SMALL, "seed": 3, "slo_classes": {"default": {"ttft_ms": 200, "tpot_ms": 40}}},
    {"name": "burst", "config": {**SMALL, "rate": 400}, "seed": 4},
]
OBJECTIVES = "slo_attainment:max,ttft_p99_ms:min:300"
GOOD = "routing: least-loaded\nscheduler: sjf\n"
BAD = {
    "yaml": "routing: [least-loaded\n",
    "scorer": "routing: {type: weighted, params: {scorers: {queue-lenght: 1}}}\n",
    "nan": "routing: {type: weighted, params: {scorers: {queue-depth: .nan}}}\n",
    "fitness": "fitness: {weights: {throughput: 1}}\n",
    "section": "routeing: least-loaded\n",
}


def parquet_bytes(table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def test_rows_statuses_and_messages():
    cands = {"good": GOOD, "busiest": {"routing": "always-busiest"}, **BAD}
    table, results = evaluate_many(cands, SCENARIOS, objectives=OBJECTIVES, workers=1)
    rows = table.to_pylist()
    assert [(r["candidate"], r["scenario"]) for r in rows] == [(c, s["name"]) for c in cands for s in SCENARIOS]
    assert len(results) == len(rows)
    by = {(r["candidate"], r["scenario"]): r for r in rows}
    for name in ("good", "busiest"):
        for s in SCENARIOS:
            r = by[(name, s["name"])]
            assert r["status"] == "ok" and r["message"] == ""
            assert 0.0 <= r["score"] <= 1.0
            assert r["metric.completed_requests"] == 120
            assert 0.0 <= r["objective.slo_attainment"] <= 1.0
    # least-loaded beats sending everything to the busiest instance under the burst
    assert by[("good", "burst")]["score"] > by[("busiest", "burst")]["score"]
    needles = {"yaml": "malformed YAML", "scorer": "queue-lenght", "nan": "finite", "fitness": "fitness",
               "section": "routeing"}
    for name, needle in needles.items():
        for s in SCENARIOS:
            r = by[(name, s["name"])]
            assert r["status"] == "invalid_policy"
            assert r["score"] == 0.0 and r["objective.slo_attainment"] == 0.0
            assert needle in r["message"] and "\n" not in r["message"]
            assert r["metric.completed_requests"] is None
            assert r["seed"] == by[("good", s["name"])]["seed"] == s["seed"]


def test_serial_threads_and_processes_byte_identical():
    cands = [GOOD, {"routing": "round-robin"}, BAD["nan"], {"routing": "least-loaded", "priority": "slo-based"}]
    serial = parquet_bytes(evaluate_many(cands, SCENARIOS, objectives=OBJECTIVES, workers=1).table)
    assert parquet_bytes(evaluate_many(cands, SCENARIOS, objectives=OBJECTIVES, workers=1).table) == serial
    assert parquet_bytes(evaluate_many(cands, SCENARIOS, objectives=OBJECTIVES, workers=2).table) == serial
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        table = evaluate_many(cands, SCENARIOS, objectives=OBJECTIVES, executor=pool).table
    assert parquet_bytes(table) == serial


def test_budget_limits_end_runaway_candidates():
    cands = {"busiest": {"routing": "always-busiest"}, "balanced": {"routing": "least-loaded"}}
    scen = [{"name": "burst", "config": {**SMALL, "rate": 400}}]
    rows = evaluate_many(cands, scen, budget={"max_simulated_s": 3.8}, workers=1).table.to_pylist()
    status = {r["candidate"]: r for r in rows}
    # everything on one instance takes 3.96 simulated seconds to serve; balanced 3.60
    assert status["busiest"]["status"] == "budget_exceeded" and status["busiest"]["score"] == 0.0
    assert "max_simulated_s" in status["busiest"]["message"]
    assert status["balanced"]["status"] == "ok"
    rows = evaluate_many(cands, scen, budget=Budget(max_events=500), workers=1).table.to_pylist()
    assert {r["status"] for r in rows} == {"budget_exceeded"}
    assert all("max_events" in r["message"] for r in rows)


def test_wall_clock_budget_is_checked_between_chunks():
    from blis_fast.batch.budget import BudgetExceeded, run_within
    from blis_fast.config.sim import build_config
    from blis_fast.run import RunSession, build_workload, resolve

    cfg = build_config({}, SMALL)
    session = RunSession(resolve(cfg), build_workload(cfg)).prepare()
    with pytest.raises(BudgetExceeded, match="max_wall_s"):
        run_within(session, Budget(max_wall_s=1.0), deadline=0.0, chunk_events=50)  # the deadline has passed


def test_budget_and_argument_errors():
    with pytest.raises(ConfigError, match="at least one candidate"):
        evaluate_many([], SCENARIOS)
    with pytest.raises(ConfigError, match="budget.max_events"):
        Budget.parse({"max_events": 0})
    with pytest.raises(ConfigError, match="budget.max_wall"):
        Budget.parse({"max_wall": 3})
    with pytest.raises(ConfigError, match="workers"):
        evaluate_many([GOOD], SCENARIOS, workers=0)
    with pytest.raises(ConfigError, match="executor"):
        evaluate_many([GOOD], SCENARIOS, executor=object())
    with pytest.raises(ConfigError, match="candidates"):
        evaluate_many(GOOD, SCENARIOS)
    with pytest.raises(ConfigError, match="two scenarios"):
        evaluate_many([GOOD], [SCENARIOS[0], SCENARIOS[0]])
    with pytest.raises(ConfigError, match=r"scenarios\[0\].config.num_instances"):
        evaluate_many([GOOD], [{"name": "x", "config": {"num_instances": -1}}])
    with pytest.raises(ConfigError, match="slo_classes"):
        evaluate_many([GOOD], [{"name": "x", "config": SMALL, "slo_classes": {"a": {}, "b": {}}}])


def test_scenarios_file_paths_relative_to_it(tmp_path):
    spec = (ROOT / "configs" / "workloads" / "chat.yaml").read_text()
    (tmp_path / "w").mkdir()
    write(tmp_path / "w", "chat.yaml", spec)
    f = write(tmp_path, "scenarios.yaml", {
        "objectives": "slo_attainment:max",
        "budget": {"max_wall_s": 30},
        "scenarios": [{"name": "spec", "config": {"num_instances": 2}, "workload_spec": "w/chat.yaml", "seed": 5}],
    })
    scenarios, objectives, budget = load_scenarios_file(f)
    assert scenarios[0].config.workload.spec_filepath == str(tmp_path / "w" / "chat.yaml")
    assert [o.metric for o in objectives] == ["slo_attainment"] and budget == {"max_wall_s": 30}
    bad = write(tmp_path, "bad.yaml", {"scenarios": [{"name": "a", "confg": {}}]})
    with pytest.raises(ConfigError, match="confg"):
        load_scenarios_file(bad)


def test_python_program_candidates(tmp_path):
    ok = write(tmp_path, "ok.py", "def get_policy():\n    return {'routing': {'type': 'least-loaded'}}\n")
    raises = write(tmp_path, "raises.py", "def get_policy():\n    raise ValueError('no weights yet')\n")
    loops = write(tmp_path, "loops.py", "def get_policy():\n    while True:\n        pass\n")
    hogs = write(tmp_path, "hogs.py", "def get_policy():\n    a = []\n    while True:\n        a.append(bytearray(10**7))\n")
    rows = evaluate_many([ok, raises, hogs], SCENARIOS[:1], workers=2).table.to_pylist()  # programs load in parallel
    rows += evaluate_many([loops], SCENARIOS[:1], workers=1, program_timeout_s=0.5).table.to_pylist()
    by = {r["candidate"]: r for r in rows}
    assert by["ok"]["status"] == "ok"
    assert by["raises"]["status"] == "program_error" and "ValueError: no weights yet (line 2)" in by["raises"]["message"]
    assert by["loops"]["status"] == "program_error" and "within 0.5 s" in by["loops"]["message"]
    assert by["hogs"]["status"] == "program_error" and "memory" in by["hogs"]["message"]
    assert all(r["score"] == 0.0 for r in rows if r["status"] != "ok")


def test_top_level_entry_point():
    table, results = blis_fast.evaluate_many([GOOD], SCENARIOS[:1], workers=1)
    assert table.num_rows == 1 and results[0].status == "ok"


def test_a_batch_row_is_the_evaluation_of_an_ordinary_run():
    # the batch's shortcuts (request table copied from the prepared scenario, workload id
    # hashed once, policy compiled once) change nothing
    plain = blis_fast.simulate({**SMALL, "seed": 4, "routing_policy": "least-loaded"}).evaluate(OBJECTIVES)
    batch = evaluate_many({"ll": {"routing": "least-loaded"}}, [{"name": "x", "config": SMALL, "seed": 4}],
                          objectives=OBJECTIVES, workers=1).results[0]
    assert batch.to_dict() == plain.to_dict()


def test_a_thread_reusing_its_state_arrays_starts_each_evaluation_afresh():
    # evaluations in one thread build their states in the same arrays (run.tables.StateArrays,
    # batch.task.thread_arrays): a candidate judged after others -- ones that filled the
    # router's prefix index, the KV prefix table, the sort scratch -- equals one judged first
    pa = {"routing": {"type": "weighted", "params": {"scorers": {"prefix-affinity": 2, "queue-depth": 1}}}}
    cands = {"a": pa, "b": {"routing": "least-loaded", "scheduler": "sjf"},
             "c": {"routing": "round-robin", "scheduler": "priority-fcfs", "priority": "slo-based"}, "d": pa}
    scen = [{"name": "x", "config": {**SMALL, "rate": 400}, "seed": 4}]
    both = evaluate_many(cands, scen, objectives=OBJECTIVES, workers=1).results
    for name, k in (("a", 3), ("c", 2)):
        alone = evaluate_many({name: cands[name]}, scen, objectives=OBJECTIVES, workers=1).results
        assert both[k].to_dict() == alone[0].to_dict()
    assert both[0].to_dict() == both[3].to_dict()
    from blis_fast.batch import task as ev

    assert getattr(ev._ARRAYS, "arrays", None) is None  # nothing kept once the batch is done


def test_state_arrays_are_cleared_and_follow_the_shape():
    from blis_fast.run.tables import StateArrays

    keep = StateArrays(reuse=True)
    a = keep.zeros("heap", 5, np.int64)
    a[:] = 7
    assert keep.zeros("heap", 5, np.int64) is a and not a.any()
    rec = keep.zeros("blocks", 3, np.dtype([("x", np.int64), ("y", np.int32)]))
    rec["x"] = 1
    assert not keep.zeros("blocks", 3, rec.dtype)["x"].any()
    assert keep.zeros("heap", 6, np.int64) is not a and keep.full("heap", 6, -1, np.int64).tolist() == [-1] * 6
    src = np.arange(4)
    assert keep.copy("reqs", src).tolist() == [0, 1, 2, 3] and keep.copy("reqs", src) is keep.copy("reqs", src)
    fresh = StateArrays()
    assert fresh.zeros("heap", 5, np.int64) is not fresh.zeros("heap", 5, np.int64)


def test_scenario_tables_and_prefix_tables_sized_to_the_distinct_shared_values_change_nothing():
    # a prepared scenario makes what every state shares once (run.tables.ScenarioTables: the
    # request table, the arrival order, counts -- among them its distinct shared key values,
    # chatbot: one prefix at thousands of positions, which size every evaluation's prefix
    # tables); a state built from them runs exactly as one built from scratch
    from blis_fast.batch.scenarios import Scenario, prepare
    from blis_fast.config.sim import build_config
    from blis_fast.policy import compile_policies
    from blis_fast.run import run_to_end
    from blis_fast.run.tables import build_state, distinct_shared_values

    ps = prepare(Scenario("x", build_config({}, {**SMALL, "rate": 400, "prefix_tokens": 256,
                                                  "routing_policy": "prefix-affinity"})))
    wl = ps.workload
    positions = int(np.count_nonzero(wl.shared_keys()))
    distinct = len(set(wl.block_keys[wl.shared_keys() == 1].tolist()))
    assert ps.tables.shared_values == distinct_shared_values(wl) == distinct
    assert 0 < ps.tables.shared_values < positions // 10 and ps.tables.shared_positions == positions
    pol = compile_policies(ps.setup.config.policy)
    wide = run_to_end(build_state(ps.setup, wl, pol))
    tight = run_to_end(build_state(ps.setup, wl, pol, scenario=ps.tables))
    assert tight.kv_table.shape[0] < wide.kv_table.shape[0] and tight.gmap.shape[0] < wide.gmap.shape[0]
    assert tight.pi_table.shape[0] < wide.pi_table.shape[0]
    assert tight.reqs.tobytes() == wide.reqs.tobytes() and tight.loop.tobytes() == wide.loop.tobytes()
    assert tight.arrival_order.tolist() == wide.arrival_order.tolist()
    served = [f for f in wide.inst.dtype.names if not f.startswith("ht_")]  # (ht_*: the table's geometry)
    assert tight.inst[served].tolist() == wide.inst[served].tolist()


def test_a_grown_step_log_is_kept_for_the_next_evaluation():
    # runs with many more steps than requests outgrow the step log; the thread keeps the
    # grown log (StateArrays.log/keep), so the next evaluation neither grows it again nor
    # differs in any way
    from blis_fast.batch.budget import Budget
    from blis_fast.batch.candidates import load_candidate
    from blis_fast.batch.evaluate import make_task
    from blis_fast.batch.task import evaluate_task, release_thread_arrays, thread_arrays
    from blis_fast.batch.scenarios import Scenario, prepare
    from blis_fast.config.sim import build_config
    from blis_fast.run.tables import MIN_LOG_ROWS

    cfg = {"num_requests": 40, "rate": 2, "num_instances": 2, "output_tokens": 600, "output_tokens_stdev": 0,
           "output_tokens_min": 600, "output_tokens_max": 600}
    ps = prepare(Scenario("long", build_config({}, cfg)))
    task = make_task(0, load_candidate({"routing": "least-loaded"}, "a"), ps, {})
    release_thread_arrays()
    try:
        first = evaluate_task(ps, task, Budget(max_wall_s=None))
        grown = thread_arrays()._kept["step_log"]
        assert first.metrics["engine_steps"] > MIN_LOG_ROWS and len(grown) > MIN_LOG_ROWS  # it grew
        again = evaluate_task(ps, task, Budget(max_wall_s=None))
        assert thread_arrays()._kept["step_log"] is grown  # reused at its grown length
    finally:
        release_thread_arrays()
    assert again.to_dict() == first.to_dict()
