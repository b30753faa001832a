"""One request's exchange with the server: its body, and what the response says -- the
HTTP status, an OpenAI error body, the server-sent-event (SSE) stream's token chunks and
``usage`` -- recorded in a ``Record``.  Everything the server sends is untrusted: lines,
bodies and chunk counts are bounded, and anything unexpected is recorded as a one-line
error, never raised."""

from __future__ import annotations

import json

import numpy as np

from blis_fast.config.validate import MAX_REQUEST_TOKENS
from blis_fast.workload.formats.observed import one_line

MAX_LINE_BYTES = 1 << 20  # one SSE line
MAX_ERROR_BODY_BYTES = 64 << 10  # of an error response, read for its message
CHAT_WORD_BYTES = 4  # a chat prompt's text: one 4-byte word per token id (the blis-fast server's rule)
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
# the recording header's ``stamps``: token and send times taken as bytes move on the socket
# (blis_fast.observe.receipt), or as the observer parses them (an httpx it cannot plug into)
ON_RECEIPT = "on receipt"
ON_PROCESSING = "on processing"


class Record:
    """What the observer saw of one request (the recording's columns; times in µs on the
    server's timeline)."""

    __slots__ = ("send_us", "status", "error", "timed_out", "token_times", "completion_tokens", "prompt_tokens",
                 "finished")

    def __init__(self):
        self.send_us = -1
        self.status = 0
        self.error = ""
        self.timed_out = False
        self.token_times: list[int] = []
        self.completion_tokens = -1
        self.prompt_tokens = -1
        self.finished = False


class Malformed(Exception):
    """The stream broke the SSE / OpenAI chunk format (the message says how)."""


def chat_text(ids: np.ndarray) -> str:
    """A chat prompt standing for token ids: each id as a space and three letters (4 bytes:
    the blis-fast server counts ceil(bytes / 4) tokens of its ``user: TEXT`` line; a real
    tokenizer counts its own)."""
    v = np.asarray(ids, np.int64) % (26 ** 3)
    return "".join(" " + _LETTERS[a] + _LETTERS[b] + _LETTERS[c]
                   for a, b, c in zip((v // 676).tolist(), (v // 26 % 26).tolist(), (v % 26).tolist()))


def request_body(api: str, model: str, prompt_ids: np.ndarray, output_tokens: int) -> dict:
    """The JSON body of one streaming request: exactly ``output_tokens`` tokens asked for
    (``ignore_eos``, ``min_tokens``; at least 1: OpenAI servers refuse max_tokens 0)."""
    n = max(int(output_tokens), 1)
    body: dict = {"model": model}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": chat_text(prompt_ids)}]
    else:
        body["prompt"] = np.asarray(prompt_ids, np.int64).tolist()
    body.update({"max_tokens": n, "min_tokens": n, "ignore_eos": True, "stream": True,
                 "stream_options": {"include_usage": True}})
    return body


def openai_error_message(body: bytes) -> str:
    """The message of an OpenAI-style error body (``{"error": {"message": ...}}``; also a
    bare ``message`` or ``detail``), else the body's start as text."""
    text = body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return one_line(text.strip()[:200]) or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error")
        for candidate in ((err.get("message") if isinstance(err, dict) else err), data.get("message"),
                          data.get("detail")):
            if isinstance(candidate, str) and candidate:
                return one_line(candidate)
    return one_line(text.strip()[:200])


async def read_capped(response, limit: int) -> bytes:
    """At most ``limit`` bytes of a response body (the rest is not read)."""
    out = bytearray()
    async for chunk in response.aiter_bytes():
        out += chunk[:limit - len(out)]
        if len(out) >= limit:
            break
    return bytes(out)


async def sse_lines(response):
    """The stream's lines (bytes, without the line end); Malformed for a line longer than
    MAX_LINE_BYTES."""
    buf = bytearray()
    async for chunk in response.aiter_bytes():
        buf += chunk
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            yield bytes(buf[start:end]).rstrip(b"\r")
            start = end + 1
        del buf[:start]
        if len(buf) > MAX_LINE_BYTES:
            raise Malformed(f"a line longer than {MAX_LINE_BYTES} bytes")
    if buf:
        yield bytes(buf).rstrip(b"\r")


def _count(value) -> int:
    """A usage count, or -1 when the server gave something else."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REQUEST_TOKENS
    return value if ok else -1


def chunk_tokens(data: dict, api: str) -> int:
    """1 if an SSE chunk carries a token (text), else 0; Malformed if it is not a chunk.

    A token chunk is one whose first choice carries non-empty text (completions:
    ``text``; chat: ``delta.content``), or -- completions only -- empty text before the
    finish (a token whose text is not complete yet).  A chat delta with only the role,
    a finish chunk with no text, and the final ``usage`` chunk (no choices) carry none.
    A chunk with several tokens' text counts once."""
    choices = data.get("choices")
    if choices is None:
        if "usage" in data:
            return 0
        raise Malformed("a chunk without choices")
    if not isinstance(choices, list):
        raise Malformed("choices is not a list")
    if not choices:
        return 0
    choice = choices[0]
    if not isinstance(choice, dict):
        raise Malformed("a choice is not an object")
    if api == "chat":
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else None
        return 1 if isinstance(text, str) and text else 0
    text = choice.get("text")
    if not isinstance(text, str):
        raise Malformed("a completion choice without text")
    return 1 if text or choice.get("finish_reason") is None else 0


def take_event(line: bytes, rec: Record, api: str, now_us) -> bool:
    """Record one SSE line; True at ``data: [DONE]`` (the stream's end)."""
    if not line or line.startswith(b":"):
        return False  # the blank line ending an event, a comment (keep-alive)
    field, sep, value = line.partition(b":")
    if not sep:
        raise Malformed(f"a line that is not a field: {line[:60]!r}")
    if field != b"data":
        if field in (b"event", b"id", b"retry"):
            return False
        raise Malformed(f"an unknown field {field[:60]!r}")
    value = value[1:] if value.startswith(b" ") else value
    if value.strip() == b"[DONE]":
        return True
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):
        raise Malformed(f"data that is not JSON: {value[:60]!r}") from None
    if not isinstance(data, dict):
        raise Malformed("data that is not a JSON object")
    if "error" in data:  # an error reported in the stream (vLLM does this mid-generation)
        raise StreamError(openai_error_message(value))
    if chunk_tokens(data, api):
        rec.token_times.append(now_us())
    usage = data.get("usage")
    if isinstance(usage, dict):
        rec.completion_tokens = _count(usage.get("completion_tokens"))
        rec.prompt_tokens = _count(usage.get("prompt_tokens"))
    return False


class StreamError(Exception):
    """The server reported an error inside the stream."""
