"""The outcome of each observed request as one kind, and an observation's summary (what
``blis-fast observe`` prints): requests sent, ok, errors by kind, timed out, observed TTFT
and E2E percentiles (ms on the server's timeline, over the requests that succeeded)."""

from __future__ import annotations

import numpy as np

from blis_fast.workload.formats.observed import Observation

# an error's kind by how its one line starts (blis_fast.observe.observer and .stream write them)
ERROR_KINDS = (("not sent", "not_sent"), ("timed out", "timeout"), ("connection dropped", "dropped"),
               ("stream ended", "dropped"), ("malformed SSE", "malformed"), ("stream error", "stream_error"),
               ("connection failed", "connection"), ("interrupted", "interrupted"))


def outcome(status: int, error: str, timed_out: bool) -> str:
    """``ok``, or the kind of failure: http_4xx, http_5xx (an error status), timeout,
    dropped (the connection or stream ended early), malformed (not SSE / OpenAI chunks),
    stream_error (an error inside the stream), connection (no connection), interrupted
    (Ctrl-C), not_sent, other."""
    if timed_out:
        return "timeout"
    if status >= 400 and error.startswith("HTTP"):
        return "http_4xx" if status < 500 else "http_5xx"
    for start, kind in ERROR_KINDS:
        if error.startswith(start):
            return kind
    if status == 200 and not error:
        return "ok"
    return "other"


def _percentiles_ms(values_us: np.ndarray) -> dict:
    if values_us.size == 0:
        return {"p50": None, "p99": None}
    p50, p99 = np.percentile(values_us.astype(np.float64), [50, 99])
    return {"p50": round(float(p50) / 1000.0, 3), "p99": round(float(p99) / 1000.0, 3)}


def summarize(obs: Observation) -> dict:
    """sent, ok, errors (kind -> count), timed_out, ttft_ms / e2e_ms (p50, p99 of the
    requests that succeeded and streamed at least one token)."""
    kinds = [outcome(int(s), e, bool(t)) for s, e, t in zip(obs["status"], obs.error, obs["timed_out"])]
    errors: dict[str, int] = {}
    for kind in kinds:
        if kind != "ok":
            errors[kind] = errors.get(kind, 0) + 1
    good = np.array([k == "ok" for k in kinds], bool) & (obs["first_token_us"] >= 0)
    send = obs["send_us"][good]
    return {
        "requests": len(obs), "sent": int((obs["send_us"] >= 0).sum()), "ok": kinds.count("ok"),
        "errors": dict(sorted(errors.items())), "timed_out": int(obs["timed_out"].sum()),
        "ttft_ms": _percentiles_ms(obs["first_token_us"][good] - send),
        "e2e_ms": _percentiles_ms(obs["last_token_us"][good] - send),
    }


def notices(obs: Observation, observed: dict) -> list[str]:
    """One-line warnings about a recording (the command prints them on stderr): the
    blis-fast server reports another time scale than the observer's (every recorded time
    is then off by their ratio), or requests streamed fewer chunks than their
    ``usage.completion_tokens`` (several tokens a chunk: token times are chunk times)."""
    out = []
    k = observed.get("time_scale")
    for entry in observed.get("server_models") or []:
        info = entry.get("blis_fast") if isinstance(entry, dict) and entry.get("id") == observed.get("model") else None
        server_k = info.get("time_scale") if isinstance(info, dict) else None
        if isinstance(server_k, (int, float)) and not isinstance(server_k, bool) and k and \
                abs(server_k - k) > 1e-9 * max(abs(server_k), abs(k)):
            out.append(f"the server runs at time scale {server_k:g} and the observer at {k:g} (--time-scale): "
                       "recorded times are off by their ratio")
            break
    chunks = np.diff(obs.token_offsets)
    fewer = int(((obs["completion_tokens"] > chunks) & (obs["completion_tokens"] >= 0)).sum())
    if fewer:
        out.append(f"{fewer} requests streamed fewer chunks than their usage.completion_tokens: the server sends "
                   "several tokens a chunk, and token times are chunk times (docs/observe.md)")
    return out
