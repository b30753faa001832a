"""Random and hostile values fed to the batch, study and adapter APIs: ``evaluate_many``,
``sweep``, ``compare``, ``capacity``, ``BlisGEPAAdapter`` (constructor, ``evaluate``,
``make_reflective_dataset``) and the OpenEvolve ``evaluate`` function.  Whatever the
values -- wrong types, NaN, infinities, huge integers, huge strings, control characters,
nested junk -- each call either succeeds (with clean rows: a known status, a finite score)
or raises ``ConfigError``; never another exception, never a hang (every example runs
under an alarm).  Workloads are tiny and a study may run at most ``SMALL_STUDY``
simulations here, so a valid random grid stays cheap; the refusal above it is the same
code path as the documented maximum's.  More examples: ``-m slow`` with
``HARDENING_EXAMPLES`` (default 60)."""

from __future__ import annotations

import contextlib
import math
import os
import signal

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import blis_fast
from blis_fast.batch.candidates import INVALID, PROGRAM_FAILED
from blis_fast.batch.task import BUDGET_EXCEEDED, RUN_REFUSED, SIMULATION_FAILED
from blis_fast.errors import ConfigError

FAST = settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)
MORE = settings(max_examples=int(os.environ.get("HARDENING_EXAMPLES", "60")), deadline=None,
                suppress_health_check=list(HealthCheck), database=None)
SMALL_STUDY = 12  # simulations a fuzzed study may run (the real maximum is blis_fast.studies.runs.MAX_SIMULATIONS)
ALARM_S = 120  # an example that takes longer has hung

CLEAN_STATUSES = {"ok", INVALID, PROGRAM_FAILED, BUDGET_EXCEEDED, SIMULATION_FAILED, RUN_REFUSED}  # not internal_error
TINY = {"num_requests": 10, "rate": 20, "max_memory": "1GiB"}
SCENARIO = {"name": "tiny", "config": {"num_requests": 10, "rate": 20, "num_instances": 2}}

ATOMS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70), st.floats(), st.text(max_size=6),
    st.sampled_from([0, 1, 2, 3, -1, 2**63, 10**4000, 0.5, 5e-324, 1e308, math.nan, math.inf, "", " ", "nan", "inf",
                     "1e999999", "9" * 5000, "x" * 5000, "\x07\x1b[2J\x9b", "\x00", "tiny", "rate=10,20", "rate=1:3:1",
                     "rate.x=1", "max_num_seqs=1e30", "slo_attainment:max", "utilization[instance=1]",
                     "slo_attainment[class=nope]", "ttft_p99_ms<=100", "ttft_p99_ms[tenant=x]<=5",
                     "routing: round-robin",
                     "routing: {type: weighted, params: {scorers: {queue-depth: 1e308}}}", "[[[", "policy"]),
)
JUNK = st.recursive(ATOMS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.one_of(st.text(max_size=5), st.sampled_from(["name", "config", "routing", "policy", "metric", "max_events"])),
    inner, max_size=3), max_leaves=5)
SETS = st.one_of(JUNK, st.sampled_from(["rate=10,20", "rate=5:15:5", "max_num_seqs=4,8", ("rate", [10, 20]),
                                        ["rate=10,20", "num_instances=1,2"], "routing_scorers.queue-depth=1,2"]))
SMALL = st.one_of(JUNK, st.integers(min_value=1, max_value=3))


@pytest.fixture(autouse=True, scope="module")
def small_studies():
    from blis_fast.studies import runs

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runs, "MAX_SIMULATIONS", SMALL_STUDY)
        yield


