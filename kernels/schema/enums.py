"""Integer enums of the kernels, as NamedTuple groups (numba folds an attribute of a
global NamedTuple instance to a compile-time constant), and the column layouts of the
policy parameter matrix and the roofline parameter vector.

Where a numeric order carries meaning it is stated: event kinds sort in that order at
equal times; request states are not ordered.
"""

from typing import NamedTuple


class _RequestState(NamedTuple):
    PENDING: int = 0  # not arrived yet
    ADMITTING: int = 1  # arrived at the cluster; admission/routing decisions pending
    ROUTED: int = 2  # routed to an instance; queueing overhead (alpha) running
    QUEUED: int = 3  # in the instance's wait queue (also after a preemption)
    RUNNING: int = 4  # in the instance's running batch
    COMPLETED: int = 5  # produced its last output token
    REJECTED: int = 6  # refused by the admission policy
    DROPPED: int = 7  # needs more KV blocks than the instance has ("dropped_unservable")
    # prefill/decode disaggregation (engine/disaggregation.py): the request row on its decode instance
    REMOTE_PREFILL: int = 8  # its prompt is being prefilled on a prefill instance (by its prefill leg)
    TRANSFER_WAIT: int = 9  # prefilled; waiting for free KV blocks on its decode instance
    TRANSFERRING: int = 10  # its KV is on the way to its decode instance (which holds the blocks);
    #                          a prefill leg in this state holds its blocks on the prefill instance
    DROPPED_AT_DECODE: int = 11  # prefilled, but its decode instance had no room (on_decode_full: drop)
    # KV cache tiers (kv/tiers.py)
    LOADING: int = 12  # admitted with blocks found in a CPU/disk tier: waiting for them to load
    # gateway flow control and deadlines (engine/flow.py)
    GATEWAY: int = 13  # admitted, waiting in its model's gateway queue while the instances are saturated
    TIMED_OUT: int = 14  # its TTL expired before it completed: cancelled where it was (its last attempt's end)
    SHED: int = 15  # a sheddable request the saturated gateway rejected (its last attempt's end)


RequestState = _RequestState()
REQUEST_STATE_NAMES = (
    "pending", "admitting", "routed", "queued", "running", "completed", "rejected", "dropped_unservable",
    "remote_prefill", "transfer_wait", "transferring", "dropped_at_decode", "loading",
    "gateway", "timed_out", "shed",
)


class _KeyFlagMode(NamedTuple):
    """What ``structs.keycount.flag_keys`` flags."""

    SHARED: int = 0  # every key occurring more than once anywhere in the array
    REPEATED: int = 1  # every occurrence of a key seen earlier in the array


KeyFlagMode = _KeyFlagMode()


class _ClusterEvent(NamedTuple):
    """Cluster-level event kinds (no instance); at equal time the lower code runs first.
    Codes are spaced 4 apart so that a new kind can go between two others without
    renumbering them (the ordering table below)."""

    ARRIVAL: int = 0
    EXPIRE: int = 1  # a request's TTL is up: cancelled wherever it is unless it completed (engine/flow.py)
    AGENT_LLM_DONE: int = 2  # an agent DAG's llm node: its request's last token is out (engine/agents.py)
    AGENT: int = 3  # agent DAGs' instant: arrivals, tool finishes, successors start (engine/agents.py; never in
    #                 the heap: the loop merges the agents' own next time, State.agent_ctr, like the arrivals)
    ADMISSION: int = 4
    AUTOSCALE_TICK: int = 5  # a pool's autoscaler collects its signals and decides (engine/autoscale.py)
    ACTUATE: int = 6  # a pool's decision acts, a metrics delay after its tick
    ROUTING: int = 8
    DISPATCH: int = 9  # a model's gateway queue releases requests while its instances are not saturated


class _InstanceEvent(NamedTuple):
    """Instance-level event kinds; at equal time (and instance) the lower code runs first,
    so Queued runs before Step.  Spaced as ClusterEvent's."""

    LIFE: int = 1  # an instance's lifecycle moves on (engine/autoscale.py: LifeStep says how)
    TIER_LINK: int = 2  # a tier read link's next load finishes its data (kv/tiers.py)
    LOAD_DONE: int = 3  # a request's load from a tier is done (its latency included): it may be admitted
    QUEUED: int = 4
    TRANSFER_DONE: int = 5  # (decode instance) a request's KV has arrived: it joins the wait queue
    LINK: int = 6  # (prefill instance) its transfer link's next transfer finishes its data (contention: link)
    LEG_DONE: int = 7  # (prefill instance) the step that completed a prefill leg's prompt has ended: hand it over
    STEP: int = 8


ClusterEvent = _ClusterEvent()
InstanceEvent = _InstanceEvent()
# Event priority bands (engine/events.py): cluster kinds take [0, N_CLUSTER_KINDS), then
# each instance a band of N_INSTANCE_KINDS, instance 0 first.  The tie-break order at
# equal time is therefore: cluster events by code, then instance 0's by code, instance 1's ...
#
#   band      code  kind                 free codes for a new kind (its place in the order)
#   cluster      0  ARRIVAL              (also a closed-loop follower's or a retry's)
#                1  EXPIRE               (flow control: a TTL that ends at an arrival's time sees it arrive)
#                2  AGENT_LLM_DONE       (agent DAGs: an llm node is done: the instant below sees it)
#                3  AGENT                (agent DAGs: one instant of the fair-share resources and the DAGs)
#                4  ADMISSION
#                5  AUTOSCALE_TICK       (autoscaling: a tick sees the admissions of its time)
#                6  ACTUATE              7: free
#                8  ROUTING
#                9  DISPATCH             (flow control: routing decisions of the time go first)
#                                        10-15: after routing (e.g. a pool-level decision)
#   instance     0  --                   before Queued
#                1  LIFE                 (autoscaling: an instance comes up, is evicted, times out draining)
#                2  TIER_LINK            (KV tiers: loads; a loaded request is admitted before the step)
#                3  LOAD_DONE
#                4  QUEUED
#                5  TRANSFER_DONE        the request joins the queue before the step that admits it
#                6  LINK
#                7  LEG_DONE             (P/D: its handover to the decode side, at the step's end)
#                8  STEP                 9-15: after the step (e.g. KV offload / tier moves)
#
# A new kind also needs its handler in the loop's dispatch (engine/loop.py), which stops
# with Status.UNKNOWN_EVENT on any code it does not know.
N_CLUSTER_KINDS = 16
N_TIERS = 2  # KV tiers beyond the GPU an instance may have (cpu, disk): rows per instance of State.tiers
N_INSTANCE_KINDS = 16


