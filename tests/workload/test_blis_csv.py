"""BLIS trace CSV loading (docs/semantics.md §7): both the byte-level fast path and the exact
row-by-row path must give the same workload, and the same error naming the row."""

from __future__ import annotations

import numpy as np
import pytest

from blis_fast.errors import ConfigError, WorkloadError
from blis_fast.workload import TRACE_HEADER, Workload, load_blis_trace, write_blis_trace
from builders import same_workload, write

HEADER = ",".join(TRACE_HEADER) + "\n"
BOTH = pytest.mark.parametrize("fast", [True, False], ids=["fast", "slow"])


# --- valid files -----------------------------------------------------------------------------
@BOTH
def test_blis_readme_example(tmp_path, fast):
    p = write(
        tmp_path, "trace.csv",
        HEADER + '0.0,req_0,llama,"[1,2,3,4,5]","[101,102,103]"\n'
        '0.05,req_1,llama,"[10,20,30]","[201,202,203,204]"\n',
    )
    wl = load_blis_trace(p, 2, fast=fast)
    assert wl.arrival_us.tolist() == [0, 50000]
    assert wl.prompt_len.tolist() == [5, 3] and wl.output_len.tolist() == [3, 4]
    assert wl.source_ids == ["req_0", "req_1"]
    assert wl.request_ids == ["request_0", "request_1"]
    assert wl.key_offsets.tolist() == [0, 4, 7]  # floor((L + N) / 2): prompt then output blocks
    assert wl.prompt_key_counts().tolist() == [2, 1]
    assert wl.description["kind"] == "traces"


