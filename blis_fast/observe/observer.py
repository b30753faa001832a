"""The observer: replays a workload's requests against an OpenAI-compatible endpoint and
records what it saw (docs/observe.md).

``observe(requests, settings, out)`` first asks the server for its models (``GET
/v1/models``: an unreachable endpoint or a model it does not serve is a ConfigError before
any request is sent), then sends request k at wall time ``arrival_us[k] / K`` after its
start (open loop) -- a closed-loop follower (arrival -1) when the previous turn ends plus
that turn's ``follow_delay_us / K`` -- at most ``concurrency`` in flight (the others wait;
their send time is when they go), each bounded by ``timeout_s``.  Every outcome -- an HTTP
error, a timeout, a dropped connection, a malformed stream -- is recorded, never raised.
The recording (``blis_fast.workload.formats.observed``) is written when all requests
have ended, or -- on KeyboardInterrupt (Ctrl-C, SIGTERM) -- with what the observer has, the
requests not sent marked ``"not sent"``; the interrupt then propagates.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from blis_fast.config.validate import MAX_TIME_US, show
from blis_fast.errors import ConfigError
from blis_fast.observe.prompts import PromptBuilder
from blis_fast.observe.settings import ObserveSettings
from blis_fast.observe.stream import (MAX_ERROR_BODY_BYTES, ON_PROCESSING, Malformed, Record, StreamError,
                                      openai_error_message, read_capped, request_body, sse_lines, take_event)
from blis_fast.observe.summary import notices, summarize
from blis_fast.serve.heap import quiet_heap
from blis_fast.version import __version__
from blis_fast.workload.formats.observed import Observation, one_line, write_observed
from blis_fast.workload.generate import Requests

MODELS_TIMEOUT_S = 30.0  # GET /v1/models at most (or --timeout-s if shorter)
MAX_MODELS_BYTES = 1 << 20  # of the /v1/models answer
MAX_HEADER_DEPTH = 12  # nesting kept of the server's /v1/models answer in the header
NOT_SENT = "not sent"
NEVER_RELEASED = "not sent: no earlier turn of its session was sent"


@dataclass
class ObserveResult:
    path: Path
    summary: dict
    notices: list[str]  # one-line warnings (blis_fast.observe.summary.notices)


def _plain(value, depth: int = 0):
    """A JSON value as the header keeps it: nesting cut at MAX_HEADER_DEPTH (the server's
    answer is untrusted; the header is YAML)."""
    if depth >= MAX_HEADER_DEPTH:
        return show(value)
    if isinstance(value, dict):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, depth + 1) for v in value]
    return value


def _connection_reason(exc: Exception) -> str:
    return one_line(str(exc) or type(exc).__name__)


class Observer:
    """One observation's state: the records (one per request) and the schedule."""

    def __init__(self, requests: Requests, settings: ObserveSettings, on_done: Callable[[], None] | None = None):
        self.requests = requests
        self.settings = settings
        self.records = [Record() for _ in range(len(requests))]
        self.prompts = PromptBuilder(requests)
        self.on_done = on_done or (lambda: None)
        self.server_models: list = []
        self.model = settings.model
        self.interrupted = False
        self.stamps = ON_PROCESSING
        self.t0_ns = 0
        arrival, nxt = requests["arrival_us"], requests["next_request"]
        # the rows that will be sent: the open-loop ones and the followers their turns release
        self.open_rows = np.flatnonzero(arrival >= 0)[np.argsort(arrival[arrival >= 0], kind="stable")]
        reached = np.zeros(len(requests), bool)
        reached[self.open_rows] = True
        for k in self.open_rows:
            j = int(nxt[k])
            while j >= 0 and arrival[j] < 0 and not reached[j]:
                reached[j] = True
                j = int(nxt[j])
        self.reached = reached
        self.expected = int(reached.sum())
        self.finished = 0

    # ------------------------------------------------------------------ clock

    def now_us(self) -> int:
        """µs since the start on the server's timeline (wall time times K)."""
        us = (time.perf_counter_ns() - self.t0_ns) / 1000.0 * self.settings.time_scale
        return int(min(max(us, 0.0), MAX_TIME_US))

    def _wall_s(self, server_us: float) -> float:
        return server_us / 1e6 / self.settings.time_scale

    async def _sleep_until(self, due_s: float) -> None:
        """Sleep until ``due_s`` wall seconds after the start (never earlier: an event loop's
        timer may fire up to its resolution early -- uvloop's is 1 ms)."""
        while (wait := due_s - (time.perf_counter_ns() - self.t0_ns) / 1e9) > 0:
            await asyncio.sleep(wait)

    # ------------------------------------------------------------------ the server

    async def check_server(self, client) -> None:
        """GET /v1/models; ConfigError naming --endpoint or --model if the server cannot be
        reached, does not list models, or does not serve a model the requests ask for."""
        import httpx  # deferred: httpx (the serve extra)

        url = f"{self.settings.endpoint}/v1/models"
        try:
            async with asyncio.timeout(min(self.settings.timeout_s, MODELS_TIMEOUT_S)):
                async with client.stream("GET", url) as resp:
                    body = await read_capped(resp, MAX_MODELS_BYTES)
                    status = resp.status_code
        except TimeoutError:
            raise ConfigError("--endpoint", f"{show(url)} did not answer within "
                                            f"{min(self.settings.timeout_s, MODELS_TIMEOUT_S):g} s") from None
        except httpx.HTTPError as e:
            raise ConfigError("--endpoint", f"cannot reach {show(url)}: {_connection_reason(e)}") from None
        if status != 200:
            raise ConfigError("--endpoint", f"GET {show(url)} answered HTTP {status}: {openai_error_message(body)}")
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            data = None
        listed = data.get("data") if isinstance(data, dict) else None
        if not isinstance(listed, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str)
                                                   for m in listed):
            raise ConfigError("--endpoint", f"GET {show(url)} did not answer an OpenAI model list")
        self.server_models = _plain(listed)
        served = [m["id"] for m in listed]
        if self.model is None:
            if not served:
                raise ConfigError("--endpoint", f"{show(self.settings.endpoint)} serves no model")
            self.model = served[0]
        asked = {self.model}
        if self.requests.model is not None:
            asked |= {str(m) for m in self.requests.model if m}
        for m in sorted(asked):
            if m not in served:
                raise ConfigError("--model", f"{show(m)} is not served by {show(self.settings.endpoint)} "
                                             f"(it serves {show(', '.join(served), 200)})")

    # ------------------------------------------------------------------ one request

    def _model_of(self, k: int) -> str:
        if self.requests.model is not None and self.requests.model[k]:
            return str(self.requests.model[k])
        return self.model

    async def _exchange(self, client, k: int, rec: Record) -> None:
        """Send request k and read its stream into ``rec`` (errors recorded by the caller)."""
        body = request_body(self.settings.api, self._model_of(k), self.prompts.prompt_ids(k),
                            int(self.requests["output_len"][k]))
        path = "/v1/chat/completions" if self.settings.api == "chat" else "/v1/completions"
        max_chunks = 2 * body["max_tokens"] + 16  # a server sending more is not streaming tokens
        content = json.dumps(body, separators=(",", ":")).encode()  # (encoded before the send time is taken)
        rec.send_us = self.now_us()
        async with client.stream("POST", self.settings.endpoint + path, content=content,
                                 headers={"content-type": "application/json"}) as resp:
            rec.status = resp.status_code
            # times of the socket (blis_fast.observe.receipt), else of parsing (ON_PROCESSING)
            stamp = self.now_us
            stream = resp.extensions.get("network_stream")
            if getattr(stream, "last_received_us", None) is not None:
                rec.send_us = max(stream.sent_us, rec.send_us)  # (this request's first write, after httpx built it)
                stamp = stream.last_received_us
            if resp.status_code != 200:
                message = openai_error_message(await read_capped(resp, MAX_ERROR_BODY_BYTES))
                rec.error = f"HTTP {resp.status_code}: {message}"
                return
            async for line in sse_lines(resp):
                if take_event(line, rec, self.settings.api, stamp):
                    return
                if len(rec.token_times) > max_chunks:
                    raise Malformed(f"more than {max_chunks} token chunks for max_tokens {body['max_tokens']}")
            rec.error = f"stream ended without [DONE] after {len(rec.token_times)} tokens"

    async def _request(self, client, slots: asyncio.Semaphore, k: int, delay_s: float = 0.0) -> None:
        import httpx  # deferred: httpx (the serve extra)

        rec = self.records[k]
        try:
            if delay_s > 0:
                await self._sleep_until((time.perf_counter_ns() - self.t0_ns) / 1e9 + delay_s)
            async with slots:
                try:
                    async with asyncio.timeout(self.settings.timeout_s):
                        await self._exchange(client, k, rec)
                except TimeoutError:
                    rec.timed_out = True
                    rec.error = f"timed out after {self.settings.timeout_s:g} s ({len(rec.token_times)} tokens)"
                except Malformed as e:
                    rec.error = f"malformed SSE after {len(rec.token_times)} tokens: {one_line(e)}"
                except StreamError as e:
                    rec.error = f"stream error after {len(rec.token_times)} tokens: {one_line(e)}"
                except httpx.HTTPError as e:
                    if rec.status:  # the headers came: the connection went mid-stream
                        rec.error = f"connection dropped after {len(rec.token_times)} tokens"
                    else:
                        rec.error = f"connection failed: {_connection_reason(e)}"
                except Exception as e:  # noqa: BLE001 -- whatever one exchange raises is its outcome, never the run's
                    rec.error = f"request failed after {len(rec.token_times)} tokens: {type(e).__name__}: " \
                                f"{_connection_reason(e)}"
        except asyncio.CancelledError:
            if rec.send_us >= 0:
                rec.error = f"interrupted after {len(rec.token_times)} tokens"
            raise
        rec.finished = True
        self._ended(client, slots, k)

    def _ended(self, client, slots: asyncio.Semaphore, k: int) -> None:
        """Request k is over: count it, release its next turn (a closed-loop follower)."""
        self.finished += 1
        self.on_done()
        j = int(self.requests["next_request"][k])
        if j >= 0 and self.requests["arrival_us"][j] < 0 and self.reached[j]:
            delay = self._wall_s(float(self.requests["follow_delay_us"][k]))
            self._spawn(self._request(client, slots, j, delay))
        if self.finished >= self.expected:
            self.all_done.set()

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # ------------------------------------------------------------------ the run

    async def run(self) -> None:
        """Check the server, then send every request on its schedule; returns when all
        have ended.  Cancelled (Ctrl-C), it cancels the requests in flight first."""
        import httpx  # deferred: httpx (the serve extra)

        limits = httpx.Limits(max_connections=self.settings.concurrency,
                              max_keepalive_connections=self.settings.concurrency)
        # (asyncio.timeout bounds each request; httpx's own timeout is a safety net behind it)
        timeout = httpx.Timeout(self.settings.timeout_s + 5.0)
        self.tasks: set[asyncio.Task] = set()
        self.all_done = asyncio.Event()
        from blis_fast.observe.receipt import stamped_transport  # deferred: httpcore (the serve extra)

        transport, self.stamps = stamped_transport(limits, self.now_us)
        async with httpx.AsyncClient(transport=transport, timeout=timeout, trust_env=False) as client:
            try:
                await self.check_server(client)
                slots = asyncio.Semaphore(self.settings.concurrency)
                self.t0_ns = time.perf_counter_ns()
                for _ in range(len(self.records) - self.expected):  # never released: over already
                    self.on_done()
                if self.expected == 0:
                    self.all_done.set()
                for k in self.open_rows:
                    await self._sleep_until(self._wall_s(float(self.requests["arrival_us"][k])))
                    self._spawn(self._request(client, slots, int(k)))
                await self.all_done.wait()
            finally:
                for task in list(self.tasks):
                    task.cancel()
                if self.tasks:
                    await asyncio.gather(*self.tasks, return_exceptions=True)

    def observation(self) -> Observation:
        """The records as the recording's columns; requests never sent: ``not sent``."""
        n = len(self.records)
        cols = {name: np.empty(n, dt) for name, dt in (("send_us", np.int64), ("status", np.int32),
                                                         ("first_token_us", np.int64), ("last_token_us", np.int64),
                                                         ("completion_tokens", np.int64),
                                                         ("reported_prompt_tokens", np.int64))}
        cols["timed_out"] = np.zeros(n, bool)
        errors, times = [], []
        for k, rec in enumerate(self.records):
            if rec.send_us < 0:
                error = NOT_SENT if self.reached[k] else NEVER_RELEASED
                rec = Record()
            else:
                error = rec.error if rec.finished or rec.error else f"interrupted after {len(rec.token_times)} tokens"
            t = rec.token_times
            cols["send_us"][k] = rec.send_us
            cols["status"][k] = rec.status
            cols["first_token_us"][k] = t[0] if t else -1
            cols["last_token_us"][k] = t[-1] if t else -1
            cols["completion_tokens"][k] = rec.completion_tokens
            cols["reported_prompt_tokens"][k] = rec.prompt_tokens
            cols["timed_out"][k] = rec.timed_out
            errors.append(error)
            times.append(t)
        return Observation.from_lists(cols, errors, times)

    def header(self) -> dict:
        """The header's ``observed`` mapping: how the recording was made."""
        s = self.settings
        return {"endpoint": s.endpoint, "model": self.model, "api": s.api, "time_scale": s.time_scale,
                "concurrency": s.concurrency, "timeout_s": s.timeout_s, "server_models": self.server_models,
                "server_flags": list(s.server_flags), "interrupted": self.interrupted,
                "observer": f"blis-fast {__version__}", "stamps": self.stamps}


