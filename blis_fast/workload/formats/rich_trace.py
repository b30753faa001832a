"""The rich trace format: a YAML header + a per-request data table (CSV or Parquet).

A trace written by ``blis-fast workload generate`` (``write_trace``) holds

- a **header** (YAML): ``format: blis-fast-trace``, ``version``, the ``seed`` and the
  ``workload`` spec it was generated from, optionally the ``server`` (engine) config it
  was recorded with, the id -> name lists (``names``), the SLO targets per class and the
  token ids of every shared prefix (``prefixes``: name, length, base64 little-endian ints);
- a **data table**, one row per request in request order, with the columns

  =================  ======  ==========================================================
  arrival_us         int64   arrival time, µs (-1: a closed-loop follower, see below);
                             a table may give ``arrival_s`` (float seconds) instead
  client, tenant,    string  names (ids follow the header's ``names`` lists, then order
  slo_class,                 of first appearance)
  priority_class
  session, turn      int     session id (-1 none) and turn within it (0-based)
  prompt_tokens      int     L, including any shared prefix (>= 1)
  output_tokens      int     N (>= 0)
  prefix_id          int     shared prefix the session's first prompt starts with
                             (-1 none; index into the header's ``prefixes``)
  prefix_tokens      int     its length (informational; must match the prefix)
  content_seed       int64   seed of the request's fresh (non-shared) blocks, prompt
                             and output
  next_request       int     closed loop: row released when this one completes (-1)
  follow_delay_us    int     µs after this row's last token before next_request arrives
  prompt_token_ids   list    optional: explicit prompt token ids; then keys are hashed
                             from them
  output_token_ids   list    optional, with prompt_token_ids: explicit output token ids,
                             hashed as the continuation of the prompt (without them the
                             output blocks are fresh, from content_seed)
  model              string  optional: the served model the request asks for (a spec
                             client's ``model:``; "" = the first deployment's); written
                             only when some spec client names a model
  =================  ======  ==========================================================

  Only arrival, prompt_tokens and output_tokens are required when reading (the token-id
  columns can stand in for the counts); the rest default to client "trace", tenant =
  client, class "default", no session / prefix / closed loop, content_seed derived from
  the row number.

Block keys are not stored: they are rebuilt for the engine's block size when the trace is
read (``Requests.to_workload``), from the prefixes' token ids, the session structure (a
turn's prompt extends the previous turn's prompt *and output*, so it starts with that
turn's sequence blocks) and the content seeds -- exactly the keys of the generated
workload; or, with explicit token ids, hashed from the ids.

CSV layout: the header as ``# ``-prefixed lines (first line ``# blis-fast-trace``), then
a CSV table with a header row.  Parquet: the header YAML in the file's key-value metadata
under ``blis_fast.header``.  Both are written deterministically (same requests, same
bytes).
"""

from __future__ import annotations

import base64
import io
from dataclasses import replace
from pathlib import Path

import numpy as np

from blis_fast.config import memory
from blis_fast.config.validate import (
    INT32_MAX,
    INT64_MAX,
    MAX_REQUEST_TOKENS,
    MAX_TIME_US,
    as_choice,
    as_float,
    as_int,
    as_list,
    as_mapping,
    as_str,
    key_name,
    show,
)
from blis_fast.errors import WorkloadError
from blis_fast.workload.generate import Requests
from blis_fast.workload.workload import Workload, row_seeds
from blis_fast.workload.distribution import round_half_away
from blis_fast.workload.formats.blis_csv import _parse_lists

