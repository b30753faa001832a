"""Capacity search (blis_fast.studies.capacity): the analytic M/D/1 answer, reproducibility,
the instance search on a deterministic cluster, the search's probe budget on a noiseless
curve, bad input, and the CLI end to end."""

from __future__ import annotations

import json

import pytest

import blis_fast
from blis_fast.studies import capacity as cap
from blis_fast.studies.slo import SloPredicate, parse_slos
from builders import ONE_TOKEN_PROMPTS, ROOT, SINGLE_SERVER, constant_outputs, expect_cli_error, run_cli

# M/D/1: Poisson arrivals, service S = 10 steps x 1 ms = 10 ms; the mean end-to-end time is
# W + S with the Pollaczek-Khinchine wait W = rho S / (2 (1 - rho)).  E2E <= 20 ms <=> W <= S
# <=> rho <= 2/3 <=> rate <= 66.67 req/s.
MD1 = dict(SINGLE_SERVER, beta_coeffs=[1000, 0, 0], arrival="poisson", **ONE_TOKEN_PROMPTS, **constant_outputs(10))
MD1_SLO = "e2e_mean_ms<=20"
MD1_ANSWER = 200 / 3


def md1_e2e_ms(rate: float) -> float:
    rho = rate * 0.010
    return 10.0 + (10.0 * rho / (2 * (1 - rho)) if rho < 1 else 1e9)


@pytest.mark.slow
def test_md1_rate_within_2_percent_and_checked_by_independent_runs():
    r = blis_fast.capacity(MD1_SLO, rate=50, num_requests=20_000, seeds=3, **MD1)
    assert abs(r.answer / MD1_ANSWER - 1) < 0.02, r.table()
    assert r.failed_neighbour is not None and r.failed_neighbour <= r.answer * 1.02
    # independent runs (other seeds): the answer meets the SLO, 1.05 x the answer does not
    at = [blis_fast.simulate(rate=r.answer, num_requests=20_000, seed=s, **MD1).cluster["e2e_mean_ms"]
          for s in (101, 102, 103)]
    above = [blis_fast.simulate(rate=1.05 * r.answer, num_requests=20_000, seed=s, **MD1).cluster["e2e_mean_ms"]
             for s in (101, 102, 103)]
    assert sum(at) / 3 <= 20 < sum(above) / 3, (at, above)


def test_capacity_is_reproducible_and_reports_every_probe():
    kwargs = dict(rate=40, num_requests=1500, seeds=2, tolerance=0.05, **MD1)
    a = blis_fast.capacity(MD1_SLO, **kwargs)
    b = blis_fast.capacity(MD1_SLO, **kwargs)
    assert json.dumps(a.to_dict()) == json.dumps(b.to_dict())
    d = a.to_dict()
    assert d["simulations"] == 2 * d["probes_count"] == 2 * len(d["probes"])
    met = [p["value"] for p in d["probes"] if p["met"]]
    failed = [p["value"] for p in d["probes"] if not p["met"]]
    assert d["answer"] == max(met) and d["failed_neighbour"] == min(failed) > d["answer"]
    for p in d["probes"]:  # "met" is the mean over the seeds against the threshold
        m = p["metrics"]["e2e_mean_ms"]
        assert len(m["per_seed"]) == 2 and p["met"] == (m["mean"] <= 20)
    assert "req/s" in a.table() and str(d["answer"]) in a.message


def test_instance_search_finds_the_deterministic_split():
    """Constant arrivals at 250 req/s round-robin over n single-request servers of 10 ms:
    instance i sees a request every n x 4 ms, so nothing ever waits iff 4 n >= 10 ms, n >= 3;
    with fewer instances the queues grow without bound."""
    settings = dict(SINGLE_SERVER, beta_coeffs=[1000, 0, 0], **ONE_TOKEN_PROMPTS, **constant_outputs(10))
    settings.update(arrival="constant", rate=250, num_requests=400, num_instances=8, seeds=1)
    r = blis_fast.capacity("e2e_p99_ms<=10.5", search="instances", **settings)
    assert r.answer == 3 and r.failed_neighbour == 2, r.table()
    assert [p.value for p in r.probes][:2] == [8, 4]


def _fake_runs(curve):
    def run_all(configs, metrics, jobs, on_done=None, where=None, metrics_field="--metrics"):
        return [{m: curve(c.workload.rate) for m in metrics} for c in configs]
    return run_all


