"""Every failure reported by the hardening issue, one test each: the input is now rejected
with exit 2 and one ``error: <field>: <message>`` line (or, where the input is valid, the
run is correct), nothing is allocated beyond the memory budget, inputs are never
overwritten, and no warning is printed before an error."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import blis_fast
from blis_fast.errors import ConfigError, WorkloadError
from builders import LLAMA_8B_HF, make_trace, write
from hardening_helpers import ALIAS_BOMB, assert_clean_error, cli_in_process, digest, no_warnings

SMALL_SPEC = """\
seed: 3
duration_s: 2
slo_classes: {gold: {ttft_ms: 200}, bronze: {}}
clients:
  - {name: a, rate: 10, slo_class: gold, prompt_tokens: 100, output_tokens: 20}
  - name: b
    rate: 5
    slo_class: bronze
    prompt_tokens: {type: uniform, min: 10, max: 300}
    output_tokens: 30
    session: {turns: 3, think_time_s: 0.1}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("examples")
    out = {"dir": d}
    out["trace"] = make_trace(d / "trace.csv", n=12)
    out["spec"] = write(d, "spec.yaml", SMALL_SPEC)
    from blis_fast.workload.generate import generate_requests
    from blis_fast.workload.spec import load_spec
    from blis_fast.workload.formats.rich_trace import write_trace

    req = generate_requests(load_spec(out["spec"]))
    out["rich_csv"] = write_trace(req, d / "rich.csv")
    out["rich_parquet"] = write_trace(req, d / "rich.parquet")
    return out


def run_cli(*args):
    return cli_in_process(*args)


# ============================================================================ flags: int64, ranges, denormals, budgets

FLAG_CASES = [
    ("horizon-2^64", ["--horizon", 2**64], ["--horizon", "2^62"]),
    ("snapshot-2^70", ["--snapshot-refresh-interval", 2**70], ["--snapshot-refresh-interval"]),
    ("rate-denormal-constant", ["--rate", "5e-324", "--arrival", "constant"], ["--rate"]),
    ("rate-tiny-constant", ["--rate", "1e-300", "--arrival", "constant"], ["rate"]),
    ("max-instances-unbounded", ["--max-instances", "1000000"], ["--max-instances", "65536"]),
    ("output-tokens-1e15", ["--output-tokens", "1e15"], ["--output-tokens"]),
    ("num-requests-underscore", ["--num-requests", "1_0"], ["--num-requests"]),
    ("num-requests-hex", ["--num-requests", "0x10"], ["--num-requests"]),
    ("tp-not-dividing-heads", ["--tp", "3"], ["tp", "32 attention heads"]),
    ("alpha-huge", ["--alpha-coeffs", "1e300,0,0"], ["--alpha-coeffs"]),
    ("beta-step-overflow", ["--beta-coeffs", "1e9,1e9,1e9", "--max-num-batched-tokens", "2147483647"],
     ["--beta-coeffs", "2^53"]),
    ("routing-weight-inf", ["--routing-scorers", "queue-depth:1e400"], ["--routing-scorers"]),
    ("scheduler-weight-huge", ["--scheduler", "sort", "--scheduler-weights", "arrival:1e200"],
     ["--scheduler-weights"]),
    ("model-name-huge", ["--model", "m" * 100_000], ["--model", "4096"]),
    ("max-memory-bad-unit", ["--max-memory", "12XB"], ["--max-memory"]),
    ("max-memory-tiny", ["--max-memory", "10"], ["--max-memory"]),
    ("seed-2^64", ["--seed", 2**64], ["--seed"]),
    ("max-num-seqs-huge", ["--max-num-seqs", 2**40], ["--max-num-"]),
    ("latency-huge", ["--admission-latency", 10**13], ["--admission-latency"]),
]


@pytest.mark.parametrize("case_id, args, needles", FLAG_CASES, ids=[c[0] for c in FLAG_CASES])
def test_flag_examples(case_id, args, needles):
    assert_clean_error(*run_cli("run", *args), needles)


