"""What the studies print (blis_fast.studies.tables, sweep; blis-fast sweep / compare):
numbers in the run view's format rounded to the precision of their interval, tables split
to the terminal width, the --metrics columns, compare's paired differences, the seeds
named in the header, SLO columns only where targets exist, the offered rate counting
session follow-up turns."""

from __future__ import annotations

import pytest

import blis_fast
from blis_fast.studies.sweep import compare, offered_rate, study_metrics, sweep
from blis_fast.studies.tables import bracket_text, interval_text, terminal_width, text_table
from builders import expect_cli_error, run_cli

TINY = dict(workload="chatbot", num_requests=40, output_tokens=16, output_tokens_stdev=4, output_tokens_min=4,
            output_tokens_max=32)


@pytest.mark.parametrize("metric,mean,half,text", [
    ("responses_per_sec", 299.166, 12.3, "299 ± 12"),
    ("ttft_p99_ms", 10940.2, 290.4, "10,940 ± 290"),
    ("ttft_p99_ms", 1.0944e4, 2.9e2, "10,940 ± 290"),
    ("slo_attainment", 0.97312, 0.0123, "97.3 ± 1.2%"),
    ("ttft_p99_ms", 0.52349, 0.0123, "0.523 ± 0.012"),
    ("e2e_p99_ms", 1742.3, 0.0, "1,742"),  # one seed: as the run view prints it
    ("responses_per_sec", 299.166, 0.0, "299"),
    ("token_budget_occupancy", 0.0123, 0.0, "1.2%"),
    ("ttft_p99_ms", float("nan"), 1.0, "-"),
    ("ttft_p99_ms", -0.0001, 0.0123, "0.000 ± 0.012"),
    ("slo_attainment", -0.0184, 0.0014, "-1.84 ± 0.14%"),
])
def test_interval_text(metric, mean, half, text):
    assert interval_text(metric, mean, half) == text


def test_interval_text_extremes():
    assert interval_text("ttft_p99_ms", 1e300, 1e-300).endswith(" ± 0.000000000000")
    assert interval_text("ttft_p99_ms", 1.5, 1e300).startswith("0 ± 1")


def test_interval_text_with_unit():
    assert interval_text("responses_per_sec", 299.166, 12.3, with_unit=True) == "299 ± 12 req/s"
    assert interval_text("ttft_p99_ms", 1742.3, 0.0, with_unit=True) == "1,742 ms"


def test_tables_split_to_the_width_repeating_the_key_columns():
    head = ["config", *(f"metric_{k}" for k in range(8))]
    rows = [["baseline", *("12,345 ± 67" for _ in range(8))], ["other", *("1.0" for _ in range(8))]]
    wide = text_table(head, rows, left=1)
    assert len(wide.splitlines()) == 3
    narrow = text_table(head, rows, left=1, width=60)
    blocks = narrow.split("\n\n")
    assert len(blocks) > 1
    for b in blocks:
        lines = b.splitlines()
        assert len(lines) == 3 and all(len(x) <= 60 for x in lines)
        assert lines[0].startswith("config") and lines[2].startswith("other")
    cells = [c for b in blocks for c in b.splitlines()[0].split()[1:]]
    assert cells == head[1:]  # every column once, in order


