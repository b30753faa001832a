"""The live engine (blis_fast/serve/engine.py): requests injected one by one as the clock
reaches them give the batch run of the same arrivals, byte for byte -- every request's
instance, cached prefix, first and last token time -- while its rows are recycled and its
arrival stream compacted; every token's time is reported once, in order."""

from __future__ import annotations

import numpy as np
import pytest

import blis_fast
from blis_fast.errors import ConfigError
from blis_fast.run.api import as_config
from blis_fast.run.resolve import resolve
from blis_fast.serve.engine import LiveEngine
from blis_fast.workload.workload import Workload
from builders import ROOT

SETTINGS = dict(num_instances=2, routing_policy="weighted", max_num_seqs=8, total_kv_blocks=400)


def requests(n=70, seed=5):
    """(arrival µs, prompt ids, max tokens) of n requests, half starting with a shared prefix."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.integers(0, 60_000, n))
    arrivals[5] = arrivals[4]  # (two at the same µs)
    prefix = rng.integers(0, 32_000, 96)
    out = []
    for k in range(n):
        body = rng.integers(0, 32_000, int(rng.integers(1, 300)))
        ids = np.concatenate([prefix, body]) if k % 2 else body
        out.append((int(arrivals[k]), ids.astype(np.int64), int(rng.integers(1, 40))))
    return out


PD = dict(config=str(ROOT / "configs/examples/pd/2p6d.yaml"), pd_decider="always")
TWO_MODELS = dict(config=str(ROOT / "configs/examples/two-models.yaml"))


def batch_run(reqs, settings=SETTINGS, models=None, block_size=16):
    ids = np.concatenate([r[1] for r in reqs])
    offsets = np.concatenate([[0], np.cumsum([len(r[1]) for r in reqs])]).astype(np.int64)
    extra = {} if models is None else dict(model=np.arange(len(reqs), dtype=np.int32) % len(models), models=models)
    wl = Workload.from_tokens(np.array([r[0] for r in reqs], np.int64), ids, offsets,
                              np.array([r[2] for r in reqs], np.int64), block_size,
                              content_seed=np.arange(1, len(reqs) + 1, dtype=np.int64), **extra)
    return blis_fast.simulate(workload=wl, **{k: v for k, v in settings.items() if k != "config"},
                              config=settings.get("config")).state.reqs


def live_run(reqs, capacity, settings=SETTINGS):
    setup = resolve(as_config(settings.get("config"), {k: v for k, v in settings.items() if k != "config"}))
    engine = LiveEngine(setup, capacity=capacity, max_model_len=1024)
    n_models = len(setup.served_models)
    rows, tokens, done = {}, {}, []
    by_row = {}

    def step_to(t):
        while (e := engine.next_event_us()) is not None and e <= t:
            new, ended = engine.advance(e)
            for r, k, when in new:
                assert k == len(tokens[by_row[r]])
                tokens[by_row[r]].append(when)
            for r in ended:
                assert engine.ended(r)
                done.append(by_row.pop(r))
                engine.release(r)

    for j, (t, ids, n_out) in enumerate(reqs):
        step_to(t - 1)  # (an arrival runs before the events of its own µs, as in a batch run)
        r = engine.submit(ids, n_out, t, model=j % n_models)
        assert r >= 0
        rows[j], by_row[r], tokens[j] = r, j, []
    step_to(np.iinfo(np.int64).max)
    return engine, rows, tokens, done


@pytest.mark.parametrize("settings", [SETTINGS, PD, TWO_MODELS], ids=["weighted", "pd", "two-models"])
def test_live_arrivals_give_the_batch_run(settings):
    reqs = requests()
    models = resolve(as_config(settings.get("config"), {k: v for k, v in settings.items() if k != "config"})
                     ).served_models
    batch = batch_run(reqs, settings, models if len(models) > 1 else None)
    engine, rows, tokens, done = live_run(reqs, 24, settings)
    assert sorted(done) == list(range(len(reqs)))
    assert len(set(rows.values())) < len(reqs)  # (rows were recycled)
    for j in range(len(reqs)):
        times = tokens[j]
        assert len(times) == reqs[j][2]
        assert times[0] == batch["first_token_us"][j] and times[-1] == batch["last_token_us"][j]
        assert times == sorted(times)
    assert int(batch["cached_tokens"].sum()) > 0  # (the shared prefix was found in the cache)


def test_recycled_rows_keep_their_cached_blocks_findable():
    """A long run through few rows and a small KV cache: a row's key positions take new
    keys while blocks of its earlier requests are still cached (and later evicted), yet
    every lookup and eviction finds the right prefix-table entry -- the batch run, and no
    stale entry left in the table."""
    reqs = requests(n=400, seed=9)
    batch = batch_run(reqs)
    engine, rows, tokens, done = live_run(reqs, capacity=12)
    assert sorted(done) == list(range(len(reqs)))
    assert [t[0] for t in tokens.values()] == batch["first_token_us"][:len(reqs)].tolist()
    assert [t[-1] for t in tokens.values()] == batch["last_token_us"][:len(reqs)].tolist()
    st = engine.state
    entries = int((st.kv_table[:, 1] != 0).sum())
    keyed = int((st.blocks["key_index"][st.kv_table[st.kv_table[:, 1] != 0, 1] - 1] >= 0).sum())
    assert entries == keyed and int(batch["cached_tokens"].sum()) > 0


def test_rows_end_when_every_row_is_taken():
    engine = LiveEngine(resolve(as_config(None, SETTINGS)), capacity=2, max_model_len=512)
    assert engine.submit(np.arange(10), 5, 0) == 0 and engine.submit(np.arange(10), 5, 0) == 1
    assert engine.submit(np.arange(10), 5, 0) == -1


@pytest.mark.parametrize("kwargs, field", [(dict(capacity=0), "capacity"), (dict(max_model_len=10**9),
                                                                          "max_model_len")])
def test_bad_engine_settings(kwargs, field):
    with pytest.raises(ConfigError) as e:
        LiveEngine(resolve(as_config(None, SETTINGS)), **kwargs)
    assert e.value.field == field


def test_a_request_too_long_is_refused():
    engine = LiveEngine(resolve(as_config(None, SETTINGS)), capacity=2, max_model_len=512)
    with pytest.raises(ConfigError, match="max_model_len"):
        engine.submit(np.arange(500), 20, 0)