@pytest.mark.parametrize("args", [
    ["--num-instances", "65536"],  # the documented maximum: 28 GiB of KV block rows
    ["--num-requests", "100000000"],  # the documented maximum
    ["--num-requests", "1e8"],
    ["--num-requests", "1e7", "--num-instances", "64", "--max-memory", "8GiB"],
    ["--prefix-tokens", "1e9"],
    ["--output-tokens", "1e9", "--output-tokens-max", "2000000000", "--num-requests", "1000"],
    ["--prefix-index-capacity", "10000000", "--routing-policy", "prefix-affinity", "--num-instances", "4096",
     "--total-kv-blocks", "1000"],
], ids=["instances-max", "requests-max", "requests-1e8", "1e7-on-64", "prefix-1e9", "output-1e9", "prefix-index"])
def test_documented_maxima_rejected_up_front_small(args):
    """Refused from the estimate, before anything large is built: little memory and little
    CPU (a work bound, not a wall-clock one: the machine may be loaded; the wall time is a
    benchmark figure, docs/limits.md)."""
    import tracemalloc

    tracemalloc.start()
    t0 = time.process_time()
    line = assert_clean_error(*run_cli("run", *args), ["simulation.max_memory", "raise --max-memory"])
    cpu = time.process_time() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 * 2**20, (peak, line)
    assert cpu < 5.0, (cpu, line)  # no hang; typically ~0.1 s
    assert "GiB" in line or "TiB" in line or "PiB" in line, line


def test_workload_stats_block_size_2_70(files):
    assert_clean_error(*run_cli("workload", "stats", files["trace"], "--block-size", 2**70), ["--block-size"])


# ============================================================================ YAML: types, int64, nesting, bombs, duplicates


@pytest.mark.parametrize("text, needles", [
    ("simulation:\n  max_events: 1180591620717411303424\n", ["simulation.max_events"]),
    ("horizon: 18446744073709551616\n", ["horizon"]),
    (ALIAS_BOMB, ["alias expansion"]),
    (ALIAS_BOMB + "model: *a8\n", ["alias expansion"]),
    ("rate: " + "[" * 300 + "]" * 300 + "\n", ["nested"]),
    ("rate: 3\nnum_requests: 5\nrate: 4\n", ["duplicate key 'rate'"]),
    ("engine: [\n  tp: 1\n", ["malformed YAML", "line"]),
    ("engine:\n  tp: [1]\n", ["engine.tp"]),
    ("engine:\n  enable_prefix_caching: {a: 1}\n", ["engine.enable_prefix_caching"]),
    ("model: [a, b]\n", ["model"]),
    ("a: &x [1, *x]\n", ["recursive"]),
    ("? [a]\n: 1\n", ["unhashable"]),
    ("rate: .nan\n", ["rate"]),
    ("num_requests: 1.0e8\nrate: 1.0e300\n", ["rate"]),
    ("workload:\n  type: {a: 1}\n", ["workload.type"]),
], ids=["max-events-2^70", "horizon-2^64", "alias-bomb", "bomb-as-model", "deep", "duplicate", "five-line-error",
        "tp-list", "bool-mapping", "model-list", "recursive-alias", "unhashable-key", "nan", "rate-huge",
        "type-mapping"])
def test_run_config_examples(tmp_path, text, needles):
    cfg = write(tmp_path, "c.yaml", text)
    before = digest(cfg)
    assert_clean_error(*run_cli("run", "--config", cfg), needles)
    assert digest(cfg) == before


def test_alias_bomb_is_refused_fast_and_small(tmp_path):
    import tracemalloc

    cfg = write(tmp_path, "bomb.yaml", ALIAS_BOMB + "model: *a8\n")
    assert len(cfg.read_bytes()) < 500
    tracemalloc.start()
    t0 = time.process_time()
    assert_clean_error(*run_cli("run", "--config", cfg), ["alias"])
    cpu = time.process_time() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert cpu < 5.0, cpu  # no expansion; typically milliseconds
    assert peak < 20 * 2**20, peak


# ============================================================================ policy bundles


