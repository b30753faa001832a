"""Reference for kernels/engine/: one instance's whole engine (queueing, batch formation,
preemption, execution, ITL bookkeeping) written literally from docs/semantics.md §1-6."""

from __future__ import annotations

from naive.kv import NaiveKVCache, _ceil_div  # noqa: F401


class _Req:
    def __init__(self, idx, arrival, prompt_len, output_len, keys, bs):
        self.idx = idx
        self.arrival = arrival
        self.L = prompt_len
        self.N = max(output_len, 1)  # N = 0 behaves as N = 1
        self.N_requested = output_len
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
    """Simulate one instance (docs/semantics.md §1-4, blackbox step time, FCFS, victim = last).

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

        # --- batch formation (docs/semantics.md §3.2)
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
                res = kv.admit(r.idx, r.keys, r.target, budget, cap, reuse_all=compat and r.generated == 0)
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

        # --- execution (docs/semantics.md §3.3-5)
        dt = int(beta[0] + beta[1] * prefill_tokens + beta[2] * decodes)
        stats["steps"] += 1
        stats["prefill_tokens"] += prefill_tokens
        stats["decode_tokens"] += decodes
        end = now + dt
        token_time = end + a2
        survivors = []
        for r in batch:
            m = work.get(r.idx, 0)
            if m > 0 or (r.first_token < 0 and r.computed >= r.target):  # compat: a fully cached prompt
                r.computed += m
                if r.computed >= r.target:  # prefill done (or recomputed), or a decode
                    if r.first_token < 0:
                        r.first_token = token_time
                    else:
                        r.itl_sum += (dt + a2) if compat else token_time - r.last_token
                    r.last_token = token_time
                    r.generated += 1
                    if r.generated >= r.N:
                        if compat and r.N_requested > 0:
                            # the reference: one more sample, and the last token's KV written
                            r.itl_sum += dt + a2
                            kv.grow(r.idx, r.keys, r.computed, 1)
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


