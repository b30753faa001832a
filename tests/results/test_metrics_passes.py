"""The one-pass summary machinery of blis_fast.results.metrics gives exactly what the
straightforward per-group computation gives: ITL samples per instance from one coverage
pass, weighted percentiles from one sort (packed keys or argsort), several percentiles
from one sort, equal to numpy's bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from blis_fast.results.metrics import (
    _sort_by_value,
    percentile_us,
    percentiles_us,
    stable_order,
    weighted_percentile_us,
    weighted_percentiles_us,
)
from builders import COMPAT, LOADED, LOADED_HORIZON, sim
from blis_fast_kernels.schema import RequestState


def _multiset(values, counts):
    order = np.lexsort((counts, values))
    v, c = values[order], counts[order]
    keep = c > 0
    v, c = v[keep], c[keep]
    # merge equal values
    starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])
    return v[starts].tolist(), np.add.reduceat(c, starts).tolist() if len(c) else []


@pytest.fixture(scope="module", params=[
    pytest.param({}, id="normal"),
    pytest.param({"compat": COMPAT}, id="compat"),
    pytest.param({"horizon": LOADED_HORIZON}, id="horizon"),
])
def loaded(request):
    return sim(**{**LOADED, **request.param})


def test_by_instance_equals_per_group_histograms(loaded):
    reqs = loaded.state.reqs
    completed = reqs["state"] == RequestState.COMPLETED
    itl = loaded._itl
    cluster, of = itl.by_instance(completed)
    assert _multiset(*cluster) == _multiset(*itl.histogram(completed))
    for i in loaded._used_instances().tolist():
        assert _multiset(*of(i)) == _multiset(*itl.histogram(completed & (reqs["instance"] == i))), i


def test_instance_summaries_use_each_instances_requests(loaded):
    reqs = loaded.state.reqs
    for s in loaded.instances:
        i = int(s["instance_id"].removeprefix("instance_"))
        mine = reqs["instance"] == i
        assert s["completed_requests"] == int((mine & (reqs["state"] == RequestState.COMPLETED)).sum())
        assert s["total_output_tokens"] >= 0
    assert loaded.cluster["completed_requests"] == sum(s["completed_requests"] for s in loaded.instances)


@pytest.mark.parametrize("seed", range(5))
def test_weighted_percentiles_equal_the_repeated_samples(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    values = rng.integers(0, 50 if seed % 2 else 10**6, n)
    counts = rng.integers(0, 7, n)
    counts[0] = max(counts[0], 1)
    samples = np.repeat(values, counts)
    expect = [float(np.percentile(samples, p)) for p in (50, 90, 95, 99, 100)]
    assert weighted_percentiles_us(values, counts, (50, 90, 95, 99, 100)) == expect
    assert weighted_percentile_us(values, counts, 99) == expect[3]
    assert percentiles_us(samples) == [percentile_us(samples, p) for p in (90, 95, 99)]


@pytest.mark.parametrize("seed", range(8))
def test_percentiles_equal_numpys_bit_for_bit(seed):
    """One sort + numpy's interpolation rules gives np.percentile's numbers exactly, for
    integer and float samples, tiny and large sets, any p in [0, 100]."""
    rng = np.random.default_rng(100 + seed)
    ps = (0, 1, 12.5, 33.3, 50, 66.7, 90, 95, 99, 99.9, 100)
    for n in (1, 2, 3, 7, int(rng.integers(10, 5000))):
        for values in (rng.integers(-(10**12), 10**12, n), rng.integers(0, 9, n), rng.normal(1e6, 3e5, n)):
            expect = np.percentile(values, ps)
            got = np.array(percentiles_us(values, ps))
            assert got.tobytes() == expect.tobytes(), (n, values.dtype)
            assert percentile_us(values, 99.9) == float(np.percentile(values, 99.9))


def test_sort_by_value_packs_or_falls_back():
    values = np.array([5, -3, 5, 2**40, 0], np.int64)
    counts = np.array([1, 2, 3, 4, 5], np.int64)
    v, c = _sort_by_value(values, counts)
    assert v.tolist() == [-3, 0, 5, 5, 2**40] and sorted(c[2:4].tolist()) == [1, 3]
    assert c[[0, 1, 4]].tolist() == [2, 5, 4]
    wide = np.array([-(2**62), 2**62, 7], np.int64)  # range too wide to pack: argsort
    v, c = _sort_by_value(wide, np.array([1, 2, 3]))
    assert v.tolist() == [-(2**62), 7, 2**62] and c.tolist() == [1, 3, 2]
    floats = np.array([2.5, -1.0, 0.5])
    v, c = _sort_by_value(floats, np.array([1, 2, 3]))
    assert v.tolist() == [-1.0, 0.5, 2.5] and c.tolist() == [2, 3, 1]
    assert [x.tolist() for x in _sort_by_value(np.zeros(0, np.int64), np.zeros(0, np.int64))] == [[], []]
    assert weighted_percentiles_us(np.zeros(0, np.int64), np.zeros(0, np.int64)) == [0.0, 0.0, 0.0]


def test_stable_order_is_argsort_stable():
    rng = np.random.default_rng(3)
    for keys in (rng.integers(0, 16, 1000), rng.integers(0, 2**20, 1000), np.zeros(0, np.int64),
                 np.array([3, -1, 3, 0])):
        assert stable_order(keys).tolist() == np.argsort(keys, kind="stable").tolist()


def test_judged_fields_are_gathered_in_one_pass_equal_to_the_table(loaded):
    from blis_fast.results.metrics import JUDGED_FIELDS, RequestColumns, gather_fields

    reqs = loaded.state.reqs
    cols = gather_fields(reqs, JUDGED_FIELDS)
    assert set(cols) == set(JUDGED_FIELDS)
    for name, col in cols.items():
        assert col.dtype == reqs.dtype[name] and col.flags.c_contiguous and not col.flags.writeable, name
        assert np.array_equal(col, reqs[name]), name
    # every other field (and every field of a layout it cannot read) is read by itself
    assert gather_fields(reqs[::2], JUDGED_FIELDS) == {}  # not contiguous
    assert gather_fields(reqs, ("arrival_us", "no_such_field")) == {}
    table = RequestColumns(reqs)
    assert np.array_equal(table["state"], reqs["state"]) and np.array_equal(table["key_start"], reqs["key_start"])


def test_cluster_and_request_metrics_share_sorted_samples_equal_to_a_fresh_sort(loaded):
    from blis_fast.results.result import Result

    lat = loaded.latencies
    win = loaded.in_window
    done = lat["done"] if win is None else lat["done"] & win
    first = lat["has_first"] if win is None else lat["has_first"] & win
    ordered = loaded.ordered_latencies
    assert np.array_equal(ordered["e2e"], np.sort(lat["e2e_us"][done]))
    assert np.array_equal(ordered["ttft"], np.sort(lat["ttft_us"][first]))
    # the cluster summary and the whole-run metrics equal those of a result without the shared samples
    fresh = Result(loaded.setup, loaded.workload, loaded.state)
    fresh.__dict__["ordered_latencies"] = None  # (never read below: the statistics sort their own samples)
    from blis_fast.results.scorecard import group_metrics

    everything = np.ones(len(loaded.state.reqs), bool)
    by_mask = group_metrics(fresh, everything)
    for k, v in group_metrics(loaded, None).items():
        assert by_mask[k] == v, k
    for p, population in (("e2e", done), ("ttft", first)):
        assert loaded.cluster[f"{p}_p99_ms"] == percentile_us(lat[f"{p}_us"][population], 99) / 1000.0