@pytest.mark.parametrize("text, needles", [
    ("preemption: {victim: [last]}\n", ["preemption.victim"]),
    ("routing: {type: weighted, params: {scorers: {queue-depth: [1]}}}\n", ["routing.scorers.queue-depth"]),
    ("routing: {type: [weighted]}\n", ["routing.type"]),
    ("admission: {type: token-bucket, params: {capacity: .nan}}\n", ["capacity"]),
    ("admission: {type: token-bucket, params: {capacity: 1.0e300}}\n", ["capacity"]),
    ("observability: {snapshot_refresh_interval: 1180591620717411303424}\n", ["snapshot_refresh_interval"]),
    ("observability: {fields: {queue_depth: [1]}}\n", ["queue_depth"]),
    ("observability: [1]\n", ["observability"]),
    ("scheduler: {type: sort, params: {weights: {arrival: .inf}}}\n", ["arrival"]),
    ("priority: {type: slo-based, params: {slo_class_weights: {a: 1}}}\n", ["slo_class_weights"]),
    ("fitness: {weights: {throughput: [1]}}\n", ["fitness"]),
    ("{[x]: 1}\n", ["unhashable"]),
    ("5: {type: x}\n", ["5"]),
], ids=["victim-list", "scorer-list", "type-list", "capacity-nan", "capacity-huge", "interval-2^70", "field-list",
        "observability-list", "weight-inf", "class-weights-mapping", "fitness-list", "unhashable", "int-section"])
def test_policy_bundle_examples(tmp_path, text, needles):
    b = write(tmp_path, "b.yaml", text)
    assert_clean_error(*run_cli("run", "--policy-config", b), needles)


# ============================================================================ workload specs


def spec_with(**client) -> str:
    import yaml

    c = {"name": "c", "rate": 2, "prompt_tokens": 50, "output_tokens": 10, **client}
    return yaml.safe_dump({"seed": 1, "duration_s": 5, "clients": [c]})


@pytest.mark.parametrize("text, needles", [
    (spec_with(output_tokens=1.0e19), ["clients[0].output_tokens"]),
    (spec_with(output_tokens={"type": "gaussian", "mean": 1e18, "std": 1}), ["output_tokens.mean"]),
    (spec_with(output_tokens={"type": "empirical", "values": [1, 1e19]}), ["output_tokens.values[1]"]),
    (spec_with(prompt_tokens={"type": "lognormal", "mu": 1000, "sigma": 1}), ["prompt_tokens.mu"]),
    (spec_with(session={"turns": 5e7, "think_time_s": 1}), ["max_memory"]),
    (spec_with(session={"turns": 5e9, "think_time_s": 1}), ["turns"]),
    (spec_with(session={"turns": 3, "think_time_s": 1e300}), ["think_time_s"]),
    (spec_with(rate=5e-324), ["rate"]),
    (spec_with(name=["x"]), ["clients[0].name"]),
    (spec_with(arrival={"type": ["poisson"]}), ["arrival.type"]),
    ("seed: 1\nduration_s: 5\nprefix_groups:\n  docs: {count: 1000, length: 1000000}\n"
     "clients:\n  - {name: c, rate: 2, prompt_tokens: 5, output_tokens: 5, prefix: {group: docs}}\n", ["max_memory"]),
    ("seed: 1\nduration_s: 1\n" + ALIAS_BOMB + "priority_classes: *a8\nclients: []\n", ["alias"]),
    ("seed: 1\nduration_s: 1\npriority_classes: [[a]]\nclients: [{rate: 1, prompt_tokens: 1, output_tokens: 1}]\n",
     ["priority_classes[0]"]),
    ("seed: 18446744073709551616\nduration_s: 1\nclients: [{rate: 1, prompt_tokens: 1, output_tokens: 1}]\n",
     ["seed"]),
    ("seed: 1\nnum_requests: 1.0e30\nclients: [{rate: 1, prompt_tokens: 1, output_tokens: 1}]\n", ["num_requests"]),
], ids=["output-1e19", "gaussian-1e18", "empirical-1e19", "mu-1000", "turns-5e7", "turns-5e9", "think-1e300",
        "rate-denormal", "name-list", "arrival-type-list", "prefix-1000x1M", "bomb-priority-classes",
        "priority-class-list", "seed-2^64", "num-requests-1e30"])