@BOTH
def test_round_trip_through_writer(tmp_path, fast):
    rng = np.random.default_rng(3)
    n, bs = 60, 16
    arrival_s = np.sort(rng.uniform(0, 30, n))
    prompts = [rng.integers(0, 128000, size=int(rng.integers(1, 100))) for _ in range(n)]
    prompts[5] = np.concatenate([prompts[4][:40], prompts[5]])  # a shared prefix
    outputs = [rng.integers(0, 128000, size=int(rng.integers(0, 30))) for _ in range(n)]
    p = tmp_path / "rt.csv"
    write_blis_trace(p, arrival_s, prompts, outputs, request_ids=[f"id-{i}" for i in range(n)])
    assert p.read_text().splitlines()[0] == ",".join(TRACE_HEADER)
    wl = load_blis_trace(p, bs, fast=fast)
    assert np.array_equal(wl.arrival_us, np.floor(arrival_s * 1e6 + 0.5).astype(np.int64))
    assert wl.prompt_len.tolist() == [len(x) for x in prompts]
    assert wl.output_len.tolist() == [len(x) for x in outputs]
    assert wl.source_ids == [f"id-{i}" for i in range(n)]
    offs = np.concatenate(([0], np.cumsum([len(x) for x in prompts])))
    out_offs = np.concatenate(([0], np.cumsum([len(x) for x in outputs])))
    ref = Workload.from_tokens(wl.arrival_us, np.concatenate(prompts), offs, wl.output_len, bs,
                               output_tokens=np.concatenate(outputs), output_offsets=out_offs)
    assert np.array_equal(wl.block_keys, ref.block_keys)
    assert np.array_equal(wl.keys_of(4)[:2], wl.keys_of(5)[:2])
    assert np.array_equal(np.diff(wl.key_offsets), (wl.prompt_len + wl.output_len) // bs)


def test_fast_and_slow_paths_agree(tmp_path):
    rng = np.random.default_rng(9)
    lines = [HEADER.rstrip("\n")]
    for i in range(200):
        toks = rng.integers(-5, 128000, size=int(rng.integers(1, 50))).tolist()
        sep = [",", ", ", " , "][i % 3]
        out = "null" if i % 17 == 0 else "[" + sep.join(map(str, toks[:5])) + "]"
        lines.append(f'{rng.uniform(0, 9):.7f},"r""{i}",m,"[ {sep.join(map(str, toks))} ]",{out if i % 17 == 0 else chr(34) + out + chr(34)},x')
    p = write(tmp_path, "trace.csv", "\r\n".join(lines) + "\r\n")
    assert same_workload(load_blis_trace(p, 4, fast=True), load_blis_trace(p, 4, fast=False), ["source_ids"])
    assert load_blis_trace(p, 4).source_ids[0] == 'r"0'


def test_valid_files_take_the_fast_path(tmp_path, monkeypatch):
    from blis_fast.workload.formats import blis_csv

    p = write(tmp_path, "trace.csv", HEADER + GOOD + '1.5,b,m,"[4, 5, 6]",null\r\n')
    monkeypatch.setattr(blis_csv, "_load_slow", lambda *a: pytest.fail("fell back to the slow path"))
    assert load_blis_trace(p, 2).prompt_len.tolist() == [2, 3]


@BOTH
def test_arrival_rounding_vs_trunc(tmp_path, fast):
    p = write(
        tmp_path, "trace.csv",
        HEADER + '0.1234567,a,m,"[1]","[]"\n0.0000004,b,m,"[1]","[]"\n2.0000009,c,m,"[1]","[]"\n',
    )
    assert load_blis_trace(p, 16, fast=fast).arrival_us.tolist() == [123457, 0, 2000001]
    assert load_blis_trace(p, 16, "trunc", fast=fast).arrival_us.tolist() == [123456, 0, 2000000]
    with pytest.raises(ConfigError, match="arrival_rounding"):
        load_blis_trace(p, 16, "floor")


@BOTH
def test_file_order_kept_and_oddities_accepted(tmp_path, fast):
    p = write(
        tmp_path, "trace.csv",
        "when,id,model,p,d,extra\n"  # header names are not checked (BLIS skips line 1)
        '\n5.0,late,m,"[1, 2]","[3]",z\n'
        '\n1.0,early,m,"[ 4 ]",null,z\n'
        '1e-3,sci,"m,with,commas","[-7]","[ ]",z\n',
    )
    wl = load_blis_trace(p, 1, fast=fast)
    assert wl.arrival_us.tolist() == [5000000, 1000000, 1000]
    assert wl.prompt_len.tolist() == [2, 1, 1] and wl.output_len.tolist() == [1, 0, 0]
    assert wl.source_ids == ["late", "early", "sci"]


# --- malformed files ---------------------------------------------------------------------------
GOOD = '0.5,a,m,"[1, 2]","[3]"\n'
BAD_ROWS = [
    ('x,b,m,"[1]","[2]"\n', "arrival_time 'x' is not a number"),
    ('-1,b,m,"[1]","[2]"\n', "finite number of seconds >= 0"),
    ('nan,b,m,"[1]","[2]"\n', "finite number of seconds >= 0"),
    ('inf,b,m,"[1]","[2]"\n', "finite number of seconds >= 0"),
    ('1e300,b,m,"[1]","[2]"\n', "too large"),
    ('1,b,m,abc,"[2]"\n', "prompt token ids are not a JSON list of integers"),
    ('1,b,m,"[1.5]","[2]"\n', "prompt token ids are not a JSON list of integers"),
    ('1,b,m,"[1,2,]","[2]"\n', "prompt token ids are not a JSON list of integers"),
    ('1,b,m,"[1,,2]","[2]"\n', "prompt token ids are not a JSON list of integers"),
    ('1,b,m,"[1 2]","[2]"\n', "prompt token ids are not a JSON list of integers"),
    ('1,b,m,"[01]","[2]"\n', "prompt token ids are not a JSON list of integers"),
    ('1,b,m,"[+1]","[2]"\n', "prompt token ids are not a JSON list of integers"),
    ('1,b,m,"[true]","[2]"\n', "prompt token ids are not a JSON list of integers"),
    ('1,b,m,"[9223372036854775808]","[2]"\n', "prompt token ids are not a JSON list of integers"),
    ('1,b,m,"[1]","[a]"\n', "output token ids are not a JSON list of integers"),
    ('1,b,m,"[1]","{}"\n', "output token ids are not a JSON list of integers"),
    ('1,b,m,"[]","[2]"\n', "prompt token ids are empty"),
    ('1,b,m,null,"[2]"\n', "prompt token ids are empty"),
    ('1,b,m,"[1]"\n', "has 4 columns, expected at least 5"),
]


@BOTH
@pytest.mark.parametrize("bad,message", BAD_ROWS)
def test_bad_row_is_named(tmp_path, fast, bad, message):
    p = write(tmp_path, "trace.csv", HEADER + GOOD + GOOD + bad + GOOD)
    with pytest.raises(WorkloadError) as ei:
        load_blis_trace(p, 16, fast=fast)
    assert ei.value.field == "trace.csv row 3 (line 4)"
    assert message in ei.value.message
    assert str(ei.value).startswith("trace.csv row 3 (line 4): ")


@BOTH
def test_row_and_line_differ_with_blank_lines(tmp_path, fast):
    p = write(tmp_path, "trace.csv", HEADER + "\n" + GOOD + "\n\n" + '1,b,m,"[x]","[2]"\n')
    with pytest.raises(WorkloadError, match=r"trace\.csv row 2 \(line 6\)"):
        load_blis_trace(p, 16, fast=fast)


@BOTH
def test_unterminated_quote(tmp_path, fast):
    p = write(tmp_path, "trace.csv", HEADER + GOOD + '1,b,m,"[1, 2],"[3]"\n')
    with pytest.raises(WorkloadError, match=r"trace\.csv row 2"):
        load_blis_trace(p, 16, fast=fast)


@BOTH
@pytest.mark.parametrize(
    "text,message",
    [
        ("", "empty file"),
        ("\n\n", "empty file"),
        (HEADER, "no data rows"),
        ("a,b,c\n" + GOOD, "header has 3 columns"),
        (GOOD + GOOD, "looks like a data row"),
    ],
)
def test_bad_file(tmp_path, fast, text, message):
    p = write(tmp_path, "trace.csv", text)
    with pytest.raises(WorkloadError) as ei:
        load_blis_trace(p, 16, fast=fast)
    assert "trace.csv" in ei.value.field
    assert message in ei.value.message


def test_missing_file(tmp_path):
    with pytest.raises(WorkloadError) as ei:
        load_blis_trace(tmp_path / "nope.csv", 16)
    assert "nope.csv" in str(ei.value) and "not found" in str(ei.value)


def test_writer_rejects_mismatched_lengths(tmp_path):
    with pytest.raises(ValueError):
        write_blis_trace(tmp_path / "x.csv", [0.0, 1.0], [[1]], [[2], [3]])
