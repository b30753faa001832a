"""The event heap (kernels/structs/heap.py) and event priorities (kernels/engine/events.py)
against np.lexsort and tests/naive/heap.py's NaiveEventQueue."""

import numpy as np
import pytest

import entry as E
from blis_fast_kernels.schema import EVENT_DT, N_CLUSTER_KINDS, N_INSTANCE_KINDS, ClusterEvent, InstanceEvent, Status
from naive.heap import NaiveEventQueue
from states import lengths_state


def _heap(cap):
    return np.zeros(cap, EVENT_DT)


def _arg2(s, r):
    """The second payload value the tests give event (seq s, request r): it must travel with its record."""
    return 1000 * int(s) - int(r)


def _push(heap, size, t, p, s, r):
    return E.heap_push(heap, size, t, p, s, r, _arg2(s, r))


def _pop(heap, size, arg2=_arg2):
    size, t, p, s, r, a2 = E.heap_pop(heap, size)
    assert int(a2) == arg2(s, r)
    return size, t, p, s, r


def _pop_all(heap, size, arg2=_arg2):
    out = []
    while size > 0:
        size, t, p, s, r = _pop(heap, size, arg2)
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
    heap = _heap(n)
    size = 0
    for s in range(n):
        size = _push(heap, size, times[s], prios[s], s, reqs[s])
        assert size == s + 1
    order = np.lexsort((np.arange(n), prios, times))  # last key is the primary key
    expected = [(int(times[k]), int(prios[k]), int(k), int(reqs[k])) for k in order]
    assert _pop_all(heap, size) == expected


@pytest.mark.parametrize("seed", range(20))
def test_interleaved_push_pop_matches_naive_queue(seed):
    rng = np.random.default_rng(100 + seed)
    cap = int(rng.integers(1, 40))
    heap = _heap(cap)
    naive = NaiveEventQueue(capacity=cap)
    size = 0
    seq = 0
    clock = 0
    for _ in range(600):
        if size > 0 and rng.random() < 0.45:
            size, t, p, s, r = _pop(heap, size)
            assert (int(t), int(p), int(s), int(r)) == naive.pop()
            clock = int(t)
        else:
            # simulator-like: new events never before the clock, often exactly at it
            t = clock + int(rng.integers(0, 3))
            p = int(rng.integers(0, 3))
            r = int(rng.integers(0, 9))
            new = _push(heap, size, t, p, seq, r)
            ok = naive.push(t, p, r, seq=seq)
            if ok:
                assert new == size + 1
                size = new
            else:
                assert new == -1
            seq += 1
        assert size == len(naive)
    assert _pop_all(heap, size) == [tuple(e) for e in naive.items]


def test_event_before_is_lexicographic():
    cases = [((1, 9, 9), (2, 0, 0), True), ((2, 0, 0), (1, 9, 9), False), ((1, 1, 9), (1, 2, 0), True),
             ((1, 2, 0), (1, 1, 9), False), ((1, 1, 1), (1, 1, 2), True), ((1, 1, 2), (1, 1, 1), False),
             ((1, 1, 1), (1, 1, 1), False)]
    for a, b, want in cases:
        assert bool(E.event_before(*a, *b)) == want, (a, b)


def test_full_table_returns_minus_one_and_is_unchanged():
    heap = _heap(3)
    size = 0
    for s, t in enumerate((5, 1, 3)):
        size = _push(heap, size, t, 0, s, s)
    before = heap.copy()
    assert _push(heap, size, 0, 0, 99, 99) == -1
    assert np.array_equal(heap, before)
    assert _pop_all(heap, size) == [(1, 0, 1, 1), (3, 0, 2, 2), (5, 0, 0, 0)]


def test_empty_table_push_is_full():
    assert _push(_heap(0), 0, 1, 1, 1, 1) == -1


def test_single_element_round_trip():
    heap = _heap(1)
    size = _push(heap, 0, 7, 2, 3, 4)
    assert size == 1
    assert tuple(int(x) for x in E.heap_pop(heap, size)) == (0, 7, 2, 3, 4, _arg2(3, 4))


def test_equal_time_and_priority_is_fifo_by_seq():
    n = 50
    heap = _heap(n)
    size = 0
    for s in range(n):
        size = _push(heap, size, 10, 3, s, n - s)
    assert [e[2] for e in _pop_all(heap, size)] == list(range(n))


# ----------------------------------------------------------------------------- priorities


def _prio(kind, instance):
    return int(E.event_priority(kind, instance))


