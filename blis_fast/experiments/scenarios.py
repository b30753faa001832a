"""The standard benchmark scenarios of ``blis-fast bench`` (``experiments/bench.py``) and of
its batch scenarios (``experiments/batch_bench.py``), and the plain-text table both print."""

from __future__ import annotations

from blis_fast.config.expression import routing_template_expression
from blis_fast.config.validate import show
from blis_fast.errors import ConfigError
from blis_fast.paths import configs_dir

SEED = 42

# Workload shared by every scenario.  The chatbot preset (prompt 256±100, output 256±100
# tokens) is the shortest-request preset, so a scenario has many requests per simulated
# second and exercises arrivals, batching and completions rather than long decodes; the
# 256-token shared prefix (a system prompt as long as the mean user prompt) makes prefix
# caching do real work -- about half of all prompt tokens hit the cache -- without
# changing the batch-bound character of the load.  Model: the default
# (llama-3.1-8b-instruct, H100, TP1, fitted blackbox coefficients).
BASE = {"workload": "chatbot", "prefix_tokens": 256, "seed": SEED}

# Load = offered arrival rate / (num_instances x saturation throughput of one instance).
# The saturation throughput is the steady-state completion rate of one instance given a
# 10K-request burst (all arrive within ~10 ms, so the batch stays full at
# max_num_running_reqs = 256): completions between the 10th and 90th percentile divided
# by the time between them, which excludes the ramp-up (nothing completes for the first
# ~256 output tokens) and the drain (the batch shrinks).  Measured with calibrate() on
# 2026-11-22 (seed 42): 85.86 req/s per instance (completed / duration over the whole
# burst is 84.63 req/s, ramp and drain included; 5K and 20K bursts give 85.81 and 85.67,
# seed 7 gives 85.25).  The simulated figure is deterministic: only model, coefficients,
# engine defaults or workload changes move it.  Rates are rounded to 0.1 req/s.
# busy_fraction is no measure of load here: an instance steps whenever one request is
# decoding, so it is ~0.99 at 80% load.
SATURATION_RPS_PER_INSTANCE = 85.86
TARGET_LOAD = 0.8
CALIBRATION_BURST = 10_000

# The KV tiers scenarios' workload: a spec (its own clients, lengths and sessions) instead
# of BASE's preset, its load set by rate_scale (no "rate": the bench reports the spec's
# offered rate, every turn counted).
LONG_CHAT = {"workload_spec": str(configs_dir() / "examples" / "kv-tiers" / "long-chat.yaml")}
SPEC_REPLACES = ("workload", "prefix_tokens")  # (BASE keys a workload spec replaces)

# The autoscaling scenarios' day (docs/autoscaling.md): the compressed day of
# configs/examples/autoscaling/diurnal-day.yaml at 1.85 times its rate (peak 55.5 req/s;
# its first 100K requests: the night, the ramp, the peak and the evening fall, without the
# last minutes of night) on diurnal.yaml's deployment, llama-3.1-70b on H100 with TP4.
DIURNAL_DAY = {"workload_spec": str(configs_dir() / "examples" / "autoscaling" / "diurnal-day.yaml"),
               "model": "meta-llama/llama-3.1-70b-instruct", "hardware": "H100", "tp": 4, "num_requests": 100_000,
               "rate_scale": 1.85, "routing_policy": "least-loaded"}
# diurnal.yaml's autoscaler and delays, with room for the larger peak (at most 12 instances)
DIURNAL_AUTOSCALER = {"num_instances": 2, "min_instances": 1, "max_instances": 12, "autoscaler": "threshold",
                      "autoscale_signal": "in_flight", "autoscale_up": 40, "autoscale_down": 15,
                      "autoscale_interval_s": 15, "autoscale_metrics_delay_s": 15,
                      "provisioning_delay_s": {"mean": 60, "std": 15}, "loading_delay_s": 90,
                      "instance_warmup_factor": 1.5, "instance_warmup_curve": "linear", "instance_warmup_requests": 50,
                      "stabilization_down_s": 60}

