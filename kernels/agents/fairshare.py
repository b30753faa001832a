"""Exact multi-resource fair share, O(log n) per event: the resource side of agent DAGs.

Model.  Resource r has a capacity C_r (work units per second).  Its consumers are the
tool nodes that load it; consumer i has an integer weight w_i >= 1 and r shares C_r in
proportion: i progresses at C_r * w_i / W_r, W_r = the sum of the weights of r's
consumers.  A node starts when its last predecessor finishes (roots at their request's
arrival) and finishes when its work on every resource it loads is done.

  dynamic  a node leaves r as soon as its r-work is done (r's capacity goes to the rest);
  static   a node stays a consumer of every resource it loads until its last one is done
           (its share of r is then unused: the founding document's formula, finish = now +
           max over r of remaining / share, recomputed at every change of the sets).

A load of zero work is no load: it neither joins nor takes a share.  An optional cap
``max_members`` per resource (0 = none) bounds r's consumers: on a capped resource every
load first enters r's FIFO queue, ordered by (µs it queued, node id), and the instant's
admission step (see "one instant" below) lets waiters join in that order while r is under
its cap.  The cap is per resource: a node may progress on one resource while it waits on
another.  A node's start is when it is released (its last predecessor done), not when a
capped resource admits it.

Virtual clock.  V_r is the work per unit weight r has done since it was last idle; between
two changes of r's consumer set it grows at C_r / W_r.  A load of work x joining r at
virtual time V_r ends there at virtual time vfin = V_r + x / w_i, and r keeps its loads
in a min-heap by (vfin, node id): the next one to finish is the heap's minimum, whatever
happens to W_r later.  So a join or a leave is O(log n), and the real time of the next
finish on r is one formula of the heap's minimum.

Units and rounding.  Time is integer µs.  r is "advanced" to T (``fs_advance``) only when
its consumer set changes at T, and then exactly once per instant:

    V_r += float(T - t_r) * C_r / (float(W_r) * 1e6);   t_r = T

and V_r = 0 instead if r was idle (W_r = 0) over [t_r, T): a clock restarted only after
an idle stretch of at least 1 µs, never in the middle of an instant, where it would
depend on whether a join or a leave at T is handled first.

The finish time of a load with virtual finish v on r (``fs_finish_us``) is the first µs at
which its work is done, rounded up:

    t_r + ceil(float(v - V_r) * float(W_r) * 1e6 / C_r)      (t_r if v <= V_r),

evaluated in float64 in exactly that order (capped at ``NEVER_US``; numba compiles it
without fast-math, so no multiply-add is fused: compiled and interpreted runs agree).  A load is done at
instant T if this is <= T with r's parameters as they stand when it is examined: the
heap is settled (its due loads popped) before every change of r, so a load due under the
old share is never delayed by a join at the same µs.

Exactness.  The naive reference (tests/naive/agents_reference.py) recomputes everything
at every instant (each consumer's finish from scratch, W_r as a fresh sum, no heaps, no
versions, no worklists) but keeps the same per-resource virtual clock, advanced by the
same expression at the same instants (the changes of r's consumer set).  That choice makes
"equal, exactly" a true statement rather than a tolerance: a per-consumer "remaining work"
recompute would round differently from a virtual clock (one subtraction per consumer per
event against one addition per resource per change), and any µs ceiling near an integer
would then differ by 1 µs on some inputs.  The float operations are the same; what the
reference checks independently is everything else (who is a consumer when, which load is
next, the cascade of one instant, the queues, the modes).  Weights are integers so W_r is
exact whatever the order of joins and leaves within an instant; V_r, vfin and the finish
times then do not depend on that order either (an advance by 0 µs changes nothing).

One instant T.  Arrivals at T start their roots; then, until nothing more happens at T:
due loads finish (settled under r's current parameters), a node whose loads are all done
finishes at T and starts its successors whose count of pending predecessors falls to 0;
when that closure is done, every capped resource admits waiters, in queue order, while it
is under its cap, and the closure runs again.  Results do not depend on the order the
events of one instant are handled in.

Tables (plain numpy structured arrays, declared in kernels/schema/tables.py; ``fs_tables``
and ``fs_nodes`` build them): AGENT_RESOURCE_DT per resource, AGENT_LOAD_DT per (node,
resource) load, AGENT_NODE_DT per node (its loads are rows ``load_lo : load_hi``, its
successors ``succ[succ_lo : succ_hi]``, an llm node's request row), and one int64 array
``slots`` holding each resource's heap and wait queue at offset ``slot_off`` (room for every
load of r).  The helpers push loads that become done onto a stack (``done``).

The resources' finish events are one per resource in an EVENT_DT heap of their own
(structs/heap.py; ``request`` = the resource, ``seq`` = its version: an event whose seq is
not ``event_seq`` of its resource is stale and skipped).  ``fs_instant`` runs one instant
to its closure and ``fs_next_us`` says when the next is; the tools-only driver
``run_tool_dags`` alternates the two, and the simulator's event loop (engine/agents.py)
merges ``fs_next_us`` with its own events, its llm nodes being requests to the cluster.
"""

