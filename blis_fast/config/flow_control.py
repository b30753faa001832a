"""Gateway flow control and request deadlines: the configuration side (issue 25).

The flow-control policy itself (detector, thresholds, dispatch order, fairness) is a policy
slot (``blis_fast.config.policy`` "gateway flow control", compiled by
``blis_fast.policy.compile.flow_control_row``).  This module holds the workload side.

A workload spec's SLO classes may give ``ttl_s`` (the request is cancelled when it has not
completed that long after its arrival), ``sheddable: true`` (the gateway's flow control
rejects the class's requests instead of queueing them while the pool is saturated) and
``retries: {max, backoff: {base_s, factor, jitter}}`` (a timed-out or shed request is sent
again, up to ``max`` more times, the k-th retry ``base_s · factor^(k-1)`` seconds after
the attempt ended, times a uniform draw in [1 - jitter, 1 + jitter]).  A client may give
``ttl_s`` and ``retries`` of its own (they replace its SLO class's); ``--request-ttl-s`` is
the TTL of the requests that have none.

``parse_deadline`` reads the keys; ``resolve_deadlines`` resolves them per client against
the run's flow control and TTL (refusing what would change nothing), and
``deadline_columns`` turns them into the per-request arrays of ``Workload``
(docs/workloads.md).  The event loop runs them in kernels/engine/flow.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from blis_fast.config.validate import as_bool, as_float, as_int, as_mapping, show
from blis_fast.errors import ConfigError, WorkloadError
from blis_fast_kernels import schema as S

MAX_TTL_S = 1e6  # a request's time to live, s (~11.6 days; in µs far inside int64)
MIN_TTL_S = 1e-6  # one µs, the clock's resolution (a shorter TTL would round to 0)
MAX_RETRIES = 16  # retries of one request (attempts = 1 + retries)
MAX_BACKOFF_S = 3600.0  # the longest delay before a retry (its last one, jitter included), s
MAX_BACKOFF_FACTOR = 10.0
DEFAULT_BACKOFF = {"base_s": 1.0, "factor": 2.0, "jitter": 0.0}
CLASS_KEYS = ("ttl_s", "sheddable", "retries")  # beside an SLO class's targets
CLIENT_KEYS = ("ttl_s", "retries")  # a client's own (sheddable is its SLO class's)


@dataclass(frozen=True)
class RetrySpec:
    """``retries: {max, backoff: {base_s, factor, jitter}}`` (``path``: its YAML path)."""

    max: int
    base_s: float
    factor: float
    jitter: float
    path: str


@dataclass(frozen=True)
class DeadlineSpec:
    """The deadline keys one SLO class or client gives (None: not given)."""

    ttl_s: float | None = None
    sheddable: bool | None = None
    retries: RetrySpec | None = None

    def given(self) -> bool:
        return self.ttl_s is not None or self.sheddable is not None or self.retries is not None


def parse_ttl(value: Any, path: str) -> float:
    """A TTL in seconds: a finite number in [MIN_TTL_S, MAX_TTL_S] (rounded to whole µs)."""
    return as_float(value, path, MIN_TTL_S, MAX_TTL_S, error=WorkloadError, text=False)


def parse_retries(value: Any, path: str) -> RetrySpec:
    """``retries``: a count ``N`` (the default backoff) or ``{max: N, backoff: {base_s,
    factor, jitter}}``.  The last retry's delay, jitter included, must stay within
    MAX_BACKOFF_S (a growing backoff could otherwise overflow the clock)."""
    bare = not isinstance(value, dict)  # (a bare count: errors name the key itself)
    d = as_mapping({"max": value} if bare else value, path, ("max", "backoff"), error=WorkloadError)
    if d.get("max") is None:
        raise WorkloadError(f"{path}.max", "is required: the retries of a timed-out or shed request, "
                                           f"0..{MAX_RETRIES}")
    count = as_int(d["max"], path if bare else f"{path}.max", 0, MAX_RETRIES, error=WorkloadError, text=False)
    b = as_mapping(d.get("backoff") or {}, f"{path}.backoff", tuple(DEFAULT_BACKOFF), error=WorkloadError)
    base = as_float(b.get("base_s", DEFAULT_BACKOFF["base_s"]), f"{path}.backoff.base_s", 0, MAX_BACKOFF_S,
                    error=WorkloadError, text=False)
    factor = as_float(b.get("factor", DEFAULT_BACKOFF["factor"]), f"{path}.backoff.factor", 1, MAX_BACKOFF_FACTOR,
                      error=WorkloadError, text=False)
    jitter = as_float(b.get("jitter", DEFAULT_BACKOFF["jitter"]), f"{path}.backoff.jitter", 0, 1,
                      error=WorkloadError, text=False)
    last = base * factor ** max(count - 1, 0) * (1 + jitter)
    if count and last > MAX_BACKOFF_S:
        raise WorkloadError(f"{path}.backoff", f"the last retry would wait base_s·factor^(max-1)·(1+jitter) = "
                                               f"{last:.4g} s; at most {MAX_BACKOFF_S:g} s: lower base_s, factor or "
                                               f"max")
    return RetrySpec(count, base, factor, jitter, path)


def parse_deadline(d: dict, path: str, keys: tuple[str, ...]) -> DeadlineSpec:
    """The deadline keys (``keys``: CLASS_KEYS or CLIENT_KEYS) of one SLO class or client
    mapping ``d`` at YAML path ``path``."""
    ttl = parse_ttl(d["ttl_s"], f"{path}.ttl_s") if d.get("ttl_s") is not None else None
    sheddable = None
    if "sheddable" in keys and d.get("sheddable") is not None:
        sheddable = as_bool(d["sheddable"], f"{path}.sheddable", error=WorkloadError, text=False)
    retries = parse_retries(d["retries"], f"{path}.retries") if d.get("retries") is not None else None
    return DeadlineSpec(ttl, sheddable, retries)


@dataclass(frozen=True)
class ClientDeadlines:
    """One client's deadlines in force (its own, else its SLO class's, else the run's TTL)."""

    ttl_us: int  # -1 = none
    sheddable: bool
    retries: RetrySpec | None


