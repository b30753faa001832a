"""Sweeps and comparisons (blis_fast.studies.sweep; blis-fast sweep / compare): grid
parsing, per-point seed statistics equal to the individual runs, determinism whatever the
parallelism, tables and figures, the shipped comparison examples, bad input."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import blis_fast
from blis_fast.studies.sweep import Axis, compare, parse_axis, parse_values, point_settings, sweep
from builders import ROOT, expect_cli_error, run_cli

SHORT = dict(workload="chatbot", output_tokens=32, output_tokens_stdev=8, output_tokens_min=8, output_tokens_max=64)
SMALL = dict(SHORT, num_requests=120, num_instances=2)


def test_values_ranges_and_lists():
    assert parse_values("10:100:10", "f") == tuple(range(10, 101, 10))
    assert parse_values("0.1:0.3:0.1", "f") == (0.1, 0.2, 0.3)
    assert parse_values("2,4,8", "f") == (2, 4, 8)
    assert parse_values("1.5,2", "f") == (1.5, 2)
    assert parse_values("round-robin,least-loaded", "f") == ("round-robin", "least-loaded")
    for bad in ("1:2", "5:1:1", "1:5:0", "1,,2", "a:b:c"):
        with pytest.raises(blis_fast.ConfigError):
            parse_values(bad, "--set rate")


def test_axes_and_weight_entries():
    assert parse_axis("num-instances=1,2") == Axis("num_instances", (1, 2))
    cfg = blis_fast.build_config({}, {"routing_policy": "weighted", "routing_scorers": "queue-depth:2"})
    assert point_settings(cfg, {"routing_scorers.kv-utilization": 5}) == {
        "routing_scorers": {"queue-depth": 2.0, "kv-utilization": 5}}
    default = blis_fast.build_config({}, {})
    merged = point_settings(default, {"routing_scorers.queue-depth": 7})["routing_scorers"]
    assert merged["queue-depth"] == 7 and len(merged) > 1  # the default scorers are kept
    assert point_settings(default, {"slo_class_weights.1": 3}) == {"slo_class_weights": [0.0, 3]}
    for bad in ("rates=1,2", "rate", "=1", "routing_scorers.=1"):
        with pytest.raises(blis_fast.ConfigError) as e:
            parse_axis(bad)
        assert e.value.field == "--set"


def test_sweep_points_are_the_mean_of_their_seed_runs():
    s = blis_fast.sweep(["rate=20,40", "num_instances=1,2"], seeds=2, metrics="e2e_p95_ms", num_requests=60, **SHORT)
    assert [(p["rate"], p["num_instances"]) for p in s.points] == [(20, 1), (20, 2), (40, 1), (40, 2)]
    assert s.seeds == [42, 43] and "e2e_p95_ms" in s.metrics
    for pt, st in zip(s.points, s.stats):
        runs = [blis_fast.simulate(rate=pt["rate"], num_instances=pt["num_instances"], seed=seed,
                                   num_requests=60, **SHORT).cluster for seed in (42, 43)]
        for m in ("ttft_p99_ms", "e2e_p95_ms", "responses_per_sec"):
            assert st[m].values == tuple(r[m] for r in runs)
            assert st[m].mean == pytest.approx(np.mean([r[m] for r in runs]))
        assert st["ttft_p99_ms"].half_width > 0
    rows = s.rows()
    assert rows[0]["offered_rate"] == 20 and "ttft_p99_ms_ci95" in rows[0] and rows[0]["seeds"] == 2


def test_sweep_is_deterministic_whatever_the_parallelism():
    a = sweep("rate=10:40:10", jobs=1, **SMALL).to_dict()
    b = sweep("rate=10:40:10", jobs=3, **SMALL).to_dict()
    assert json.dumps(a) == json.dumps(b)


def test_a_bad_point_is_refused_before_running():
    with pytest.raises(blis_fast.ConfigError) as e:
        sweep("num_instances=2,0", **SMALL)
    assert e.value.field.startswith("--set num_instances=0") and "num_instances" in e.value.message


def test_compare_runs_each_configuration_on_the_same_workload_and_seeds(tmp_path):
    (tmp_path / "one.yaml").write_text("deployment: {num_instances: 1}\n")
    (tmp_path / "two.yaml").write_text("deployment: {num_instances: 2}\npolicy: {routing: least-loaded}\n")
    c = compare([tmp_path / "one.yaml", tmp_path / "two.yaml"], "rate=30,60", num_requests=120, workload="chatbot")
    assert [(p["config"], p["rate"]) for p in c.points] == [("one", 30), ("one", 60), ("two", 30), ("two", 60)]
    direct = blis_fast.simulate(tmp_path / "two.yaml", rate=60, num_requests=120, workload="chatbot").cluster
    assert c.stats[3]["ttft_p99_ms"].mean == direct["ttft_p99_ms"]
    one = compare({"a": {"num_instances": 1}, "b": {"num_instances": 3}}, num_requests=120, workload="chatbot")
    text = one.text(["ttft_p99_ms", "responses_per_sec"])
    header, table = text.split("\n\n")
    assert header.startswith("1 seed per point")
    assert table.splitlines()[0].split() == ["metric", "a", "b", "Δ", "b"] and len(table.splitlines()) == 3
    with pytest.raises(blis_fast.ConfigError):
        compare({"a": {}, "b": {"num_instances": 0}}, num_requests=10)


@pytest.mark.slow
def test_cli_sweep_tables_and_figure(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    args = ["sweep", "--set", "rate=20,40", "--num-requests", "60", "--workload", "chatbot", "--seeds", "2"]
    code, out, err = run_cli(capsys, *args, "--out", tmp_path / "s.parquet", "--plot", tmp_path / "s.svg")
    assert code == 0, err
    header, table = out.strip().split("\n\n")
    assert header.startswith("2 seeds per point") and "95 %" in header
    assert table.splitlines()[0].split()[:3] == ["rate", "responses_per_sec", "ttft_p99_ms"]
    assert len(table.splitlines()) == 3
    table = pq.read_table(tmp_path / "s.parquet")
    assert table.column("rate").to_pylist() == [20, 40] and "ttft_p99_ms_ci95" in table.column_names
    svg = (tmp_path / "s.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "Throughput vs offered load" in svg
    code, out2, err = run_cli(capsys, *args, "--out", tmp_path / "s.csv", "--plot", tmp_path / "s2.svg")
    assert code == 0 and out2 == out
    csv = pcsv.read_csv(tmp_path / "s.csv")
    assert csv.column_names == table.column_names
    for name in table.column_names:
        expected = table.column(name).to_pylist()
        if name == "adequacy":  # the one text column: each point's verdict
            assert csv.column(name).to_pylist() == expected == ["too_short", "too_short"]
        else:
            assert csv.column(name).to_pylist() == pytest.approx(expected, rel=1e-12)
    assert (tmp_path / "s2.svg").read_bytes() == (tmp_path / "s.svg").read_bytes()
    code, js, err = run_cli(capsys, *args, "--json")
    assert code == 0 and [r["rate"] for r in json.loads(js)["rows"]] == [20, 40]


@pytest.mark.slow
def test_cli_compare_examples(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    files = sorted((ROOT / "configs" / "examples" / "compare" / "routing").glob("*.yaml"))
    assert [f.stem for f in files] == ["least-loaded", "prefix-affinity", "round-robin"]
    for f in sorted((ROOT / "configs" / "examples" / "compare").glob("*/*.yaml")):
        blis_fast.build_config(blis_fast.load_yaml(f))
    code, out, err = run_cli(capsys, "compare", *files, "--workload", "chatbot", "--num-requests", "100",
                             "--rate", "20", "--plot", tmp_path / "c.png")
    assert code == 0, err
    assert out.split("\n\n")[1].splitlines()[0].split() == ["metric", "least-loaded", "prefix-affinity", "Δ",
                                                             "prefix-affinity", "round-robin", "Δ", "round-robin"]
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_study_errors(capsys, tmp_path):
    expect_cli_error(capsys, "sweep", "--set", "rate=1:2", needles=["--set rate"])
    expect_cli_error(capsys, "sweep", "--set", "nope=1,2", needles=["--set", "unknown setting"])
    expect_cli_error(capsys, "sweep", "--set", "rate=1,2", "--out", tmp_path / "t.xlsx", needles=["--out"])
    expect_cli_error(capsys, "sweep", "--set", "rate=1,2", "--metrics", "ttft_p42_ms", needles=["--metrics"])
    expect_cli_error(capsys, "sweep", "--set", "seed=1,2", needles=["--set seed", "--seeds"])
    expect_cli_error(capsys, "sweep", "--set", "rate=1,2", "--workload-spec", ROOT / "configs" / "workloads" / "rag.yaml",
                     needles=["--set rate", "rate_scale"])
    cfg = tmp_path / "a.yaml"
    cfg.write_text("deployment: {num_instances: 2}\n")
    expect_cli_error(capsys, "compare", cfg, cfg, needles=["must differ"])
    expect_cli_error(capsys, "compare", cfg, "--out", cfg, needles=["--out"])


def test_rate_scale_multiplies_the_offered_rate(tmp_path):
    r = blis_fast.simulate(rate=10, rate_scale=3, num_requests=50)
    assert r.run_info()["workload"]["rate"] == 30
    assert np.array_equal(r.workload.arrival_us, blis_fast.simulate(rate=30, num_requests=50).workload.arrival_us)
    spec = tmp_path / "spec.yaml"
    spec.write_text("seed: 1\nduration_s: 30\nclients:\n  - {name: a, rate: 4, prompt_tokens: {type: constant, "
                    "value: 50}, output_tokens: {type: constant, value: 20}}\n")
    s = sweep("rate_scale=1,2", workload_spec=str(spec), metrics="arrived_requests")
    assert s.offered_rate == [4, 8]
    n1, n2 = (st["arrived_requests"].mean for st in s.stats)
    assert 1.6 < n2 / n1 < 2.4
    with pytest.raises(blis_fast.ConfigError) as e:
        blis_fast.simulate(workload="traces", workload_traces_filepath="x.csv", rate_scale=2)
    assert "rate_scale" in e.value.field and "trace" in e.value.message


def test_missing_matplotlib_is_one_line_naming_the_extra(capsys, monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    line = expect_cli_error(capsys, "sweep", "--set", "rate=1,2", "--plot", tmp_path / "s.png",
                            needles=["--plot", "pip install 'blis-fast[plot]'"])
    assert not (tmp_path / "s.png").exists() and "Traceback" not in line


def test_sweep_rows_carry_each_points_adequacy_and_the_cli_warns(capsys):
    """Chatbot on 4 instances (capacity ~340 req/s): 100 requests at 100 req/s are too short,
    8,000 at 100 req/s measure steady state, 8,000 at 1,400 req/s saturate."""
    study = sweep("rate=100,1400", workload="chatbot", num_instances=4, num_requests=8000)
    assert [row["adequacy"] for row in study.rows()] == ["ok", "saturated"]
    assert "rate=1400: saturated" in study.adequacy_note() and "rate=100:" not in study.adequacy_note()
    assert sweep("rate=100", workload="chatbot", num_instances=4, num_requests=8000).adequacy_note() is None
    code, out, err = run_cli(capsys, "sweep", "--set", "rate=100", "--workload", "chatbot", "--num-instances", "4")
    assert code == 0, err
    lines = [line for line in err.splitlines() if "warning" in line]
    assert len(lines) == 1 and "1 of 1 points ran inadequately (rate=100: too short" in lines[0], err
    assert "warning" not in out
    code, out, err = run_cli(capsys, "sweep", "--set", "rate=100", "--workload", "chatbot", "--num-instances", "4",
                             "--json", "--quiet")
    assert code == 0 and "warning" not in err and json.loads(out)["rows"][0]["adequacy"] == "too_short"


def test_sweeping_formulas(capsys):
    """A program setting's expressions are separated by ';' (they hold commas); the study's
    base takes the first one, so the policy needs no formula of its own."""
    from blis_fast.errors import ConfigError

    axis = parse_axis("routing_program=-load; min(load, queue) - hit_blocks ;hit_blocks if max_hit > 0 else -load")
    assert axis.values == ("-load", "min(load, queue) - hit_blocks", "hit_blocks if max_hit > 0 else -load")
    with pytest.raises(ConfigError, match="separated by ';'"):
        parse_axis("routing_program=-load;;load")
    code, out, err = run_cli(capsys, "sweep", "--num-requests", "120", "--num-instances", "3", "--rate", "80",
                             "--routing-policy", "expression", "--set", "routing_program=-load;load", "--json",
                             "--quiet")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [r["routing_program"] for r in rows] == ["-load", "load"]
    assert rows[0]["ttft_p99_ms"] != rows[1]["ttft_p99_ms"]
    code, out, err = run_cli(capsys, "sweep", "--num-requests", "20", "--routing-policy", "expression", "--set",
                             "routing_program=-load;load.x")
    assert code == 2 and "attribute access" in err
    # an expression detector's formula (its saturation test at the default)
    code, out, err = run_cli(capsys, "sweep", "--num-requests", "300", "--num-instances", "2", "--rate", "400",
                             "--flow-control", "expression", "--set",
                             "flow_instance_program=max(0, 1 - in_flight); max(0, 64 - in_flight)", "--json",
                             "--quiet")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [r["flow_instance_program"] for r in rows] == ["max(0, 1 - in_flight)", "max(0, 64 - in_flight)"]
    assert rows[0]["ttft_p99_ms"] > rows[1]["ttft_p99_ms"]  # (one request in flight per instance: a long wait)
