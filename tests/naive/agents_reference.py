"""Naive reference for the fair share of agent tool nodes (kernels/agents/fairshare.py):
plain Python that recomputes everything at every instant.

No heaps, no versions, no event queue, no lazy state: at every step it scans every load
at work, recomputes each one's finish µs from scratch (W_r as a fresh sum over r's
members) and takes the earliest; within an instant it finds every load due under the
current parameters in one batch, applies the batch, and repeats until nothing more is due;
then capped resources admit waiters (sorted by (µs queued, node id)) and it repeats again.

It shares with the kernel only the definition of the arithmetic (the kernel module's
docstring says why that is what makes "equal, exactly" hold): per resource a virtual
clock V_r advanced, at the instants r's consumer set changes, by
``float(T - t_r) * C_r / (float(W_r) * 1e6)`` (reset to 0 after an idle stretch), a load's virtual finish
``V_r + work / weight``, and the finish µs ``t_r + ceil(float(v - V_r) * float(W_r) * 1e6 / C_r)``
(``t_r`` when ``v <= V_r``), in that order of operations.
"""

from __future__ import annotations

import math

NEVER_US = 1 << 62
IDLE, QUEUED, WORKING, HELD, LEFT = range(5)  # HELD: static mode, r-work done but still a consumer


def reference_run(arrival_us, req_node_ptr, pending, node_weight, node_load_ptr, load_res, load_work, succ_ptr, succ,
                  capacity, max_members, mode):
    """Same arguments and results as ``run_tool_dags`` (without the event count and status):
    (node_start, node_finish, busy_us, work_done) as lists."""
    static = int(mode) == 1
    n_res = len(capacity)
    n_nodes = len(pending)
    load_node = [n for n in range(n_nodes) for _ in range(node_load_ptr[n], node_load_ptr[n + 1])]
    loads_of = [[l for l in range(node_load_ptr[n], node_load_ptr[n + 1]) if float(load_work[l]) > 0.0]
                for n in range(n_nodes)]
    state = [IDLE] * len(load_res)
    vfin = [0.0] * len(load_res)
    queued_at = [0] * len(load_res)
    t_res = [0] * n_res
    vclock = [0.0] * n_res
    members = [set() for _ in range(n_res)]
    busy = [0] * n_res
    work_done = [0.0] * n_res
    pend = [int(p) for p in pending]
    start = [-1] * n_nodes
    finish = [-1] * n_nodes
    left = [0] * n_nodes

    def weight_sum(r):
        return sum(int(node_weight[load_node[m]]) for m in members[r])

    def advance(r, t):
        if t > t_res[r]:
            w = weight_sum(r)
            if w > 0:
                vclock[r] += float(t - t_res[r]) * float(capacity[r]) / (float(w) * 1e6)
                busy[r] += t - t_res[r]
            else:
                vclock[r] = 0.0
            t_res[r] = t

    def finish_us(l):
        r = int(load_res[l])
        gap = vfin[l] - vclock[r]
        if gap <= 0.0:
            return t_res[r]
        d = gap * float(weight_sum(r)) * 1e6 / float(capacity[r])
        return NEVER_US if d >= float(NEVER_US) else t_res[r] + math.ceil(d)

    def join(l, t):
        r = int(load_res[l])
        advance(r, t)
        vfin[l] = vclock[r] + float(load_work[l]) / float(node_weight[load_node[l]])
        members[r].add(l)
        state[l] = WORKING

    def leave(l, t):
        r = int(load_res[l])
        advance(r, t)
        members[r].discard(l)
        state[l] = LEFT

    def start_node(n, t, finished_nodes):
        start[n] = t
        left[n] = len(loads_of[n])
        for l in loads_of[n]:
            if int(max_members[int(load_res[l])]) > 0:
                state[l] = QUEUED
                queued_at[l] = t
            else:
                join(l, t)
        if not loads_of[n]:
            finished_nodes.append(n)

    def finish_nodes(finished_nodes, t):
        while finished_nodes:
            n = finished_nodes.pop()
            finish[n] = t
            if static:
                for l in loads_of[n]:
                    leave(l, t)
            for s in succ[succ_ptr[n]:succ_ptr[n + 1]]:
                pend[s] -= 1
                if pend[s] == 0:
                    start_node(int(s), t, finished_nodes)

    q = 0
    while True:
        t = min([finish_us(l) for l in range(len(load_res)) if state[l] == WORKING], default=NEVER_US)
        if q < len(arrival_us):
            t = min(t, int(arrival_us[q]))
        if t >= NEVER_US:
            break
        # the loads due under the parameters before anything changes at t
        due = [l for l in range(len(load_res)) if state[l] == WORKING and finish_us(l) <= t]
        finished_nodes = []
        while q < len(arrival_us) and int(arrival_us[q]) == t:
            for n in range(req_node_ptr[q], req_node_ptr[q + 1]):
                if pend[n] == 0:
                    start_node(n, t, finished_nodes)
            q += 1
        while True:
            while due or finished_nodes:
                for l in due:
                    state[l] = HELD
                for l in due:
                    if not static:
                        leave(l, t)
                    n = load_node[l]
                    left[n] -= 1
                    if left[n] == 0:
                        finished_nodes.append(n)
                finish_nodes(finished_nodes, t)
                due = [l for l in range(len(load_res)) if state[l] == WORKING and finish_us(l) <= t]
            admitted = False
            for r in range(n_res):
                cap = int(max_members[r])
                waiting = sorted((queued_at[l], load_node[l], l) for l in range(len(load_res))
                                 if state[l] == QUEUED and int(load_res[l]) == r)
                for _, _, l in waiting:
                    if len(members[r]) >= cap:
                        break
                    join(l, t)
                    admitted = True
            if not admitted:
                break
            due = [l for l in range(len(load_res)) if state[l] == WORKING and finish_us(l) <= t]
    for n in range(n_nodes):  # the work of the finished nodes, in load order
        if finish[n] >= 0:
            for l in range(node_load_ptr[n], node_load_ptr[n + 1]):
                work_done[int(load_res[l])] += float(load_work[l])
    return start, finish, busy, work_done
