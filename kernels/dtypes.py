"""The schema of the simulator: every state table's dtype and every integer enum.

One module so the data model is seen in one place (STYLE.md §1-2).  All tables are numpy
structured arrays (``align=True``) allocated once by ``blis_fast.engine`` and mutated in
place by the kernels.  Time is int64 microseconds ("ticks"); counts are int64.

Ids are plain indices: request ``r`` is row ``r`` of the request table (the workload's
order, named ``request_<r>``); instance ``i`` is row ``i`` of the instance table; KV block
``b`` is row ``b`` of the block table (instance ``i`` owns rows
``[kv_offset, kv_offset + kv_total)``).  ``-1`` means "none" in every id/time field.
"""

import numpy as np

# --------------------------------------------------------------------------------------
# Enums (module constants: numba reads them as compile-time ints)
# --------------------------------------------------------------------------------------

# Request lifecycle (SEMANTICS §2).
REQ_PENDING = 0  # not arrived yet
REQ_ADMITTING = 1  # arrived at the cluster, admission/routing decisions pending
REQ_ROUTED = 2  # routed to an instance, queueing overhead (alpha) running
REQ_QUEUED = 3  # in the instance's wait queue (also after a preemption)
REQ_RUNNING = 4  # in the instance's running batch
REQ_COMPLETED = 5  # produced its last output token
REQ_REJECTED = 6  # refused by the admission policy
REQ_DROPPED = 7  # needs more KV blocks than the instance has ("dropped_unservable")

REQUEST_STATE_NAMES = (
    "pending", "admitting", "routed", "queued", "running", "completed", "rejected", "dropped_unservable",
)

# Event kinds.  The numeric order IS the tie-break order at equal time (SEMANTICS §1):
# cluster kinds sort before every instance kind; instance kinds of instance i sort before
# those of instance i+1; within one instance Queued < Step.  See ``event_priority``.
EV_CLUSTER_ARRIVAL = 0
EV_ADMISSION_DECISION = 1
EV_ROUTING_DECISION = 2
N_CLUSTER_KINDS = 16  # room for later cluster kinds (autoscaler ticks, snapshot refresh)
EV_QUEUED = 0  # instance kinds: offset within an instance's priority band
EV_STEP = 1
N_INSTANCE_KINDS = 4

# Latency model kinds (per instance, so pools may differ later).
LAT_BLACKBOX = 0
LAT_ROOFLINE = 1

# --- Control policies (SEMANTICS §8): a kind code + a float64 parameter vector each.
# Admission kinds and their parameter layout.
ADMIT_ALWAYS = 0
ADMIT_REJECT_ALL = 1  # pathological
ADMIT_TOKEN_BUCKET = 2
AP_CAPACITY = 0  # token-bucket capacity, tokens
AP_REFILL_PER_S = 1  # token-bucket refill rate, tokens per second
N_ADMISSION_PARAMS = 2

# Routing kinds; ``weighted`` reads the scorer weights below.
ROUTE_ROUND_ROBIN = 0
ROUTE_LEAST_LOADED = 1
ROUTE_WEIGHTED = 2
ROUTE_PREFIX_AFFINITY = 3
ROUTE_ALWAYS_BUSIEST = 4  # pathological
RW_QUEUE_DEPTH = 0
RW_KV_UTILIZATION = 1
RW_LOAD_BALANCE = 2
RW_PREFIX_AFFINITY = 3
N_ROUTE_WEIGHTS = 4

# Priority: priority = params[AGE] * (now - arrival µs) + params[CLASS + slo_class].
PRIO_AGE_WEIGHT = 0
PRIO_CLASS_WEIGHTS = 1  # followed by one weight per SLO class

# Instance scheduler: FCFS keeps the queue order; SORT orders by Σ w·attribute ascending,
# ties by (arrival, id).
SCHED_FCFS = 0
SCHED_SORT = 1
SW_PRIORITY = 0
SW_ARRIVAL = 1
SW_PROMPT_LEN = 2
SW_OUTPUT_LEN = 3
N_SCHED_WEIGHTS = 4