MAGIC = "# blis-fast-trace"
META_KEY = b"blis_fast.header"
FORMATS = ("csv", "parquet")
NAME_COLUMNS = ("client", "tenant", "slo_class", "priority_class")
# data column -> Requests column
INT_COLUMNS = {
    "session": "session", "turn": "turn", "prompt_tokens": "prompt_len", "output_tokens": "output_len",
    "prefix_id": "prefix_id", "prefix_tokens": "prefix_len", "content_seed": "content_seed",
    "next_request": "next_request", "follow_delay_us": "follow_delay_us",
}
ORDER = ("arrival_us",) + NAME_COLUMNS + tuple(INT_COLUMNS)
MAX_HEADER_BYTES = 256 * 2**20  # the YAML header (prefix token ids included)
TABLE_BYTES_PER_FILE_BYTE = 8  # memory a CSV table may take per byte of the file (parsed ids, scan arrays)
# column -> (lowest, highest) allowed value
COLUMN_RANGES = {
    "arrival_us": (-1, MAX_TIME_US), "session": (-1, MAX_TIME_US), "turn": (0, INT32_MAX),
    "prompt_tokens": (1, MAX_REQUEST_TOKENS), "output_tokens": (0, MAX_REQUEST_TOKENS),
    "prefix_id": (-1, INT32_MAX), "prefix_tokens": (0, MAX_REQUEST_TOKENS), "content_seed": (-INT64_MAX - 1, INT64_MAX),
    "next_request": (-1, MAX_TIME_US), "follow_delay_us": (0, MAX_TIME_US),
}


def _encode_tokens(t: np.ndarray) -> dict:
    t = np.asarray(t, np.int64)
    small = t.size == 0 or (t.min() >= -(2**31) and t.max() < 2**31)
    raw = t.astype("<i4" if small else "<i8").tobytes()
    return {"dtype": "int32" if small else "int64", "tokens": base64.b64encode(raw).decode("ascii")}


