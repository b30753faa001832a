"""BLIS trace CSV files (``--workload traces``, docs/semantics.md §7).

Format, as BLIS reads it (``generateRequestsFromCSV``): a header row that is skipped
whatever it says, then one request per record with at least 5 columns, by position:

    arrival_time,request_id,model,prefill_tokens,decode_tokens
    0.0,req_0,llama,"[1, 2, 3, 4, 5]","[101, 102, 103]"

arrival_time is in seconds (float); the token columns are JSON lists of integers, quoted
because they contain commas.  BLIS ignores request_id and model, names requests
``request_<i>`` in file order and uses L = len(prefill_tokens), N = len(decode_tokens).
We keep request_id as ``Workload.source_ids``.  The keys are those of each request's whole
sequence, prefill then decode tokens (a request whose prompt repeats an earlier request's
prompt and output hits the blocks that request generated).

Accepted beyond what BLIS's Go reader accepts: spaces around the arrival time, records
with more columns than the header, bare quotes inside unquoted fields.  Rejected although
BLIS accepts it: NaN, infinite or negative arrival times, an empty prompt, and a first
line that parses as a number (BLIS would silently drop it as the header, losing a
request).  Token lists are strict JSON like Go's json.Unmarshal into []int: integers in
int64 range, no ``+``, no leading zeros, ``null`` read as an empty list.

Two parsers: a byte-level one (kernels/trace_csv.py, ~1e8 tokens in a few seconds) and an
exact row-by-row one (Python csv + a JSON-grammar regex) that runs whenever the fast one
finds anything unusual, so every error names the file, the data row and the line.
"""

from __future__ import annotations

import csv
import json
from array import array
import math
import re
import sys
from pathlib import Path

import numpy as np

from blis_fast.config import memory
from blis_fast.config.validate import parse_float_text, show
from blis_fast.errors import ConfigError, WorkloadError
from blis_fast.workload.distribution import round_half_away
from blis_fast.workload.workload import Workload
from blis_fast_kernels.schema import ScanStatus

TRACE_HEADER = ("arrival_time", "request_id", "model", "prefill_tokens", "decode_tokens")
ROUNDINGS = ("round", "trunc")
_I64_MAX = np.iinfo(np.int64).max
_I64_MIN = np.iinfo(np.int64).min
_MAX_US = 2.0**62  # arrival times must stay well inside int64 µs
BYTES_PER_FILE_BYTE = 16  # memory parsing takes per byte of the file (bytes, record scan, token ids)


def _row_error(name: str, row: int, line: int, message: str) -> WorkloadError:
    """row: 1-based data row (header excluded); line: 1-based line in the file."""
    return WorkloadError(f"{name} row {row} (line {line})", message)


def _read_records(path: Path, name: str):
    """(arrival strings, ids, prompt strings, output strings, line numbers) of every data
    record; blank lines are skipped like Go's csv reader does."""
    arrivals, ids, prompts, outputs, lines = [], [], [], [], []
    old_limit = csv.field_size_limit()
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # token lists exceed the 128 KiB default
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            reader = csv.reader(f)
            try:
                header = next(reader, None)
                while header == []:
                    header = next(reader, None)
            except (csv.Error, UnicodeDecodeError) as e:
                raise WorkloadError(f"{name} line 1", f"unreadable CSV header: {e}") from None
            if header is None:
                raise WorkloadError(name, "empty file: expected a header row " + ",".join(TRACE_HEADER))
            if len(header) < 5:
                raise WorkloadError(
                    f"{name} line {reader.line_num}",
                    f"header has {len(header)} columns, expected at least 5: " + ",".join(TRACE_HEADER),
                )
            try:
                float(header[0])
            except ValueError:
                pass
            else:
                raise WorkloadError(
                    f"{name} line {reader.line_num}",
                    "the first line looks like a data row; a header row is required "
                    "(" + ",".join(TRACE_HEADER) + ")",
                )
            row = 0
            while True:
                try:
                    rec = next(reader)
                except StopIteration:
                    break
                except (csv.Error, UnicodeDecodeError) as e:
                    raise _row_error(name, row + 1, reader.line_num, f"malformed CSV: {e}") from None
                if not rec:
                    continue
                row += 1
                if len(rec) < 5:
                    raise _row_error(name, row, reader.line_num, f"has {len(rec)} columns, expected at least 5")
                arrivals.append(rec[0])
                ids.append(rec[1])
                prompts.append(rec[3])
                outputs.append(rec[4])
                lines.append(reader.line_num)
    finally:
        csv.field_size_limit(old_limit)
    return arrivals, ids, prompts, outputs, lines


