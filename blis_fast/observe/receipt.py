"""The observer's sockets: an httpcore network backend that stamps bytes when they arrive.

A server emits the tokens of one engine step at the same moment, so a step's chunks for N
streams reach the observer together.  Timed where the observer reads them -- after httpx,
httpcore and h11 have carried each chunk up to the SSE parser, about 0.1 ms apiece -- the
N-th stream's token looks N x 0.1 ms late, a delay that grows with the load and that no
simulator models (docs/calibrate.md, "Precision, over real sockets").  Here the event loop's
``data_received`` callback stamps every piece of bytes as it comes off the socket (all the
ready sockets are drained before any task runs), and ``read`` hands the pieces out one at a
time, so the stream knows when the bytes it is parsing arrived.  The first write after a
read is stamped too: the moment a request's bytes were handed to the socket.

The same stamps serve any server (vLLM, a gateway): only where the time is taken changes.
What is buffered is bounded (reading pauses past MAX_BUFFERED_BYTES), and every failure is
one of httpcore's exceptions, which httpx maps to its own."""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from typing import Callable

import httpcore

from blis_fast.observe.stream import ON_PROCESSING, ON_RECEIPT

MAX_BUFFERED_BYTES = 1 << 20  # received, not read yet: reading from the socket pauses past this


class _Receiver(asyncio.Protocol):
    """The protocol end of one connection: pieces of bytes with their arrival stamps."""

    def __init__(self, clock: Callable[[], int]):
        self.clock = clock
        self.transport: asyncio.Transport | None = None
        self.pieces: deque[tuple[bytes, int]] = deque()
        self.buffered = 0
        self.closed = False
        self.error: BaseException | None = None
        self.reading_paused = False
        self._readable: asyncio.Future | None = None
        self._writable: asyncio.Future | None = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data: bytes):
        self.pieces.append((data, self.clock()))
        self.buffered += len(data)
        if self.buffered > MAX_BUFFERED_BYTES and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self):
        self.closed = True
        self._wake_reader()
        return False  # (close the transport: HTTP/1.1 has no half-closed use)

    def connection_lost(self, exc):
        self.closed = True
        self.error = exc
        self._wake_reader()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self):
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self):
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def _wake_reader(self):
        if self._readable is not None and not self._readable.done():
            self._readable.set_result(None)

    async def wait_readable(self):
        self._readable = asyncio.get_running_loop().create_future()
        await self._readable

    async def wait_writable(self):
        if self._writable is not None and not self._writable.done():
            await self._writable


class StampedStream(httpcore.AsyncNetworkStream):
    """One connection.  ``received_us``: when the bytes the last ``read`` returned arrived;
    ``sent_us``: when the current request's first bytes were written (both on the clock the
    backend was given)."""

    def __init__(self, protocol: _Receiver):
        self._p = protocol
        self.received_us = -1
        self.sent_us = -1
        self._read_since_write = True

    def last_received_us(self) -> int:
        """When the bytes the last ``read`` returned came off the socket."""
        return self.received_us

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self._p
        if not p.pieces and not p.closed:
            try:
                async with asyncio.timeout(timeout):
                    while not p.pieces and not p.closed:
                        await p.wait_readable()
            except TimeoutError:
                raise httpcore.ReadTimeout(f"no bytes within {timeout} s") from None
        self._read_since_write = True
        if not p.pieces:
            if p.error is not None:
                raise httpcore.ReadError(str(p.error) or type(p.error).__name__)
            return b""  # the peer closed the connection
        data, self.received_us = p.pieces.popleft()
        if len(data) > max_bytes:  # (the rest stays first in line, with its stamp)
            p.pieces.appendleft((data[max_bytes:], self.received_us))
            data = data[:max_bytes]
        p.buffered -= len(data)
        if p.reading_paused and p.buffered <= MAX_BUFFERED_BYTES // 2 and not p.closed:
            p.reading_paused = False
            p.transport.resume_reading()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        p = self._p
        if not buffer:
            return
        if p.closed or p.transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        if self._read_since_write:  # a new request's first bytes
            self._read_since_write = False
            self.sent_us = p.clock()
        p.transport.write(buffer)
        try:
            async with asyncio.timeout(timeout):
                await p.wait_writable()
        except TimeoutError:
            raise httpcore.WriteTimeout(f"the socket took no bytes within {timeout} s") from None
        if p.error is not None:
            raise httpcore.WriteError(str(p.error) or type(p.error).__name__)

    async def aclose(self) -> None:
        if self._p.transport is not None:
            self._p.transport.close()

    async def start_tls(self, ssl_context, server_hostname: str | None = None,
                        timeout: float | None = None) -> StampedStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(self._p.transport, self._p, ssl_context,
                                                 server_hostname=server_hostname)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"no TLS handshake within {timeout} s") from None
        except OSError as e:
            raise httpcore.ConnectError(str(e) or type(e).__name__) from None
        self._p.transport = transport
        return self

    def get_extra_info(self, info: str):
        t = self._p.transport
        if info == "is_readable":  # (httpcore: an idle pooled connection the server closed or wrote to)
            return bool(self._p.pieces) or self._p.closed
        if t is None:
            return None
        return {"ssl_object": lambda: t.get_extra_info("ssl_object"), "socket": lambda: t.get_extra_info("socket"),
                "client_addr": lambda: t.get_extra_info("sockname"),
                "server_addr": lambda: t.get_extra_info("peername")}.get(info, lambda: None)()


class StampingBackend(httpcore.AsyncNetworkBackend):
    """TCP connections whose streams are ``StampedStream``s stamping on ``clock`` (µs)."""

    def __init__(self, clock: Callable[[], int]):
        self.clock = clock

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options=None) -> StampedStream:
        loop = asyncio.get_running_loop()
        protocol = _Receiver(self.clock)
        try:
            async with asyncio.timeout(timeout):
                await loop.create_connection(lambda: protocol, host, port,
                                             local_addr=(local_address, 0) if local_address else None)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"no connection within {timeout} s") from None
        except OSError as e:
            raise httpcore.ConnectError(str(e) or type(e).__name__) from None
        sock = protocol.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # (as httpcore's own backend does)
            for option in socket_options or ():
                sock.setsockopt(*option)
        return StampedStream(protocol)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options=None) -> StampedStream:
        raise httpcore.ConnectError("the observer connects over TCP only")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def stamped_transport(limits, clock: Callable[[], int]):
    """An httpx transport whose connections are ``StampedStream``s, and ON_RECEIPT; or,
    should this httpx not build its pool where expected, its own transport and
    ON_PROCESSING (the recording's header says which)."""
    import httpx  # deferred: httpx (the serve extra)

    transport = httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
    if not isinstance(getattr(transport, "_pool", None), httpcore.AsyncConnectionPool):
        return transport, ON_PROCESSING
    # (httpx keeps its httpcore pool in ``_pool`` and takes no network backend: the pool is rebuilt
    # with the same limits around this module's backend; tests/observe checks the stamps are used)
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False), max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
        network_backend=StampingBackend(clock))
    return transport, ON_RECEIPT
