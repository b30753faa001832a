"""blis_fast.experiments.bench: report structure, the text table, and ``blis-fast bench --json``.

Only the 1k scenario, one repeat, no start-up (fresh processes would compile); nothing
here asserts a wall time.
"""

from __future__ import annotations

import json

import pytest

from blis_fast import ConfigError
from blis_fast.experiments.bench import (
    SANITY_METRICS,
    SATURATION_RPS_PER_INSTANCE,
    SCENARIOS,
    TARGET_LOAD,
    format_report,
    run_bench,
)
from builders import BOTH_WAYS, invoke


@pytest.fixture(scope="module")
def report():
    return run_bench(scenarios=["1k"], repeats=1, startup=False)


def test_report_structure(report):
    json.dumps(report, allow_nan=False)  # JSON-serializable as is
    assert {"cpu_count", "platform", "python", "numpy", "numba"} <= set(report["machine"])
    assert report["startup"] is None
    [sc] = report["scenarios"]
    assert sc["name"] == "1k"
    assert (sc["num_requests"], sc["num_instances"]) == (1_000, 1)
    assert len(sc["kernel_times_s"]) == 1
    assert sc["kernel_best_s"] == min(sc["kernel_times_s"]) > 0
    assert sc["kernel_median_s"] >= sc["kernel_best_s"]
    assert sc["requests_per_s"] == pytest.approx(sc["num_requests"] / sc["kernel_best_s"])
    assert sc["steps_per_s"] == pytest.approx(sc["steps"] / sc["kernel_best_s"])
    assert sc["events"] >= sc["steps"] > 0
    assert set(SANITY_METRICS) <= set(sc["metrics"])
    assert sc["metrics"]["completed_requests"] == 1_000
    assert sc["metrics"]["prefix_cache_hit_rate"] > 0  # the shared prefix is cached


def test_format_report(report):
    text = format_report(report)
    lines = text.splitlines()
    assert any(line.startswith("1k ") for line in lines)
    assert "sim req/s" in text and "steps/s" in text
    assert "cold compile" not in text  # no start-up section without start-up figures
    fake = {**report, "startup": {"command": "x", "cold_compile_s": 9.5, "cached_startup_s": 1.0,
                                  "cached_startup_times_s": [1.0], "first_call_s": 0.5}}
    text = format_report(fake)
    assert "cold compile" in text and "9.50" in text and "first simulate() call" in text
    # aligned: the header and every row of a table have the same width
    table = text.split("\n\n")[1].splitlines()[1:]  # minus the title line
    assert len({len(line) for line in table}) == 1


def test_scenario_rates_follow_the_calibration():
    for row in SCENARIOS.values():
        assert row["rate"] == round(TARGET_LOAD * SATURATION_RPS_PER_INSTANCE * row["num_instances"], 1)


def test_unknown_scenario_is_a_config_error():
    with pytest.raises(ConfigError, match="scenarios"):
        run_bench(scenarios=["nope"], repeats=1, startup=False)


@BOTH_WAYS
def test_cli_bench_json(mode, capsys):
    code, stdout, stderr = invoke(mode, capsys, "bench", "--json", "--scenarios", "1k", "--repeats", "1", "--no-startup")
    assert code == 0, stderr
    out = json.loads(stdout)
    assert [s["name"] for s in out["scenarios"]] == ["1k"]
    assert out["startup"] is None
