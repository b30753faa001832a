"""``State``: every array of one run, as one record the event loop and its handlers take.

The whole run lives in these arrays -- tables, the event heap, the loop record, logs,
policy parameters and scratch space -- so a run can stop at any event boundary and go on
later, or be copied (``copy_state``) and continued differently.

Every field is declared once, in ``STATE_FIELDS``: its name, element type, shape (one
small expression per dimension over the named sizes of ``SIZE_NAMES``), initial content,
memory-estimate family and, for a log, how it grows.  Everything else is derived from
that declaration: the ``State`` record itself, ``STATE_LAYOUT`` (the compiled kernels'
signature, kernels/aot.py), the allocation and the memory estimate
(``blis_fast.run.tables``: ``state_sizes``, ``allocate_state``, ``estimate_state_bytes``)
and the growth of the logs between calls of the loop (``blis_fast.run.runner.grow_logs``).
The field types never depend on the configuration, so the kernels compile once.

To add a field: append a ``Field`` (and a size name to ``SIZE_NAMES`` if its shape needs
a new one, computed in ``blis_fast.run.tables.state_sizes``); a GIVEN field's content is
built in ``build_state``.  The kernels then read it as ``st.<name>``.
"""

from typing import NamedTuple

import numpy as np

from .enums import (N_AGENT_COUNTERS, N_PROGRAM_FEATURES, N_ROUTE_FEATURES, PROGRAM_STACK, N_RETRY_BACKOFF, KV_MEMO_BLOCKS, MAX_WINDOW_TICKS, N_KV_MEMO, N_POLICY_SLOTS, N_TIERS, N_ROOFLINE, N_ROUTER_MEMO, N_SNAP, POLICY_WIDTH,
                    IndexRecord, IndexRow, IndexState, TraceLevel)
from .tables import (ADMIT_DT, AGENT_LOAD_DT, AGENT_NODE_DT, AGENT_RESOURCE_DT, ATTEMPT_DT, GATEWAY_LOG_DT, FLOW_GROUP_DT, FLOW_INST_DT, FLOW_MODEL_DT, FLOW_REQ_DT, EVENT_DT, INSTANCE_DT, IRR_DT, KV_BLOCK_DT, KV_TIER_INST_DT, LIFE_DT, LIFE_LOG_DT,
                     LOOP_DT, PD_INST_DT, SCALE_LOG_DT, SCALE_POOL_DT,
                     PD_MODEL_DT, PD_REQ_DT, TIER_DT, TIER_JOB_DT, TIER_REQ_DT, TIER_SLOT_DT, TIER_WRITE_DT,
                     PREEMPT_DT, REQUEST_DT,
                     ROUTE_DT, SCHED_DT, SETTINGS_DT, STEP_DT)

_I64, _F64, _I32, _U8 = np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.int32), np.dtype(np.uint8)

# Initial contents (``Field.init``).  With ``StateArrays(reuse=True)`` (blis_fast.batch) a
# field's array is reused from the thread's previous state: cleared for ZEROS and
# MINUS_ONE, handed over uncleared for SCRATCH and LOG.
ZEROS = "zeros"
MINUS_ONE = "minus-one"  # every element -1 ("none")
SCRATCH = "scratch"  # the kernels write every element before they read it (tests/run/test_state_arrays.py poisons them)
LOG = "log"  # as SCRATCH; a reused log keeps its grown length if that is at least the declared one
GIVEN = "given"  # built by build_state from the workload, config or policy (checked against the declaration)
INITS = (ZEROS, MINUS_ONE, SCRATCH, LOG, GIVEN)

