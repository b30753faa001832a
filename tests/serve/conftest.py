"""A live blis-fast server on 127.0.0.1 for the tests of tests/serve (``live_server``)."""

from __future__ import annotations

import contextlib

import pytest

from live_server import running

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")


@pytest.fixture
def serve_app():
    """``serve_app(time_scale=..., capacity=..., **settings)`` -> (base URL, LiveServer) of a
    running server."""
    from blis_fast.run.api import as_config
    from blis_fast.run.resolve import resolve
    from blis_fast.serve.engine import LiveEngine
    from blis_fast.serve.server import LiveServer, create_app

    stack = contextlib.ExitStack()

    def start(time_scale=20.0, capacity=64, max_model_len=2048, config=None, **settings):
        setup = resolve(as_config(config, {"num_instances": 1, **settings} if config is None else settings))
        server = LiveServer(LiveEngine(setup, capacity=capacity, max_model_len=max_model_len), time_scale=time_scale)
        url = stack.enter_context(running(create_app(server)))
        return url, server

    with stack:
        yield start
