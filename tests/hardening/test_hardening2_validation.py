"""Hardening II, validation: the batch, study, bench, time-series and adapter surfaces refuse
bad input before anything is simulated, with one ``error: <field>: <message>`` line (a
``ConfigError`` from the API), values shortened and control characters escaped.

"Before anything is simulated" is asserted, not timed: the tests replace the event loop's
entry (``run_to_end``, as run/session.py calls it) with one that fails the test if it is called."""

from __future__ import annotations

import pytest
import yaml

import blis_fast
from blis_fast.config.validate import escape_controls, show_text
from blis_fast.errors import ConfigError
from blis_fast.results import objectives as objectives_mod
from blis_fast.results import timeseries
from blis_fast.studies.runs import MAX_SIMULATIONS
from hardening_helpers import assert_clean_error, cli_in_process

TINY = ["--num-requests", "20", "--rate", "20", "--max-memory", "1GiB"]
SCENARIO = {"name": "tiny", "config": {"num_requests": 12, "rate": 20, "num_instances": 2}}


class Simulated(AssertionError):
    pass


@pytest.fixture
def no_simulation(monkeypatch):
    """Fail the test if any run reaches the event loop."""
    def refuse(*args, **kwargs):
        raise Simulated("the event loop ran: the input should have been refused before")

    import blis_fast.run.runner
    import blis_fast.run.session

    monkeypatch.setattr(blis_fast.run.runner, "run_to_end", refuse)
    monkeypatch.setattr(blis_fast.run.session, "run_to_end", refuse)  # (every run goes through a RunSession)


# ----------------------------------------------------------------------------- objectives and selectors


@pytest.mark.parametrize("objective, needles", [
    ("slo_attainment[class=nosuch]", ["objectives[0].metric", "no class 'nosuch'", "its classes: 0"]),
    ("ttft_p99_ms[tenant=acme]", ["no tenant 'acme'", "its tenants: 0"]),
    ("goodput_rps[client=web]", ["no client 'web'"]),
    ("utilization[instance=2]", ["no instance '2'", "has 2 (0 to 1)"]),
    ("utilization[instance=99999999999999999999]", ["no instance"]),
    ("slo_attainment:max,ttft_p99_ms[tenant=x]:min", ["objectives[1].metric"]),
])
def test_run_objectives_with_unknown_selectors_are_refused_before_the_simulation(no_simulation, objective, needles):
    code, out, err = cli_in_process("run", *TINY, "--num-instances", "2", "--objectives", objective)
    assert_clean_error(code, out, err, needles)


def test_yaml_objectives_are_checked_before_the_simulation(no_simulation, tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"objectives": [{"metric": "slo_attainment[class=gold]", "direction": "max"}]}))
    code, out, err = cli_in_process("run", "--config", cfg, *TINY)
    assert_clean_error(code, out, err, ["objectives[0].metric", "'gold'"])


def test_known_selectors_still_run():
    result = blis_fast.simulate(num_requests=12, rate=20, num_instances=2,
                                objectives="utilization[instance=1],ttft_p99_ms[class=0]")
    assert 0.0 <= result.evaluate().score <= 1.0


def test_untargeted_class_attainment_refused_before_the_simulation(no_simulation):
    code, out, err = cli_in_process("run", *TINY, "--objectives", "slo_attainment[class=0]")
    assert_clean_error(code, out, err, ["objectives[0].metric", "sets no SLO targets"])


def test_scenario_objectives_are_refused_when_the_scenario_is_prepared(no_simulation):
    bad = {**SCENARIO, "objectives": "slo_attainment[tenant=ghost]:max"}
    with pytest.raises(ConfigError) as exc:
        blis_fast.evaluate_many(["routing: {type: round-robin}"], [bad], workers=1)
    assert "scenario tiny: objectives[0].metric" in exc.value.field and "ghost" in exc.value.message


def test_evaluate_cli_scenario_objectives_refused(no_simulation, tmp_path):
    scen = tmp_path / "scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [SCENARIO], "objectives": "utilization[instance=7]:max"}))
    cand = tmp_path / "c.yaml"
    cand.write_text("routing: {type: round-robin}\n")
    code, out, err = cli_in_process("evaluate", "--policies", cand, "--scenarios", scen, "--out",
                                    tmp_path / "out.parquet", "--workers", "1")
    assert_clean_error(code, out, err, ["objectives[0].metric", "no instance '7'"])
    assert not (tmp_path / "out.parquet").exists()