@pytest.mark.parametrize("start", [50.0, 5.0, 60.0, 500.0])
def test_rate_search_needs_at_most_ten_probes_for_a_1_percent_bracket(monkeypatch, start):
    """On the noiseless M/D/1 curve, bracketing + ITP reach a 1 % bracket around the exact
    answer in <= 10 probes from a start within 10x of it."""
    monkeypatch.setattr(cap, "run_all", _fake_runs(md1_e2e_ms))
    r = cap.capacity(MD1_SLO, rate=start, seeds=1, **MD1)
    assert r.answer <= MD1_ANSWER <= r.failed_neighbour <= r.answer * 1.01
    assert len(r.probes) <= 10, [p.value for p in r.probes]


def test_noise_limited_answer_is_reported(monkeypatch):
    """Seeds that disagree by more than the bracket: the search stops and says so."""
    def run_all(configs, metrics, jobs, on_done=None, where=None, metrics_field="--metrics"):
        return [{m: md1_e2e_ms(c.workload.rate) * (0.8 if c.simulation.seed % 2 else 1.2) for m in metrics}
                for c in configs]

    monkeypatch.setattr(cap, "run_all", run_all)
    r = cap.capacity(MD1_SLO, rate=50, seeds=2, **MD1)
    assert r.noise_limited and "seed noise" in r.message
    assert r.probes[-1].uncertain


def test_unmet_everywhere_and_met_everywhere(monkeypatch):
    monkeypatch.setattr(cap, "run_all", _fake_runs(md1_e2e_ms))
    r = cap.capacity("e2e_mean_ms<=5", rate=50, seeds=1, max_probes=6, **MD1)  # below the service time
    assert r.answer is None and r.message.startswith("no rate meets")
    r = cap.capacity(MD1_SLO, rate_min=10, rate_max=20, seeds=1, **MD1)
    assert r.answer == 20 and "raise --rate-max" in r.message and len(r.probes) == 2
    assert "seed noise is not assessed" in r.message


def test_slo_predicates():
    preds = parse_slos("ttft_p99_ms<=200, e2e_p99_ms < 5000,slo_attainment>=0.99")
    assert [str(p) for p in preds] == ["ttft_p99_ms<=200", "e2e_p99_ms<5000", "slo_attainment>=0.99"]
    assert preds[0].holds(200) and not preds[1].holds(5000) and preds[2].margin(0.99) == 0
    assert preds[0].margin(100) > 0 > preds[0].margin(400)
    per_class = parse_slos("ttft_p99_ms<=200,slo_attainment[class=batch]>=0.5", slo_classes="a,b")
    assert [p.metric for p in per_class] == ["ttft_p99_ms[class=a]", "ttft_p99_ms[class=b]",
                                             "slo_attainment[class=batch]"]
    assert SloPredicate("x", ">", 1).holds(2)


@pytest.mark.parametrize("kwargs, field", [
    (dict(slo="ttft_p99_ms=<200"), "--slo"),
    (dict(slo="ttft_p99_ms<=fast"), "--slo"),
    (dict(slo=""), "--slo"),
    (dict(slo="ttft_p99_ms<=200", search="latency"), "--search"),
    (dict(slo="ttft_p99_ms<=200", seeds=0), "--seeds"),
    (dict(slo="ttft_p99_ms<=200", tolerance=0), "--tolerance"),
    (dict(slo="ttft_p99_ms<=200", rate_min=5, rate_max=5), "--rate-min"),
    (dict(slo="ttft_p99_ms<=200", search="instances", rate_max=5), "--rate-max"),
    (dict(slo="ttft_p99_ms<=200", workload="traces", workload_traces_filepath="t.csv"), "--search"),
    (dict(slo="ttft_p99_ms<=200", slo_classes="a,,b"), "--slo-class"),
    (dict(slo="ttft_p99_ms<=200", slo_classes="nope", workload_spec=str(ROOT / "configs" / "workloads" / "chat.yaml")), "--slo-class"),
    (dict(slo="slo_attainment[class=x]>=0.9"), "--slo"),
    (dict(slo="ttft_p99_ms<=200", jobs=0), "--jobs"),
])
def test_bad_input_names_the_option(kwargs, field):
    with pytest.raises(blis_fast.ConfigError) as e:
        blis_fast.capacity(**kwargs)
    assert e.value.field.startswith(field)