class _Status(NamedTuple):
    """Why the event loop returned.  OK, LOG_FULL, PAUSED, CHUNK_DONE and COHORT_SPLIT are
    not errors: after LOG_FULL the caller grows the logs and calls again, after PAUSED it
    moves the pause time and calls again (the loop state lives in arrays, so the run simply
    continues); after COHORT_SPLIT it divides the cohort (blis_fast.batch.cohorts)."""

    OK: int = 0  # finished: no more events, or the next one lies beyond the horizon
    HEAP_FULL: int = 1  # the event heap overflowed (an internal sizing error)
    CLOCK_BACKWARDS: int = 2  # an event's time < the clock
    NO_INSTANCE: int = 3  # routing found no active instance
    STALL: int = 4  # waiting requests but no batch could be formed
    INVARIANT_KV: int = 5  # allocated + free != total after a step
    INVARIANT_BATCH: int = 6  # batch size > max_num_seqs
    LOG_FULL: int = 7  # the step or irregular-ITL log needs room before the next step
    MAX_EVENTS: int = 8  # the max_events safety limit was reached
    PAUSED: int = 9  # the next event lies beyond settings.pause_at_us
    CHUNK_DONE: int = 10  # settings.chunk_events events were processed in this call (a chance to report
    #                       progress and to notice an interrupt; the run simply continues)
    COHORT_SPLIT: int = 11  # the cohort's members route the next request differently (cohort_choice
    #                         says how); the routing event is back in the heap, unprocessed
    UNKNOWN_EVENT: int = 12  # an event of a kind the loop has no handler for (loop error_kind /
    #                          error_instance say which): an internal error
    AGENT_HEAP_FULL: int = 13  # the agents' finish-event heap is full of live events (an internal sizing error)


Status = _Status()


class _AgentCounter(NamedTuple):
    """Columns of ``State.agent_ctr`` (and of the tools-only driver's own counters,
    kernels/agents/fairshare.py): the agents' part of the loop state."""

    HEAP_SIZE: int = 0  # live + stale finish events in the agents' heap (one live per resource at most)
    SEQ: int = 1  # the next finish event's sequence number (its resource's version)
    NEXT_ARRIVAL: int = 2  # position in the agents' sorted arrival stream
    N_DONE: int = 3  # loads done at the current instant, not yet handled (a stack)
    N_STACK: int = 4  # nodes done at the current instant, not yet handled (a stack)
    N_DIRTY: int = 5  # resources whose next finish may have changed
    N_RELEASED: int = 6  # llm nodes started at the current instant, their requests not yet sent
    EVENTS: int = 7  # agent arrivals and resource finish events handled
    NEXT_US: int = 8  # the agents' next instant (their next arrival, finish or llm completion), NEVER_US = none
    STATUS: int = 9  # 0 = ok, 1 = the finish-event heap is full


AgentCounter = _AgentCounter()
N_AGENT_COUNTERS = len(AgentCounter)
AGENT_NEVER_US = 1 << 62  # "no next instant": as far as the clock ever goes


class _PhaseEnd(NamedTuple):
    """Where a request's phase ends (engine/phases.py: ``end_phase``, the hook later
    features attach to)."""

    PREFILL_DONE: int = 0  # its prompt is computed: the first output token is emitted
    OUTPUT_DONE: int = 1  # its last output token is emitted: it completes and frees its KV blocks
    FOLLOWER_RELEASED: int = 2  # after its step: the closed-loop request it releases is scheduled
    KV_HANDED_OVER: int = 3  # a P/D prefill leg's KV reached the decode side (or its request ended there):
    #                          the leg frees its blocks into the prefill instance's cache and completes


PhaseEnd = _PhaseEnd()


class _PdDecider(NamedTuple):
    """Whether a request of a disaggregated model is prefilled on a prefill instance
    (engine/disaggregation.py; config ``pd.decider``)."""

    NEVER: int = 0
    ALWAYS: int = 1
    PREFIX_THRESHOLD: int = 2  # when its prompt tokens not cached on the chosen decode instance >= threshold
    EXPRESSION: int = 3  # when the PD_DECIDER slot's program (PdFeature) is > 0


PdDecider = _PdDecider()
PD_DECIDER_NAMES = ("never", "always", "prefix-threshold", "expression")  # PdDecider order (a tree: expression)


class _PoolRole(NamedTuple):
    """What an instance does for its model (INSTANCE_DT.role)."""

    MONO: int = 0  # a monolithic deployment's instance: prefill and decode of every request
    PREFILL: int = 1  # prefill legs only
    DECODE: int = 2  # decode (and the requests the decider keeps local)
    BOTH: int = 3  # either


PoolRole = _PoolRole()
POOL_ROLE_NAMES = ("mono", "prefill", "decode", "both")


class _TraceLevel(NamedTuple):
    NONE: int = 0  # no decision logs (nothing recorded, nothing allocated)
    DECISIONS: int = 1  # admission, routing (with the best alternatives) and preemption records
    FULL: int = 2  # decisions, plus the instance schedulers' records (SCHED_DT, SchedRecord)


TraceLevel = _TraceLevel()


class _SchedRecord(NamedTuple):
    """Kinds of scheduling records (SCHED_DT ``kind``; TraceLevel.FULL)."""

    SCHEDULED: int = 0  # a waiting request entered the running batch (wait queue -> batch)
    BLOCKED: int = 1  # the wait queue's head stayed waiting at the end of batch formation (an episode:
    #                   consecutive steps of its instance with the same head and the same reason)
    VICTIM: int = 2  # the context of a preemption (same order as the preemption log)
    LOAD: int = 3  # a waiting request found blocks in a KV tier and left the queue to load them (kv/tiers.py)


SchedRecord = _SchedRecord()


