"""``blis-fast serve`` from the command line: bad settings are one line (exit 2) before
anything listens, and a fresh server process answers, then stops on Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import pytest

from builders import ROOT, default_sigint, expect_cli_error
from live_server import free_port


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
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "blis_fast.cli", "serve", "--port", str(port), "--time-scale", "10"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.1)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "hello", "max_tokens": 3},
                       timeout=30)
        assert r.json()["usage"]["completion_tokens"] == 3
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 130), err
    assert "serving meta-llama/llama-3.1-8b-instruct on http://127.0.0.1" in err and "Traceback" not in err
