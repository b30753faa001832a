"""Sequence-block keys: every request has floor((L + N) / bs) keys -- its prompt blocks'
(unchanged), then those of the blocks its output fills -- so a later request whose prompt
repeats an earlier request's prompt *and output* (the next turn of a conversation) finds
the earlier request's generated blocks.  Also ``key_shared`` against a set-based
reference, determinism, and the distribution workload's fast key generation."""

from __future__ import annotations

import collections
import dataclasses
import hashlib

import numpy as np
import pytest

from blis_fast.errors import WorkloadError
from blis_fast.rng import subsystem_rng
from blis_fast.workload import (
    MAX_TOKEN_ID,
    DistributionSpec,
    Requests,
    Workload,
    generate_distribution,
    generate_requests,
    load_blis_trace,
    load_trace,
    parse_spec,
    read_trace,
    workload_stats,
    write_blis_trace,
    write_trace,
)
from blis_fast_kernels.workload.keys import hash_chain_states, hash_prompt_blocks

SPEC = {
    "seed": 5, "rate": 6, "duration_s": 25,
    "prefix_groups": {"sys": {"count": 5, "length": {"type": "uniform", "min": 10, "max": 120},
                              "popularity": {"type": "zipf", "s": 1.5}}},
    "clients": [
        {"name": "chat", "rate_fraction": 2,
         "prompt_tokens": {"type": "lognormal", "p50": 40, "p90": 200},
         "output_tokens": {"type": "exponential", "mean": 40, "max": 300},
         "prefix": {"group": "sys", "reuse_probability": 0.6},
         "session": {"turns": {"type": "uniform", "min": 1, "max": 5}, "think_time_s": 1,
                     "user_tokens": {"type": "uniform", "min": 0, "max": 30}, "max_prompt_tokens": 900}},
        {"name": "one-shot", "rate_fraction": 1, "prompt_tokens": 50, "output_tokens": {"type": "uniform", "max": 40},
         "prefix": {"count": 2, "length": 33, "reuse_probability": 0.5}},
    ],
}


def naive_shared(keys: np.ndarray) -> np.ndarray:
    """1 where the key's value occurs more than once (a Counter over Python ints)."""
    counts = collections.Counter(keys.tolist())
    return np.array([counts[k] > 1 for k in keys.tolist()], np.uint8)


def flat(lists):
    offs = np.zeros(len(lists) + 1, np.int64)
    np.cumsum([len(x) for x in lists], out=offs[1:])
    vals = np.concatenate([np.asarray(x, np.int64) for x in lists]) if lists else np.empty(0, np.int64)
    return vals, offs