class _BlockReason(NamedTuple):
    """Why the wait queue's head was not admitted (SCHED_DT ``reason`` of BLOCKED records)."""

    NONE: int = 0  # (not a BLOCKED record)
    BATCH_FULL: int = 1  # the batch held max_num_seqs requests
    TOKEN_BUDGET: int = 2  # the step's max_num_batched_tokens were used up
    KV_BLOCKS: int = 3  # its first chunk needed more free KV blocks than the instance had
    PREEMPTION: int = 4  # a preemption happened in this step: no admissions (docs/semantics.md §3.2)


BlockReason = _BlockReason()
BLOCK_REASON_NAMES = ("", "batch-full", "token-budget", "kv-blocks", "preemption")


class _LatencyKind(NamedTuple):
    BLACKBOX: int = 0  # step time = trunc(β0 + β1·P + β2·D)
    ROOFLINE: int = 1  # analytical, from the model config and the GPU


LatencyKind = _LatencyKind()

# ----------------------------------------------------------------------------- policies
# A policy candidate is data: one kind per slot (``policy_kind[slot]``) and one row of
# parameters per slot (``policy_param[slot, :POLICY_WIDTH]``), laid out as below.


class _PolicySlot(NamedTuple):
    ADMISSION: int = 0
    ROUTING: int = 1
    PRIORITY: int = 2
    SCHEDULER: int = 3
    VICTIM: int = 4
    SNAPSHOT: int = 5  # the router snapshot's refresh interval per field, µs
    AUTOSCALE: int = 6  # the autoscaler of every autoscaled pool (AutoscaleKind, AutoscaleParam)
    FLOW: int = 7  # the gateway's flow control of every served model (FlowDetector, FlowParam)
    PD_DECIDER: int = 8  # the P/D decider's program (PdDecider.EXPRESSION; its kind is unused)
    DISPATCH: int = 9  # the gateway's dispatch-order program (DispatchOrder.EXPRESSION; its kind is unused)
    FLOW_INSTANCE: int = 10  # the expression detector's per-instance program (FlowInstanceFeature; kind unused)
    FLOW_SATURATED: int = 11  # the expression detector's saturation test (FlowModelFeature; kind unused)


PolicySlot = _PolicySlot()
N_POLICY_SLOTS = 12
POLICY_WIDTH = 256  # parameters per slot: a template's few, or an expression's program (ProgramHeader)
assert POLICY_WIDTH == 256  # (AdmissionParam.PROGRAM_* are its last columns)
MAX_SLO_CLASS_WEIGHTS = 63  # priority: 1 age weight + up to 63 SLO-class weights


class _AdmissionKind(NamedTuple):
    ALWAYS: int = 0
    REJECT_ALL: int = 1  # pathological
    TOKEN_BUCKET: int = 2  # per tenant
    EXPRESSION: int = 3  # a program (ProgramHeader) over AdmitFeature: admitted iff its value > 0


class _AdmissionParam(NamedTuple):
    CAPACITY: int = 0  # token-bucket capacity, tokens
    REFILL_PER_S: int = 1  # token-bucket refill rate, tokens per second
    # an admission program's token bucket (AdmitFeature.BUCKET_TOKENS), after its code
    PROGRAM_CAPACITY: int = 254
    PROGRAM_REFILL_PER_S: int = 255


class _RoutingKind(NamedTuple):
    ROUND_ROBIN: int = 0
    LEAST_LOADED: int = 1
    WEIGHTED: int = 2  # argmax of the weighted scorers (RouteWeight columns)
    PREFIX_AFFINITY: int = 3
    ALWAYS_BUSIEST: int = 4  # pathological
    EXPRESSION: int = 5  # a program (ProgramHeader) over RouteFeature: the score of each candidate


class _RouteWeight(NamedTuple):
    QUEUE_DEPTH: int = 0
    KV_UTILIZATION: int = 1
    LOAD_BALANCE: int = 2
    PREFIX_AFFINITY: int = 3


N_ROUTE_WEIGHTS = 4


class _PriorityKind(NamedTuple):
    CONSTANT: int = 0  # every request has priority 0: nothing to compute
    AGE_AND_CLASS: int = 1  # PriorityParam below
    EXPRESSION: int = 2  # a program (ProgramHeader) over RequestFeature


class _PriorityParam(NamedTuple):
    """priority = AGE_WEIGHT · (now − arrival µs) + weight of the request's SLO class."""

    AGE_WEIGHT: int = 0
    CLASS_WEIGHTS: int = 1  # first of one column per SLO class (class 0, 1, ...)


class _SchedulerKind(NamedTuple):
    FCFS: int = 0  # keep the queue order
    SORT: int = 1  # stable sort by Σ SchedWeight · attribute ascending, ties by (arrival, id)
    EXPRESSION: int = 2  # stable sort by a program's key (ProgramHeader, RequestFeature) ascending, ties as SORT


class _SchedWeight(NamedTuple):
    PRIORITY: int = 0
    ARRIVAL: int = 1
    PROMPT_LEN: int = 2
    OUTPUT_LEN: int = 3


N_SCHED_WEIGHTS = 4


class _VictimKind(NamedTuple):
    LAST: int = 0  # the last request of the running batch (vLLM)
    LOWEST_PRIORITY: int = 1  # lowest priority, ties -> the later in the batch
    EXPRESSION: int = 2  # highest program value (ProgramHeader, RequestFeature), ties -> the later in the batch


class _SnapField(NamedTuple):
    """Router snapshot fields: columns of ``snap`` and of the SNAPSHOT policy row."""

    QUEUE_DEPTH: int = 0
    BATCH_SIZE: int = 1
    KV_UTILIZATION: int = 2
    FREE_BLOCKS: int = 3
    CACHE_HIT_RATE: int = 4
    PENDING: int = 5
    IN_FLIGHT: int = 6


# ----------------------------------------------------------------------------- programs
# An expression or decision-tree policy (blis_fast/policy/expression.py) is compiled to a
# program: float64 code in its slot's parameter row, run by kernels/policies/program.py.


class _ProgramHeader(NamedTuple):
    """Columns of a program row: the features it reads (a bit mask, so a call site fills
    only those), its code length, its form, then the code (Op codes, each followed by its
    operands)."""

    FEATURES: int = 0  # bit f set = the program reads feature f
    LENGTH: int = 1  # floats of code
    FORM: int = 2  # ProgramForm
    CODE: int = 3  # first code column


