"""Byte-level parsing of BLIS trace CSV files (the fast path of
the BLIS trace reader in ``blis_fast.workload``; any problem is reported by status and the caller falls
back to a slow exact parser that names the bad row).

CSV dialect: RFC 4180 like Go's encoding/csv -- fields separated by ``,``, records by
``\\n`` or ``\\r\\n``, a field starting with ``"`` is quoted (``""`` escapes a quote, may
contain newlines), empty lines are skipped.  Token columns are JSON lists of integers.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..jit import kernel
from ..schema import ScanStatus

QUOTE = 34
COMMA = 44
LF = 10
CR = 13
U10 = np.uint64(10)
I64_MAX_U = np.uint64(0x7FFFFFFFFFFFFFFF)
I64_MIN_MAG = np.uint64(0x8000000000000000)


@kernel
def scan_csv_records(buf, n_keep, max_records):
    """Split the uint8 file contents ``buf`` into records; returns (n_records, status,
    starts int64[max_records, n_keep], ends, quoted uint8, n_fields int64[max_records],
    line int64[max_records]) -- byte ranges of the first n_keep fields of each record
    (inside the quotes for quoted fields) and the 1-based line each record starts on."""
    starts = np.full((max_records, n_keep), -1, dtype=np.int64)
    ends = np.full((max_records, n_keep), -1, dtype=np.int64)
    quoted = np.zeros((max_records, n_keep), dtype=np.uint8)
    n_fields = np.zeros(max_records, dtype=np.int64)
    line_of = np.zeros(max_records, dtype=np.int64)
    n = buf.shape[0]
    i = 0
    rec = 0
    line = 1
    while i < n:
        if buf[i] == LF:  # empty line
            line += 1
            i += 1
            continue
        if buf[i] == CR and i + 1 < n and buf[i + 1] == LF:
            line += 1
            i += 2
            continue
        if rec >= max_records:
            return rec, ScanStatus.TOO_MANY_RECORDS, starts, ends, quoted, n_fields, line_of
        line_of[rec] = line
        f = 0
        while True:
            if i < n and buf[i] == QUOTE:
                i += 1
                s = i
                while True:
                    if i >= n:
                        return rec, ScanStatus.UNTERMINATED_QUOTE, starts, ends, quoted, n_fields, line_of
                    c = buf[i]
                    if c == QUOTE:
                        if i + 1 < n and buf[i + 1] == QUOTE:
                            i += 2
                            continue
                        break
                    if c == LF:
                        line += 1
                    i += 1
                e = i
                i += 1  # past the closing quote
                q = 1
            else:
                s = i
                while i < n and buf[i] != COMMA and buf[i] != LF:
                    i += 1
                e = i
                if e > s and buf[e - 1] == CR:  # CRLF line ending (or a trailing CR at EOF)
                    e -= 1
                q = 0
            if f < n_keep:
                starts[rec, f] = s
                ends[rec, f] = e
                quoted[rec, f] = q
            f += 1
            if i >= n:
                break
            c = buf[i]
            if c == COMMA:
                i += 1
                if i >= n:  # trailing comma at EOF: one more, empty field
                    if f < n_keep:
                        starts[rec, f] = i
                        ends[rec, f] = i
                    f += 1
                    break
                continue
            if c == LF:
                i += 1
                line += 1
                break
            if c == CR and i + 1 < n and buf[i + 1] == LF:
                i += 2
                line += 1
                break
            return rec, ScanStatus.BAD_AFTER_QUOTE, starts, ends, quoted, n_fields, line_of
        n_fields[rec] = f
        rec += 1
    return rec, ScanStatus.OK, starts, ends, quoted, n_fields, line_of


@kernel
def _is_ws(c):
    return c == 32 or c == 9 or c == LF or c == CR


@kernel
def _count_int_list(buf, s, e):
    """Number of integers in the JSON list buf[s:e] (``null`` = empty); -1 if it is not
    a JSON list of int64 integers (strict JSON: optional '-', no '+', no leading zeros)."""
    i = s
    while i < e and _is_ws(buf[i]):
        i += 1
    if i + 4 <= e and buf[i] == 110 and buf[i + 1] == 117 and buf[i + 2] == 108 and buf[i + 3] == 108:  # null
        i += 4
        while i < e and _is_ws(buf[i]):
            i += 1
        return 0 if i == e else -1
    if i >= e or buf[i] != 91:  # [
        return -1
    i += 1
    while i < e and _is_ws(buf[i]):
        i += 1
    if i < e and buf[i] == 93:  # ] -> empty list
        i += 1
    else:
        cnt = 0
        while True:
            neg = False
            if i < e and buf[i] == 45:  # -
                neg = True
                i += 1
            if i >= e or buf[i] < 48 or buf[i] > 57:
                return -1
            mag = np.uint64(0)
            if buf[i] == 48:  # JSON: no leading zeros
                i += 1
                if i < e and 48 <= buf[i] <= 57:
                    return -1
            else:
                j = i
                while i < e and 48 <= buf[i] <= 57:
                    mag = mag * U10 + np.uint64(buf[i] - 48)
                    i += 1
                # 19 digits cannot wrap a uint64; 20 or more cannot fit an int64.
                if i - j > 19 or mag > (I64_MIN_MAG if neg else I64_MAX_U):
                    return -1
            cnt += 1
            while i < e and _is_ws(buf[i]):
                i += 1
            if i < e and buf[i] == COMMA:
                i += 1
                while i < e and _is_ws(buf[i]):
                    i += 1
                continue
            if i < e and buf[i] == 93:
                i += 1
                break
            return -1
        while i < e and _is_ws(buf[i]):
            i += 1
        return cnt if i == e else -1
    while i < e and _is_ws(buf[i]):
        i += 1
    return 0 if i == e else -1


@kernel
def _fill_int_list(buf, s, e, out, pos):
    """Store the integers of buf[s:e] at out[pos:] (already validated by _count_int_list)."""
    mag = np.uint64(0)
    neg = False
    digits = False
    for i in range(s, e):
        c = buf[i]
        if 48 <= c <= 57:
            mag = mag * U10 + np.uint64(c - 48)
            digits = True
        elif c == 45:
            neg = True
        elif digits and (c == COMMA or c == 93):
            if neg:
                out[pos] = -np.int64(mag - np.uint64(1)) - 1 if mag > 0 else 0
            else:
                out[pos] = np.int64(mag)
            pos += 1
            mag = np.uint64(0)
            neg = False
            digits = False


@njit(cache=True, parallel=True)  # the one parallel kernel: rows parse independently
def parse_int_lists(buf, starts, ends, want_values):
    """Parse the JSON integer lists buf[starts[r]:ends[r]] (in parallel over lists);
    returns (values int64 flat, counts int64[m], first bad list index or -1).  values is
    empty unless ``want_values``."""
    m = starts.shape[0]
    counts = np.empty(m, dtype=np.int64)
    dummy = np.empty(0, dtype=np.int64)
    for r in prange(m):
        counts[r] = _count_int_list(buf, starts[r], ends[r])
    for r in range(m):
        if counts[r] < 0:
            return dummy, counts, r
    if not want_values:
        return dummy, counts, -1
    offsets = np.zeros(m + 1, dtype=np.int64)
    for r in range(m):
        offsets[r + 1] = offsets[r] + counts[r]
    values = np.empty(offsets[m], dtype=np.int64)
    for r in prange(m):
        _fill_int_list(buf, starts[r], ends[r], values, offsets[r])
    return values, counts, -1