def _decode_tokens(entry: dict, where: str) -> np.ndarray:
    text = as_str(entry["tokens"], f"{where}.tokens", error=WorkloadError, max_len=MAX_HEADER_BYTES, nonempty=False)
    dtype = as_choice(entry.get("dtype", "int32"), f"{where}.dtype", ("int32", "int64"), error=WorkloadError)
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError as e:
        raise WorkloadError(where, f"malformed prefix tokens (base64): {show(str(e))}") from None
    size = 4 if dtype == "int32" else 8
    if len(raw) % size:
        raise WorkloadError(where, f"malformed prefix tokens: {len(raw)} bytes is not a whole number of {dtype}")
    memory.charge(len(raw) // size * 16, f"{where}: {len(raw) // size} prefix token ids")
    tokens = np.frombuffer(raw, dtype="<i4" if dtype == "int32" else "<i8").astype(np.int64)
    if "length" in entry and as_int(entry["length"], f"{where}.length", 0, MAX_REQUEST_TOKENS, error=WorkloadError,
                                    text=False) != tokens.shape[0]:
        raise WorkloadError(f"{where}.length", f"is {entry['length']} but tokens holds {tokens.shape[0]} ids")
    return tokens


def check_header(header: dict, where: str) -> None:
    """Types of the header fields the reader uses (names, prefixes, slo_targets, seed);
    other fields are kept as they are."""
    as_mapping(header, where, error=WorkloadError, what="a YAML mapping")
    names = header.get("names")
    if names is not None:
        as_mapping(names, f"{where} names", error=WorkloadError)
        for k in NAME_COLUMNS:
            lst = names.get(k)
            if lst is None:
                continue
            as_list(lst, f"{where} names.{k}", error=WorkloadError, max_len=10_000_000, what="a list of names")
            for j, x in enumerate(lst):
                if isinstance(x, bool) or not isinstance(x, (str, int)):
                    raise WorkloadError(f"{where} names.{k}[{j}]", f"must be a name, got {show(x)}")
    prefixes = header.get("prefixes")
    if prefixes is not None:
        as_list(prefixes, f"{where} prefixes", error=WorkloadError, max_len=INT32_MAX, what="a list of prefixes")
        for k, e in enumerate(prefixes):
            as_mapping(e, f"{where} prefixes[{k}]", error=WorkloadError)
            if "tokens" not in e:
                raise WorkloadError(f"{where} prefixes[{k}]", "needs tokens (base64)")
            if "name" in e and (isinstance(e["name"], bool) or not isinstance(e["name"], (str, int))):
                raise WorkloadError(f"{where} prefixes[{k}].name", f"must be a name, got {show(e['name'])}")
    targets = header.get("slo_targets")
    if targets is not None:
        as_mapping(targets, f"{where} slo_targets", error=WorkloadError)
        for name, t in targets.items():
            tp = f"{where} slo_targets.{key_name(name)}"
            as_mapping(t if t is not None else {}, tp, ("ttft_ms", "tpot_ms", "e2e_ms"), error=WorkloadError)
            for k, v in (t or {}).items():
                if v is not None:
                    as_float(v, f"{tp}.{k}", 0.0, 1e15, lo_open=True, error=WorkloadError, text=False)
    if header.get("seed") is not None:
        as_int(header["seed"], f"{where} seed", 0, INT64_MAX, error=WorkloadError, text=False)


def trace_header(req: Requests, server: dict | None = None) -> dict:
    """The YAML header dict of ``req``."""
    h = {k: v for k, v in req.header.items() if k != "description"}
    h.setdefault("format", "blis-fast-trace")
    h.setdefault("version", 1)
    if server is not None:
        h["server"] = server
    h["names"] = {k: list(v) for k, v in req.names.items() if k != "prefix"}
    h["slo_targets"] = req.slo_targets
    names = req.names.get("prefix") or [f"prefix[{k}]" for k in range(len(req.prefix_tokens))]
    h["prefixes"] = [{"name": nm, "length": int(len(t)), **_encode_tokens(t)} for nm, t in zip(names, req.prefix_tokens)]
    return h


def _table(req: Requests, fmt: str):
    import pyarrow as pa  # deferred: pyarrow

    cols = {"arrival_us": pa.array(req["arrival_us"], pa.int64())}
    for k in NAME_COLUMNS:
        names = np.asarray(req.names[k], dtype=object)
        cols[k] = pa.array(names[req[k]] if len(req) else [], pa.string())
    for k, src in INT_COLUMNS.items():
        cols[k] = pa.array(req[src], pa.int64() if req.COLUMNS[src] == np.int64 else pa.int32())
    if req.model is not None:
        cols["model"] = pa.array(req.model.tolist(), pa.string())
    for what in ("prompt", "output"):  # explicit token ids (read from a trace) are written back
        if req.token_ids is None or what not in req.token_ids:
            continue
        ids, offs = req.token_ids[what], req.token_ids[f"{what}_offsets"]
        if fmt == "parquet":
            big = offs[-1] >= 2**31
            lists = pa.LargeListArray if big else pa.ListArray
            cols[f"{what}_token_ids"] = lists.from_arrays(pa.array(offs.astype(np.int64 if big else np.int32)),
                                                          pa.array(ids, pa.int64()))
        else:
            cols[f"{what}_token_ids"] = pa.array(
                ["[" + ", ".join(map(str, ids[a:b].tolist())) + "]" for a, b in zip(offs[:-1], offs[1:])], pa.string())
    return pa.table(cols)


def _yaml_dump(obj) -> str:
    import yaml  # deferred: yaml

    return yaml.safe_dump(obj, sort_keys=False, allow_unicode=True, width=1_000_000)


def write_trace(req: Requests, path: str | Path, fmt: str | None = None, server: dict | None = None) -> Path:
    """Write ``req`` as a rich trace; fmt csv | parquet (default: from the extension,
    ``.parquet``/``.pq`` -> parquet, else csv).  Written to a temporary file in the same
    folder and renamed (a failure leaves ``path`` as it was)."""
    from blis_fast.config.outputs import atomic_write, check_writable  # deferred: yaml

    p = Path(path)
    fmt = fmt or ("parquet" if p.suffix.lower() in (".parquet", ".pq") else "csv")
    as_choice(fmt, "--format", FORMATS, error=WorkloadError)
    check_writable("--out", p)
    header = _yaml_dump(trace_header(req, server))
    table = _table(req, fmt)
    if fmt == "parquet":
        import pyarrow.parquet as pq  # deferred: pyarrow

        table = table.replace_schema_metadata({META_KEY: header.encode("utf-8")})
        return atomic_write(p, lambda tmp: pq.write_table(table, tmp, compression="zstd"), "--out")
    import pyarrow.csv as pcsv  # deferred: pyarrow

    buf = io.BytesIO()
    pcsv.write_csv(table, buf, pcsv.WriteOptions(include_header=True, quoting_style="needed"))

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            f.write((MAGIC + "\n").encode("utf-8"))
            for line in header.splitlines():
                f.write(("# " + line + "\n").encode("utf-8"))
            f.write(buf.getvalue())

    return atomic_write(p, write, "--out")


def is_rich_trace(path: str | Path) -> bool:
    """True for a Parquet file or a CSV starting with the ``# blis-fast-trace`` line."""
    p = Path(path)
    if p.suffix.lower() in (".parquet", ".pq"):
        return True
    try:
        with open(p, "rb") as f:
            return f.read(len(MAGIC)).decode("utf-8", "replace") == MAGIC
    except OSError:
        return False


def _read_parquet(p: Path):
    import pyarrow.parquet as pq  # deferred: pyarrow

    try:
        pf = pq.ParquetFile(p)
        meta = pf.metadata
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        memory.charge(2 * size, f"{show(p.name)}: the Parquet table ({meta.num_rows} rows)")
        kv = pf.schema_arrow.metadata or {}
        raw = kv.get(META_KEY, b"")
        if len(raw) > MAX_HEADER_BYTES:
            raise WorkloadError(f"{p.name} header", f"is larger than the {MAX_HEADER_BYTES // 2**20} MiB allowed")
        table = pf.read()
    except WorkloadError:
        raise
    except Exception as e:  # noqa: BLE001 -- pyarrow raises many types for a bad file
        if type(e).__name__ == "ConfigError":
            raise
        raise WorkloadError(show(str(p)), f"unreadable Parquet file: {show(str(e), 160)}") from None
    try:
        return table, raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise WorkloadError(f"{p.name} header", f"is not UTF-8 text (byte {e.start})") from None


def _read_csv(p: Path):
    import pyarrow as pa  # deferred: pyarrow
    import pyarrow.csv as pcsv  # deferred: pyarrow

    try:
        size = p.stat().st_size
    except OSError as e:
        raise WorkloadError(show(str(p)), f"cannot read: {e.strerror or e}") from None
    memory.charge(size * TABLE_BYTES_PER_FILE_BYTE, f"{show(p.name)}: a {size}-byte trace")
    data = p.read_bytes()
    header_lines, pos = [], 0
    while data.startswith(b"#", pos):
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end + 1
        try:
            line = data[pos:end].decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as e:
            raise WorkloadError(f"{p.name} header", f"is not UTF-8 text (byte {pos + e.start})") from None
        if pos > 0 or not line.startswith(MAGIC):
            header_lines.append(line[2:] if line.startswith("# ") else line[1:])
        pos = end
    types = {k: pa.string() for k in NAME_COLUMNS}
    types["model"] = pa.string()
    types["prompt_token_ids"] = pa.string()
    types["output_token_ids"] = pa.string()
    try:
        table = pcsv.read_csv(io.BytesIO(data[pos:]), convert_options=pcsv.ConvertOptions(column_types=types))
    except Exception as e:  # noqa: BLE001
        raise WorkloadError(show(str(p)), f"malformed CSV table: {show(' '.join(str(e).split()), 160)}") from None
    return table, "\n".join(header_lines)


def _int_column(table, name: str, where: str, default: int, n: int, lo: int | None = None,
                hi: int | None = None) -> np.ndarray:
    """An integer column, range-checked before any conversion (floats must be integral;
    a float or unsigned value beyond the range never wraps)."""
    if name not in table.column_names:
        return np.full(n, default, np.int64)
    lo, hi = COLUMN_RANGES.get(name, (lo, hi)) if lo is None or hi is None else (lo, hi)
    col = table.column(name)
    if col.null_count:
        raise WorkloadError(f"{where} column {name}", f"has {col.null_count} empty values")
    try:
        a = col.to_numpy()
    except Exception as e:  # noqa: BLE001
        raise WorkloadError(f"{where} column {name}", f"unreadable: {show(str(e))}") from None
    if a.dtype.kind not in "iuf":
        raise WorkloadError(f"{where} column {name}", f"must hold integers, got {show(str(col.type))}")
    if a.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad_mask = ~np.isfinite(a) | (a != np.trunc(a))
        if bad_mask.any():
            bad = int(np.flatnonzero(bad_mask)[0])
            raise WorkloadError(f"{where} row {bad + 1} column {name}", f"must be an integer, got {show(float(a[bad]))}")
    if n:
        for limit, over in ((lo, a < lo if lo is not None else None), (hi, a > hi if hi is not None else None)):
            if over is not None and over.any():
                bad = int(np.flatnonzero(over)[0])
                v = a[bad].item()
                raise WorkloadError(f"{where} row {bad + 1} column {name}",
                                    f"must be an integer in [{lo}, {hi}], got {show(v)}")
    return a.astype(np.int64)


def read_trace(path: str | Path) -> tuple[Requests, dict, np.ndarray | None, np.ndarray | None]:
    """Read a rich trace: (Requests, header dict, explicit prompt token ids flat or None,
    their offsets or None).  Explicit ids (prompt, and output if given) are also kept in
    ``Requests.token_ids``.  Raises WorkloadError naming the file, row and column."""
    from blis_fast.config.yamlfile import load_yaml_text  # deferred: yaml

    p = Path(path)
    if not p.is_file():
        raise WorkloadError(show(str(p)), "trace file not found")
    where = show(p.name).strip("'")
    table, header_text = _read_parquet(p) if p.suffix.lower() in (".parquet", ".pq") else _read_csv(p)
    header = load_yaml_text(header_text, f"{where} header", WorkloadError, max_bytes=MAX_HEADER_BYTES) \
        if header_text.strip() else {}
    if header is None:
        header = {}
    check_header(header, f"{where} header")
    n = table.num_rows
    if n == 0:
        raise WorkloadError(where, "no requests in the data table")
    cols: dict[str, np.ndarray] = {}
    if "arrival_us" in table.column_names:
        cols["arrival_us"] = _int_column(table, "arrival_us", where, -1, n)
    elif "arrival_s" in table.column_names:
        col = table.column("arrival_s")
        s = col.to_numpy(zero_copy_only=False)
        if col.null_count or s.dtype.kind not in "iuf":
            raise WorkloadError(f"{where} column arrival_s", f"must hold numbers (seconds), got {show(str(col.type))}")
        s = s.astype(np.float64)
        if not np.all(np.isfinite(s)) or (n and s.max() * 1e6 > MAX_TIME_US):
            raise WorkloadError(f"{where} column arrival_s", "must hold finite seconds <= 4.6e12 (-1 for followers)")

        cols["arrival_us"] = np.where(s < 0, -1, round_half_away(s * 1e6)).astype(np.int64)
    else:
        raise WorkloadError(where, "needs an arrival_us (µs) or arrival_s (seconds) column")
    ids_col = {"prompt_tokens": "prompt_token_ids", "output_tokens": "output_token_ids"}
    for c in ("prompt_tokens", "output_tokens"):
        if c not in table.column_names and ids_col[c] not in table.column_names:
            raise WorkloadError(where, f"needs a {c} column")
    if "output_token_ids" in table.column_names and "prompt_token_ids" not in table.column_names:
        raise WorkloadError(f"{where} column output_token_ids", "needs a prompt_token_ids column too")
    hnames = header.get("names") or {}
    names: dict[str, list[str]] = {}
    for k in NAME_COLUMNS:
        if k in table.column_names:
            vals = np.asarray(table.column(k).to_pylist(), dtype=object)
            if any(v is None for v in vals):
                raise WorkloadError(f"{where} column {k}", "has empty names")
        else:
            vals = np.full(n, "trace" if k in ("client", "tenant") else "default", dtype=object)
            if k == "tenant" and "client" in table.column_names:
                vals = np.asarray(table.column("client").to_pylist(), dtype=object)
        known = [str(x) for x in (hnames.get(k) or [])]
        uniq, first_idx, inv = np.unique(vals.astype(str), return_index=True, return_inverse=True)
        by_first = [str(uniq[j]) for j in np.argsort(first_idx, kind="stable")]
        lst = known + [x for x in by_first if x not in known]
        pos = {nm: i for i, nm in enumerate(lst)}
        cols[k] = np.array([pos[str(u)] for u in uniq], np.int32)[inv]
        names[k] = lst
    defaults = {"session": -1, "turn": 0, "prefix_id": -1, "prefix_tokens": 0, "next_request": -1,
                "follow_delay_us": 0}
    for c, dst in INT_COLUMNS.items():
        if c == "content_seed":
            continue
        if c in ids_col and c not in table.column_names:
            continue  # from the token-id column
        cols[dst] = _int_column(table, c, where, defaults.get(c, 0), n)
    if "content_seed" in table.column_names:
        cols["content_seed"] = _int_column(table, "content_seed", where, 0, n)
    else:  # one distinct seed per row (splitmix64 of the row number)
        cols["content_seed"] = row_seeds(n)
    tokens = token_offsets = None
    token_ids = None
    for what, count in (("prompt", "prompt_len"), ("output", "output_len")):
        col = f"{what}_token_ids"
        if col not in table.column_names:
            continue
        ids, offs = _token_lists(table.column(col), where, what)
        lens = np.diff(offs)
        if what == "prompt" and lens.min() < 1:
            bad = int(np.flatnonzero(lens < 1)[0])
            raise WorkloadError(f"{where} row {bad + 1} column {col}", "needs >= 1 token")
        if count in cols and not np.array_equal(cols[count], lens):
            bad = int(np.flatnonzero(cols[count] != lens)[0])
            raise WorkloadError(f"{where} row {bad + 1} column {what}_tokens",
                                f"is {cols[count][bad]} but {col} has {lens[bad]} ids")
        cols[count] = lens
        token_ids = token_ids or {}
        token_ids[what], token_ids[f"{what}_offsets"] = ids, offs
        if what == "prompt":
            tokens, token_offsets = ids, offs
    prefixes = []
    for k, e in enumerate(header.get("prefixes") or []):
        if not isinstance(e, dict) or "tokens" not in e:
            raise WorkloadError(f"{where} header prefixes[{k}]", "needs tokens (base64)")
        prefixes.append(_decode_tokens(e, f"{where} header prefixes[{k}]"))
    pid = cols["prefix_id"]
    if n and pid.max() >= len(prefixes):
        bad = int(np.flatnonzero(pid >= len(prefixes))[0])
        raise WorkloadError(f"{where} row {bad + 1} column prefix_id",
                            f"{pid[bad]} is not a prefix of the header ({len(prefixes)} defined)")
    plens = np.array([len(t) for t in prefixes] + [0], np.int64)[pid]  # -1 -> the trailing 0
    if "prefix_tokens" in table.column_names and not np.array_equal(cols["prefix_len"], plens):
        bad = int(np.flatnonzero(cols["prefix_len"] != plens)[0])
        raise WorkloadError(f"{where} row {bad + 1} column prefix_tokens",
                            f"is {cols['prefix_len'][bad]} but prefix {pid[bad]} has {plens[bad]} tokens")
    cols["prefix_len"] = plens
    if np.any(plens > cols["prompt_len"]):
        bad = int(np.flatnonzero(plens > cols["prompt_len"])[0])
        raise WorkloadError(f"{where} row {bad + 1} column prompt_tokens", "is shorter than its shared prefix")
    names["prefix"] = [str(e.get("name", f"prefix[{k}]")) for k, e in enumerate(header.get("prefixes") or [])]
    cols = {k: np.ascontiguousarray(cols[k], dtype=Requests.COLUMNS[k]) for k in Requests.COLUMNS}
    _check_sessions(cols, where)
    desc = {"kind": "trace", "path": str(p), "format": "blis-fast-trace"}
    if header.get("seed") is not None:
        desc["seed"] = header["seed"]
    hdr = {**header, "description": desc}
    req = Requests(cols, names, dict(header.get("slo_targets") or {}), prefixes, hdr, token_ids,
                   _model_column(table, where))
    return req, header, tokens, token_offsets


MAX_MODEL_NAME = 256  # characters of a model column value


def _model_column(table, where: str) -> np.ndarray | None:
    """The optional model column: an object array of names ("" = the first deployment's
    model), validated as untrusted input (strings, no nulls, <= MAX_MODEL_NAME chars)."""
    import pyarrow as pa  # deferred: pyarrow

    if "model" not in table.column_names:
        return None
    col = table.column("model")
    name = f"{where} column model"
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise WorkloadError(name, f"must hold model names (strings), got {show(str(col.type))}")
    if col.null_count:
        raise WorkloadError(name, f"has {col.null_count} empty (null) values")
    vals = np.asarray(col.to_pylist(), dtype=object)
    for i, v in enumerate(vals):
        if len(v) > MAX_MODEL_NAME:
            raise WorkloadError(f"{where} row {i + 1} column model",
                                f"a name of at most {MAX_MODEL_NAME} characters, got {show(v)}")
    return vals


def _token_lists(col, where: str, what: str = "prompt"):
    import pyarrow as pa  # deferred: pyarrow

    name = f"{where} column {what}_token_ids"
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        if not pa.types.is_integer(col.type.value_type):  # (CSV token lists must be integers too)
            raise WorkloadError(name, f"must hold lists of integers, got {show(str(col.type))}")
        chunks = col.combine_chunks()
        if chunks.null_count or chunks.values.null_count:
            raise WorkloadError(name, "has empty (null) lists or ids")
        offs = np.asarray(chunks.offsets, dtype=np.int64)
        vals = chunks.values.to_numpy(zero_copy_only=False)
        if vals.dtype.kind == "u" and vals.size and vals.max() > INT64_MAX:
            raise WorkloadError(name, f"ids must fit int64, got {show(vals.max().item())}")
        vals = np.asarray(vals, dtype=np.int64)
        return vals[offs[0]:offs[-1]], offs - offs[0]
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise WorkloadError(name, f"must hold lists of integers, got {show(str(col.type))}")

    strings = [s if s is not None else "[]" for s in col.to_pylist()]
    ids, counts = _parse_lists(strings, what, where, list(range(2, len(strings) + 2)))
    offs = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offs[1:])
    return ids, offs