class _ProgramForm(NamedTuple):
    EXPRESSION: int = 0  # straight-line code: one pass, or one pass over many feature rows at once
    TREE: int = 1  # BRANCH and RETURN: one path from the root to a leaf


class _Op(NamedTuple):
    """Program instructions.  Operands follow the code: CONST value; FEATURE index; POW
    exponent; BRANCH feature index, threshold, the column of its right subtree (always
    forward).  Binary operators pop b then a and push a op b (comparisons and logic push
    1.0 or 0.0); a binary operator + OP_CONST_RIGHT takes b from the next float instead of
    the stack, + OP_FEATURE_RIGHT the feature that float indexes."""

    CONST: int = 1
    FEATURE: int = 2
    ADD: int = 3
    SUB: int = 4
    MUL: int = 5
    DIV: int = 6  # protected: a / 0 = 0
    MIN: int = 7
    MAX: int = 8
    LT: int = 9
    LE: int = 10
    GT: int = 11
    GE: int = 12
    EQ: int = 13
    NE: int = 14
    AND: int = 15
    OR: int = 16  # (the last binary operator)
    POW: int = 17  # constant exponent: an integer -4..4 (repeated products) or 0.5 (sqrt of max(a, 0))
    ABS: int = 18
    NEG: int = 19
    NOT: int = 20
    LOG1P: int = 21  # log1p(max(a, 0))
    SQRT: int = 22  # sqrt(max(a, 0))
    EXP: int = 23  # exp of a clamped to [-EXP_LIMIT, EXP_LIMIT]
    FLOOR: int = 24  # (the last unary operator)
    SELECT: int = 25  # pops c, a, b (pushed in that order): a if c != 0 else b
    BRANCH: int = 26  # a tree node: continue below if feature <= threshold, else at the right subtree
    RETURN: int = 27  # a tree leaf: the program's value is the top of the stack


OP_CONST_RIGHT = 32
OP_FEATURE_RIGHT = 64
PROGRAM_STACK = 32  # the deepest stack a program may need (checked when it is compiled)
MAX_PROGRAM_CODE = POLICY_WIDTH - 5  # floats of code a program may have (the last 2 columns: AdmissionParam)
EXP_LIMIT = 50.0


class _RouteFeature(NamedTuple):
    """What a routing program reads about one candidate instance (as the router sees it:
    the snapshot) and about the request and the candidates as a whole."""

    LOAD: int = 0  # queue + running + pending (what least-loaded minimizes)
    QUEUE: int = 1  # waiting requests
    RUNNING: int = 2  # requests in the running batch
    PENDING: int = 3  # routed to it, not yet queued
    KV_UTILIZATION: int = 4  # allocated / total KV blocks, 0..1
    KV_FREE: int = 5  # 1 - kv_utilization
    HIT_BLOCKS: int = 6  # the request's leading prompt blocks its prefix index matches
    REQUEST_BLOCKS: int = 7  # the request's full prompt blocks
    MIN_LOAD: int = 8  # over the candidates
    MAX_LOAD: int = 9
    MAX_HIT: int = 10
    CANDIDATES: int = 11  # how many instances may take the request
    PROMPT_TOKENS: int = 12
    SLO_CLASS: int = 13
    TENANT: int = 14


N_ROUTE_FEATURES = len(_RouteFeature._fields)


class _AdmitFeature(NamedTuple):
    """What an admission program reads: the request, and the cluster at the decision."""

    PROMPT_TOKENS: int = 0
    SLO_CLASS: int = 1
    TENANT: int = 2
    TIME_S: int = 3  # the simulated clock, seconds
    BUCKET_TOKENS: int = 4  # the tenant's token bucket, refilled to now (read: an admitted request spends it)
    IN_FLIGHT: int = 5  # requests routed, waiting or running on the active instances (the cluster's: last)
    WAITING: int = 6  # requests in the active instances' wait queues
    RUNNING: int = 7  # requests in their running batches
    INSTANCES: int = 8  # active instances
    KV_UTILIZATION: int = 9  # their mean KV utilization, 0..1


N_ADMIT_FEATURES = len(_AdmitFeature._fields)


class _RequestFeature(NamedTuple):
    """What a priority, scheduler-key or victim program reads about one request."""

    AGE_US: int = 0  # now - its arrival, µs
    ARRIVAL_US: int = 1
    PROMPT_TOKENS: int = 2
    OUTPUT_TOKENS: int = 3
    SLO_CLASS: int = 4
    TENANT: int = 5
    PRIORITY: int = 6  # its priority (the PRIORITY slot's); in a priority program itself: 0
    GENERATED: int = 7  # output tokens generated so far
    ATTEMPT: int = 8  # its attempt (0 = the first; retries after a timeout or a shed)
    TTFT_TARGET_US: int = 9  # its SLO class's TTFT target, µs; -1 = none
    POSITION: int = 10  # scheduler: its place in the wait queue before this sort (0 = head); victim: its batch slot


N_REQUEST_FEATURES = len(_RequestFeature._fields)


class _PdFeature(NamedTuple):
    """What a P/D decider program reads: the request, the decode instance the router chose,
    and the prefill pool."""

    PROMPT_TOKENS: int = 0
    CACHED_TOKENS: int = 1  # its leading prompt tokens cached on the decode instance (prefix caching)
    UNCACHED_TOKENS: int = 2  # prompt_tokens - cached_tokens (what prefix-threshold compares)
    DECODE_LOAD: int = 3  # the decode instance's requests routed, waiting or running
    DECODE_KV_UTILIZATION: int = 4
    TRANSFER_QUEUE: int = 5  # the decode instance's requests waiting for their KV transfer
    PREFILL_LOAD: int = 6  # mean load of the model's active prefill instances
    PREFILL_INSTANCES: int = 7
    SLO_CLASS: int = 8
    TENANT: int = 9


N_PD_FEATURES = len(_PdFeature._fields)