#: The sizes shape expressions may use (computed by blis_fast.run.tables.state_sizes), and
#: the schema constants they may use too.
SIZE_NAMES = {
    "n_requests": "requests of the workload",
    "n_arrivals": "requests whose arrival is known up front (not closed-loop followers)",
    "n_keys": "prompt/output block keys of the workload",
    "n_flags": "n_keys when prefix caching or the router's prefix index reads key sharing, else 1",
    "n_kv_slots": "n_keys with prefix caching, else 1",
    "n_blocks": "request-block slots (run.tables.block_slots)",
    "n_inst": "instance rows: the pool's upper bound",
    "inst_words": "64-bit words of an instance bit mask: ceil(n_inst / 64)",
    "max_num_seqs": "batch-size limit",
    "calendar_size": "buckets of an instance's calendar (engine/calendar.py)",
    "block_size": "tokens per KV block",
    "kv_blocks": "KV blocks of the cluster: n_inst x blocks per instance",
    "kv_table_rows": "prefix-table rows of the cluster: n_inst x rows per instance (a power of two)",
    "heap_rows": "event-heap capacity (event_capacity)",
    "step_rows": "step-log rows to start with",
    "irr_rows": "irregular-ITL-log rows to start with",
    "decision_rows": "routing / admission log rows: one per request when decisions are traced, else 1",
    "preempt_rows": "preemption-log rows to start with (1 when not traced)",
    "sched_rows": "scheduling-log rows to start with (1 below TraceLevel.FULL)",
    "sched_open_rows": "n_inst at TraceLevel.FULL, else 1",
    "n_tenants": "tenant ids (token buckets)",
    "cohort_members": "candidates run as one state (1 for an ordinary run)",
    "pi_table_rows": "router prefix-index rows of the cluster (2 when the index is off)",
    "pi_ring": "touch-record ring entries per instance (1 when the index is off)",
    "gmap_rows": "rows of the cluster key -> instances map (2 when the index is off)",
    "n_sort": "n_requests under the sort scheduler, else 1",
    "n_deployments": "deployments of the run (pools of instances; INSTANCE_DT.pool)",
    "n_models": "served models of the run (INSTANCE_DT.model, REQUEST_DT.model)",
    "n_routes": "routing groups: one per served model, plus one per disaggregated model (its prefill pools)",
    "n_pd_requests": "requests of a P/D run (SETTINGS_DT.pd_base), else 1",
    "n_tier_requests": "request rows of a run with KV tiers, else 1",
    "n_tier_blocks": "n_blocks in a run with KV tiers, else 1",
    "tier_slot_rows": "entries of every instance's tiers (each at most its distinct shared key values), at least 1",
    "tier_table_rows": "hash rows of every instance's tiers (a power of two per tier), at least 2",
    "tier_write_rows": "queued-write rows of every instance's tiers, at least 1",
    "n_slo_classes": "SLO classes of the workload (at least 1)",
    "scale_window": "ticks of the longest stabilization window (an autoscaled run), else 1",
    "ttft_window": "TTFT_WINDOW in an autoscaled run, else 1",
    "life_rows": "lifecycle-log rows to start with (1 without an autoscaler)",
    "n_flow_requests": "n_requests when flow control or deadlines are on, else 1",
    "n_flow_groups": "gateway queues: one per served model, or per (model, tenant) with round-robin fairness; 1 without flow control",
    "n_flow_inst": "n_inst with flow control, else 1",
    "n_backoff_rows": "retry backoff rows (one per client id) when deadlines are on, else 1",
    "gateway_rows": "gateway decision-log rows: two per attempt with flow control when decisions are traced, else 1",
    "attempt_rows": "failed-attempt log rows: the attempts that may time out or be shed (1 + retries each), at least 1",
    "scale_rows": "tick-log rows to start with (1 without an autoscaler)",
    "n_agent_requests": "agent DAG requests of the run (0 without agents)",
    "n_agent_nodes": "their nodes (tools and llm calls), at least 1",
    "n_agent_loads": "their tools' (node, resource) loads, at least 1",
    "n_agent_edges": "their DAG edges, at least 1",
    "n_agent_res": "the agents' shared resources, at least 1",
    "n_agent_req_rows": "n_requests with agents (request row -> its llm node), else 1",
}
SHAPE_CONSTANTS = {
    "N_KV_MEMO": N_KV_MEMO, "KV_MEMO_BLOCKS": KV_MEMO_BLOCKS, "N_SNAP": N_SNAP, "N_ROOFLINE": N_ROOFLINE,
    "N_POLICY_SLOTS": N_POLICY_SLOTS, "POLICY_WIDTH": POLICY_WIDTH, "N_ROUTER_MEMO": N_ROUTER_MEMO,
    "N_TIERS": N_TIERS, "N_RETRY_BACKOFF": N_RETRY_BACKOFF, "MAX_WINDOW_TICKS": MAX_WINDOW_TICKS, "N_INDEX_STATE": len(IndexState), "N_INDEX_ROW": len(IndexRow), "N_INDEX_RECORD": len(IndexRecord),
    "N_AGENT_COUNTERS": N_AGENT_COUNTERS, "N_PROGRAM_FEATURES": N_PROGRAM_FEATURES, "N_ROUTE_FEATURES": N_ROUTE_FEATURES, "PROGRAM_STACK": PROGRAM_STACK,
}