def assert_key_counts(wl: Workload) -> None:
    bs = wl.block_size
    assert np.array_equal(np.diff(wl.key_offsets), (wl.prompt_len + wl.output_len) // bs)
    for i in range(len(wl)):
        assert len(wl.prompt_keys_of(i)) == wl.prompt_len[i] // bs
        assert np.array_equal(wl.prompt_keys_of(i), wl.keys_of(i)[: wl.prompt_len[i] // bs])


@pytest.fixture(scope="module")
def req():
    return generate_requests(parse_spec(SPEC))


# ------------------------------------------------------------------------- token traces
def test_blis_trace_keys_prompt_then_output(tmp_path):
    """Request 1's prompt = request 0's prompt + output + new text: its leading
    floor((L0 + N0)/bs) keys are request 0's keys; the prompt keys are today's."""
    rng = np.random.default_rng(1)
    bs = 8
    p0, o0 = rng.integers(0, MAX_TOKEN_ID, 45), rng.integers(0, MAX_TOKEN_ID, 30)
    p1 = np.concatenate([p0, o0, rng.integers(0, MAX_TOKEN_ID, 21)])
    o1 = rng.integers(0, MAX_TOKEN_ID, 7)
    p2 = p0[:40].copy()  # a plain shared prompt prefix
    o2 = o0[:0]
    p = tmp_path / "conv.csv"
    write_blis_trace(p, [0.0, 1.0, 2.0], [p0, p1, p2], [o0, o1, o2])
    for fast in (True, False):
        wl = load_blis_trace(p, bs, fast=fast)
        assert_key_counts(wl)
        assert wl.key_offsets.tolist() == [0, 75 // 8, 75 // 8 + 103 // 8, 75 // 8 + 103 // 8 + 40 // 8]
        prompt_keys, _ = hash_prompt_blocks(*flat([p0, p1, p2]), np.int64(bs))
        assert np.array_equal(np.concatenate([wl.prompt_keys_of(i) for i in range(3)]), prompt_keys)
        assert np.array_equal(wl.keys_of(1)[: 75 // bs], wl.keys_of(0))  # prompt + output of request 0
        assert wl.keys_of(1)[75 // bs] not in wl.keys_of(0)
        assert np.array_equal(wl.keys_of(2), wl.keys_of(0)[:5])
        seq_keys, _ = hash_prompt_blocks(*flat([np.concatenate([p0, o0]), np.concatenate([p1, o1])]), np.int64(bs))
        assert np.array_equal(wl.block_keys[: wl.key_offsets[2]], seq_keys)  # one sequence, hashed as one
        assert wl.key_shared is None
        assert np.array_equal(wl.shared_keys(), naive_shared(wl.block_keys))
        wl.validate()
        s = workload_stats(wl)  # request 1 hits 9 blocks (request 0's prompt + output), request 2 five
        assert s["ideal_prefix_hit_rate"] == pytest.approx((9 + 5) * bs / (45 + 96 + 40), abs=1e-6)


def test_identical_requests_hit_prompt_blocks_only(tmp_path):
    """Only prompt blocks count as hits in the ideal hit rate (a repeated output is not one)."""
    p = tmp_path / "rep.csv"
    write_blis_trace(p, [0.0, 1.0], [[3] * 32, [3] * 32], [[4] * 32, [4] * 32])
    wl = load_blis_trace(p, 16)
    assert np.array_equal(wl.keys_of(0), wl.keys_of(1)) and len(wl.keys_of(0)) == 4
    assert workload_stats(wl)["ideal_prefix_hit_rate"] == pytest.approx(32 / 64)


def test_from_tokens_without_output_ids_gives_fresh_output_blocks():
    toks, offs = flat([[1] * 20, [1] * 20, [2] * 5])
    wl = Workload.from_tokens(np.zeros(3, np.int64), toks, offs, np.array([30, 30, 3]), 8)
    assert_key_counts(wl)
    assert np.array_equal(wl.prompt_keys_of(0), wl.prompt_keys_of(1))
    out = np.concatenate([wl.keys_of(i)[wl.prompt_len[i] // 8:] for i in range(3)])
    assert out.size == 4 + 4 + 1 and np.unique(out).size == out.size  # the straddling block is fresh too
    assert not np.isin(out, wl.block_keys[:2]).any()
    same = Workload.from_tokens(np.zeros(3, np.int64), toks, offs, np.array([30, 30, 3]), 8)
    assert np.array_equal(same.block_keys, wl.block_keys)  # deterministic (row seeds)
    seeded = Workload.from_tokens(np.zeros(3, np.int64), toks, offs, np.array([30, 30, 3]), 8,
                                  content_seed=np.array([5, 5, 6]))
    assert np.array_equal(seeded.keys_of(0), seeded.keys_of(1))  # same prompt, same seed: same keys


def test_from_tokens_output_ids_must_match_output_len():
    toks, offs = flat([[1, 2, 3]])
    with pytest.raises(WorkloadError, match="output"):
        Workload.from_tokens(np.zeros(1, np.int64), toks, offs, np.array([2]), 2,
                             output_tokens=np.array([1, 2, 3]), output_offsets=np.array([0, 3]))


def test_random_traces_key_shared_matches_a_set(tmp_path):
    rng = np.random.default_rng(7)
    for trial in range(3):
        prompts, outputs = [], []
        for i in range(60):
            r = rng.random()
            out = rng.integers(0, MAX_TOKEN_ID, int(rng.integers(0, 40)))
            if prompts and r < 0.3:  # next turn of an earlier request
                j = int(rng.integers(0, len(prompts)))
                pr = np.concatenate([prompts[j], outputs[j], rng.integers(0, 50, int(rng.integers(0, 20)))])
            elif prompts and r < 0.5:  # exact repeat, half of them with the same output
                j = int(rng.integers(0, len(prompts)))
                pr = prompts[j].copy()
                out = outputs[j].copy() if r < 0.4 else out
            else:  # random; small ids give chance repeats of whole blocks at small bs
                pr = rng.integers(0, 3 if r < 0.7 else MAX_TOKEN_ID, int(rng.integers(1, 80)))
            prompts.append(pr)
            outputs.append(out)
        p = tmp_path / f"r{trial}.csv"
        write_blis_trace(p, np.arange(60.0), prompts, outputs)
        for bs in (1, 4, 16):
            wl = load_blis_trace(p, bs)
            assert_key_counts(wl)
            assert np.array_equal(wl.shared_keys(), naive_shared(wl.block_keys))


# ------------------------------------------------------------------------- generated
def test_spec_keys_sessions_extend_prompt_and_output(req):
    wl = req.to_workload(16)
    assert_key_counts(wl)
    parent = req.parents()
    kids = np.flatnonzero(parent >= 0)
    assert kids.size > 30
    for i in kids:
        p = parent[i]
        assert wl.prompt_len[i] >= wl.prompt_len[p] + wl.output_len[p]  # L_{t+1} = L_t + N_t + U
        n_parent = (wl.prompt_len[p] + wl.output_len[p]) // 16
        assert np.array_equal(wl.keys_of(i)[:n_parent], wl.keys_of(p))
        assert not np.isin(wl.keys_of(i)[n_parent:], wl.keys_of(p)).any()


def test_spec_fresh_blocks_are_unique_and_shared_flags_exact(req):
    for bs in (16, 7, 1):
        wl = req.to_workload(bs)
        assert wl.key_shared is not None and wl.key_shared.dtype == np.uint8
        assert np.array_equal(wl.key_shared, naive_shared(wl.block_keys)), bs
        assert wl.shared_keys() is wl.key_shared
        # every key is either in a group prompt, a session copy, or occurs once
        assert 0 < wl.key_shared.sum() < wl.key_shared.size


def table(**cols) -> Requests:
    """A hand-made Requests table (defaults for the columns not given)."""
    n = len(cols["prompt_len"])
    d = {"arrival_us": np.arange(n), "client": np.zeros(n), "tenant": np.zeros(n), "slo_class": np.zeros(n),
         "priority_class": np.zeros(n), "session": np.full(n, -1), "turn": np.zeros(n), "prefix_id": np.full(n, -1),
         "prefix_len": np.zeros(n), "content_seed": np.arange(100, 100 + n), "next_request": np.full(n, -1),
         "follow_delay_us": np.zeros(n)}
    d.update(cols)
    d = {k: np.asarray(v, dtype=Requests.COLUMNS[k]) for k, v in d.items()}
    names = {"client": ["c"], "tenant": ["t"], "slo_class": ["default"], "priority_class": ["default"]}
    return Requests(d, names, {}, [np.arange(40, dtype=np.int64), np.arange(7, dtype=np.int64)])


def test_session_copies_are_bounded_by_the_prompt():
    """A (hand-made) later turn shorter than the previous turn's prompt + output copies only
    its own prompt blocks; its output blocks are fresh."""
    r = table(prompt_len=[40, 50, 200], output_len=[40, 30, 5], session=[3, 3, 3], turn=[0, 1, 2],
              prefix_id=[0, 0, 0], prefix_len=[40, 40, 40])
    wl = r.to_workload(8)
    assert_key_counts(wl)
    k0, k1, k2 = (wl.keys_of(i) for i in range(3))
    assert len(k0) == 10 and len(k1) == 10 and len(k2) == 25
    assert np.array_equal(k1[:6], k0[:6])  # floor(50/8) prompt blocks copied
    assert not np.isin(k1[6:], k0).any()  # its own output: fresh
    assert np.array_equal(k2[:10], k1)  # turn 2 extends turn 1's whole sequence
    g, _ = hash_chain_states(np.arange(40, dtype=np.int64), np.array([0, 40]), np.int64(8))
    assert np.array_equal(k0[:5], g)  # the group prompt's real keys
    assert np.array_equal(wl.key_shared, naive_shared(wl.block_keys))


def test_group_blocks_shared_only_when_used_twice():
    r = table(prompt_len=[60, 60, 30], output_len=[0, 9, 9], prefix_id=[0, 1, -1], prefix_len=[40, 7, 0])
    wl = r.to_workload(4)
    assert wl.key_shared.sum() == 0  # each group is used by one request only
    # request 1 uses only the group prompt's first 5 blocks (its prompt has 5 full blocks)
    r2 = table(prompt_len=[60, 20, 30], output_len=[0, 9, 9], prefix_id=[0, 0, -1], prefix_len=[40, 40, 0])
    wl2 = r2.to_workload(4)
    assert wl2.key_shared.tolist()[:15] == [1] * 5 + [0] * 10
    assert wl2.key_shared.tolist()[15:22] == [1] * 5 + [0] * 2
    assert np.array_equal(wl2.key_shared, naive_shared(wl2.block_keys))


@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_rich_trace_round_trip_keeps_keys(req, tmp_path, ext):
    p = write_trace(req, tmp_path / f"t.{ext}")
    for bs in (16, 3):
        a, b = req.to_workload(bs), load_trace(p, bs)
        assert np.array_equal(a.block_keys, b.block_keys) and np.array_equal(a.key_offsets, b.key_offsets)
        assert np.array_equal(a.key_shared, b.key_shared)
        assert_key_counts(b)


@pytest.mark.parametrize("ext", ["csv", "parquet"])
def test_rich_trace_output_token_ids(tmp_path, ext):
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    rng = np.random.default_rng(4)
    p0, o0 = rng.integers(0, 999, 37).tolist(), rng.integers(0, 999, 20).tolist()
    p1 = p0 + o0 + [1, 2, 3]
    o1 = rng.integers(0, 999, 11).tolist()
    prompts, outputs = [p0, p1, [5] * 9], [o0, o1, []]
    path = tmp_path / f"ids.{ext}"
    if ext == "parquet":
        pq.write_table(pa.table({"arrival_us": [0, -1, 3], "session": [1, 1, -1], "turn": [0, 1, 0],
                                 "next_request": [1, -1, -1], "prompt_token_ids": prompts,
                                 "output_token_ids": outputs}), path)
    else:
        text = lambda xs: ["[" + ", ".join(map(str, x)) + "]" for x in xs]  # noqa: E731
        buf = pa.BufferOutputStream()
        pcsv.write_csv(pa.table({"arrival_us": [0, -1, 3], "session": [1, 1, -1], "turn": [0, 1, 0],
                                 "next_request": [1, -1, -1], "output_tokens": [20, 11, 0],
                                 "prompt_token_ids": text(prompts), "output_token_ids": text(outputs)}), buf)
        path.write_bytes(b"# blis-fast-trace\n" + buf.getvalue().to_pybytes())
    wl = load_trace(path, 4)
    assert wl.output_len.tolist() == [20, 11, 0] and wl.prompt_len.tolist() == [37, 60, 9]
    assert_key_counts(wl)
    assert np.array_equal(wl.keys_of(1)[:57 // 4], wl.keys_of(0))
    ref = Workload.from_tokens(np.zeros(3, np.int64), *flat(prompts), np.array([20, 11, 0]), 4,
                               output_tokens=flat(outputs)[0], output_offsets=flat(outputs)[1])
    assert np.array_equal(wl.block_keys, ref.block_keys)
    # explicit ids survive read -> write -> read, in both formats
    back = read_trace(path)[0]
    assert back.token_ids is not None and "output" in back.token_ids
    for fmt in ("csv", "parquet"):
        q = write_trace(back, tmp_path / f"again.{fmt}")
        assert np.array_equal(load_trace(q, 4).block_keys, wl.block_keys)


@pytest.mark.parametrize("table_text, message", [
    ('arrival_us,output_token_ids,prompt_tokens\n0,"[1]",3\n', "needs a prompt_token_ids column"),
    ('arrival_us,output_tokens,prompt_token_ids,output_token_ids\n0,2,"[1, 2]","[1]"\n', "row 1 column output_tokens"),
])
def test_rich_trace_output_id_errors(tmp_path, table_text, message):
    p = tmp_path / "bad.csv"
    p.write_text("# blis-fast-trace\n" + table_text)
    with pytest.raises(WorkloadError, match=message):
        load_trace(p, 4)


# ------------------------------------------------------------------------- distribution
def _len_hash(wl: Workload) -> str:
    d = hashlib.sha256()
    for a in (wl.arrival_us, wl.prompt_len, wl.output_len):
        d.update(np.ascontiguousarray(a, np.int64).tobytes())
    return d.hexdigest()


@pytest.mark.parametrize("kw, seed, digest", [
    # computed with the token-drawing generator before sequence keys: lengths and arrivals
    # must not change, only key values
    (dict(rate=20, num_requests=3000, prefix_tokens=100), 7,
     "9a846af29c763a833eb7bdadaadc45c4084aea41f7877f6a9b45abc8b862924c"),
    (dict(rate=5, num_requests=500, arrival="constant", prompt_tokens=300, prompt_tokens_stdev=50,
          output_tokens=40, output_tokens_stdev=30, output_tokens_min=0), 11,
     "e2eccfb1aee739ae6da72fa1d3d181eb18edaf835d986f4d3e5a966f7125043b"),
])
def test_distribution_lengths_and_arrivals_unchanged(kw, seed, digest):
    assert _len_hash(generate_distribution(DistributionSpec(**kw), seed, 16)) == digest


@pytest.mark.parametrize("prefix, n", [(100, 300), (100, 1), (7, 50), (0, 200), (48, 40)])
def test_distribution_keys(prefix, n):
    bs = 16
    spec = DistributionSpec(rate=10, num_requests=n, prefix_tokens=prefix, prompt_tokens=60, prompt_tokens_stdev=40,
                            prompt_tokens_min=1, output_tokens=30, output_tokens_stdev=30, output_tokens_min=0)
    wl = generate_distribution(spec, 3, bs)
    assert_key_counts(wl)
    ids = subsystem_rng(3, "workload.tokens").integers(0, MAX_TOKEN_ID, size=prefix, dtype=np.int64)
    pkeys, _ = hash_prompt_blocks(ids, np.array([0, prefix], np.int64), np.int64(bs))
    m = prefix // bs
    for i in range(n):
        assert np.array_equal(wl.keys_of(i)[:m], pkeys)  # the shared prefix: its real token keys
    rest = np.concatenate([wl.keys_of(i)[m:] for i in range(n)])
    assert np.unique(rest).size == rest.size and not np.isin(rest, pkeys).any()  # everything else fresh
    assert np.array_equal(wl.key_shared, naive_shared(wl.block_keys))
    assert not np.any(wl.block_keys == -1)


def test_generation_is_byte_identical(req):
    spec = DistributionSpec(rate=10, num_requests=400, prefix_tokens=40)
    a, b = generate_distribution(spec, 9, 16), generate_distribution(spec, 9, 16)
    for x, y in ((a, b), (req.to_workload(16), generate_requests(parse_spec(SPEC)).to_workload(16))):
        for f in ("arrival_us", "prompt_len", "output_len", "block_keys", "key_offsets", "key_shared"):
            assert getattr(x, f).tobytes() == getattr(y, f).tobytes(), f
    c = generate_distribution(spec, 10, 16)
    assert not np.array_equal(a.block_keys[:50], c.block_keys[:50])


def test_validate_checks_key_counts_and_key_shared():
    wl = generate_distribution(DistributionSpec(num_requests=5), 1, 16)
    with pytest.raises(WorkloadError, match="key_shared"):
        dataclasses.replace(wl, key_shared=wl.key_shared.astype(np.int64)).validate()
    with pytest.raises(WorkloadError, match="key_shared"):
        dataclasses.replace(wl, key_shared=wl.key_shared[:-1]).validate()
    n0 = int(wl.key_offsets[1])
    short = dataclasses.replace(wl, block_keys=np.delete(wl.block_keys, 0),
                                key_offsets=np.maximum(wl.key_offsets - 1, 0), key_shared=None)
    with pytest.raises(WorkloadError, match="key_offsets"):
        short.validate()
    assert n0 == (wl.prompt_len[0] + wl.output_len[0]) // 16


@pytest.mark.parametrize("bs", [1, 3, 16])
def test_hash_sequence_blocks_matches_naive(bs):
    """The kernel against tests/naive/keys.py: explicit outputs = the naive keys of prompt +
    output; unknown outputs = the naive prompt chain continued by fresh block hashes
    combine64(FRESH_SEED, seed) + k·MUL."""
    from blis_fast_kernels.workload.keys import hash_sequence_blocks
    from naive.keys import (CHAIN_SALT, CHAIN_SEED, FRESH_SEED, MASK, MUL, i64, naive_chain_states, naive_combine,
                            naive_keys, u64)

    rng = np.random.default_rng(bs)
    prompts = [rng.integers(-(2**63), 2**63 - 1, int(rng.integers(1, 4 * bs + 3)), dtype=np.int64).tolist()
               for _ in range(25)]
    outputs = [rng.integers(0, 5, int(rng.integers(0, 3 * bs + 2))).tolist() for _ in range(25)]
    seeds = rng.integers(-(2**63), 2**63 - 1, 25, dtype=np.int64)
    n_out = np.array([len(o) for o in outputs], np.int64)
    with np.errstate(over="ignore"):
        keys, offs = hash_sequence_blocks(*flat(prompts), *flat(outputs), n_out, seeds, np.int64(bs))
        fresh, foffs = hash_sequence_blocks(*flat(prompts), np.empty(0, np.int64), np.empty(0, np.int64), n_out,
                                            seeds, np.int64(bs))
    assert np.array_equal(offs, foffs)
    got = [keys[offs[i]:offs[i + 1]].tolist() for i in range(25)]
    assert got == naive_keys([p + o for p, o in zip(prompts, outputs)], bs)
    for i, (p, o) in enumerate(zip(prompts, outputs)):
        states = [u64(s) for s in naive_chain_states([p], bs)[0]]
        prev = states[-1] if states else CHAIN_SEED
        h = naive_combine(FRESH_SEED, u64(int(seeds[i])))
        for k in range(len(states), (len(p) + len(o)) // bs):
            prev = naive_combine(prev ^ CHAIN_SALT, (h + k * MUL) & MASK)
            states.append(prev)
        want = [-2 if i64(s) == -1 else i64(s) for s in states]
        assert fresh[foffs[i]:foffs[i + 1]].tolist() == want