class _ScaleFeature(NamedTuple):
    """What an autoscaling program reads about its pool at a tick (the signals are NaN
    when they have no sample: a program reading one then holds)."""

    CURRENT: int = 0  # instances provisioning, loading, warming or active
    READY: int = 1  # warming or active
    MIN_INSTANCES: int = 2
    MAX_INSTANCES: int = 3
    KV_UTILIZATION: int = 4  # the threshold/target autoscalers' signals (Signal)
    WAITING: int = 5
    IN_FLIGHT: int = 6
    ARRIVAL_RATE: int = 7
    TTFT_P90_MS: int = 8
    SLO_ATTAINMENT: int = 9
    KV_DEMAND: int = 10  # the saturation autoscaler's KV demand / capacity
    KV_DEMAND_FEWER: int = 11  # ... with one instance fewer
    TICKS: int = 12  # the pool's ticks so far


N_SCALE_FEATURES = len(_ScaleFeature._fields)


class _FlowInstanceFeature(NamedTuple):
    """What an expression detector's per-instance program reads about one ready instance of
    the model (as the built-in detectors see it: a step's slots count as taken until it
    ends) and about the model's gateway."""

    IN_FLIGHT: int = 0  # routed + queue + slots_taken (what concurrency compares with its limit)
    ROUTED: int = 1  # requests routed to it, not yet in its wait queue
    QUEUE: int = 2  # requests in its wait queue
    RUNNING: int = 3  # requests in its running batch
    SLOTS_TAKEN: int = 4  # batch slots taken: the running batch, or the batch a step in flight started with
    MAX_NUM_SEQS: int = 5  # its batch slots
    KV_UTILIZATION: int = 6  # allocated / total KV blocks, 0..1
    KV_FREE_BLOCKS: int = 7
    STEPPING: int = 8  # 1 while a step runs on it, else 0
    INSTANCES: int = 9  # the model's ready instances
    IN_ROUTING: int = 10  # requests the gateway released whose routing decision is pending
    GATEWAY_DEPTH: int = 11  # requests waiting in the model's gateway queue


N_FLOW_INSTANCE_FEATURES = len(_FlowInstanceFeature._fields)


class _FlowModelFeature(NamedTuple):
    """What an expression detector's saturation test reads: its per-instance values
    aggregated over the model's ready instances (in instance order), and the gateway."""

    TOTAL: int = 0  # the sum of the instances' values
    LARGEST: int = 1
    SMALLEST: int = 2
    INSTANCES: int = 3
    IN_ROUTING: int = 4
    GATEWAY_DEPTH: int = 5


N_FLOW_MODEL_FEATURES = len(_FlowModelFeature._fields)
# (an autoscaling program reads the signals in the Signal order from KV_UTILIZATION on)
assert _ScaleFeature._fields[4:10] == tuple(f.upper() for f in ("kv_utilization", "waiting", "in_flight",
                                                                 "arrival_rate", "ttft_p90_ms", "slo_attainment"))
N_PROGRAM_FEATURES = max(N_ROUTE_FEATURES, N_ADMIT_FEATURES, N_REQUEST_FEATURES, N_PD_FEATURES, N_SCALE_FEATURES,
                         N_FLOW_INSTANCE_FEATURES, N_FLOW_MODEL_FEATURES)  # State.prog_features


class _AutoscaleKind(NamedTuple):
    """The autoscaling policy of the AUTOSCALE slot (config ``policy.autoscaler``)."""

    NONE: int = 0  # no autoscaler: every pool keeps its initial instances
    THRESHOLD: int = 1  # up when the signal is beyond UP, down when it is beyond DOWN the other way
    TARGET: int = 2  # HPA: desired = ceil(current x signal / TARGET)
    SATURATION: int = 3  # llm-d's variant autoscaler: KV demand (queued tokens too) vs capacity, KV_UP / KV_DOWN
    OSCILLATOR: int = 4  # pathological: up and down every PERIOD_TICKS ticks
    EXPRESSION: int = 5  # desired = ceil of a program (ProgramHeader, ScaleFeature) in the AUTOSCALE row


class _Signal(NamedTuple):
    """The signal a threshold or target autoscaler reads (AutoscaleParam.SIGNAL)."""

    KV_UTILIZATION: int = 0  # mean KV utilization of the pool's active instances, 0..1
    WAITING: int = 1  # waiting requests per active instance
    IN_FLIGHT: int = 2  # requests in flight per active instance
    ARRIVAL_RATE: int = 3  # requests per second per active instance, over the window
    TTFT_P90_MS: int = 4  # TTFT p90 over the window, ms
    SLO_ATTAINMENT: int = 5  # fraction of requests meeting their SLO over the window, 0..1 (higher is better)


class _AutoscaleParam(NamedTuple):
    """Columns of the AUTOSCALE policy row (unused columns are 0)."""

    SIGNAL: int = 0  # a Signal code (threshold, target)
    UP: int = 1  # threshold: the scale-up boundary
    DOWN: int = 2  # threshold: the scale-down boundary
    TARGET: int = 3  # target: the signal's target value per instance
    KV_UP: int = 4  # saturation: scale up above this KV demand / capacity
    KV_DOWN: int = 5  # saturation: scale down below this
    PERIOD_TICKS: int = 6  # oscillator: ticks between its changes


class _DrainMode(NamedTuple):
    """How a scaled-down instance is drained (config ``drain``)."""

    WAIT: int = 0  # no new requests; waiting and running ones finish (optional timeout, then REDIRECT)
    REDIRECT: int = 1  # waiting requests go back through routing; running ones finish
    IMMEDIATE: int = 2  # waiting and running requests go back through routing (computed KV lost)


class _ScaleDownPick(NamedTuple):
    """Which instance a scale-down drains (config ``scale_down``)."""

    LEAST_LOADED: int = 0
    NEWEST: int = 1
    OLDEST: int = 2


class _WarmupCurve(NamedTuple):
    """How a new instance's step-time factor decays to 1 (config ``warmup.curve``)."""

    STEP: int = 0  # the whole factor until the warm-up ends, then 1
    LINEAR: int = 1
    EXPONENTIAL: int = 2