def two_class_spec(tmp_path):
    """A spec with a class with targets (fast) and one without (bulk)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("seed: 3\nrate: 4\nnum_requests: 30\nslo_classes: {fast: {ttft_ms: 500}, bulk: {}}\n"
                    "clients:\n  - {name: a, slo_class: fast, rate_fraction: 0.5, profile: chat}\n"
                    "  - {name: b, slo_class: bulk, rate_fraction: 0.5, profile: chat}\n")
    return spec


def test_slo_columns_only_where_targets_exist(tmp_path):
    plain = blis_fast.build_config({}, {"workload": "chatbot"})
    names = study_metrics([plain])
    assert "slo_attainment" not in names and "goodput_rps" not in names
    assert {"token_budget_occupancy", "batch_slot_occupancy", "kv_occupancy_mean"} <= set(names)
    spec = two_class_spec(tmp_path)
    judged = study_metrics([blis_fast.build_config({}, {"workload_spec": str(spec)})])
    assert "slo_attainment" in judged and "slo_attainment[class=fast]" in judged
    assert "slo_attainment[class=bulk]" not in judged
    trace = blis_fast.build_config({}, {"workload": "traces", "workload_traces_filepath": str(spec)})
    assert "slo_attainment" in study_metrics([trace])  # a trace's header may set targets


def test_offered_rate_counts_session_follow_up_turns(tmp_path):
    spec = tmp_path / "sessions.yaml"
    spec.write_text("seed: 1\nduration_s: 30\nclients:\n  - {name: a, rate: 2, profile: chat, "
                    "session: {turns: {type: constant, value: 4}, think_time_s: {type: constant, value: 1}}}\n"
                    "  - {name: b, rate: 3, profile: chat}\n")
    cfg = blis_fast.build_config({}, {"workload_spec": str(spec)})
    assert offered_rate(cfg) == pytest.approx(2 * 4 + 3)
    assert offered_rate(blis_fast.build_config({}, {"workload_spec": str(spec), "rate_scale": 2})) == \
        pytest.approx(22)
    assert offered_rate(blis_fast.build_config({}, {"rate": 7})) == 7


def test_compare_differences_are_paired_over_the_same_seeds():
    c = compare({"a": {"num_instances": 1}, "b": {"num_instances": 2}, "a2": {"num_instances": 1}},
                "rate=20,40", seeds=2, **TINY)
    diffs = c.differences()
    assert diffs[:2] == [None, None]  # the first configuration's points
    for k in (2, 3):  # b at rate 20 and 40 against a at the same rate, seed by seed
        d = diffs[k]["ttft_p99_ms"]
        per_seed = [x - y for x, y in zip(c.stats[k]["ttft_p99_ms"].values, c.stats[k - 2]["ttft_p99_ms"].values)]
        assert d.values == pytest.approx(per_seed)
    assert all(diffs[k][m].mean == 0 and diffs[k][m].half_width == 0 for k in (4, 5) for m in c.metrics)
    rows = c.rows()
    assert rows[0]["ttft_p99_ms_diff"] is None and rows[2]["ttft_p99_ms_diff"] == diffs[2]["ttft_p99_ms"].mean
    text = c.text(["ttft_p99_ms"])
    header, table, title, paired = text.split("\n\n")
    assert header.startswith("2 seeds per point (42, 43)")
    assert title.startswith("difference against a (paired")
    assert [x.split()[:2] for x in paired.splitlines()[1:]] == [["b", "20"], ["b", "40"], ["a2", "20"], ["a2", "40"]]
    assert paired.splitlines()[3].split()[2:] == ["0"]  # a2 is a: the same runs


def test_side_by_side_compare_has_a_difference_column():
    c = compare({"a": {"num_instances": 1}, "b": {"num_instances": 2}}, seeds=2, **TINY)
    header, table = c.text(["responses_per_sec", "slo_attainment", "token_budget_occupancy"]).split("\n\n")
    lines = table.splitlines()
    assert lines[0].split() == ["metric", "a", "b", "Δ", "b"]
    assert [x.split()[0] for x in lines[1:]] == ["responses_per_sec", "token_budget_occupancy"]  # no targets
    assert lines[2].endswith(" pp")  # a difference of fractions in percentage points


def test_cli_prints_the_metrics_columns_and_fits_the_width(capsys, monkeypatch):
    args = ["sweep", "--set", "rate=20,40", *(f"--{k.replace('_', '-')}={v}" for k, v in TINY.items())]
    code, out, err = run_cli(capsys, *args, "--metrics", "preemption_count,queue_depth_mean")
    assert code == 0, err
    assert out.startswith("1 seed per point") and "no interval" in out
    assert "preemption_count" in out and "queue_depth_mean" in out
    monkeypatch.setenv("COLUMNS", "70")
    code, out, err = run_cli(capsys, *args, "--metrics", "preemption_count,queue_depth_mean")
    assert code == 0, err
    tables = out.strip().split("\n\n")[1:]
    assert len(tables) > 1 and all(len(x) <= 70 for t in tables for x in t.splitlines())
    assert all(t.splitlines()[0].startswith("rate") for t in tables)


@pytest.mark.slow
def test_study_figure_labels_offered_load_and_missing_targets(tmp_path):
    pytest.importorskip("matplotlib")
    from blis_fast.studies.plots import study_figure

    s = sweep("rate=20,40", **TINY)
    study_figure(s, tmp_path / "s.svg", "Sweep")
    svg = (tmp_path / "s.svg").read_text()
    for text in ("no SLO targets in the workload", "follow-up turns included", "Step occupancy and headroom",
                 "token budget per step", "time a step runs"):
        assert text in svg, text


def test_terminal_width_from_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "90")
    assert terminal_width() == 90
    monkeypatch.setenv("COLUMNS", "3")
    assert terminal_width() == 20  # a table needs some room
    for junk in ("9" * 5000, "-5", "wide", "٣٣"):  # no traceback, no giant width
        monkeypatch.setenv("COLUMNS", junk)
        assert terminal_width() is None or terminal_width() < 10**6


def test_attainment_of_a_class_without_targets_is_refused_before_running(capsys, tmp_path):
    spec = two_class_spec(tmp_path)
    for args, field in ((("sweep", "--set", "rate_scale=1,2", "--metrics", "slo_attainment[class=bulk]"), "--metrics"),
                        (("capacity", "--slo", "slo_attainment[class=bulk]>=0.9"), "--slo")):
        err = expect_cli_error(capsys, *args, "--workload-spec", spec, needles=[field, "sets no SLO targets"])
        assert "in the run at" not in err  # refused before any run


def test_capacity_answer_rounded_to_its_bracket():
    assert bracket_text(338.686, 362.039) == "339"
    assert bracket_text(66.6667, 67.3333) == "66.67"
    assert bracket_text(1024.0, 1536.0) == "1,020"
    assert bracket_text(5.0, 5.0) == "5"


def test_compare_of_one_configuration_has_no_difference_table():
    c = compare({"only": {"num_instances": 1}}, "rate=20,40", **TINY)
    text = c.text(["ttft_p99_ms"])
    assert "difference against" not in text and len(text.split("\n\n")) == 2
