"""``blis-fast agents capacity`` and ``studies.agents_capacity``: the highest multiplier of
a scenario's arrival rates meeting SLO predicates, found by the cluster capacity search's
core (``studies.capacity.search_rate``).  An M/M/1 processor-sharing case whose answer is
known analytically, the shipped SLA scenario within 10 probes, the JSON, and refusals."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from blis_fast.errors import ConfigError
from blis_fast.agents import run_scenario
from blis_fast.studies.agents_capacity import agents_capacity, parse_agent_slos, scaled
from blis_fast.agents.run import scenario_of
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

CONFIGS = Path(__file__).resolve().parents[2] / "configs/agents"
SLA = CONFIGS / "deep-research-sla.yaml"


def mm1(rate_per_min: float = 240.0, duration_s: float = 2000.0, runs: int = 3) -> dict:
    """One tool of exponential work (mean 0.1 units) on one resource of capacity 1 unit/s:
    an M/M/1 queue under processor sharing, mu = 10 requests/s; its mean latency is
    1 / (mu - lambda) whatever the discipline."""
    return {"resources": {"cpu": 1}, "types": {"t": {"nodes": {"work": {
        "work": {"cpu": {"type": "exponential", "mean": 0.1}}}}}},
            "arrivals": {"t": rate_per_min}, "duration_s": duration_s, "seed": 11, "runs": runs}


def test_mm1_ps_mean_latency_bound_gives_mu_minus_one_over_t():
    # mean latency <= 0.5 s  <=>  lambda <= mu - 1/0.5 = 8 requests/s = 480/min: 2 x the 240/min start
    r = agents_capacity(mm1(), "latency_mean_s[type=t]<=0.5", tolerance=0.02, by="mean")
    assert r.answer == pytest.approx(2.0, rel=0.05)
    assert r.failed_neighbour > r.answer
    assert r.to_dict()["answer_rates_per_min"]["t"] == pytest.approx(480.0, rel=0.05)
    met = [p for p in r.probes if p.met]
    assert max(p.value for p in met) == r.answer and all(p.value <= r.answer for p in met)
    assert all(p.stats["latency_mean_s[type=t]"].mean > 0.5 for p in r.probes if not p.met)
    # met with 95 % confidence (the default): a lower answer, whose whole interval meets the bound
    sure = agents_capacity(mm1(), "latency_mean_s[type=t]<=0.5", tolerance=0.02)
    assert sure.answer < r.answer and sure.answer == pytest.approx(2.0, rel=0.1)
    best = [p for p in sure.probes if p.value == sure.answer][0].stats["latency_mean_s[type=t]"]
    assert best.high <= 0.5


def test_the_sla_scenario_is_answered_within_ten_probes_and_by_the_cli():
    code, out, err = cli_in_process("agents", "capacity", "--scenario", SLA,
                                    "--slo", "p95_latency_s[type=deep-research]<=30", "--json")
    assert code == 0, err[-2000:]
    d = json.loads(out)
    assert d["probes_count"] <= 10 and d["probes"][0]["multiplier"] == 1.0
    rate = d["answer_rates_per_min"]["deep-research"]
    assert 10 < rate < 33  # above the start (p95 5.6 s there), below npu saturation (256 / 470 x 60)
    assert d["answer_multiplier"] * 10 == pytest.approx(rate)
    last_met = [p for p in d["probes"] if p["multiplier"] == d["answer_multiplier"]][0]
    p95 = last_met["metrics"]["latency_p95_s[type=deep-research]"]
    assert last_met["met"] and p95["mean"] + p95["ci95"] <= 30 and d["met_by"] == "ci"
    assert d["slos"] == ["latency_p95_s[type=deep-research]<=30"]
    # independent runs (seeds the search never used): the answer meets the SLA, 1.05 x misses it
    sc = scenario_of(SLA)
    for m, meets in ((d["answer_multiplier"], True), (1.05 * d["answer_multiplier"], False)):
        fresh = dataclasses.replace(scaled(sc, m), seed=sc.seed + 1000)
        assert (run_scenario(fresh).types["deep-research"]["latency_p95_s"] <= 30) is meets, m


def test_a_bound_never_met_and_one_met_everywhere_say_so():
    low = agents_capacity(mm1(duration_s=200, runs=1), "latency_mean_s<=0.01", max_probes=6)
    assert low.answer is None and "no rate meets" in low.message  # 0.1 s alone: never
    high = agents_capacity(mm1(duration_s=200, runs=1), "completed[type=t]>=0", max_probes=3)
    assert high.answer == max(p.value for p in high.probes) and high.failed_neighbour is None
    assert "every probed rate meets" in high.message


def test_a_predicate_without_a_selector_applies_to_every_type_with_arrivals():
    sc = scenario_of(CONFIGS / "mixed.yaml")
    preds = parse_agent_slos("p99_latency_s<=60, utilization[resource=npu]<0.9", sc)
    assert [str(p) for p in preds] == [f"latency_p99_s[type={t}]<=60" for t in
                                       ("web-search", "product-matching", "deep-research")] + \
                                      ["utilization[resource=npu]<0.9"]


@pytest.mark.parametrize("args,needles", [
    (["--slo", "bogus<=3"], ("--slo", "unknown agent metric 'bogus'")),
    (["--slo", "p95_latency_s<=3", "--by", "median"], ("--by", "ci, mean")),
    (["--slo", "p95_latency_s[type=nope]<=3"], ("--slo", "[type=NAME]", "deep-research")),
    (["--slo", "utilization<=0.5"], ("--slo", "[resource=NAME]", "npu")),
    (["--slo", "p95_latency_s[resource=npu]<=3"], ("--slo", "[type=NAME]")),
    (["--slo", "p95_latency_s<=-1"], ("--slo", "finite number")),
    (["--slo", "p95_latency_s"], ("--slo", "expected metric<=value")),
    (["--slo", "p95_latency_s<=30", "--tolerance", "0"], ("--tolerance",)),
    (["--slo", "p95_latency_s<=30", "--max-probes", "0"], ("--max-probes",)),
    (["--slo", "p95_latency_s<=30", "--runs", "0"], ("--runs",)),
    (["--slo", "p95_latency_s<=30", "--runs", "1000", "--max-probes", "40"], ("--max-probes", "40 probes x 1000 runs")),
])
def test_refusals_are_one_line_naming_the_field(args, needles):
    assert_clean_error(*cli_in_process("agents", "capacity", "--scenario", SLA, *args), needles=needles)


def test_a_scenario_without_arrivals_is_refused():
    bare = mm1(rate_per_min=0)
    with pytest.raises(ConfigError) as e:
        agents_capacity(bare, "latency_mean_s<=1")
    assert e.value.field == "arrivals"


def test_a_multiplier_beyond_the_run_limits_is_not_run():
    # 4e7 requests/min (for 10 µs: a few requests) is under the 6e7/min limit of a type's rate; 2 x is not
    big = {**mm1(rate_per_min=4e7, duration_s=1e-5, runs=1), "resources": {"cpu": 1e9}}
    r = agents_capacity(big, "completed[type=t]>=0", max_probes=3)
    assert r.probes[-1].too_large and not r.probes[-1].met
    assert "size limits" in r.message


def test_utilization_windows_add_up_to_the_runs_utilization():
    """Windows of the spread-out work: their time average is the run's utilization, and a
    lone request's tool (constant rate) shows exactly its work / capacity in its window."""
    from blis_fast.agents.generate import build_templates, generate_run
    from blis_fast.agents.results import summarize_run, utilization_windows
    from blis_fast.agents.run import simulate_run

    sc = scenario_of(CONFIGS / "tools-only.yaml")
    out = simulate_run(sc, build_templates(sc), generate_run(sc, 0))
    edges, util = utilization_windows(sc, out, windows=50)
    assert util.shape == (len(sc.resources), 50) and (util >= 0).all()
    whole = summarize_run(sc, out)["resources"]
    for r in sc.resources:
        assert util[r.index].mean() == pytest.approx(whole[r.name]["utilization"], rel=1e-9, abs=1e-12)
    lone = {"resources": {"cpu": 10}, "types": {"t": {"nodes": {"a": {"work": {"cpu": 5}}}}},
            "arrivals": {"t": 0.2}, "duration_s": 6000, "seed": 1}  # ~20 requests, far apart
    sc1 = scenario_of(lone)
    out1 = simulate_run(sc1, build_templates(sc1), generate_run(sc1, 0))
    edges1, util1 = utilization_windows(sc1, out1, windows=200_000)  # windows of ~0.03 s
    # a request alone runs 0.5 s at the full capacity: the windows inside it are exactly full, none above
    assert util1.max() == pytest.approx(1.0) and (util1 <= 1.0 + 1e-9).all()


@pytest.mark.parametrize("command,extra", [
    ("run", ["--runs", "1"]),
    ("capacity", ["--slo", "latency_p95_s<=5", "--max-probes", "3"]),
])
def test_plots_are_drawn(tmp_path, command, extra):
    pytest.importorskip("matplotlib")
    out = tmp_path / "figure.png"
    code, _, err = cli_in_process("agents", command, "--scenario", CONFIGS / "tools-only.yaml", *extra, "--plot", out)
    assert code == 0, err[-2000:]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_plot_path_is_checked_before_running(tmp_path):
    assert_clean_error(*cli_in_process("agents", "run", "--scenario", CONFIGS / "tools-only.yaml", "--plot",
                                       tmp_path / "f.gif"), needles=("--plot", ".png or .svg"))
    assert_clean_error(*cli_in_process("agents", "capacity", "--scenario", SLA, "--slo", "latency_p95_s<=5",
                                       "--plot", SLA), needles=("--plot",))