class _LifeState(NamedTuple):
    """Where an instance row is in its lifecycle (State.life; engine/autoscale.py).  Only
    WARMING and ACTIVE instances take requests (INSTANCE_DT.active); every state from
    PROVISIONING to DRAINING holds (and bills) its GPUs."""

    OFF: int = 0  # a row no instance has used yet
    PROVISIONING: int = 1  # its node is being provisioned
    LOADING: int = 2  # the model is loading
    WARMING: int = 3  # serving, with step times x the warm-up factor
    ACTIVE: int = 4
    DRAINING: int = 5  # takes no new requests; terminated once empty
    TERMINATED: int = 6  # its GPUs are released (the row may be used again)


class _LifeStep(NamedTuple):
    """What a LIFE event does (its arg2); the event's request field carries the life
    (LIFE_DT.life) it belongs to, so an event of an instance cancelled since is ignored."""

    LOADED_NODE: int = 0  # provisioning done: the model starts loading
    LOADED_MODEL: int = 1  # loading done: warming (or active without a warm-up)
    WARM_END: int = 2  # a warm-up counted in seconds ends
    EVICT: int = 3  # drain immediate: the step in progress has ended; its requests go back to routing
    DRAIN_TIMEOUT: int = 4  # drain wait's timeout: the requests left go back to routing (running ones finish)
    STEPS_DONE: int = 5  # a draining instance's last step has ended: terminated if nothing is left


class _ScaleReason(NamedTuple):
    """Why a tick decided what it did (SCALE_LOG_DT.reason)."""

    HOLD: int = 0  # the policy wants the current count
    UP: int = 1  # scale up (the decision acts after the metrics delay)
    DOWN: int = 2
    UP_HELD: int = 3  # the policy wants more, but not on every tick of the scale-up window yet
    DOWN_HELD: int = 4  # the policy wants fewer, but not on every tick of the scale-down window yet
    AT_MAX: int = 5  # the policy wants more than max_instances (and the pool has them)
    AT_MIN: int = 6  # the policy wants fewer than min_instances (and the pool has them)


AutoscaleKind = _AutoscaleKind()
LifeState = _LifeState()
LifeStep = _LifeStep()
ScaleReason = _ScaleReason()
LIFE_STATE_NAMES = ("off", "provisioning", "loading", "warming", "active", "draining", "terminated")
SCALE_REASON_NAMES = ("hold", "up", "down", "up_held", "down_held", "at_max", "at_min")
MAX_WINDOW_TICKS = 4096  # ticks a stabilization window or a metrics delay may span (the window / interval, + 1)
TTFT_WINDOW = 1024  # TTFT samples a pool keeps for its ttft_p90_ms signal (the latest of the window)
Signal = _Signal()
AutoscaleParam = _AutoscaleParam()
DrainMode = _DrainMode()
ScaleDownPick = _ScaleDownPick()
WarmupCurve = _WarmupCurve()
AUTOSCALER_NAMES = ("none", "threshold", "target", "saturation", "oscillator", "expression")  # AutoscaleKind order
SIGNAL_NAMES = ("kv_utilization", "waiting", "in_flight", "arrival_rate", "ttft_p90_ms", "slo_attainment")
N_SIGNALS = len(SIGNAL_NAMES)
DRAIN_NAMES = ("wait", "redirect", "immediate")
SCALE_DOWN_NAMES = ("least-loaded", "newest", "oldest")
WARMUP_CURVE_NAMES = ("step", "linear", "exponential")



class _FlowDetector(NamedTuple):
    """The saturation detector of the FLOW slot (config ``policy.flow_control``): while it
    says a model's instances are saturated, its requests wait in the gateway queue."""

    NEVER: int = 0  # no gateway queue: every admitted request is routed at once (the run before flow control)
    CONCURRENCY: int = 1  # saturated when every instance has >= CONCURRENCY_LIMIT requests in flight
    UTILIZATION: int = 2  # mean over instances of max(queue depth / QUEUE_THRESHOLD, KV util / KV_THRESHOLD) >= 1
    FREE_SLOT: int = 3  # late binding: dispatch only to an instance with a free running slot and an empty wait queue
    EXPRESSION: int = 4  # programs: saturated iff FLOW_SATURATED's value (over FLOW_INSTANCE's per instance) > 0


class _DispatchOrder(NamedTuple):
    """Which waiting request the gateway releases first (FlowParam.DISPATCH_ORDER)."""

    FIFO: int = 0  # arrival order
    PRIORITY: int = 1  # highest priority (the PRIORITY slot's), ties by arrival
    DEADLINE: int = 2  # earliest TTFT deadline (arrival + its SLO class's ttft_ms), ties by arrival
    EXPRESSION: int = 3  # lowest value of the DISPATCH slot's program (RequestFeature) at its entry, ties by arrival


class _Fairness(NamedTuple):
    """How the gateway shares dispatch among tenants (FlowParam.FAIRNESS)."""

    STRICT: int = 0  # one global order over every tenant's requests
    ROUND_ROBIN: int = 1  # tenants take turns; the dispatch order applies within a tenant


class _FlowParam(NamedTuple):
    """Columns of the FLOW policy row (its detector's parameters in force, defaults
    included; unused columns are 0)."""

    CONCURRENCY_LIMIT: int = 0  # concurrency: requests in flight per instance, >= 1
    QUEUE_THRESHOLD: int = 1  # utilization: wait-queue depth per instance that counts as full, > 0
    KV_THRESHOLD: int = 2  # utilization: KV utilization that counts as full, (0, 1]
    DISPATCH_ORDER: int = 3  # a DispatchOrder code
    FAIRNESS: int = 4  # a Fairness code
    RECHECK: int = 5  # expression: the built-in detector (FlowDetector code) whose rules for looking again it follows


class _RetryBackoff(NamedTuple):
    """Columns of ``Workload.retry_backoff`` (one row per client, read through the request's
    client id): the delay before retry k (1, 2, ...) is BASE_US · FACTOR^(k-1) times a
    uniform draw in [1 - JITTER, 1 + JITTER] (blis_fast/config/flow_control.py)."""

    BASE_US: int = 0  # the first retry's delay, µs (float)
    FACTOR: int = 1  # >= 1
    JITTER: int = 2  # 0..1


class _AttemptEnd(NamedTuple):
    """How a failed attempt ended (ATTEMPT_DT.outcome)."""

    TIMED_OUT: int = 0  # its TTL expired (ATTEMPT_DT.place: the RequestState it was cancelled in)
    SHED: int = 1  # the saturated gateway shed it at admission