def test_study_metrics_and_slos_refused_before_the_simulation(no_simulation):
    code, out, err = cli_in_process("sweep", *TINY, "--set", "rate=10,20", "--metrics", "ttft_p99_ms[tenant=zz]")
    assert_clean_error(code, out, err, ["--metrics", "no tenant 'zz'"])
    code, out, err = cli_in_process("capacity", *TINY, "--slo", "ttft_p99_ms[client=zz]<=100", "--seeds", "1")
    assert_clean_error(code, out, err, ["--slo", "no client 'zz'"])


def test_result_evaluate_names_known_groups_shortened():
    result = blis_fast.simulate(num_requests=12, rate=20)
    with pytest.raises(ConfigError) as exc:
        result.evaluate("slo_attainment[class=" + "x" * 4000 + "]")
    assert len(str(exc.value)) < 400 and "its classes: 0" in str(exc.value)


def test_known_names_are_listed_truncated():
    text = objectives_mod.known_list(["n" * 100] * 30)
    assert text.endswith("and 10 more") and len(text) < 20 * 45 + 20


# ----------------------------------------------------------------------------- grids, probes, repeats


@pytest.mark.parametrize("args, needles", [
    (["--set", "rate=1:10000:1", "--seeds", "1000"], ["--seeds", "10000000 simulations", str(MAX_SIMULATIONS)]),
    (["--set", "rate=1:5000:1", "--seeds", "3"], ["--seeds", "more than"]),
    (["--set", "rate=1:100:1", "--set", "max_num_seqs=1:100:1", "--set", "num_instances=1:100:1",
      "--set", "max_num_batched_tokens=1000:10000:1", "--set", "block_size_in_tokens=1:1000:1"], ["points, more than"]),
])
def test_sweep_grids_above_the_maximum_are_refused_before_anything_runs(no_simulation, args, needles):
    code, out, err = cli_in_process("sweep", *TINY, *args)
    assert_clean_error(code, out, err, needles)


def test_compare_grid_counts_configurations(no_simulation, tmp_path):
    files = []
    for k in range(4):
        f = tmp_path / f"c{k}.yaml"
        f.write_text("num_instances: 1\n")
        files.append(f)
    code, out, err = cli_in_process("compare", *files, *TINY, "--set", "rate=1:1000:1", "--seeds", "3")
    assert_clean_error(code, out, err, ["4000 points x 3 seeds"])


def test_capacity_probes_times_seeds_bounded(no_simulation):
    code, out, err = cli_in_process("capacity", *TINY, "--slo", "ttft_p99_ms<=100", "--max-probes", "10000",
                                    "--seeds", "1000")
    assert_clean_error(code, out, err, ["--max-probes", "10000 probes x 1000 seeds"])


def test_sweep_api_bounds_the_grid(no_simulation):
    with pytest.raises(ConfigError, match="simulations"):
        blis_fast.sweep("rate=1:100:1", num_requests=10, seeds=1000)


@pytest.fixture
def no_bench(monkeypatch):
    import blis_fast.experiments.batch_bench as batch_bench
    import blis_fast.experiments.bench as bench

    def refuse(*args, **kwargs):
        raise Simulated("the bench ran")

    monkeypatch.setattr(bench, "bench_scenario", refuse)
    monkeypatch.setattr(bench, "bench_startup", refuse)
    monkeypatch.setattr(batch_bench, "bench_batch", refuse)


@pytest.mark.parametrize("args", [["--scenarios", "batch-10k", "--repeats", "0"], ["--repeats", "1e23"],
                                  ["--repeats", "1001"], ["--repeats", "-3"], ["--repeats", "two"],
                                  ["--repeats", "9" * 5000]])
def test_bench_repeats_refused(no_bench, args):
    code, out, err = cli_in_process("bench", "--no-startup", *args)
    assert_clean_error(code, out, err, ["--repeats", "[1, 1000]"])


def test_bench_unknown_scenario_refused_before_measuring(no_bench):
    code, out, err = cli_in_process("bench", "--scenarios", "1k,nosuch\x07", "--repeats", "1")
    line = assert_clean_error(code, out, err, ["--scenarios", "nosuch\\x07"])
    assert "\x07" not in line