import math

import numpy as np

from ..jit import helper, kernel
from ..schema import AGENT_LOAD_DT, AGENT_NODE_DT, AGENT_RESOURCE_DT, EVENT_DT, AgentCounter
from ..structs.heap import heap_pop, heap_push
from ..structs.keyed_heap import kh_push, kh_remove

NEVER_US = np.int64(1) << np.int64(62)  # a finish this far away (~146,000 years) means "never" (AGENT_NEVER_US)
DYNAMIC = np.int64(0)
STATIC = np.int64(1)

RESOURCE_DT = AGENT_RESOURCE_DT  # (declared in kernels/schema/tables.py: State fields too)
LOAD_DT = AGENT_LOAD_DT


# ----------------------------------------------------------------------------- one resource


@helper
def fs_finish_us(res, r, v):
    """The first µs at which a load with virtual finish v on r is done, with r's current
    parameters (the module docstring's rounding rule)."""
    t = res[r]["t_us"]
    gap = v - res[r]["vclock"]
    if gap <= 0.0:
        return t
    d = gap * np.float64(res[r]["weight_sum"]) * 1e6 / res[r]["capacity"]
    if d >= np.float64(NEVER_US):
        return NEVER_US
    return t + np.int64(math.ceil(d))


@helper
def fs_next_finish_us(res, r, slots, loads):
    """The finish µs of r's next load to finish, NEVER_US if r has no load at work."""
    if res[r]["heap_size"] == 0:
        return NEVER_US
    return fs_finish_us(res, r, loads[slots[res[r]["slot_off"]]]["vfin"])


@helper
def fs_advance(res, r, t):
    """Move r's virtual clock to µs t >= t_r at its current share (only at a change of its
    consumer set: the docstring's update)."""
    dt = t - res[r]["t_us"]
    if dt > 0:
        w = res[r]["weight_sum"]
        if w > 0:
            res[r]["vclock"] += np.float64(dt) * res[r]["capacity"] / (np.float64(w) * 1e6)
            res[r]["busy_us"] += dt
        else:  # idle since t_r: restart the clock (keeps its precision over a long run)
            res[r]["vclock"] = 0.0
        res[r]["t_us"] = t


@helper
def fs_settle(res, r, t, slots, loads, done, n_done):
    """Pop every load of r that is done at µs t under r's current parameters onto the
    stack ``done``; returns the new stack size."""
    off = res[r]["slot_off"]
    vfin = loads["vfin"]
    pos = loads["heap_pos"]
    while res[r]["heap_size"] > 0:
        l = slots[off]
        if fs_finish_us(res, r, vfin[l]) > t:
            break
        res[r]["heap_size"] = kh_remove(slots, off, res[r]["heap_size"], vfin, loads["node"], pos, l)
        done[n_done] = l
        n_done += 1
    return n_done


@helper
def fs_touch(res, r, t, slots, loads, done, n_done):
    """Before a change of r's consumer set at µs t: settle r under its old share, then
    advance it to t.  Returns the new size of ``done``."""
    n_done = fs_settle(res, r, t, slots, loads, done, n_done)
    fs_advance(res, r, t)
    return n_done


@helper
def fs_join(res, l, t, slots, loads, done, n_done):
    """Load l joins its resource at µs t (r must be under its cap); returns the new size
    of ``done``."""
    r = loads[l]["res"]
    n_done = fs_touch(res, r, t, slots, loads, done, n_done)
    loads[l]["vfin"] = res[r]["vclock"] + loads[l]["work"] / np.float64(loads[l]["weight"])
    res[r]["weight_sum"] += loads[l]["weight"]
    res[r]["members"] += 1
    res[r]["heap_size"] = kh_push(slots, res[r]["slot_off"], res[r]["heap_size"], loads["vfin"], loads["node"],
                                  loads["heap_pos"], l)
    return n_done