AttemptEnd = _AttemptEnd()


class _GatewayAction(NamedTuple):
    """What a row of the gateway's decision log records (GATEWAY_LOG_DT.action)."""

    QUEUED: int = 0  # an admitted request entered its model's gateway queue (the model saturated, or others waiting)
    DISPATCHED: int = 1  # the gateway released it to routing (wait_us: its time in the queue)
    SHED: int = 2  # the saturated gateway shed it (a sheddable SLO class)


GatewayAction = _GatewayAction()
GATEWAY_ACTION_NAMES = ("queued", "dispatched", "shed")  # GatewayAction order
FlowDetector = _FlowDetector()
RetryBackoff = _RetryBackoff()
N_RETRY_BACKOFF = 3
DispatchOrder = _DispatchOrder()
Fairness = _Fairness()
FlowParam = _FlowParam()
FLOW_DETECTOR_NAMES = ("never", "concurrency", "utilization", "free-slot", "expression")  # FlowDetector order
DISPATCH_ORDER_NAMES = ("fifo", "priority", "deadline", "expression")  # DispatchOrder order
FAIRNESS_NAMES = ("strict", "round-robin")  # Fairness order

AdmissionKind = _AdmissionKind()
AdmissionParam = _AdmissionParam()
RoutingKind = _RoutingKind()
RouteWeight = _RouteWeight()
PriorityKind = _PriorityKind()
PriorityParam = _PriorityParam()
SchedulerKind = _SchedulerKind()
SchedWeight = _SchedWeight()
VictimKind = _VictimKind()
SnapField = _SnapField()
ProgramHeader = _ProgramHeader()
ProgramForm = _ProgramForm()
Op = _Op()
RouteFeature = _RouteFeature()
AdmitFeature = _AdmitFeature()
RequestFeature = _RequestFeature()
PdFeature = _PdFeature()
ScaleFeature = _ScaleFeature()
OP_NAMES = _Op._fields
ROUTE_FEATURE_NAMES = tuple(f.lower() for f in _RouteFeature._fields)
ADMIT_FEATURE_NAMES = tuple(f.lower() for f in _AdmitFeature._fields)
REQUEST_FEATURE_NAMES = tuple(f.lower() for f in _RequestFeature._fields)
PD_FEATURE_NAMES = tuple(f.lower() for f in _PdFeature._fields)
SCALE_FEATURE_NAMES = tuple(f.lower() for f in _ScaleFeature._fields)
FlowInstanceFeature = _FlowInstanceFeature()
FlowModelFeature = _FlowModelFeature()
FLOW_INSTANCE_FEATURE_NAMES = tuple(f.lower() for f in _FlowInstanceFeature._fields)
FLOW_MODEL_FEATURE_NAMES = tuple(f.lower() for f in _FlowModelFeature._fields)
N_SNAP = 7
SNAPSHOT_FIELD_NAMES = (
    "queue_depth", "batch_size", "kv_utilization", "free_kv_blocks", "cache_hit_rate", "pending", "in_flight",
)

# ----------------------------------------------------------------------------- small tables


class _ListHeader(NamedTuple):
    """Columns of a doubly linked list's header row (structs/dlist.py)."""

    HEAD: int = 0
    TAIL: int = 1
    LEN: int = 2


class _InstanceList(NamedTuple):
    """The linked lists each instance owns: rows of ``lists[i]``."""

    WAIT_QUEUE: int = 0  # requests, linked through the request table
    FREE_BLOCKS: int = 1  # released KV blocks in LRU order, linked through the block table


ListHeader = _ListHeader()
InstanceList = _InstanceList()
N_INSTANCE_LISTS = 2


class _IndexState(NamedTuple):
    """Columns of ``pi_state[i]``: instance i's router prefix index (policies/prefix_index.py)."""

    SIZE: int = 0  # keys held (place-holders included)
    RING_HEAD: int = 1
    RING_LEN: int = 2
    FREE_RECORD: int = 3  # first free touch record + 1 (0 = none; linked through their POS)
    NEXT_RECORD: int = 4  # touch records never used start here


IndexState = _IndexState()


class _IndexRow(NamedTuple):
    """Columns of a ``pi_table`` row: one key in an instance's router prefix index."""

    KEY: int = 0
    RECORD: int = 1  # the touch record holding its latest touch, + 1 (rows are never all zero)
    OFFSET: int = 2  # its place in that record's run


class _IndexRecord(NamedTuple):
    """Columns of a ``pi_records`` touch record (policies/prefix_index.py): a run of keys
    touched one after the other, ``keys[POS:POS+COUNT]``."""

    POS: int = 0  # the run's first key's position in ``keys`` (a free record: the next free one)
    COUNT: int = 1
    LIVE: int = 2  # keys of the run whose latest touch this still is (0: the record can go)
    FRONT: int = 3  # keys of the run already passed by eviction
    SLOT: int = 4  # its current place in the ring (older entries of it are stale), -1 = none


IndexRow = _IndexRow()
IndexRecord = _IndexRecord()


class _KvMemo(NamedTuple):
    """Header of a ``kv_memo`` row: instance i's last prompt lookup in its prefix table
    (kv/cache.py: kv_admit); the blocks of its first hits follow, at most KV_MEMO_BLOCKS."""

    CHANGES: int = 0  # the table's ht_changes then, -1 = no lookup yet
    KSTART: int = 1  # the request's first key position
    HITS: int = 2  # its leading hits on shared keys whose blocks are kept (<= KV_MEMO_BLOCKS)


KvMemo = _KvMemo()
N_KV_MEMO = len(KvMemo)
KV_MEMO_BLOCKS = 64


class _RouterMemo(NamedTuple):
    """Header of ``pi_memo``: the cluster map's change count and where the last leading-key
    walk can resume (policies/prefix_index.py: leading_matches).  Two masks follow from
    N_ROUTER_MEMO on, ``words`` int64 each: the active instances of that walk, and the
    instances still in the race at DEPTH."""

    GMAP_VERSION: int = 0  # changes of the cluster map so far
    VERSION: int = 1  # GMAP_VERSION at the last walk, -1 = no walk yet
    KSTART: int = 2  # its first key's position
    DEPTH: int = 3  # keys walked before the one that ended it (all of them if none did)


