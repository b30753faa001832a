"""The observer's sockets (blis_fast/observe/receipt.py): bytes stamped when they come off
the socket, handed out one arrival at a time with their stamps; a request's first write
stamped; reading paused past the buffer bound; failures as httpcore's exceptions; and the
observer recording the stamps (its header says so), with a fallback when this httpx cannot
take the backend.  Clocks here are counters the test moves: the stamps are checked exactly."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpcore
import httpx
import pytest

from blis_fast.observe import ObserveSettings, observe
from blis_fast.observe.observer import Observer
from blis_fast.observe.receipt import MAX_BUFFERED_BYTES, StampingBackend, stamped_transport
from blis_fast.observe.stream import ON_PROCESSING, ON_RECEIPT
from blis_fast.workload.formats.observed import read_observed
from blis_fast.workload.formats.rich_trace import read_trace
from fake_openai_server import FakeServer
from test_observe import write_trace_csv


class Clock:
    def __init__(self, now: int = 0):
        self.now = now

    def __call__(self) -> int:
        return self.now


async def _until(condition, what: str, limit_s: float = 5.0) -> None:
    """Wait (bounded) for the event loop to have delivered something."""
    for _ in range(int(limit_s / 0.002)):
        if condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError(f"never: {what}")


async def _pair(clock):
    """A connection to a local server: (client StampedStream, the server's writer, the
    server's reader, the listening server)."""
    accepted: asyncio.Queue = asyncio.Queue()

    async def on_client(reader, writer):
        await accepted.put((reader, writer))

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stream = await StampingBackend(clock).connect_tcp("127.0.0.1", port, timeout=5)
    reader, writer = await asyncio.wait_for(accepted.get(), 5)
    return stream, writer, reader, server


def test_bytes_carry_the_time_they_arrived_not_the_time_they_are_read():
    async def main():
        clock = Clock(100)
        stream, writer, _, server = await _pair(clock)
        writer.write(b"first")
        await _until(lambda: stream._p.pieces, "the first piece")
        clock.now = 250
        writer.write(b"second piece")
        await _until(lambda: len(stream._p.pieces) == 2, "the second piece")
        clock.now = 999  # read long after both came: each keeps its own arrival
        assert await stream.read(65536) == b"first" and stream.last_received_us() == 100
        assert await stream.read(6) == b"second" and stream.received_us == 250  # (cut by max_bytes)
        clock.now = 1500
        assert await stream.read(65536) == b" piece" and stream.received_us == 250  # (the rest keeps its stamp)
        writer.close()
        assert await stream.read(65536) == b""  # the peer closed: end of stream
        await stream.aclose()
        server.close()

    asyncio.run(main())


def test_a_requests_first_write_is_stamped_and_reading_starts_the_next_request():
    async def main():
        clock = Clock(10)
        stream, writer, reader, server = await _pair(clock)
        await stream.write(b"GET / HTTP/1.1\r\n")
        clock.now = 20
        await stream.write(b"\r\n")  # (the same request: its first write's stamp stays)
        assert stream.sent_us == 10
        assert await reader.readexactly(18) == b"GET / HTTP/1.1\r\n\r\n"
        writer.write(b"HTTP/1.1 200 OK\r\n")
        await _until(lambda: stream._p.pieces, "the answer")
        await stream.read(65536)
        clock.now = 30
        await stream.write(b"GET /again")  # (a read came between: a new request)
        assert stream.sent_us == 30
        await stream.aclose()
        server.close()

    asyncio.run(main())


def test_reading_pauses_past_the_buffer_bound_and_resumes_as_it_drains():
    async def main():
        stream, writer, _, server = await _pair(Clock())
        p = stream._p
        writer.write(b"x" * (3 * MAX_BUFFERED_BYTES))
        await _until(lambda: p.reading_paused, "the pause")
        await asyncio.sleep(0.05)  # (paused: the buffer stops growing near the bound)
        assert MAX_BUFFERED_BYTES < p.buffered < MAX_BUFFERED_BYTES + (1 << 18)
        got = 0
        while got < 3 * MAX_BUFFERED_BYTES:
            got += len(await stream.read(65536, timeout=5))
        assert got == 3 * MAX_BUFFERED_BYTES and not p.reading_paused and p.buffered == 0
        await stream.aclose()
        server.close()

    asyncio.run(main())


def test_failures_are_httpcore_exceptions():
    async def main():
        stream, writer, _, server = await _pair(Clock())
        with pytest.raises(httpcore.ReadTimeout):
            await stream.read(100, timeout=0.02)
        assert stream.get_extra_info("is_readable") is False
        writer.write(b"z")
        await _until(lambda: stream.get_extra_info("is_readable"), "readable")
        assert stream.get_extra_info("server_addr")[0] == "127.0.0.1"
        transport = writer.transport
        transport.abort()  # a reset, not a close
        await _until(lambda: stream._p.closed, "the reset")
        assert await stream.read(100) == b"z"  # (what came before is still read)
        with pytest.raises(httpcore.WriteError):
            await stream.write(b"more")
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(httpcore.ConnectError):
            await StampingBackend(Clock()).connect_tcp("127.0.0.1", port, timeout=5)
        with pytest.raises(httpcore.ConnectError):
            await StampingBackend(Clock()).connect_unix_socket("/nowhere")

    asyncio.run(main())


BURST_LENGTH = 6  # prompt length for which the fake server writes the whole stream at once


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_the_observer_records_when_tokens_arrived(tmp_path, monkeypatch, api):
    """A stream written in one piece: its tokens arrived together, so they carry one time
    (stamped on parsing, each would carry its own: the clock here moves at every reading)."""
    ticks = iter(range(1, 10**9))
    monkeypatch.setattr(Observer, "now_us", lambda self: next(ticks))
    req = read_trace(write_trace_csv(tmp_path / "t.csv", [(0, BURST_LENGTH, 4), (0, 5, 3)]))[0]
    with FakeServer({BURST_LENGTH: "burst"}) as srv:
        observe(req, ObserveSettings(srv.url, api=api), tmp_path / "o.parquet")
    _, header, obs = read_observed(tmp_path / "o.parquet")
    assert header["observed"]["stamps"] == ON_RECEIPT
    burst, paced = list(obs.token_times(0)), list(obs.token_times(1))
    assert len(burst) == 4 and len(set(burst)) == 1 and burst[0] > obs["send_us"][0] >= 0
    assert len(paced) == 3 and paced == sorted(paced) and paced[0] > obs["send_us"][1] >= 0


def test_an_httpx_without_the_pool_falls_back_to_stamps_on_parsing(tmp_path, monkeypatch):
    class Wrapped:  # an httpx whose pool is some other object (the observer must still work through it)
        def __init__(self, pool):
            self.pool = pool

        def __getattr__(self, name):
            return getattr(self.pool, name)

    class Transport(httpx.AsyncHTTPTransport):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self._pool = Wrapped(self._pool)

    monkeypatch.setattr(httpx, "AsyncHTTPTransport", Transport)
    transport, stamps = stamped_transport(httpx.Limits(max_connections=2), Clock())
    assert stamps == ON_PROCESSING and isinstance(transport, httpx.AsyncHTTPTransport)
    ticks = iter(range(1, 10**9))
    monkeypatch.setattr(Observer, "now_us", lambda self: next(ticks))
    req = read_trace(write_trace_csv(tmp_path / "t.csv", [(0, BURST_LENGTH, 4)]))[0]
    with FakeServer({BURST_LENGTH: "burst"}) as srv:
        observe(req, ObserveSettings(srv.url), tmp_path / "o.parquet")
    _, header, obs = read_observed(tmp_path / "o.parquet")
    assert header["observed"]["stamps"] == ON_PROCESSING
    assert len(set(obs.token_times(0))) == 4  # each token: the moment it was parsed


def test_the_observer_runs_with_the_startup_heap_frozen(tmp_path, monkeypatch):
    """A full collection would stop the loop and every chunk meanwhile would be stamped late
    (blis_fast/serve/heap.py): the run holds the heap frozen, and gives it back after."""
    import gc

    seen = []
    run = Observer.run

    async def spying_run(self):
        seen.append(gc.get_freeze_count())
        await run(self)

    monkeypatch.setattr(Observer, "run", spying_run)
    req = read_trace(write_trace_csv(tmp_path / "t.csv", [(0, 5, 2)]))[0]
    with FakeServer() as srv:
        observe(req, ObserveSettings(srv.url), tmp_path / "o.parquet")
    assert seen[0] > 10_000 and gc.get_freeze_count() == 0


TLS_CERT = Path(__file__).with_name("tls_cert.pem")  # self-signed for 127.0.0.1, valid 100 years (a test key)
TLS_KEY = Path(__file__).with_name("tls_key.pem")


def test_an_https_endpoint_is_stamped_too_and_an_untrusted_one_is_an_httpx_error():
    """``start_tls`` upgrades the stamped connection: the stamps stay on receipt of the
    encrypted bytes; a certificate the client does not trust fails as httpx's ConnectError
    (which the observer records or reports in one line)."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(TLS_CERT, TLS_KEY)

    async def main():
        async def on_client(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(on_client, "127.0.0.1", 0, ssl=server_ctx)
        url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
        pool = httpcore.AsyncConnectionPool(ssl_context=ssl.create_default_context(cafile=str(TLS_CERT)),
                                            network_backend=StampingBackend(Clock(42)))
        async with pool:
            answer = await pool.request("GET", url)
        assert (answer.status, answer.content) == (200, b"ok")
        assert answer.extensions["network_stream"].received_us == 42
        transport, stamps = stamped_transport(httpx.Limits(max_connections=2), Clock())
        async with httpx.AsyncClient(transport=transport, timeout=5) as client:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.get(url)
        server.close()

    asyncio.run(main())
