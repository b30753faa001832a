"""Slow, obviously correct pure-Python references for the kernels: a test that compares a
kernel with a literal transcription of the spec catches what hand-picked cases miss.

Nothing here is fast or clever: sorted Python lists, dicts, one object per request.  Each
reference follows docs/semantics.md and docs/policies.md literally, including the model
choices documented in the kernels:

- prefix keys are registered when a block is *allocated* (so a later request in the same
  step can already hit them);
- a block whose key is already cached in another block stays unkeyed;
- an admission reuses at most floor((target - 1) / bs) cached blocks, so the last prompt
  token is always computed;
- a preempted request re-prefills L + generated tokens, and the step that completes that
  re-prefill emits its next output token;
- a decode token that fits in the request's last block allocates nothing.

One module per kernel area:

    heap          structs/heap.py, engine/events.py     NaiveEventQueue
    dlist         structs/dlist.py                      NaiveLists
    hashtable     structs/hashtable.py, keycount.py     NaiveTable, naive_repeated, naive_shared
    sort          structs/sort.py                       naive_sorted, quadratic_inversion_pairs
    keys          structs/mix.py, workload/keys.py      naive_fmix, naive_keys, naive_chain_prompt_keys, ...
    kv            kv/cache.py                           NaiveKVCache, assert_kv_recount
    prefix_index  policies/prefix_index.py              NaiveIndex
    policies      policies/*.py                         NaiveTokenBuckets, NaiveSnapshot, naive_route, ...
    latency       latency/steptime.py                   naive_blackbox_us, naive_roofline_us
    engine        engine/ (one instance, whole)         naive_simulate_instance
    anomalies     blis_fast/results/anomalies.py        brute_force_inversions, brute_force_hol
"""

from naive.engine import naive_simulate_instance
from naive.heap import NaiveEventQueue
from naive.kv import NaiveKVCache

__all__ = ["NaiveEventQueue", "NaiveKVCache", "naive_simulate_instance"]