def test_bench_api_refuses_repeats(no_bench):
    from blis_fast.experiments.bench import run_bench

    for bad in (0, 10**23, 2.5, "x", None):
        with pytest.raises(ConfigError, match="--repeats"):
            run_bench(["batch-10k"], repeats=bad, startup=False)


# ----------------------------------------------------------------------------- time series


def test_time_series_at_the_minimum_interval_refused_before_the_run(no_simulation, tmp_path):
    code, out, err = cli_in_process("run", "--num-requests", "20", "--rate", "1", "--sample-interval-ms", "0.001",
                                    "--timeseries-out", tmp_path / "ts.csv")
    assert_clean_error(code, out, err, ["simulation.sample_interval_ms", "samples", "raise the interval"])
    assert not (tmp_path / "ts.csv").exists()


def test_time_series_bounded_while_the_run_goes(monkeypatch):
    monkeypatch.setattr(timeseries, "MAX_SAMPLES", 5)  # arrivals end early, the run goes on: counted as it samples
    with pytest.raises(ConfigError) as exc:
        blis_fast.simulate(num_requests=4, rate=1000, sample_interval_ms=1)
    assert exc.value.field == "simulation.sample_interval_ms" and "at most 5 samples" in exc.value.message


def test_time_series_within_the_bound_unchanged():
    result = blis_fast.simulate(num_requests=20, rate=50, sample_interval_ms=10)
    assert len(result.timeseries.time_us) > 0


# ----------------------------------------------------------------------------- --set values


@pytest.mark.parametrize("value, needles", [
    ("rate=1e999999", ["--set rate", "beyond the range of a float"]),
    ("rate=1e-999999", ["beyond the range of a float"]),
    ("rate=" + "9" * 3000, ["workload.rate"]),
    ("rate=" + "9" * 1_000_000, ["--set", "at most 4096 characters"]),
    ("max_num_seqs=" + "9" * 399, ["engine.max_num_seqs", "<integer of about 40"]),
    ("rate.x=1", ["--set", "rate has no entries to sweep"]),
    ("num_instances.0=1", ["num_instances has no entries"]),
    ("slo_class_weights.99999999999=1", ["index it with a number below 10000"]),
    ("slo_class_weights.x=1", ["index it with a number"]),
    ("rate=1:2:0", ["step > 0"]),
    ("rate=1:2:-1", ["step > 0"]),
    ("rate=1:2:nan", ["three numbers"]),
    ("rate=1:2:inf", ["three numbers"]),
    ("rate=0:1e999999:1e-999999", ["more than 10000 values"]),
    ("rate=1:1e30:1", ["more than 10000 values"]),
    ("rate=1:2:3:4", ["three numbers"]),
])
def test_set_values_refused_cleanly(no_simulation, value, needles):
    code, out, err = cli_in_process("sweep", *TINY, "--set", value)
    assert_clean_error(code, out, err, needles)


# ----------------------------------------------------------------------------- adapters


@pytest.fixture
def no_prepare(monkeypatch):
    import blis_fast.adapters.core as core

    def refuse(*args, **kwargs):
        raise Simulated("a scenario was prepared before the arguments were checked")

    monkeypatch.setattr(core, "prepare", refuse)


@pytest.mark.parametrize("workers", [0, -1, 10**30, "2", 2.0, True, float("nan"), [1]])
def test_adapter_workers_refused(no_prepare, workers):
    from blis_fast.adapters.core import FitnessSet

    with pytest.raises(ConfigError) as exc:
        FitnessSet([SCENARIO], workers=workers)
    assert exc.value.field == "workers"


def test_gepa_adapter_workers_refused(no_prepare):
    pytest.importorskip("gepa")
    from blis_fast.adapters.gepa import BlisGEPAAdapter, optimize_anything_evaluator

    for bad in (0, -4):
        with pytest.raises(ConfigError, match="workers"):
            BlisGEPAAdapter([SCENARIO], workers=bad)
        with pytest.raises(ConfigError, match="workers"):
            optimize_anything_evaluator([SCENARIO], workers=bad)
    with pytest.raises(ConfigError, match="scenarios"):
        BlisGEPAAdapter(None)


@pytest.fixture(scope="module")
def gepa_adapter():
    pytest.importorskip("gepa")
    from blis_fast.adapters.gepa import BlisGEPAAdapter

    return BlisGEPAAdapter([SCENARIO], workers=1)


