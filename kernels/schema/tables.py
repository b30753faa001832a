"""Every table's dtype.  Tables are numpy structured arrays (``align=True``) allocated once
per run by ``blis_fast.run.tables`` and mutated in place by the kernels, which read and
write them by record and field (``reqs[r]["computed"]``) so they run unchanged with the
JIT off (attribute access would not: a row of a plain ndarray is a numpy.void).

Units: times are int64 microseconds ("ticks"), counts int64, rates/scores float64.  Ids
are row indices: request r is row r of the request table (the workload's order, named
``request_<r>``), instance i row i of the instance table, KV block b row b of the block
table (instance i owns rows [kv_offset, kv_offset + kv_total)).  -1 means "none" in every
id and time field.
"""

import numpy as np

REQUEST_DT = np.dtype(
    [
        # --- per-token hot state first: the fields every step touches ---
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
        # --- event skipping (engine/calendar.py): a running decode request "rides" between
        # its events; the fields above are exact as of the start of its instance's local
        # step ``sync_step`` and advance by one token per step after it ---
        ("sync_step", np.int64),  # local step (instance steps counter) the fields above are exact at
        ("cal_next", np.int64),  # next request in its calendar bucket, -1 = end
        ("named_upto", np.int64),  # its KV blocks at positions < named_upto have block ids, the rest are anonymous (kv/cache.py)
        ("ride_phase", np.int64),  # a counted rider's step phase of new blocks (engine/calendar.py), -1 = not one
        ("admit_seq", np.int64),  # order of admission on its instance: the batch is sorted by it
        # --- inputs (filled from the workload) ---
        ("arrival_us", np.int64),  # µs, arrival at the cluster
        ("prompt_len", np.int64),  # L, tokens incl. shared prefix
        ("requested_output", np.int64),  # N as the workload gives it (output_len holds max(N, 1))
        ("key_start", np.int64),  # first index of its block keys in the keys array
        ("key_count", np.int64),  # keys of the full blocks of prompt + outputs: floor((L + N) / block_size)
        ("prompt_key_count", np.int64),  # of which prompt blocks: floor(L / block_size)
        ("block_cap", np.int64),  # most KV blocks it holds = ceil((L + N - 1) / block_size) (its block
        #                           slice has one more token's room in compat mode: run.tables.block_slots)
        # --- state ---
        ("state", np.int32),  # RequestState
        ("instance", np.int32),  # instance it was routed to, -1 before routing
        ("queue_prev", np.int64),  # wait-queue links (structs/dlist.py through this table)
        ("queue_next", np.int64),
        ("priority", np.float64),  # set by the priority policy each step (higher = sooner)
        ("tenant", np.int32),  # tenant id (token buckets are per tenant), 0 by default
        ("slo_class", np.int32),  # SLO class id, 0 by default
        ("priority_class", np.int32),  # workload's priority class, 0 by default
        ("client", np.int32),  # workload client id
        ("model", np.int32),  # served-model id: routed only to instances whose model equals it
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

# ``named_upto`` of a request all of whose KV blocks are named (more positions than any
# request has; kernels/kv/cache.py)
ALL_NAMED = np.int64(1 << 40)

INSTANCE_DT = np.dtype(
    [
        # --- configuration (per instance so typed pools can differ) ---
        ("active", np.int32),  # 1 = accepts routed requests
        ("pool", np.int32),  # deployment index (its roofline row, State.roofline)
        ("model", np.int32),  # served-model id (index into run.resolve.Setup.served_models)
        ("block_size", np.int32),  # tokens per KV block (its deployment's; one per model); int32 fills the
        #                            padding before the int64s, so no hot field moves
        ("max_num_seqs", np.int64),  # batch-size limit
        ("max_batched_tokens", np.int64),  # token budget per step
        ("long_prefill_threshold", np.int64),  # per-request prefill cap per step, 0 = off
        ("latency_kind", np.int32),  # LatencyKind
        ("route_id", np.int32),  # the routing group it is a candidate of: its served-model id, or for a
        #                          prefill pool that model's prefill group (PD_MODEL_DT.prefill_group);
        #                          int32 in the padding before alpha0
        ("alpha0", np.float64),  # µs, queueing overhead = trunc(alpha0 + alpha1 * L)
        ("alpha1", np.float64),  # µs per prompt token
        ("alpha2", np.float64),  # µs added to every output token's visible time
        ("beta0", np.float64),  # µs per step (blackbox)
        ("beta1", np.float64),  # µs per prefill token (blackbox)
        ("beta2", np.float64),  # µs per decode request (blackbox)
        # --- KV cache: blocks [kv_offset, kv_offset + kv_total) of the block table ---
        ("kv_offset", np.int64),
        ("kv_total", np.int64),  # blocks
        ("kv_virgin_next", np.int64),  # never-used blocks are [kv_virgin_next, kv_offset + kv_total)
        ("free_head", np.int64),  # free list of used-then-released blocks, LRU first (dlist)
        ("free_tail", np.int64),
        ("free_len", np.int64),
        ("kv_allocated", np.int64),  # blocks held by requests (ref_count > 0 when named)
        ("head_units", np.int64),  # anonymous free blocks before the free list's first block (kv/cache.py)
        ("id_pool", np.int64),  # stack of unassigned block ids (linked through lru_next), -1 = empty
        ("kv_peak_allocated", np.int64),
        ("ht_offset", np.int64),  # this instance's rows of the prefix hash table
        ("ht_mask", np.int64),  # number of those rows - 1 (a power of two)
        ("ht_changes", np.int64),  # keys put into or taken out of them so far (kv/cache.py: kv_admit's memo)
        # --- wait queue (dlist through the request table) and batch ---
        ("wq_head", np.int64),
        ("wq_tail", np.int64),
        ("wq_len", np.int64),
        ("wq_peak", np.int64),
        ("batch_len", np.int64),  # running requests: batch[i, :batch_len]
        ("batch_peak", np.int64),
        ("routed_pending", np.int64),  # routed here, queueing overhead not yet elapsed
        # --- step clock ---
        ("step_pending", np.int32),  # 1 = a Step event is in the heap
        ("route_alt", np.int32),  # a second routing group (a `both` pool's prefill group), -1 = none;
        #                           int32 in the padding before busy_until_us
        ("busy_until_us", np.int64),  # end of the last step started
        ("prev_step", np.int64),  # global index of its previous step, -1 = none
        ("last_step_end_us", np.int64),  # end of the last step executed (duration metric)
        ("last_dt_us", np.int64),  # duration of the last step executed
        ("admit_counter", np.int64),  # admissions so far (the next admit_seq)
        # --- event skipping: the calendar's riding requests (engine/calendar.py) ---
        ("ride_count", np.int64),  # requests in the calendar
        ("ride_ctx", np.int64),  # Σ of their KV tokens (computed) at the start of the next step
        # --- counters ---
        ("steps", np.int64),
        ("busy_us", np.int64),  # sum of step durations
        ("sum_wq_len", np.int64),  # sum over steps of the wait-queue length at step start
        ("sum_batch_len", np.int64),  # sum over steps of the batch size
        ("sum_kv_allocated", np.int64),  # sum over steps of the KV blocks allocated once the batch is formed
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

# Per instance, its prefill/decode disaggregation state (State.pd_inst): a side table, so
# that the instance table's rows -- read at every event -- stay as small as they were.
PD_INST_DT = np.dtype(
    [
        ("role", np.int32),  # PoolRole
        ("xq_head", np.int64),  # decode side: prefilled requests waiting for free KV blocks (dlist
        ("xq_tail", np.int64),  #   through REQUEST_DT queue_prev/queue_next), in order
        ("xq_len", np.int64),
        ("xq_peak", np.int64),
        ("rx_head", np.int64),  # decode side: requests whose KV arrived, waiting for a batch slot (dlist
        ("rx_tail", np.int64),  #   through queue_prev/queue_next); admitted before the wait queue: their
        ("rx_len", np.int64),  #   blocks are resident, so they need none of the blocks the queue waits for
        ("held_outside", np.int64),  # requests holding blocks here outside the batch: prefill legs awaiting
        #                              their transfer, reservations and arrived transfers (no stall while > 0)
        ("held_anon", np.int64),  # their anonymous blocks (kv/cache.py; block conservation counts them here)
        ("link_head", np.int64),  # prefill side: the transfers on its link (dlist through PD_REQ_DT
        ("link_tail", np.int64),  #   link_prev/link_next; contention: link)
        ("link_len", np.int64),
        ("link_peak", np.int64),
        ("link_last_us", np.int64),  # when the link's transfers' remaining work was last brought up to date
        ("link_version", np.int64),  # the link's current LINK event (older ones are stale)
        ("pd_prefills", np.int64),  # prefill legs completed here
        ("pd_transfers_in", np.int64),  # transfers received here
        ("pd_drops", np.int64),  # prefilled requests dropped here for want of KV blocks (on_decode_full: drop)
        ("pd_waits", np.int64),  # prefilled requests that waited here for KV blocks
    ],
    align=True,
)

# Per served model: its prefill/decode disaggregation (a model without it: enabled 0).
PD_MODEL_DT = np.dtype(
    [
        ("enabled", np.int32),  # 1 = the model's deployments have prefill and decode pools
        ("decider", np.int32),  # PdDecider
        ("prefill_group", np.int64),  # the routing group of its prefill instances (INSTANCE_DT.route_id)
        ("threshold", np.int64),  # prefix-threshold: disaggregate when uncached prompt tokens >= this
        ("first_token_prefill", np.int32),  # 1 = the prefill side emits the first token
        ("drop_when_full", np.int32),  # 1 = on_decode_full: drop, 0 = wait
        ("charge_full_prompt", np.int32),  # 1 = transfer the whole prompt's KV, 0 = only the missing blocks'
        ("link_contention", np.int32),  # 1 = transfers leaving one prefill instance share its bandwidth
        ("kv_bytes_per_token", np.float64),  # KV bytes of one token per TP rank (each rank on its own link)
        ("bytes_per_us", np.float64),  # link bandwidth
        ("base_latency_us", np.float64),  # added to every transfer (see engine/disaggregation.py for the rounding)
    ],
    align=True,
)

# Per request of a P/D run (State.pd_reqs): its prefill leg and transfer.  The prefill leg
# of request r is request row r + SETTINGS_DT.pd_base (a one-token request that emits
# nothing); both rows' own timestamps are in the request table.
PD_REQ_DT = np.dtype(
    [
        ("prefill_instance", np.int64),  # -1 = not disaggregated
        ("prefill_done_us", np.int64),  # end of the step that completed its prompt there
        ("wait_start_us", np.int64),  # when it began waiting for KV blocks at the decode side, -1 = never
        ("transfer_start_us", np.int64),
        ("transfer_data_us", np.int64),  # its data's last byte left the link
        ("transfer_end_us", np.int64),  # it joined the decode instance's wait queue
        ("charged_tokens", np.int64),  # tokens whose KV was transferred
        ("work_left_us", np.float64),  # contention: µs of its data left at the full link bandwidth
        ("link_prev", np.int64),
        ("link_next", np.int64),
    ],
    align=True,
)

# KV cache tiers beyond the GPU (kv/tiers.py, docs/semantics.md §14).  Per instance: its
# tier settings and GPU-side counters (an instance without tiers: n_tiers 0).
KV_TIER_INST_DT = np.dtype(
    [
        ("n_tiers", np.int32),  # tiers beyond the GPU: rows i * N_TIERS + k, k < n_tiers, of State.tiers
        ("store_all", np.int32),  # 1 = store every keyed block (store: all), 0 = prompt blocks only
        ("load_step", np.int32),  # 1 = load: step (the load time is added to the admitting step)
        ("block_bytes", np.float64),  # bytes of one KV block per TP rank (each rank on its own links)
        ("step_load_us", np.float64),  # load: step -- load time owed by the step being formed
        ("gpu_evictions", np.int64),  # GPU blocks evicted holding a shared key -- the thrashing rate's base
        ("loading", np.int64),  # requests loading here now
        ("load_requests", np.int64),  # requests that loaded from a tier here
    ],
    align=True,
)

# One tier of one instance (State.tiers row i * N_TIERS + k): its entries (slots of
# State.tier_slots, keyed by block key value through rows of State.tier_table), their LRU
# list (entries being loaded are out of it: pinned), its writer (a FIFO of block writes:
# stores from the GPU into tier 0, demotions from tier k - 1) and its read link (the
# loads out of it, sharing the bandwidth by processor sharing).
TIER_DT = np.dtype(
    [
        ("capacity", np.int64),  # blocks
        ("slot_offset", np.int64),  # slots [slot_offset, slot_offset + slot_rows) of tier_slots
        ("slot_rows", np.int64),  # min(capacity, distinct shared key values): a key is in a tier once
        ("ht_offset", np.int64),  # rows [ht_offset, ht_offset + ht_mask] of tier_table
        ("ht_mask", np.int64),
        ("used", np.int64),  # entries held
        ("virgin_next", np.int64),  # never-used slots are [virgin_next, slot_offset + slot_rows)
        ("lru_head", np.int64),  # unpinned entries, least recently stored or loaded first (dlist)
        ("lru_tail", np.int64),
        ("lru_len", np.int64),
        ("read_bytes_per_us", np.float64),
        ("write_bytes_per_us", np.float64),
        ("latency_us", np.int64),  # added to every load out of this tier (after its data)
        ("write_free_us", np.float64),  # when the writer has written everything queued so far
        ("wr_offset", np.int64),  # its queue: a ring of rows [wr_offset, wr_offset + wr_cap) of tier_writes
        ("wr_cap", np.int64),
        ("wr_head", np.int64),  # (a position in the ring)
        ("wr_len", np.int64),
        ("link_head", np.int64),  # the loads on its read link (dlist through tier_jobs)
        ("link_tail", np.int64),
        ("link_len", np.int64),
        ("link_peak", np.int64),
        ("link_last_us", np.int64),
        ("link_version", np.int64),  # the link's current TIER_LINK event (older ones are stale)
        ("hit_blocks", np.int64),  # blocks found here by admissions (and loaded)
        ("loads", np.int64),  # load transfers out of it
        ("stored", np.int64),  # blocks written in (stores or demotions that landed)
        ("write_drops", np.int64),  # writes not made: queue full, or every entry pinned
        ("evictions", np.int64),  # entries evicted (demoted to the next tier if there is one)
        ("peak_used", np.int64),
    ],
    align=True,
)

TIER_SLOT_DT = np.dtype(
    [
        ("key", np.int64),  # the block key value it holds
        ("lru_prev", np.int64),
        ("lru_next", np.int64),
        ("pins", np.int64),  # loads reading it now (a pinned entry cannot be evicted)
        ("tier", np.int64),  # its State.tiers row
    ],
    align=True,
)

TIER_WRITE_DT = np.dtype(
    [
        ("done_us", np.int64),  # when the write has landed
        ("key", np.int64),  # block key value
        ("block", np.int64),  # a store: the GPU block it copies (pinned until then); a demotion: -1
        ("key_index", np.int64),  # a store: the key number the block held when it was issued
    ],
    align=True,
)

# Per request (State.tier_reqs): its loads.
TIER_REQ_DT = np.dtype(
    [
        ("hit_blocks_0", np.int64),  # blocks found in tier 0 / tier 1 at its (last) admission
        ("hit_blocks_1", np.int64),
        ("loaded_blocks_0", np.int64),  # blocks loaded from tier 0 / tier 1 over the run
        ("loaded_blocks_1", np.int64),
        ("loads_left", np.int64),  # load transfers of its current load not done yet
        ("load_start_us", np.int64),  # its last load's start and end (-1 = never loaded)
        ("load_end_us", np.int64),
        ("load_wait_us", np.int64),  # summed over its loads
        ("load_cached", np.int64),  # tokens its current load makes computed (GPU hits and loaded blocks)
        ("load_record", np.int64),  # its current load's scheduling record (TraceLevel.FULL), -1 = none
    ],
    align=True,
)

# A load transfer on a tier's read link: job r * N_TIERS + k is request r's load from tier k.
TIER_JOB_DT = np.dtype(
    [
        ("work_left_us", np.float64),  # µs of its data left at the link's full bandwidth
        ("link_prev", np.int64),
        ("link_next", np.int64),
    ],
    align=True,
)

KV_BLOCK_DT = np.dtype(
    [
        ("key_index", np.int32),  # position in the keys array of the block key it caches, -1 = none
        #                           (a run has < 2^31 keys: run.tables checks)
        ("ref_count", np.int32),  # requests holding it; 0 = free
        ("lru_prev", np.int32),  # free-list links (block ids < 2^31), -1 = none
        ("lru_next", np.int32),
        ("gap_after", np.int32),  # free list: anonymous free blocks that follow this one (kv/cache.py)
    ],
    align=True,
)

# The event heap (structs/heap.py): a binary min-heap ordered by (time_us, priority, seq).
# 32 bytes a record: the sifts move whole records, and a 40-byte record made the event
# loop measurably slower, so the two payload values are int32.
EVENT_DT = np.dtype(
    [
        ("time_us", np.int64),
        ("priority", np.int64),  # engine/events.py: encodes the kind and the instance
        ("seq", np.int64),  # insertion counter: the last tie-break (FIFO)
        ("request", np.int32),  # payload: request id (< MAX_REQUESTS = 10^8), -1 for instance-level events
        # a second payload value for kinds that need one, 0 otherwise: an instance id, a
        # request id or a count, always in [-2^31, 2^31) (an instance id < 65536, a request
        # id < 10^8); a time or a token count that may exceed that does not fit here
        ("arg2", np.int32),
    ],
    align=True,
)

# The step log: one row per engine step in execution order (row = global step index).
STEP_DT = np.dtype([("instance", np.int64), ("dt_us", np.int64)], align=True)

# The irregular-ITL log: one row per output token that did NOT directly follow a token of
# the same request in the instance's previous step (after a preemption or a step without
# work).  ITL samples of tokens inside a run of consecutive steps are those steps'
# durations, rebuilt from the step log (blis_fast.results.metrics.ItlIndex).
IRR_DT = np.dtype(
    [
        ("request", np.int64),
        ("step", np.int64),  # step that emitted the token
        ("value_us", np.int64),  # its ITL sample
        ("prev_run_start", np.int64),  # steps bounding the run of consecutive token steps it ends
        ("prev_run_end", np.int64),
    ],
    align=True,
)

# Decision traces (settings.trace_level = TraceLevel.DECISIONS): one row per decision, in
# decision order.  A routing row holds what the router saw of the chosen instance and of the
# N_TRACE_ALTERNATIVES best others (by the policy's own score: higher = preferred; -1 /
# -inf / NaN-free columns when there are fewer candidates).
N_TRACE_ALTERNATIVES = 4
_K = (N_TRACE_ALTERNATIVES,)
ROUTE_DT = np.dtype(
    [
        ("time_us", np.int64),  # when the decision was made
        ("request", np.int64),
        ("candidates", np.int64),  # active instances it chose among
        ("prompt_blocks", np.int64),  # full prompt blocks of the request
        ("forced", np.int64),  # 1 = the decision was forced (counterfactual replay)
        # the chosen instance, then the best alternatives (instance -1 = none): the policy's
        # score, and what the snapshot showed -- effective load (queue + batch + pending),
        # KV utilization, matched leading prefix blocks (prefix-affinity index)
        ("chosen_instance", np.int64),
        ("chosen_score", np.float64),
        ("chosen_load", np.float64),
        ("chosen_kv_utilization", np.float64),
        ("chosen_matched_blocks", np.int64),
        ("alt_instance", np.int64, _K),
        ("alt_score", np.float64, _K),
        ("alt_load", np.float64, _K),
        ("alt_kv_utilization", np.float64, _K),
        ("alt_matched_blocks", np.int64, _K),
    ],
    align=True,
)

ADMIT_DT = np.dtype(
    [
        ("time_us", np.int64),
        ("request", np.int64),
        ("tenant", np.int64),
        ("admitted", np.int64),  # 1 = admitted, 0 = rejected
        ("cost", np.int64),  # prompt tokens charged
        ("bucket_tokens", np.float64),  # token-bucket level after the decision (token-bucket admission)
    ],
    align=True,
)

PREEMPT_DT = np.dtype(
    [
        ("time_us", np.int64),  # start of the step in which it happened
        ("instance", np.int64),
        ("victim", np.int64),  # the preempted request
        ("for_request", np.int64),  # the request whose KV allocation failed
        ("victim_generated", np.int64),  # output tokens the victim had emitted
        ("victim_blocks", np.int64),  # KV blocks it released
    ],
    align=True,
)

# Scheduling records (settings.trace_level = TraceLevel.FULL): the instance schedulers'
# decisions, in decision order.  Fields that do not apply to a record's kind are 0.
# Sized by need: one SCHEDULED row per admission to a batch, one BLOCKED row per
# episode (not per step), one VICTIM row per preemption; the log grows between calls
# (Status.LOG_FULL).  The scans of the requests behind a record look at the first
# SCHED_SCAN_DEPTH of them only, so a record costs O(1) whatever the queue length.
SCHED_SCAN_DEPTH = 16
SCHED_DT = np.dtype(
    [
        ("time_us", np.int64),  # start of the step (BLOCKED: of the episode's first step)
        ("last_time_us", np.int64),  # BLOCKED: start of the episode's last step; LOAD: when the load was done
        #                              (else = time_us)
        ("instance", np.int64),
        ("kind", np.int64),  # SchedRecord
        ("request", np.int64),  # the admitted request / the blocked head / the victim
        ("position", np.int64),  # SCHEDULED / BLOCKED: wait-queue position when the step's admissions
        #                          began (0 = head); VICTIM: the victim's batch slot
        ("queue_len", np.int64),  # SCHEDULED / BLOCKED: requests waiting, itself included; VICTIM: batch size
        ("priority", np.float64),  # the request's priority at that step (priority policy; higher = more urgent)
        ("sched_key", np.float64),  # SCHEDULED / BLOCKED: the sort scheduler's key (lower = earlier; 0 under fcfs)
        ("wait_us", np.int64),  # SCHEDULED / BLOCKED: time since it first entered a wait queue
        ("tokens", np.int64),  # SCHEDULED: tokens of its first chunk; BLOCKED: prefill tokens it needs;
        #                        LOAD: tokens it loads from the tiers
        ("cached_tokens", np.int64),  # SCHEDULED, LOAD: prompt tokens found in the prefix cache (LOAD: GPU and tiers)
        ("budget_left", np.int64),  # SCHEDULED / BLOCKED: step token budget left before it
        ("free_blocks", np.int64),  # SCHEDULED / BLOCKED: free KV blocks of the instance before it
        ("reason", np.int64),  # BLOCKED: BlockReason
        ("steps", np.int64),  # BLOCKED: steps the episode lasted (else 1)
        ("readmission", np.int64),  # SCHEDULED: 1 = it had been preempted before
        ("higher_behind", np.int64),  # SCHEDULED / BLOCKED: of the first SCHED_SCAN_DEPTH requests left
        #                               waiting behind it, those of strictly higher priority;
        #                               VICTIM: running requests of strictly lower priority than the victim
        ("fits_behind", np.int64),  # BLOCKED (kv-blocks): of the first SCHED_SCAN_DEPTH behind it, those
        #                             whose first chunk would fit the free blocks without any cache hit
        ("for_request", np.int64),  # VICTIM: the request whose KV allocation failed
        ("for_priority", np.float64),  # VICTIM: its priority
    ],
    align=True,
)

# Run-wide settings (one record).
SETTINGS_DT = np.dtype(
    [
        ("horizon_us", np.int64),  # events with time > horizon are not executed (the run ends)
        ("pause_at_us", np.int64),  # return PAUSED before an event with time > pause_at (resumable)
        ("chunk_events", np.int64),  # return CHUNK_DONE after this many events in one call (0 = never)
        ("block_size", np.int64),  # the largest instance block size (columns of State.ride_phase);
        #                          each instance's own is INSTANCE_DT.block_size
        ("prefix_caching", np.int32),  # 1 = look up / register prefix keys
        ("compat", np.int32),  # 1 = blis-2026.02 conventions: idle instance steps at its Queued
        #                        time (overlap); ITL sample = step + a2, plus one at completion
        ("check_invariants", np.int32),  # 1 = verify batch and KV conservation after every step
        ("prefix_index", np.int32),  # 1 = maintain the router's prefix-affinity index
        ("prefix_index_capacity", np.int64),  # keys per instance in that index
        ("prefix_index_slots", np.int64),  # hash rows per instance (power of two)
        ("admission_latency_us", np.int64),
        ("routing_latency_us", np.int64),
        ("max_events", np.int64),  # safety limit on processed events (hang guard)
        ("event_skipping", np.int32),  # 1 = decode requests ride between their events (engine/calendar.py);
        #                                0 = every running request is visited every step (the reference path)
        ("calendar_size", np.int64),  # buckets of each instance's calendar (a power of two)
        ("trace_level", np.int32),  # TraceLevel: 0 = none, 1 = decision logs (route, admit, preempt),
        #                             2 = also the scheduling log (SCHED_DT)
        ("forced_request", np.int64),  # counterfactual replay: route this request to ...
        ("forced_instance", np.int64),  # ... this instance (-1 = nothing forced)
        ("pd_base", np.int64),  # P/D runs: request rows [0, pd_base) are the requests, row r + pd_base is
        #                         request r's prefill leg; 0 = no disaggregation in the run
        ("autoscaled", np.int32),  # 1 = some pool has an autoscaler (engine/autoscale.py; State.scale_pools)
        ("autoscale_seed", np.int64),  # the seed of the autoscaler's delay draws (engine/autoscale.py)
        ("flow", np.int32),  # 1 = a gateway queue with a saturation detector (FLOW slot not NEVER; engine/flow.py)
        ("deadlines", np.int32),  # 1 = some request has a TTL, is sheddable or retries (State.flow_reqs)
        ("flow_seed", np.int64),  # the seed of the retries' backoff jitter draws (engine/flow.py)
        ("agents", np.int32),  # 1 = agent DAGs run with the cluster (engine/agents.py; State.agent_*)
        ("agent_share", np.int32),  # the agents' fair-share mode: 0 dynamic, 1 static (kernels/agents/fairshare.py)
    ],
    align=True,
)

# The event loop's own state (one record): everything it needs to stop and continue.
LOOP_DT = np.dtype(
    [
        ("status", np.int64),  # Status of the last return
        ("clock_us", np.int64),  # time of the last event processed
        ("seq", np.int64),  # next event sequence number
        ("heap_size", np.int64),
        ("next_arrival", np.int64),  # position in the pre-sorted arrival stream
        ("events", np.int64),  # events processed
        ("steps", np.int64),  # engine steps over all instances (rows of the step log)
        ("steps_visiting_all", np.int64),  # of which visited every running request (no event skipping)
        ("irregular_records", np.int64),  # rows of the irregular-ITL log
        ("route_records", np.int64),  # rows of the decision logs
        ("admit_records", np.int64),
        ("preempt_records", np.int64),
        ("sched_records", np.int64),  # rows of the scheduling log (TraceLevel.FULL)
        ("heap_peak", np.int64),  # largest event-heap size seen
        ("injected", np.int64),  # arrivals processed
        ("rejected", np.int64),
        ("error_instance", np.int64),  # where a bad status happened, -1 if none
        ("error_request", np.int64),
        ("error_kind", np.int64),  # Status.UNKNOWN_EVENT: the kind code the loop had no handler for, else -1
        ("life_records", np.int64),  # rows of the lifecycle log (autoscaling)
        ("scale_records", np.int64),  # rows of the autoscaler's tick log
        ("scale_started", np.int64),  # 1 = the autoscalers' first ticks are scheduled
        ("scaler_events", np.int64),  # autoscaler events in the heap (ticks, actuations, LIFE): they never keep
        #                               a run alive (engine/loop.py)
        ("expiry_events", np.int64),  # EXPIRE events in the heap: they keep a run alive only while the gateway holds
        #                               requests (engine/flow.py)
        ("gateway_depth", np.int64),  # requests in the gateway queues now (flow control)
        ("gateway_peak", np.int64),
        ("gateway_entries", np.int64),  # entries into a gateway queue so far (the FIFO order key)
        ("timeouts", np.int64),  # attempts whose TTL expired
        ("sheds", np.int64),  # attempts the gateway shed
        ("retries", np.int64),  # attempts after the first (sent again after a timeout or a shed)
        ("attempt_records", np.int64),  # rows of the failed-attempt log
        ("gateway_records", np.int64),  # rows of the gateway's decision log
    ],
    align=True,
)

# --- gateway flow control and deadlines (engine/flow.py) ---

# Per request (State.flow_reqs, when flow control or deadlines are on): its deadline, its
# attempts and its place in its gateway queue.  Times in µs, -1 = none.
FLOW_REQ_DT = np.dtype(
    [
        ("ttl_us", np.int64),  # its time to live after each attempt's arrival, -1 = none (Workload.ttl_us)
        ("max_retries", np.int64),  # attempts after the first it may make (Workload.max_retries)
        ("sheddable", np.int64),  # 1 = the saturated gateway sheds it instead of queueing it
        ("group", np.int64),  # its gateway queue (State.flow_groups row): its model's, or its (model, tenant)'s
        ("attempt", np.int64),  # its current attempt, 0 = the first
        ("epoch", np.int64),  # bumped when an attempt ends early: its events of older epochs are stale
        ("first_arrival_us", np.int64),  # its first attempt's arrival (the whole exchange starts there)
        ("deadline_us", np.int64),  # its current attempt's expiry, -1 = none
        ("expire_at_us", np.int64),  # time of its EXPIRE event in the heap, -1 = none
        ("routing", np.int64),  # 1 = released to routing by flow control, the decision pending (FLOW_MODEL_DT.in_routing)
        ("gw_pos", np.int64),  # its position in its gateway queue's heap, -1 = not queued there
        ("gw_key", np.float64),  # its dispatch-order key (lower first; DispatchOrder)
        ("gw_seq", np.int64),  # its gateway entry number (ties of gw_key: FIFO)
        ("gw_enter_us", np.int64),  # its current attempt's (latest) entry into the gateway queue, -1 = never
        ("gw_leave_us", np.int64),  # ... and its leaving it, -1 = not left
        ("gw_wait_us", np.int64),  # its current attempt's time in the gateway queue so far
        ("gw_wait_total_us", np.int64),  # summed over its attempts
        ("timeouts", np.int64),  # its attempts that timed out
        ("sheds", np.int64),  # its attempts that were shed
    ],
    align=True,
)
# Per gateway queue (State.flow_groups): a binary heap of request ids in State.flow_heap
# [offset, offset + size), ordered by (gw_key, gw_seq); capacity = its requests.
FLOW_GROUP_DT = np.dtype(
    [
        ("offset", np.int64),
        ("size", np.int64),
        ("peak", np.int64),
        ("model", np.int64),
        ("tenant", np.int64),  # -1 = every tenant (strict fairness)
    ],
    align=True,
)
# Per served model (State.flow_models): its gateway.
FLOW_MODEL_DT = np.dtype(
    [
        ("first_group", np.int64),  # its gateway queues: flow_groups rows [first_group, first_group + n_groups)
        ("n_groups", np.int64),
        ("rr_next", np.int64),  # round-robin fairness: the queue (of its own) to try first
        ("depth", np.int64),  # requests waiting in its queues
        ("peak", np.int64),
        ("in_routing", np.int64),  # released by flow control, routing decision pending
        ("dispatch_at_us", np.int64),  # time of its latest DISPATCH event pushed, -1 = none
        ("dispatched", np.int64),  # requests released from its queues
        ("sheds", np.int64),
    ],
    align=True,
)
# Per instance (State.flow_inst, flow control): what the detectors read beside INSTANCE_DT.
FLOW_INST_DT = np.dtype(
    [
        ("step_batch", np.int64),  # requests in its last step's batch when it formed (its slots until it ends)
        ("saved_active", np.int64),  # INSTANCE_DT.active while free-slot routing hides the busy instances
        ("dispatch_at_us", np.int64),  # end of its step a DISPATCH of its model is due at, 0 = none
    ],
    align=True,
)
# The failed-attempt log (State.attempt_log): one row per attempt that timed out or was
# shed, in the order they ended (a request's final, completed attempt is in its own row).
ATTEMPT_DT = np.dtype(
    [
        ("request", np.int64),
        ("attempt", np.int64),  # 0 = the first
        ("arrival_us", np.int64),
        ("gw_enter_us", np.int64),  # its (latest) gateway queue entry and leaving, -1 = none / did not leave
        ("gw_leave_us", np.int64),
        ("gw_wait_us", np.int64),  # its time in the gateway queue
        ("end_us", np.int64),  # when it timed out or was shed
        ("outcome", np.int64),  # AttemptEnd
        ("place", np.int64),  # RequestState it was in when its TTL expired (shed: GATEWAY)
        ("instance", np.int64),  # instance it had been routed to, -1 = none
    ],
    align=True,
)

# The gateway's decision log (State.gateway_log, flow control at TraceLevel.DECISIONS): one
# row per queueing, dispatch or shedding decision, in decision order.
GATEWAY_LOG_DT = np.dtype(
    [
        ("time_us", np.int64),
        ("request", np.int64),
        ("attempt", np.int64),
        ("model", np.int64),
        ("tenant", np.int64),
        ("action", np.int64),  # GatewayAction
        ("depth", np.int64),  # requests waiting in the model's gateway queues after the decision
        ("wait_us", np.int64),  # DISPATCHED: its time in the queue (this attempt); else 0
    ],
    align=True,
)

# --- autoscaling (engine/autoscale.py) ---

# Per instance row, its lifecycle (State.life).  Rows of pools without an autoscaler stay
# ACTIVE (or OFF) for the whole run.
LIFE_DT = np.dtype(
    [
        ("state", np.int64),  # LifeState
        ("life", np.int64),  # lives begun on this row (a LIFE event of an earlier one is stale)
        ("since_us", np.int64),  # when it entered its state
        ("birth", np.int64),  # order of coming to life in its pool (newest/oldest scale-down), -1 = never
        ("warm_base", np.int64),  # INSTANCE_DT.completed when it began warming
        ("warm_start_us", np.int64),  # when it began warming
        ("events", np.int64),  # its LIFE events in the heap (a row is used again only when none is left)
        ("timed_out", np.int64),  # 1 = its drain wait timed out: requests reaching it go back to routing
    ],
    align=True,
)

# Per pool of the fleet (INSTANCE_DT.pool; State.scale_pools): its autoscaler's settings
# (config.autoscale.ResolvedAutoscale, times in µs) and state.  enabled 0: the pool keeps
# its instances.
SCALE_POOL_DT = np.dtype(
    [
        ("enabled", np.int32),
        ("drain", np.int32),  # DrainMode
        ("warm_curve", np.int32),  # WarmupCurve
        ("scale_down", np.int32),  # ScaleDownPick
        ("first", np.int64),  # its instance rows: [first, first + rows), rows = max_instances
        ("rows", np.int64),
        ("min_instances", np.int64),
        ("max_instances", np.int64),
        ("interval_us", np.int64),
        ("metrics_delay_us", np.int64),
        ("provisioning_mean_us", np.int64),
        ("provisioning_std_us", np.int64),
        ("loading_mean_us", np.int64),
        ("loading_std_us", np.int64),
        ("warm_factor", np.float64),  # 1 = no warm-up
        ("warm_requests", np.int64),  # the warm-up lasts this many completions (0: counted in µs)
        ("warm_us", np.int64),  # ... or this long
        ("ticks_up", np.int64),  # ticks of the scale-up window (the current one included)
        ("ticks_down", np.int64),  # ticks of the scale-down window
        ("max_change", np.int64),  # instances per decision at most, 0 = no limit
        ("drain_timeout_us", np.int64),  # drain wait's timeout, -1 = none
        # --- state
        ("ticks", np.int64),  # ticks so far (the wish ring's position)
        ("draws", np.int64),  # delay draws so far (the draw counter of its random stream)
        ("births", np.int64),  # instances come to life so far (LIFE_DT.birth)
        ("last_queued", np.int64),  # Σ INSTANCE_DT.injected of its rows at the last tick
        ("slo_judged", np.int64),  # requests completed on it since the last tick whose class has SLO targets
        ("slo_met", np.int64),  # of which met them
        ("ttft_count", np.int64),  # first tokens since the last tick (the latest TTFT_WINDOW kept)
        ("scale_ups", np.int64),  # instances started
        ("scale_downs", np.int64),  # instances drained or cancelled
        ("redirected", np.int64),  # requests sent back to routing by drains
        ("lost_tokens", np.int64),  # computed tokens thrown away by drain immediate (recomputed elsewhere)
    ],
    align=True,
)

# The lifecycle log: one row per lifecycle change of an instance (autoscaled pools).
LIFE_LOG_DT = np.dtype(
    [
        ("time_us", np.int64),
        ("instance", np.int32),
        ("state", np.int32),  # the LifeState it entered
    ],
    align=True,
)

# The autoscaler's tick log: one row per tick of each autoscaled pool.
SCALE_LOG_DT = np.dtype(
    [
        ("time_us", np.int64),
        ("pool", np.int32),
        ("reason", np.int32),  # ScaleReason
        ("current", np.int64),  # instances counted: provisioning, loading, warming or active
        ("ready", np.int64),  # of which serving (warming or active)
        ("wish", np.int64),  # the policy's count, within the bounds
        ("target", np.int64),  # the decision (acts at time + metrics delay when it differs from current)
        ("signal", np.float64),  # the policy's signal (saturation: KV demand / capacity)
    ],
    align=True,
)



# ----------------------------------------------------------------------------- agent DAGs
# (kernels/agents/fairshare.py: the fair-share resources; engine/agents.py: the DAGs in the
# event loop).  The tools-only driver builds the same tables for its own runs.

AGENT_RESOURCE_DT = np.dtype(
    [
        ("capacity", np.float64),  # C_r, work units per second (> 0, finite)
        ("vclock", np.float64),  # V_r: work per unit weight done since r was last idle
        ("t_us", np.int64),  # t_r: the instant V_r is at
        ("weight_sum", np.int64),  # W_r: sum of the weights of r's consumers
        ("members", np.int64),  # number of r's consumers
        ("max_members", np.int64),  # the cap on r's consumers, 0 = none
        ("slot_off", np.int64),  # r's heap is slots[off : off + heap_size], its queue follows at off + n_loads
        ("n_loads", np.int64),  # loads on r in the whole run (room of the heap and of the queue)
        ("heap_size", np.int64),
        ("wait_size", np.int64),
        ("event_seq", np.int64),  # seq of r's live finish event, -1 = none (older ones are stale)
        ("busy_us", np.int64),  # µs with at least one consumer
        ("dirty", np.int64),  # 1 = r is on the dirty list (its next finish may have changed)
    ],
    align=True,
)

AGENT_LOAD_DT = np.dtype(
    [
        ("node", np.int64),
        ("res", np.int64),
        ("work", np.float64),  # work units on res (>= 0, finite; 0 = no load)
        ("weight", np.int64),  # the node's weight (>= 1)
        ("vfin", np.float64),  # virtual finish on res (the heap key)
        ("heap_pos", np.int64),  # index in res's heap, -1 = not in it
        ("wait_key", np.float64),  # the µs it queued at (the queue key)
        ("wait_pos", np.int64),  # index in res's queue, -1 = not in it
    ],
    align=True,
)

AGENT_NODE_DT = np.dtype(
    [
        ("pending", np.int64),  # predecessors not finished yet (0: it starts / has started)
        ("left", np.int64),  # once started: its loads not done yet (+1 for an llm node's request)
        ("start_us", np.int64),  # -1 = not started
        ("finish_us", np.int64),  # -1 = not finished
        ("load_lo", np.int64),  # its loads: rows [load_lo, load_hi) of the load table
        ("load_hi", np.int64),
        ("succ_lo", np.int64),  # its successors: agent_succ[succ_lo : succ_hi]
        ("succ_hi", np.int64),
        ("request", np.int64),  # an llm node's request row, -1 for a tool
    ],
    align=True,
)


__all__ = ["GATEWAY_LOG_DT", "FLOW_REQ_DT", "FLOW_GROUP_DT", "FLOW_MODEL_DT", "FLOW_INST_DT", "ATTEMPT_DT", "LIFE_DT", "SCALE_POOL_DT", "LIFE_LOG_DT", "SCALE_LOG_DT","ALL_NAMED", "ADMIT_DT", "N_TRACE_ALTERNATIVES", "PREEMPT_DT", "ROUTE_DT", "SCHED_DT", "SCHED_SCAN_DEPTH", "EVENT_DT", "INSTANCE_DT", "IRR_DT", "KV_BLOCK_DT", "LOOP_DT", "PD_INST_DT", "PD_MODEL_DT", "PD_REQ_DT", "KV_TIER_INST_DT", "TIER_DT", "TIER_SLOT_DT", "TIER_WRITE_DT", "TIER_REQ_DT", "TIER_JOB_DT", "REQUEST_DT", "SETTINGS_DT", "STEP_DT", "AGENT_RESOURCE_DT", "AGENT_LOAD_DT", "AGENT_NODE_DT"]
