"""Workload specs: strict parsing (every error names its YAML path), the request structure
the generator builds (sessions, closed loop, prefixes, caps), determinism and client
isolation, and the equivalence of generated keys with hashing real token ids."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from blis_fast.errors import WorkloadError
from blis_fast.workload import MAX_TOKEN_ID, generate_requests, load_spec, parse_spec
from blis_fast.workload.sampling import Z90, lognormal_from_mean_std, lognormal_from_percentiles
from builders import WORKLOAD_EXAMPLES as EXAMPLES
from blis_fast_kernels.workload.keys import hash_chain_states, hash_prompt_blocks

BASE = {
    "seed": 3,
    "rate": 10,
    "duration_s": 30,
    "slo_classes": {"fast": {"ttft_ms": 200, "tpot_ms": 20}, "slow": {"e2e_ms": 60000}},
    "prefix_groups": {"sys": {"count": 3, "length": {"type": "constant", "value": 40}, "popularity": "uniform"}},
    "clients": [
        {"name": "a", "rate_fraction": 0.6, "slo_class": "fast",
         "prompt_tokens": {"type": "gaussian", "mean": 100, "std": 30, "min": 1, "max": 300},
         "output_tokens": {"type": "exponential", "mean": 50},
         "prefix": {"group": "sys", "reuse_probability": 0.7},
         "session": {"turns": {"type": "empirical", "values": [1, 2, 3, 4]},
                     "think_time_s": {"type": "exponential", "mean": 1.0},
                     "user_tokens": {"type": "constant", "value": 20}}},
        {"name": "b", "rate_fraction": 0.4, "slo_class": "slow", "arrival": {"type": "gamma", "cv": 2},
         "prompt_tokens": {"type": "lognormal", "p50": 200, "p90": 600},
         "output_tokens": {"type": "constant", "value": 10}},
    ],
}


def spec(**changes):
    d = copy.deepcopy(BASE)
    d.update(changes)
    return d


def client_change(i, **changes):
    d = copy.deepcopy(BASE)
    d["clients"][i].update(changes)
    return d


def error_field(data, base_dir=None) -> str:
    with pytest.raises(WorkloadError) as ei:
        parse_spec(data, base_dir=base_dir)
    assert "\n" not in str(ei.value)
    return ei.value.field


# ----------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_parse_and_generate(path):
    s = load_spec(path)
    req = generate_requests(s)
    assert len(req) > 100
    wl = req.to_workload(16)  # validates
    assert set(wl.names["client"]) == {c.name for c in s.clients}


def test_example_set_is_complete():
    assert {p.stem for p in EXAMPLES} >= {"chat", "rag", "multi-tenant", "diurnal", "agentic"}


@pytest.mark.parametrize("data, field", [
    (spec(clients=[{**BASE["clients"][0], "rate_fraction": 0}, {**BASE["clients"][1], "rate_fraction": 0}]),
     "clients[*].rate_fraction"),
    (client_change(1, arrival={"type": "gamma", "cv": -1}), "clients[1].arrival.cv"),
    (client_change(1, arrival={"type": "weibull", "cv": 0}), "clients[1].arrival.cv"),
    (client_change(1, prompt_tokens={"type": "lognormal", "p50": 500, "p90": 200}), "clients[1].prompt_tokens.p90"),
    (client_change(1, prompt_tokens={"type": "zipfian", "mean": 3}), "clients[1].prompt_tokens.type"),
    (client_change(1, arrival={"type": "trace", "file": "nope.txt"}), "clients[1].arrival.file"),
    (client_change(1, prompt_tokens={"type": "empirical", "file": "missing.txt"}), "clients[1].prompt_tokens.file"),
    (client_change(1, arrival={"type": "markov"}), "clients[1].arrival.type"),
    (client_change(0, colour="red"), "clients[0].colour"),
    (client_change(0, session={"turns": 2, "think_time_s": 1, "tunrs": 3}), "clients[0].session.tunrs"),
    (client_change(0, slo_class="platinum"), "clients[0].slo_class"),
    (client_change(0, prefix={"group": "nope"}), "clients[0].prefix.group"),
    (client_change(0, rate=3), "clients[0].rate_fraction"),
    (client_change(1, rate_fraction=None), "clients[1].rate"),
    (client_change(1, name="a"), "clients[1].name"),
    (client_change(1, prompt_tokens={"type": "lognormal", "mu": 5, "sigma": 1, "p50": 3}), "clients[1].prompt_tokens"),
    (client_change(1, prompt_tokens={"type": "lognormal", "mean": 5}), "clients[1].prompt_tokens.std"),
    (client_change(1, prompt_tokens={"type": "gaussian", "mean": 5, "std": -1}), "clients[1].prompt_tokens.std"),
    (client_change(1, prompt_tokens={"type": "gaussian", "mean": 5, "std": 1, "min": 10, "max": 5}),
     "clients[1].prompt_tokens.max"),
    (client_change(1, prompt_tokens={"type": "gaussian", "mean": 5, "std": 1, "min": 0}), "clients[1].prompt_tokens.min"),
    (client_change(1, prompt_tokens={"type": "uniform", "min": 5}), "clients[1].prompt_tokens.max"),
    (client_change(1, prompt_tokens={"type": "empirical", "cdf": [[1, 0.2], [5, 0.9]]}), "clients[1].prompt_tokens.cdf[1]"),
    (client_change(1, prompt_tokens={"type": "empirical", "cdf": [[5, 0.2], [1, 1.0]]}), "clients[1].prompt_tokens.cdf[1]"),
    (client_change(1, prompt_tokens={"type": "empirical", "values": [1, 2], "weights": [1]}),
     "clients[1].prompt_tokens.weights"),
    (client_change(1, prompt_tokens={"type": "pareto_lognormal", "pareto_weight": 2, "alpha": 1, "scale": 1,
                                      "mu": 1, "sigma": 1}), "clients[1].prompt_tokens.pareto_weight"),
    (client_change(1, prompt_tokens="many"), "clients[1].prompt_tokens"),
    (client_change(1, output_tokens=None), "clients[1].output_tokens"),
    (client_change(1, profile="gaming"), "clients[1].profile"),
    (client_change(1, end_s=0), "clients[1].end_s"),
    (client_change(0, session={"turns": 2}), "clients[0].session.think_time_s"),
    (client_change(0, session={"turns": {"type": "constant", "value": 2, "min": 0}, "think_time_s": 1}),
     "clients[0].session.turns.min"),
    (client_change(1, arrival={"type": "bursty"}), "clients[1].arrival.burst_size"),
    (spec(load_profile={"type": "diurnal", "amplitude": 1.5}), "load_profile.amplitude"),
    (spec(load_profile={"type": "step", "steps": [{"at_s": 5, "multiplier": 1}, {"at_s": 2, "multiplier": 2}]}),
     "load_profile.steps[1].at_s"),
    (spec(load_profile={"type": "ramp", "end_s": 10, "from": 1, "to": -2}), "load_profile.to"),
    (spec(load_profile={"type": "sawtooth"}), "load_profile.type"),
    (spec(prefix_groups={"sys": {"count": 3}}), "prefix_groups.sys.length"),
    (spec(prefix_groups={"sys": {"count": 2, "length": 5, "popularity": {"type": "weights", "weights": [1]}}}),
     "prefix_groups.sys.popularity.weights"),
    (spec(slo_classes={"fast": {"ttft_ms": -1}}), "slo_classes.fast.ttft_ms"),
    (spec(duration_s=None), "duration_s"),
    (spec(rate=None), "rate"),
    (spec(clients=[]), "clients"),
    (spec(seed=-4), "seed"),
    (spec(colour=1), "colour"),
    (spec(priority_classes=["hi", "lo"]) | {"clients": [{**BASE["clients"][0], "priority_class": "mid"},
                                                        BASE["clients"][1]]}, "clients[0].priority_class"),
])
def test_bad_specs_name_the_yaml_path(data, field):
    assert error_field(data) == field


def test_file_paths_are_relative_to_the_spec(tmp_path):
    (tmp_path / "lens.txt").write_text("length\n10\n20\n30\n")
    (tmp_path / "times.csv").write_text("# arrivals\n0.5\n1.0,x\n2.5\n")
    d = client_change(1, prompt_tokens={"type": "empirical", "file": "lens.txt"},
                      arrival={"type": "trace", "file": "times.csv", "time_scale": 2})
    d["clients"][1].pop("rate_fraction")
    s = parse_spec(d, base_dir=tmp_path)
    assert s.clients[1].prompt_tokens.values.tolist() == [10, 20, 30]
    assert s.clients[1].arrival.times_s.tolist() == [1.0, 2.0, 5.0]
    req = generate_requests(s)
    b = req["client"] == 1
    assert req["arrival_us"][b].tolist() == [1_000_000, 2_000_000, 5_000_000]
    assert set(req["prompt_len"][b].tolist()) <= {10, 20, 30}
    (tmp_path / "bad.txt").write_text("1\n2\nthree\n")
    d["clients"][1]["prompt_tokens"] = {"type": "empirical", "file": "bad.txt"}
    assert error_field(d, tmp_path) == "clients[1].prompt_tokens.file"


def test_load_spec_file_errors(tmp_path):
    with pytest.raises(WorkloadError, match="file not found"):
        load_spec(tmp_path / "none.yaml")
    p = tmp_path / "bad.yaml"
    p.write_text("clients: [\n")
    with pytest.raises(WorkloadError, match="malformed YAML"):
        load_spec(p)
    p.write_text("- 1\n- 2\n")
    with pytest.raises(WorkloadError, match="mapping"):
        load_spec(p)


def test_lognormal_parametrizations_convert_exactly():
    mu, sigma = lognormal_from_percentiles(800.0, 3000.0)
    assert math.exp(mu) == pytest.approx(800.0, rel=1e-15)
    assert math.exp(mu + Z90 * sigma) == pytest.approx(3000.0, rel=1e-14)
    mu, sigma = lognormal_from_mean_std(500.0, 300.0)
    assert math.exp(mu + sigma**2 / 2) == pytest.approx(500.0, rel=1e-14)
    assert math.sqrt((math.exp(sigma**2) - 1) * math.exp(2 * mu + sigma**2)) == pytest.approx(300.0, rel=1e-13)
    s = parse_spec(client_change(1, prompt_tokens={"type": "lognormal", "mu": 6.0, "sigma": 0.5}))
    assert (s.clients[1].prompt_tokens.mu, s.clients[1].prompt_tokens.sigma) == (6.0, 0.5)


def test_rate_fractions_are_normalized():
    s = parse_spec(spec(rate=30) | {"clients": [{**BASE["clients"][0], "rate_fraction": 3},
                                                {**BASE["clients"][1], "rate_fraction": 1}]})
    assert [c.rate for c in s.clients] == [22.5, 7.5]


def test_profiles_fill_missing_fields_only():
    d = copy.deepcopy(BASE)
    d["clients"] = [{"name": "ag", "rate": 1, "profile": "agentic", "session": {"turns": 2}}]
    s = parse_spec(d)
    c = s.clients[0]
    assert c.session.turns.value == 2  # own value wins
    assert c.session.think_time_s.type == "lognormal"  # from the profile
    assert c.session.max_prompt_tokens == 65536
    assert c.output_tokens.type == "lognormal"


# ----------------------------------------------------------------------------- structure


@pytest.fixture(scope="module")
def base_req():
    return generate_requests(parse_spec(BASE))


def test_sessions_are_closed_loop_chains(base_req):
    r = base_req
    n = len(r)
    nxt, turn, sess = r["next_request"], r["turn"], r["session"]
    linked = np.flatnonzero(nxt >= 0)
    assert np.all(nxt[linked] == linked + 1)  # turns laid out consecutively
    assert np.all(turn[linked + 1] == turn[linked] + 1) and np.all(sess[linked + 1] == sess[linked])
    followers = np.zeros(n, bool)
    followers[nxt[linked]] = True
    assert np.all(r["arrival_us"][followers] == -1) and np.all(r["arrival_us"][~followers] >= 0)
    assert np.all((turn > 0) == followers)
    assert np.all(r["follow_delay_us"][linked] >= 0) and np.all(r["follow_delay_us"][nxt < 0] == 0)
    # context growth: L_{t+1} = L_t + N_t + 20 new user tokens
    assert np.all(r["prompt_len"][linked + 1] == r["prompt_len"][linked] + r["output_len"][linked] + 20)
    # independent requests in arrival order
    a = r["arrival_us"][~followers]
    assert np.all(np.diff(a) >= 0)
    # client b has no sessions
    assert np.all(sess[r["client"] == 1] == -1) and np.all(sess[r["client"] == 0] >= 0)


def test_attributes_and_names(base_req):
    r = base_req
    assert r.names["client"] == ["a", "b"]
    assert r.names["slo_class"] == ["fast", "slow"]
    assert r.names["tenant"] == ["a", "b"]  # tenant defaults to the client name
    assert np.array_equal(r["slo_class"], r["client"])
    assert r.slo_targets["fast"]["ttft_ms"] == 200
    wl = r.to_workload(16)
    assert np.array_equal(wl.tenant, r["tenant"]) and np.array_equal(wl.session, r["session"])
    assert wl.slo_targets == r.slo_targets


def test_prefix_groups_share_real_token_ids(base_req):
    r = base_req
    first = r["turn"] == 0
    use = first & (r["prefix_id"] >= 0)
    assert 0.55 < use[r["client"] == 0].sum() / (first & (r["client"] == 0)).sum() < 0.85  # reuse 0.7
    assert np.all(r["prefix_len"][use] == 40)
    wl = r.to_workload(8)
    gkeys, _ = hash_prompt_blocks(np.concatenate(r.prefix_tokens), np.arange(4, dtype=np.int64) * 40, np.int64(8))
    for i in np.flatnonzero(use)[:50]:
        g = r["prefix_id"][i]
        assert np.array_equal(wl.keys_of(i)[:5], gkeys[5 * g:5 * g + 5])


def test_session_turns_extend_previous_keys(base_req):
    wl = base_req.to_workload(16)
    nxt = base_req["next_request"]
    for i in np.flatnonzero(nxt >= 0)[:200]:
        k = wl.keys_of(i)
        assert np.array_equal(wl.keys_of(nxt[i])[: len(k)], k)


def test_keys_equal_hashing_materialized_tokens():
    """Generate, then materialize real token sequences with the same structure (prefix
    tokens + fresh random tokens, random output tokens; a turn's prompt = previous prompt +
    previous output + random user tokens) and hash prompt + output: shared blocks get
    identical keys, and the partition of blocks into equal-key classes is the same."""
    s = parse_spec(spec(duration_s=10))
    r = generate_requests(s)
    bs = 4
    wl = r.to_workload(bs)
    rng = np.random.default_rng(0)
    parent = r.parents()
    toks, outs = [], []
    for i in range(len(r)):
        L = r["prompt_len"][i]
        if parent[i] >= 0:
            p = np.concatenate([toks[parent[i]], outs[parent[i]]])  # the whole previous turn
            toks.append(np.concatenate([p, rng.integers(0, MAX_TOKEN_ID, L - len(p))]))
        else:
            pid = r["prefix_id"][i]
            pre = r.prefix_tokens[pid] if pid >= 0 else np.empty(0, np.int64)
            toks.append(np.concatenate([pre, rng.integers(0, MAX_TOKEN_ID, L - len(pre))]).astype(np.int64))
        outs.append(rng.integers(0, MAX_TOKEN_ID, r["output_len"][i]))
    assert (parent >= 0).sum() > 20
    seq = [np.concatenate([t, o]) for t, o in zip(toks, outs)]
    soffs = np.concatenate(([0], np.cumsum([len(t) for t in seq])))
    tkeys, toffs = hash_prompt_blocks(np.concatenate(seq).astype(np.int64), soffs.astype(np.int64), np.int64(bs))
    assert np.array_equal(toffs, wl.key_offsets)

    g, t = wl.block_keys, tkeys
    pairs = np.unique(np.stack([g, t], 1), axis=0)
    assert len(pairs) == len(np.unique(g)) == len(np.unique(t))  # same sharing partition
    shared = np.zeros(len(g), bool)  # blocks inside a prefix-group prompt
    for i in range(len(r)):
        if r["prefix_id"][i] >= 0:
            shared[wl.key_offsets[i]: wl.key_offsets[i] + r["prefix_len"][i] // bs] = True
    assert shared.sum() > 100
    assert np.array_equal(g[shared], t[shared])  # hashed from the same token ids
    assert len(np.unique(g)) < len(g)  # there is real sharing


def test_hash_chain_states_match_hash_prompt_blocks():
    rng = np.random.default_rng(1)
    tok = rng.integers(-(2**40), 2**40, 5000)
    offs = np.array([0, 7, 7, 1000, 3333, 5000], np.int64)
    for bs in (1, 4, 16):
        s, o = hash_chain_states(tok, offs, np.int64(bs))
        k, o2 = hash_prompt_blocks(tok, offs, np.int64(bs))
        assert np.array_equal(np.where(s == -1, -2, s), k) and np.array_equal(o, o2)


def test_num_requests_cap_cuts_cleanly():
    d = spec(duration_s=None, num_requests=777)
    r = generate_requests(parse_spec(d))
    assert len(r) == 777
    assert r["next_request"].max() < 777
    r.to_workload(16)  # validates
    # the capped workload is a prefix of a longer window's (prefix-stable generation)
    longer = generate_requests(parse_spec(spec(duration_s=None, num_requests=5000)))
    for k in ("arrival_us", "prompt_len", "output_len", "content_seed", "client"):
        assert np.array_equal(longer[k][:776], r[k][:776])


def test_max_prompt_tokens_ends_sessions():
    d = client_change(0, session={"turns": 50, "think_time_s": 0.1, "user_tokens": 100, "max_prompt_tokens": 2000})
    r = generate_requests(parse_spec(d))
    a = r["client"] == 0
    assert r["prompt_len"][a & (r["turn"] > 0)].max() <= 2000
    assert r["turn"][a].max() < 49
    r.to_workload(16)


# ----------------------------------------------------------------------------- determinism


def _client_rows(r, name):
    c = r.names["client"].index(name)
    m = r["client"] == c
    cols = {k: r[k][m] for k in ("prompt_len", "output_len", "turn", "content_seed", "follow_delay_us", "prefix_len")}
    cols["arrival_us"] = r["arrival_us"][m]
    return cols


def test_same_seed_same_requests_other_seed_differs(base_req):
    again = generate_requests(parse_spec(BASE))
    for k in base_req.columns:
        assert np.array_equal(base_req[k], again[k]), k
    other = generate_requests(parse_spec(BASE), seed=4)
    assert not np.array_equal(other["prompt_len"][:50], base_req["prompt_len"][:50])


def test_adding_or_changing_a_client_leaves_the_others_unchanged():
    d = copy.deepcopy(BASE)
    for c in d["clients"]:  # absolute rates: a client's rate must not depend on the others
        c["rate"] = c.pop("rate_fraction") * 10
    before = generate_requests(parse_spec(d))
    d2 = copy.deepcopy(d)
    d2["clients"].insert(1, {"name": "new", "rate": 50, "arrival": {"type": "bursty", "burst_size": 5},
                             "prompt_tokens": 300, "output_tokens": 3, "prefix": {"group": "sys"}})
    d2["clients"][0]["output_tokens"] = {"type": "constant", "value": 7}  # changes a's outputs only
    after = generate_requests(parse_spec(d2))
    for name in ("b",):
        x, y = _client_rows(before, name), _client_rows(after, name)
        for k in x:
            assert np.array_equal(x[k], y[k]), (name, k)
    xa, ya = _client_rows(before, "a"), _client_rows(after, "a")
    assert np.array_equal(xa["arrival_us"], ya["arrival_us"])  # a's own outputs changed, not its arrivals
    assert np.array_equal(xa["content_seed"], ya["content_seed"])
    assert not np.array_equal(xa["output_len"], ya["output_len"])
    wb, wa = before.to_workload(16), after.to_workload(16)
    kb = [wb.keys_of(i) for i in np.flatnonzero(before["client"] == 1)]
    ka = [wa.keys_of(i) for i in np.flatnonzero(after["client"] == 2)]
    assert all(np.array_equal(x, y) for x, y in zip(kb, ka)) and len(kb) == len(ka)


def test_longer_window_only_appends():
    short = generate_requests(parse_spec(spec(duration_s=10, load_profile={"type": "diurnal", "period_s": 7,
                                                                            "amplitude": 0.9})))
    long = generate_requests(parse_spec(spec(duration_s=25, load_profile={"type": "diurnal", "period_s": 7,
                                                                          "amplitude": 0.9})))
    for name in ("a", "b"):
        x, y = _client_rows(short, name), _client_rows(long, name)
        n = len(x["prompt_len"])
        for k in x:
            assert np.array_equal(x[k], y[k][:n]), (name, k)
