"""The floor of ``blis-fast bench``: a minimal continuous-batching loop.

What any engine simulator must do at least, on the same workload and with the same
step-time formula as the real engine (docs/semantics.md §3, §5), and nothing else: no
events, no KV cache, no policies, no α delays, no logs.

* Requests are dealt round-robin to the instances in arrival order and wait in a FIFO
  queue from their arrival time on (no admission, routing or queueing delay).
* An instance steps while it has running or waiting requests; idle, it waits for its
  next arrival.  At the start of a step at ``now`` every request that arrived by ``now``
  is waiting.
* One step, with token budget B = ``token_budget``: running requests in admission order
  first -- a prefill in progress gets min(remaining prompt, B) tokens, a decode one token
  -- while B > 0; then admissions from the queue head while the batch has fewer than
  ``max_num_seqs`` requests and B > 0, each getting min(prompt, B) prefill tokens.
* Step time = trunc(β0 + β1·P + β2·D) µs, P prefill tokens and D decode requests (the
  blackbox model, ``latency.steptime.blackbox_step_us``).
* At the step's end a prefill that reached its prompt length produces the first output
  token and every decode one more; a request leaves the batch with its N-th token
  (N = 0 counts as 1).

Instances never interact here, so each is simulated on its own.  The loop visits every
running request every step: it is a baseline, not an optimisation target.
"""

from __future__ import annotations

import numpy as np

from ..jit import kernel


@kernel
def run_minimal(arrival_us, prompt_len, output_len, num_instances, max_num_seqs, token_budget,
                beta0, beta1, beta2, first_token_us, last_token_us):
    """Simulate requests given in arrival order (``arrival_us`` non-decreasing, int64);
    writes each request's first and last output-token times (µs; -1 if none) and returns
    the number of steps over all instances."""
    n = arrival_us.shape[0]
    seqs = max(max_num_seqs, 1)
    slot_req = np.empty(seqs, np.int64)
    slot_todo = np.empty(seqs, np.int64)  # prefill tokens still to compute
    slot_left = np.empty(seqs, np.int64)  # output tokens still to produce
    slot_work = np.empty(seqs, np.int64)  # tokens computed in this step
    for r in range(n):
        first_token_us[r] = -1
        last_token_us[r] = -1
    steps = 0
    for k in range(num_instances):
        arrived = k  # next request of this instance that has not arrived yet
        head = k  # head of its wait queue: the queue is head, head + I, ... < arrived
        size = 0
        clock = np.int64(0)
        while True:
            if size == 0 and head >= arrived:  # idle
                if arrived >= n:
                    break
                if arrival_us[arrived] > clock:
                    clock = arrival_us[arrived]
            while arrived < n and arrival_us[arrived] <= clock:
                arrived += num_instances
            budget = token_budget
            p_tokens = 0
            d_reqs = 0
            for s in range(size):  # running requests, in admission order
                if budget <= 0:
                    slot_work[s] = 0
                    continue
                if slot_todo[s] > 0:
                    w = min(slot_todo[s], budget)
                    p_tokens += w
                else:
                    w = 1
                    d_reqs += 1
                slot_work[s] = w
                budget -= w
            while size < seqs and budget > 0 and head < arrived:  # admissions
                r = head
                head += num_instances
                todo = max(prompt_len[r], 1)
                w = min(todo, budget)
                slot_req[size] = r
                slot_todo[size] = todo
                slot_left[size] = max(output_len[r], 1)
                slot_work[size] = w
                size += 1
                p_tokens += w
                budget -= w
            end = clock + np.int64(beta0 + beta1 * np.float64(p_tokens) + beta2 * np.float64(d_reqs))
            steps += 1
            kept = 0
            for s in range(size):
                w = slot_work[s]
                if w > 0:
                    r = slot_req[s]
                    if slot_todo[s] > 0:
                        slot_todo[s] -= w
                        if slot_todo[s] == 0:
                            first_token_us[r] = end
                            last_token_us[r] = end
                            slot_left[s] -= 1
                    else:
                        last_token_us[r] = end
                        slot_left[s] -= 1
                    if slot_todo[s] == 0 and slot_left[s] == 0:
                        continue  # completed: leaves the batch
                slot_req[kept] = slot_req[s]
                slot_todo[kept] = slot_todo[s]
                slot_left[kept] = slot_left[s]
                kept += 1
            size = kept
            clock = end
    return steps
