"""Random input on every surface -- CLI flags, run-config YAML, workload specs, policy
bundles, BLIS trace CSVs, rich-trace headers and the Python API.  Whatever the input:
exit 2 with one ``error: <field>: <message>`` line (ConfigError / WorkloadError from the
API) or a valid run; the input files are unchanged; nothing warns.  A few dozen
examples per surface run in the fast suite, more with ``-m slow`` (HARDENING_EXAMPLES per
surface, default 60; a campaign: ``HARDENING_EXAMPLES=2000 python -m pytest -m slow
tests/hardening/test_fuzz_surfaces.py``)."""

from __future__ import annotations

import copy
import glob
import os
import warnings

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blis_fast
from blis_fast.config.memory import memory_budget
from blis_fast.config.sim import FLAG_PATHS
from blis_fast.errors import ConfigError
from builders import ROOT, make_trace
from hardening_helpers import assert_ok_or_clean_error, cli_in_process, digest, no_warnings

FAST = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
MORE = settings(max_examples=int(os.environ.get("HARDENING_EXAMPLES", "60")), deadline=None, suppress_health_check=list(HealthCheck), database=None)

TEXT_VALUES = st.one_of(
    st.sampled_from(["0", "-1", "1", "2", "3", "16", "1e3", "1e8", "1_0", "0x10", "nan", "inf", "-inf", "5e-324",
                     "1e-300", "1e308", str(2**31), str(2**62), str(2**63), str(2**64), "1.5", "-0", "", " ", "abc",
                     "x" * 5000, "a:1", "queue-depth:1e308,kv-utilization:2", "4GB", "10MiB", "true", "0,0,0",
                     "1e9,1e9,1e9", "roofline", "blackbox", "chatbot", "traces", "constant", "weighted",
                     "prefix-affinity", "sort", "blis-2026.02", "A100", "qwen/qwen3-14b", "\x00", "１"]),
    st.integers(min_value=-2**70, max_value=2**70).map(str),
    st.floats().map(repr),
    st.text(max_size=8),
)
RUN_FLAGS = sorted("--" + k.replace("_", "-") for k in FLAG_PATHS
                   if k not in ("check_invariants", "enable_prefix_caching", "workload_traces_filepath", "workload_spec"))

YAML_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**80, max_value=2**80),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
              st.sampled_from([1, 2, 16, 100, 0.5, 5e-324, 1e308, "chatbot", "weighted", "x" * 300, 2**63, 2**64])),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def flag_args(pairs) -> list[str]:
    args = ["run", "--num-requests", "20", "--max-memory", "1GiB"]  # given flags override these
    for flag, value in pairs:
        args += [flag, value]
    return args


def check_flags(pairs):
    with no_warnings():
        code, out, err = cli_in_process(*flag_args(pairs))
    assert_ok_or_clean_error(code, out, err)


@FAST
@given(st.lists(st.tuples(st.sampled_from(RUN_FLAGS), TEXT_VALUES), min_size=1, max_size=3))
def test_fuzz_flags(pairs):
    check_flags(pairs)


@pytest.mark.slow
@MORE
@given(st.lists(st.tuples(st.sampled_from(RUN_FLAGS), TEXT_VALUES), min_size=1, max_size=4))
def test_fuzz_flags_more(pairs):
    check_flags(pairs)


# ============================================================================ run-config YAML

CONFIG_KEYS = st.one_of(st.sampled_from(sorted(FLAG_PATHS)), st.sampled_from(["engine", "deployment", "workload",
                                                                               "simulation", "policy", "kv_tiers",
                                                                               "bogus"]))


def check_config(tmp_path, data):
    data = {"num_requests": 20, "max_memory": "1GiB", **data}
    try:
        text = yaml.safe_dump(data)
    except yaml.YAMLError:
        return
    cfg = tmp_path / "fuzz.yaml"
    cfg.write_text(text)
    before = digest(cfg)
    with no_warnings():
        assert_ok_or_clean_error(*cli_in_process("run", "--config", cfg))
    assert digest(cfg) == before