RouterMemo = _RouterMemo()
N_ROUTER_MEMO = len(RouterMemo)


class _Key(NamedTuple):
    """Prefix-block keys are int64 hashes; -1 is reserved."""

    NONE: int = -1  # "no key" in every key column
    REPLACEMENT: int = -2  # what a hash equal to -1 is stored as


Key = _Key()


class _Roofline(NamedTuple):
    """Layout of the roofline parameter vector (float64), built by blis_fast.config.latency."""

    LAYERS: int = 0  # ℓ, decoder layers
    HIDDEN: int = 1  # d, model width
    HEADS: int = 2  # h, query heads
    HEAD_DIM: int = 3  # d_head
    Q_DIM: int = 4  # h·d_head (== d unless the config sets head_dim)
    KV_DIM: int = 5  # d_kv = h_kv·d_head
    MLP_WIDTH_ACTIVE: int = 6  # d_ff (dense) or k·d_expert + d_shared (MoE): MLP width per token
    KV_BYTES_PER_TOKEN: int = 7  # 2·ℓ·h_kv·d_head·b, bytes of K+V per token (all layers)
    ACT_BYTES_PER_TOKEN: int = 8  # ℓ·d·b, activation bytes per new token
    WEIGHT_BYTES: int = 9  # W = ℓ·b·(d(d_q + 2d_kv) + d_q·d + 3·d·d_ff_all), bytes (all experts)
    TP: int = 10  # tensor parallelism
    PEAK_FLOPS: int = 11  # TFlopsPeak·1e12, FLOP/s
    VECTOR_PEAK_FLOPS: int = 12  # 0.1·peak, FLOP/s
    BANDWIDTH: int = 13  # BwPeakTBs·1e12·BwEffConstant, bytes/s
    MFU_PREFILL: int = 14  # MFU of the prefill phase
    MFU_DECODE: int = 15  # MFU of the decode phase
    LAYER_OVERHEAD_US: int = 16  # ℓ·perLayerOverhead, µs
    ALLREDUCE_US: int = 17  # 2ℓ·allReduceLatency if TP > 1 else 0, µs
    STEP_OVERHEAD_US: int = 18  # TOverheadMicros, µs


Roofline = _Roofline()
N_ROOFLINE = 19


class _ScanStatus(NamedTuple):
    """Result of the byte-level trace CSV scanner (workload/trace_csv.py)."""

    OK: int = 0
    UNTERMINATED_QUOTE: int = 1  # a quoted field runs to the end of the file
    BAD_AFTER_QUOTE: int = 2  # a closing quote followed by something other than , or newline
    TOO_MANY_RECORDS: int = 3  # more records than the caller allowed for


ScanStatus = _ScanStatus()

__all__ = [
    "AdmissionKind", "AdmissionParam", "BLOCK_REASON_NAMES", "BlockReason", "ClusterEvent", "IndexRecord", "IndexRow", "IndexState", "InstanceEvent", "InstanceList", "Key", "KeyFlagMode", "KvMemo", "KV_MEMO_BLOCKS",
    "LatencyKind", "ListHeader", "N_CLUSTER_KINDS", "N_TIERS", "N_INSTANCE_KINDS", "N_INSTANCE_LISTS", "N_POLICY_SLOTS",
    "N_KV_MEMO", "N_ROOFLINE", "PhaseEnd", "N_ROUTER_MEMO", "N_ROUTE_WEIGHTS", "N_SCHED_WEIGHTS", "N_SNAP", "POLICY_WIDTH", "MAX_SLO_CLASS_WEIGHTS", "PolicySlot", "ProgramHeader", "ProgramForm", "Op", "OP_CONST_RIGHT", "OP_FEATURE_RIGHT", "OP_NAMES", "PROGRAM_STACK", "MAX_PROGRAM_CODE", "EXP_LIMIT", "RouteFeature", "N_ROUTE_FEATURES", "AdmitFeature", "N_ADMIT_FEATURES", "RequestFeature", "N_REQUEST_FEATURES", "N_PROGRAM_FEATURES", "ROUTE_FEATURE_NAMES", "ADMIT_FEATURE_NAMES", "REQUEST_FEATURE_NAMES", "PdFeature", "N_PD_FEATURES", "PD_FEATURE_NAMES", "ScaleFeature", "N_SCALE_FEATURES", "SCALE_FEATURE_NAMES", "FlowInstanceFeature", "N_FLOW_INSTANCE_FEATURES", "FLOW_INSTANCE_FEATURE_NAMES", "FlowModelFeature", "N_FLOW_MODEL_FEATURES", "FLOW_MODEL_FEATURE_NAMES",
    "PriorityKind", "PriorityParam", "REQUEST_STATE_NAMES", "RequestState", "Roofline", "RouteWeight", "RouterMemo", "RoutingKind",
    "SNAPSHOT_FIELD_NAMES", "ScanStatus", "SchedRecord", "SchedWeight", "SchedulerKind", "SnapField", "Status", "TraceLevel",
    "VictimKind", "AutoscaleKind", "AutoscaleParam", "Signal", "DrainMode", "ScaleDownPick", "WarmupCurve",
    "AUTOSCALER_NAMES", "LifeState", "LifeStep", "ScaleReason", "LIFE_STATE_NAMES", "SCALE_REASON_NAMES",
    "MAX_WINDOW_TICKS", "TTFT_WINDOW", "SIGNAL_NAMES", "N_SIGNALS", "DRAIN_NAMES", "SCALE_DOWN_NAMES", "WARMUP_CURVE_NAMES", "PdDecider", "PD_DECIDER_NAMES", "PoolRole", "POOL_ROLE_NAMES",
    "AttemptEnd", "GatewayAction", "GATEWAY_ACTION_NAMES", "FlowDetector", "DispatchOrder", "Fairness", "FlowParam", "FLOW_DETECTOR_NAMES", "DISPATCH_ORDER_NAMES",
    "FAIRNESS_NAMES", "RetryBackoff", "N_RETRY_BACKOFF", "AgentCounter", "N_AGENT_COUNTERS", "AGENT_NEVER_US",
]
