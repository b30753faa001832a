"""Property-based tests of prefill/decode disaggregation (hypothesis; issue 22): random P/D
deployments -- 1-3 prefill and 1-4 decode instances, sometimes a `both` pool, every decider,
threshold, link contention, charge, full-decode behaviour and first-token side, small KV
caches and block sizes, per-pool KV and coefficients -- on random small workloads with
shared prefixes, run with the kernel's per-step invariant checks on
(``simulation.check_invariants``: batch size and KV block conservation after every step).

Properties, on the final state (at the horizon when one is drawn):
- request conservation: every request is completed, dropped (unservable or at its decode
  instance) or, only with a horizon, still on its way; the instance counters agree;
- no request row is in two places: each is in at most one wait / received / transfer
  queue or batch, that place matches its state, and the links hold transferring requests;
- causality of a disaggregated request's timestamps: routed -> leg queued (the prefill
  instance's queueing delay) -> prefill done (the end of the leg's first-token step) ->
  transfer start (at prefill done unless it waited for blocks) -> data (exact without
  contention, never earlier with it) -> end (+ the base latency) -> decode admission ->
  tokens; charged tokens as the charge rule says;
- KV blocks conserved on every instance (``kv_conserved``), all free after a full run;
- summaries without NaN; E2E = TTFT + the sum of the ITL samples;
- determinism: a second run gives byte-identical request and P/D tables, and a fresh
  process gives the same per-request results file;
- event skipping changes nothing: the reference path (every running request visited
  every step) gives the same requests, transfers and instance counters.

The engine bugs these tests found are fixed; each is pinned by an exact test in
test_disaggregation_engine.py, and ``check_fixed_bugs`` asserts that none shows again.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import blis_fast
from builders import LLAMA, assert_no_nan, prompts_workload, random_prompts
from blis_fast_kernels.kv.cache import kv_conserved
from blis_fast_kernels.schema import PoolRole, RequestState

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                derandomize=True)
FAST_EXAMPLES, SLOW_EXAMPLES = 200, 2000

# the states a request row may be left in at the horizon (on its way), and at the end of a full run
IN_FLIGHT = (RequestState.PENDING, RequestState.ADMITTING, RequestState.ROUTED, RequestState.QUEUED,
             RequestState.RUNNING, RequestState.REMOTE_PREFILL, RequestState.TRANSFER_WAIT,
             RequestState.TRANSFERRING)
FINAL = (RequestState.COMPLETED, RequestState.DROPPED, RequestState.DROPPED_AT_DECODE)


@dataclass(frozen=True)
class Scenario:
    prompts: list
    outputs: list
    arrivals: list
    block_size: int
    doc: dict  # the run config (a deployments: list with the P/D pools)

    @property
    def pd(self) -> dict:
        return self.doc["deployments"][0]["pd"]

    @property
    def horizon(self):
        return self.doc["simulation"].get("horizon")

    def workload(self):
        return prompts_workload(self.arrivals, self.prompts, self.outputs, self.block_size)

    def run(self):
        return blis_fast.simulate(self.doc, workload=self.workload())


def coefficients(draw):
    alpha = [draw(hs.sampled_from([0.0, 40.0, 333.3])), draw(hs.sampled_from([0.0, 0.5, 1.75])),
             draw(hs.sampled_from([0.0, 10.0, 99.9]))]
    beta = [draw(hs.sampled_from([1.0, 700.0, 2500.5])), draw(hs.sampled_from([0.0, 2.5, 10.0])),
            draw(hs.sampled_from([0.0, 5.0, 40.0]))]
    return alpha, beta


@hs.composite
def scenarios(draw) -> Scenario:
    rng = np.random.default_rng(draw(hs.integers(0, 2**32 - 1)))
    bs = draw(hs.sampled_from([4, 8, 16]))
    n = draw(hs.integers(2, 16))
    prompts = random_prompts(rng, n, bs, n_families=2, vocab=4, max_suffix=70, p_family=0.7)
    outputs = [int(x) for x in rng.choice([0, 1, 1, 2, 3, 5, 9], n)]
    spacing = draw(hs.sampled_from([0, 1, 400, 3000]))
    arrivals = sorted(int(x) * spacing for x in rng.integers(0, 12, n))
    caps = [-(-(len(p) + max(o, 1) - 1) // bs) for p, o in zip(prompts, outputs, strict=True)]
    # KV caches from too small for some requests (dropped, or waiting for room) to room for several
    kv_blocks = hs.one_of(hs.integers(max(1, max(caps) // 2), max(caps) + 4),
                          hs.integers(max(caps), 3 * max(caps) + 4))

    def pool(instances):
        entry = {"instances": instances}
        if draw(hs.booleans()):  # its own KV cache and coefficients
            entry["total_kv_blocks"] = draw(kv_blocks)
            entry["alpha_coeffs"], entry["beta_coeffs"] = coefficients(draw)
        return entry

    decider = draw(hs.sampled_from(["always", "always", "prefix-threshold", "never"]))
    pd = {"decider": decider}
    if decider == "prefix-threshold":
        pd["threshold"] = draw(hs.sampled_from([0, 1, bs, 2 * bs + 1, 40]))
    if decider != "never":  # (with never the rest is refused: nothing is disaggregated)
        pd["first_token"] = draw(hs.sampled_from(["decode", "prefill"]))
        pd["on_decode_full"] = draw(hs.sampled_from(["wait", "drop"]))
        pd["transfer"] = {"bandwidth_gbps": draw(hs.sampled_from([0.5, 1.31072, 13.1072, 25.0, 1000.0])),
                          "base_latency_ms": draw(hs.sampled_from([0.0, 0.05, 1.5])),
                          "charge": draw(hs.sampled_from(["destination-missing", "full-prompt"])),
                          "contention": draw(hs.sampled_from(["none", "link"]))}
    alpha, beta = coefficients(draw)
    entry = {"name": "pd", "model": LLAMA, "hardware": "H100", "latency_model": "blackbox",
             "alpha_coeffs": alpha, "beta_coeffs": beta, "block_size": bs, "total_kv_blocks": draw(kv_blocks),
             "max_num_seqs": draw(hs.integers(1, 4)), "max_num_batched_tokens": draw(hs.sampled_from([1, 7, 32, 96,
                                                                                                        2048])),
             "long_prefill_token_threshold": draw(hs.sampled_from([0, 0, 1, 7, 32])),
             "enable_prefix_caching": draw(hs.booleans()),
             "prefill": pool(draw(hs.integers(1, 3))), "decode": pool(draw(hs.integers(1, 4))), "pd": pd}
    n_both = draw(hs.sampled_from([0, 0, 1, 2]))
    if n_both:
        entry["both"] = pool(n_both)
        if decider != "never":  # (a both pool needs drop: with wait two both instances could wait for each other)
            pd["on_decode_full"] = "drop"
    simulation = {"check_invariants": True, "admission_latency": draw(hs.sampled_from([0, 0, 5, 200])),
                  "routing_latency": draw(hs.sampled_from([0, 0, 3, 150]))}
    if draw(hs.sampled_from([False, False, False, True])):  # a quarter of the runs stop at a horizon, mid-way
        simulation["horizon"] = draw(hs.integers(0, 60_000))
    doc = {"deployments": [entry], "simulation": simulation,
           "policy": {"routing": draw(hs.sampled_from(["round-robin", "least-loaded", "weighted",
                                                        "prefix-affinity"]))}}
    return Scenario(prompts, outputs, arrivals, bs, doc)


# ----------------------------------------------------------------------------- the checks


def walk(head, nxt):
    """The members of a linked list (structs/dlist.py), head first."""
    out = []
    x = int(head)
    while x >= 0:
        out.append(x)
        x = int(nxt[x])
        assert len(out) <= len(nxt), "a cycle in a queue"
    return out


def check_places(st):
    """Every request row is in at most one queue or batch, the one its state says."""
    reqs, inst, n = st.reqs, st.inst, len(st.pd_reqs)
    place = {}

    def put(r, where, states):
        assert r not in place, f"row {r} is in {place.get(r)} and in {where}"
        assert int(reqs[r]["state"]) in states, (r, where, int(reqs[r]["state"]))
        place[r] = where

    for i in range(len(inst)):
        for r in walk(inst[i]["wq_head"], reqs["queue_next"]):
            put(r, ("wait queue", i), (RequestState.QUEUED,))
            assert int(reqs[r]["instance"]) == i
        for r in walk(st.pd_inst[i]["rx_head"], reqs["queue_next"]):
            put(r, ("received", i), (RequestState.QUEUED,))
            assert r < n and int(reqs[r]["instance"]) == i and int(st.pd_reqs[r]["transfer_end_us"]) >= 0
        for r in walk(st.pd_inst[i]["xq_head"], reqs["queue_next"]):
            put(r, ("transfer queue", i), (RequestState.TRANSFER_WAIT,))
            assert r < n and int(reqs[r]["instance"]) == i
        for k in range(int(inst[i]["batch_len"])):
            r = int(st.batch[i, k])
            put(r, ("batch", i), (RequestState.RUNNING,))
            assert int(reqs[r]["instance"]) == i
        for r in walk(st.pd_inst[i]["link_head"], st.pd_reqs["link_next"]):
            assert int(reqs[r]["state"]) == RequestState.TRANSFERRING and int(st.pd_reqs[r]["prefill_instance"]) == i
        tables = {"wq": inst, "rx": st.pd_inst, "xq": st.pd_inst, "link": st.pd_inst}
        lens = [len(walk(tables[q][i][f"{q}_head"], nxt)) for q, nxt in
                (("wq", reqs["queue_next"]), ("rx", reqs["queue_next"]), ("xq", reqs["queue_next"]),
                 ("link", st.pd_reqs["link_next"]))]
        assert lens == [int(tables[q][i][f"{q}_len"]) for q in ("wq", "rx", "xq", "link")], (i, lens)
    # the rows in a state that lives in a queue or batch are all in one
    for r in range(len(reqs)):
        if int(reqs[r]["state"]) in (RequestState.QUEUED, RequestState.RUNNING, RequestState.TRANSFER_WAIT):
            assert r in place, f"row {r} in state {int(reqs[r]['state'])} is in no queue"


def check_conservation(sc, st, res):
    reqs, inst, n = st.reqs[: len(sc.prompts)], st.inst, len(sc.prompts)
    states = reqs["state"]
    count = {s: int((states == s).sum()) for s in set(IN_FLIGHT) | set(FINAL)}
    assert sum(count.values()) == n  # (never rejected: always-admit)
    if sc.horizon is None:
        left = {s: c for s, c in count.items() if s in IN_FLIGHT and c}
        assert not left, f"requests left unfinished without a horizon: {left}"
    assert int(inst["completed"].sum()) == count[RequestState.COMPLETED] == res.cluster["completed_requests"]
    assert int(st.pd_inst["pd_drops"].sum()) == count[RequestState.DROPPED_AT_DECODE]
    assert int(inst["dropped"].sum()) == count[RequestState.DROPPED]
    pd = st.pd_reqs
    assert int(st.pd_inst["pd_prefills"].sum()) == int((pd["prefill_done_us"] >= 0).sum())
    assert int(st.pd_inst["pd_transfers_in"].sum()) == int((pd["transfer_end_us"] >= 0).sum())
    assert int(st.pd_inst["pd_waits"].sum()) == int((pd["wait_start_us"] >= 0).sum())
    done = states == RequestState.COMPLETED
    assert (reqs["generated"][done] == reqs["output_len"][done]).all()
    if sc.pd["decider"] == "never":
        assert (pd["prefill_instance"] == -1).all()
        assert int(inst["steps"][st.pd_inst["role"] == PoolRole.PREFILL].sum()) == 0


def check_timestamps(sc, st):
    """Causality of each request's timestamps, exact where the engine's rule is simple."""
    reqs, pd, inst, pm = st.reqs, st.pd_reqs, st.inst, st.pd_models[0]
    n = len(sc.prompts)
    base_latency = int(pm["base_latency_us"])
    for r in range(n):
        req, row, leg = reqs[r], pd[r], reqs[r + n]
        a = int(req["arrival_us"])
        p = int(row["prefill_instance"])
        times = {f: int(row[f]) for f in ("prefill_done_us", "wait_start_us", "transfer_start_us",
                                          "transfer_data_us", "transfer_end_us")}
        if (p >= 0 and sc.pd.get("first_token") == "prefill" and int(req["output_len"]) == 1
                and int(leg["state"]) == RequestState.COMPLETED):
            # one output token, emitted by the prefill side: at its handover it completed there,
            # with no transfer (the engine then names the prefill instance as its instance)
            assert int(req["state"]) == RequestState.COMPLETED == int(leg["state"])
            assert int(req["instance"]) == int(leg["instance"]) == p
            assert int(req["first_token_us"]) == int(leg["first_token_us"]) == int(req["last_token_us"])
            assert [v for f, v in times.items() if f != "prefill_done_us"] == [-1] * 4
            continue
        if p < 0:  # not disaggregated: its leg row is never used
            assert all(v == -1 for v in times.values()), (r, times)
            assert int(leg["state"]) == RequestState.PENDING
            continue
        assert int(st.pd_inst[p]["role"]) in (PoolRole.PREFILL, PoolRole.BOTH)
        hops = sc.doc["simulation"]["admission_latency"] + sc.doc["simulation"]["routing_latency"]
        assert int(leg["instance"]) == p and int(leg["routed_us"]) == int(req["routed_us"]) == a + hops
        q = math.trunc(inst[p]["alpha0"] + inst[p]["alpha1"] * int(req["prompt_len"]))
        if int(leg["queued_us"]) >= 0:
            assert int(leg["queued_us"]) == int(req["routed_us"]) + q
        done = times["prefill_done_us"]
        if done < 0:  # its prefill leg has not finished (or was dropped, unservable)
            assert all(v == -1 for v in times.values()), (r, times)
            continue
        a2 = math.trunc(inst[p]["alpha2"])
        assert int(leg["first_scheduled_us"]) >= int(leg["queued_us"]) >= 0
        assert done == int(leg["first_token_us"]) - a2 > int(leg["first_scheduled_us"])
        start, data, end = times["transfer_start_us"], times["transfer_data_us"], times["transfer_end_us"]
        # the handover: the step's end, or the first token's output when the prefill side emits it
        handover = max(done, int(leg["first_token_us"])) if sc.pd.get("first_token") == "prefill" else done
        if times["wait_start_us"] >= 0:
            assert times["wait_start_us"] == handover and (start == -1 or start >= handover)
        elif start >= 0:
            assert start == handover
        if start < 0:
            assert data == end == -1
            continue
        d = int(req["instance"])
        assert int(st.pd_inst[d]["role"]) in (PoolRole.DECODE, PoolRole.BOTH)
        charged = int(row["charged_tokens"])
        prompt = int(req["prompt_len"])
        if sc.pd["transfer"]["charge"] == "full-prompt":
            assert charged == prompt
        else:
            assert charged == prompt - int(req["cached_tokens"])
        alone = math.ceil(np.float64(charged) * pm["kv_bytes_per_token"] / pm["bytes_per_us"])
        if data >= 0:
            if sc.pd["transfer"]["contention"] == "none":
                assert data == start + alone, (r, data, start, alone)
            else:
                assert data >= start + alone - 1, (r, data, start, alone)  # (sharing only slows it)
        if end < 0:
            continue
        assert end == data + base_latency
        # decode never starts before the transfer has ended
        assert int(req["queued_us"]) == end
        first_sched, first, last = (int(req[f]) for f in ("first_scheduled_us", "first_token_us", "last_token_us"))
        assert first_sched == -1 or first_sched >= end
        if sc.pd["first_token"] == "prefill":
            assert first == int(leg["first_token_us"])
        elif first >= 0:
            assert first > end and first_sched >= end
        if int(req["state"]) == RequestState.COMPLETED:
            assert last >= first >= a
            assert int(req["itl_sum_us"]) == last - first  # E2E = TTFT + the sum of the ITL samples


def check_blocks(sc, st):
    inst = st.inst
    for i in range(len(inst)):
        assert kv_conserved(st, i), f"instance {i}: KV blocks not conserved"
    assert (inst["kv_peak_allocated"] <= inst["kv_total"]).all()
    assert (inst["batch_peak"] <= inst["max_num_seqs"]).all()
    if sc.horizon is None:
        assert (inst["kv_allocated"] == 0).all() and (st.blocks["ref_count"] == 0).all()
        for f in ("wq_len", "batch_len"):
            assert (inst[f] == 0).all(), (f, inst[f])
        for f in ("held_outside", "held_anon", "xq_len", "rx_len", "link_len"):
            assert (st.pd_inst[f] == 0).all(), (f, st.pd_inst[f])


# ----------------------------------------------------------------------------- the engine bugs found (fixed)


def check_fixed_bugs(sc: Scenario, st) -> None:
    """What the engine bugs these tests found (each pinned by an exact test in
    test_disaggregation_engine.py) looked like: none may show again."""
    reqs, pd, inst = st.reqs, st.pd_reqs, st.inst
    n = len(pd)
    started = pd["transfer_start_us"] >= 0
    assert (pd["transfer_start_us"][started] >= pd["prefill_done_us"][started]).all(), "a transfer before its prefill"
    assert not ((st.pd_inst["rx_len"] > 0) & (inst["step_pending"] == 0)).any(), "a received request stranded without a step"
    if sc.horizon is None:
        assert not (st.pd_inst["xq_len"] > 0).any(), "a transfer left waiting at the end"
    assert (reqs["itl_sum_us"][:n] >= 0).all(), "a token visible before the one before it"


def check(sc: Scenario):
    res = sc.run()  # (a failed per-step invariant raises SimulationError)
    st = res.full_state
    check_fixed_bugs(sc, st)
    check_conservation(sc, st, res)
    check_places(st)
    check_timestamps(sc, st)
    check_blocks(sc, st)
    assert_no_nan(res.summary())
    return res


def state_bytes(res) -> bytes:
    st = res.full_state
    cols = res.request_columns()
    return b"".join([st.reqs.tobytes(), st.pd_reqs.tobytes(), st.inst.tobytes(),
                     *(np.ascontiguousarray(cols[k]).tobytes() for k in sorted(cols))])


# ----------------------------------------------------------------------------- the properties


@settings(max_examples=FAST_EXAMPLES, **SETTINGS)
@given(scenarios())
def test_pd_runs_conserve_requests_and_blocks_and_keep_causality(sc):
    check(sc)


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, **SETTINGS)
@given(scenarios())
def test_pd_runs_conserve_requests_and_blocks_and_keep_causality_breadth(sc):
    check(sc)


@settings(max_examples=FAST_EXAMPLES // 4, **SETTINGS)
@given(scenarios())
def test_pd_runs_are_deterministic(sc):
    assert state_bytes(sc.run()) == state_bytes(sc.run())


REQUEST_RESULTS = ("state", "instance", "routed_us", "queued_us", "first_scheduled_us", "first_token_us",
                   "last_token_us", "computed", "generated", "itl_sum_us", "preemptions", "cached_tokens")
INSTANCE_RESULTS = ("steps", "busy_us", "prefill_tokens", "decode_tokens", "kv_allocated", "kv_peak_allocated",
                    "prefix_hit_tokens", "preemptions")


def run_state(sc: Scenario, event_skipping: bool):
    from blis_fast.config.sim import build_config
    from blis_fast.run import build_state, resolve, run_to_end

    return run_to_end(build_state(resolve(build_config(sc.doc)), sc.workload(), event_skipping=event_skipping))


@settings(max_examples=FAST_EXAMPLES // 4, **SETTINGS)
@given(scenarios())
def test_pd_runs_skipping_events_equal_the_path_visiting_every_request(sc):
    """Event skipping (kernels/engine/calendar.py) changes no result of a P/D run: request
    rows (prefill legs included), transfers and instance counters equal the reference
    path's, which visits every running request every step."""
    a, b = run_state(sc, True), run_state(sc, False)
    for f in REQUEST_RESULTS:
        assert np.array_equal(a.reqs[f], b.reqs[f]), f
    assert a.pd_reqs.tobytes() == b.pd_reqs.tobytes()
    for f in INSTANCE_RESULTS:
        assert np.array_equal(a.inst[f], b.inst[f]), f
    for f in a.pd_inst.dtype.names:  # (the reference path names every block: none is anonymous)
        assert f == "held_anon" or np.array_equal(a.pd_inst[f], b.pd_inst[f]), f


