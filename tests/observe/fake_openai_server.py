"""A small fault-injecting OpenAI-style server for the observer's tests: a starlette app on
uvicorn in a thread, on 127.0.0.1 and a free port.

What it does with a request depends on the request's prompt length (token ids, or for chat
the text's bytes / 4), so a test picks each request's fault by its trace row's
``prompt_tokens``: ``FakeServer(modes={7: "http_429", ...})`` -- any other length is served
normally.  Modes:

  ok            one chunk per token (``max_tokens`` of them), the last with finish_reason
                "length", then a ``usage`` chunk and ``data: [DONE]``
  http_429      HTTP 429 with an OpenAI error body ("rate limited")
  http_500      HTTP 500 with an OpenAI error body ("engine crashed")
  slow          a token every SLOW_GAP_S (beyond the tests' timeout)
  drop          DROP_AFTER tokens, then the connection is closed mid-stream
  malformed     one token, then a data line that is not JSON
  stream_error  one token, then ``data: {"error": ...}``
  flood         3 * max_tokens + 20 token chunks (more than the observer accepts)
  burst         served normally, but the whole stream in one write (its tokens arrive together)
  long_line     one token, then a line longer than the observer's line limit
  interrupt     served normally, after a Ctrl-C in the test process's main thread
                (``_thread.interrupt_main``: the observer's Ctrl-C path, in process)

Every request's body is kept in ``server.bodies`` (in arrival order).  Every loop is bounded
by the request's max_tokens; a slow stream stops when the client goes.
"""

from __future__ import annotations

import _thread
import asyncio
import json
import math
import threading
import time

SLOW_GAP_S = 0.4
DROP_AFTER = 2
MODEL = "fake-model"


def _error(status: int, message: str):
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                   "code": status}}, status_code=status)


def _chunk(api: str, text: str, finish) -> bytes:
    if api == "chat":
        choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text, "finish_reason": finish}
    return b"data: " + json.dumps({"id": "x", "object": "chunk", "model": MODEL, "choices": [choice]}).encode() + b"\n\n"


class FakeServer:
    def __init__(self, modes: dict[int, str] | None = None, models: list[str] | None = None, chat_role_chunk=True,
                 models_body: bytes | None = None, models_delay_s: float = 0.0):
        self.modes = dict(modes or {})
        self.models_body = models_body  # GET /v1/models answers these bytes instead, when given
        self.models_delay_s = models_delay_s  # ... after this long
        self.models = models or [MODEL]
        self.chat_role_chunk = chat_role_chunk
        self.bodies: list[dict] = []
        self.app = self._app()

    def _app(self):
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse, StreamingResponse
        from starlette.routing import Route

        async def models(request):
            await asyncio.sleep(self.models_delay_s)
            if self.models_body is not None:
                from starlette.responses import Response

                return Response(self.models_body, media_type="application/json")
            return JSONResponse({"object": "list", "data": [
                {"id": m, "object": "model", "owned_by": "fake", "blis_fast": {"time_scale": 1.0}}
                for m in self.models]})

        async def complete(request):
            api = "chat" if request.url.path.endswith("chat/completions") else "completions"
            body = await request.json()
            self.bodies.append(body)
            if body.get("model") not in self.models:
                return _error(404, f"The model `{body.get('model')}` does not exist.")
            if api == "chat":
                length = math.ceil(len(body["messages"][0]["content"].encode()) / 4)
            else:
                length = len(body["prompt"])
            n = int(body["max_tokens"])
            mode = self.modes.get(length, "ok")
            if mode == "http_429":
                return _error(429, "rate limited")
            if mode == "http_500":
                return _error(500, "engine crashed")
            if mode == "interrupt":
                _thread.interrupt_main()

            async def stream():
                if api == "chat" and self.chat_role_chunk:
                    yield b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                               "finish_reason": None}]}).encode() + b"\n\n"
                if mode == "flood":
                    for _ in range(3 * n + 20):
                        yield _chunk(api, " t", None)
                    return
                if mode == "burst":
                    usage = {"prompt_tokens": length, "completion_tokens": n, "total_tokens": length + n}
                    yield b"".join([_chunk(api, " t", "length" if i == n - 1 else None) for i in range(n)]
                                   + [b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n",
                                      b"data: [DONE]\n\n"])
                    return
                if mode == "long_line":
                    yield _chunk(api, " t", None)
                    yield b"data: " + b"x" * (1 << 20) + b"x"
                    return
                for i in range(n):
                    if mode == "slow":
                        await asyncio.sleep(SLOW_GAP_S)
                    if mode == "drop" and i == DROP_AFTER:
                        raise ConnectionAbortedError("dropped on purpose")
                    if mode == "malformed" and i == 1:
                        yield b"data: {not json\n\n"
                        return
                    if mode == "stream_error" and i == 1:
                        yield b'data: {"error": {"message": "out of KV blocks", "code": 500}}\n\n'
                        return
                    yield _chunk(api, " t", "length" if i == n - 1 else None)
                yield b": keep-alive comment\n\n"
                usage = {"prompt_tokens": length, "completion_tokens": n, "total_tokens": length + n}
                yield b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"
                yield b"data: [DONE]\n\n"

            return StreamingResponse(stream(), media_type="text/event-stream")

        return Starlette(routes=[Route("/v1/models", models), Route("/v1/completions", complete, methods=["POST"]),
                                 Route("/v1/chat/completions", complete, methods=["POST"])])

    def __enter__(self) -> "FakeServer":
        import uvicorn

        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="critical", lifespan="off",
                                access_log=False)
        self.server = uvicorn.Server(config)
        self.server.install_signal_handlers = lambda: None  # (a thread: the test process keeps its own)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the fake server did not start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
