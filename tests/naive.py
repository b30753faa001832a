"""Slow, obviously correct pure-Python references for the kernels (STYLE §9).

Nothing here is fast or clever: sorted Python lists, dicts, one object per request.  Each
reference follows SEMANTICS.md literally, including the model choices documented in the
kernels:

- prefix keys are registered when a block is *allocated* (so a later request in the same
  step can already hit them);
- a block whose key is already cached in another block stays unkeyed;
- an admission reuses at most floor((target - 1) / bs) cached blocks, so the last prompt
  token is always computed;
- a preempted request re-prefills L + generated tokens, and the step that completes that
  re-prefill emits its next output token;
- a decode token that fits in the request's last block allocates nothing.

Used by test_heap.py, test_kvcache.py and test_batch_formation.py.
"""

from __future__ import annotations

# ----------------------------------------------------------------------------- event queue


class NaiveEventQueue:
    """A priority queue of events ordered by (time, priority, seq): a sorted Python list.

    ``seq`` is an insertion counter (FIFO among equal (time, priority)) unless given.
    """

    def __init__(self, capacity: int | None = None):
        self.items: list[tuple[int, int, int, int]] = []  # (time, priority, seq, payload)
        self.capacity = capacity
        self.next_seq = 0

    def __len__(self) -> int:
        return len(self.items)

    def push(self, time: int, priority: int, payload: int = -1, seq: int | None = None) -> bool:
        """Insert an event; False (and nothing changes) if the queue is at capacity."""
        if self.capacity is not None and len(self.items) >= self.capacity:
            return False
        if seq is None:
            seq = self.next_seq
        self.next_seq = max(self.next_seq, seq) + 1
        self.items.append((time, priority, seq, payload))
        self.items.sort(key=lambda e: (e[0], e[1], e[2]))
        return True

    def pop(self) -> tuple[int, int, int, int]:
        """Remove and return the smallest (time, priority, seq, payload)."""
        return self.items.pop(0)


