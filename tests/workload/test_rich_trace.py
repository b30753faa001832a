"""Rich traces (YAML header + CSV / Parquet table): exact round trip to the same Workload,
deterministic bytes, hand-written and token-id tables, errors naming file / row / column,
and ``workload_stats``."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from blis_fast.errors import WorkloadError
from blis_fast.workload import (
    Workload,
    generate_requests,
    is_rich_trace,
    load_trace,
    parse_spec,
    read_trace,
    workload_stats,
    write_blis_trace,
    write_trace,
)
from blis_fast.workload.stats import stats_of_file
from builders import WORKLOAD_LABELS, workload_diff, write
from naive.hashtable import naive_repeated
from blis_fast_kernels.structs.keycount import REPEATED, SHARED, flag_keys

SPEC = {
    "seed": 9, "rate": 8, "duration_s": 20,
    "slo_classes": {"gold": {"ttft_ms": 100}, "bronze": {"e2e_ms": 9000}},
    "priority_classes": ["p0", "p1"],
    "prefix_groups": {"docs": {"count": 4, "length": {"type": "uniform", "min": 30, "max": 90}}},
    "clients": [
        {"name": "chat", "rate_fraction": 1, "tenant": "t1", "slo_class": "gold", "priority_class": "p0",
         "prompt_tokens": {"type": "lognormal", "p50": 50, "p90": 200}, "output_tokens": {"type": "exponential", "mean": 30},
         "prefix": {"group": "docs", "reuse_probability": 0.5},
         "session": {"turns": 3, "think_time_s": 0.5}},
        {"name": "bulk", "rate_fraction": 1, "tenant": "t2", "slo_class": "bronze", "priority_class": "p1",
         "prompt_tokens": 64, "output_tokens": 8, "prefix": {"group": "docs"}},
    ],
}


@pytest.fixture(scope="module")
def req():
    return generate_requests(parse_spec(SPEC, source="spec.yaml"))


@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_round_trip_gives_the_same_workload(req, tmp_path, ext):
    p = write_trace(req, tmp_path / f"t.{ext}")
    assert is_rich_trace(p)
    for bs in (16, 5):
        assert workload_diff(req.to_workload(bs), load_trace(p, bs), WORKLOAD_LABELS) == []
    back, header, tokens, _ = read_trace(p)
    assert tokens is None
    assert header["seed"] == 9 and header["workload"] == SPEC and header["format"] == "blis-fast-trace"
    for k in req.columns:
        assert np.array_equal(back[k], req[k]), k
    assert all(np.array_equal(x, y) for x, y in zip(back.prefix_tokens, req.prefix_tokens))


@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_same_spec_and_seed_same_bytes(tmp_path, ext):
    a = write_trace(generate_requests(parse_spec(SPEC)), tmp_path / f"a.{ext}")
    b = write_trace(generate_requests(parse_spec(SPEC)), tmp_path / f"b.{ext}")
    assert a.read_bytes() == b.read_bytes()
    c = write_trace(generate_requests(parse_spec(SPEC), seed=10), tmp_path / f"c.{ext}")
    assert c.read_bytes() != a.read_bytes()


def test_format_option_overrides_extension_and_server_header(req, tmp_path):
    p = write_trace(req, tmp_path / "t.data", fmt="parquet", server={"engine": {"max_num_seqs": 64}})
    assert p.read_bytes()[:4] == b"PAR1"
    q = write_trace(req, tmp_path / "t.txt", server={"engine": {"max_num_seqs": 64}})
    assert q.read_text().startswith("# blis-fast-trace\n")
    _, header, _, _ = read_trace(q)
    assert header["server"] == {"engine": {"max_num_seqs": 64}}
    with pytest.raises(WorkloadError, match="--format"):
        write_trace(req, tmp_path / "x", fmt="xlsx")


def test_blis_csv_is_not_a_rich_trace(tmp_path):
    p = tmp_path / "blis.csv"
    write_blis_trace(p, [0.0], [[1, 2, 3]], [[4]])
    assert not is_rich_trace(p)


def test_hand_written_minimal_csv(tmp_path):
    p = tmp_path / "mini.csv"
    p.write_text("# blis-fast-trace\narrival_s,prompt_tokens,output_tokens,tenant\n0.5,100,10,x\n0.25,40,3,y\n1,7,0,x\n")
    wl = load_trace(p, 16)
    assert wl.arrival_us.tolist() == [500000, 250000, 1000000]
    assert wl.prompt_len.tolist() == [100, 40, 7] and np.diff(wl.key_offsets).tolist() == [6, 2, 0]
    assert wl.prompt_key_counts().tolist() == [6, 2, 0]
    assert wl.names["tenant"] == ["x", "y"] and wl.tenant.tolist() == [0, 1, 0]
    assert wl.names["client"] == ["trace"]
    assert len(np.unique(wl.block_keys)) == 8  # no sharing without prefixes / sessions


def test_sessions_in_a_hand_written_trace_share_context(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("# blis-fast-trace\narrival_us,session,turn,prompt_tokens,output_tokens\n"
                 "0,7,0,64,10\n100,7,1,100,10\n50,-1,0,64,1\n")
    wl = load_trace(p, 16)
    assert np.array_equal(wl.keys_of(1)[:4], wl.keys_of(0))
    assert not np.isin(wl.keys_of(2), wl.keys_of(0)).any()


def test_token_id_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    shared = rng.integers(0, 1000, 40).tolist()
    toks = [shared + rng.integers(0, 1000, 9).tolist(), shared + [5, 6], rng.integers(0, 1000, 33).tolist()]
    t = pa.table({"arrival_us": [0, 10, 20], "output_tokens": [1, 2, 3], "prompt_token_ids": toks})
    pq.write_table(t, tmp_path / "tok.parquet")
    wl = load_trace(tmp_path / "tok.parquet", 8)
    offs = np.concatenate(([0], np.cumsum([len(x) for x in toks])))
    ref = Workload.from_tokens(np.array([0, 10, 20]), np.concatenate(toks), offs, np.array([1, 2, 3]), 8)
    assert np.array_equal(wl.block_keys, ref.block_keys) and np.array_equal(wl.key_offsets, ref.key_offsets)
    p = tmp_path / "tok.csv"
    p.write_text('# blis-fast-trace\narrival_us,output_tokens,prompt_token_ids\n0,1,"[1, 2, 3, 4]"\n5,1,"[1, 2, 3, 4, 5]"\n')
    wl = load_trace(p, 2)
    assert np.array_equal(wl.prompt_keys_of(1), wl.prompt_keys_of(0))
    assert np.diff(wl.key_offsets).tolist() == [2, 3]
    assert wl.keys_of(1)[2] != wl.keys_of(0)[1]  # fresh output blocks


@pytest.mark.parametrize("table, field", [
    ("arrival_us,output_tokens\n0,1\n", "needs a prompt_tokens column"),
    ("prompt_tokens,output_tokens\n3,1\n", "arrival_us"),
    ("arrival_us,prompt_tokens,output_tokens\n0,0,1\n", "row 1 column prompt_tokens"),
    ("arrival_us,prompt_tokens,output_tokens\n0,3,-1\n", "row 1 column output_tokens"),
    ("arrival_us,prompt_tokens,output_tokens,prefix_id\n0,3,1,0\n", "row 1 column prefix_id"),
    ("arrival_us,prompt_tokens,output_tokens,session,turn\n0,3,1,4,1\n0,3,1,4,1\n", "row 2 column turn"),
    ("arrival_us,prompt_tokens,output_tokens,next_request\n0,3,1,9\n", "row 1 column next_request"),
    ("arrival_us,prompt_tokens,output_tokens\n0,3.5,1\n", "row 1 column prompt_tokens"),
    ("arrival_us,prompt_tokens,output_tokens\n", "no requests"),
])
def test_bad_tables_name_row_and_column(tmp_path, table, field):
    p = tmp_path / "bad.csv"
    p.write_text("# blis-fast-trace\n" + table)
    with pytest.raises(WorkloadError) as ei:
        load_trace(p, 16)
    assert field in str(ei.value) and "bad.csv" in str(ei.value)


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(WorkloadError, match="not found"):
        read_trace(tmp_path / "none.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(WorkloadError, match="Parquet"):
        read_trace(tmp_path / "junk.parquet")


# ----------------------------------------------------------------------------- stats


def test_flag_keys_matches_a_set():
    rng = np.random.default_rng(3)
    keys = rng.integers(-50, 50, 2000)
    keys[keys == -1] = 7
    repeated = naive_repeated(keys)
    flags, distinct = flag_keys(keys, REPEATED)
    assert np.array_equal(flags.view(bool), repeated)
    shared = np.isin(keys, keys[repeated])  # keys occurring more than once, every occurrence
    flags, n_shared = flag_keys(keys, SHARED)
    assert np.array_equal(flags.view(bool), shared)
    assert distinct == n_shared == len(set(keys[repeated].tolist()))
    assert flag_keys(np.empty(0, np.int64), REPEATED)[0].size == 0


def test_workload_stats(req):
    wl = req.to_workload(16)
    s = workload_stats(wl)
    assert s["num_requests"] == len(req)
    assert s["independent_requests"] + s["closed_loop_followers"] == len(req)
    assert s["clients"]["chat"]["requests"] + s["clients"]["bulk"]["requests"] == len(req)
    assert s["clients"]["bulk"]["sessions"] == 0 and s["clients"]["chat"]["sessions"] == s["sessions"] > 0
    assert set(s["tenants"]) == {"t1", "t2"} and set(s["slo_classes"]) == {"gold", "bronze"}
    rep = naive_repeated(wl.block_keys)
    assert s["ideal_prefix_hit_rate"] == pytest.approx(rep.sum() * 16 / wl.prompt_len.sum(), abs=1e-6)
    span = (wl.arrival_us.max() - wl.arrival_us[wl.arrival_us >= 0].min()) / 1e6
    assert s["clients"]["bulk"]["rate_per_s"] == pytest.approx(s["clients"]["bulk"]["requests"] / span, rel=1e-5)
    assert s["prompt_tokens"]["p50"] == float(np.percentile(wl.prompt_len, 50))
    json.dumps(s)


def test_stats_of_every_file_kind(req, tmp_path):
    p = write_trace(req, tmp_path / "t.parquet")
    a = stats_of_file(p)
    b = stats_of_file(write(tmp_path, "s.yaml", SPEC))
    assert {k: v for k, v in a.items() if k != "file"} == {k: v for k, v in b.items() if k != "file"}
    blis = tmp_path / "b.csv"
    write_blis_trace(blis, [0.0, 1.0], [[1] * 40, [1] * 40], [[2], [3]])
    c = stats_of_file(blis)
    assert c["num_requests"] == 2 and c["ideal_prefix_hit_rate"] == pytest.approx(32 / 80)


def test_trace_bytes_hash_is_stable_across_block_sizes(req, tmp_path):
    """The table does not depend on the block size (keys are rebuilt on load)."""
    p = write_trace(req, tmp_path / "t.csv")
    h = hashlib.sha256(p.read_bytes()).hexdigest()
    req.to_workload(32)
    assert hashlib.sha256(write_trace(req, tmp_path / "u.csv").read_bytes()).hexdigest() == h