class Growth(NamedTuple):
    """How a log grows between calls of the loop (Status.LOG_FULL): before each step it
    must have room for ``room`` rows (an expression over ``max_num_seqs``) after its
    ``loop[0][counter]`` used ones; it is written only from trace level ``level`` on.
    ``what`` (a format string of ``used`` and ``rows``) and ``hint`` word the memory-budget
    error of a growth that does not fit."""

    counter: str
    room: str
    level: int
    what: str
    hint: str
    autoscaled: bool = False  # written only in a run with an autoscaler (SETTINGS_DT.autoscaled)


class Field(NamedTuple):
    name: str
    dtype: np.dtype
    shape: tuple  # one expression per dimension over SIZE_NAMES and SHAPE_CONSTANTS
    init: str  # ZEROS, MINUS_ONE, SCRATCH, LOG or GIVEN
    family: str  # the part of the memory estimate it counts in ("" = not counted: the workload's own array)
    doc: str
    growth: Growth | None = None


_SMALLER = "set a simulation.horizon or make the workload smaller"
_PER_STEP_SLOTS = "max_num_seqs"  # one row per batch slot

STATE_FIELDS: tuple[Field, ...] = (
    # --- run settings and the loop's own state
    Field("settings", SETTINGS_DT, ("1",), GIVEN, "run", "the run's settings (one record)"),
    Field("loop", LOOP_DT, ("1",), GIVEN, "run", "the loop's own state (one record)"),
    # --- requests and the workload's prefix keys
    Field("reqs", REQUEST_DT, ("n_requests",), GIVEN, "request table", "one row per request (id = row)"),
    Field("arrival_order", _I64, ("n_arrivals",), GIVEN, "request table",
          "requests whose arrival is known up front, by (arrival, id)"),
    Field("keys", _I64, ("n_keys",), GIVEN, "",  # (the workload's own array: not counted again)
          "prompt-block keys; request r's are [key_start, key_start + key_count)"),
    Field("key_shared", _U8, ("n_flags",), GIVEN, "block-key tables",
          "per key: 1 if its value occurs at another position of keys too"),
    Field("req_blocks", _I32, ("n_blocks",), SCRATCH, "request block lists",
          "KV block ids (< 2^31); request r's slice is [block_start, block_start + block_cap)"),
    # --- instances: batches and their per-step scratch
    Field("inst", INSTANCE_DT, ("n_inst",), GIVEN, "instance tables", "one row per instance"),
    Field("batch", _I64, ("n_inst", "max_num_seqs"), ZEROS, "instance tables", "running requests in batch order"),
    Field("batch_seq", _I64, ("n_inst", "max_num_seqs"), ZEROS, "instance tables",
          "their admission numbers (ascending)"),
    Field("work", _I64, ("max_num_seqs",), ZEROS, "instance tables",
          "tokens each batch slot / explicit entry computes this step"),
    Field("context", _I64, ("max_num_seqs",), ZEROS, "instance tables",
          "tokens already in KV for each batch slot / explicit entry"),
    Field("explicit", _I64, ("max_num_seqs",), ZEROS, "instance tables",
          "the step's explicit entries (requests visited one by one)"),
    Field("due", _I64, ("max_num_seqs",), ZEROS, "instance tables", "requests taken from the calendar this step"),
    Field("done", _I64, ("max_num_seqs",), ZEROS, "instance tables", "requests completed by this step"),
    Field("calendar", _I64, ("n_inst", "calendar_size"), MINUS_ONE, "instance tables",
          "bucket heads (engine/calendar.py), -1 = empty"),
    Field("ride_phase", _I64, ("n_inst", "block_size"), ZEROS, "instance tables",
          "counted riders (engine/calendar.py) by the step phase of their new blocks"),
    # --- KV cache (zeros: untouched pages cost nothing, so millions of KV blocks are cheap until used)
    Field("blocks", KV_BLOCK_DT, ("kv_blocks",), SCRATCH, "KV block table", "instance i owns [kv_offset, +kv_total)"),
    Field("kv_table", _I64, ("kv_table_rows", "2"), ZEROS, "prefix tables",
          "shared key value -> block + 1, one slice of rows per instance"),
    Field("kv_slot", _I32, ("n_kv_slots",), ZEROS, "block-key tables",
          "per key: block + 1 caching an unshared key, 0 = none (kv/cache.py)"),
    Field("kv_memo", _I64, ("n_inst", "N_KV_MEMO + KV_MEMO_BLOCKS"), GIVEN, "instance tables",
          "each instance's last prompt lookup (KvMemo)"),
    # --- events and logs
    Field("heap", EVENT_DT, ("heap_rows",), SCRATCH, "event heap", "the event heap (structs/heap.py)"),
    Field("step_log", STEP_DT, ("step_rows",), LOG, "logs", "one row per engine step",
          Growth("steps", "1", TraceLevel.NONE, "the step log ({used} steps so far, growing to {rows})", _SMALLER)),
    Field("irr_log", IRR_DT, ("irr_rows",), ZEROS, "logs", "one row per irregular output token",
          Growth("irregular_records", _PER_STEP_SLOTS, TraceLevel.NONE,
                 "the inter-token log ({used} records so far, growing to {rows})", _SMALLER)),
    Field("route_log", ROUTE_DT, ("decision_rows",), ZEROS, "decision trace", "one row per routing decision",
          Growth("route_records", "1", TraceLevel.DECISIONS,  # (only an autoscaler routes a request twice)
                 "the routing log ({used} decisions so far, growing to {rows})",
                 "set a simulation.horizon or trace fewer decisions", True)),
    Field("admit_log", ADMIT_DT, ("decision_rows",), ZEROS, "decision trace", "one row per admission decision"),
    Field("preempt_log", PREEMPT_DT, ("preempt_rows",), ZEROS, "decision trace", "one row per preemption",
          Growth("preempt_records", _PER_STEP_SLOTS, TraceLevel.DECISIONS,
                 "the preemption log ({used} records, growing to {rows})",
                 "set a simulation.horizon or trace fewer decisions")),
    # admissions or victims of one step, and one blocked head
    Field("sched_log", SCHED_DT, ("sched_rows",), ZEROS, "scheduling trace", "scheduling records (TraceLevel.FULL)",
          Growth("sched_records", "2 * " + _PER_STEP_SLOTS + " + 1", TraceLevel.FULL,  # (+ loads: KV tiers)
                 "the scheduling trace ({used} records, growing to {rows})",
                 "set a simulation.horizon or trace less (simulation.trace_level decisions)")),
    Field("sched_open", _I64, ("sched_open_rows",), MINUS_ONE, "scheduling trace",
          "row of each instance's open BLOCKED episode, -1 = none (FULL only)"),
    # --- latency model
    Field("roofline", _F64, ("n_deployments", "N_ROOFLINE"), GIVEN, "run",
          "one roofline parameter row per deployment (schema.Roofline), read through INSTANCE_DT.pool"),
    # --- the policy candidate (kinds + parameter matrix) and its state
    Field("policy_kind", _I64, ("N_POLICY_SLOTS",), GIVEN, "run", "one kind per PolicySlot"),
    Field("policy_param", _F64, ("N_POLICY_SLOTS", "POLICY_WIDTH"), GIVEN, "run", "one parameter row per slot"),
    Field("routing_kind", _I64, ("n_routes",), GIVEN, "run",
          "routing kind of each routing group (INSTANCE_DT.route_id: policy_kind's ROUTING slot unless the policy sets the model's)"),
    Field("routing_param", _F64, ("n_routes", "POLICY_WIDTH"), GIVEN, "run",
          "routing parameter row of each served model (policy_param's ROUTING row unless set per model)"),
    Field("cohort", _F64, ("cohort_members", "POLICY_WIDTH"), GIVEN, "run",
          "routing parameters of the candidates run as one (row 0 = policy_param's)"),
    Field("rr_cursor", _I64, ("n_routes",), ZEROS, "run",
          "round-robin routing cursor of each routing group: the instance row to try first"),
    Field("cohort_choice", _I64, ("cohort_members",), ZEROS, "run",
          "scratch: each member's instance for the request they disagree on"),
    Field("tb_tokens", _F64, ("n_tenants",), GIVEN, "run", "token-bucket levels (start full)"),
    Field("tb_last_us", _I64, ("n_tenants",), ZEROS, "run", "token buckets' last refill time"),
    Field("snap", _F64, ("n_inst", "N_SNAP"), ZEROS, "instance tables", "the router's view of each instance"),
    Field("snap_refreshed", _I64, ("N_SNAP",), GIVEN, "run", "last refresh time per snapshot field, -1 = never"),
    Field("affinity", _I64, ("n_inst",), ZEROS, "instance tables",
          "scratch: matched leading prefix blocks per instance"),
    Field("route_scores", _F64, ("n_inst",), ZEROS, "instance tables",
          "scratch: the routing policy's score per instance"),
    Field("alive", _I64, ("inst_words",), ZEROS, "instance tables", "scratch: instance bit mask"),
    # --- expression and tree policies (kernels/policies/program.py)
    Field("prog_features", _F64, ("N_PROGRAM_FEATURES",), SCRATCH, "run",
          "scratch: the features of one program evaluation (RouteFeature, AdmitFeature or RequestFeature)"),
    Field("prog_stack", _F64, ("PROGRAM_STACK",), SCRATCH, "run", "scratch: a program's value stack"),
    Field("prog_rows", _F64, ("N_ROUTE_FEATURES", "n_inst"), SCRATCH, "instance tables",
          "scratch: a routing expression's features, one column per instance"),
    Field("prog_row_stack", _F64, ("PROGRAM_STACK", "n_inst"), SCRATCH, "instance tables",
          "scratch: a routing expression's stack, one column per instance"),
    Field("prog_faults", _I64, ("N_POLICY_SLOTS",), ZEROS, "run",
          "program values that were not finite (given the slot's worst value), per PolicySlot"),
    Field("pi_state", _I64, ("n_inst", "N_INDEX_STATE"), ZEROS, "router prefix index",
          "router prefix index header per instance (IndexState)"),
    Field("pi_table", _I64, ("pi_table_rows", "N_INDEX_ROW"), ZEROS, "router prefix index",
          "(key, stamp, record slot) rows, one slice per instance"),
    Field("pi_ring", _I64, ("n_inst", "pi_ring"), SCRATCH, "router prefix index",
          "touch records (ids) in the order last touched; -n = n place-holders"),
    Field("pi_records", _I64, ("n_inst", "pi_ring", "N_INDEX_RECORD"), SCRATCH, "router prefix index",
          "touch records (runs of keys touched together)"),
    Field("gmap", _I64, ("gmap_rows", "1 + inst_words"), ZEROS, "router prefix index",
          "key -> bit mask of instances whose index holds it"),
    Field("pi_memo", _I64, ("N_ROUTER_MEMO + 2 * inst_words",), GIVEN, "router prefix index",
          "cluster-map changes, where the last leading-key walk resumes"),
    # --- scheduler sort scratch (structs/sort.py)
    Field("sort_ids", _I64, ("n_sort",), SCRATCH, "request table", "merge-sort ids"),
    Field("sort_k1", _F64, ("n_sort",), SCRATCH, "request table", "merge-sort first keys"),
    Field("sort_k2", _I64, ("n_sort",), SCRATCH, "request table", "merge-sort second keys"),
    Field("tmp_ids", _I64, ("n_sort",), SCRATCH, "request table", "merge-sort buffer"),
    Field("tmp_k1", _F64, ("n_sort",), SCRATCH, "request table", "merge-sort buffer"),
    Field("tmp_k2", _I64, ("n_sort",), SCRATCH, "request table", "merge-sort buffer"),
    # --- prefill/decode disaggregation (engine/disaggregation.py)
    Field("pd_inst", PD_INST_DT, ("n_inst",), GIVEN, "instance tables",
          "each instance's disaggregation state (its role, transfer and received queues, link)"),
    Field("pd_models", PD_MODEL_DT, ("n_models",), GIVEN, "run", "each served model's disaggregation settings"),
    Field("pd_reqs", PD_REQ_DT, ("n_pd_requests",), GIVEN, "request table",
          "each request's prefill leg and KV transfer (P/D runs)"),
    # --- KV cache tiers beyond the GPU (kv/tiers.py)
    Field("kv_tier_inst", KV_TIER_INST_DT, ("n_inst",), GIVEN, "instance tables",
          "each instance's tier settings and GPU-side tier counters (n_tiers 0: none)"),
    Field("tiers", TIER_DT, ("n_inst * N_TIERS",), GIVEN, "KV tiers", "tier k of instance i: row i * N_TIERS + k"),
    Field("tier_slots", TIER_SLOT_DT, ("tier_slot_rows",), ZEROS, "KV tiers", "the tiers' entries"),
    Field("tier_table", _I64, ("tier_table_rows", "2"), ZEROS, "KV tiers",
          "block key value -> entry + 1, one slice of rows per tier"),
    Field("tier_writes", TIER_WRITE_DT, ("tier_write_rows",), ZEROS, "KV tiers", "the tiers' queued writes (rings)"),
    Field("tier_reqs", TIER_REQ_DT, ("n_tier_requests",), GIVEN, "request table", "each request's loads"),
    Field("tier_jobs", TIER_JOB_DT, ("N_TIERS * n_tier_requests",), ZEROS, "KV tiers",
          "load transfers: request r's from tier k is row r * N_TIERS + k"),
    Field("tier_src", _I32, ("n_tier_blocks",), ZEROS, "KV tiers",
          "per request-block slot: the tier entry + 1 it is being loaded from, 0 = none"),
    # --- autoscaling (engine/autoscale.py)
    Field("life", LIFE_DT, ("n_inst",), GIVEN, "instance tables", "each instance row's lifecycle"),
    Field("scale_pools", SCALE_POOL_DT, ("n_deployments",), GIVEN, "run",
          "each pool's autoscaler: settings and state (enabled 0: none)"),
    Field("scale_wish", _I64, ("n_deployments", "scale_window"), GIVEN, "run",
          "each pool's wishes of its latest ticks (a ring: the stabilization windows)"),
    Field("scale_ttft", _I64, ("n_deployments", "ttft_window"), ZEROS, "run",
          "each pool's latest TTFT samples since its last tick (a ring), µs"),
    Field("slo_targets", _I64, ("n_slo_classes", "3"), GIVEN, "run",
          "per SLO class: TTFT, TPOT, E2E targets in µs (-1 = none), for the slo_attainment signal"),
    Field("life_log", LIFE_LOG_DT, ("life_rows",), LOG, "logs", "one row per lifecycle change",
          Growth("life_records", "n_inst + 2", TraceLevel.NONE,
                 "the lifecycle log ({used} records so far, growing to {rows})", _SMALLER, True)),
    # --- gateway flow control and deadlines (engine/flow.py)
    Field("flow_reqs", FLOW_REQ_DT, ("n_flow_requests",), GIVEN, "request table",
          "each request's deadline, attempts and gateway place"),
    Field("flow_heap", _I64, ("n_flow_requests",), ZEROS, "request table",
          "the gateway queues' heaps of request ids (FLOW_GROUP_DT offset/size)"),
    Field("flow_kind", _I64, ("n_models",), GIVEN, "run",
          "each served model's saturation detector (FlowDetector: the FLOW slot's unless the policy sets the model's)"),
    Field("flow_param", _F64, ("n_models", "POLICY_WIDTH"), GIVEN, "run",
          "each served model's FLOW parameter row (FlowParam columns)"),
    Field("flow_groups", FLOW_GROUP_DT, ("n_flow_groups",), GIVEN, "run", "each gateway queue"),
    Field("flow_models", FLOW_MODEL_DT, ("n_models",), GIVEN, "run", "each served model's gateway"),
    Field("flow_inst", FLOW_INST_DT, ("n_flow_inst",), ZEROS, "instance tables",
          "what the saturation detectors read beside the instance table"),
    Field("retry_backoff", _F64, ("n_backoff_rows", "N_RETRY_BACKOFF"), GIVEN, "run",
          "each client's retry backoff (RetryBackoff columns; Workload.retry_backoff)"),
    Field("attempt_log", ATTEMPT_DT, ("attempt_rows",), ZEROS, "logs",
          "one row per attempt that timed out or was shed"),
    Field("gateway_log", GATEWAY_LOG_DT, ("gateway_rows",), ZEROS, "decision trace",
          "one row per gateway queueing, dispatch or shedding decision (flow control, traced)"),
    Field("scale_log", SCALE_LOG_DT, ("scale_rows",), LOG, "logs", "one row per autoscaler tick",
          Growth("scale_records", "1", TraceLevel.NONE,
                 "the autoscaler's tick log ({used} records so far, growing to {rows})", _SMALLER, True)),
    # --- agent DAGs: tools sharing resources, llm calls sent to the cluster (engine/agents.py,
    #     kernels/agents/fairshare.py)
    Field("agent_res", AGENT_RESOURCE_DT, ("n_agent_res",), GIVEN, "agents", "each shared resource"),
    Field("agent_loads", AGENT_LOAD_DT, ("n_agent_loads",), GIVEN, "agents", "each tool's load on a resource"),
    Field("agent_slots", _I64, ("2 * n_agent_loads",), ZEROS, "agents",
          "each resource's heap of loads and queue of waiters (AGENT_RESOURCE_DT.slot_off)"),
    Field("agent_nodes", AGENT_NODE_DT, ("n_agent_nodes",), GIVEN, "agents", "each DAG node of every agent request"),
    Field("agent_succ", _I64, ("n_agent_edges",), GIVEN, "agents", "the nodes' successors (AGENT_NODE_DT.succ_lo/hi)"),
    Field("agent_arrival", _I64, ("n_agent_requests",), GIVEN, "agents", "agent requests' arrivals, µs, sorted"),
    Field("agent_first_node", _I64, ("n_agent_requests + 1",), GIVEN, "agents",
          "agent request q owns nodes [agent_first_node[q], agent_first_node[q + 1])"),
    Field("agent_req_node", _I64, ("n_agent_req_rows",), GIVEN, "agents",
          "per request row: the llm node it is the call of, -1 = an ordinary request"),
    Field("agent_heap", EVENT_DT, ("2 * n_agent_res + 64",), SCRATCH, "agents",
          "the resources' finish events (one live per resource; stale ones compacted away)"),
    Field("agent_done", _I64, ("n_agent_loads",), SCRATCH, "agents", "the instant's stack of done loads"),
    Field("agent_stack", _I64, ("n_agent_nodes",), SCRATCH, "agents", "the instant's stack of done nodes"),
    Field("agent_released", _I64, ("n_agent_nodes",), SCRATCH, "agents", "the instant's started llm nodes"),
    Field("agent_dirty", _I64, ("n_agent_res",), SCRATCH, "agents", "resources whose next finish may have changed"),
    Field("agent_ctr", _I64, ("N_AGENT_COUNTERS",), GIVEN, "agents", "the agents' counters (AgentCounter)"),
)
FIELDS_BY_NAME = {f.name: f for f in STATE_FIELDS}

