"""Serving an ASGI app on 127.0.0.1 for a test: a free port, uvicorn in a thread, stopped
when the block ends (tests/serve; the observer's tests use it too)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time


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


def serve_process(*flags: str, timeout_s: float = 120.0) -> tuple[subprocess.Popen, str]:
    """A ``blis-fast serve`` process (with ``flags``) on a free port of 127.0.0.1 once its
    ``/health`` answers: (the process -- Ctrl-C as in a terminal, stdout and stderr piped --,
    its base URL)."""
    import httpx

    from builders import default_sigint

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "blis_fast.cli", "serve", "--port", str(port), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the server did not start: {proc.communicate()[1][-2000:]}")
        time.sleep(0.1)