@helper
def fs_leave(res, l, t, slots, loads, done, n_done):
    """Load l (done, no longer in the heap) stops being a consumer of its resource at µs t;
    returns the new size of ``done``."""
    r = loads[l]["res"]
    n_done = fs_touch(res, r, t, slots, loads, done, n_done)
    res[r]["weight_sum"] -= loads[l]["weight"]
    res[r]["members"] -= 1
    return n_done


@helper
def fs_enqueue(res, l, t, slots, loads):
    """Load l waits in its resource's queue from µs t (ordered by (t, node id))."""
    r = loads[l]["res"]
    loads[l]["wait_key"] = np.float64(t)
    res[r]["wait_size"] = kh_push(slots, res[r]["slot_off"] + res[r]["n_loads"], res[r]["wait_size"],
                                  loads["wait_key"], loads["node"], loads["wait_pos"], l)


@helper
def fs_admit(res, r, t, slots, loads, done, n_done):
    """r admits waiters, in queue order, while it is under its cap.  Returns (new size of
    ``done``, number of loads admitted)."""
    n_adm = 0
    qoff = res[r]["slot_off"] + res[r]["n_loads"]
    while res[r]["wait_size"] > 0 and res[r]["members"] < res[r]["max_members"]:
        l = slots[qoff]
        res[r]["wait_size"] = kh_remove(slots, qoff, res[r]["wait_size"], loads["wait_key"], loads["node"],
                                        loads["wait_pos"], l)
        n_done = fs_join(res, l, t, slots, loads, done, n_done)
        n_adm += 1
    return n_done, n_adm


# ----------------------------------------------------------------------------- tables


@kernel
def fs_tables(capacity, max_members, node_weight, node_load_ptr, load_res, load_work):
    """The tables of a run: (RESOURCE_DT[R], LOAD_DT[L], slots int64[2 L]).  ``capacity``
    float64[R] (units/s), ``max_members`` int64[R] (0 = no cap), ``node_weight``
    int64[N] (>= 1), ``node_load_ptr`` int64[N + 1] (CSR), ``load_res`` int64[L],
    ``load_work`` float64[L] (units)."""
    n_res = capacity.shape[0]
    n_loads = load_res.shape[0]
    res = np.zeros(n_res, RESOURCE_DT)
    loads = np.zeros(n_loads, LOAD_DT)
    for r in range(n_res):
        res[r]["capacity"] = capacity[r]
        res[r]["max_members"] = max_members[r]
        res[r]["event_seq"] = -1
    for n in range(node_load_ptr.shape[0] - 1):
        for l in range(node_load_ptr[n], node_load_ptr[n + 1]):
            loads[l]["node"] = n
            loads[l]["res"] = load_res[l]
            loads[l]["work"] = load_work[l]
            loads[l]["weight"] = node_weight[n]
            loads[l]["heap_pos"] = -1
            loads[l]["wait_pos"] = -1
            res[load_res[l]]["n_loads"] += 1
    off = np.int64(0)
    for r in range(n_res):
        res[r]["slot_off"] = off
        off += 2 * res[r]["n_loads"]
    return res, loads, np.zeros(off, np.int64)


@kernel
def fs_nodes(pending, node_load_ptr, succ_ptr, node_request):
    """The node table (AGENT_NODE_DT[N]) of a run: ``pending`` int64[N] (predecessors; 0 =
    a root), loads and successors in CSR (``node_load_ptr``, ``succ_ptr``: int64[N + 1]),
    ``node_request`` int64[N] (an llm node's request row, -1 for a tool)."""
    n = pending.shape[0]
    nodes = np.zeros(n, AGENT_NODE_DT)
    for k in range(n):
        nodes[k]["pending"] = pending[k]
        nodes[k]["start_us"] = -1
        nodes[k]["finish_us"] = -1
        nodes[k]["load_lo"] = node_load_ptr[k]
        nodes[k]["load_hi"] = node_load_ptr[k + 1]
        nodes[k]["succ_lo"] = succ_ptr[k]
        nodes[k]["succ_hi"] = succ_ptr[k + 1]
        nodes[k]["request"] = node_request[k]
    return nodes


