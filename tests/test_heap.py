"""The event heap (kernels.heap) against np.lexsort and tests/naive.py's NaiveEventQueue."""

import numpy as np
import pytest

from kernels import dtypes as D
from kernels.heap import event_kind_instance, event_priority, heap_pop, heap_push
from naive import NaiveEventQueue


def _columns(cap):
    heap = np.zeros(cap, D.EVENT_DT)
    return heap, heap["time_us"], heap["priority"], heap["seq"], heap["request"]


def _pop_all(cols, size):
    out = []
    while size > 0:
        size, t, p, s, r = heap_pop(*cols, size)
        out.append((int(t), int(p), int(s), int(r)))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_pops_follow_lexsort_on_random_insertions(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    # few distinct times and priorities: lots of exact ties, broken only by seq
    times = rng.integers(0, 5, n) * int(rng.choice([1, 1000]))
    prios = rng.integers(0, 4, n)
    reqs = rng.integers(-1, 50, n)
    _, *cols = _columns(n)
    size = 0
    for s in range(n):
        size = heap_push(*cols, size, times[s], prios[s], s, reqs[s])
        assert size == s + 1
    order = np.lexsort((np.arange(n), prios, times))  # last key is the primary key
    expected = [(int(times[k]), int(prios[k]), int(k), int(reqs[k])) for k in order]
    assert _pop_all(cols, size) == expected


@pytest.mark.parametrize("seed", range(20))
def test_interleaved_push_pop_matches_naive_queue(seed):
    rng = np.random.default_rng(100 + seed)
    cap = int(rng.integers(1, 40))
    _, *cols = _columns(cap)
    naive = NaiveEventQueue(capacity=cap)
    size = 0
    seq = 0
    clock = 0
    for _ in range(600):
        if size > 0 and rng.random() < 0.45:
            size, t, p, s, r = heap_pop(*cols, size)
            assert (int(t), int(p), int(s), int(r)) == naive.pop()
            clock = int(t)
        else:
            # simulator-like: new events never before the clock, often exactly at it
            t = clock + int(rng.integers(0, 3))
            p = int(rng.integers(0, 3))
            r = int(rng.integers(0, 9))
            new = heap_push(*cols, size, t, p, seq, r)
            ok = naive.push(t, p, r, seq=seq)
            if ok:
                assert new == size + 1
                size = new
            else:
                assert new == -1
            seq += 1
        assert size == len(naive)
    assert _pop_all(cols, size) == [tuple(e) for e in naive.items]


def test_full_table_returns_minus_one_and_is_unchanged():
    heap, *cols = _columns(3)
    size = 0
    for s, t in enumerate((5, 1, 3)):
        size = heap_push(*cols, size, t, 0, s, s)
    before = heap.copy()
    assert heap_push(*cols, size, 0, 0, 99, 99) == -1
    assert np.array_equal(heap, before)
    assert _pop_all(cols, size) == [(1, 0, 1, 1), (3, 0, 2, 2), (5, 0, 0, 0)]


def test_empty_table_push_is_full():
    _, *cols = _columns(0)
    assert heap_push(*cols, 0, 1, 1, 1, 1) == -1


def test_single_element_round_trip():
    _, *cols = _columns(1)
    size = heap_push(*cols, 0, 7, 2, 3, 4)
    assert size == 1
    assert heap_pop(*cols, size) == (0, 7, 2, 3, 4)


def test_equal_time_and_priority_is_fifo_by_seq():
    n = 50
    _, *cols = _columns(n)
    size = 0
    for s in range(n):
        size = heap_push(*cols, size, 10, 3, s, n - s)
    assert [e[2] for e in _pop_all(cols, size)] == list(range(n))


# ----------------------------------------------------------------------------- priorities


def test_event_priority_band_order():
    cluster = [event_priority(k, -1) for k in (D.EV_CLUSTER_ARRIVAL, D.EV_ADMISSION_DECISION,
                                                D.EV_ROUTING_DECISION)]
    assert cluster == sorted(cluster) and len(set(cluster)) == 3
    for i in range(5):
        q, s = event_priority(D.EV_QUEUED, i), event_priority(D.EV_STEP, i)
        assert q < s  # within an instance: Queued before Step
        assert max(cluster) < q  # every cluster kind before every instance kind
        assert event_priority(D.N_CLUSTER_KINDS - 1, -1) < q  # even later cluster kinds
        # instance i's kinds all before instance i+1's
        last_i = event_priority(D.N_INSTANCE_KINDS - 1, i)
        assert s <= last_i < event_priority(D.EV_QUEUED, i + 1)


@pytest.mark.parametrize("kind,instance", [(0, -1), (1, -1), (2, -1), (15, -1), (0, 0), (1, 0), (3, 0),
                                           (0, 1), (1, 7), (2, 1000)])
def test_event_kind_instance_inverts_event_priority(kind, instance):
    k, i = event_kind_instance(event_priority(kind, instance))
    assert (int(k), int(i)) == (kind, instance)


def test_heap_orders_mixed_event_kinds_like_semantics():
    """At one µs: cluster events, then instance 0 Queued, instance 0 Step, instance 1 ..."""
    events = [
        (event_priority(D.EV_STEP, 1), "step1"),
        (event_priority(D.EV_QUEUED, 1), "queued1"),
        (event_priority(D.EV_STEP, 0), "step0"),
        (event_priority(D.EV_ROUTING_DECISION, -1), "route"),
        (event_priority(D.EV_QUEUED, 0), "queued0"),
        (event_priority(D.EV_ADMISSION_DECISION, -1), "admit"),
    ]
    _, *cols = _columns(len(events))
    size = 0
    for s, (p, _) in enumerate(events):
        size = heap_push(*cols, size, 100, p, s, s)
    names = [events[e[3]][1] for e in _pop_all(cols, size)]
    assert names == ["admit", "route", "queued0", "step0", "queued1", "step1"]