# Preemption victim.
VICTIM_LAST = 0  # the last request of the running batch (vLLM FCFS)
VICTIM_LOWEST_PRIORITY = 1  # lowest priority, ties -> the later in the batch

# Router snapshot fields (columns of the snapshot table), each with its own refresh interval.
SNAP_QUEUE_DEPTH = 0
SNAP_BATCH_SIZE = 1
SNAP_KV_UTILIZATION = 2
SNAP_FREE_BLOCKS = 3
SNAP_CACHE_HIT_RATE = 4
SNAP_PENDING = 5
SNAP_IN_FLIGHT = 6
N_SNAP = 7
SNAPSHOT_FIELD_NAMES = (
    "queue_depth", "batch_size", "kv_utilization", "free_kv_blocks", "cache_hit_rate", "pending", "in_flight",
)

# Kernel exit statuses (``blis_fast.engine`` turns a non-zero one into SimulationError).
STATUS_OK = 0
STATUS_EVENT_HEAP_FULL = 1  # raise: event heap capacity (internal sizing bug)
STATUS_CLOCK_BACKWARDS = 2  # an event's time < the clock (BC-5)
STATUS_NO_INSTANCE = 3  # routing found no active instance
STATUS_STALL = 4  # non-empty wait queue but nothing could run: would stall
STATUS_INVARIANT_KV = 5  # allocated + free != total after a step (BC-13)
STATUS_INVARIANT_BATCH = 6  # batch size > max_num_seqs (BC-12)
STATUS_ITL_LOG_FULL = 7  # unused: the logs grow; kept for a stable numbering
STATUS_MAX_EVENTS = 8  # the max_events safety limit was reached

STATUS_MESSAGES = {
    STATUS_OK: "ok",
    STATUS_EVENT_HEAP_FULL: "the event heap overflowed (internal sizing error; please report)",
    STATUS_CLOCK_BACKWARDS: "an event was scheduled before the current clock (BC-5 violated)",
    STATUS_NO_INSTANCE: "a request could not be routed: no active instance",
    STATUS_STALL: "an instance has waiting requests but could not form a batch (would stall)",
    STATUS_INVARIANT_KV: "KV block conservation violated (allocated + free != total)",
    STATUS_INVARIANT_BATCH: "batch size exceeded max_num_seqs",
    STATUS_ITL_LOG_FULL: "ITL log full",
    STATUS_MAX_EVENTS: "the run reached max_events before finishing; raise simulation.max_events",
}

# --------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------

REQUEST_DT = np.dtype(
    [
        # --- per-token hot state first: the two cache lines every step touches ---
        ("computed", np.int64),  # tokens whose KV is computed (cached tokens count)
        ("prefill_target", np.int64),  # tokens to prefill at this admission: L + generated
        ("blocks_held", np.int64),  # KV blocks currently held (a prefix of its slice)
        ("generated", np.int64),  # output tokens emitted so far
        ("output_len", np.int64),  # N (0 in the workload is stored as 1: prefill emits one token)
        ("first_token_us", np.int64),  # first output token visible (step end + a2), µs
        ("last_token_us", np.int64),  # latest output token visible, µs
        ("last_token_step", np.int64),  # step (global index) that emitted its latest token
        ("last_step_us", np.int64),  # duration of the step that produced its latest token, µs
        ("itl_sum_us", np.int64),  # sum of its ITL samples, µs (E2E = TTFT + itl_sum_us)
        ("run_start_step", np.int64),  # step that began its current run of consecutive token
        #                                steps (its first token or an irregular one)
        ("block_start", np.int64),  # first index of its slice of the request-blocks array
        # --- inputs (filled by blis_fast from the workload) ---
        ("arrival_us", np.int64),  # µs, arrival at the cluster
        ("prompt_len", np.int64),  # L, tokens incl. shared prefix
        ("key_start", np.int64),  # first index of its prefix-block keys in the keys array
        ("key_count", np.int64),  # number of keys = floor(L / block_size)
        ("block_cap", np.int64),  # length of its block slice = ceil((L + N - 1) / block_size)
        # --- state ---
        ("state", np.int32),  # REQ_*
        ("instance", np.int32),  # instance it was routed to, -1 before routing
        ("queue_prev", np.int64),  # wait-queue links (doubly linked through this table)
        ("queue_next", np.int64),
        ("priority", np.float64),  # set by the priority policy each step (higher = sooner)
        ("tenant", np.int32),  # tenant id (token buckets are per tenant), 0 by default
        ("slo_class", np.int32),  # SLO class id, 0 by default
        ("priority_class", np.int32),  # workload's priority class, 0 by default
        ("client", np.int32),  # workload client id
        ("turn", np.int32),  # turn within its session
        ("session", np.int64),  # session id, -1 = none
        ("next_request", np.int64),  # request released when this one completes, -1 = none
        ("follow_delay_us", np.int64),  # µs after this one's last token before next_request arrives
        # --- timestamps and per-request metrics (µs) ---
        ("routed_us", np.int64),  # time of the routing decision
        ("queued_us", np.int64),  # first entry into the wait queue
        ("first_scheduled_us", np.int64),  # start of the step that first admitted it
        ("preemptions", np.int64),  # times it was preempted
        ("cached_tokens", np.int64),  # prompt tokens found in the prefix cache, first admission
    ],
    align=True,
)