# ----------------------------------------------------------------------------- instants
#
# An instant's state lives in arrays only (the counters ``c``, columns AgentCounter), so the
# same helpers run the tools-only driver below and the simulator's event loop
# (kernels/engine/agents.py), which keeps these arrays in its State.


@helper
def _mark(res, dirty_list, c, r):
    """Note that r's next finish may have changed."""
    if res[r]["dirty"] == 0:
        res[r]["dirty"] = 1
        dirty_list[c[AgentCounter.N_DIRTY]] = r
        c[AgentCounter.N_DIRTY] += 1


@helper
def _push_load(done, c, l):
    done[c[AgentCounter.N_DONE]] = l
    c[AgentCounter.N_DONE] += 1


@helper
def _settle_into(res, r, t, slots, loads, done, c):
    """fs_settle onto the instant's stack of done loads."""
    c[AgentCounter.N_DONE] = fs_settle(res, r, t, slots, loads, done, c[AgentCounter.N_DONE])


@helper
def _join_into(res, l, t, slots, loads, done, c):
    c[AgentCounter.N_DONE] = fs_join(res, l, t, slots, loads, done, c[AgentCounter.N_DONE])


@helper
def _leave_into(res, l, t, slots, loads, done, c):
    c[AgentCounter.N_DONE] = fs_leave(res, l, t, slots, loads, done, c[AgentCounter.N_DONE])


@helper
def _node_done(nodes, stack, c, n):
    """Node n has nothing left to do: it finishes at the current instant."""
    stack[c[AgentCounter.N_STACK]] = n
    c[AgentCounter.N_STACK] += 1


@helper
def _start_node(n, t, res, loads, slots, nodes, done, stack, dirty_list, released, c):
    """Node n starts at µs t: each of its loads joins (or, on a capped resource, queues);
    an llm node's request is to be sent (``released``); a node with nothing to do is done
    at once."""
    nodes[n]["start_us"] = t
    left = 0
    for l in range(nodes[n]["load_lo"], nodes[n]["load_hi"]):
        if loads[l]["work"] > 0.0:
            left += 1
            r = loads[l]["res"]
            if res[r]["max_members"] > 0:
                fs_enqueue(res, l, t, slots, loads)  # admitted by the instant's admission step
            else:
                _join_into(res, l, t, slots, loads, done, c)
                _mark(res, dirty_list, c, r)
    if nodes[n]["request"] >= 0:  # its LLM call: done when the request's last token is out
        left += 1
        released[c[AgentCounter.N_RELEASED]] = n
        c[AgentCounter.N_RELEASED] += 1
    nodes[n]["left"] = left
    if left == 0:
        _node_done(nodes, stack, c, n)


@helper
def fs_part_done(nodes, stack, c, n):
    """One of started node n's parts (a load, its llm call) is done; the node finishes at
    the current instant when it was the last."""
    nodes[n]["left"] -= 1
    if nodes[n]["left"] == 0:
        _node_done(nodes, stack, c, n)


@helper
def _close_instant(t, mode, res, loads, slots, nodes, succ, done, stack, dirty_list, released, c):
    """Handle the done loads and nodes at µs t until none is left: a node whose parts are
    all done finishes and starts the successors it was the last predecessor of."""
    while c[AgentCounter.N_DONE] > 0 or c[AgentCounter.N_STACK] > 0:
        if c[AgentCounter.N_DONE] > 0:
            c[AgentCounter.N_DONE] -= 1
            l = done[c[AgentCounter.N_DONE]]
            if mode == DYNAMIC:
                _leave_into(res, l, t, slots, loads, done, c)
                _mark(res, dirty_list, c, loads[l]["res"])
            fs_part_done(nodes, stack, c, loads[l]["node"])
        else:
            c[AgentCounter.N_STACK] -= 1
            n = stack[c[AgentCounter.N_STACK]]
            nodes[n]["finish_us"] = t
            if mode == STATIC:
                for l in range(nodes[n]["load_lo"], nodes[n]["load_hi"]):
                    if loads[l]["work"] > 0.0:
                        _leave_into(res, l, t, slots, loads, done, c)
                        _mark(res, dirty_list, c, loads[l]["res"])
            for k in range(nodes[n]["succ_lo"], nodes[n]["succ_hi"]):
                s = succ[k]
                nodes[s]["pending"] -= 1
                if nodes[s]["pending"] == 0:
                    _start_node(s, t, res, loads, slots, nodes, done, stack, dirty_list, released, c)


