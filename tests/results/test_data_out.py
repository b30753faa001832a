"""Per-request data out and the Python API for people: --per-request-out picks the format
from the suffix (.parquet, .csv, .jsonl; others refused before running), every format and
the --results-path records have the same fields (BLIS's session_id / round_index beside
ours), Result.to_pandas (the pandas extra), Result's repr, a small picklable summary,
simulate(config=PATH | dict | SimConfig, policy=PATH | dict) and errors naming keywords."""

from __future__ import annotations

import json
import pickle

import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import blis_fast
from blis_fast import ConfigError
from builders import ROOT, assert_one_error_line, run_cli

SPEC = ROOT / "configs" / "workloads" / "chat.yaml"


@pytest.fixture(scope="module")
def spec_result():
    """A workload-spec run with sessions (labels, session_id / round_index)."""
    return blis_fast.simulate(workload_spec=str(SPEC))


def test_every_format_has_the_fields_of_the_json_records(spec_result, tmp_path):
    r = spec_result
    records = r.request_records()
    fields = list(records[0])
    assert {"session_id", "round_index", "session", "turn", "first_token_s", "completion_s"} <= set(fields)
    for suffix in ("parquet", "csv", "jsonl"):
        path = tmp_path / f"req.{suffix}"
        r.write_requests(path)
        if suffix == "parquet":
            table = pq.read_table(path)
        elif suffix == "csv":
            table = pcsv.read_csv(path)
        else:
            rows = [json.loads(line) for line in path.read_text().splitlines()]
            assert list(rows[0]) == fields and len(rows) == len(r.workload)
            continue
        assert table.column_names == fields, suffix
        assert table.num_rows == len(r.workload)
    assert r.requests_table().column_names == fields
    by_id = {rec["requestID"]: rec for rec in records}
    row = r.requests_table().slice(0, 1).to_pylist()[0]
    assert row == by_id[row["requestID"]]  # same values, not only the same names


def test_cli_picks_the_format_by_suffix_and_refuses_others(capsys, tmp_path):
    out = tmp_path / "req.csv"
    code, _, err = run_cli(capsys, "run", "--num-requests", "5", "--per-request-out", out)
    assert code == 0, err
    assert out.read_text().startswith('"requestID","arrived_at"')  # CSV text, not Parquet bytes
    code, stdout, err = run_cli(capsys, "run", "--num-requests", "5", "--per-request-out", tmp_path / "req.json")
    assert code == 2 and stdout == ""
    assert_one_error_line(err, ["--per-request-out", ".parquet", ".csv", ".jsonl"])
    assert not (tmp_path / "req.json").exists()


def test_to_pandas(spec_result):
    pd = pytest.importorskip("pandas")
    df = spec_result.to_pandas()
    assert isinstance(df, pd.DataFrame) and list(df.columns) == spec_result.requests_table().column_names


def test_to_pandas_without_pandas_says_how_to_get_it(spec_result, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pandas" else real(name, *a))
    with pytest.raises(ImportError, match=r"blis-fast\[pandas\]"):
        spec_result.to_pandas()


def test_repr_and_small_picklable_summary(spec_result):
    text = repr(spec_result)
    assert text.startswith("<Result llama-3.1-8b-instruct on H100 TP1 (blackbox)")
    assert f"{len(spec_result.workload)} requests" in text and "TTFT p99" in text
    summary = spec_result.summary()
    blob = pickle.dumps(summary)
    assert pickle.loads(blob) == summary
    assert len(blob) < 64 * 1024  # (the Result itself holds every table of the run)


def test_simulate_takes_config_and_policy_as_paths_or_dicts():
    cfg_path = ROOT / "configs" / "examples" / "cluster.yaml"
    bundle = ROOT / "configs" / "policies" / "slo-aware.yaml"
    a = blis_fast.simulate(config=str(cfg_path), policy=bundle, num_requests=20)
    assert a.setup.config.policy.routing == "weighted" and a.cluster["completed_requests"] <= 20
    b = blis_fast.simulate(config={"deployment": {"num_instances": 2}}, policy={"routing": {"type": "least-loaded"}},
                           num_requests=10)
    assert b.setup.config.policy.routing == "least-loaded" and b.setup.config.deployment.num_instances == 2
    c = blis_fast.simulate(config=b.setup.config, num_requests=10)  # a SimConfig, as given
    assert c.summary()["cluster"] == b.summary()["cluster"]


@pytest.mark.parametrize("kwargs,field", [
    (dict(config="no-such-file.yaml"), "config"),
    (dict(config=3), "config"),
    (dict(policy=3), "policy"),
    (dict(policy="no-such-bundle.yaml"), "policy"),
    (dict(num_instances=0), "num_instances"),
    (dict(max_num_batched_tokens=-1), "max_num_batched_tokens"),
])
def test_api_errors_name_the_keyword(kwargs, field):
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(**kwargs)
    assert ei.value.field.split(" ")[0] == field
    assert "--" not in ei.value.field


def test_fitness_values_say_their_units():
    f = blis_fast.simulate(num_requests=5, fitness_weights="throughput:1,p99_ttft:1").summary()["fitness"]
    assert f["units"] == {"throughput": "req/s", "p99_ttft": "µs"}


def test_simulate_reports_progress(monkeypatch):
    """Each phase, then requests finished while the kernel runs (its first chunk made tiny
    so that it returns mid-run), never beyond the total; the run itself is unchanged."""
    from blis_fast.run import runner

    monkeypatch.setattr(runner, "CHUNK_EVENTS", 50)
    seen = []
    r = blis_fast.simulate(num_requests=200, rate=50, progress=lambda *a: seen.append(a))
    phases = [p for p, *_ in seen]
    assert phases[0] == "generating the workload" and phases[-1] == "computing the results"
    chunks = [(done, total, unit) for p, done, total, unit in seen if p == "simulating" and unit]
    assert chunks and all(0 <= d <= t == 200 and u == "requests" for d, t, u in chunks)
    assert [d for d, _, _ in chunks] == sorted(d for d, _, _ in chunks)
    monkeypatch.undo()
    assert blis_fast.simulate(num_requests=200, rate=50).summary() == r.summary()


def test_progress_with_a_horizon_counts_simulated_seconds(monkeypatch):
    from blis_fast.run import runner

    monkeypatch.setattr(runner, "CHUNK_EVENTS", 50)
    seen = []
    blis_fast.simulate(num_requests=200, rate=50, horizon=3_000_000, progress=lambda *a: seen.append(a))
    chunks = [(done, total) for p, done, total, unit in seen if unit == "simulated s"]
    assert chunks and all(0 <= d <= t == 3 for d, t in chunks)