#: The State record: one numpy array per declared field, in declaration order (numba
#: needs a real NamedTuple class).
State = NamedTuple("State", [(f.name, np.ndarray) for f in STATE_FIELDS])
State.__doc__ = "Every array of one run, one per STATE_FIELDS entry (kernels/schema/state.py)."
State.__module__ = __name__

#: Every State field's element type and number of dimensions; every array is C-contiguous
#: (and aligned).  The ahead-of-time compiled kernels (kernels/aot.py) are built for exactly
#: these types and check a State against them before each call, since compiled code
#: cannot check them itself.
STATE_LAYOUT: dict[str, tuple[np.dtype, int]] = {f.name: (np.dtype(f.dtype), len(f.shape)) for f in STATE_FIELDS}

_SHAPE_CODE = {e: compile(e, f"<State shape {e!r}>", "eval") for f in STATE_FIELDS for e in f.shape}
_ROOM_CODE = {f.growth.room: compile(f.growth.room, "<log room>", "eval") for f in STATE_FIELDS if f.growth}


def _shapes_function():
    """One function computing every field's shape from the named sizes (keyword
    arguments), so a state's shapes cost one call rather than an evaluation per dimension."""
    body = ", ".join("(" + "".join(f"int({e}), " for e in f.shape) + ")" for f in STATE_FIELDS)
    source = f"def state_shapes(*, {', '.join(SIZE_NAMES)}):\n    return ({body},)\n"
    namespace = dict(SHAPE_CONSTANTS)
    exec(compile(source, "<State shapes>", "exec"), namespace)
    return namespace["state_shapes"]


