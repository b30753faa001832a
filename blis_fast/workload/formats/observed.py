"""Observed recordings: what an observer saw of a server (``blis-fast observe``).

A recording is a rich trace (``rich_trace.py``) of the requests the observer sent -- so
``blis-fast replay`` and anything that reads a trace runs it as a workload -- with, beside
the trace's columns, what came back for each request:

  ======================  ============  ===================================================
  send_us                 int64         when the request was sent, µs on the server's
                                        timeline (the observer's wall clock since its start
                                        times ``time_scale``); -1: never sent
  status                  int32         HTTP status; 0: no response (connection refused,
                                        dropped, timed out before the headers)
  error                   string        "" or one line: what went wrong
  timed_out               bool          the request hit the observer's timeout
  first_token_us          int64         the first streamed token's arrival (-1: none)
  last_token_us           int64         the last one's (-1: none)
  completion_tokens       int64         the server's ``usage.completion_tokens`` (-1: none)
  reported_prompt_tokens  int64         the server's ``usage.prompt_tokens`` (-1: none)
  token_times_us          list<int64>   every streamed token's arrival, in order
  ======================  ============  ===================================================

All times are on the server's timeline, from the observer's start (the first request is
sent at its ``arrival_us``). The header's ``observed`` mapping says how the recording was
made: ``endpoint``, ``model``, ``time_scale``, ``concurrency``, ``timeout_s``, what the
server said of itself (``server_models``: its ``/v1/models``) and ``server_flags`` (the
flags it was started with, as the user gave them to the observer).

Only Parquet holds the token-time lists; ``write_observed`` writes Parquet.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from blis_fast.config.validate import MAX_TIME_US, show
from blis_fast.errors import WorkloadError
from blis_fast.workload.formats.rich_trace import META_KEY, _table, _yaml_dump, read_trace, trace_header
from blis_fast.workload.generate import Requests

MAX_ERROR_CHARS = 300  # one line per failed request
INT_OBSERVED = {"send_us": np.int64, "status": np.int32, "first_token_us": np.int64, "last_token_us": np.int64,
                "completion_tokens": np.int64, "reported_prompt_tokens": np.int64}
OBSERVED_COLUMNS = (*INT_OBSERVED, "error", "timed_out", "token_times_us")


@dataclass
class Observation:
    """What an observer saw of each request of a recording (row k: the trace's request k);
    the columns of the module docstring, the token times flat with offsets."""

    columns: dict[str, np.ndarray]  # INT_OBSERVED's int columns, "timed_out" bool
    error: list[str]
    token_times_us: np.ndarray  # int64, every request's token times one after the other
    token_offsets: np.ndarray  # int64[n + 1]: request k's are token_times_us[off[k]:off[k + 1]]

    def __len__(self) -> int:
        return len(self.error)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def token_times(self, k: int) -> np.ndarray:
        """Request k's token arrival times, µs."""
        return self.token_times_us[self.token_offsets[k]:self.token_offsets[k + 1]]

    @classmethod
    def empty(cls, n: int) -> "Observation":
        """n requests not sent yet: every time -1, status 0, no tokens."""
        cols = {k: np.full(n, -1 if k != "status" else 0, dt) for k, dt in INT_OBSERVED.items()}
        cols["timed_out"] = np.zeros(n, bool)
        return cls(cols, [""] * n, np.zeros(0, np.int64), np.zeros(n + 1, np.int64))

    @classmethod
    def from_lists(cls, columns: dict[str, np.ndarray], error: list[str], times: list) -> "Observation":
        """An Observation from its columns and one sequence of token times per request."""
        lens = np.array([len(t) for t in times], np.int64)
        offsets = np.zeros(len(times) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        flat = np.concatenate([np.asarray(t, np.int64) for t in times]) if len(times) else np.zeros(0, np.int64)
        return cls(columns, [one_line(e) for e in error], flat.astype(np.int64), offsets)


def one_line(text: str) -> str:
    """``text`` as one line of at most MAX_ERROR_CHARS characters (control characters escaped)."""
    text = str(text).replace("\r", " ").replace("\n", " ")
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS - 3] + "..."


def write_observed(path: str | Path, requests: Requests, obs: Observation, observed: dict,
                   server: dict | None = None) -> Path:
    """Write the recording: ``requests`` as a rich trace (Parquet), ``obs``'s columns beside
    them and ``observed`` (how it was made) in the header.  Atomic: a failure leaves
    ``path`` as it was."""
    import pyarrow as pa  # deferred: pyarrow
    import pyarrow.parquet as pq  # deferred: pyarrow

    from blis_fast.config.outputs import atomic_write, check_writable  # deferred: yaml

    if len(obs) != len(requests):
        raise ValueError(f"{len(obs)} observations for {len(requests)} requests")
    p = Path(path)
    check_writable("--out", p)
    header = trace_header(requests, server)
    header["observed"] = observed
    table = _table(requests, "parquet")
    for name, dtype in INT_OBSERVED.items():
        table = table.append_column(name, pa.array(obs[name], pa.int64() if dtype == np.int64 else pa.int32()))
    table = table.append_column("error", pa.array(obs.error, pa.string()))
    table = table.append_column("timed_out", pa.array(obs["timed_out"], pa.bool_()))
    times = pa.LargeListArray.from_arrays(pa.array(obs.token_offsets, pa.int64()), pa.array(obs.token_times_us,
                                                                                            pa.int64()))
    table = table.append_column("token_times_us", times)
    table = table.replace_schema_metadata({META_KEY: _yaml_dump(header).encode("utf-8")})
    return atomic_write(p, lambda tmp: pq.write_table(table, tmp, compression="zstd"), "--out")


def read_observed(path: str | Path) -> tuple[Requests, dict, Observation]:
    """(the requests, the header, the observation) of a recording; WorkloadError naming the
    file and column if it is not one (a plain trace has no observed columns)."""
    import pyarrow.parquet as pq  # deferred: pyarrow

    requests, header, _, _ = read_trace(path)
    p = Path(path)
    where = show(p.name).strip("'")
    if p.suffix.lower() not in (".parquet", ".pq"):
        raise WorkloadError(where, "an observed recording is a Parquet file (blis-fast observe --out T.parquet)")
    table = pq.read_table(p)
    missing = [c for c in OBSERVED_COLUMNS if c not in table.column_names]
    if missing:
        raise WorkloadError(where, f"is not an observed recording: no {', '.join(missing)} column "
                                   "(write one with blis-fast observe)")
    if not isinstance(header.get("observed"), dict):
        raise WorkloadError(f"{where} header", "needs the observed mapping (how the recording was made)")
    n = len(requests)
    cols: dict[str, np.ndarray] = {}
    for name, dtype in INT_OBSERVED.items():
        col = table.column(name)
        if col.null_count or col.type.id not in (7, 9):  # int32, int64
            raise WorkloadError(f"{where} column {name}", f"must hold integers, got {show(str(col.type))}")
        v = col.to_numpy(zero_copy_only=False).astype(np.int64)
        lo = 0 if name == "status" else -1
        hi = 999 if name == "status" else MAX_TIME_US
        if n and (v.min() < lo or v.max() > hi):
            bad = int(np.flatnonzero((v < lo) | (v > hi))[0])
            raise WorkloadError(f"{where} row {bad + 1} column {name}", f"must be in [{lo}, {hi}], got {v[bad]}")
        cols[name] = v.astype(dtype)
    col = table.column("timed_out")
    if col.null_count or str(col.type) != "bool":
        raise WorkloadError(f"{where} column timed_out", f"must hold booleans, got {show(str(col.type))}")
    cols["timed_out"] = col.to_numpy(zero_copy_only=False).astype(bool)
    col = table.column("error")
    if str(col.type) not in ("string", "large_string"):
        raise WorkloadError(f"{where} column error", f"must hold text, got {show(str(col.type))}")
    error = [one_line(e or "") for e in col.to_pylist()]
    col = table.column("token_times_us").combine_chunks()
    if not str(col.type).startswith(("list<", "large_list<")) or col.null_count:
        raise WorkloadError(f"{where} column token_times_us", f"must hold lists of integers, got {show(str(col.type))}")
    offsets = np.asarray(col.offsets.to_numpy(zero_copy_only=False), np.int64)
    flat = np.asarray(col.values.to_numpy(zero_copy_only=False), np.int64)[offsets[0]:offsets[-1]]
    offsets = offsets - offsets[0]
    if flat.size and (flat.min() < 0 or flat.max() > MAX_TIME_US):
        raise WorkloadError(f"{where} column token_times_us", f"must hold times in [0, {MAX_TIME_US}] µs")
    return requests, header, Observation(cols, error, flat, offsets)