@pytest.mark.slow
def test_cli_capacity_table_json_and_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    args = ["capacity", "--slo", MD1_SLO, "--rate", "40", "--num-requests", "600", "--seeds", "2",
            "--tolerance", "0.1", "--alpha-coeffs", "0,0,0", "--beta-coeffs", "1000,0,0", "--max-num-seqs", "1",
            "--total-kv-blocks", "200000", "--prompt-tokens", "1", "--prompt-tokens-stdev", "0",
            "--prompt-tokens-min", "1", "--prompt-tokens-max", "1", "--output-tokens", "10",
            "--output-tokens-stdev", "0", "--output-tokens-min", "10", "--output-tokens-max", "10"]
    code, out, err = run_cli(capsys, *args, "--plot", tmp_path / "cap.png", "--out", tmp_path / "cap.json")
    assert code == 0, err
    assert out.splitlines()[0] == "2 seeds per probe, mean ± 95 % confidence interval"
    assert out.split("\n\n")[1].splitlines()[0].split() == ["rate", MD1_SLO, "met"]
    assert "highest rate meeting e2e_mean_ms<=20" in out
    saved = json.loads((tmp_path / "cap.json").read_text())
    assert (tmp_path / "cap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out, err = run_cli(capsys, *args, "--json")
    assert code == 0 and json.loads(out) == saved


def test_cli_capacity_errors(capsys, tmp_path):
    expect_cli_error(capsys, "capacity", "--slo", "ttft_p99_ms<=200", "--seeds", "-1", needles=["--seeds"])
    expect_cli_error(capsys, "capacity", "--slo", "ttft_p99_ms", needles=["--slo"])
    expect_cli_error(capsys, "capacity", "--slo", "ttft_p99_ms<=200", "--plot", tmp_path / "x.jpg",
                     needles=["--plot", ".png or .svg"])
    expect_cli_error(capsys, "capacity", "--slo", "ttft_p99_ms<=200", "--rate", "-3", needles=["--rate"])


def test_rate_search_on_a_workload_spec_scales_its_clients_per_slo_class(tmp_path):
    """A spec's offered rate is its clients' total; each probe scales them (rate_scale).
    --slo-class applies the predicate to each class's own requests."""
    spec = tmp_path / "two-classes.yaml"
    spec.write_text("seed: 5\nrate: 20\nduration_s: 20\nslo_classes: {fast: {ttft_ms: 50}, slow: {ttft_ms: 500}}\n"
                    "clients:\n"
                    "  - {name: a, slo_class: fast, rate_fraction: 0.5, prompt_tokens: {type: constant, value: 1},\n"
                    "     output_tokens: {type: constant, value: 10}}\n"
                    "  - {name: b, slo_class: slow, rate_fraction: 0.5, prompt_tokens: {type: constant, value: 1},\n"
                    "     output_tokens: {type: constant, value: 10}}\n")
    settings = dict(SINGLE_SERVER, beta_coeffs=[1000, 0, 0], workload_spec=str(spec), seeds=2, tolerance=0.05)
    r = blis_fast.capacity("ttft_mean_ms<=11", slo_classes="fast,slow", **settings)
    assert [p.metric for p in r.slos] == ["ttft_mean_ms[class=fast]", "ttft_mean_ms[class=slow]"]
    assert r.probes[0].value == 20  # the spec's own total rate
    assert r.answer is not None and r.answer < r.failed_neighbour
    assert r.noise_limited or r.failed_neighbour <= r.answer * 1.05
    # M/D/1 at the answer: a mean wait near 10 ms (TTFT = wait + the 1 ms prefill step), rho ~ 2/3
    assert 0.5 < r.answer * 0.010 < 0.8, r.table()
    at = blis_fast.simulate(workload_spec=str(spec), rate_scale=r.answer / 20, **SINGLE_SERVER)
    assert len(at.workload) / (20 * r.answer) == pytest.approx(1, rel=0.15)  # the spec's rates were scaled


# ============================================================================ run adequacy (results.adequacy)

# llama-3.1-8b on H100, the chatbot preset, 4 instances: the answer with 20,000 requests per
# probe (test_default_search_matches_20000_requests) -- the 333 req/s
CHATBOT_4 = dict(workload="chatbot", num_instances=4)
CHATBOT_4_ANSWER = 332.2


def test_default_chatbot_search_answers_within_5_percent_of_long_runs():
    """From its defaults (100 requests at 1 req/s) the search sizes its probes to the span
    their E2E p99 needs: it answers, instead of every probe 'meeting' on runs shorter than
    one request's latency up to the rate cap."""
    r = blis_fast.capacity("ttft_p99_ms<=200", **CHATBOT_4)
    assert r.answer == pytest.approx(CHATBOT_4_ANSWER, rel=0.05), r.table()
    assert r.message.startswith("highest rate meeting") and "every probed rate" not in r.message
    met = [p for p in r.probes if p.met]
    assert all(p.verdict == "ok" for p in met)
    near = [p for p in met if p.value > 100]
    assert near and all(p.num_requests > 1000 for p in near)  # lengthened from the default 100
    saturated = [p for p in r.probes if p.verdict == "saturated"]
    assert saturated and not any(p.met for p in saturated)
    d = r.to_dict()["probes"][0]["adequacy"]
    assert set(d) == {"verdict", "num_requests", "arrival_span_s", "arrival_span_needed_s", "arrival_rate_rps",
                      "completion_rate_rps"}


@pytest.mark.slow
def test_default_search_matches_20000_requests():
    short = blis_fast.capacity("ttft_p99_ms<=200", **CHATBOT_4)
    long = blis_fast.capacity("ttft_p99_ms<=200", num_requests=20_000, **CHATBOT_4)
    assert short.answer == pytest.approx(long.answer, rel=0.05), (short.table(), long.table())
    assert long.answer == pytest.approx(CHATBOT_4_ANSWER, rel=0.01)


def test_search_stops_naming_what_to_lengthen_when_probes_cannot_grow(monkeypatch):
    """With the lengthening capped at 150 requests, the probe at 8 req/s (span ~19 s,
    under 10 x its E2E p99 of ~2.8 s) meets but cannot be trusted: the search stops with
    the highest adequately measured rate and the --num-requests that would do."""
    monkeypatch.setattr(cap, "MAX_PROBE_REQUESTS", 150)
    r = blis_fast.capacity("ttft_p99_ms<=200", seeds=1, **CHATBOT_4)
    assert "stopped" in r.message and "too short to trust" in r.message and "--num-requests" in r.message
    assert "every probed rate" not in r.message and "--rate-max" not in r.message
    assert r.answer is not None and r.answer < 8 and r.failed_neighbour is None
    assert r.probes[-1].verdict == "too_short" and not r.probes[-1].met
    rows = [line.split() for line in r.table().splitlines() if line.endswith("unknown (too short)")]
    assert [row[0] for row in rows] == ["8"]  # the last probe's row: neither met nor failed


def test_search_on_a_short_workload_spec_stops_naming_its_duration(tmp_path):
    """A spec fixes its own length (duration_s): 5 s of arrivals of ~2.7 s requests cannot
    be lengthened by the search."""
    spec = tmp_path / "short.yaml"
    spec.write_text("seed: 3\nduration_s: 5\nclients:\n"
                    "  - {name: a, rate: 20, prompt_tokens: {type: constant, value: 100},\n"
                    "     output_tokens: {type: constant, value: 256}}\n")
    r = blis_fast.capacity("ttft_p99_ms<=200", workload_spec=str(spec), seeds=1)
    assert r.answer is None and "duration_s" in r.message and "stopped" in r.message, r.message
    assert len(r.probes) == 1


def test_a_saturated_probe_fails_even_when_its_slo_holds():
    """e2e_p99 <= 10 min holds at every instance count on these runs, but with 3 or fewer
    instances the queue grows without bound (chatbot at 300 req/s, ~85 per instance)."""
    r = blis_fast.capacity("e2e_p99_ms<=600000", search="instances", rate=300, num_instances=1, seeds=1,
                           workload="chatbot")
    assert r.answer == 4 and r.failed_neighbour == 3, r.table()
    three = next(p for p in r.probes if p.value == 3)
    assert three.holds and not three.met and three.verdict == "saturated"
    assert three.completion_rate < three.arrival_rate
    assert "saturated: arrivals" in r.message and "completions" in r.message
    assert "no (saturated)" in r.table()
