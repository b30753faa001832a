"""``blis-fast serve``: an OpenAI-compatible server backed by the live engine.

The engine (``engine.LiveEngine``) runs on a clock that follows the wall clock, scaled by
``time_scale`` (K simulated seconds per wall second; the clock starts at 0 when the server
does).  A request arrives in the engine at the clock's time when its handler starts (its
body still to read and parse: the server's own work takes no engine time), and each token
is sent when the clock reaches the time the engine gave it (its step's end + α2).  One
task, the *driver*, does both in the server's event loop: it runs the engine's events up
to the clock, then sends the tokens that are due, then sleeps until the next event, the
next token or a new request (woken by ``alarm.Alarm``: the loop's timers are too coarse).  When it falls behind (more work than the wall clock
allows), tokens go out late; ``blis_fast:emission_lateness_seconds`` in ``/metrics``
says by how much.

The HTTP side (``create_app``, starlette) parses and checks each request -- one line in an
OpenAI-style error body otherwise -- and turns its prompt into token ids: a list of ids as
given, a text as its UTF-8 bytes four by four (so the same text gives the same ids and
the prefix cache finds a repeated prefix; ceil(bytes / 4) tokens).  A chat request's
messages are one text, each message as ``role: content`` on its own line.  The emulator
always generates exactly ``max_tokens`` tokens (each the text " tok"): the finish reason
is ``length``.  docs/serve.md has the whole contract.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from blis_fast.config.validate import show
from blis_fast.serve.alarm import ALARM_BACKSTOP_S, ALARM_LEAD_S, Alarm
from blis_fast.serve.engine import LiveEngine
from blis_fast.serve.heap import quiet_heap
from blis_fast.serve.metrics import ServerMetrics, render

MAX_BODY_BYTES = 16 * 2**20  # a request body (a long prompt's ids as JSON fit easily)
MAX_TIME_SCALE = 1000.0
MAX_MESSAGES = 10_000
TOKEN_TEXT = " tok"  # the text of every generated token
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
MAX_TOKEN_ID = 2**31 - 1
PROCESS_CHUNK = 256  # engine event times run before the driver sends the tokens that are due
SHUTDOWN = "shutdown"  # how an answer the server ended on shutting down ended (LiveServer.close)
ROLES = ("system", "user", "assistant", "tool", "developer", "function")


class ApiError(Exception):
    """A request the server refuses: HTTP ``status`` with an OpenAI-style error body."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def body(self) -> dict:
        return {"object": "error", "error": {"message": self.message, "type": self.kind, "param": self.param,
                                             "code": self.status}}


def text_token_ids(text: str) -> np.ndarray:
    """A text's token ids: its UTF-8 bytes in groups of four (little-endian, the last group
    padded with zero bytes), ceil(bytes / 4) of them."""
    raw = text.encode("utf-8")
    raw += b"\0" * (-len(raw) % 4)
    return np.frombuffer(raw, "<u4").astype(np.int64)


def prompt_ids(prompt: Any, param: str = "prompt") -> np.ndarray:
    """The token ids of a completions ``prompt``: a text, a list of ids, or a list holding
    one of those."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        ids = text_token_ids(prompt)
    elif isinstance(prompt, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in prompt):
        ids = np.array(prompt, np.int64) if prompt else np.zeros(0, np.int64)
        if ids.size and (ids.min() < 0 or ids.max() > MAX_TOKEN_ID):
            raise ApiError(400, f"token ids must be in [0, {MAX_TOKEN_ID}]", param)
    elif isinstance(prompt, list):
        raise ApiError(400, "one prompt per request: a text, a list of token ids, or a list holding one of them",
                       param)
    else:
        raise ApiError(400, f"must be a text or a list of token ids, got {type(prompt).__name__}", param)
    if ids.size == 0:
        raise ApiError(400, "the prompt is empty: it needs at least one token", param)
    return ids


def chat_text(messages: Any) -> str:
    """A chat request's messages as one text: ``role: content`` per line."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "must be a non-empty list of messages", "messages")
    if len(messages) > MAX_MESSAGES:
        raise ApiError(400, f"at most {MAX_MESSAGES} messages", "messages")
    lines = []
    for k, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ApiError(400, f"each message is {{role, content}} with role one of {', '.join(ROLES)}",
                           f"messages[{k}]")
        content = m.get("content")
        if isinstance(content, list):  # content parts: their text
            if not all(isinstance(p, dict) and isinstance(p.get("text", ""), str) for p in content):
                raise ApiError(400, "content parts are {type, text}", f"messages[{k}].content")
            content = "".join(p.get("text", "") for p in content)
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise ApiError(400, "content is a text or a list of text parts", f"messages[{k}].content")
        lines.append(f"{m['role']}: {content}\n")
    return "".join(lines)


