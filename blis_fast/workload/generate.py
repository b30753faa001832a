"""Requests from a workload spec (``generate_from_spec``), vectorized per client.

Pipeline (docs/workloads.md has the user-facing description):

1. Prefix groups: each group draws its ``count`` prefix lengths and their token ids (uniform
   in [0, 128000)) from its own stream ``workload.prefix_group.<name>.*`` (inline groups:
   ``workload.client.<client>.prefix.*``).
2. Per client, all from streams ``workload.client.<name>.<quantity>`` (so adding or
   changing a client never changes another client's requests):
   - independent arrivals (session starts) in [start_s, min(end_s, window)): the arrival
     process generates gaps in *operational time* at multiplier 1, and the load profile
     maps them to wall-clock time by time rescaling t = Λ⁻¹(Λ(start_s) + τ) (sampling.
     LoadProfile); trace timestamps are used as they are;
   - per session: number of turns, the first prompt (shared prefix + prompt_tokens), and
     per turn: output tokens, and for later turns the new user tokens and the think time;
     turn t+1's prompt = turn t's prompt + turn t's output + new user tokens;
   - a 64-bit content seed per request (the keys of its fresh blocks: the non-shared
     prompt blocks and all output blocks, kernels/workload/keys.py).
3. Merge: sessions sorted by (first arrival µs, client index, index within the client);
   each session's turns laid out consecutively; later turns are closed-loop followers
   (arrival_us = -1, released follow_delay_us after their predecessor's last token).
4. ``num_requests`` keeps the first N requests of that order.

Every sampler draws sequentially from its stream, so a longer window only appends
requests: the requests before time T are the same for any window >= T.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from blis_fast.config import memory
from blis_fast.config.validate import MAX_REQUEST_TOKENS, MAX_REQUESTS
from blis_fast.errors import WorkloadError
from blis_fast.rng import subsystem_rng
from blis_fast.workload import sampling as S
from blis_fast.workload.distribution import MAX_TOKEN_ID, round_half_away
from blis_fast.workload.spec import ClientSpec, Distribution, WorkloadSpec
from blis_fast.workload.workload import KEY_BYTES, Workload, charge_keys

_MAX_S = 2.0**62 / 1e6  # the µs clock must not overflow
GEN_BYTES_PER_REQUEST = 320  # working set of generation per request (columns, merge copies, temporaries)
REQUEST_BYTES = sum(np.dtype(t).itemsize for t in (np.int64,) * 10 + (np.int32,) * 5)  # a Requests row
PREFIX_TOKEN_BYTES = 16  # a prefix token id, and its copy when the prefixes are hashed


class Streams:
    """Named generators under one prefix, each created once: ``streams("prompt_tokens")`` is
    subsystem_rng(seed, "<prefix>.prompt_tokens") (and keeps its position across calls)."""

    def __init__(self, seed: int, prefix: str, cache: dict | None = None):
        self.seed, self.prefix = seed, prefix
        self._cache = {} if cache is None else cache

    def __call__(self, name: str) -> np.random.Generator:
        full = f"{self.prefix}.{name}"
        if full not in self._cache:
            self._cache[full] = subsystem_rng(self.seed, full)
        return self._cache[full]

    def sub(self, name: str) -> "Streams":
        """The streams under ``<prefix>.<name>``."""
        return Streams(self.seed, f"{self.prefix}.{name}", self._cache)


def sample(dist: Distribution, n: int, streams: Streams, name: str, integer: bool) -> np.ndarray:
    """n values of ``dist`` clamped to [min, max]; integer=True rounds half away from zero
    to int64 (token counts, turns).  Single-ingredient distributions draw from stream
    ``name``; the mixture from ``name.mix``, ``name.pareto``, ``name.lognormal``."""
    t = dist.type
    if n == 0:
        x = np.empty(0)
    elif t == "constant":
        x = np.full(n, dist.value)
    elif t == "gaussian":
        x = S.sample_gaussian(streams(name), n, dist.mean, dist.std)
    elif t == "exponential":
        x = S.sample_exponential(streams(name), n, dist.mean)
    elif t == "uniform":
        x = S.sample_uniform(streams(name), n, dist.min, dist.max)
    elif t == "lognormal":
        x = S.sample_lognormal(streams(name), n, dist.mu, dist.sigma)
    elif t == "pareto_lognormal":
        x = S.sample_pareto_lognormal(streams.sub(name), n, dist.pareto_weight, dist.alpha, dist.scale,
                                      dist.mu, dist.sigma)
    elif dist.probs is not None:
        x = S.sample_empirical_cdf(streams(name), n, dist.values, dist.probs)
    else:
        x = S.sample_discrete(streams(name), n, dist.values, dist.weights)
    with np.errstate(over="ignore", invalid="ignore"):  # extreme draws (exp overflow) are clamped below
        x = np.clip(x, dist.min if dist.min is not None else -np.inf, dist.max if dist.max is not None else np.inf)
    if np.isnan(x).any():
        raise WorkloadError(dist.path, "its parameters make draws that are not numbers (NaN)")
    if integer:
        if x.size and not (np.abs(x).max() < 2.0**62):
            raise WorkloadError(dist.path, "draws beyond 2^62: give it a max")
        return round_half_away(x).astype(np.int64)
    return x.astype(np.float64, copy=False)


# ----------------------------------------------------------------------------- arrivals


def _chunk(expected: float) -> int:
    return int(min(max(expected * 1.05 + 10 * math.sqrt(max(expected, 0)) + 64, 64), 1 << 24))


def _too_many(c: ClientSpec) -> WorkloadError:
    return WorkloadError(f"{c.path}.rate", f"{c.rate:g} req/s over the window gives more than {MAX_REQUESTS} requests")


def _renewal_times(c: ClientSpec, streams: Streams, span: float) -> np.ndarray:
    """Operational arrival times in (0, span) of a rate-driven renewal process: cumulative
    gaps, the first arrival after one gap.  Gaps are drawn in chunks; the cumulative sum
    carries the last time into the next chunk in the same order of additions, so the
    result does not depend on the chunking."""
    a, rate = c.arrival, c.rate
    if span * rate > MAX_REQUESTS * 1.5:
        raise _too_many(c)
    memory.check(span * rate * GEN_BYTES_PER_REQUEST, f"{c.path}: {span * rate:.3g} expected requests",
                 "shorten the window or lower the rate")
    if a.type == "constant":
        if span * rate > MAX_REQUESTS:
            raise _too_many(c)
        n = int(math.floor(span * rate)) + 2
        t = np.arange(1, n + 1, dtype=np.float64) / rate
        return t[t < span]
    rng = streams("arrivals")
    out, last, total = [], 0.0, 0
    size = _chunk(span * rate)
    while last < span:
        if a.type == "poisson":
            gaps = S.poisson_gaps(rng, size, rate)
        elif a.type == "gamma":
            gaps = S.gamma_gaps(rng, size, rate, a.cv)
        else:
            gaps = S.weibull_gaps(rng, size, rate, a.cv)
        t = np.cumsum(np.concatenate(([last], gaps)))[1:]
        last = float(t[-1])
        out.append(t)
        total += size
        if total > MAX_REQUESTS:
            raise _too_many(c)
    t = np.concatenate(out) if out else np.empty(0)
    return t[t < span]


def _bursty_times(c: ClientSpec, streams: Streams, span: float) -> np.ndarray:
    """Operational arrival times of an on/off process: burst j starts one interval after
    burst j-1 (interval ~ burst_interval_s, or, without it, Exp(1)·B_j/rate so the long-run
    rate is rate), holds B_j ~ burst_size requests, spaced by burst_gap_s (default 0)."""
    a = c.arrival
    sizes_out, starts_out, last, total = [], [], 0.0, 0
    if a.burst_interval_s is not None:
        expected = span / max(a.burst_interval_s.approx_mean(), 1e-9)
    else:
        expected = span * c.rate / max(a.burst_size.approx_mean(), 1.0)
    if expected * a.burst_size.approx_mean() > MAX_REQUESTS * 1.5:
        raise WorkloadError(a.path, f"generates more than {MAX_REQUESTS} requests in the window")
    memory.check(expected * max(a.burst_size.approx_mean(), 1.0) * GEN_BYTES_PER_REQUEST,
                 f"{a.path}: {expected * a.burst_size.approx_mean():.3g} expected requests",
                 "shorten the window or make the bursts smaller")
    size = _chunk(expected)
    while last < span:
        b = np.maximum(sample(a.burst_size, size, streams, "burst_size", True), 1)
        if a.burst_interval_s is not None:
            gaps = sample(a.burst_interval_s, size, streams, "arrivals", False)
        else:
            gaps = streams("arrivals").standard_exponential(size) * b / c.rate
        t = np.cumsum(np.concatenate(([last], gaps)))[1:]
        last = float(t[-1])
        sizes_out.append(b)
        starts_out.append(t)
        total += int(b.sum())
        if total > MAX_REQUESTS:
            raise WorkloadError(a.path, f"generates more than {MAX_REQUESTS} requests in the window")
    starts = np.concatenate(starts_out)
    sizes = np.concatenate(sizes_out)
    keep = starts < span
    starts, sizes = starts[keep], sizes[keep]
    n = int(sizes.sum())
    first = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    inner = np.zeros(n)
    if a.burst_gap_s is not None and n > len(sizes):
        not_first = np.ones(n, bool)
        not_first[first] = False
        inner[not_first] = sample(a.burst_gap_s, n - len(sizes), streams, "burst_gap", False)
    cs = np.cumsum(inner)
    offsets = cs - np.repeat(cs[first], sizes)
    t = np.repeat(starts, sizes) + offsets
    t = t[t < span]
    return np.sort(t, kind="stable")


def arrival_times(c: ClientSpec, streams: Streams, start: float, end: float,
                  profile: S.LoadProfile | None) -> np.ndarray:
    """Wall-clock arrival times (s, sorted) of client ``c`` in [start, end)."""
    a = c.arrival
    if a.type == "trace":
        t = a.times_s + c.start_s
        return t[(t >= start) & (t < end)]
    if a.needs_rate and not c.rate:
        return np.empty(0)
    if profile is None:
        lam0, span = start, end - start
    else:
        lam0 = float(profile.integral(start))
        span = float(profile.integral(end)) - lam0
    if not span > 0:
        return np.empty(0)
    tau = _bursty_times(c, streams, span) if a.type == "bursty" else _renewal_times(c, streams, span)
    t = start + tau if profile is None else profile.invert(lam0 + tau)
    return t[(t >= start) & (t < end)]


# ----------------------------------------------------------------------------- requests


@dataclass(eq=False)
class Requests:
    """Block-size-independent per-request table of a workload: the data of a rich trace
    (``trace_format``), turned into a ``Workload`` (with sequence-block keys) by
    ``to_workload(block_size)``.

    arrival_us int64 (-1: closed-loop follower); client, tenant, slo_class, priority_class
    int32 ids (names in ``names``); session int64 (-1 none), turn int32; prompt_len,
    output_len int64 tokens; prefix_id int64: the shared prefix the session's first prompt
    starts with (-1 none; id into ``prefix_tokens``), prefix_len int64 its tokens (0 none);
    content_seed int64: seed of the request's fresh blocks (prompt and output);
    next_request int64 (-1 none), follow_delay_us int64.
    """

    columns: dict[str, np.ndarray]
    names: dict[str, list[str]]
    slo_targets: dict[str, dict]
    prefix_tokens: list[np.ndarray]  # token ids of each shared prefix (index = prefix_id)
    header: dict = field(default_factory=dict)
    # explicit token ids (a trace's prompt_token_ids / output_token_ids): {"prompt": flat
    # int64, "prompt_offsets": int64[n+1], and optionally "output", "output_offsets"}
    token_ids: dict | None = None
    # the served model each request asks for (a spec client's ``model:``; "" = the first
    # deployment's), an object array of names; None when no client names a model (the
    # trace then has no model column, and its bytes are as before)
    model: np.ndarray | None = None

    COLUMNS = {
        "arrival_us": np.int64, "client": np.int32, "tenant": np.int32, "slo_class": np.int32,
        "priority_class": np.int32, "session": np.int64, "turn": np.int32, "prompt_len": np.int64,
        "output_len": np.int64, "prefix_id": np.int64, "prefix_len": np.int64, "content_seed": np.int64,
        "next_request": np.int64, "follow_delay_us": np.int64,
    }

    def __len__(self) -> int:
        return int(self.columns["arrival_us"].shape[0])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def parents(self) -> np.ndarray:
        """For each request, the previous turn of its session (the request whose prompt +
        output its prompt extends), else -1."""
        n = len(self)
        sess, turn = self["session"], self["turn"]
        parent = np.full(n, -1, np.int64)
        idx = np.flatnonzero(sess >= 0)
        if idx.size:
            o = idx[np.lexsort((turn[idx], sess[idx]))]
            same = sess[o[1:]] == sess[o[:-1]]
            parent[o[1:][same]] = o[:-1][same]
        return parent

    def to_workload(self, block_size: int, description: dict | None = None, validate: bool = True) -> Workload:
        """The Workload: keys of each request's sequence blocks (prompt, then output) for
        ``block_size``, and ``key_shared`` (see kernels/workload/keys.py for why the keys
        equal those of the real token sequences where content is shared).  A later turn's
        prompt extends the previous turn's prompt + output, so its leading blocks are the
        previous turn's sequence blocks.  ``validate=False`` skips ``Workload.validate``
        (for tables valid by construction)."""
        from blis_fast_kernels.native import chain_sequence_keys, hash_chain_states  # deferred: blis_fast_kernels.native

        bs = int(block_size)
        if bs < 1:
            raise WorkloadError("block_size", f"must be >= 1, got {block_size}")
        if self.token_ids is not None:
            return self._workload_from_ids(bs, description)
        n = len(self)
        toks = [np.asarray(t, np.int64) for t in self.prefix_tokens]
        t_offs = np.zeros(len(toks) + 1, np.int64)
        np.cumsum([len(t) for t in toks], out=t_offs[1:])
        flat = np.concatenate(toks) if toks else np.empty(0, np.int64)
        with np.errstate(over="ignore"):  # uint64 wrap-around is intended (NUMBA_DISABLE_JIT)
            g_states, g_offs = hash_chain_states(flat, t_offs, np.int64(bs))
            parent = self.parents()
            ar = np.arange(n)
            order = ar if np.all(parent < ar) else np.argsort(self["turn"], kind="stable").astype(np.int64)
            key_offsets = np.zeros(n + 1, np.int64)
            np.cumsum((self["prompt_len"] + self["output_len"]) // bs, out=key_offsets[1:])
            charge_keys(int(key_offsets[-1]), bs)
            keys = np.empty(int(key_offsets[-1]), np.int64)
            shared = np.empty(keys.shape[0], np.uint8)
            chain_sequence_keys(key_offsets, self["prompt_len"] // bs, parent, self["prefix_id"],
                                np.ascontiguousarray(self["content_seed"]), order, g_states, g_offs, keys, shared)
        c = self.columns
        wl = Workload(
            arrival_us=c["arrival_us"], prompt_len=c["prompt_len"], output_len=c["output_len"],
            block_keys=keys, key_offsets=key_offsets, block_size=bs,
            description=dict(description if description is not None else self.header.get("description", {})),
            tenant=c["tenant"], slo_class=c["slo_class"], priority_class=c["priority_class"], client=c["client"],
            session=c["session"], turn=c["turn"], next_request=c["next_request"],
            follow_delay_us=c["follow_delay_us"],
            names={k: list(v) for k, v in self.names.items()}, slo_targets=dict(self.slo_targets),
            key_shared=shared,
        )
        if validate:
            wl.validate()
        return wl

    def _workload_from_ids(self, bs: int, description: dict | None) -> Workload:
        """to_workload with explicit prompt (and maybe output) token ids: keys hashed from
        them (Workload.from_tokens; without output ids the output blocks are fresh, from
        the content seeds), sharing found by value (key_shared left None); always
        validated."""
        t = self.token_ids
        c = self.columns
        return Workload.from_tokens(
            c["arrival_us"], t["prompt"], t["prompt_offsets"], c["output_len"], bs,
            description=dict(description if description is not None else self.header.get("description", {})),
            output_tokens=t.get("output"), output_offsets=t.get("output_offsets"), content_seed=c["content_seed"],
            tenant=c["tenant"], slo_class=c["slo_class"], priority_class=c["priority_class"], client=c["client"],
            session=c["session"], turn=c["turn"], next_request=c["next_request"],
            follow_delay_us=c["follow_delay_us"], names={k: list(v) for k, v in self.names.items()},
            slo_targets=dict(self.slo_targets),
        )


def _names(spec: WorkloadSpec) -> dict[str, list[str]]:
    def uniq(xs):
        return list(dict.fromkeys(xs))

    slo = list(spec.slo_classes)
    slo += [s for s in uniq(c.slo_class for c in spec.clients) if s not in slo]
    prio = list(spec.priority_classes) or uniq(c.priority_class for c in spec.clients)
    return {"client": [c.name for c in spec.clients], "tenant": uniq(c.tenant for c in spec.clients),
            "slo_class": slo, "priority_class": prio}


def prefix_tables(groups: dict, seed: int):
    """Per prefix group of ``groups`` (name -> PrefixGroupSpec): (first prefix id, lengths
    int64[count], the spec); plus all prefix token arrays and their names.  A group's
    lengths and tokens come from its own stream: the same in every workload of that seed
    (a workload spec's, an agent scenario's llm nodes)."""
    base, tokens, names, info = 0, [], [], {}
    for name, g in groups.items():
        st = Streams(seed, g.stream)
        lens = np.maximum(sample(g.length, g.count, st, "length", True), 1)
        memory.charge(int(lens.sum()) * PREFIX_TOKEN_BYTES, f"{g.path}: {g.count} prefixes of "
                      f"{int(lens.sum())} tokens in all", "make the prefixes shorter or fewer")
        tok = st("tokens").integers(0, MAX_TOKEN_ID, size=int(lens.sum()), dtype=np.int64)
        offs = np.concatenate(([0], np.cumsum(lens)))
        tokens += [tok[offs[k]:offs[k + 1]] for k in range(g.count)]
        names += [f"{name}[{k}]" for k in range(g.count)]
        info[name] = (base, lens, g)
        base += g.count
    return info, tokens, names


def _client_block(c: ClientSpec, spec: WorkloadSpec, seed: int, t_end: float, prefixes: dict,
                  tally: list[int] | None = None) -> dict | None:
    """One client's sessions and requests (session-major) in the window [0, t_end);
    ``tally[0]``: bytes the generation so far works with (checked against the memory
    budget before each client's requests are drawn)."""
    tally = [0] if tally is None else tally
    st = Streams(seed, c.stream)
    end = t_end if c.end_s is None else min(c.end_s, t_end)
    if end <= c.start_s:
        return None
    lp = c.load_profile or spec.load_profile
    profile = lp.build() if lp is not None else None
    times = arrival_times(c, st, c.start_s, end, profile)
    if times.size and times[-1] >= _MAX_S:
        raise WorkloadError(f"{c.path}.arrival", "arrival times overflow the µs clock")
    n_sess = times.shape[0]
    start_us = round_half_away(times * 1e6).astype(np.int64)
    sess = c.session
    if sess is not None:
        turns = np.maximum(sample(sess.turns, n_sess, st, "session.turns", True), 1)
    else:
        turns = np.ones(n_sess, np.int64)
    n = int(turns.sum())
    if n > MAX_REQUESTS:
        raise WorkloadError(c.path, f"generates more than {MAX_REQUESTS} requests")
    memory.check(n * GEN_BYTES_PER_REQUEST + tally[0], f"{c.path}: generating {n} requests",
                 "shorten the window or lower the rate / turns")
    tally[0] += n * GEN_BYTES_PER_REQUEST
    first = np.zeros(n_sess, np.int64)
    np.cumsum(turns[:-1], out=first[1:])
    turn = np.arange(n, dtype=np.int64) - np.repeat(first, turns)
    later = turn > 0
    out = np.maximum(sample(c.output_tokens, n, st, "output_tokens", True), 0)
    inc = np.empty(n, np.int64)
    inc[first] = np.maximum(sample(c.prompt_tokens, n_sess, st, "prompt_tokens", True), 0)
    delay_before = np.zeros(n, np.int64)
    if n > n_sess:
        user = sample(sess.user_tokens or c.prompt_tokens, n - n_sess, st, "session.user_tokens", True)
        later_idx = np.flatnonzero(later)
        inc[later_idx] = out[later_idx - 1] + np.maximum(user, 0)
        think = sample(sess.think_time_s, n - n_sess, st, "session.think_time_s", False)
        delay_before[later_idx] = round_half_away(np.maximum(think, 0) * 1e6).astype(np.int64)
    prefix_id = np.full(n_sess, -1, np.int64)
    prefix_len = np.zeros(n_sess, np.int64)
    if c.prefix_group is not None and n_sess:
        base, lens, g = prefixes[c.prefix_group]
        use = st("prefix.reuse").random(n_sess) < c.reuse_probability
        k = S.sample_discrete(st("prefix.choice"), n_sess, np.arange(g.count), g.popularity)
        prefix_id = np.where(use, base + k, -1)
        prefix_len = np.where(use, lens[k], 0)
    inc[first] += prefix_len
    cs = np.cumsum(inc)
    prompt = cs - np.repeat(cs[first] - inc[first], turns)
    content = st("content").bit_generator.random_raw(n).view(np.int64)
    keep = np.ones(n, bool)
    if sess is not None and sess.max_prompt_tokens is not None:
        keep = ~later | (prompt <= sess.max_prompt_tokens)  # prompts grow within a session
    if not keep.all():
        turns = np.add.reduceat(keep.astype(np.int64), first) if n_sess else turns
        turn, prompt, out, delay_before, content = (a[keep] for a in (turn, prompt, out, delay_before, content))
    if prompt.size and int((prompt + out).max()) > MAX_REQUEST_TOKENS:
        bad = "session.max_prompt_tokens" if sess is not None else "prompt_tokens"
        raise WorkloadError(f"{c.path}.{bad}", f"a request would hold more than {MAX_REQUEST_TOKENS} prompt + output "
                                               "tokens; lower the lengths" + (" or set session.max_prompt_tokens"
                                                                              if sess is not None else ""))
    return {
        "start_us": start_us, "turns": turns, "is_session": sess is not None,
        "prefix_id": prefix_id, "prefix_len": prefix_len,
        "turn": turn, "prompt_len": prompt, "output_len": out, "delay_before": delay_before, "content_seed": content,
    }


def _window_guess(spec: WorkloadSpec) -> float:
    """A window expected to hold somewhat more than num_requests requests."""
    n = spec.num_requests
    per_s = 0.0
    for c in spec.clients:
        turns = c.session.turns.approx_mean() if c.session is not None else 1.0
        a = c.arrival
        if a.type == "trace":
            continue
        if a.type == "bursty" and a.burst_interval_s is not None:
            r = a.burst_size.approx_mean() / max(a.burst_interval_s.approx_mean(), 1e-9)
        else:
            r = c.rate or 0.0
        per_s += r * max(turns, 1.0)
    traces = [c.arrival.times_s[-1] + c.start_s for c in spec.clients if c.arrival.type == "trace" and c.arrival.times_s.size]
    if per_s <= 0:
        return max(traces) + 1.0 if traces else 1.0
    tau = n / per_s * 1.05 + 1.0
    if spec.load_profile is not None:
        t = float(spec.load_profile.build().invert(tau))
        tau = t if math.isfinite(t) else tau
    return tau


def _window_bound(spec: WorkloadSpec) -> float:
    """Beyond this time no client can send anything more (inf if some client never stops)."""
    ends = []
    for c in spec.clients:
        if c.arrival.type == "trace":
            ends.append(c.start_s + (float(c.arrival.times_s[-1]) if c.arrival.times_s.size else 0.0) + 1e-6)
        elif c.end_s is not None:
            ends.append(c.end_s)
        else:
            return math.inf
    return max(ends) if ends else 0.0


def generate_requests(spec: WorkloadSpec, seed: int | None = None) -> Requests:
    """The Requests of ``spec`` under ``seed`` (default: the spec's seed, else 42)."""
    seed = spec.effective_seed if seed is None else int(seed)
    if seed < 0:
        raise WorkloadError("seed", f"must be >= 0, got {seed}")
    check_expected_size(spec)
    names = _names(spec)
    prefixes, prefix_tokens, prefix_names = prefix_tables(spec.prefix_groups, seed)
    if spec.duration_s is not None:
        tally = [0]
        blocks = [_client_block(c, spec, seed, spec.duration_s, prefixes, tally) for c in spec.clients]
    else:
        t_end, bound = _window_guess(spec), _window_bound(spec)
        while True:
            blocks, tally = None, [0]  # (the previous attempt's requests are dropped first)
            blocks = [_client_block(c, spec, seed, t_end, prefixes, tally) for c in spec.clients]
            got = sum(int(b["turns"].sum()) for b in blocks if b is not None)
            if got >= spec.num_requests or t_end >= bound or t_end > _MAX_S / 4:
                break
            t_end = min(t_end * 2, bound) if math.isfinite(bound) else t_end * 2
    cols = _merge(spec, names, blocks)
    if spec.num_requests is not None and len(cols["arrival_us"]) > spec.num_requests:
        cols = {k: v[: spec.num_requests] for k, v in cols.items()}
        last = spec.num_requests - 1
        if cols["next_request"][last] >= 0:
            cols["next_request"][last] = -1
            cols["follow_delay_us"][last] = 0
    cols = {k: np.ascontiguousarray(v, dtype=Requests.COLUMNS[k]) for k, v in cols.items()}
    memory.charge(len(cols["arrival_us"]) * REQUEST_BYTES, f"the workload's {len(cols['arrival_us'])} requests")
    header = {
        "format": "blis-fast-trace", "version": 1, "seed": seed, "source": spec.source, "workload": spec.raw,
        "description": {"kind": "spec", "source": spec.source, "seed": seed, "clients": names["client"]},
    }
    return Requests(cols, {**names, "prefix": prefix_names}, dict(spec.slo_classes), prefix_tokens, header)


def _merge(spec: WorkloadSpec, names: dict, blocks: list) -> dict[str, np.ndarray]:
    """Sessions of all clients in (first arrival, client, index) order, each session's turns
    consecutive; closed-loop links between consecutive turns."""
    tenant_id = {t: i for i, t in enumerate(names["tenant"])}
    slo_id = {s: i for i, s in enumerate(names["slo_class"])}
    prio_id = {p: i for i, p in enumerate(names["priority_class"])}
    s_cols = {k: [] for k in ("start_us", "turns", "client", "local", "is_session", "prefix_id", "prefix_len")}
    r_cols = {k: [] for k in ("turn", "prompt_len", "output_len", "delay_before", "content_seed")}
    for c, b in zip(spec.clients, blocks):
        if b is None or b["start_us"].size == 0:
            continue
        ns = b["start_us"].shape[0]
        s_cols["start_us"].append(b["start_us"])
        s_cols["turns"].append(b["turns"])
        s_cols["client"].append(np.full(ns, c.index, np.int64))
        s_cols["local"].append(np.arange(ns, dtype=np.int64))
        s_cols["is_session"].append(np.full(ns, b["is_session"]))
        s_cols["prefix_id"].append(b["prefix_id"])
        s_cols["prefix_len"].append(b["prefix_len"])
        for k in r_cols:
            r_cols[k].append(b[k])
    if not s_cols["start_us"]:
        raise WorkloadError("clients", "the spec generates no requests (check rates, windows and duration_s)")
    sc = {k: np.concatenate(v) for k, v in s_cols.items()}
    rc = {k: np.concatenate(v) for k, v in r_cols.items()}
    turns = sc["turns"]
    r_first = np.zeros(turns.shape[0], np.int64)
    np.cumsum(turns[:-1], out=r_first[1:])
    order = np.lexsort((sc["local"], sc["client"], sc["start_us"]))
    t_sorted = turns[order]
    n = int(t_sorted.sum())
    new_first = np.zeros(order.shape[0], np.int64)
    np.cumsum(t_sorted[:-1], out=new_first[1:])
    perm = np.repeat(r_first[order] - new_first, t_sorted) + np.arange(n, dtype=np.int64)
    out = {k: v[perm] for k, v in rc.items()}
    sess_of = np.repeat(np.arange(order.shape[0]), t_sorted)  # sorted-session index per request
    is_sess = sc["is_session"][order]
    sess_id = np.where(is_sess, np.cumsum(is_sess) - 1, -1)
    client = sc["client"][order]
    cl_tenant = np.array([tenant_id[c.tenant] for c in spec.clients], np.int32)
    cl_slo = np.array([slo_id[c.slo_class] for c in spec.clients], np.int32)
    cl_prio = np.array([prio_id[c.priority_class] for c in spec.clients], np.int32)
    req_client = client[sess_of]
    last = new_first + t_sorted - 1
    has_next = np.ones(n, bool)
    has_next[last] = False
    nxt = np.where(has_next, np.arange(n, dtype=np.int64) + 1, -1)
    follow = np.zeros(n, np.int64)
    follow[has_next] = out["delay_before"][np.flatnonzero(has_next) + 1]
    arrival = np.full(n, -1, np.int64)
    arrival[new_first] = sc["start_us"][order]
    return {
        "arrival_us": arrival,
        "client": req_client.astype(np.int32),
        "tenant": cl_tenant[req_client],
        "slo_class": cl_slo[req_client],
        "priority_class": cl_prio[req_client],
        "session": sess_id[sess_of],
        "turn": out["turn"].astype(np.int32),
        "prompt_len": out["prompt_len"],
        "output_len": out["output_len"],
        "prefix_id": sc["prefix_id"][order][sess_of],
        "prefix_len": sc["prefix_len"][order][sess_of],
        "content_seed": out["content_seed"],
        "next_request": nxt,
        "follow_delay_us": follow,
    }


def check_expected_size(spec: WorkloadSpec, block_size: int | None = None) -> None:
    """Refuse, before drawing anything, a spec whose expected requests (and, with
    ``block_size``, block keys) exceed the memory budget in force (WorkloadSpec.expected_size)."""
    n, tokens = spec.expected_size()
    keys = tokens / block_size if block_size else 0.0
    if n > MAX_REQUESTS * 1.5:
        raise WorkloadError("clients", f"the spec is expected to generate {n:.3g} requests, more than {MAX_REQUESTS}")
    memory.check(n * GEN_BYTES_PER_REQUEST + keys * KEY_BYTES,
                 f"the spec's expected {n:.3g} requests" + (f" and {keys:.3g} KV block keys" if keys else ""),
                 "shorten duration_s, lower the rates, turns or lengths")


def generate_from_spec(spec: WorkloadSpec, seed: int | None = None, block_size: int = 16) -> Workload:
    """The Workload of ``spec`` (seed: explicit, else the spec's, else 42) with
    sequence-block keys for ``block_size``."""
    check_expected_size(spec, int(block_size))
    return generate_requests(spec, seed).to_workload(block_size, validate=False)