# ----------------------------------------------------------------------------- KV cache


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class NaiveKVCache:
    """One instance's paged KV cache with prefix caching (SEMANTICS §6).

    Blocks are numbered 0..total-1.  ``free`` is the LRU free list as a Python list: the
    head (index 0) is taken first.  It starts as all blocks in index order ("virgin"
    blocks); released blocks are appended at the tail.  ``cache`` maps a prefix key to the
    block holding it; ``key[b]`` is None for an unkeyed block.  ``held[r]`` is the list of
    blocks request r holds, in token order.
    """

    def __init__(self, total: int, block_size: int, prefix_caching: bool = True):
        self.total = total
        self.bs = block_size
        self.prefix_caching = prefix_caching
        self.key: list[int | None] = [None] * total
        self.ref = [0] * total
        self.free = list(range(total))
        self.cache: dict[int, int] = {}
        self.held: dict[int, list[int]] = {}
        self.peak = 0

    # -- observables
    def free_count(self) -> int:
        return len(self.free)

    def allocated(self) -> int:
        return sum(1 for c in self.ref if c > 0)

    def blocks_of(self, r: int) -> list[int]:
        return list(self.held.get(r, []))

    def _note_peak(self) -> None:
        self.peak = max(self.peak, self.allocated())

    # -- operations
    def _take(self) -> int:
        """Take the LRU head; evicting a cached block forgets its key."""
        b = self.free.pop(0)
        if self.key[b] is not None:
            del self.cache[self.key[b]]
            self.key[b] = None
        self.ref[b] = 1
        return b

    def grow(self, r: int, keys: list[int], computed: int, n: int) -> bool:
        """Give request r room for n more tokens after ``computed``; all-or-nothing.

        Full prompt blocks completed by these tokens get their prefix key, unless the key
        is already cached (then the block stays unkeyed).  ``keys`` are r's prompt-block
        keys (one per *full* prompt block), so block j is a full prompt block iff
        j < len(keys).
        """
        blocks = self.held.setdefault(r, [])
        need = _ceil_div(computed + n, self.bs) - len(blocks)
        if need > len(self.free):
            return False
        for _ in range(max(need, 0)):
            blocks.append(self._take())
        self._note_peak()
        if self.prefix_caching:
            # blocks full after this chunk but not before: j in [computed // bs, (computed + n) // bs)
            for j in range(computed // self.bs, min((computed + n) // self.bs, len(keys))):
                b = blocks[j]
                if self.key[b] is None and keys[j] not in self.cache:
                    self.key[b] = keys[j]
                    self.cache[keys[j]] = b
        return True

    def admit(self, r: int, keys: list[int], target: int, budget: int, cap: int):
        """Admit request r (holding nothing) for a prefill of ``target`` tokens.

        Returns (n tokens to compute now, cached tokens) or None if the blocks are not free
        (then nothing changed).
        """
        assert not self.held.get(r), "admit of a request that holds blocks"
        hits: list[int] = []
        if self.prefix_caching:
            for j in range(min(len(keys), (target - 1) // self.bs)):
                b = self.cache.get(keys[j])
                if b is None:
                    break
                hits.append(b)
        cached = len(hits) * self.bs
        n = target - cached
        if cap > 0:
            n = min(n, cap)
        n = min(n, budget)
        need = _ceil_div(cached + n, self.bs) - len(hits)
        usable = [b for b in self.free if b not in hits]
        if need > len(usable):
            return None
        for b in hits:
            if self.ref[b] == 0:
                self.free.remove(b)
            self.ref[b] += 1
        self.held[r] = list(hits)
        self._note_peak()
        ok = self.grow(r, keys, cached, n)
        assert ok
        return n, cached

    def release(self, r: int) -> None:
        """Release all of r's blocks, last to first; a block reaching ref 0 goes to the tail."""
        for b in reversed(self.held.pop(r, [])):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free.append(b)


# ----------------------------------------------------------------------------- one instance


class _Req:
    def __init__(self, idx, arrival, prompt_len, output_len, keys, bs):
        self.idx = idx
        self.arrival = arrival
        self.L = prompt_len
        self.N = max(output_len, 1)  # N = 0 behaves as N = 1
        self.keys = list(keys)
        self.block_cap = _ceil_div(self.L + self.N - 1, bs)
        self.state = "pending"
        self.routed = -1
        self.queued = -1
        self.first_scheduled = -1
        self.first_token = -1
        self.last_token = -1
        self.generated = 0
        self.computed = 0
        self.target = 0
        self.preemptions = 0
        self.cached_tokens = 0
        self.itl_sum = 0


def naive_simulate_instance(arrival_us, prompt_len, output_len, keys, *, block_size, total_kv_blocks,
                            max_num_seqs=256, max_batched_tokens=2048, long_prefill_threshold=0,
                            alpha=(0.0, 0.0, 0.0), beta=(0.0, 0.0, 0.0), prefix_caching=True,
                            horizon=None, compat=False, admission_latency=0, routing_latency=0):
    """Simulate one instance (SEMANTICS §1-4, blackbox step time, FCFS, victim = last).

    ``keys[i]`` is the list of request i's prompt-block keys.  Returns a dict of per-request
    lists (``state`` as names, times in µs, -1 = never) and instance counters.
    """
    bs = block_size
    n = len(arrival_us)
    reqs = [_Req(i, int(arrival_us[i]), int(prompt_len[i]), int(output_len[i]), keys[i], bs) for i in range(n)]
    H = horizon
    kv = NaiveKVCache(total_kv_blocks, bs, prefix_caching)
    cap = long_prefill_threshold
    a2 = int(alpha[2])

    def executed(t):
        return H is None or t <= H

    # Cluster side: arrival -> admission decision -> routing decision -> Queued(t + q).
    # Equal latencies for everyone, so the routing order is the (stable) arrival order.
    rank = sorted(range(n), key=lambda i: (reqs[i].arrival, i))
    queued_events = []  # (time, routing rank, request)
    for pos, i in enumerate(rank):
        r = reqs[i]
        if not executed(r.arrival):
            continue
        r.state = "admitting"
        t_route = r.arrival + admission_latency + routing_latency
        if not executed(r.arrival + admission_latency) or not executed(t_route):
            continue
        r.state = "routed"
        r.routed = t_route
        t_queue = t_route + int(alpha[0] + alpha[1] * r.L)
        queued_events.append((t_queue, pos, r))
    queued_events.sort(key=lambda e: (e[0], e[1]))

    wq: list[_Req] = []
    batch: list[_Req] = []
    step_at = None  # start of the pending step, None = no step pending
    busy_until = 0
    stats = dict(steps=0, preemptions=0, dropped=0, injected=0, prefill_tokens=0, decode_tokens=0,
                 prefix_query_tokens=0, prefix_hit_tokens=0, batch_peak=0, wq_peak=0, last_step_end_us=0)
    qi = 0
    while True:
        # next event: a Queued event wins a tie with the Step (Queued < Step)
        tq = queued_events[qi][0] if qi < len(queued_events) else None
        if tq is not None and (step_at is None or tq <= step_at):
            if not executed(tq):
                break
            r = queued_events[qi][2]
            qi += 1
            stats["injected"] += 1
            if r.block_cap > total_kv_blocks:
                r.state = "dropped_unservable"
                stats["dropped"] += 1
                continue
            r.state = "queued"
            r.queued = tq
            wq.append(r)
            stats["wq_peak"] = max(stats["wq_peak"], len(wq))
            if step_at is None:
                step_at = tq if compat else max(tq, busy_until)
            continue
        if step_at is None or not executed(step_at):
            break
        now = step_at
        step_at = None

        # --- batch formation (SEMANTICS §3.2)
        budget = max_batched_tokens
        work: dict[int, int] = {}
        prefill_tokens = 0
        decodes = 0
        preempted = False
        k = 0
        while k < len(batch):
            if budget == 0:
                break
            r = batch[k]
            remaining = r.target - r.computed
            if remaining > 0:
                m = remaining
                if cap > 0:
                    m = min(m, cap)
                m = min(m, budget)
            else:
                m = 1
            left_batch = False
            while not kv.grow(r.idx, r.keys, r.computed, m):
                victim = batch.pop()  # victim = the last request of the batch
                kv.release(victim.idx)
                victim.computed = 0
                victim.state = "queued"
                victim.preemptions += 1
                stats["preemptions"] += 1
                wq.insert(0, victim)
                stats["wq_peak"] = max(stats["wq_peak"], len(wq))
                preempted = True
                if victim is r:
                    left_batch = True
                    break
            if left_batch:
                break
            work[r.idx] = m
            budget -= m
            if remaining > 0:
                prefill_tokens += m
            else:
                decodes += 1
            k += 1
        if not preempted:
            while wq and len(batch) < max_num_seqs and budget > 0:
                r = wq[0]
                r.target = r.L + r.generated
                res = kv.admit(r.idx, r.keys, r.target, budget, cap)
                if res is None:
                    break  # strict head-of-line
                m, cached = res
                wq.pop(0)
                batch.append(r)
                r.state = "running"
                r.computed = cached
                work[r.idx] = m
                if r.first_scheduled < 0:
                    r.first_scheduled = now
                    r.cached_tokens = cached
                stats["prefix_query_tokens"] += r.target
                stats["prefix_hit_tokens"] += cached
                budget -= m
                prefill_tokens += m
        stats["batch_peak"] = max(stats["batch_peak"], len(batch))
        if not batch:
            if wq:
                raise RuntimeError("stall: waiting requests but an empty batch")
            continue

        # --- execution (SEMANTICS §3.3-5)
        dt = int(beta[0] + beta[1] * prefill_tokens + beta[2] * decodes)
        stats["steps"] += 1
        stats["prefill_tokens"] += prefill_tokens
        stats["decode_tokens"] += decodes
        end = now + dt
        token_time = end + a2
        survivors = []
        for r in batch:
            m = work.get(r.idx, 0)
            if m > 0:
                r.computed += m
                if r.computed >= r.target:  # prefill done (or recomputed), or a decode
                    if r.first_token < 0:
                        r.first_token = token_time
                    else:
                        r.itl_sum += (dt + a2) if compat else token_time - r.last_token
                    r.last_token = token_time
                    r.generated += 1
                    if r.generated >= r.N:
                        if compat:
                            r.itl_sum += dt + a2
                        kv.release(r.idx)
                        r.state = "completed"
                        continue
            survivors.append(r)
        batch = survivors
        busy_until = end
        stats["last_step_end_us"] = end
        if batch or wq:
            step_at = end

    out = {f: [getattr(r, a) for r in reqs] for f, a in (
        ("state", "state"), ("routed_us", "routed"), ("queued_us", "queued"),
        ("first_scheduled_us", "first_scheduled"), ("first_token_us", "first_token"),
        ("last_token_us", "last_token"), ("generated", "generated"), ("preemptions", "preemptions"),
        ("cached_tokens", "cached_tokens"), ("itl_sum_us", "itl_sum"))}
    stats["kv_peak_allocated"] = kv.peak
    stats["kv_allocated_end"] = kv.allocated()
    out["instance"] = stats
    return out


# The reference's output fields, in its order (SEMANTICS §9; BLIS's metrics object and
# per-request records): our summaries and results files must start with them.
SUMMARY_HEAD = [
    "instance_id", "completed_requests", "still_queued", "still_running", "injected_requests",
    "total_input_tokens", "total_output_tokens", "vllm_estimated_duration_s", "responses_per_sec",
    "tokens_per_sec", "e2e_mean_ms", "e2e_p90_ms", "e2e_p95_ms", "e2e_p99_ms", "ttft_mean_ms",
    "ttft_p90_ms", "ttft_p95_ms", "ttft_p99_ms", "itl_mean_ms", "itl_p90_ms", "itl_p95_ms", "itl_p99_ms",
    "scheduling_delay_p99_ms", "preemption_count", "dropped_unservable",
]
REQUEST_FIELDS = ["requestID", "arrived_at", "num_prefill_tokens", "num_decode_tokens", "ttft_ms", "itl_ms",
                  "e2e_ms", "scheduling_delay_ms", "handled_by"]


def random_prompts(rng, n, bs, n_families, vocab, max_suffix, p_family):
    """n prompts (token-id lists) with natural prefix sharing, for randomized tests: a
    shared prefix family (tiny vocabulary) + suffix, exact repeats (whole-prompt cache
    hits) and block-aligned lengths (where the last-token rule matters)."""
    families = [[int(t) for t in rng.integers(0, vocab, int(rng.integers(0, 3 * bs + 1)))] for _ in range(n_families)]
    prompts = []
    for _ in range(n):
        if prompts and rng.random() < 0.2:  # an exact repeat: a whole-prompt cache hit
            prompts.append(list(prompts[int(rng.integers(0, len(prompts)))]))
            continue
        fam = families[int(rng.integers(0, n_families))] if rng.random() < p_family else []
        p = fam + [int(t) for t in rng.integers(0, vocab, int(rng.integers(0 if fam else 1, max_suffix)))]
        if len(p) > bs and rng.random() < 0.3:  # whole blocks only
            p = p[: len(p) // bs * bs]
        prompts.append(p)
    return prompts


# ----------------------------------------------------------------------------- test helpers


def prompts_workload(arrivals, prompts, outputs, bs=16, **attrs):
    """A Workload from explicit prompt token lists; ``attrs`` (tenant=, slo_class=, ...) are
    int32 columns."""
    import dataclasses

    import numpy as np

    from blis_fast.workload import Workload

    toks = [np.asarray(p, np.int64) for p in prompts]
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in toks])]).astype(np.int64)
    wl = Workload.from_tokens(np.asarray(arrivals, np.int64), np.concatenate(toks), offsets,
                              np.asarray(outputs, np.int64), bs)
    if attrs:
        wl = dataclasses.replace(wl, **{k: np.asarray(v, np.int32) for k, v in attrs.items()})
    return wl


def lengths_workload(arrivals, lens, outputs, bs=16, seed=99, **attrs):
    """A Workload of distinct random prompts with the given lengths."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return prompts_workload(arrivals, [rng.integers(0, 128_000, int(n)) for n in lens], outputs, bs, **attrs)


def engine_overrides(cfg, compat="blis-2026.02"):
    """The flat simulate() settings of a naive_simulate_instance configuration dict."""
    return dict(
        block_size_in_tokens=cfg["block_size"], total_kv_blocks=cfg["total_kv_blocks"],
        max_num_running_reqs=cfg["max_num_seqs"], max_num_scheduled_tokens=cfg["max_batched_tokens"],
        long_prefill_token_threshold=cfg["long_prefill_threshold"], alpha_coeffs=cfg["alpha"],
        beta_coeffs=cfg["beta"], enable_prefix_caching=cfg["prefix_caching"], horizon=cfg["horizon"],
        compat=compat if cfg["compat"] else None, admission_latency=cfg["admission_latency"],
        routing_latency=cfg["routing_latency"], check_invariants=True,
    )