def test_workload_spec_examples(tmp_path, text, needles):
    spec = write(tmp_path, "spec.yaml", text)
    before = digest(spec)
    t0 = time.process_time()
    line = assert_clean_error(*run_cli("run", "--workload-spec", spec, "--max-memory", "2GiB"), needles)
    assert time.process_time() - t0 < 5.0, line  # CPU work bound (no hang), not wall time
    assert digest(spec) == before


def test_session_prompt_growth_beyond_2_31_tokens(tmp_path):
    text = spec_with(prompt_tokens=2_000_000_000, output_tokens=100_000_000,
                     session={"turns": 3, "think_time_s": 0.1})
    spec = write(tmp_path, "spec.yaml", text)
    from blis_fast.config.memory import memory_budget
    from blis_fast.workload.generate import generate_requests
    from blis_fast.workload.spec import load_spec

    with memory_budget(2**30), pytest.raises(WorkloadError, match="2147483647"):
        generate_requests(load_spec(spec))


# ============================================================================ traces


def _rich_table(files):
    import pyarrow.parquet as pq

    t = pq.read_table(files["rich_parquet"])
    return t, t.schema.metadata


def _write_parquet(path, table, meta):
    import pyarrow.parquet as pq

    pq.write_table(table.replace_schema_metadata(meta), path)
    return path


def _replace(table, name, values):
    import pyarrow as pa

    i = table.column_names.index(name)
    return table.set_column(i, name, pa.array(values))


@pytest.mark.parametrize("column, value, needles", [
    ("output_tokens", 10**18, ["column output_tokens"]),
    ("prompt_tokens", 2**40, ["column prompt_tokens"]),
    ("turn", 2**40, ["column turn"]),
    ("arrival_us", 2**63 - 1, ["column arrival_us"]),
    ("follow_delay_us", 2**62 + 1, ["column follow_delay_us"]),
    ("output_tokens", 1.0e19, ["column output_tokens"]),
    ("output_tokens", 2.5, ["column output_tokens", "integer"]),
    ("output_tokens", np.uint64(2**64 - 1), ["column output_tokens"]),
], ids=["output-1e18", "prompt-2^40", "turn-2^40", "arrival-int64max", "delay-2^62", "output-double-1e19",
        "output-2.5", "output-uint64"])
def test_rich_trace_column_ranges(tmp_path, files, column, value, needles):
    t, meta = _rich_table(files)
    vals = t.column(column).to_numpy().copy()
    vals = vals.astype(type(value) if not isinstance(value, int) else np.int64)
    vals[0] = value
    p = _write_parquet(tmp_path / "bad.parquet", _replace(t, column, vals), meta)
    assert_clean_error(*run_cli("run", "--workload", "traces", "--workload-traces-filepath", p), needles)


@pytest.mark.parametrize("header, needles", [
    ("names: 5\n", ["names"]),
    ("names: {client: {a: 1}}\n", ["names.client"]),
    ("slo_targets: [1, 2]\n", ["slo_targets"]),
    ("slo_targets: {gold: {ttft_ms: [1]}}\n", ["slo_targets.gold.ttft_ms"]),
    ("prefixes: {a: 1}\n", ["prefixes"]),
    ("prefixes: [{tokens: [1, 2]}]\n", ["prefixes[0].tokens"]),
    ("prefixes: [{tokens: AAAA, dtype: float}]\n", ["dtype"]),
    ("seed: -5\n", ["seed"]),
    (ALIAS_BOMB, ["alias"]),
    ("a: 1\na: 2\n", ["duplicate"]),
], ids=["names-int", "names-mapping", "slo-list", "slo-list-value", "prefixes-mapping", "tokens-list", "dtype",
        "seed", "bomb", "duplicate"])
def test_rich_trace_header_types(tmp_path, files, header, needles):
    lines = files["rich_csv"].read_text().splitlines(keepends=True)
    body = [ln for ln in lines if not ln.startswith("#")]
    text = "# blis-fast-trace\n" + "".join("# " + ln + "\n" for ln in header.splitlines()) + "".join(body)
    p = write(tmp_path, "bad.csv", text)
    assert_clean_error(*run_cli("workload", "stats", p), needles)