def _int_param(body: dict, name: str, default: int | None, lo: int, hi: int) -> int | None:
    value = body.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"must be an integer, got {show(value)}", name)
    if not lo <= value <= hi:
        raise ApiError(400, f"must be in [{lo}, {hi}], got {value}", name)
    return value


@dataclass
class Completion:
    """One request the server is answering."""

    row: int
    model: int  # its served model (an index of LiveServer.model_names)
    prompt_tokens: int
    max_tokens: int
    arrival_us: int
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    delivered: int = 0
    last_us: int = -1
    ended: bool = False
    sent_wall: list = field(default_factory=list)  # per token: (the wall time it was due, the wall time it went out)


class LiveServer:
    """The driver (module docstring) of one live engine; ``model_names``: the names clients
    ask for, one per served model (default the deployments')."""

    def __init__(self, engine: LiveEngine, model_names: tuple[str, ...] | None = None, time_scale: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not (isinstance(time_scale, (int, float)) and 0 < time_scale <= MAX_TIME_SCALE):
            raise ValueError(f"time_scale must be in (0, {MAX_TIME_SCALE}], got {time_scale!r}")
        self.engine = engine
        self.model_names = tuple(model_names) if model_names is not None else tuple(engine.models)
        if len(self.model_names) != len(engine.models):
            raise ValueError(f"{len(self.model_names)} model names for {len(engine.models)} served models")
        self.time_scale = float(time_scale)
        self.clock = clock
        self.metrics = [ServerMetrics(name, k) for k, name in enumerate(self.model_names)]
        self.active: dict[int, Completion] = {}
        self._emissions: list[tuple[int, int, int, int, int]] = []  # (time µs, arrival µs, seq, row, token index)
        self._seq = itertools.count()
        self._ids = itertools.count(1)
        self._start = clock()
        self._wake: asyncio.Event | None = None
        self._last_arrival = 0  # µs, the latest arrival the engine took
        self._ending: list[int] = []  # rows the engine ended, finished once their tokens are sent
        self.closing = False  # no new request (shutting down)
        self.stopped = False  # the engine stopped; every open answer ended

    # ------------------------------------------------------------------ clocks

    def sim_now(self) -> int:
        """The engine clock's time now, µs (never before the engine's own clock)."""
        t = int((self.clock() - self._start) * 1e6 * self.time_scale)
        return max(t, int(self.engine.state.loop[0]["clock_us"]))

    def wall_of(self, t_us: int) -> float:
        """The wall clock (``clock()``) time the engine's time ``t_us`` falls at."""
        return self._start + t_us / 1e6 / self.time_scale

    def next_id(self) -> int:
        return next(self._ids)

    # ------------------------------------------------------------------ requests

    def submit(self, ids: np.ndarray, max_tokens: int, model: int = 0, came_us: int | None = None) -> Completion:
        """Take a request that came in at engine time ``came_us`` (default now; never
        before the engine's clock): its Completion, or ApiError 503 when every row is taken
        (or the server is shutting down) and 400 when it is too long."""
        if self.closing:
            raise ApiError(503, "the server is shutting down", kind="server_error")
        n = int(ids.shape[0])
        if n + max_tokens > self.engine.max_model_len:
            raise ApiError(400, f"This model's maximum context length is {self.engine.max_model_len} tokens. However, "
                                f"you requested {n + max_tokens} tokens ({n} in the prompt, {max_tokens} in the "
                                "completion). Please reduce the length of the prompt or max_tokens.", "max_tokens")
        # (arrivals join the engine's stream in time order: one that came in earlier than the
        # last one taken but took longer to parse arrives with it)
        t = self.sim_now() if came_us is None else max(int(came_us), int(self.engine.state.loop[0]["clock_us"]))
        t = self._last_arrival = max(t, self._last_arrival)
        row = self.engine.submit(ids, max_tokens, t, model)
        if row < 0:
            raise ApiError(503, f"the server holds {self.engine.capacity} requests (--capacity): try again later",
                           kind="server_error")
        c = Completion(row, model, n, max_tokens, t)
        self.active[row] = c
        if self._wake is not None:
            self._wake.set()
        return c

    # ------------------------------------------------------------------ the driver

    async def drive(self) -> None:
        """Run the engine on the clock until cancelled."""
        self._wake = asyncio.Event()
        alarm = Alarm(asyncio.get_running_loop(), self._wake, self.clock)
        try:
            while not self.stopped:
                busy = self._run_engine(self.sim_now())
                self._send_due(self.sim_now())
                self._end_requests()
                if busy:  # more engine work is due: let the handlers write, then go on
                    await asyncio.sleep(0)
                    continue
                delay = self._sleep_s()
                if delay is not None and delay <= ALARM_LEAD_S:  # (the last moments: spun, the handlers going on)
                    await asyncio.sleep(0)
                    continue
                self._wake.clear()
                alarm.at(None if delay is None else self.clock() + delay - ALARM_LEAD_S)
                try:
                    await asyncio.wait_for(self._wake.wait(),
                                           timeout=None if delay is None else delay + ALARM_BACKSTOP_S)
                except asyncio.TimeoutError:
                    pass
        finally:
            alarm.stop()

    def _run_engine(self, now: int) -> bool:
        """Run the engine's event times up to ``now`` (at most PROCESS_CHUNK of them); True
        if more are due."""
        engine = self.engine
        for _ in range(PROCESS_CHUNK):
            e = engine.next_event_us()
            if e is None or e > now:
                return False
            tokens, ended = engine.advance(e)
            arrival = engine.state.reqs["arrival_us"]
            for row, k, t in tokens:  # (a step's tokens go out oldest request first, as vLLM's FCFS batch)
                heapq.heappush(self._emissions, (t, int(arrival[row]), next(self._seq), row, k))
            self._ending.extend(ended)
        return True

    def _send_due(self, now: int) -> None:
        """Hand every token whose time has come to its request's handler."""
        wall = self.clock()
        reqs = self.engine.state.reqs
        while self._emissions and self._emissions[0][0] <= now:
            t, _, _, row, k = heapq.heappop(self._emissions)
            c = self.active.get(row)
            if c is None:
                continue
            m = self.metrics[c.model]
            due = self.wall_of(t)
            m.lateness.observe(max(wall - due, 0.0))
            c.sent_wall.append((due, wall))
            if k == 0:
                m.first_token(c.prompt_tokens, int(reqs["cached_tokens"][row]), (t - c.arrival_us) / 1e6)
            else:
                m.itl.observe((t - c.last_us) / 1e6)
            m.generation_tokens += 1
            c.last_us = t
            c.delivered += 1
            c.queue.put_nowait(k)

    def _end_requests(self) -> None:
        """Requests the engine ended whose tokens are all sent: their handlers finish, their
        rows are free."""
        if not self._ending:
            return
        engine = self.engine
        generated = engine.state.reqs["generated"]
        still = []
        for row in self._ending:
            c = self.active[row]
            if c.delivered < int(generated[row]):
                still.append(row)  # (its last tokens are not due yet)
                continue
            outcome = engine.outcome(row)
            m = self.metrics[c.model]
            if outcome == "completed":
                m.e2e.observe((c.last_us - c.arrival_us) / 1e6)
                m.finished["length"] += 1
            else:
                m.finished["rejected"] += 1
            c.ended = True
            c.queue.put_nowait(None if outcome == "completed" else outcome)
            del self.active[row]
            engine.release(row)
        self._ending = still

    async def close(self, grace_s: float) -> None:
        """Shut down: refuse new requests, let the open ones run ``grace_s`` wall seconds,
        then stop the engine and end every answer still open with a 503 (streams: an error
        event) -- so each handler returns on its own, before the HTTP server's own timeout
        would cancel it."""
        self.closing = True
        deadline = self.clock() + grace_s
        while self.active and self.clock() < deadline:
            await asyncio.sleep(min(0.05, max(deadline - self.clock(), 0.0)))
        self.stopped = True
        if self._wake is not None:
            self._wake.set()
        for c in self.active.values():
            if not c.ended:
                c.ended = True
                self.metrics[c.model].finished["abort"] += 1
                c.queue.put_nowait(SHUTDOWN)
        self.active.clear()

    def _sleep_s(self) -> float | None:
        """Wall seconds until the next event or token (None: until a request comes)."""
        times = [t for t in (self.engine.next_event_us(), self._emissions[0][0] if self._emissions else None)
                 if t is not None]
        if not times:
            return None
        return max(self.wall_of(min(times)) - self.clock(), 0.0)

    def models(self) -> dict:
        """``/v1/models``: each served model with what serves it (its first deployment's
        GPU, TP and latency model; its instances)."""
        setup = self.engine.setup
        inst = self.engine.state.inst
        data = []
        for k, name in enumerate(self.model_names):
            served = self.engine.models[k]
            dep = next((d for d in setup.deployments if d.served_model_name == served), None)
            lat, gpu, tp = (dep.latency, dep.hardware.name, dep.engine.tp) if dep is not None else \
                (setup.latency, setup.hardware.name, setup.config.engine.tp)
            instances = int(((inst["active"] != 0) & (inst["model"] == k)).sum())
            info = {"time_scale": self.time_scale, "instances": instances, "latency_model": lat.kind,
                    "alpha_coeffs": [float(x) for x in lat.alpha], "beta_coeffs": [float(x) for x in lat.beta],
                    "gpu": gpu, "tp": int(tp), "capacity": self.engine.capacity}
            data.append({"id": name, "object": "model", "created": 0, "owned_by": "blis-fast",
                         "max_model_len": self.engine.max_model_len, "blis_fast": info})
        return {"object": "list", "data": data}

    def model_index(self, body: dict) -> int:
        """The served model a request body asks for (``model``; absent: the first)."""
        name = body.get("model", self.model_names[0])
        if name not in self.model_names:
            raise ApiError(404, f"The model `{show(name, 80)}` does not exist; served: {', '.join(self.model_names)}",
                           "model", kind="NotFoundError")
        return self.model_names.index(name)


# ---------------------------------------------------------------------- the HTTP side


async def read_json(request) -> dict:
    """The request's JSON object body, at most MAX_BODY_BYTES."""
    size = request.headers.get("content-length")
    if size is not None and (not size.isdigit() or int(size) > MAX_BODY_BYTES):
        raise ApiError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes")
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise ApiError(413, f"the request body is larger than {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body



def check_common(server: LiveServer, body: dict, chat: bool) -> tuple[int, bool, bool]:
    """(max_tokens, stream, include usage) of a request body, checked."""
    limit = server.engine.max_model_len - 1
    max_tokens = _int_param(body, "max_tokens", None, 1, limit)
    if chat and body.get("max_completion_tokens") is not None:
        max_tokens = _int_param(body, "max_completion_tokens", None, 1, limit)
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    min_tokens = _int_param(body, "min_tokens", 0, 0, limit)
    if min_tokens > max_tokens:
        raise ApiError(400, f"min_tokens ({min_tokens}) must be at most max_tokens ({max_tokens})", "min_tokens")
    if _int_param(body, "n", 1, 1, 1) != 1:
        raise ApiError(400, "n must be 1", "n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "must be true or false", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "must be an object", "stream_options")
    return max_tokens, stream, bool(options.get("include_usage", False))



def outcome_error(outcome: str) -> ApiError:
    """The error answering a request the engine did not complete (``LiveEngine.outcome``) or
    the server ended (SHUTDOWN)."""
    if outcome == SHUTDOWN:
        return ApiError(503, "the server shut down before the request finished", kind="server_error")
    return ApiError(429 if outcome == "rejected" else 400, f"the engine {outcome} the request", kind="server_error")


async def finish(c: Completion):
    """Wait for every token of ``c``; None when it completed, else how it ended."""
    while True:
        item = await c.queue.get()
        if item is None or isinstance(item, str):
            return item



def usage_of(c: Completion) -> dict:
    return {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.delivered,
            "total_tokens": c.prompt_tokens + c.delivered}



async def sse(server: LiveServer, c: Completion, rid: str, created: int, chat: bool, usage: bool):
    """The server-sent events of a streamed answer: one chunk per token as it is sent."""
    kind = "chat.completion.chunk" if chat else "text_completion"

    def chunk(choices, **extra) -> str:
        return "data: " + json.dumps({"id": rid, "object": kind, "created": created, "model": server.model_names[c.model],
                                      "choices": choices, **extra}, separators=(",", ":")) + "\n\n"

    def token(reason) -> bytes:
        choice = ({"index": 0, "delta": {"content": TOKEN_TEXT}, "finish_reason": reason} if chat
                  else {"index": 0, "text": TOKEN_TEXT, "logprobs": None, "finish_reason": reason})
        return chunk([choice]).encode()

    if chat:
        yield chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
    # (every token's chunk but the last is the same: encoded once, the tokens of a step go out sooner)
    token_chunk, last_chunk = token(None), token("length")
    while True:
        item = await c.queue.get()
        if isinstance(item, str):  # rejected or dropped by the engine, or the server shut down
            yield "data: " + json.dumps(outcome_error(item).body()) + "\n\n"
            break
        if item is None:
            break
        yield last_chunk if item == c.max_tokens - 1 else token_chunk
    if usage:
        yield chunk([], usage=usage_of(c))
    yield "data: [DONE]\n\n"


def create_app(server: LiveServer):
    """The ASGI application of ``server`` (starlette)."""
    from starlette.applications import Starlette  # deferred: the serve extra
    from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse  # deferred: as above
    from starlette.routing import Route  # deferred: as above

    def error(e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    async def completions(request):
        return await answer(request, chat=False)

    async def chat_completions(request):
        return await answer(request, chat=True)

    async def answer(request, chat: bool):
        came = server.sim_now()  # (a request arrives when it comes in: reading and parsing its body take no engine time)
        try:
            body = await read_json(request)
            model = server.model_index(body)
            max_tokens, stream, usage = check_common(server, body, chat)
            ids = text_token_ids(chat_text(body.get("messages"))) if chat else prompt_ids(body.get("prompt"))
            c = server.submit(ids, max_tokens, model, came_us=came)
        except ApiError as e:
            return error(e)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{server.next_id()}"
        created = int(time.time())
        if stream:
            return StreamingResponse(sse(server, c, rid, created, chat, usage), media_type="text/event-stream")
        outcome = await finish(c)
        if outcome is not None:
            return error(outcome_error(outcome))
        text = TOKEN_TEXT * c.delivered
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                  if chat else {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"})
        return JSONResponse({"id": rid, "object": "chat.completion" if chat else "text_completion",
                             "created": created, "model": server.model_names[c.model], "choices": [choice],
                             "usage": usage_of(c)})

    async def models(request):
        return JSONResponse(server.models())

    async def health(request):
        return Response(status_code=200)

    async def metrics(request):
        return PlainTextResponse(render(server.metrics, server.engine.state),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        task = asyncio.get_running_loop().create_task(server.drive())
        try:
            with quiet_heap():  # (no collection pause stops the driver: blis_fast.serve.heap)
                yield
        finally:
            server.closing = True
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"]),
                             Route("/v1/chat/completions", chat_completions, methods=["POST"]),
                             Route("/v1/models", models, methods=["GET"]),
                             Route("/health", health, methods=["GET"]),
                             Route("/metrics", metrics, methods=["GET"])],
                     lifespan=lifespan)