def _fast_loop_factory():
    """uvloop's event loop when installed (the serve extra's uvicorn[standard] brings it):
    the observer reads every stream's chunks in one process, and a chunk read late is a
    token time recorded late -- uvloop's loop does that work in about half the time."""
    try:
        import uvloop  # deferred: optional
    except ImportError:
        return None
    return uvloop.new_event_loop


def observe(requests: Requests, settings: ObserveSettings, out: str | Path,
            on_done: Callable[[], None] | None = None) -> ObserveResult:
    """Replay ``requests`` against ``settings.endpoint`` and write the recording to ``out``
    (see the module docstring); ``on_done`` is called as each request ends.  On
    KeyboardInterrupt the recording is written with what was seen, then the interrupt
    propagates.  Returns the path, ``summarize``'s summary and ``notices``' warnings."""
    import pyarrow.parquet  # noqa: F401  # deferred: pyarrow -- loaded now so a Ctrl-C's write is quick

    observer = Observer(requests, settings, on_done)
    try:
        with asyncio.Runner(loop_factory=_fast_loop_factory()) as runner, quiet_heap():
            runner.run(observer.run())  # (quiet_heap: no collection pause delays a token's stamp)
    except KeyboardInterrupt:
        observer.interrupted = True
        write_observed(out, requests, observer.observation(), observer.header())
        raise
    obs = observer.observation()
    header = observer.header()
    path = write_observed(out, requests, obs, header)
    return ObserveResult(path, summarize(obs), notices(obs, header))


def first_requests(requests: Requests, n: int) -> Requests:
    """The first ``n`` requests of a table (as ``num_requests`` keeps them): a link to a
    later row is cut, like the spec's ``num_requests`` cuts the last session."""
    if n >= len(requests):
        return requests
    cols = {k: v[:n].copy() for k, v in requests.columns.items()}
    cut = cols["next_request"] >= n
    cols["next_request"][cut] = -1
    cols["follow_delay_us"][cut] = 0
    token_ids = None
    if requests.token_ids is not None:
        token_ids = {}
        for what in ("prompt", "output"):
            if what in requests.token_ids:
                off = requests.token_ids[f"{what}_offsets"][:n + 1]
                token_ids[what], token_ids[f"{what}_offsets"] = requests.token_ids[what][:off[-1]], off
    model = requests.model[:n] if requests.model is not None else None
    return replace(requests, columns=cols, token_ids=token_ids, model=model)