@FAST
@given(st.dictionaries(CONFIG_KEYS, YAML_VALUES, max_size=3))
def test_fuzz_run_config(tmp_path_factory, data):
    check_config(tmp_path_factory.mktemp("cfg"), data)


@pytest.mark.slow
@MORE
@given(st.dictionaries(CONFIG_KEYS, YAML_VALUES, max_size=4))
def test_fuzz_run_config_more(tmp_path_factory, data):
    check_config(tmp_path_factory.mktemp("cfg"), data)


# ============================================================================ mutations of shipped files


def paths_of(obj, prefix=()):
    """Every path (tuple of keys / indices) into a nested dict/list."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from paths_of(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from paths_of(v, prefix + (i,))


def mutated(doc, path, value):
    doc = copy.deepcopy(doc)
    if not path:
        return value
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return doc


SPECS = {p: yaml.safe_load(open(p)) for p in sorted(glob.glob(str(ROOT / "configs" / "workloads" / "*.yaml")))}
BUNDLES = {p: yaml.safe_load(open(p)) for p in sorted(glob.glob(str(ROOT / "configs" / "policies" / "*.yaml")))}


@st.composite
def spec_mutations(draw):
    src = draw(st.sampled_from(sorted(SPECS)))
    doc = SPECS[src]
    paths = list(paths_of(doc))
    out = doc
    for _ in range(draw(st.integers(1, 2))):
        out = mutated(out, draw(st.sampled_from(paths)), draw(YAML_VALUES))
        paths = list(paths_of(out)) if isinstance(out, (dict, list)) else [()]
    return src, out


def check_spec(src, data):
    from blis_fast.workload.generate import generate_requests
    from blis_fast.workload.spec import parse_spec

    with no_warnings(), memory_budget(512 * 2**20):
        try:
            spec = parse_spec(data, base_dir=ROOT / "configs" / "workloads", source=src)
            req = generate_requests(spec)
            assert len(req) >= 1
        except ConfigError as exc:  # WorkloadError is a ConfigError
            assert "\n" not in str(exc) and len(str(exc)) < 600


@FAST
@given(spec_mutations())
def test_fuzz_workload_specs(mutation):
    check_spec(*mutation)


@pytest.mark.slow
@MORE
@given(spec_mutations())
def test_fuzz_workload_specs_more(mutation):
    check_spec(*mutation)


@st.composite
def bundle_mutations(draw):
    doc = BUNDLES[draw(st.sampled_from(sorted(BUNDLES)))]
    return mutated(doc, draw(st.sampled_from(list(paths_of(doc)))), draw(YAML_VALUES))


def check_bundle(data):
    from blis_fast.config.policy import bundle_to_settings
    from blis_fast.config.sim import build_config

    with no_warnings():
        try:
            build_config({}, {}, policy_settings=bundle_to_settings(data, "bundle.yaml"))
        except ConfigError as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 600


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(bundle_mutations())
def test_fuzz_policy_bundles(data):
    check_bundle(data)


@pytest.mark.slow
@MORE
@given(bundle_mutations())
def test_fuzz_policy_bundles_more(data):
    check_bundle(data)


# ============================================================================ trace files

ARRIVALS = st.one_of(st.sampled_from(["0", "0.5", "1e-3", " 2 ", "1_0", "nan", "-1", "1e300", "", "x", "0x1", "1e5"]),
                     st.floats(min_value=0, max_value=1e7).map(repr))
TOKENS = st.one_of(
    st.lists(st.integers(min_value=-2**63, max_value=2**63 - 1), max_size=40).map(lambda xs: '"' + str(xs) + '"'),
    st.lists(st.integers(0, 128000), min_size=1, max_size=300).map(lambda xs: '"' + str(xs) + '"'),
    st.sampled_from(['"[1, 2, 3]"', "null", '"[]"', '"[1.5]"', '"[01]"', '"[+1]"', '"[1,]"', '"[' + str(2**64) + ']"',
                     '"[[1]]"', "[1", '"[1, 2', "", '"' + "[" * 1000 + '"']),
)


@st.composite
def blis_csv(draw):
    rows = ["arrival_time,request_id,model,prefill_tokens,decode_tokens"]
    for i in range(draw(st.integers(0, 6))):
        rows.append(",".join([draw(ARRIVALS), f"r{i}", "m", draw(TOKENS), draw(TOKENS)]))
    return "\n".join(rows) + draw(st.sampled_from(["\n", "", "\n\n", "\r\n"]))


def check_blis_csv(tmp_path, text):
    from blis_fast.workload.formats.blis_csv import load_blis_trace

    p = tmp_path / "t.csv"
    p.write_text(text)
    before = digest(p)
    with no_warnings(), memory_budget(512 * 2**20):
        try:
            wl = load_blis_trace(p, 16)
            assert len(wl) >= 1
        except ConfigError as exc:
            assert "\n" not in str(exc)
    assert digest(p) == before


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(blis_csv())
def test_fuzz_blis_csv(tmp_path_factory, text):
    check_blis_csv(tmp_path_factory.mktemp("csv"), text)


@pytest.mark.slow
@MORE
@given(blis_csv())
def test_fuzz_blis_csv_more(tmp_path_factory, text):
    check_blis_csv(tmp_path_factory.mktemp("csv"), text)


HEADER_KEYS = st.sampled_from(["format", "version", "seed", "names", "slo_targets", "prefixes", "workload", "x"])


@pytest.fixture(scope="module")
def rich_body(tmp_path_factory):
    from blis_fast.workload.formats.rich_trace import write_trace
    from blis_fast.workload.generate import generate_requests
    from blis_fast.workload.spec import parse_spec

    spec = parse_spec({"seed": 2, "duration_s": 2, "clients": [{"rate": 5, "prompt_tokens": 40, "output_tokens": 9}]})
    p = write_trace(generate_requests(spec), tmp_path_factory.mktemp("rich") / "r.csv")
    return "".join(ln for ln in p.read_text().splitlines(keepends=True) if not ln.startswith("#"))


def check_rich_header(tmp_path, body, header):
    from blis_fast.workload.formats.rich_trace import load_trace

    try:
        text = yaml.safe_dump(header)
    except yaml.YAMLError:
        return
    p = tmp_path / "r.csv"
    p.write_text("# blis-fast-trace\n" + "".join("# " + ln + "\n" for ln in text.splitlines()) + body)
    with no_warnings(), memory_budget(512 * 2**20):
        try:
            load_trace(p, 16)
        except ConfigError as exc:
            assert "\n" not in str(exc)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.dictionaries(HEADER_KEYS, YAML_VALUES, max_size=3))
def test_fuzz_rich_trace_headers(tmp_path_factory, rich_body, header):
    check_rich_header(tmp_path_factory.mktemp("rh"), rich_body, header)


@pytest.mark.slow
@MORE
@given(st.dictionaries(HEADER_KEYS, YAML_VALUES, max_size=4))
def test_fuzz_rich_trace_headers_more(tmp_path_factory, rich_body, header):
    check_rich_header(tmp_path_factory.mktemp("rh"), rich_body, header)


# ============================================================================ the Python API

API_KEYS = st.sampled_from(sorted(FLAG_PATHS) + ["bogus"])


def check_api(overrides):
    overrides = {"num_requests": 15, "max_memory": "1GiB", **overrides}
    overrides.pop("workload_traces_filepath", None)
    overrides.pop("workload_spec", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            r = blis_fast.simulate(**overrides)
            r.summary()
        except ConfigError as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 600
    assert not caught, [str(w.message) for w in caught]


@FAST
@given(st.dictionaries(API_KEYS, YAML_VALUES, max_size=3))
def test_fuzz_api(overrides):
    check_api(overrides)


@pytest.mark.slow
@MORE
@given(st.dictionaries(API_KEYS, YAML_VALUES, max_size=4))
def test_fuzz_api_more(overrides):
    check_api(overrides)


def test_fuzz_trace_fixture_roundtrip(tmp_path):
    """(the trace builder used above produces a valid file)"""
    wl = blis_fast.workload.load_blis_trace(make_trace(tmp_path / "t.csv", n=5), 16)
    assert len(wl) == 5