@pytest.mark.parametrize("batch, candidate, field", [
    (None, {"routing": "round-robin"}, "batch"),
    ("tiny", {"routing": "round-robin"}, "batch"),
    (["ghost"], {"routing": "round-robin"}, "batch[0]"),
    ([["tiny"]], {"routing": "round-robin"}, "batch[0]"),
    (["tiny"], None, "candidate"),
    (["tiny"], "routing: round-robin", "candidate"),
    (["tiny"], {}, "candidate"),
    (["tiny"], {1: "x"}, "candidate"),
])
def test_gepa_evaluate_wrong_call_is_a_config_error(gepa_adapter, batch, candidate, field):
    with pytest.raises(ConfigError) as exc:
        gepa_adapter.evaluate(batch, candidate, capture_traces=True)
    assert exc.value.field == field


@pytest.mark.parametrize("candidate", [{"routing": None}, {"routing": 5}, {"policy": "[[["},
                                       {"routing": "\x07" * 5000}, {"bogus": "x"}])
def test_gepa_evaluate_bad_component_text_scores_zero(gepa_adapter, candidate):
    batch = gepa_adapter.evaluate(["tiny"], candidate, capture_traces=True)
    assert batch.scores == [0.0] and batch.trajectories[0]["status"] == "invalid_policy"
    records = gepa_adapter.make_reflective_dataset(candidate, batch, ["routing"])
    import json

    json.dumps(records)  # gepa's contract: JSON-serialisable


@pytest.mark.parametrize("args, field", [
    ((None, "EB", ["routing"]), "candidate"),
    (({"routing": "x"}, None, ["routing"]), "eval_batch"),
    (({"routing": "x"}, "text", ["routing"]), "eval_batch"),
    (({"routing": "x"}, "EB", None), "components_to_update"),
    (({"routing": "x"}, "EB", "routing"), "components_to_update"),
    (({"routing": "x"}, "EB", [None]), "components_to_update[0]"),
])
def test_gepa_reflective_dataset_wrong_call_is_a_config_error(gepa_adapter, args, field):
    good = gepa_adapter.evaluate(["tiny"], {"routing": "round-robin"}, capture_traces=True)
    args = tuple(good if a == "EB" else a for a in args)
    with pytest.raises(ConfigError) as exc:
        gepa_adapter.make_reflective_dataset(*args)
    assert exc.value.field == field


def test_openevolve_evaluate_with_no_path_is_a_failed_stage(tmp_path, monkeypatch):
    from blis_fast.adapters import openevolve as oe

    scen = tmp_path / "scenarios.yaml"
    scen.write_text(yaml.safe_dump({"scenarios": [SCENARIO]}))
    monkeypatch.setenv(oe.SCENARIOS_ENV, str(scen))
    for bad in (None, 5, "", "a\0b", ["x"]):
        res = oe.evaluate(bad)
        metrics = res if isinstance(res, dict) else res.metrics
        assert metrics["combined_score"] == 0.0
        if not isinstance(res, dict):
            assert "program_path" in res.artifacts["error"]


# ----------------------------------------------------------------------------- messages


def test_error_lines_escape_control_characters():
    code, out, err = cli_in_process("run", *TINY, "--routing-policy", "x\x07\x1b[31m\x9b")
    line = assert_clean_error(code, out, err, ["\\x07", "\\x1b"])
    assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in line)


def test_long_scenario_name_shortened_in_messages(no_simulation):
    name = "s\x07" + "n" * 100_000
    bad = {**SCENARIO, "name": name[:4000], "objectives": "slo_attainment[class=none]"}
    with pytest.raises(ConfigError) as exc:
        blis_fast.evaluate_many(["routing: {type: round-robin}"], [bad], workers=1)
    assert len(str(exc.value)) < 500 and "\x07" not in str(exc.value)


def test_ranking_table_escapes_and_shortens_names():
    import pyarrow as pa

    from blis_fast.cli.evaluate import ranking_text

    table = pa.table({"candidate": ["c\x07" + "x" * 100_000, "ok"], "score": [0.0, 0.5],
                      "status": ["invalid_policy", "ok"], "message": ["bad \x1b[2J" + "9" * 4000, ""]})
    text = ranking_text(table)
    assert "\x07" not in text and "\x1b" not in text
    assert max(len(line) for line in text.splitlines()) < 200


def test_study_table_escapes_cells():
    from blis_fast.studies.tables import text_table

    text = text_table(["config\x07", "x"], [["a" * 1000, "\x1b[31m"]])
    assert "\x07" not in text and "\x1b" not in text and max(len(x) for x in text.splitlines()) < 200