INSTANCE_DT = np.dtype(
    [
        # --- configuration (per instance so typed pools can differ) ---
        ("active", np.int32),  # 1 = accepts routed requests
        ("pool", np.int32),  # pool / role id (0 = the only pool today)
        ("max_num_seqs", np.int64),  # batch-size limit
        ("max_batched_tokens", np.int64),  # token budget per step
        ("long_prefill_threshold", np.int64),  # per-request prefill cap per step, 0 = off
        ("latency_kind", np.int32),  # LAT_*
        ("alpha0", np.float64),  # µs, queueing overhead = trunc(alpha0 + alpha1 * L)
        ("alpha1", np.float64),  # µs per prompt token
        ("alpha2", np.float64),  # µs added to every output token's visible time
        ("beta0", np.float64),  # µs per step (blackbox)
        ("beta1", np.float64),  # µs per prefill token (blackbox)
        ("beta2", np.float64),  # µs per decode request (blackbox)
        # --- KV cache (blocks [kv_offset, kv_offset + kv_total) of the block table) ---
        ("kv_offset", np.int64),
        ("kv_total", np.int64),  # blocks
        ("kv_virgin_next", np.int64),  # never-used blocks are [kv_virgin_next, kv_offset+kv_total)
        ("kv_lru_head", np.int64),  # free list of used-then-released blocks (evict from head)
        ("kv_lru_tail", np.int64),
        ("kv_lru_len", np.int64),
        ("kv_allocated", np.int64),  # blocks with ref_count > 0
        ("kv_peak_allocated", np.int64),
        ("ht_offset", np.int64),  # this instance's slice of the prefix hash table
        ("ht_mask", np.int64),  # slice length - 1 (a power of two)
        # --- wait queue and batch ---
        ("wq_head", np.int64),  # request ids, -1 = empty
        ("wq_tail", np.int64),
        ("wq_len", np.int64),
        ("wq_peak", np.int64),
        ("batch_len", np.int64),  # running requests: batch[i, :batch_len]
        ("batch_peak", np.int64),
        ("routed_pending", np.int64),  # routed here, queueing overhead not yet elapsed
        # --- step clock ---
        ("step_pending", np.int32),  # 1 = a Step event is in the heap
        ("busy_until_us", np.int64),  # end of the last step started
        ("prev_step", np.int64),  # global index of its previous step, -1 = none
        ("last_step_end_us", np.int64),  # end of the last step executed (duration metric)
        # --- counters ---
        ("steps", np.int64),
        ("busy_us", np.int64),  # sum of step durations
        ("sum_wq_len", np.int64),  # sum over steps of the wait-queue length at step start
        ("sum_batch_len", np.int64),  # sum over steps of the batch size
        ("prefill_tokens", np.int64),  # prefill tokens computed (cache hits excluded)
        ("decode_tokens", np.int64),  # decode tokens computed
        ("prefix_query_tokens", np.int64),  # prompt tokens looked up at admissions
        ("prefix_hit_tokens", np.int64),  # of which found in the prefix cache
        ("preemptions", np.int64),
        ("injected", np.int64),  # requests routed here
        ("completed", np.int64),
        ("dropped", np.int64),  # dropped_unservable
    ],
    align=True,
)

