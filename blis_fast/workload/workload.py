"""The workload handed to the simulator: flat per-request arrays (docs/semantics.md §7).

Request ``i`` is named ``request_<i>`` (0-based, in array order).  Token contents are not
kept: only the chained keys of the full blocks of each request's token sequence -- its
prompt, then its output tokens -- which is all the prefix cache needs (docs/semantics.md §6): as
in vLLM, a block that fills during decode is cached too, so a later request whose prompt
repeats an earlier request's prompt *and output* (the next turn of a conversation) hits
the blocks that request generated.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from blis_fast.config import memory
from blis_fast.config.validate import INT32_MAX, MAX_KEYS, MAX_REQUEST_TOKENS, MAX_TIME_US, show
from blis_fast.errors import WorkloadError
from blis_fast.config.flow_control import MAX_BACKOFF_FACTOR, MAX_BACKOFF_S, MAX_RETRIES, MAX_TTL_S
from blis_fast_kernels import schema as S
from blis_fast_kernels.schema import KeyFlagMode


KEY_BYTES = 8 + 1  # a block key and its shared flag


def charge_keys(n_keys: int, block_size: int) -> None:
    """Refuse more block keys than the tables can number (MAX_KEYS) or the memory budget
    holds; charge them."""
    if n_keys > MAX_KEYS:
        raise WorkloadError("workload", f"{n_keys} KV block keys (prompt + output tokens / block size "
                                        f"{block_size}) exceed the {MAX_KEYS} a run can hold; use fewer or shorter "
                                        "requests or a larger block size")
    memory.charge(n_keys * KEY_BYTES, f"the workload's {n_keys} KV block keys (block size {block_size})",
                  "use fewer or shorter requests or a larger block size")


def row_seeds(n: int) -> np.ndarray:
    """int64 [n]: one distinct pseudo-random 64-bit seed per row (splitmix64 of the row
    number 1..n): the default content seeds of rows that have none."""
    x = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return x.view(np.int64)


@dataclass(frozen=True, eq=False)
class Workload:
    """Per-request arrays of one workload.

    arrival_us:  int64 [n], arrival time in µs, in request order (not necessarily sorted
                 for traces).
    prompt_len:  int64 [n], L = prompt tokens including any shared prefix, >= 1.
    output_len:  int64 [n], N = output tokens, >= 0 (the engine treats 0 as 1).
    block_keys:  int64, flat: chained keys of the full blocks of each request's sequence,
                 prompt tokens then output tokens (never -1).
    key_offsets: int64 [n+1]: request i's keys are block_keys[key_offsets[i]:key_offsets[i+1]]:
                 floor((L_i + N_i) / block_size) keys, the first floor(L_i / block_size) of
                 which are its prompt blocks' (``prompt_keys_of``); key j identifies the
                 sequence's first (j+1)·block_size tokens.
    block_size:  tokens per KV block the keys were computed for (every request's, unless
                 ``model_block_sizes`` says otherwise).
    key_shared:  uint8, like block_keys, or None: 1 where the key's value occurs more than
                 once in block_keys (another request can hit it), else 0.  Generators fill
                 it by construction; None = not known (``shared_keys()`` computes it).
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
    agent_node:  int64 [n] or None: the agent DAG node (blis_fast/agents) whose LLM call the
                 request is, -1 for an ordinary request.  An agent's request has
                 arrival_us == -1: it arrives when its node starts (every predecessor done).
    ttl_us, sheddable, max_retries: int64 / uint8 / int32 [n] or all None (no deadlines):
                 the request's time to live, µs after its arrival (-1 = none), whether flow
                 control may shed it (its SLO class's ``sheddable``), its retries;
                 retry_backoff: float64 [clients, N_RETRY_BACKOFF], each client's backoff
                 (schema RetryBackoff columns), read through ``client`` (docs/workloads.md).
    names:       {"tenant": [...], "slo_class": [...], "client": [...], ...} id -> name.
    slo_targets: {slo class name: {"ttft_ms": .., "tpot_ms": .., "e2e_ms": ..}}.
    model:       int32 [n] or None: the served model each request asks for, an index into
                 ``models`` (the served model names); None = not assigned yet
                 (blis_fast.run.resolve.assign_models assigns it from the config's
                 deployments, docs/semantics.md "Requests carry a model").
    model_block_sizes: the block size of each of ``models`` when they differ (request i's
                 keys are then per model_block_sizes[model[i]] tokens: ``request_block_sizes``,
                 ``with_model_keys``); () = every request's is ``block_size``.
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
    key_shared: np.ndarray | None = None
    model: np.ndarray | None = None
    models: tuple[str, ...] = ()
    model_block_sizes: tuple[int, ...] = ()
    ttl_us: np.ndarray | None = None
    sheddable: np.ndarray | None = None
    max_retries: np.ndarray | None = None
    retry_backoff: np.ndarray | None = None
    agent_node: np.ndarray | None = None

    # request deadlines, shedding and retries (blis_fast/config/flow_control.py), all None or all
    # set: kept apart from ATTRIBUTES, so a workload without them has the request table and the
    # workload id it had before them
    DEADLINE_COLUMNS = {"ttl_us": np.int64, "sheddable": np.uint8, "max_retries": np.int32}

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
        """True for requests released at run time: by another request's completion (closed
        loop) or by an agent DAG (``agent_node``)."""
        dep = np.zeros(len(self), bool)
        if self.next_request is not None:
            nxt = self.next_request[self.next_request >= 0]
            dep[nxt] = True
        if self.agent_node is not None:
            dep |= self.agent_node >= 0
        return dep

    def __len__(self) -> int:
        return int(self.arrival_us.shape[0])

    def first(self, n: int) -> "Workload":
        """The first ``n`` requests (``request_0`` .. ``request_<n-1>``, the file order of a
        trace); the whole workload when it has no more.  A closed-loop link from a kept
        request to a dropped one is cut -- the session ends at its last kept turn, as a
        workload spec's num_requests cap ends it; a kept request's parent always precedes
        it (next_request[i] > i), so it is kept too.  The arrays are views of this
        workload's (no memory beyond what it was charged for)."""
        if n >= len(self):
            return self
        end = int(self.key_offsets[n])
        columns = {name: None if getattr(self, name) is None else getattr(self, name)[:n] for name in self.ATTRIBUTES}
        if self.next_request is not None:
            cut = columns["next_request"] >= n
            if cut.any():
                columns["next_request"] = np.where(cut, -1, columns["next_request"])
                if self.follow_delay_us is not None:
                    columns["follow_delay_us"] = np.where(cut, 0, columns["follow_delay_us"])
        kept = replace(
            self, arrival_us=self.arrival_us[:n], prompt_len=self.prompt_len[:n], output_len=self.output_len[:n],
            block_keys=self.block_keys[:end], key_offsets=self.key_offsets[: n + 1],
            source_ids=None if self.source_ids is None else self.source_ids[:n],
            description={**self.description, "first_requests": int(n)},
            key_shared=None,  # (which keys repeat is recomputed among the kept requests)
            model=None if self.model is None else self.model[:n],
            **{name: None if getattr(self, name) is None else getattr(self, name)[:n]
               for name in self.DEADLINE_COLUMNS},
            **columns,
        )
        kept.validate()
        return kept

    @property
    def request_ids(self) -> list[str]:
        """``request_<i>`` for every request, in order."""
        return [f"request_{i}" for i in range(len(self))]

    def keys_of(self, i: int) -> np.ndarray:
        """The sequence-block keys of request ``i``: floor((L + N) / block_size), prompt
        blocks first (a view)."""
        return self.block_keys[self.key_offsets[i] : self.key_offsets[i + 1]]

    def prompt_keys_of(self, i: int) -> np.ndarray:
        """The prompt-block keys of request ``i``: the first floor(L / block_size) of
        ``keys_of(i)`` (a view)."""
        start = self.key_offsets[i]
        return self.block_keys[start : start + self.prompt_len[i] // int(self.request_block_sizes()[i])]

    def prompt_key_counts(self) -> np.ndarray:
        """int64 [n]: floor(L_i / block_size), the number of prompt keys of each request."""
        return self.prompt_len // self.request_block_sizes()

    def request_block_sizes(self) -> np.ndarray:
        """int64 [n]: the block size each request's keys are computed for (its model's)."""
        if not self.model_block_sizes:
            return np.full(len(self), self.block_size, np.int64)
        return np.asarray(self.model_block_sizes, np.int64)[self.model]

    def with_model_keys(self, sizes: tuple[int, ...], keyed: dict[int, "Workload"]) -> "Workload":
        """This workload (its models assigned) with each request's keys taken from
        ``keyed[sizes[its model]]``: the same requests keyed for that block size.  Keys of
        one model chain only through its own requests (a session never changes model), so
        each request's keys are those it has when its model's requests are keyed alone."""
        per_request = np.asarray(sizes, np.int64)[self.model]
        counts = np.zeros(len(self), np.int64)
        for bs, wl in keyed.items():
            mine = per_request == bs
            counts[mine] = np.diff(wl.key_offsets)[mine]
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        keys = np.empty(int(offsets[-1]), np.int64)
        for bs, wl in keyed.items():
            idx = np.flatnonzero(per_request == bs)
            cnt = counts[idx]
            within = np.arange(int(cnt.sum()), dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
            keys[np.repeat(offsets[idx], cnt) + within] = wl.block_keys[np.repeat(wl.key_offsets[idx], cnt) + within]
        return replace(self, block_keys=keys, key_offsets=offsets, key_shared=None,
                       model_block_sizes=tuple(int(b) for b in sizes), block_size=int(sizes[0]))

    def shared_keys(self) -> np.ndarray:
        """uint8 like block_keys: 1 where the key's value occurs more than once in
        block_keys, else 0 -- ``key_shared`` when known, else computed (and kept)."""
        if self.key_shared is None:
            from blis_fast_kernels.native import flag_keys  # deferred: blis_fast_kernels.native

            with np.errstate(over="ignore"):  # uint64 wrap-around is intended (NUMBA_DISABLE_JIT)
                flags = flag_keys(np.ascontiguousarray(self.block_keys), KeyFlagMode.SHARED)[0]
            object.__setattr__(self, "key_shared", flags)  # a cache: the value is determined
        return self.key_shared

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
        output_tokens: np.ndarray | None = None,
        output_offsets: np.ndarray | None = None,
        content_seed: np.ndarray | None = None,
        **attributes,
    ) -> "Workload":
        """Build a workload from token ids: request i's prompt is
        ``tokens[token_offsets[i]:token_offsets[i+1]]`` (int64 ids), its output
        ``output_tokens[output_offsets[i]:output_offsets[i+1]]`` when given (then these
        lengths must equal output_len); hashes the full blocks of prompt + output as one
        sequence.  Without output tokens, every block that is not entirely prompt gets a
        fresh key from ``content_seed[i]`` (int64 [n]; default ``row_seeds(n)``).
        ``attributes``: further Workload fields (tenant=, session=, next_request=, ...)."""
        from blis_fast_kernels.native import hash_sequence_blocks  # deferred: blis_fast_kernels.native

        if int(block_size) < 1:
            raise WorkloadError("block_size", f"must be >= 1, got {block_size}")
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        token_offsets = np.ascontiguousarray(token_offsets, dtype=np.int64)
        output_len = np.ascontiguousarray(output_len, dtype=np.int64)
        n = token_offsets.shape[0] - 1
        if output_len.shape != (n,):
            raise WorkloadError("workload.output_len", f"has {output_len.shape[0]} entries, expected {n}")
        if n and output_len.min() < 0:
            raise WorkloadError("workload.output_len", "output lengths must be >= 0")
        if token_offsets.shape[0] < 1 or token_offsets[0] != 0 or np.any(np.diff(token_offsets) < 0) \
                or token_offsets[-1] != tokens.shape[0]:
            raise WorkloadError("workload.token_offsets", "must rise from 0 to len(tokens)")
        if n and int(output_len.max()) > MAX_REQUEST_TOKENS:
            raise WorkloadError("workload.output_len", f"output lengths must be <= {MAX_REQUEST_TOKENS}")
        lens = np.diff(token_offsets)
        if n and int(lens.max()) + int(output_len.max()) > 2 * MAX_REQUEST_TOKENS:
            raise WorkloadError("workload.prompt_len", f"prompts must hold <= {MAX_REQUEST_TOKENS} tokens")
        charge_keys(int(((lens + output_len) // int(block_size)).sum()), int(block_size))
        if output_tokens is None:
            out_tok = np.empty(0, np.int64)
            out_offs = np.empty(0, np.int64)
            seeds = row_seeds(n) if content_seed is None else np.ascontiguousarray(content_seed, dtype=np.int64)
            if seeds.shape != (n,):
                raise WorkloadError("workload.content_seed", f"has {seeds.shape[0]} entries, expected {n}")
        else:
            if output_offsets is None:
                raise WorkloadError("workload.output_offsets", "required with output_tokens")
            out_tok = np.ascontiguousarray(output_tokens, dtype=np.int64)
            out_offs = np.ascontiguousarray(output_offsets, dtype=np.int64)
            if out_offs.shape != (n + 1,) or out_offs[0] != 0 or out_offs[-1] != out_tok.shape[0]:
                raise WorkloadError("workload.output_offsets", f"must be {n + 1} offsets from 0 to len(output_tokens)")
            got = np.diff(out_offs)
            if not np.array_equal(got, output_len):
                bad = int(np.flatnonzero(got != output_len)[0])
                raise WorkloadError("workload.output_len",
                                    f"request {bad} has {output_len[bad]} but {got[bad]} output token ids")
            seeds = np.empty(0, np.int64)
        with np.errstate(over="ignore"):  # uint64 wrap-around is intended (NUMBA_DISABLE_JIT)
            keys, key_offsets = hash_sequence_blocks(tokens, token_offsets, out_tok, out_offs, output_len, seeds,
                                                     np.int64(block_size))
        wl = cls(
            arrival_us=np.ascontiguousarray(arrival_us, dtype=np.int64),
            prompt_len=np.diff(token_offsets),
            output_len=output_len,
            block_keys=keys,
            key_offsets=key_offsets,
            block_size=int(block_size),
            source_ids=source_ids,
            description=dict(description or {}),
            **attributes,
        )
        wl.validate()
        return wl

    def validate(self) -> None:
        """Check shapes, dtypes and ranges; raise WorkloadError naming the first problem."""
        n = len(self)
        if n > INT32_MAX:  # the event heap keeps request ids as int32 (kernels/schema/tables.py EVENT_DT)
            raise WorkloadError("workload", f"has {n} requests, more than {INT32_MAX}")
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
            raise WorkloadError("workload.block_size", f"must be an integer >= 1, got {show(self.block_size)}")
        for name, (dtype, _default) in self.ATTRIBUTES.items():
            a = getattr(self, name)
            if a is not None and (not isinstance(a, np.ndarray) or a.ndim != 1 or a.shape[0] != n
                                  or a.dtype.kind not in "iu"):
                raise WorkloadError(f"workload.{name}", f"must be a 1-D integer array of {n} entries")
        for name in ("tenant", "slo_class", "priority_class", "client", "turn"):
            a = getattr(self, name)
            if a is not None and n and a.min() < 0:
                raise WorkloadError(f"workload.{name}", "ids must be >= 0")
            if a is not None and n and a.max() > INT32_MAX:  # stored as int32
                raise WorkloadError(f"workload.{name}", f"ids must be <= {INT32_MAX}, got {int(a.max())}")
        for name in ("session", "next_request", "follow_delay_us"):
            a = getattr(self, name)
            if a is not None and n and a.max() > MAX_TIME_US:
                raise WorkloadError(f"workload.{name}", f"values must be <= 2^62, got {int(a.max())}")
        if n and int(self.arrival_us.max()) > MAX_TIME_US:
            raise WorkloadError("workload.arrival_us", f"arrival times must be <= 2^62 µs, got {int(self.arrival_us.max())}")
        if n and (int(self.prompt_len.max()) > MAX_REQUEST_TOKENS or int(self.output_len.max()) > MAX_REQUEST_TOKENS
                  or int((self.prompt_len + self.output_len).max()) > MAX_REQUEST_TOKENS):
            raise WorkloadError("workload.prompt_len", f"a request may hold at most {MAX_REQUEST_TOKENS} prompt + "
                                                       "output tokens")
        if self.block_keys.shape[0] > MAX_KEYS:
            raise WorkloadError("workload.block_keys", f"more than {MAX_KEYS} keys")
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
        if self.agent_node is not None:
            if self.agent_node.shape != (n,) or (n and (self.agent_node.min() < -1 or self.agent_node.max() > MAX_TIME_US)):
                raise WorkloadError("workload.agent_node", "must hold one entry per request: -1 or a node id")
            if self.next_request is not None and np.any(dep & (self.agent_node >= 0)):
                raise WorkloadError("workload.agent_node", "an agent's LLM call cannot also follow another request")
            dep |= self.agent_node >= 0
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
        if self.model_block_sizes and (self.model is None or len(self.model_block_sizes) != len(self.models)
                                       or min(self.model_block_sizes) < 1):
            raise WorkloadError("workload.model_block_sizes", "must give a block size >= 1 for each of workload.models")
        if not np.array_equal(np.diff(self.key_offsets),
                              (self.prompt_len + self.output_len) // self.request_block_sizes()):
            raise WorkloadError("workload.key_offsets",
                                "request i must have floor((prompt_len[i] + output_len[i]) / block_size) keys")
        if np.any(self.block_keys == -1):
            raise WorkloadError("workload.block_keys", "-1 is reserved for 'no key'")
        if self.model is not None:
            m = self.model
            if not isinstance(m, np.ndarray) or m.dtype != np.int32 or m.shape != (n,):
                raise WorkloadError("workload.model", f"must be a 1-D int32 array of {n} entries")
            if n and (int(m.min()) < 0 or int(m.max()) >= len(self.models)):
                raise WorkloadError("workload.model", f"ids must index workload.models ({len(self.models)} names)")
        self._validate_deadlines()
        ks = self.key_shared
        if ks is not None and (not isinstance(ks, np.ndarray) or ks.dtype != np.uint8
                               or ks.shape != self.block_keys.shape):
            raise WorkloadError("workload.key_shared", "must be None or a uint8 array shaped like block_keys")
        if self.source_ids is not None and len(self.source_ids) != n:
            raise WorkloadError("workload.source_ids", f"has {len(self.source_ids)} entries, expected {n}")

    @property
    def has_deadlines(self) -> bool:
        """True if the workload carries deadline columns (TTLs, shedding or retries)."""
        return self.ttl_us is not None

    def _validate_deadlines(self) -> None:
        """The deadline columns: all None, or each 1-D of its dtype and length, TTLs -1 or
        in 1 µs..MAX_TTL_S, sheddable 0/1, retries 0..MAX_RETRIES, one finite backoff row per
        client id (base >= 0 µs, factor >= 1, jitter 0..1) whose last retry waits at most
        MAX_BACKOFF_S (as a spec's: so no time overflows)."""
        given = [name for name in (*self.DEADLINE_COLUMNS, "retry_backoff") if getattr(self, name) is not None]
        if not given:
            return
        if len(given) != len(self.DEADLINE_COLUMNS) + 1:
            missing = [name for name in (*self.DEADLINE_COLUMNS, "retry_backoff") if name not in given]
            raise WorkloadError(f"workload.{missing[0]}", "the deadline columns ttl_us, sheddable, max_retries and "
                                                          "retry_backoff are given together or not at all")
        n = len(self)
        for name, dtype in self.DEADLINE_COLUMNS.items():
            a = getattr(self, name)
            if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != (n,):
                raise WorkloadError(f"workload.{name}", f"must be a 1-D {np.dtype(dtype).name} array of {n} entries")
        max_ttl_us = round(MAX_TTL_S * 1e6)  # (arrival + TTL and the retries' delays stay far inside int64)
        if n and (self.ttl_us.min() < -1 or self.ttl_us.max() > max_ttl_us or np.any(self.ttl_us == 0)):
            raise WorkloadError("workload.ttl_us", f"TTLs must be -1 (none) or 1..{max_ttl_us} µs "
                                                   f"({MAX_TTL_S:g} s)")
        if n and self.sheddable.max() > 1:
            raise WorkloadError("workload.sheddable", "entries must be 0 or 1")
        if n and (self.max_retries.min() < 0 or self.max_retries.max() > MAX_RETRIES):
            raise WorkloadError("workload.max_retries", f"entries must be 0..{MAX_RETRIES}")
        b = self.retry_backoff
        clients = int(self.column("client").max()) + 1 if n else 0
        if (not isinstance(b, np.ndarray) or b.dtype != np.float64 or b.ndim != 2 or b.shape[1] != S.N_RETRY_BACKOFF
                or b.shape[0] < clients):
            raise WorkloadError("workload.retry_backoff", f"must be a float64 array [clients, {S.N_RETRY_BACKOFF}] "
                                                          f"with a row for each of the {clients} client ids")
        base, factor, jitter = (b[:, c] for c in (S.RetryBackoff.BASE_US, S.RetryBackoff.FACTOR,
                                                   S.RetryBackoff.JITTER))
        if not (np.isfinite(b).all() and (base >= 0).all() and (base <= MAX_BACKOFF_S * 1e6).all()
                and (factor >= 1).all() and (factor <= MAX_BACKOFF_FACTOR).all() and (jitter >= 0).all()
                and (jitter <= 1).all()):
            raise WorkloadError("workload.retry_backoff", f"rows must be finite: base 0..{MAX_BACKOFF_S:g}e6 µs, "
                                                          f"factor 1..{MAX_BACKOFF_FACTOR:g}, jitter 0..1")
        if n:  # the last retry's delay of each client that retries, as a spec's retries are checked
            retries = np.zeros(len(b), np.int64)
            np.maximum.at(retries, self.column("client"), self.max_retries.astype(np.int64))
            last = base * factor ** np.maximum(retries - 1, 0) * (1 + jitter)
            if np.any((retries > 0) & (last > MAX_BACKOFF_S * 1e6)):
                raise WorkloadError("workload.retry_backoff", f"a client's last retry would wait "
                                                              f"base·factor^(retries-1)·(1+jitter) > "
                                                              f"{MAX_BACKOFF_S:g} s; lower its base, factor or "
                                                              f"retries")
