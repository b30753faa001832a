"""Distributed evaluation on a Dask LocalCluster (worker processes: the prepared scenario
and the compiled candidates travel pickled) equals local evaluation byte for byte, from
the API (executor=) and the CLI (--dask-scheduler)."""

from __future__ import annotations

import contextlib
import importlib.util
import random
import socket
import struct
import threading
import time

import pyarrow.parquet as pq
import pytest

from builders import expect_cli_error, run_cli, write
from test_evaluate_many import BAD, GOOD, OBJECTIVES, SCENARIOS, parquet_bytes

from blis_fast.batch import evaluate_many

# in the test extra (CI runs these); found, not imported, at collection (dask takes ~1 s to import)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="dask.distributed not installed")


@pytest.mark.slow
def test_local_cluster_equals_local(capsys, tmp_path):
    from dask.distributed import Client, LocalCluster

    cands = {"good": GOOD, "rr": {"routing": "round-robin"}, "nan": BAD["nan"]}
    local = evaluate_many(cands, SCENARIOS, objectives=OBJECTIVES, workers=1).table
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        remote = evaluate_many(cands, SCENARIOS, objectives=OBJECTIVES, executor=client.get_executor()).table
        assert parquet_bytes(remote) == parquet_bytes(local)
        pol = tmp_path / "pol"
        pol.mkdir()
        write(pol, "good.yaml", GOOD)
        scen = write(tmp_path, "s.yaml", {"objectives": OBJECTIVES, "scenarios": SCENARIOS})
        for out, extra in ((tmp_path / "local.parquet", ["--workers", "1"]),
                           (tmp_path / "dask.parquet", ["--dask-scheduler", cluster.scheduler_address])):
            code, _, err = run_cli(capsys, "evaluate", "--policies", pol, "--scenarios", scen, "--out", out, *extra)
            assert code == 0, err
        assert pq.read_table(tmp_path / "dask.parquet").equals(pq.read_table(tmp_path / "local.parquet"))


@pytest.mark.slow  # a closed port: refused at once (a fresh cluster's start-up is what is slow elsewhere)
def test_unreachable_scheduler_is_one_line(capsys, tmp_path):
    pol = tmp_path / "pol"
    pol.mkdir()
    write(pol, "good.yaml", GOOD)
    scen = write(tmp_path, "s.yaml", {"scenarios": SCENARIOS[:1]})
    expect_cli_error(capsys, "evaluate", "--policies", pol, "--scenarios", scen, "--out", tmp_path / "r.parquet",
                     "--dask-scheduler", "tcp://127.0.0.1:9", needles=["--dask-scheduler", "127.0.0.1:9"])


# ----------------------------------------------------------------------------- hostile listeners on 127.0.0.1


@contextlib.contextmanager
def listener(answer: bytes | None, lifetime_s: float = 20.0):
    """A TCP listener on 127.0.0.1 (a free port) in a thread for at most ``lifetime_s``:
    it accepts every connection and sends ``answer`` (None: never a byte).  Yields its
    address; every socket is closed on exit."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    accepted, stop = [], threading.Event()

    def serve():
        end = time.monotonic() + lifetime_s
        while not stop.is_set() and time.monotonic() < end:
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(conn)
            if answer is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for s in [*accepted, server]:
            s.close()


SILENT = None
JUNK = {  # what a junk-answering listener sends: random bytes, a huge length, a plausible length then junk
    "random": random.Random(7).randbytes(4096),
    "huge length": struct.pack("<Q", 2**62) + b"x" * 64,
    "gigabyte length": struct.pack("<Q", 2**30),
    "length then junk": struct.pack("<Q", 64) + random.Random(8).randbytes(64),
    "length then silence": struct.pack("<Q", 64) + b"\x00" * 10,
}


@pytest.mark.parametrize("answer", [SILENT, *JUNK.values()], ids=["silent", *JUNK])
def test_hostile_listener_is_one_line_within_the_timeout(capsys, tmp_path, monkeypatch, answer):
    """A listener that accepts and never answers, or answers junk: one error line naming
    --dask-scheduler once the timeout (here 1 s, BLIS_FAST_DASK_TIMEOUT_S) is over, never
    a traceback or a hang."""
    monkeypatch.setenv("BLIS_FAST_DASK_TIMEOUT_S", "1")
    pol = tmp_path / "pol"
    pol.mkdir()
    write(pol, "good.yaml", GOOD)
    scen = write(tmp_path, "s.yaml", {"scenarios": SCENARIOS[:1]})
    with listener(answer) as address:
        t0 = time.monotonic()
        expect_cli_error(capsys, "evaluate", "--policies", pol, "--scenarios", scen, "--out", tmp_path / "r.parquet",
                         "--dask-scheduler", address, needles=["--dask-scheduler", address])
        assert time.monotonic() - t0 < 8  # a safety net: the timeout is 1 s
    assert not (tmp_path / "r.parquet").exists()


def test_connect_reaches_a_real_scheduler_over_tcp():
    """The probe reads a real scheduler's handshake: the client connects (a scheduler on
    threads, tcp, in this process)."""
    from dask.distributed import LocalCluster

    from blis_fast.batch.scheduler import connect

    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", dashboard_address=None) as cluster:
        client = connect(cluster.scheduler_address, timeout=10)
        try:
            assert client.scheduler_info()["address"] == cluster.scheduler_address
        finally:
            client.close()


def test_tls_without_dask_tls_settings_is_one_line(capsys, tmp_path):
    pol = tmp_path / "pol"
    pol.mkdir()
    write(pol, "good.yaml", GOOD)
    scen = write(tmp_path, "s.yaml", {"scenarios": SCENARIOS[:1]})
    with listener(SILENT) as address:
        expect_cli_error(capsys, "evaluate", "--policies", pol, "--scenarios", scen, "--out", tmp_path / "r.parquet",
                         "--dask-scheduler", address.replace("tcp://", "tls://"),
                         needles=["--dask-scheduler", "TLS settings"])