def test_escape_and_show_text():
    assert escape_controls("plain text é") == "plain text é"
    assert escape_controls("a\x07b\x1bc\x85\u2028") == "a\\x07b\\x1bc\\x85\\u2028"
    assert show_text("x" * 1000) == "x" * 77 + "..."


def test_no_classs_typo_in_messages():
    result = blis_fast.simulate(num_requests=12, rate=20)
    with pytest.raises(ConfigError) as exc:
        result.evaluate("slo_attainment[class=zz]")
    assert "classs" not in str(exc.value) and "classes" in str(exc.value)


def test_batch_evaluations_bounded_before_any_candidate_loads(monkeypatch):
    import blis_fast.batch.evaluate as ev

    def refuse(*args, **kwargs):
        raise Simulated("candidates were loaded")

    monkeypatch.setattr(ev, "MAX_EVALUATIONS", 3)
    monkeypatch.setattr(ev, "load_candidates", refuse)
    scenarios = [{**SCENARIO, "name": f"s{k}"} for k in range(2)]
    with pytest.raises(ConfigError, match="2 candidates x 2 scenarios is 4 evaluations"):
        blis_fast.evaluate_many(["routing: {type: round-robin}"] * 2, scenarios, workers=1)


def test_batch_candidate_ids_bounded():
    with pytest.raises(ConfigError) as exc:
        blis_fast.evaluate_many({10**5000: "routing: {type: round-robin}"}, [SCENARIO], workers=1)
    assert exc.value.field == "candidates" and "digits" in exc.value.message


def test_warnings_after_a_command_escape_control_characters(monkeypatch):
    import warnings

    import blis_fast.cli.commands as commands

    def command(args, standalone_mode=False):
        warnings.warn("class '\x07\x1b[2J' has no requests")
        return 0

    shown = []
    monkeypatch.setattr(commands, "_click_command", lambda: command)
    monkeypatch.setattr(warnings, "showwarning", lambda message, *rest: shown.append(str(message)))
    code, out, err = cli_in_process("run")
    assert code == 0 and shown == ["class '\\x07\\x1b[2J' has no requests"]


def test_openevolve_evaluators_for_checks_its_argument():
    from blis_fast.adapters.openevolve import evaluators_for

    for bad in (None, b"x", 5, "a\0b"):
        with pytest.raises(ConfigError, match="evaluation_file"):
            evaluators_for(bad)


def test_run_summary_on_a_terminal_escapes_names_from_the_spec(monkeypatch, tmp_path):
    import sys

    from blis_fast.cli import main
    from builders import FakeTerminal

    spec = tmp_path / "spec.yaml"
    spec.write_text('seed: 3\nrate: 4\nnum_requests: 20\nslo_classes: {"f\\e[2Jx\\a": {ttft_ms: 500}}\n'
                    'clients:\n  - {name: a, slo_class: "f\\e[2Jx\\a", rate_fraction: 1, profile: chat}\n')
    term = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", term)
    monkeypatch.setenv("COLUMNS", "160")
    try:
        main(["run", "--workload-spec", str(spec)])
    except SystemExit as exc:
        assert exc.code in (0, None)
    out = term.getvalue()
    assert "f\\x1b[2Jx\\x07" in out and "\x1b[2J" not in out and "\x07" not in out


def test_notices_escape_control_characters(capsys):
    from blis_fast.cli import feedback

    feedback.configure(quiet=False, verbose=1)
    try:
        feedback.logger.warning("scenario 'a\x07\x1b[2J' line one\nline two")
    finally:
        feedback.configure(quiet=False, verbose=0)
    err = capsys.readouterr().err
    assert "a\\x07\\x1b[2J' line one\nline two" in err and "\x07" not in err and "\x1b" not in err


def test_batch_scenarios_refused_before_any_candidate_loads(monkeypatch):
    import blis_fast.batch.evaluate as ev

    def refuse(*args, **kwargs):
        raise Simulated("candidates were loaded (programs run) before the scenarios were checked")

    monkeypatch.setattr(ev, "load_candidates", refuse)
    bad = {**SCENARIO, "objectives": "ttft_p99_ms[client=ghost]:min"}
    with pytest.raises(ConfigError, match="ghost"):
        blis_fast.evaluate_many(["routing: {type: round-robin}"], [bad], workers=1)