def _check_sessions(cols: dict, where: str) -> None:
    sess, turn = cols["session"], cols["turn"]
    idx = np.flatnonzero(sess >= 0)
    if idx.size:
        o = idx[np.lexsort((turn[idx], sess[idx]))]
        dup = (sess[o[1:]] == sess[o[:-1]]) & (turn[o[1:]] == turn[o[:-1]])
        if dup.any():
            bad = int(max(o[1:][dup][0], o[:-1][dup][0]))
            raise WorkloadError(f"{where} row {bad + 1} column turn", f"session {sess[bad]} has turn {turn[bad]} twice")
    nxt = cols["next_request"]
    n = len(nxt)
    if n and nxt.max() >= n:
        bad = int(np.flatnonzero(nxt >= n)[0])
        raise WorkloadError(f"{where} row {bad + 1} column next_request", f"{nxt[bad]} is not a row index (< {n})")


def load_trace(path: str | Path, block_size: int) -> Workload:
    """A rich trace as a Workload for ``block_size`` (replayed by ``--workload traces``)."""
    req = read_trace(path)[0]
    wl = req.to_workload(block_size, description=req.header.get("description", {}))
    if req.model is None:
        return wl
    # the column's names (ids in order of first appearance); resolve.assign_models maps them
    # to the deployments' served models
    names, ids = np.unique(req.model.astype(str), return_inverse=True) if len(req) else ([], np.zeros(0, int))
    return replace(wl, model=np.ascontiguousarray(ids, np.int32), models=tuple(str(x) for x in names))