# The flow-control scenarios' workload (docs/flow-control.md): overload.yaml's chat + batch
# mix with TTLs and retries, at 4 times its rate on 16 instances -- 3,028 req/s, three
# times the 16 instances' capacity on the mix (4 x 252 req/s x 3); its first 100K requests
# arrive in ~33 s.
OVERLOAD = {"workload_spec": str(configs_dir() / "examples" / "flow-control" / "overload.yaml"),
            "num_requests": 100_000, "num_instances": 16, "rate_scale": 4.0}

# the utilization detector with its defaults (queue threshold 5, KV threshold 0.8) as an
# expression detector (docs/policies.md, "Expression and tree policies")
FLOW_UTILIZATION_EXPRESSION = {"flow_control": "expression",
                               "flow_instance_program": "max((queue + routed) / 5, kv_utilization / 0.8)",
                               "flow_saturated_program": "(total + in_routing / 5) / instances >= 1",
                               "flow_recheck": "utilization"}

# name -> overrides on top of BASE (flat setting names as on the CLI).  Add a key (e.g. a
# routing policy) to one row to benchmark it; rate = round(TARGET_LOAD x
# SATURATION_RPS_PER_INSTANCE x num_instances, 1).
SCENARIOS: dict[str, dict] = {
    "1k": {"num_requests": 1_000, "num_instances": 1, "rate": 68.7},
    "10k": {"num_requests": 10_000, "num_instances": 4, "rate": 274.8},
    "100k": {"num_requests": 100_000, "num_instances": 16, "rate": 1099.0},
    # the control-plane cost: weighted routing with all four scorers (prefix-affinity keeps
    # the router's per-instance LRU index of prefix keys) on the 100k scenario
    "100k-weighted": {"num_requests": 100_000, "num_instances": 16, "rate": 1099.0, "routing_policy": "weighted",
                      "routing_scorers": "prefix-affinity:3,queue-depth:2,kv-utilization:2,load-balance:1"},
    # an expression policy's cost: the 100k-weighted router restated as an expression (the same
    # decisions, byte for byte: the program interpreted per candidate instance per request)
    "100k-expr": {"num_requests": 100_000, "num_instances": 16, "rate": 1099.0, "routing_policy": "expression",
                  "routing_program": routing_template_expression(
                      "weighted", {"prefix-affinity": 3, "queue-depth": 2, "kv-utilization": 2, "load-balance": 1})},
    # the cost of recording decisions (routing with the best alternatives and the snapshot
    # they showed, admission, preemption; the router's prefix index kept for the trace) on
    # the 100k scenario
    "100k-decisions": {"num_requests": 100_000, "num_instances": 16, "rate": 1099.0, "trace_level": "decisions"},
    # ... and with the instance schedulers' records too (admissions to a batch, blocked
    # queue heads, preemption context: trace_level full)
    "100k-full": {"num_requests": 100_000, "num_instances": 16, "rate": 1099.0, "trace_level": "full"},
    # the Go reference's workload shape: the BLIS `distribution` workload with its defaults
    # (prompt and output Normal(512, 256) clipped to [2, 7000], no shared prefix), 100K
    # requests on 16 instances at 480 req/s -- the same run as
    # `blis-fast run --num-requests 100000 --num-instances 16 --rate 480`
    "100k-ref": {"workload": "distribution", "prefix_tokens": 0, "num_requests": 100_000, "num_instances": 16,
                 "rate": 480.0},
    # prefill/decode disaggregation: 2 prefill + 6 decode instances (8 GPUs, half the 100k
    # scenario's), every request disaggregated, transfers sharing their prefill instance's
    # link; 300 req/s keeps the two prefill instances within their capacity (TTFT p99
    # ~130 ms; at 400 req/s their queues grow: ~1.5 s)
    "100k-pd": {"num_requests": 100_000, "prefill_instances": 2, "decode_instances": 6, "rate": 300.0,
                "pd_decider": "always", "pd_transfer_contention": "link"},
    # KV cache tiers (docs/kv-tiers.md): the study's long multi-turn chat (sessions of ~8
    # turns re-sending their history, prompts 4,700 tokens on average) scaled to 100K
    # requests on 16 instances, each with the study's small GPU KV cache (4,000 blocks), so
    # that the conversations outgrow the GPUs; weighted routing keeps a session's turns
    # where its history is.  100k-chat has no tier; 100k-tiers adds cluster-cpu.yaml's CPU
    # tier (20,000 blocks per instance, 25 GB/s): ~25K requests load from it.
    "100k-chat": {**LONG_CHAT, "num_requests": 100_000, "num_instances": 16, "rate_scale": 4.0,
                  "total_kv_blocks": 4000, "routing_policy": "weighted"},
    "100k-tiers": {**LONG_CHAT, "num_requests": 100_000, "num_instances": 16, "rate_scale": 4.0,
                   "total_kv_blocks": 4000, "routing_policy": "weighted", "kv_cpu_blocks": 20_000},
    # autoscaling: the day on a fleet sized for its peak (12 instances all day), and the same
    # day with the threshold autoscaler between 1 and 12 instances (lifecycle events, ticks)
    "100k-diurnal": {**DIURNAL_DAY, "num_instances": 12},
    "100k-diurnal-autoscale": {**DIURNAL_DAY, **DIURNAL_AUTOSCALER},
    # gateway flow control and deadlines: the overload without flow control (requests
    # time out in the instances' queues and batches, and retry), and with the utilization
    # detector holding them in the gateway queue (the same TTLs and retries)
    "100k-overload": {**OVERLOAD},
    "100k-overload-flow": {**OVERLOAD, "flow_control": "utilization"},
    # ... and with that detector restated as an expression detector (the same run, byte for
    # byte: two programs interpreted per instance at each gateway decision)
    "100k-overload-flow-expr": {**OVERLOAD, **FLOW_UTILIZATION_EXPRESSION},
}
# scenarios run only when named (--scenarios): each run of the long-chat pair simulates
# 2,300 s of 16 instances stepping with small batches (4.3-4.6M engine steps, 14-35 s of
# kernel on the development machine), minutes of a default `blis-fast bench`; the diurnal
# pair is a study of its own (docs/autoscaling.md), and so is the overload pair
# (docs/flow-control.md), named when wanted
NOT_DEFAULT = {"100k-chat", "100k-tiers", "100k-diurnal", "100k-diurnal-autoscale", "100k-overload",
               "100k-overload-flow", "100k-overload-flow-expr"}