def test_parquet_metadata_invalid_utf8(tmp_path, files):
    t, meta = _rich_table(files)
    p = _write_parquet(tmp_path / "bad.parquet", t, {**meta, b"blis_fast.header": b"format: \xff\xfe\n"})
    assert_clean_error(*run_cli("workload", "stats", p), ["header", "UTF-8"])


def test_parquet_token_ids_of_type_double_are_refused(tmp_path, files):
    """CSV token lists must be integers; Parquet lists of doubles are refused too (no truncation)."""
    import pyarrow as pa

    t, meta = _rich_table(files)
    n = t.num_rows
    lens = t.column("prompt_tokens").to_numpy()
    ids = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)),
                                   pa.array(np.full(int(lens.sum()), 1.7)))
    p = _write_parquet(tmp_path / "dbl.parquet", t.append_column("prompt_token_ids", ids), meta)
    assert n > 0
    assert_clean_error(*run_cli("workload", "stats", p), ["prompt_token_ids", "integers"])


@pytest.mark.parametrize("arrival", ["1_0", "１", "0x1p-2", "1e999", "nan", "-0.5"])
def test_blis_csv_arrival_parsed_strictly(tmp_path, arrival):
    p = write(tmp_path, "t.csv", "arrival_time,request_id,model,prefill_tokens,decode_tokens\n"
                                 f'0.0,a,m,"[1, 2]","[3]"\n{arrival},b,m,"[1, 2]","[3]"\n')
    assert_clean_error(*run_cli("run", "--workload", "traces", "--workload-traces-filepath", p), ["row 2"])


# ============================================================================ workload generate / outputs


def test_generate_out_is_a_directory(tmp_path, files):
    assert_clean_error(*run_cli("workload", "generate", "--spec", files["spec"], "--out", tmp_path),
                       ["--out", "directory"])


def test_generate_out_in_a_missing_folder(tmp_path, files):
    assert_clean_error(*run_cli("workload", "generate", "--spec", files["spec"], "--out",
                                tmp_path / "no" / "such" / "t.parquet"), ["--out", "does not exist"])


def test_generate_out_equal_to_spec(tmp_path, files):
    spec = write(tmp_path, "s.yaml", SMALL_SPEC)
    before = digest(spec)
    assert_clean_error(*run_cli("workload", "generate", "--spec", spec, "--out", spec, "--format", "csv"),
                       ["--out", "input"])
    assert digest(spec) == before


def test_results_path_equal_to_config(tmp_path):
    cfg = write(tmp_path, "c.yaml", "num_requests: 3\n")
    before = digest(cfg)
    assert_clean_error(*run_cli("run", "--config", cfg, "--results-path", cfg), ["--results-path", "--config"])
    assert digest(cfg) == before


def test_per_request_out_equal_to_trace(tmp_path, files):
    trace = make_trace(tmp_path / "t.csv", n=5)
    before = digest(trace)
    assert_clean_error(*run_cli("run", "--workload", "traces", "--workload-traces-filepath", trace,
                                "--per-request-out", trace), ["--per-request-out", "--workload-traces-filepath"])
    assert digest(trace) == before


def test_two_outputs_with_the_same_path(tmp_path):
    out = tmp_path / "same"
    assert_clean_error(*run_cli("run", "--num-requests", "3", "--results-path", out, "--per-request-out", out),
                       ["--per-request-out", "--results-path"])
    assert not out.exists()


def test_output_symlinked_to_an_input(tmp_path):
    cfg = write(tmp_path, "c.yaml", "num_requests: 3\n")
    link = tmp_path / "link.json"
    link.symlink_to(cfg)
    before = digest(cfg)
    assert_clean_error(*run_cli("run", "--config", cfg, "--results-path", link), ["--results-path"])
    assert digest(cfg) == before


def test_output_equal_to_a_file_the_spec_names(tmp_path):
    times = write(tmp_path, "times.txt", "0\n0.5\n1\n")
    spec = write(tmp_path, "s.yaml", "seed: 1\nclients:\n  - {arrival: {type: trace, file: times.txt}, "
                                     "prompt_tokens: 5, output_tokens: 5}\n")
    before = digest(times)
    assert_clean_error(*run_cli("run", "--workload-spec", spec, "--results-path", times), ["--results-path"])
    assert_clean_error(*run_cli("workload", "generate", "--spec", spec, "--out", times, "--format", "csv"), ["--out"])
    assert digest(times) == before