def _parse_arrivals_s(strings, name, lines) -> np.ndarray:
    out = np.empty(len(strings), dtype=np.float64)
    for i, s in enumerate(strings):
        v = parse_float_text(s)  # plain decimal only: no '1_0', no non-ASCII digits
        if v is None:
            raise _row_error(name, i + 1, lines[i], f"arrival_time {show(s)} is not a number (seconds)")
        if not math.isfinite(v) or v < 0:
            raise _row_error(name, i + 1, lines[i], f"arrival_time {show(s)} must be a finite number of seconds >= 0")
        if v * 1e6 >= _MAX_US:
            raise _row_error(name, i + 1, lines[i], f"arrival_time {show(s)} s is too large for the µs clock")
        out[i] = v
    return out


_WS = "[ \t\n\r]*"  # JSON whitespace
_INT = "-?(?:0|[1-9][0-9]*)"  # JSON integer: no '+', no leading zeros
_LIST_RE = re.compile(f"{_WS}(?:null|\\[{_WS}(?:{_INT}{_WS}(?:,{_WS}{_INT}{_WS})*)?\\]){_WS}")


def _fits_int64(s: str) -> bool:
    v = json.loads(s)
    return v is None or all(_I64_MIN <= x <= _I64_MAX for x in v)


def _parse_lists(strings, what, name, lines):
    """Exact parse of JSON integer lists: each row must match the JSON grammar
    (_LIST_RE), then all bodies are joined and parsed by one np.fromstring; a value at an
    int64 bound (fromstring saturates) triggers an exact per-row range check.
    Returns (flat int64 ids, int64 counts)."""
    n = len(strings)
    counts = np.empty(n, dtype=np.int64)
    bodies = []
    bad = f"{what} token ids are not a JSON list of integers"
    for i, s in enumerate(strings):
        if _LIST_RE.fullmatch(s) is None:
            raise _row_error(name, i + 1, lines[i], bad)
        s = s.strip(" \t\n\r")
        body = s[1:-1] if s[0] == "[" else ""
        if not body or body.isspace():
            counts[i] = 0
        else:
            counts[i] = body.count(",") + 1
            bodies.append(body)
    ids = np.fromstring(",".join(bodies), dtype=np.int64, sep=",") if bodies else np.empty(0, np.int64)
    if ids.shape[0] != counts.sum():  # cannot happen after the grammar check
        raise WorkloadError(name, f"internal error parsing {what} token ids")
    if ids.shape[0] and (ids.max() == _I64_MAX or ids.min() == _I64_MIN):
        for i, s in enumerate(strings):
            if not _fits_int64(s):
                raise _row_error(name, i + 1, lines[i], bad)
    return ids, counts


def _load_slow(p: Path, name: str):
    """Exact row-by-row parse (Python csv + json on failure); raises WorkloadError naming
    the first bad row.  Returns (seconds, ids, prompt token ids, L, output token ids, N)."""
    arrivals, ids, prompts, outputs, lines = _read_records(p, name)
    if not arrivals:
        raise WorkloadError(name, "no requests: the file has a header row but no data rows")
    seconds = _parse_arrivals_s(arrivals, name, lines)
    tokens, prompt_len = _parse_lists(prompts, "prompt", name, lines)
    empty = np.flatnonzero(prompt_len == 0)
    if empty.size:
        i = int(empty[0])
        raise _row_error(name, i + 1, lines[i], "prompt token ids are empty (a request needs >= 1 prompt token)")
    out_tokens, output_len = _parse_lists(outputs, "output", name, lines)
    return seconds, ids, tokens, prompt_len, out_tokens, output_len


def _load_fast(p: Path):
    """Byte-level parse with the numba kernels; None whenever anything is unusual (the
    caller then runs _load_slow, which names the problem or handles the oddity)."""
    from blis_fast_kernels.native import parse_int_lists, scan_csv_records  # deferred: blis_fast_kernels.native

    data = p.read_bytes()
    buf = np.frombuffer(data, dtype=np.uint8)
    if buf.size == 0:
        return None
    max_records = int(np.count_nonzero(buf == ord("\n"))) + 1
    n_rec, status, st, en, quoted, n_fields, _ = scan_csv_records(buf, 5, max_records)
    if status != ScanStatus.OK or n_rec < 2 or n_fields[:n_rec].min() < 5:
        return None
    try:
        float(data[st[0, 0] : en[0, 0]])
        return None  # the first line looks like data: let the slow path say so
    except ValueError:
        pass
    rows = slice(1, n_rec)
    try:
        fields = [data[s:e] for s, e in zip(st[rows, 0].tolist(), en[rows, 0].tolist())]
        if any(b"_" in f for f in fields):
            return None  # Python's float() accepts '1_0'; the slow path refuses it with its row
        seconds = np.array([float(f) for f in fields])
        ids = [data[s:e].decode("utf-8", "replace") for s, e in zip(st[rows, 1].tolist(), en[rows, 1].tolist())]
    except (ValueError, UnicodeDecodeError):
        return None
    if not (np.all(np.isfinite(seconds)) and seconds.min() >= 0 and seconds.max() * 1e6 < _MAX_US):
        return None
    for i in np.flatnonzero(quoted[rows, 1]).tolist():
        ids[i] = ids[i].replace('""', '"')
    tokens, prompt_len, bad = parse_int_lists(buf, st[rows, 3].copy(), en[rows, 3].copy(), True)
    if bad >= 0 or prompt_len.min() == 0:
        return None
    out_tokens, output_len, bad = parse_int_lists(buf, st[rows, 4].copy(), en[rows, 4].copy(), True)
    if bad >= 0:
        return None
    return seconds, ids, tokens, prompt_len, out_tokens, output_len