# scenarios whose rate is given (or set by their workload spec), not derived from the calibration
FIXED_RATE = {"100k-ref", "100k-pd", "100k-chat", "100k-tiers", "100k-diurnal", "100k-diurnal-autoscale",
              "100k-overload", "100k-overload-flow", "100k-overload-flow-expr"}
# scenario -> the scenario its kernel time is compared with ("x base" column)
BASELINES = {"100k-weighted": "100k", "100k-expr": "100k-weighted", "100k-decisions": "100k", "100k-full": "100k", "100k-pd": "100k",
             "100k-tiers": "100k-chat", "100k-diurnal-autoscale": "100k-diurnal",
             "100k-overload-flow": "100k-overload", "100k-overload-flow-expr": "100k-overload-flow"}


def scenario_overrides(name: str) -> dict:
    """The flat overrides of a named scenario (BASE + its row)."""
    if name not in SCENARIOS:
        raise ConfigError("--scenarios", f"unknown scenario {show(name)}; known: {', '.join(SCENARIOS)}, batch-10k, "
                                         "batch-100k, agents-100k, agents-100k-loop, agents-llm, live-10k")
    row = SCENARIOS[name]
    base = {k: v for k, v in BASE.items() if not ("workload_spec" in row and k in SPEC_REPLACES)}
    return {**base, **row}


def text_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Right-aligned columns (the first left-aligned)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    return [line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]
