"""A Dask scheduler to evaluate on (``blis-fast evaluate --dask-scheduler ADDR``): its
address checked before anything connects, and the connection bounded in time.

- ``parse_scheduler_address`` accepts ``tcp://HOST:PORT``, ``tls://HOST:PORT`` or
  ``HOST:PORT`` (tcp, as Dask reads it): HOST a DNS name, an IPv4 address or a bracketed
  IPv6 address, PORT in [1, 65535], at most ``MAX_ADDRESS_CHARS`` characters, nothing
  else (no spaces, paths, user names or control characters).  Dask's other schemes are
  refused: ``inproc://`` reaches only a scheduler inside the same process (none exists
  in a command), ``ws://``, ``wss://`` and ``ucx://`` need extras blis-fast does not
  install.
- ``connect`` gives the scheduler ``timeout`` seconds in all (``$BLIS_FAST_DASK_TIMEOUT_S``,
  default ``DEFAULT_TIMEOUT_S``).  Dask's own connect timeout does not hold against a
  listener that accepts and never answers (it waits for the handshake as long as the
  socket lives) and a listener answering junk makes it raise assorted errors (or
  allocate what a junk length asks for).  So a probe first reads the scheduler's
  handshake itself (through TLS with Dask's TLS settings for ``tls://``; without them
  ``tls://`` is refused) -- a Dask scheduler sends one as soon as it accepts -- with
  a socket timeout and a size bound, and decodes it without unpickling; only a peer that
  answers like a scheduler gets a Dask client, itself made in a thread that is given up
  at the deadline.  Every failure is one ``ConfigError`` naming the flag.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import struct
import threading
import time

from blis_fast.config.validate import as_float, show
from blis_fast.errors import ConfigError

FLAG = "--dask-scheduler"
TIMEOUT_ENV = "BLIS_FAST_DASK_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 600.0
MAX_ADDRESS_CHARS = 300  # a 253-character DNS name, a scheme and a port
SCHEMES = ("tcp", "tls")
OTHER_DASK_SCHEMES = ("inproc", "ws", "wss", "ucx")
MAX_HANDSHAKE_BYTES = 1 << 20  # a scheduler's handshake is about 100 bytes

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_ADDRESS = re.compile(rf"(?:(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://)?"
                      rf"(?P<host>\[[0-9A-Fa-f:.]+\]|{_LABEL}(?:\.{_LABEL})*\.?)"
                      rf"(?::(?P<port>[0-9]{{1,5}}))?")


def parse_scheduler_address(address, flag: str = FLAG) -> tuple[str, str, int]:
    """(scheme, host, port) of a scheduler address (module docstring); ConfigError naming
    ``flag`` otherwise."""
    if not isinstance(address, str):
        raise ConfigError(flag, f"must be an address tcp://HOST:PORT, got {show(address)}")
    if len(address) > MAX_ADDRESS_CHARS:
        raise ConfigError(flag, f"address longer than {MAX_ADDRESS_CHARS} characters ({len(address)})")
    m = _ADDRESS.fullmatch(address)
    if m is None:
        scheme = address.partition("://")[0] if "://" in address else None
        if scheme is not None and scheme.lower() not in SCHEMES:
            raise ConfigError(flag, _scheme_message(scheme))
        raise ConfigError(flag, f"expected tcp://HOST:PORT (HOST a name, an IPv4 address or [IPv6]), "
                                f"got {show(address)}")
    scheme = (m.group("scheme") or "tcp")
    if scheme not in SCHEMES:
        raise ConfigError(flag, _scheme_message(scheme))
    host = m.group("host")
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ConfigError(flag, f"{show(host)} is not an IPv6 address") from None
        host = host[1:-1]
    elif re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ConfigError(flag, f"{show(host)} is not an IPv4 address") from None
    elif len(host.rstrip(".")) > 253:
        raise ConfigError(flag, f"host name longer than 253 characters ({len(host)})")
    if m.group("port") is None:
        raise ConfigError(flag, f"needs a port: tcp://HOST:PORT (Dask's default is 8786), got {show(address)}")
    port = int(m.group("port"))
    if not 1 <= port <= 65535:
        raise ConfigError(flag, f"port must be in [1, 65535], got {port}")
    return scheme, host, port


def _scheme_message(scheme: str) -> str:
    hint = ""
    if scheme.lower() in OTHER_DASK_SCHEMES:
        hint = " (inproc reaches only a scheduler in the same process; ws, wss and ucx need extras)"
    return f"scheme {show(scheme, 40)} is not supported{hint}; use tcp://HOST:PORT or tls://HOST:PORT"


def timeout_from_env(flag: str = TIMEOUT_ENV) -> float:
    """``$BLIS_FAST_DASK_TIMEOUT_S`` (seconds in (0, 600]) or the default, 10 s."""
    text = os.environ.get(TIMEOUT_ENV)
    return DEFAULT_TIMEOUT_S if not text else as_float(text, flag, 0, MAX_TIMEOUT_S, lo_open=True)


def connect(address: str, timeout: float | None = None, flag: str = FLAG):
    """A ``dask.distributed.Client`` of the scheduler at ``address``, reached within
    ``timeout`` seconds (default: ``timeout_from_env()``); ConfigError naming ``flag``
    when the address is malformed, Dask is missing, or the scheduler does not answer as
    one within the time."""
    scheme, host, port = parse_scheduler_address(address, flag)
    seconds = timeout_from_env() if timeout is None else timeout
    try:
        from dask.distributed import Client  # deferred: dask
    except ImportError:
        raise ConfigError(flag, "needs Dask: pip install 'blis-fast[distributed]'") from None
    ssl_context = _tls_context(flag) if scheme == "tls" else None
    deadline = time.monotonic() + seconds
    where = f"the scheduler at {show(address, 120)}"
    _probe_handshake(host, port, ssl_context, deadline, where, flag)
    outcome: dict = {}

    def make_client() -> None:
        try:
            outcome["client"] = Client(address, timeout=f"{max(deadline - time.monotonic(), 0.1):.3f}s",
                                       set_as_default=False)
        except BaseException as exc:  # noqa: BLE001 -- reported below as one line
            outcome["error"] = exc

    worker = threading.Thread(target=make_client, name="blis-fast dask connect", daemon=True)
    worker.start()
    worker.join(max(deadline - time.monotonic(), 0) + 1.0)  # Dask's own timeout, then a second's grace
    if "client" in outcome:
        return outcome["client"]
    if worker.is_alive():  # left to end on its own: a daemon thread never holds the process
        raise ConfigError(flag, f"{where} did not answer within {seconds:g} s (set {TIMEOUT_ENV} for more time)")
    raise ConfigError(flag, f"cannot reach {where}: {_one_line(outcome.get('error'))}")


def _tls_context(flag: str):
    """The client SSL context of Dask's TLS settings (``distributed.comm.tls``); ConfigError
    naming ``flag`` when none is configured (a tls:// scheduler cannot be reached then)."""
    from distributed.security import Security  # deferred: distributed

    context = Security().get_connection_args("client").get("ssl_context")
    if context is None:
        raise ConfigError(flag, "tls:// needs Dask's TLS settings (distributed.comm.tls: ca-file, client cert and "
                                "key; Dask's configuration docs); use tcp:// on a trusted network")
    return context


def _probe_handshake(host: str, port: int, ssl_context, deadline: float, where: str, flag: str) -> None:
    """Connect (through TLS when ``ssl_context`` is given) and read the handshake a Dask
    scheduler sends on accepting, by the deadline: an 8-byte length, then that many bytes
    of frames that decode (without unpickling) to a mapping.  ConfigError naming ``flag``
    when the peer is silent, closes, or answers anything else."""
    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout()
        return left

    try:
        with socket.create_connection((host, port), timeout=remaining()) as plain:
            sock = plain if ssl_context is None else ssl_context.wrap_socket(plain, server_hostname=host)
            head = _read_exactly(sock, 8, remaining)
            (size,) = struct.unpack("<Q", head)
            if not 0 < size <= MAX_HANDSHAKE_BYTES:
                raise _NotDask(f"a message of {size} bytes")
            body = _read_exactly(sock, size, remaining)
    except socket.timeout:
        raise ConfigError(flag, f"{where} did not answer within the time given "
                                f"(set {TIMEOUT_ENV} for more time)") from None
    except _NotDask as exc:
        raise ConfigError(flag, f"{where} does not answer as a Dask scheduler ({exc})") from None
    except OSError as exc:
        raise ConfigError(flag, f"cannot reach {where}: {exc.strerror or _one_line(exc)}") from None
    if not _is_handshake(body):
        raise ConfigError(flag, f"{where} does not answer as a Dask scheduler (an unreadable handshake)")


class _NotDask(Exception):
    pass


def _read_exactly(sock: socket.socket, n: int, remaining) -> bytes:
    chunks, got = [], 0
    while got < n:
        sock.settimeout(remaining())
        chunk = sock.recv(min(n - got, 65536))
        if not chunk:
            raise _NotDask("the connection was closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _is_handshake(body: bytes) -> bool:
    """True if ``body`` unpacks into frames that Dask decodes (no unpickling) to a mapping."""
    try:
        from distributed.protocol.core import loads  # deferred: distributed
        from distributed.protocol.utils import unpack_frames  # deferred: distributed

        frames = unpack_frames(body)
        if sum(len(f) for f in frames) > MAX_HANDSHAKE_BYTES:
            return False
        return isinstance(loads(frames, deserialize=False), dict)
    except Exception:  # noqa: BLE001 -- whatever junk raises: not a scheduler
        return False


def _one_line(exc) -> str:
    """An exception's text as one short line (quoted and escaped if it holds control characters)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200] if text.isprintable() else show(text, 200)