def test_failed_parquet_write_leaves_the_target(tmp_path, monkeypatch):
    from blis_fast.results.result import Result

    target = tmp_path / "keep.parquet"
    target.write_bytes(b"precious")

    def broken(self, path):
        with open(path, "wb") as f:
            f.write(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Result, "write_parquet", broken)
    assert_clean_error(*run_cli("run", "--num-requests", "3", "--per-request-out", target),
                       ["--per-request-out", "No space left"])
    assert target.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.parquet"]  # no temporary file left


# ============================================================================ the Python API


def test_simulate_config_as_a_yaml_path(tmp_path):
    cfg = write(tmp_path, "c.yaml", "num_requests: 4\nrate: 5\n")
    assert blis_fast.simulate(config=str(cfg)).cluster["completed_requests"] == 4
    with pytest.raises(ConfigError, match="file not found"):
        blis_fast.simulate(config=str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize("kwargs, field", [
    (dict(workload=42), "workload"),
    (dict(workload=[1, 2]), "workload"),
    (dict(config=42), "config"),
    (dict(config=["rate", 3]), "config"),
    (dict(config={"rate": {"a": [1] * 10**6}}), "rate"),
    (dict(config={"engine": {"tp": 2**200}}), "engine.tp"),
    (dict(num_instances=2**64), "num_instances"),
    (dict(rate=float("nan")), "rate"),
    (dict(nonsense=1), "nonsense"),
])
def test_simulate_argument_types(kwargs, field):
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(**kwargs)
    assert field in ei.value.field.lstrip("-").replace("-", "_"), ei.value
    assert len(str(ei.value)) < 400 and "\n" not in str(ei.value)


# ============================================================================ silent or wrong results


def _handled_by(result):
    return result.state.reqs["instance"].tolist()


@pytest.mark.parametrize("scale", [1.7e308, 1e-300])
def test_weighted_routing_with_extreme_weights(scale):
    """Weights near the float maximum (or tiny) route exactly like the same weights at
    their usual size: scores are normalized without overflow (before, everything went to
    instance 0 or the run failed with a false 'no active instance')."""
    base = dict(workload="chatbot", rate=40, num_requests=200, num_instances=4, routing_policy="weighted")
    ref = blis_fast.simulate(**base, routing_scorers="queue-depth:1,kv-utilization:1,load-balance:0.5")
    big = blis_fast.simulate(**base, routing_scorers=f"queue-depth:{scale},kv-utilization:{scale},"
                                                     f"load-balance:{scale / 2}")
    assert _handled_by(big) == _handled_by(ref)
    assert len(set(_handled_by(big))) == 4
    assert np.all(big.state.reqs["state"] == ref.state.reqs["state"])


def test_non_finite_routing_scores_rank_last():
    """Candidates given to the kernel directly (no validation) with NaN or infinite
    weights still route every request to an active instance."""
    from blis_fast.config.sim import build_config
    from blis_fast.policy import compile_policies
    from blis_fast.run import build_workload, resolve, run_to_end
    from blis_fast.run.tables import build_state
    from blis_fast_kernels import schema as S

    cfg = build_config({}, {"num_requests": 50, "rate": 20, "num_instances": 3, "routing_policy": "weighted"})
    setup, wl = resolve(cfg), build_workload(cfg)
    for w in (np.nan, np.inf, -np.inf):
        pol = compile_policies(cfg.policy)
        pol.params[S.PolicySlot.ROUTING, :] = w
        st = run_to_end(build_state(setup, wl, pol))
        assert int(st.loop[0]["status"]) == S.Status.OK
        assert np.all(st.reqs["state"] == S.RequestState.COMPLETED)


def test_requests_that_can_never_fit_cost_no_block_slots():
    from blis_fast.config.sim import build_config
    from blis_fast.run import build_workload, resolve
    from blis_fast.run.tables import build_state

    cfg = build_config({}, {"num_requests": 40, "total_kv_blocks": 8, "prompt_tokens": 400,
                            "prompt_tokens_min": 300, "prompt_tokens_max": 500})
    st = build_state(resolve(cfg), build_workload(cfg))
    assert st.req_blocks.shape[0] == 0
    r = blis_fast.simulate(cfg)
    assert r.cluster["dropped_unservable"] == 40


def test_tp_must_divide_the_heads(tmp_path):
    cfg = {**LLAMA_8B_HF, "num_attention_heads": 30, "num_key_value_heads": 6, "hidden_size": 3840}
    p = write(tmp_path, "config.json", json.dumps(cfg))
    with pytest.raises(ConfigError, match="engine.tp"):
        blis_fast.simulate(model=str(p), tp=4, latency_model="roofline", num_requests=2)
    blis_fast.simulate(model=str(p), tp=2, latency_model="roofline", num_requests=2)


@pytest.mark.parametrize("change, needles", [
    ({"hidden_size": 2**40, "intermediate_size": 2**40}, ["model.hidden_size"]),
    ({"num_hidden_layers": 2**30}, ["model"]),
    ({"vocab_size": 2**62}, ["model.vocab_size"]),
], ids=["hidden-2^40", "layers-2^30", "vocab-2^62"])
def test_huge_model_sizes_name_the_model(tmp_path, change, needles):
    p = write(tmp_path, "config.json", json.dumps({**LLAMA_8B_HF, **change}))
    assert_clean_error(*run_cli("run", "--model", p, "--latency-model", "roofline", "--num-requests", "2",
                                "--total-kv-blocks", "1000"), needles)


def test_deeply_nested_model_json(tmp_path):
    p = write(tmp_path, "config.json", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert_clean_error(*run_cli("run", "--model", p), ["model"])


def test_no_warning_before_the_error_line(tmp_path):
    """The old path printed numpy RuntimeWarnings (overflow in a cast) before the error;
    extreme draws are now clamped at the distribution's max without a warning."""
    spec = write(tmp_path, "spec.yaml", spec_with(output_tokens={"type": "lognormal", "mu": 99, "sigma": 99}))
    assert_clean_error(*run_cli("workload", "stats", spec), ["2147483647"])  # > 2^31-1 tokens per request
    spec = write(tmp_path, "spec.yaml", spec_with(output_tokens={"type": "lognormal", "mu": 99, "sigma": 99,
                                                                 "max": 10**6}))
    code, out, err = run_cli("workload", "stats", spec)
    assert code == 0 and err == "", err
    assert json.loads(out)["output_tokens"]["max"] == 10**6


def test_valid_runs_warn_nothing():
    with no_warnings():
        r = blis_fast.simulate(workload="chatbot", num_requests=50, rate=30, num_instances=2,
                               routing_policy="weighted", routing_scorers="queue-depth:1e308")
    assert r.cluster["completed_requests"] == 50


def test_messages_truncate_huge_values():
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(model=["x" * 10**6] * 1000)
    assert len(str(ei.value)) < 300
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(seed=10**5000)
    assert len(str(ei.value)) < 300 and "digits" in str(ei.value)


def test_results_json_is_unchanged_by_the_output_path_checks(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert run_cli("run", "--num-requests", "20", "--results-path", a)[0] == 0
    assert run_cli("run", "--num-requests", "20", "--results-path", b)[0] == 0
    assert a.read_bytes() == b.read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_clock_overflow_names_the_settings():
    """A clock that would wrap (step or delay times too large) is reported naming what to
    lower, not as a bare 'event scheduled before the current clock'."""
    from blis_fast.config.sim import build_config
    from blis_fast.run import build_workload, resolve
    from blis_fast.run.runner import describe_error
    from blis_fast.run.tables import build_state
    from blis_fast_kernels import schema as S

    cfg = build_config({}, {"num_requests": 3})
    st = build_state(resolve(cfg), build_workload(cfg))
    st.loop[0]["status"] = S.Status.CLOCK_BACKWARDS
    msg = describe_error(st)
    assert "overflow" in msg and "alpha_coeffs" in msg and "beta_coeffs" in msg, msg