#: ``state_shapes(**sizes)``: every State field's shape, in declaration order.
state_shapes = _shapes_function()


def field_shape(field: Field, sizes: dict) -> tuple[int, ...]:
    """The shape of ``field`` for the named sizes ``sizes`` (SIZE_NAMES)."""
    namespace = {**SHAPE_CONSTANTS, **sizes}
    return tuple(int(eval(_SHAPE_CODE[e], {"__builtins__": {}}, namespace)) for e in field.shape)


def log_room(growth: Growth, max_num_seqs: int, n_inst: int = 1) -> int:
    """Rows a growing log needs free before each step (``Growth.room``; an autoscaler's
    logs: before each event, engine/trace.py ``scale_log_room``)."""
    return int(eval(_ROOM_CODE[growth.room], {"__builtins__": {}}, {"max_num_seqs": max_num_seqs, "n_inst": n_inst}))


def event_capacity(n_requests: int, n_inst: int, n_transfers: int = 0, n_loads: int = 0, n_ttl: int = 0,
                   n_gateways: int = 0, n_stale: int = 0) -> int:
    """The most events the heap can hold at once, from the event sources
    (engine/handlers.py, engine/step.py, engine/disaggregation.py); a new event source
    adds its term here:
      * requests: a request row has at most one event pending at a time -- a closed-loop
        follower's arrival, then its admission, routing and Queued (or TransferDone)
        events, each pushed by the handler of the one before (arrivals known up front are
        a separate stream, never in the heap; a routing event a cohort split puts back
        replaces itself); a P/D run's prefill legs are request rows too;
      * instances: at most one Step each (``step_pending``);
      * transfer links (``n_transfers``: the requests that may be transferred): a link's
        LINK events -- the current one and those a later reschedule made stale, which are
        due earlier -- number at most its transfers in flight + 1;
      * KV tier read links (``n_loads``: the load transfers that may be in flight, one per
        request and tier): a LOAD_DONE per load whose data is through, and each link's TIER_LINK
        events (at most its loads in flight + 1);
      * deadlines (``n_ttl``: the requests with a TTL): at most one EXPIRE each (an attempt's
        expiry moves later, never earlier: a pending one is pushed again when it fires);
        and an attempt that times out while admitting, routing or routed leaves its pending
        event in the heap (stale) while its retry's events follow (``n_stale``: the retries
        of the requests with a TTL, one stale event each at most);
      * flow control (``n_gateways``: served models with a gateway queue): DISPATCH events,
        at most one per instance (at the end of its step in flight) and one per model (now:
        a cancellation, an instance coming up), engine/flow.py."""
    per_request = n_requests
    per_instance = n_inst
    per_link = n_transfers + n_inst if n_transfers else 0
    per_tier_link = 2 * n_loads + n_inst * N_TIERS if n_loads else 0
    per_gateway = n_inst + n_gateways if n_gateways else 0
    return per_request + per_instance + per_link + per_tier_link + n_ttl + n_stale + per_gateway


def copy_array(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """A copy of ``a`` (into ``out`` if given: same shape and dtype).  A contiguous table of
    records is copied as bytes: numpy copies records field by field, ~10x slower (a
    100K-request table: ~40 ms instead of ~4)."""
    if out is None:
        out = np.empty_like(a)
    if a.dtype.fields is not None and a.size and a.flags.c_contiguous and out.flags.c_contiguous:
        np.copyto(out.reshape(-1).view(np.uint8), a.reshape(-1).view(np.uint8))
    else:
        np.copyto(out, a)
    return out


def copy_state(state: State) -> State:
    """A deep copy: continuing it never touches ``state``."""
    return State(*[copy_array(a) for a in state])
