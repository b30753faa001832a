"""How an observation is made (``ObserveSettings``), checked as untrusted input: every
number within its bounds, the endpoint an ``http(s)://host[:port]`` URL.  Fields are named
by their ``blis-fast observe`` flags (``--concurrency``) in error messages."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from blis_fast.config.validate import as_choice, as_float, as_int, as_str, show
from blis_fast.errors import ConfigError

APIS = ("completions", "chat")
MAX_CONCURRENCY = 10_000
MAX_TIMEOUT_S = 3600.0
MAX_TIME_SCALE = 1000.0
MAX_URL_CHARS = 2048
MAX_MODEL_CHARS = 256
MAX_SERVER_FLAGS = 1000  # --server-flag values recorded in the header
MAX_SERVER_FLAG_CHARS = 4096


def endpoint_base(url: str) -> str:
    """The server's root URL of ``--endpoint``: ``http(s)://host[:port]`` with an optional
    path prefix; a trailing ``/v1`` (how OpenAI clients take a base URL) is dropped.
    ConfigError for anything else (credentials, a query, a fragment, another scheme)."""
    text = as_str(url, "--endpoint", max_len=MAX_URL_CHARS)
    bad = ConfigError("--endpoint", f"must be an http(s)://host:port URL, got {show(text)}")
    try:
        parts = urlsplit(text)
        port = parts.port  # ValueError for a port out of range or not a number
    except ValueError:
        raise bad from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment \
            or parts.username is not None or port == 0 or not text.isprintable() or " " in text:
        raise bad
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[:-3]
    return f"{parts.scheme}://{parts.netloc}{path}"


@dataclass(frozen=True)
class ObserveSettings:
    """``endpoint``: the server (``endpoint_base``); ``model``: the served model to ask for
    (None: the first ``/v1/models`` lists); ``time_scale``: K, request k is sent at
    ``arrival_us[k] / K`` µs of wall time and every recorded time is multiplied by K;
    ``concurrency``: requests in flight at most (more wait); ``timeout_s``: wall seconds
    a request may take from its send to its last byte; ``api``: completions | chat;
    ``server_flags``: how the server was started, recorded in the header."""

    endpoint: str
    model: str | None = None
    time_scale: float = 1.0
    concurrency: int = 256
    timeout_s: float = 300.0
    api: str = "completions"
    server_flags: tuple[str, ...] = ()

    def __post_init__(self):
        set_ = object.__setattr__  # (frozen: the checked values replace the given ones)
        set_(self, "endpoint", endpoint_base(self.endpoint))
        if self.model is not None:
            set_(self, "model", as_str(self.model, "--model", max_len=MAX_MODEL_CHARS))
        set_(self, "time_scale", as_float(self.time_scale, "--time-scale", 0.0, MAX_TIME_SCALE, lo_open=True))
        set_(self, "concurrency", as_int(self.concurrency, "--concurrency", 1, MAX_CONCURRENCY))
        set_(self, "timeout_s", as_float(self.timeout_s, "--timeout-s", 0.0, MAX_TIMEOUT_S, lo_open=True))
        set_(self, "api", as_choice(self.api, "--api", APIS))
        flags = tuple(self.server_flags)
        if len(flags) > MAX_SERVER_FLAGS:
            raise ConfigError("--server-flag", f"at most {MAX_SERVER_FLAGS} values, got {len(flags)}")
        set_(self, "server_flags", tuple(as_str(f, "--server-flag", max_len=MAX_SERVER_FLAG_CHARS, nonempty=False)
                                         for f in flags))