KV_BLOCK_DT = np.dtype(
    [
        ("key", np.int64),  # prefix key of the full prompt block it holds, -1 = none
        ("ref_count", np.int32),  # requests holding it; 0 = on the free (LRU) list
        ("lru_prev", np.int32),  # free-list links (block ids < 2^31), -1 = none
        ("lru_next", np.int32),
    ],
    align=True,
)

# The event heap: a binary min-heap ordered by (time_us, priority, seq).
EVENT_DT = np.dtype(
    [
        ("time_us", np.int64),
        ("priority", np.int64),  # see event_priority(): encodes kind and instance
        ("seq", np.int64),  # insertion counter: the last tie-break (FIFO)
        ("request", np.int64),  # payload: request id, -1 for instance-level events
    ],
    align=True,
)

# Step log: one row per engine step, in execution order (global step index = row):
#   STEP_LOG_INSTANCE, STEP_LOG_DT (µs).
# Irregular-ITL log: one row per output token that did NOT directly follow a token of the
# same request in the instance's previous step (after a preemption or a step without work):
#   IRR_REQUEST, IRR_STEP (step that emitted it), IRR_VALUE (its ITL sample, µs),
#   IRR_PREV_RUN_START, IRR_PREV_RUN_END (steps bounding the run of consecutive token
#   steps it ends).  ITL samples of tokens inside a run are the durations of those steps
#   (blis_fast.metrics.itl_histogram rebuilds them for any subset of requests).
STEP_LOG_INSTANCE = 0
STEP_LOG_DT = 1
IRR_REQUEST = 0
IRR_STEP = 1
IRR_VALUE = 2
IRR_PREV_RUN_START = 3
IRR_PREV_RUN_END = 4

# One scalar record of run-wide settings passed to the engine kernel.
SIM_DT = np.dtype(
    [
        ("horizon_us", np.int64),  # events with time > horizon are not executed
        ("block_size", np.int64),  # tokens per KV block
        ("prefix_caching", np.int32),  # 1 = look up / register prefix keys
        ("compat", np.int32),  # 1 = blis-2026.02 conventions: idle instance steps at its Queued
        #                        time (overlap); ITL sample = step + a2, plus one at completion
        ("check_invariants", np.int32),  # 1 = verify BC-12/BC-13 after every step (tests)
        ("admission_kind", np.int32),  # ADMIT_*
        ("routing_kind", np.int32),  # ROUTE_*
        ("scheduler_kind", np.int32),  # SCHED_*
        ("victim_kind", np.int32),  # VICTIM_*
        ("priority_active", np.int32),  # 1 = compute priorities each step (not all-zero policy)
        ("prefix_index", np.int32),  # 1 = maintain the router's prefix-affinity index
        ("prefix_index_capacity", np.int64),  # keys per instance in that index
        ("prefix_index_slots", np.int64),  # hash slots per instance (power of two)
        ("admission_latency_us", np.int64),
        ("routing_latency_us", np.int64),
        ("max_events", np.int64),  # safety limit on processed events (hang guard)
    ],
    align=True,
)

# Result counters the kernel writes (one record).
RUN_STATS_DT = np.dtype(
    [
        ("status", np.int64),  # STATUS_*
        ("clock_us", np.int64),  # time of the last event processed
        ("events", np.int64),  # events processed
        ("steps", np.int64),  # engine steps over all instances
        ("heap_peak", np.int64),  # largest event-heap size seen
        ("injected", np.int64),  # arrivals processed
        ("rejected", np.int64),
        ("irregular_records", np.int64),  # used rows of the irregular-ITL log
        ("error_instance", np.int64),  # instance of a bad status, -1 if none
        ("error_request", np.int64),
    ],
    align=True,
)

