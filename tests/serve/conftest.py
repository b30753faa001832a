"""A live blis-fast server on 127.0.0.1 for the tests of tests/serve (uvicorn in a thread,
on a free port; stopped at the end of the test)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(app, timeout_s: float = 30.0):
    """Serve ``app`` on a free port of 127.0.0.1 while the block runs; yields the base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout_s)


@pytest.fixture
def serve_app():
    """``serve_app(time_scale=..., capacity=..., **settings)`` -> (base URL, LiveServer) of a
    running server."""
    from blis_fast.run.api import as_config
    from blis_fast.run.resolve import resolve
    from blis_fast.serve.engine import LiveEngine
    from blis_fast.serve.server import LiveServer, create_app

    stack = contextlib.ExitStack()

    def start(time_scale=20.0, capacity=64, max_model_len=2048, **settings):
        setup = resolve(as_config(None, {"num_instances": 1, **settings}))
        server = LiveServer(LiveEngine(setup, capacity=capacity, max_model_len=max_model_len),
                            setup.served_models[0], time_scale=time_scale)
        url = stack.enter_context(running(create_app(server)))
        return url, server

    with stack:
        yield start