@helper
def _skip_stale(heap, res, c):
    """Drop the stale events (an older event of a resource that has been rescheduled since)
    from the top of the heap."""
    hsize = c[AgentCounter.HEAP_SIZE]
    while hsize > 0 and heap[0]["seq"] != res[heap[0]["request"]]["event_seq"]:
        hsize = heap_pop(heap, hsize)[0]
    c[AgentCounter.HEAP_SIZE] = hsize


@helper
def _compact(heap, hsize, res):
    """Drop every stale event of a full heap and rebuild it in place from the live ones
    (at most one per resource); returns the new size."""
    time = heap["time_us"]
    prio = heap["priority"]
    seq = heap["seq"]
    req = heap["request"]
    arg2 = heap["arg2"]
    kept = 0
    for i in range(hsize):
        if seq[i] == res[req[i]]["event_seq"]:
            time[kept] = time[i]
            prio[kept] = prio[i]
            seq[kept] = seq[i]
            req[kept] = req[i]
            arg2[kept] = arg2[i]
            kept += 1
    size = np.int64(0)
    for i in range(kept):  # a push writes only at indices <= i, all read already
        size = heap_push(heap, size, time[i], prio[i], seq[i], np.int64(req[i]), np.int64(arg2[i]))
    return size


@helper
def _reschedule(res, slots, loads, heap, dirty_list, c):
    """One finish event per resource that changed, at its next finish (older ones become
    stale; a full heap is compacted).  A heap full of live events (it has room for
    2 R + 64: it cannot be) sets the STATUS counter."""
    hsize = c[AgentCounter.HEAP_SIZE]
    seq = c[AgentCounter.SEQ]
    for i in range(c[AgentCounter.N_DIRTY]):
        r = dirty_list[i]
        res[r]["dirty"] = 0
        nf = fs_next_finish_us(res, r, slots, loads)
        res[r]["event_seq"] = -1
        if nf < NEVER_US:
            if hsize == heap.shape[0]:
                hsize = _compact(heap, hsize, res)
            size = heap_push(heap, hsize, nf, np.int64(0), seq, r, np.int64(0))
            if size < 0:
                c[AgentCounter.STATUS] = 1
                break
            hsize = size
            res[r]["event_seq"] = seq
            seq += 1
    c[AgentCounter.N_DIRTY] = 0
    c[AgentCounter.HEAP_SIZE] = hsize
    c[AgentCounter.SEQ] = seq


@helper
def fs_next_us(arrival_us, res, heap, c):
    """The agents' next instant: their next arrival or resource finish, NEVER_US if none
    (llm completions come as events of the simulator's own)."""
    _skip_stale(heap, res, c)
    t = NEVER_US
    if c[AgentCounter.HEAP_SIZE] > 0:
        t = heap[0]["time_us"]
    q = c[AgentCounter.NEXT_ARRIVAL]
    if q < arrival_us.shape[0] and arrival_us[q] < t:
        t = arrival_us[q]
    return t


@helper
def fs_instant(t, arrival_us, first_node, mode, res, loads, slots, nodes, succ, done, stack, dirty_list, released,
               heap, c):
    """Run the instant µs t to its closure (the module docstring's "one instant"): the
    arrivals at t start their roots; done loads and nodes cascade; the resources with
    loads due at t settle; capped resources admit their waiters; until nothing more
    happens at t.  Nodes already on the done stack (an llm node's completion) are part of
    it.  The llm nodes it starts are left in ``released`` for the caller to send."""
    q = c[AgentCounter.NEXT_ARRIVAL]
    while q < arrival_us.shape[0] and arrival_us[q] == t:
        for n in range(first_node[q], first_node[q + 1]):
            if nodes[n]["pending"] == 0:
                _start_node(n, t, res, loads, slots, nodes, done, stack, dirty_list, released, c)
        q += 1
        c[AgentCounter.EVENTS] += 1
    c[AgentCounter.NEXT_ARRIVAL] = q
    n_res = res.shape[0]
    while True:
        _close_instant(t, mode, res, loads, slots, nodes, succ, done, stack, dirty_list, released, c)
        _reschedule(res, slots, loads, heap, dirty_list, c)
        if c[AgentCounter.STATUS] != 0:
            return
        _skip_stale(heap, res, c)
        if c[AgentCounter.HEAP_SIZE] > 0 and heap[0]["time_us"] == t:  # a resource with loads done at t
            r = np.int64(heap[0]["request"])
            c[AgentCounter.HEAP_SIZE] = heap_pop(heap, c[AgentCounter.HEAP_SIZE])[0]
            res[r]["event_seq"] = -1
            c[AgentCounter.EVENTS] += 1
            _settle_into(res, r, t, slots, loads, done, c)
            _mark(res, dirty_list, c, r)
            continue
        admitted = 0  # the closure is done: capped resources admit their waiters
        for r in range(n_res):
            if res[r]["wait_size"] > 0 and res[r]["members"] < res[r]["max_members"]:
                c[AgentCounter.N_DONE], k = fs_admit(res, r, t, slots, loads, done, c[AgentCounter.N_DONE])
                admitted += k
                _mark(res, dirty_list, c, r)
        if admitted == 0:
            return


