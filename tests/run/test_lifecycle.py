"""Request lifecycle (docs/semantics.md §1, §9): conservation of requests over states and instances,
exact output counts, timestamp causality, E2E = TTFT + Σ ITL, and dropped-unservable
requests counted once, never cycled.  On the shared ``loaded`` runs (conftest.py)."""

from __future__ import annotations

import numpy as np

from builders import HAND_STEPS, LOADED, lengths_workload, sim
from blis_fast_kernels.schema import REQUEST_STATE_NAMES, RequestState


def test_request_conservation(any_loaded):
    r = any_loaded
    reqs = r.state.reqs
    n = len(reqs)
    counts = np.bincount(reqs["state"], minlength=len(REQUEST_STATE_NAMES))
    assert counts.sum() == n
    c = r.cluster
    assert c["completed_requests"] == counts[RequestState.COMPLETED]
    assert c["still_queued"] == counts[RequestState.QUEUED]
    assert c["still_running"] == counts[RequestState.RUNNING]
    assert c["dropped_unservable"] == counts[RequestState.DROPPED]
    assert c["injected_requests"] == (c["completed_requests"] + c["still_queued"] + c["still_running"]
                                      + c["dropped_unservable"])
    assert c["arrived_requests"] == n - counts[RequestState.PENDING]
    assert c["arrived_requests"] == c["rejected_requests"] + c["injected_requests"] + c["still_in_flight"]
    # per-instance sums add up to the cluster
    for k in ("completed_requests", "still_queued", "still_running", "injected_requests",
              "total_input_tokens", "total_output_tokens", "preemption_count", "dropped_unservable"):
        assert sum(s[k] for s in r.instances) == c[k], k
    # completed requests produced exactly N tokens, others fewer
    done = reqs["state"] == RequestState.COMPLETED
    assert (reqs["generated"][done] == reqs["output_len"][done]).all()
    assert (reqs["generated"][~done] < reqs["output_len"][~done]).all()
    # output tokens are not double-counted after preemption
    assert c["total_output_tokens"] == int(reqs["generated"].sum())


def test_full_run_completes_everything(loaded):
    c = loaded.cluster
    assert c["completed_requests"] + c["dropped_unservable"] == LOADED["num_requests"]
    assert c["still_queued"] == c["still_running"] == c["still_in_flight"] == 0
    assert c["preemption_count"] > 0  # the fixture really exercises KV pressure
    assert c["prefix_cache_hit_rate"] > 0


def test_timestamp_causality(any_loaded):
    reqs = any_loaded.state.reqs
    cfg = any_loaded.setup.config.simulation
    reached = reqs["instance"] >= 0
    assert (reqs["routed_us"][reached] >= reqs["arrival_us"][reached]
            + cfg.admission_latency + cfg.routing_latency).all()
    q = reqs["queued_us"] >= 0
    assert (reqs["queued_us"][q] >= reqs["routed_us"][q]).all()
    s = reqs["first_scheduled_us"] >= 0
    assert (reqs["first_scheduled_us"][s] >= reqs["queued_us"][s]).all()
    f = reqs["first_token_us"] >= 0
    assert (reqs["first_token_us"][f] > reqs["first_scheduled_us"][f]).all()
    assert (reqs["last_token_us"][f] >= reqs["first_token_us"][f]).all()
    assert (reqs["first_scheduled_us"][f] >= 0).all()
    done = reqs["state"] == RequestState.COMPLETED
    assert (reqs["first_token_us"][done] >= 0).all()
    # E2E = TTFT + Σ ITL; every non-negative; sched delay <= TTFT <= E2E
    cols = any_loaded.request_columns()
    assert (cols["e2e_us"][done] == cols["ttft_us"][done] + reqs["itl_sum_us"][done]).all()
    assert (cols["e2e_us"][done] == reqs["last_token_us"][done] - reqs["arrival_us"][done]).all()
    assert (cols["scheduling_delay_us"][f] < cols["ttft_us"][f]).all()
    assert (cols["ttft_us"][done] <= cols["e2e_us"][done]).all()
    # never-routed requests have no timestamps
    for fld in ("routed_us", "queued_us", "first_scheduled_us", "first_token_us"):
        assert (reqs[fld][~reached] == -1).all()


def test_dropped_unservable_counted_not_cycled():
    # 10 blocks of 16 tokens: a 200-token prompt can never fit
    wl = lengths_workload([0, 10, 20], [50, 200, 50], [4, 4, 4])
    r = sim(wl, **HAND_STEPS, total_kv_blocks=10)
    s = r.state.reqs["state"].tolist()
    assert s == [RequestState.COMPLETED, RequestState.DROPPED, RequestState.COMPLETED]
    assert r.cluster["dropped_unservable"] == 1
    assert r.cluster["injected_requests"] == 3 and r.cluster["completed_requests"] == 2