def test_event_priority_band_order():
    cluster = [_prio(k, -1) for k in (ClusterEvent.ARRIVAL, ClusterEvent.ADMISSION, ClusterEvent.ROUTING)]
    assert cluster == sorted(cluster) and len(set(cluster)) == 3
    for i in range(5):
        q, s = _prio(InstanceEvent.QUEUED, i), _prio(InstanceEvent.STEP, i)
        assert q < s  # within an instance: Queued before Step
        assert max(cluster) < q  # every cluster kind before every instance kind
        assert _prio(N_CLUSTER_KINDS - 1, -1) < q  # even later cluster kinds
        # instance i's kinds all before instance i+1's
        last_i = _prio(N_INSTANCE_KINDS - 1, i)
        assert s <= last_i < _prio(InstanceEvent.QUEUED, i + 1)


@pytest.mark.parametrize("kind,instance", [(0, -1), (1, -1), (2, -1), (15, -1), (0, 0), (1, 0), (3, 0),
                                           (0, 1), (1, 7), (2, 1000)])
def test_event_kind_instance_inverts_event_priority(kind, instance):
    k, i = E.event_kind_instance(E.event_priority(kind, instance))
    assert (int(k), int(i)) == (kind, instance)


def test_heap_orders_mixed_event_kinds_like_semantics():
    """At one µs: cluster events, then instance 0 Queued, instance 0 Step, instance 1 ..."""
    events = [
        (_prio(InstanceEvent.STEP, 1), "step1"),
        (_prio(InstanceEvent.QUEUED, 1), "queued1"),
        (_prio(InstanceEvent.STEP, 0), "step0"),
        (_prio(ClusterEvent.ROUTING, -1), "route"),
        (_prio(InstanceEvent.QUEUED, 0), "queued0"),
        (_prio(ClusterEvent.ADMISSION, -1), "admit"),
    ]
    heap = _heap(len(events))
    size = 0
    for s, (p, _) in enumerate(events):
        size = _push(heap, size, 100, p, s, s)
    names = [events[e[3]][1] for e in _pop_all(heap, size)]
    assert names == ["admit", "route", "queued0", "step0", "queued1", "step1"]


# ----------------------------------------------------------------------------- push_event


def test_push_event_numbers_events_and_reports_a_full_heap():
    st = lengths_state([16], [1])
    st = st._replace(heap=_heap(2))
    lp = st.loop
    E.push_event(st, 10, _prio(InstanceEvent.STEP, 0), -1)
    E.push_event(st, 5, _prio(ClusterEvent.ARRIVAL, -1), 0)
    assert int(lp[0]["heap_size"]) == 2 and int(lp[0]["seq"]) == 2 and int(lp[0]["status"]) == Status.OK
    before = st.heap.copy()
    E.push_event(st, 1, 0, 0)  # no room: the status says so, the heap is unchanged
    assert int(lp[0]["status"]) == Status.HEAP_FULL
    assert int(lp[0]["heap_size"]) == 2
    assert np.array_equal(st.heap, before)
    assert _pop_all(st.heap, 2, arg2=lambda s, r: 0) == [(5, _prio(ClusterEvent.ARRIVAL, -1), 1, 0),
                                                         (10, _prio(InstanceEvent.STEP, 0), 0, -1)]


def test_push_event_with_carries_the_second_payload_value():
    st = lengths_state([16], [1])
    E.push_event_with(st, 7, _prio(InstanceEvent.QUEUED, 0), 3, 12345)
    E.push_event(st, 9, _prio(InstanceEvent.STEP, 0), -1)
    assert [tuple(int(x) for x in E.heap_pop(st.heap, n)[1:]) for n in (2, 1)] == \
        [(7, _prio(InstanceEvent.QUEUED, 0), 0, 3, 12345), (9, _prio(InstanceEvent.STEP, 0), 1, -1, 0)]


def test_payload_values_keep_their_documented_range():
    """request and arg2 are int32 (a 32-byte record): request ids up to MAX_REQUESTS - 1, -1,
    and any arg2 in [-2^31, 2^31) come back as pushed, as int64."""
    payloads = [(99_999_999, 2**31 - 1), (-1, -2**31), (0, 65_535), (12_345, -1)]
    heap = _heap(len(payloads))
    size = 0
    for s, (r, a2) in enumerate(payloads):
        size = E.heap_push(heap, size, 5, 1, s, r, a2)
    popped = []
    while size > 0:
        size, _, _, _, r, a2 = E.heap_pop(heap, size)
        assert isinstance(r, (int, np.int64)) and isinstance(a2, (int, np.int64))
        popped.append((int(r), int(a2)))
    assert popped == payloads