def load_blis_trace(path, block_size: int, arrival_rounding: str = "round", *, fast: bool = True) -> Workload:
    """Load a BLIS trace CSV: requests in file order, arrival µs = round(seconds·1e6)
    (half away from zero) or trunc (``arrival_rounding="trunc"``, BLIS's int64 cast),
    L = len(prefill_tokens), N = len(decode_tokens), source_ids = the request_id column;
    keys of the full blocks of prefill + decode tokens (``Workload.from_tokens``).
    Raises WorkloadError naming the file, the 1-based data row and the line.
    ``fast=False`` skips the byte-level parser (tests compare the two)."""
    if arrival_rounding not in ROUNDINGS:
        raise ConfigError("arrival_rounding", f"must be one of {', '.join(ROUNDINGS)}, got {show(arrival_rounding)}")
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(show(str(p)), "trace file not found")
    size = p.stat().st_size
    memory.charge(size * BYTES_PER_FILE_BYTE, f"{show(p.name)}: parsing a {size}-byte trace")
    parsed = _load_fast(p) if fast else None
    if parsed is None:
        parsed = _load_slow(p, p.name)
    seconds, ids, tokens, prompt_len, out_tokens, output_len = parsed
    us = seconds * 1e6
    arrival_us = (round_half_away(us) if arrival_rounding == "round" else np.trunc(us)).astype(np.int64)
    token_offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(prompt_len, out=token_offsets[1:])
    out_offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(output_len, out=out_offsets[1:])
    return Workload.from_tokens(
        arrival_us, tokens, token_offsets, output_len, block_size, source_ids=ids,
        description={"kind": "traces", "path": str(p), "arrival_rounding": arrival_rounding},
        output_tokens=out_tokens, output_offsets=out_offsets,
    )


MAX_TRACE_MODELS = 4096  # distinct names in a trace's model column


def read_trace_models(path, n: int | None = None) -> tuple[tuple[str, ...], np.ndarray]:
    """The model column of a BLIS trace CSV already loaded by ``load_blis_trace`` (so well
    formed): (distinct names in order of first appearance, int32 id per record) for the
    first ``n`` records (all: None).  One streaming pass that keeps only the names; read
    only when the run has several deployments (BLIS ignores the column)."""
    p = Path(path)
    names: dict[str, int] = {}
    ids = array("i")  # (4 bytes per request, not a Python int each)
    old_limit = csv.field_size_limit()
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # (token lists exceed the 128 KiB default)
    try:
        with open(p, newline="", encoding="utf-8", errors="replace") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            while header == []:
                header = next(reader, None)
            for rec in reader:
                if not rec:
                    continue
                if n is not None and len(ids) >= n:
                    break
                name = rec[2].strip()
                if name not in names:
                    if len(names) >= MAX_TRACE_MODELS:
                        raise WorkloadError(f"{show(p.name)} row {len(ids) + 1} (line {reader.line_num})",
                                            f"the model column names more than {MAX_TRACE_MODELS} models")
                    names[name] = len(names)
                ids.append(names[name])
    finally:
        csv.field_size_limit(old_limit)
    return tuple(names), np.frombuffer(ids, dtype=np.int32).copy() if ids else np.zeros(0, np.int32)


def write_blis_trace(path, arrival_s, prompt_ids, output_ids, request_ids=None, model: str = "model") -> None:
    """Write a BLIS trace CSV (the header TRACE_HEADER, token lists as quoted JSON like
    ``"[1, 2, 3]"``).  arrival_s: seconds per request (written with repr, so exactly);
    prompt_ids / output_ids: one integer sequence per request; request_ids default to
    ``request_<i>``."""
    n = len(arrival_s)
    if request_ids is None:
        request_ids = [f"request_{i}" for i in range(n)]
    if not (len(prompt_ids) == len(output_ids) == len(request_ids) == n):
        raise ValueError("arrival_s, prompt_ids, output_ids and request_ids need the same length")
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(TRACE_HEADER)
        for i in range(n):
            w.writerow([
                repr(float(arrival_s[i])), request_ids[i], model,
                "[" + ", ".join(map(str, np.asarray(prompt_ids[i]).tolist())) + "]",
                "[" + ", ".join(map(str, np.asarray(output_ids[i]).tolist())) + "]",
            ])