@helper
def fs_work_done(nodes, loads, work_done):
    """Per resource, the work of the finished nodes into ``work_done`` (zeros), summed in
    load order (the same float whatever order the events came in)."""
    for n in range(nodes.shape[0]):
        if nodes[n]["finish_us"] >= 0:
            for l in range(nodes[n]["load_lo"], nodes[n]["load_hi"]):
                work_done[loads[l]["res"]] += loads[l]["work"]


@helper
def heap_rows(n_res):
    """Rows of the agents' finish-event heap: one live event per resource at most, and
    room for stale ones (compacted away when it fills up)."""
    return 2 * n_res + 64


# ----------------------------------------------------------------------------- tools-only driver


@kernel
def run_tool_dags(arrival_us, req_node_ptr, pending, node_weight, node_load_ptr, load_res, load_work, succ_ptr, succ,
                  capacity, max_members, mode):
    """Run a workload of tool-only DAG requests to the end.

    Requests: ``arrival_us`` int64[Q] (non-decreasing), their nodes ``req_node_ptr``
    int64[Q + 1] (request q owns nodes req_node_ptr[q] : req_node_ptr[q+1]).  Nodes:
    ``pending`` int64[N] (number of predecessors; 0 = a root), ``node_weight`` int64[N]
    (>= 1), loads in CSR ``node_load_ptr`` int64[N + 1] / ``load_res`` int64[L] /
    ``load_work`` float64[L] (units, >= 0), successors in CSR ``succ_ptr`` int64[N + 1] /
    ``succ`` int64[E] (global node ids).  Resources: ``capacity`` float64[R] (units/s, > 0),
    ``max_members`` int64[R] (0 = no cap).  ``mode``: DYNAMIC (0) or STATIC (1).  Inputs
    are validated by the caller (an acyclic DAG inside each request, ids in range).

    Returns (node_start_us int64[N], node_finish_us int64[N] (-1: never started/finished),
    busy_us int64[R] (µs with at least one consumer), work_done float64[R] (the work of
    the finished nodes, summed in load order), events int64
    (arrivals + resource finish events handled), status int64 (0 = ok))."""
    n_nodes = pending.shape[0]
    n_res = capacity.shape[0]
    n_loads = load_res.shape[0]
    res, loads, slots = fs_tables(capacity, max_members, node_weight, node_load_ptr, load_res, load_work)
    nodes = fs_nodes(pending, node_load_ptr, succ_ptr, np.full(n_nodes, -1, np.int64))
    done = np.empty(max(n_loads, 1), np.int64)
    stack = np.empty(max(n_nodes, 1), np.int64)
    released = np.empty(max(n_nodes, 1), np.int64)  # (no llm node here: stays empty)
    dirty_list = np.empty(max(n_res, 1), np.int64)
    heap = np.zeros(heap_rows(n_res), EVENT_DT)
    c = np.zeros(len(AgentCounter), np.int64)
    while c[AgentCounter.STATUS] == 0:
        t = fs_next_us(arrival_us, res, heap, c)
        if t == NEVER_US:
            break
        fs_instant(t, arrival_us, req_node_ptr, mode, res, loads, slots, nodes, succ, done, stack, dirty_list,
                   released, heap, c)
    busy_us = np.empty(n_res, np.int64)
    for r in range(n_res):
        busy_us[r] = res[r]["busy_us"]
    work_done = np.zeros(n_res, np.float64)
    fs_work_done(nodes, loads, work_done)
    return (nodes["start_us"].copy(), nodes["finish_us"].copy(), busy_us, work_done, c[AgentCounter.EVENTS],
            c[AgentCounter.STATUS])