@contextlib.contextmanager
def alarm(seconds: int = ALARM_S):
    def hung(*_):
        raise TimeoutError(f"an example ran longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def config_error_or(call):
    """The value of ``call()``, or None when it raised ConfigError (anything else fails)."""
    with alarm():
        try:
            return call()
        except ConfigError as exc:
            assert exc.field and "\n" not in str(exc), str(exc)[:300]
            assert len(str(exc)) < 5000, len(str(exc))
            return None


def check_rows(table):
    for row in table.select(["status", "score"]).to_pylist():
        assert row["status"] in CLEAN_STATUSES and math.isfinite(row["score"]) and 0.0 <= row["score"] <= 1.0, row


# ----------------------------------------------------------------------------- studies


def check_sweep(sets, kwargs):
    config_error_or(lambda: blis_fast.sweep(sets, **kwargs, **TINY))


# each keyword is left out (its default) about half the time, so that valid calls are common
STUDY_KW = st.just({}) | st.fixed_dictionaries({}, optional={
    "seeds": SMALL, "metrics": st.one_of(JUNK, st.just("ttft_p90_ms")), "jobs": SMALL})


@FAST
@given(SETS, STUDY_KW)
@example("rate=10,20", {"seeds": 2})  # a valid study runs in every fast pass
def test_fuzz_sweep(sets, kwargs):
    check_sweep(sets, kwargs)


@pytest.mark.slow
@MORE
@given(SETS, STUDY_KW)
def test_fuzz_sweep_more(sets, kwargs):
    check_sweep(sets, kwargs)


def check_compare(configs, sets, kwargs):
    config_error_or(lambda: blis_fast.compare(configs, sets, **kwargs, **TINY))


CONFIGS = st.one_of(JUNK, st.dictionaries(st.text(min_size=1, max_size=4), st.one_of(
    JUNK, st.just({"num_instances": 1}), st.just({"num_instances": 2})), min_size=1, max_size=2))


@FAST
@given(CONFIGS, SETS, STUDY_KW)
@example({"a": {"num_instances": 1}, "b": {"num_instances": 2}}, "rate=10,20", {})
def test_fuzz_compare(configs, sets, kwargs):
    check_compare(configs, sets, kwargs)


@pytest.mark.slow
@MORE
@given(CONFIGS, SETS, STUDY_KW)
def test_fuzz_compare_more(configs, sets, kwargs):
    check_compare(configs, sets, kwargs)


def check_capacity(slo, kwargs):
    def call():
        r = blis_fast.capacity(slo, **{"max_probes": 2, "seeds": 1, **kwargs}, **TINY)  # cheap unless fuzzed
        assert r.answer is None or math.isfinite(r.answer)
    config_error_or(call)


CAPACITY_KW = st.just({}) | st.fixed_dictionaries({}, optional={
    "search": st.one_of(JUNK, st.sampled_from(["rate", "instances"])), "slo_classes": JUNK, "seeds": SMALL,
    "tolerance": JUNK, "rate_min": JUNK, "rate_max": JUNK, "search_max_instances": SMALL,
    "max_probes": st.one_of(JUNK, st.integers(min_value=1, max_value=4)), "jobs": SMALL})


@FAST
@given(st.one_of(JUNK, st.just("ttft_p99_ms<=1000")), CAPACITY_KW)
@example("ttft_p99_ms<=1000", {})
def test_fuzz_capacity(slo, kwargs):
    check_capacity(slo, kwargs)


@pytest.mark.slow
@MORE
@given(st.one_of(JUNK, st.just("ttft_p99_ms<=1000")), CAPACITY_KW)
def test_fuzz_capacity_more(slo, kwargs):
    check_capacity(slo, kwargs)


# ----------------------------------------------------------------------------- batch


SCENARIO_KEYS = ["name", "config", "seed", "objectives", "slo_classes", "workload_spec", "trace", "bogus"]
SCENARIOS = st.one_of(JUNK, st.just([SCENARIO]), st.just(SCENARIO),
                      st.builds(lambda k, v: [{**SCENARIO, k: v}], st.sampled_from(SCENARIO_KEYS), JUNK))
CANDIDATES = st.one_of(JUNK, st.lists(st.one_of(JUNK, st.just("routing: {type: least-loaded}")), min_size=1,
                                      max_size=2), st.just(["routing: {type: round-robin}"]))


def check_evaluate_many(candidates, scenarios, kwargs):
    result = config_error_or(lambda: blis_fast.evaluate_many(candidates, scenarios, **kwargs))
    if result is not None:
        check_rows(result.table)


BATCH_KW = st.just({}) | st.fixed_dictionaries({}, optional={
    "objectives": st.one_of(JUNK, st.just("slo_attainment:max,ttft_p99_ms:min:100")), "budget": JUNK,
    "workers": SMALL, "summarize": JUNK, "program_timeout_s": JUNK})


@FAST
@given(CANDIDATES, SCENARIOS, BATCH_KW)
@example(["routing: {type: round-robin}", "routing: {type: bogus}"], [SCENARIO], {"workers": 2})
def test_fuzz_evaluate_many(candidates, scenarios, kwargs):
    check_evaluate_many(candidates, scenarios, kwargs)


@pytest.mark.slow
@MORE
@given(CANDIDATES, SCENARIOS, BATCH_KW)
def test_fuzz_evaluate_many_more(candidates, scenarios, kwargs):
    check_evaluate_many(candidates, scenarios, kwargs)


# ----------------------------------------------------------------------------- adapters


def check_gepa(init, batch, candidate, capture, components):
    gepa = pytest.importorskip("gepa")
    from blis_fast.adapters.gepa import BlisGEPAAdapter

    adapter = config_error_or(lambda: BlisGEPAAdapter([SCENARIO], **init))
    if adapter is None:
        return

    def evaluate():
        out = adapter.evaluate(batch, candidate, capture)
        assert isinstance(out, gepa.EvaluationBatch) and len(out.scores) == len(batch)
        assert all(math.isfinite(s) and 0.0 <= s <= 1.0 for s in out.scores)
        return out

    out = config_error_or(evaluate)
    if out is not None:
        config_error_or(lambda: adapter.make_reflective_dataset(candidate, out, components))


GEPA_INIT = st.just({}) | st.fixed_dictionaries({}, optional={"objectives": JUNK, "budget": JUNK, "workers": SMALL})
BATCHES = st.one_of(JUNK, st.just(["tiny"]), st.just(["tiny"]), st.lists(st.sampled_from(["tiny", "ghost"]),
                                                                          max_size=2))
# components holding programs: one that overflows (program faults), one that does not compile, a tree, and a
# whole bundle with a victim program (the reflective records show each program in canonical form)
PROGRAM_TEXTS = st.sampled_from(['{type: expression, score: "1e300 * 1e300 * queue - load"}',
                                 '{type: expression, score: "hit_blocks -"}',
                                 "{type: tree, tree: {feature: queue, threshold: 4, left: hit_blocks, right: -load}}",
                                 'preemption: {victim: expression, evict: "generated"}',
                                 'flow_control: {policy: expression, instance: "1e300 * 1e300 * queue", '
                                 'saturated: "total < in_routing", recheck: free-slot}'])
COMPONENTS = st.one_of(JUNK, st.just({"routing": "least-loaded"}), st.dictionaries(
    st.sampled_from(["routing", "policy", "scheduler", "bogus"]), st.one_of(JUNK, st.just("round-robin"),
                                                                             PROGRAM_TEXTS), max_size=2))


@FAST
@given(GEPA_INIT, BATCHES, COMPONENTS, JUNK, JUNK)
@example({}, ["tiny"], {"routing": '{type: expression, score: "1e300 * 1e300 * queue - load"}',
                        "policy": 'preemption: {victim: expression, evict: "generated"}'}, True, ["routing", "policy"])
def test_fuzz_gepa_adapter(init, batch, candidate, capture, components):
    check_gepa(init, batch, candidate, capture, components)


@pytest.mark.slow
@MORE
@given(GEPA_INIT, BATCHES, COMPONENTS, JUNK, JUNK)
def test_fuzz_gepa_adapter_more(init, batch, candidate, capture, components):
    check_gepa(init, batch, candidate, capture, components)


@pytest.fixture(scope="module")
def oe_scenarios(tmp_path_factory):
    path = tmp_path_factory.mktemp("oe") / "scenarios.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [SCENARIO]}))
    return path


def check_openevolve(oe_scenarios, tmp_path, program_path, text):
    from blis_fast.adapters import openevolve as oe

    if text is not None:
        program_path = tmp_path / "program.yaml"
        program_path.write_text(text, encoding="utf-8", errors="surrogatepass")
    with pytest.MonkeyPatch.context() as mp, alarm():
        mp.setenv(oe.SCENARIOS_ENV, str(oe_scenarios))
        res = oe.evaluate(program_path)  # never raises (OpenEvolve would retry)
    metrics = res if isinstance(res, dict) else res.metrics
    assert 0.0 <= metrics["combined_score"] <= 1.0 and all(math.isfinite(v) for v in metrics.values())


@FAST
@given(JUNK, st.one_of(st.none(), st.text(max_size=40),
                       st.sampled_from(["routing: round-robin", "\x07: [", "x" * 5000])))
def test_fuzz_openevolve_evaluate(oe_scenarios, tmp_path_factory, program_path, text):
    check_openevolve(oe_scenarios, tmp_path_factory.mktemp("prog"), program_path, text)


@pytest.mark.slow
@MORE
@given(JUNK, st.one_of(st.none(), st.text(max_size=200)))
def test_fuzz_openevolve_evaluate_more(oe_scenarios, tmp_path_factory, program_path, text):
    check_openevolve(oe_scenarios, tmp_path_factory.mktemp("prog"), program_path, text)
