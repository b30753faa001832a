"""``blis-fast serve`` from the command line: bad settings are one line (exit 2) before
anything listens, and a fresh server process answers, then stops on Ctrl-C."""

from __future__ import annotations

import signal
import sys
import time

import httpx
import pytest

from builders import ROOT, expect_cli_error
from live_server import serve_process


@pytest.mark.parametrize("args, needles", [
    (("--port", "0"), ("--port", "1")),
    (("--port", "70000"), ("--port",)),
    (("--time-scale", "0"), ("--time-scale",)),
    (("--time-scale", "nan"), ("--time-scale",)),
    (("--capacity", "0"), ("--capacity",)),
    (("--max-model-len", "100000000"), ("--max-model-len",)),
    (("--shutdown-timeout-s", "-1"), ("--shutdown-timeout-s",)),
    (("--flow-control", "concurrency"), ("flow control",)),
    (("--config", str(ROOT / "configs/examples/two-models.yaml"), "--served-model-name", "x"),
     ("--served-model-name", "one served model")),
    (("--rate", "5"), ("--rate",)),  # (a workload setting: the clients bring the requests)
])
def test_bad_settings_are_one_line(capsys, args, needles):
    expect_cli_error(capsys, "serve", *args, needles=needles)


def test_without_the_extra_it_says_how_to_install_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    expect_cli_error(capsys, "serve", needles=("pip install", "blis-fast[serve]"))


@pytest.mark.slow
def test_a_server_process_answers_and_stops_on_ctrl_c():
    proc, url = serve_process("--time-scale", "10")
    try:
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "hello", "max_tokens": 3},
                       timeout=30)
        assert r.json()["usage"]["completion_tokens"] == 3
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 130), err
    assert "serving meta-llama/llama-3.1-8b-instruct on http://127.0.0.1" in err and "Traceback" not in err


@pytest.mark.slow
def test_ctrl_c_ends_open_streams_after_the_grace_with_an_error_event():
    """40 streams that would run for minutes: Ctrl-C lets them run --shutdown-timeout-s more,
    then each ends with a 503 error event, and the process exits -- no handler cancelled
    with a traceback, however busy the server."""
    import asyncio
    import json

    proc, url = serve_process("--time-scale", "1", "--shutdown-timeout-s", "1")
    try:
        async def one(client):
            lines = []
            async with client.stream("POST", f"{url}/v1/completions",
                                     json={"prompt": "x" * 200, "max_tokens": 8000, "stream": True}) as r:
                async for line in r.aiter_lines():
                    lines.append(line)
            return lines

        async def main():
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=64)) as client:
                streams = [asyncio.create_task(one(client)) for _ in range(40)]
                await asyncio.sleep(2)
                start = time.monotonic()
                proc.send_signal(signal.SIGINT)
                results = await asyncio.gather(*streams)
                return results, time.monotonic() - start

        results, took = asyncio.run(main())
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert 1.0 <= took < 5.0
    for lines in results:
        events = [json.loads(x[6:]) for x in lines if x.startswith("data: {")]
        assert len(events) > 10 and events[-1]["error"]["code"] == 503 and "shut down" in events[-1]["error"]["message"]
    assert proc.returncode == 130 and "Traceback" not in err and "Exception" not in err, err