# ----------------------------------------------------------------------------- across processes

# a fixed P/D run with every mechanism at work: shared prefixes (cache hits on both sides),
# link contention, waiting for blocks and a horizon-free end
FIXED = {
    "deployments": [{"name": "pd", "model": LLAMA, "hardware": "H100", "latency_model": "blackbox",
                     "alpha_coeffs": [40, 0.5, 10], "beta_coeffs": [700, 2.5, 5], "total_kv_blocks": 60,
                     "max_num_seqs": 4, "prefill": {"instances": 2}, "decode": {"instances": 3},
                     "pd": {"decider": "prefix-threshold", "threshold": 32,
                            "transfer": {"bandwidth_gbps": 1.0, "contention": "link"}}}],
    "workload": {"type": "chatbot", "rate": 40, "num_requests": 120, "prefix_tokens": 64},
    "simulation": {"check_invariants": True, "seed": 3},
}

_CHILD = r"""
import json, sys
import blis_fast
blis_fast.simulate(json.loads(sys.argv[1])).write_results(sys.argv[2])
"""


def test_fixed_run_exercises_the_mechanisms():
    """The cross-process run below is worth comparing: it disaggregates, shares links,
    waits for blocks and completes every request."""
    st = blis_fast.simulate(FIXED).full_state
    n = len(st.pd_reqs)
    assert (st.reqs["state"][:n] == RequestState.COMPLETED).all()
    assert 0 < int((st.pd_reqs["prefill_instance"] >= 0).sum()) < n
    assert int(st.pd_inst["link_peak"].max()) >= 2 and int(st.pd_inst["pd_waits"].sum()) > 0


def test_same_run_twice_in_one_process_writes_identical_results(tmp_path):
    for k in range(2):
        blis_fast.simulate(FIXED).write_results(tmp_path / f"r{k}.json")
    assert (tmp_path / "r0.json").read_bytes() == (tmp_path / "r1.json").read_bytes()


@pytest.mark.slow
def test_fresh_process_matches_in_process(tmp_path):
    child = tmp_path / "child.json"
    p = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(FIXED), str(child)], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    blis_fast.simulate(FIXED).write_results(tmp_path / "here.json")
    assert child.read_bytes() == (tmp_path / "here.json").read_bytes()
