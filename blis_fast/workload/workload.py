"""The workload handed to the simulator: flat per-request arrays (SEMANTICS §7).

Request ``i`` is named ``request_<i>`` (0-based, in array order).  Token contents are not
kept: only the chained keys of each request's full prompt blocks, which is all the prefix
cache needs (SEMANTICS §6).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from blis_fast.errors import WorkloadError


@dataclass(frozen=True, eq=False)
class Workload:
    """Per-request arrays of one workload.

    arrival_us:  int64 [n], arrival time in µs, in request order (not necessarily sorted
                 for traces).
    prompt_len:  int64 [n], L = prompt tokens including any shared prefix, >= 1.
    output_len:  int64 [n], N = output tokens, >= 0 (the engine treats 0 as 1).
    block_keys:  int64, flat: chained keys of each request's full prompt blocks (never -1).
    key_offsets: int64 [n+1]: request i's keys are block_keys[key_offsets[i]:key_offsets[i+1]]
                 (floor(L_i / block_size) keys).
    block_size:  tokens per KV block the keys were computed for.
    source_ids:  the trace file's own request_id column (extra output field), else None.
    description: what generated it (kind, parameters, seed, file), for the results JSON.

    Optional per-request attributes (None = all 0 / none):
    tenant, slo_class, priority_class, client: int32 [n] ids (names in ``names``).
    session:     int64 [n], session id (-1 = none); turn: int32 [n], turn within it.
    next_request, follow_delay_us: int64 [n] -- closed-loop chains (multi-turn sessions,
                 agentic tool calls): when request i completes, request next_request[i]
                 arrives follow_delay_us[i] µs after i's last token.  A request that is
                 some other request's next_request has arrival_us == -1 (decided at run
                 time) and next_request[i] > i.
    names:       {"tenant": [...], "slo_class": [...], "client": [...], ...} id -> name.
    slo_targets: {slo class name: {"ttft_ms": .., "tpot_ms": .., "e2e_ms": ..}}.
    """

    arrival_us: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    block_keys: np.ndarray
    key_offsets: np.ndarray
    block_size: int
    source_ids: list[str] | None = None
    description: dict = field(default_factory=dict)
    tenant: np.ndarray | None = None
    slo_class: np.ndarray | None = None
    priority_class: np.ndarray | None = None
    client: np.ndarray | None = None
    session: np.ndarray | None = None
    turn: np.ndarray | None = None
    next_request: np.ndarray | None = None
    follow_delay_us: np.ndarray | None = None
    names: dict = field(default_factory=dict)
    slo_targets: dict = field(default_factory=dict)

    ATTRIBUTES = {  # optional column -> (dtype, default value)
        "tenant": (np.int32, 0), "slo_class": (np.int32, 0), "priority_class": (np.int32, 0),
        "client": (np.int32, 0), "session": (np.int64, -1), "turn": (np.int32, 0),
        "next_request": (np.int64, -1), "follow_delay_us": (np.int64, 0),
    }

    def column(self, name: str) -> np.ndarray:
        """An optional attribute column, filled with its default when absent."""
        dtype, default = self.ATTRIBUTES[name]
        a = getattr(self, name)
        return np.full(len(self), default, dtype) if a is None else np.asarray(a, dtype)

    @property
    def is_dependent(self) -> np.ndarray:
        """True for requests released by another request's completion (closed loop)."""
        dep = np.zeros(len(self), bool)
        if self.next_request is not None:
            nxt = self.next_request[self.next_request >= 0]
            dep[nxt] = True
        return dep

    def __len__(self) -> int:
        return int(self.arrival_us.shape[0])

    @property
    def request_ids(self) -> list[str]:
        """``request_<i>`` for every request, in order."""
        return [f"request_{i}" for i in range(len(self))]

    def keys_of(self, i: int) -> np.ndarray:
        """The prompt-block keys of request ``i`` (a view)."""
        return self.block_keys[self.key_offsets[i] : self.key_offsets[i + 1]]

    @classmethod
    def from_tokens(
        cls,
        arrival_us: np.ndarray,
        tokens: np.ndarray,
        token_offsets: np.ndarray,
        output_len: np.ndarray,
        block_size: int,
        source_ids: list[str] | None = None,
        description: dict | None = None,
    ) -> "Workload":
        """Build a workload from prompt token ids: request i's prompt is
        ``tokens[token_offsets[i]:token_offsets[i+1]]`` (int64 ids); hashes its full blocks."""
        from kernels.workload.keys import hash_prompt_blocks  # numba imported lazily

        if int(block_size) < 1:
            raise WorkloadError("block_size", f"must be >= 1, got {block_size}")
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        token_offsets = np.ascontiguousarray(token_offsets, dtype=np.int64)
        with np.errstate(over="ignore"):  # uint64 wrap-around is intended (NUMBA_DISABLE_JIT)
            keys, key_offsets = hash_prompt_blocks(tokens, token_offsets, np.int64(block_size))
        wl = cls(
            arrival_us=np.ascontiguousarray(arrival_us, dtype=np.int64),
            prompt_len=np.diff(token_offsets),
            output_len=np.ascontiguousarray(output_len, dtype=np.int64),
            block_keys=keys,
            key_offsets=key_offsets,
            block_size=int(block_size),
            source_ids=source_ids,
            description=dict(description or {}),
        )
        wl.validate()
        return wl

    def validate(self) -> None:
        """Check shapes, dtypes and ranges; raise WorkloadError naming the first problem."""
        n = len(self)
        for name in ("arrival_us", "prompt_len", "output_len", "block_keys", "key_offsets"):
            a = getattr(self, name)
            if not isinstance(a, np.ndarray) or a.dtype != np.int64 or a.ndim != 1:
                raise WorkloadError(f"workload.{name}", "must be a 1-D int64 numpy array")
        for name in ("prompt_len", "output_len"):
            if getattr(self, name).shape[0] != n:
                raise WorkloadError(f"workload.{name}", f"has {getattr(self, name).shape[0]} entries, expected {n}")
        if self.key_offsets.shape[0] != n + 1:
            raise WorkloadError("workload.key_offsets", f"has {self.key_offsets.shape[0]} entries, expected {n + 1}")
        if not isinstance(self.block_size, (int, np.integer)) or self.block_size < 1:
            raise WorkloadError("workload.block_size", f"must be an integer >= 1, got {self.block_size!r}")
        for name, (dtype, _default) in self.ATTRIBUTES.items():
            a = getattr(self, name)
            if a is not None and (not isinstance(a, np.ndarray) or a.ndim != 1 or a.shape[0] != n):
                raise WorkloadError(f"workload.{name}", f"must be a 1-D array of {n} entries")
        for name in ("tenant", "slo_class", "priority_class", "client", "turn"):
            a = getattr(self, name)
            if a is not None and n and a.min() < 0:
                raise WorkloadError(f"workload.{name}", "ids must be >= 0")
        dep = np.zeros(n, bool)
        if self.next_request is not None:
            nxt = self.next_request
            if n and (nxt.min() < -1 or nxt.max() >= n):
                raise WorkloadError("workload.next_request", "entries must be -1 or a request index")
            linked = np.flatnonzero(nxt >= 0)
            if np.any(nxt[linked] <= linked):
                raise WorkloadError("workload.next_request", "a chain must point forward (next_request[i] > i)")
            if linked.size and np.bincount(nxt[linked], minlength=n).max() > 1:
                raise WorkloadError("workload.next_request", "a request can follow only one other request")
            dep[nxt[linked]] = True
        if self.follow_delay_us is not None and n and self.follow_delay_us.min() < 0:
            raise WorkloadError("workload.follow_delay_us", "delays must be >= 0 µs")
        if n and self.arrival_us[~dep].size and self.arrival_us[~dep].min() < 0:
            raise WorkloadError("workload.arrival_us", "arrival times must be >= 0 µs")
        if np.any(self.arrival_us[dep] != -1):
            raise WorkloadError("workload.arrival_us", "requests released by another one must have arrival_us == -1")
        if n and self.prompt_len.min() < 1:
            raise WorkloadError("workload.prompt_len", "every prompt needs >= 1 token")
        if n and self.output_len.min() < 0:
            raise WorkloadError("workload.output_len", "output lengths must be >= 0")
        if self.key_offsets[0] != 0 or self.key_offsets[-1] != self.block_keys.shape[0]:
            raise WorkloadError("workload.key_offsets", "must start at 0 and end at len(block_keys)")
        if not np.array_equal(np.diff(self.key_offsets), self.prompt_len // self.block_size):
            raise WorkloadError("workload.key_offsets", "request i must have floor(prompt_len[i] / block_size) keys")
        if np.any(self.block_keys == -1):
            raise WorkloadError("workload.block_keys", "-1 is reserved for 'no key'")
        if self.source_ids is not None and len(self.source_ids) != n:
            raise WorkloadError("workload.source_ids", f"has {len(self.source_ids)} entries, expected {n}")