def deadline_columns(per_client: list[ClientDeadlines], client: np.ndarray) -> dict[str, np.ndarray]:
    """The Workload columns of the requests of clients ``client`` (int ids into
    ``per_client``): ``ttl_us`` int64 (-1 none), ``sheddable`` uint8, ``max_retries`` int32
    per request, and ``retry_backoff`` float64 [clients, N_RETRY_BACKOFF] (RetryBackoff columns)."""
    if client.size and (client.min() < 0 or client.max() >= len(per_client)):
        raise WorkloadError("workload.client", f"ids must index the {len(per_client)} clients, got "
                                               f"{show(int(client.max()))}")
    ttl = np.array([c.ttl_us for c in per_client], np.int64)
    shed = np.array([c.sheddable for c in per_client], np.uint8)
    retries = np.array([0 if c.retries is None else c.retries.max for c in per_client], np.int32)
    backoff = np.zeros((len(per_client), S.N_RETRY_BACKOFF), np.float64)
    backoff[:, S.RetryBackoff.FACTOR] = 1.0  # (a client without retries: a neutral row)
    for k, c in enumerate(per_client):
        if c.retries is not None and c.retries.max > 0:
            backoff[k, S.RetryBackoff.BASE_US] = c.retries.base_s * 1e6
            backoff[k, S.RetryBackoff.FACTOR] = c.retries.factor
            backoff[k, S.RetryBackoff.JITTER] = c.retries.jitter
    return {"ttl_us": ttl[client], "sheddable": shed[client], "max_retries": retries[client],
            "retry_backoff": backoff}


def resolve_deadlines(flow_control: str, run_ttl_s: float | None, spec=None) -> list[ClientDeadlines] | None:
    """Each client's deadlines in force (clients in the order of ``spec.clients``; one
    client without a spec) -- its own ``ttl_s`` / ``retries``, else its SLO class's, else
    ``run_ttl_s`` (``--request-ttl-s``) -- or None when no request has any.  Refused, naming
    the key: ``sheddable: true`` with flow control ``never`` (nothing sheds), and retries
    that nothing triggers (no TTL and not sheddable)."""
    run_ttl_us = -1 if run_ttl_s is None else round(run_ttl_s * 1e6)
    if spec is None:
        return None if run_ttl_s is None else [ClientDeadlines(run_ttl_us, False, None)]
    for name, cls in spec.class_deadlines.items():
        if cls.sheddable and flow_control == "never":
            raise ConfigError(f"slo_classes.{name}.sheddable", "has no effect with --flow-control never: nothing "
                                                               "sheds without a saturation detector; choose "
                                                               "--flow-control concurrency, utilization or free-slot, "
                                                               "or leave it out")
    out = []
    for client in spec.clients:
        cls = spec.class_deadlines.get(client.slo_class, DeadlineSpec())
        own = client.deadline
        ttl_s = own.ttl_s if own.ttl_s is not None else cls.ttl_s if cls.ttl_s is not None else run_ttl_s
        retries = own.retries if own.retries is not None else cls.retries
        sheddable = bool(cls.sheddable)
        if retries is not None and retries.max > 0 and ttl_s is None and not sheddable:
            raise ConfigError(retries.path, f"nothing triggers a retry of client {show(client.name)}'s requests: "
                                            f"they have no ttl_s (its own, its SLO class's or --request-ttl-s) and "
                                            f"its SLO class {show(client.slo_class)} is not sheddable")
        ttl_us = -1 if ttl_s is None else round(ttl_s * 1e6)
        out.append(ClientDeadlines(ttl_us, sheddable, retries))
    if all(c.ttl_us < 0 and not c.sheddable and (c.retries is None or c.retries.max == 0) for c in out):
        return None
    return out


def first_deadline_key(spec) -> str | None:
    """The YAML path of the first deadline key a workload spec gives (an SLO class's, then
    a client's ``ttl_s``, ``sheddable`` or ``retries``), None when it gives none: for the
    places that cannot carry them yet (``blis-fast workload generate``'s rich trace)."""
    for name, cls in spec.class_deadlines.items():
        key = next(k for k in CLASS_KEYS if getattr(cls, k) is not None)
        return f"slo_classes.{name}.{key}"
    for client in spec.clients:
        if client.deadline.given():
            key = next(k for k in CLIENT_KEYS if getattr(client.deadline, k) is not None)
            return f"{client.path}.{key}"
    return None
