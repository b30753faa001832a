"""Every setting x every workload source: the setting changes the result, or it is refused
(blis_fast.config.effective).

The five workload sources: BLIS's ``distribution``, a preset (``chatbot``), a workload spec,
a BLIS trace CSV (``configs/examples/trace.csv``) and a rich trace (Parquet, written from
the spec).  For each setting of ``FLAG_PATHS`` (one name per config path), ``EFFECTS`` gives
a value and the companion settings that make it matter (``--routing-scorers`` needs
weighted routing); the run with companions and the value is compared with the run with
companions alone.  "Changes the result" means the summary, the per-request table, the
evaluation, the time series, the decision trace or the counterfactuals differ, or the
setting's own limit fires (an error naming it: ``--max-events``, ``--max-memory``).
"Refused" means ConfigError naming the keyword, with the remedy (``REMEDY``); the same
combinations are refused from the command line (exit 2, one line) and from YAML (naming
the YAML path), and by the study commands, which share the config path.

``--num-requests`` is used by every source (as the reference uses it): it generates that
many requests from a distribution, replaces a spec's ``num_requests`` and replays a trace's
first N requests (``test_num_requests_*``).  Under ``--compat blis-2026.02`` the settings a
source does not use are accepted with one warning and ignored, as the reference does
(``test_compat_*``).

The three settings that pick the source (``--workload``, ``--workload-traces-filepath``,
``--workload-spec``) are covered by ``test_source_selectors``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import blis_fast
from blis_fast import ConfigError
from blis_fast.errors import SimulationError
from blis_fast.config.effective import UNUSED_BY_SOURCE
from blis_fast.config.sim import FLAG_PATHS, build_config
from builders import ROOT, assert_one_error_line, run_cli

TRACE_CSV = ROOT / "configs" / "examples" / "trace.csv"
SPEC_TEXT = """\
seed: 3
duration_s: 4
slo_classes:
  interactive: {ttft_ms: 200}
  batch: {e2e_ms: 60000}
prefix_groups:
  system: {count: 2, length: {type: constant, value: 128}}
clients:
  - {name: chat, rate: 6, tenant: a, slo_class: interactive, prefix: {group: system, reuse_probability: 0.9},
     prompt_tokens: {type: uniform, min: 50, max: 400}, output_tokens: {type: uniform, min: 10, max: 200}}
  - {name: bulk, rate: 4, tenant: b, slo_class: batch,
     prompt_tokens: {type: uniform, min: 200, max: 900}, output_tokens: {type: uniform, min: 50, max: 300}}
"""
SOURCES = ("distribution", "preset", "spec", "trace-csv", "rich-trace")
SOURCE_KIND = {"distribution": "distribution", "preset": "distribution", "spec": "spec", "trace-csv": "trace",
               "rich-trace": "trace"}
BASE = dict(num_instances=2)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from blis_fast.workload.formats.rich_trace import write_trace
    from blis_fast.workload.generate import generate_requests
    from blis_fast.workload.spec import load_spec

    d = tmp_path_factory.mktemp("sources")
    spec = d / "spec.yaml"
    spec.write_text(SPEC_TEXT)
    other = d / "other-spec.yaml"
    other.write_text(SPEC_TEXT.replace("seed: 3", "seed: 4").replace("rate: 6", "rate: 9"))
    rich = d / "rich.parquet"
    write_trace(generate_requests(load_spec(spec), None), rich)
    return {"spec": spec, "other-spec": other, "rich": rich}


def source_settings(source: str, files) -> dict:
    return {
        "distribution": dict(num_requests=40, rate=20),
        "preset": dict(workload="chatbot", num_requests=40, rate=20),
        "spec": dict(workload_spec=str(files["spec"])),
        "trace-csv": dict(workload="traces", workload_traces_filepath=str(TRACE_CSV)),
        "rich-trace": dict(workload="traces", workload_traces_filepath=str(files["rich"])),
    }[source]


PREFIXES = {"distribution": dict(prefix_tokens=128), "preset": dict(prefix_tokens=128)}  # the others have prefixes
QUEUE = dict(max_num_seqs=1)  # requests wait: the queue order matters
PRESSURE = dict(total_kv_blocks=60, max_num_seqs=64)  # KV pressure: preemptions

def tiered(source: str, **settings) -> dict:
    """Companion settings of a KV tier setting: a GPU cache too small for the workload's
    prefixes (they are evicted and found again in a tier)."""
    return dict(total_kv_blocks=40, **PREFIXES.get(source, {}), **settings)


def generated(source: str, **settings) -> dict:
    """Companion settings of a generated distribution (the other sources refuse them)."""
    return settings if SOURCE_KIND[source] == "distribution" else {}


# setting -> (value, companions (a dict, or a function of the source)) that make it matter
EFFECTS = {
    "model": ("qwen/qwen3-14b", dict(latency_model="roofline")),
    "hardware": ("A100", dict(latency_model="auto")),
    # the roofline model takes its KV blocks from a coefficient set of this version, else from GPU memory
    "vllm_version": ("vllm/vllm-openai:v0.10.1.1", dict(latency_model="roofline")),
    "latency_model": ("roofline", {}),
    "alpha_coeffs": ([20000, 10, 10], {}),
    "beta_coeffs": ([20000, 30, 30], {}),
    "tp": (2, {}),
    "pp": (2, {}),
    "dp": (2, {}),
    "total_kv_blocks": (40, {}),
    "block_size_in_tokens": (64, {}),
    "max_num_running_reqs": (1, {}),
    "max_num_scheduled_tokens": (64, {}),
    "long_prefill_token_threshold": (16, dict(max_num_scheduled_tokens=64)),
    "gpu_memory_utilization": (0.5, dict(model="qwen/qwen3-14b", latency_model="roofline")),
    "enable_prefix_caching": (False, lambda source: PREFIXES.get(source, {})),
    "num_instances": (3, {}),
    "rate": (60, {}),
    "rate_scale": (3, {}),
    "num_requests": (30, {}),
    "arrival": ("constant", {}),
    "prefix_tokens": (64, {}),
    "prompt_tokens": (100, {}),
    "prompt_tokens_stdev": (5, {}),
    "prompt_tokens_min": (400, lambda source: generated(source, prompt_tokens=500)),
    "prompt_tokens_max": (100, lambda source: generated(source, prompt_tokens=80)),
    "output_tokens": (20, {}),
    "output_tokens_stdev": (5, {}),
    "output_tokens_min": (300, lambda source: generated(source, output_tokens=400)),
    "output_tokens_max": (20, lambda source: generated(source, output_tokens=10)),
    "seed": (7, {}),
    "simulation_seed": (7, {}),
    "horizon": (1_000_000, {}),
    "compat": ("blis-2026.02", {}),
    "admission_latency": (200_000, {}),
    "routing_latency": (200_000, {}),
    "warmup_s": (1.0, {}),
    "cooldown_s": (1.0, {}),
    "max_events": (10, {}),
    "max_memory": (2**20, {}),
    "trace_level": ("decisions", {}),
    "sample_interval_ms": (50, {}),
    "counterfactual_k": (2, {}),
    "admission_policy": ("reject-all", {}),
    "token_bucket_capacity": (300, dict(admission_policy="token-bucket")),
    "token_bucket_refill_rate": (1, dict(admission_policy="token-bucket", token_bucket_capacity=3000)),
    "routing_policy": ("always-busiest", {}),
    "routing_scorers": ("prefix-affinity:1", dict(routing_policy="weighted")),
    "routing_per_model": ({"meta-llama/llama-3.1-8b-instruct": "always-busiest"}, {}),
    "flow_per_model": ({"meta-llama/llama-3.1-8b-instruct": {"policy": "concurrency",
                                                            "params": {"concurrency_limit": 1}}}, {}),
    "priority_policy": ("inverted-slo", dict(scheduler="priority-fcfs", **QUEUE)),
    "scheduler": ("sjf", QUEUE),
    "scheduler_weights": ("prompt_len:1", dict(scheduler="sort", **QUEUE)),
    "preemption_victim": ("lowest-priority", dict(priority_policy="inverted-slo", **PRESSURE)),
    "snapshot_refresh_interval": (2_000_000, dict(routing_policy="weighted", routing_scorers="kv-utilization:1")),
    "snapshot_intervals": ("kv_utilization:2000000", dict(routing_policy="weighted",
                                                          routing_scorers="kv-utilization:1")),
    "prefix_index_capacity": (1, lambda source: dict(routing_policy="prefix-affinity", **PREFIXES.get(source, {}))),
    "fitness_weights": ("throughput:1", {}),
    "objectives": ("ttft_p99_ms:min:1", {}),
    "slo_class_weights": ("0,100", dict(priority_policy="slo-based", scheduler="priority-fcfs", **QUEUE)),
    # a program against another program (a policy expression needs its program: no run without one)
    "admission_program": ("prompt_tokens < 300", dict(admission_policy="expression", admission_program="1")),
    "routing_program": ("load", dict(routing_policy="expression", routing_program="-load")),
    "priority_program": ("-prompt_tokens", dict(priority_policy="expression", priority_program="prompt_tokens",
                                               scheduler="priority-fcfs", **QUEUE)),
    "scheduler_program": ("-prompt_tokens", dict(scheduler="expression", scheduler_program="prompt_tokens", **QUEUE)),
    "victim_program": ("generated", dict(preemption_victim="expression", victim_program="-generated", **PRESSURE)),
    # KV cache tiers: a GPU cache too small for the prefixes, so that blocks are evicted and loaded back
    "kv_cpu_blocks": (1000, lambda source: tiered(source)),
    "kv_cpu_bytes": (2 * 10**10, lambda source: tiered(source)),
    "kv_cpu_read_gbps": (0.01, lambda source: tiered(source, kv_cpu_blocks=1000)),
    "kv_cpu_write_gbps": (0.001, lambda source: tiered(source, kv_cpu_blocks=1000)),
    "kv_cpu_latency_us": (200_000, lambda source: tiered(source, kv_cpu_blocks=1000)),
    "kv_disk_blocks": (1000, lambda source: tiered(source, kv_cpu_blocks=1)),
    "kv_disk_bytes": (2 * 10**10, lambda source: tiered(source, kv_cpu_blocks=1)),
    "kv_disk_read_gbps": (0.01, lambda source: tiered(source, kv_cpu_blocks=1, kv_disk_blocks=1000)),
    "kv_disk_write_gbps": (0.001, lambda source: tiered(source, kv_cpu_blocks=1, kv_disk_blocks=1000)),
    "kv_disk_latency_us": (200_000, lambda source: tiered(source, kv_cpu_blocks=1, kv_disk_blocks=1000)),
    "kv_store": ("all", lambda source: tiered(source, kv_cpu_blocks=1000)),
    "kv_load": ("step", lambda source: tiered(source, kv_cpu_blocks=1000)),
}
SELECTORS = ("workload", "workload_traces_filepath", "workload_spec")
# verification only: by design it never changes a result (tests/run check what it verifies)
UNCHANGED_BY_DESIGN = {"check_invariants": "verifies KV conservation and batch limits after every step"}
# prefill/decode pools (the pd section): they replace num_instances (BASE here), and without both pool sizes
# every one of them is refused (tests/config/test_disaggregation.py); their effect on a run is the P/D engine's
PD_SETTINGS = {name for name, path in FLAG_PATHS.items() if path.startswith("pd.")}
# autoscaling (blis_fast.config.autoscale): the bounds, the pool settings and the autoscaler's parameters are
# refused without an autoscaler (each naming --autoscaler), and until issue 24's kernel part lands every run WITH
# one is refused too ("not yet": test_autoscale_settings_are_refused_without_and_not_yet_with_an_autoscaler);
# value, and the autoscaler (with its companions) under which it counts
AUTOSCALE_SETTINGS = {
    "min_instances": (1, dict(autoscaler="threshold")),
    "max_instances": (4, dict(autoscaler="threshold")),
    "autoscaler": ("threshold", dict(max_instances=4)),
    "autoscale_signal": ("waiting", dict(autoscaler="threshold", autoscale_up=5, autoscale_down=1)),
    "autoscale_up": (0.9, dict(autoscaler="threshold")),
    "autoscale_down": (0.1, dict(autoscaler="threshold")),
    "autoscale_target": (0.5, dict(autoscaler="target")),
    "autoscale_kv_up": (0.9, dict(autoscaler="saturation")),
    "autoscale_kv_down": (0.2, dict(autoscaler="saturation")),
    "autoscale_period_ticks": (3, dict(autoscaler="oscillator")),
    "autoscale_program": ("current + 1", dict(autoscaler="expression", autoscale_program="current")),
    "autoscale_interval_s": (10, dict(autoscaler="threshold")),
    "autoscale_metrics_delay_s": (5, dict(autoscaler="threshold")),
    "provisioning_delay_s": (60, dict(autoscaler="threshold")),
    "loading_delay_s": ("mean:100,std:10", dict(autoscaler="threshold")),
    "instance_warmup_factor": (2, dict(autoscaler="threshold", instance_warmup_requests=10)),
    "instance_warmup_curve": ("linear", dict(autoscaler="threshold", instance_warmup_factor=2,
                                             instance_warmup_requests=10)),
    "instance_warmup_requests": (10, dict(autoscaler="threshold", instance_warmup_factor=2)),
    "instance_warmup_seconds": (30, dict(autoscaler="threshold", instance_warmup_factor=2)),
    "stabilization_up_s": (60, dict(autoscaler="threshold")),
    "stabilization_down_s": (60, dict(autoscaler="threshold")),
    "autoscale_max_change": (2, dict(autoscaler="threshold")),
    "drain": ("redirect", dict(autoscaler="threshold")),
    "drain_timeout_s": (60, dict(autoscaler="threshold")),
    "scale_down": ("newest", dict(autoscaler="threshold")),
    "cost_per_gpu_hour": (3.0, dict(autoscaler="threshold")),
}
# gateway flow control and deadlines (blis_fast.config.flow_control): a detector's parameters are refused
# without flow control (each naming --flow-control); with it each changes the run
# (test_every_flow_setting_changes_an_overloaded_run); value, and the flow control (with its companions) under
# which it counts
FLOW_SETTINGS = {
    "flow_control": ("free-slot", {}),
    "flow_concurrency_limit": (8, dict(flow_control="concurrency")),
    "flow_queue_threshold": (2, dict(flow_control="utilization")),
    "flow_kv_threshold": (0.9, dict(flow_control="utilization")),
    "dispatch_order": ("deadline", dict(flow_control="free-slot")),
    "gateway_fairness": ("round-robin", dict(flow_control="free-slot")),
    "dispatch_program": ("-arrival_us", dict(flow_control="free-slot", dispatch_order="expression",
                                             dispatch_program="0")),
    "flow_instance_program": ("max(0, 2 - in_flight)", dict(flow_control="expression",
                                                            flow_instance_program="max(0, 8 - in_flight)")),
    "flow_saturated_program": ("total < 1", dict(flow_control="expression", flow_instance_program="1")),
    "flow_recheck": ("utilization", dict(flow_control="expression", flow_instance_program="max(0, 2 - in_flight)")),
    "request_ttl_s": (30, {}),
}
# KV tiers: store all also stores generated blocks, which only a follow-up turn re-sends -- none of these
# sources has sessions (refused once the workload is built, as SINGLE_CLASS); the tiers' links (bandwidths,
# latency) and load mode matter only when a block is found in a tier (or a store pins a GPU block someone
# needs): where none is, the run says so in one warning line (results.kv_tiers.unread_warning)
NO_SESSIONS = {("kv_store", s) for s in SOURCES}
TIER_LINKS = {f"kv_{tier}_{name}" for tier in ("cpu", "disk") for name in ("read_gbps", "write_gbps", "latency_us")}
TIER_READ_SIDE = TIER_LINKS | {"kv_load"}
# refused whatever the workload (tests/config/test_effective.py): not modelled yet
REFUSED_EVERYWHERE = {"pp", "dp", "simulation_seed"}
# the workloads with one SLO class: class weights shift every priority alike (refused once it is built)
SINGLE_CLASS = {("slo_class_weights", s) for s in ("distribution", "preset", "trace-csv")}
# words of each refusal's remedy
REMEDY = {
    "rate": {"spec": "--rate-scale", "trace": "--workload-spec"},
    "rate_scale": {"trace": "--workload-spec"},
    "arrival": {"spec": "clients[i].arrival", "trace": "records its arrival times"},
    "prefix_tokens": {"spec": "prefix_groups", "trace": "records its prompts"},
    "seed": {"trace": "workload generate --seed"},
    "slo_class_weights": {"distribution": "slo_classes", "trace": "slo_classes"},
    **{f"{kind}_tokens{part}": {"spec": "clients[i].prompt_tokens", "trace": "replay another trace"}
       for kind in ("prompt", "output") for part in ("", "_stdev", "_min", "_max")},
}


def unique_settings() -> list[str]:
    """One flat name per config path (``max_num_seqs`` and ``max_num_running_reqs`` are one)."""
    seen, out = set(), []
    for name, path in FLAG_PATHS.items():
        if path not in seen:
            seen.add(path)
            out.append(name)
    return out


def test_every_setting_is_in_the_table():
    assert set(unique_settings()) == (set(EFFECTS) | set(SELECTORS) | set(UNCHANGED_BY_DESIGN) | PD_SETTINGS
                                      | set(AUTOSCALE_SETTINGS) | set(FLOW_SETTINGS))
    assert {FLAG_PATHS[name] for name in REMEDY} - {"policy.slo_class_weights"} == set(UNUSED_BY_SOURCE) - {
        "workload.type", "workload.traces_filepath"}


def expected_refusal(setting: str, source: str) -> bool:
    unused = UNUSED_BY_SOURCE.get(FLAG_PATHS[setting], {})
    return setting in REFUSED_EVERYWHERE or SOURCE_KIND[source] in unused


def fingerprint(result) -> str:
    """Everything a run produces but the echo of its own config."""
    out = {k: v for k, v in result.summary().items() if k != "run"}
    out["run"] = {k: v for k, v in result.summary()["run"].items() if k not in ("config", "workload")}
    out["requests"] = result.requests_table().to_pylist()
    out["evaluation"] = {k: v for k, v in result.evaluate().to_dict().items() if k != "policy_id"}  # (a config label)
    if result.timeseries is not None:
        out["timeseries"] = result.timeseries.table().to_pylist()
    if result.setup.config.simulation.trace_level not in (None, "none") or result.counterfactuals:
        out["decisions"] = result.decision_table().to_pylist()
        out["counterfactuals"] = result.counterfactuals
    return json.dumps(out, sort_keys=True, default=str)


_runs: dict = {}


def outcome(settings: dict) -> tuple[str, object]:
    """("ok", fingerprint) or ("error", the exception) of a run (memoized: bases repeat)."""
    key = json.dumps(settings, sort_keys=True, default=str)
    if key not in _runs:
        try:
            _runs[key] = ("ok", fingerprint(blis_fast.simulate(**settings)))
        except (ConfigError, SimulationError) as exc:  # (SimulationError: a run limit, --max-events)
            _runs[key] = ("error", exc)
    return _runs[key]


def check_cell(setting: str, source: str, files) -> str:
    value, companions = EFFECTS[setting]
    if callable(companions):
        companions = companions(source)
    base = {**BASE, **source_settings(source, files), **companions}
    kind, base_out = outcome(base)
    assert kind == "ok", f"{source} + {companions}: {base_out}"
    kind, out = outcome({**base, setting: value})
    if expected_refusal(setting, source) or (setting, source) in SINGLE_CLASS | NO_SESSIONS:
        assert kind == "error" and out.field == setting, f"{setting} with {source} was not refused: {out}"
        remedy = REMEDY.get(setting, {}).get(SOURCE_KIND[source])
        assert remedy is None or remedy in out.message, out.message
        return "refused"
    if kind == "error":  # the setting's own limit fired (a budget, an unknown coefficient set)
        named = getattr(out, "field", "") or str(out)
        assert setting in named or FLAG_PATHS[setting].rpartition(".")[2] in named, out
        assert "has no effect" not in str(out), f"{setting} refused with {source}: {out}"
        return "limit"
    if out == base_out and setting in TIER_READ_SIDE:
        from blis_fast.results.kv_tiers import unread_warning

        assert unread_warning(blis_fast.simulate(**{**base, setting: value})), f"{setting} with {source}: no warning"
        return "flagged"
    assert out != base_out, f"{setting}={value!r} changed nothing with {source} (companions {companions})"
    return "changed"


def test_autoscale_settings_are_refused_without_an_autoscaler():
    """Alone (no autoscaler), each autoscaling setting is refused naming it: with the remedy
    --autoscaler (the autoscaler alone: --max-instances, it has no pool to scale), or by a
    warm-up key's own rule (a factor without a length, a length without a factor)."""
    for setting, (value, companions) in AUTOSCALE_SETTINGS.items():
        with pytest.raises(ConfigError) as alone:
            blis_fast.simulate(**BASE, num_requests=5, **{setting: value})
        assert alone.value.field == setting, (setting, alone.value)
        remedy = "--max-instances" if setting == "autoscaler" else "--autoscaler"  # (an autoscaler alone: no pool)
        warmup = ("has no effect with factor 1", "the warm-up has no length")  # (a warm-up key's own rule first)
        assert any(words in alone.value.message for words in (remedy, *warmup)), alone.value


def test_flow_control_parameters_are_refused_without_it():
    """Alone, each detector parameter is refused naming it with the remedy --flow-control."""
    for setting, (value, companions) in FLOW_SETTINGS.items():
        if companions:
            with pytest.raises(ConfigError) as alone:
                blis_fast.simulate(**BASE, num_requests=5, **{setting: value})
            assert alone.value.field == setting and "--flow-control" in alone.value.message, (setting, alone.value)


# With flow control, each setting changes the run: two tenants and two SLO classes (a tight
# and a loose TTFT target) overload three small instances at twice their capacity, so the
# gateway queue holds requests for most of the run.
OVERLOAD = """seed: 7
rate: 60
num_requests: 120
slo_classes:
  tight: {ttft_ms: 200}
  loose: {ttft_ms: 20000}
clients:
  - {name: chat, tenant: acme, slo_class: tight, rate_fraction: 0.5,
     prompt_tokens: {type: lognormal, p50: 300, p90: 1500, max: 4000},
     output_tokens: {type: lognormal, p50: 150, p90: 500, max: 1500}}
  - {name: jobs, tenant: globex, slo_class: loose, rate_fraction: 0.5,
     prompt_tokens: {type: lognormal, p50: 800, p90: 3000, max: 6000},
     output_tokens: {type: lognormal, p50: 100, p90: 400, max: 1500}}
"""
FLOW_BASE = dict(num_instances=3, max_num_seqs=4, total_kv_blocks=800)
# setting: (value, companions) -- the base runs under the companions, then with the setting changed
FLOW_CHANGES = {
    "flow_control": ("free-slot", {}),
    "flow_concurrency_limit": (3, dict(flow_control="concurrency", flow_concurrency_limit=8)),
    "flow_queue_threshold": (1, dict(flow_control="utilization")),
    "flow_kv_threshold": (0.3, dict(flow_control="utilization", flow_queue_threshold=100)),
    "dispatch_order": ("deadline", dict(flow_control="free-slot")),
    "gateway_fairness": ("round-robin", dict(flow_control="free-slot")),
    "dispatch_program": ("-arrival_us", dict(flow_control="free-slot", dispatch_order="expression",
                                             dispatch_program="0")),
    "flow_instance_program": ("max(0, 2 - in_flight)", dict(flow_control="expression",
                                                            flow_instance_program="max(0, 8 - in_flight)")),
    "flow_saturated_program": ("largest <= 0", dict(flow_control="expression",
                                                    flow_instance_program="max(0, 2 - in_flight)")),
    "flow_recheck": ("utilization", dict(flow_control="expression", flow_instance_program="max(0, 2 - in_flight)")),
    "request_ttl_s": (5, dict(flow_control="free-slot")),
}


def test_every_flow_setting_changes_an_overloaded_run(tmp_path):
    assert set(FLOW_CHANGES) == set(FLOW_SETTINGS)
    spec = tmp_path / "overload.yaml"
    spec.write_text(OVERLOAD)
    for setting, (value, companions) in FLOW_CHANGES.items():
        base = {**FLOW_BASE, **companions, "workload_spec": str(spec)}
        kind, before = outcome(base)
        assert kind == "ok", (setting, before)
        assert outcome({**base, setting: value}) != (kind, before), f"{setting}={value!r} changed nothing"


# With an autoscaler, each setting changes the run: a 70B pool of 2-5 TP4 instances through a
# two-minute day (ramp, peak, fall) that makes it scale up and down, draining busy instances.
# Each setting's companions (None: left out) set the autoscaler it belongs to.
SCALING_DAY = """seed: 5
rate: 40
duration_s: 120
load_profile:
  type: piecewise
  segments:
    - {duration_s: 20, multiplier: 0.2}
    - {duration_s: 30, from: 0.2, to: 1.0}
    - {duration_s: 30, multiplier: 1.0}
    - {duration_s: 20, from: 1.0, to: 0.1}
    - {duration_s: 20, multiplier: 0.1}
slo_classes:
  interactive: {ttft_ms: 500}
clients:
  - name: chat
    rate_fraction: 1.0
    slo_class: interactive
    prompt_tokens: {type: lognormal, p50: 600, p90: 2000, max: 8000}
    output_tokens: {type: lognormal, p50: 250, p90: 800, max: 4000}
"""
SCALING = dict(num_instances=2, model="meta-llama/llama-3.1-70b-instruct", tp=4,
               max_num_seqs=32, autoscaler="threshold", autoscale_signal="in_flight", autoscale_up=20, autoscale_down=8,
               autoscale_interval_s=2, autoscale_metrics_delay_s=1, provisioning_delay_s=3, loading_delay_s=4,
               stabilization_down_s=6, max_instances=5, min_instances=1)
CHANGES = {
    "min_instances": (2, {}),
    "max_instances": (3, {}),
    "autoscaler": ("saturation", {"autoscale_signal": None, "autoscale_up": None, "autoscale_down": None}),
    "autoscale_signal": ("waiting", {"autoscale_up": 5, "autoscale_down": 1}),
    "autoscale_up": (25, {}),
    "autoscale_down": (4, {}),
    "autoscale_target": (10, {"autoscaler": "target", "autoscale_up": None, "autoscale_down": None}),
    "autoscale_kv_up": (0.5, {"autoscaler": "saturation", "autoscale_signal": None, "autoscale_up": None, "autoscale_down": None}),
    "autoscale_kv_down": (0.1, {"autoscaler": "saturation", "autoscale_signal": None, "autoscale_up": None, "autoscale_down": None}),
    "autoscale_period_ticks": (3, {"autoscaler": "oscillator", "autoscale_signal": None, "autoscale_up": None, "autoscale_down": None}),
    "autoscale_program": ("current * in_flight / 10 if ready > 0 else current",
                          {"autoscaler": "expression", "autoscale_program": "current", "autoscale_signal": None,
                           "autoscale_up": None, "autoscale_down": None}),
    "autoscale_interval_s": (3, {}),
    "autoscale_metrics_delay_s": (3, {}),
    "provisioning_delay_s": (8, {}),
    "loading_delay_s": ("mean:4,std:2", {}),
    "instance_warmup_factor": (3, {"instance_warmup_factor": 2, "instance_warmup_requests": 10}),
    "instance_warmup_curve": ("linear", {"instance_warmup_factor": 2, "instance_warmup_requests": 10}),
    "instance_warmup_requests": (40, {"instance_warmup_factor": 2, "instance_warmup_requests": 10}),
    "instance_warmup_seconds": (10, {"instance_warmup_factor": 2, "instance_warmup_seconds": 30}),
    "stabilization_up_s": (4, {}),
    "stabilization_down_s": (20, {}),
    "autoscale_max_change": (1, {"autoscaler": "target", "autoscale_target": 5, "autoscale_up": None, "autoscale_down": None}),
    "drain": ("immediate", {}),
    "drain_timeout_s": (1, {}),
    "scale_down": ("oldest", {}),
    "cost_per_gpu_hour": (3.0, {}),
}


def test_every_autoscale_setting_changes_an_autoscaled_run(tmp_path):
    assert set(CHANGES) == set(AUTOSCALE_SETTINGS)
    spec = tmp_path / "day.yaml"
    spec.write_text(SCALING_DAY)
    for setting, (value, companions) in CHANGES.items():
        base = {k: v for k, v in {**SCALING, **companions, "workload_spec": str(spec)}.items() if v is not None}
        kind, before = outcome(base)
        assert kind == "ok", (setting, before)
        assert outcome({**base, setting: value}) != (kind, before), f"{setting}={value!r} changed nothing"


WORKLOAD_SETTINGS = [s for s in EFFECTS if FLAG_PATHS[s].startswith("workload.") or s == "seed"]


@pytest.mark.parametrize("source", SOURCES)
def test_workload_settings_change_the_run_or_are_refused(files, source):
    for setting in WORKLOAD_SETTINGS:
        check_cell(setting, source, files)


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES)
def test_every_setting_changes_the_run_or_is_refused(files, source):
    for setting in EFFECTS:
        if setting not in WORKLOAD_SETTINGS:
            check_cell(setting, source, files)
    for setting in UNCHANGED_BY_DESIGN:
        base = {**BASE, **source_settings(source, files)}
        assert outcome({**base, setting: True}) == outcome(base)


def test_source_selectors(files):
    """--workload, --workload-traces-filepath and --workload-spec pick the source: another
    value of the source's own selector changes the run; a selector of another source is
    refused (the spec replaces the type and the trace; a trace file needs --workload traces)."""
    spec, other = source_settings("spec", files), dict(workload_spec=str(files["other-spec"]))
    assert outcome({**BASE, **spec})[1] != outcome({**BASE, **other})[1]
    for source in ("trace-csv", "rich-trace"):
        one = source_settings(source, files)
        kind, out = outcome({**BASE, **spec, **one})
        assert kind == "error" and out.field == "workload", out  # (the first of the two refused)
    csv, rich = source_settings("trace-csv", files), source_settings("rich-trace", files)
    assert outcome({**BASE, **csv})[1] != outcome({**BASE, **rich})[1]
    dist, preset = source_settings("distribution", files), source_settings("preset", files)
    assert outcome({**BASE, **dist})[1] != outcome({**BASE, **preset})[1]
    for extra, field in ((dict(workload="chatbot"), "workload"),
                         (dict(workload_traces_filepath=str(TRACE_CSV)), "workload_traces_filepath")):
        kind, out = outcome({**BASE, **spec, **extra})
        assert kind == "error" and out.field == field and "leave --workload out" in out.message or \
            "replaces the trace" in out.message, out
    kind, out = outcome({**BASE, **dist, "workload_traces_filepath": str(TRACE_CSV)})
    assert kind == "error" and "--workload traces" in out.message


TRACE_ARGS = ["--workload", "traces", "--workload-traces-filepath", "{trace}"]
REFUSED_CLI = [
    (["--workload-spec", "{spec}", "--rate", "5"], ["--rate", "--rate-scale"]),
    (["--workload-spec", "{spec}", "--prompt-tokens", "50"], ["--prompt-tokens", "clients[i].prompt_tokens"]),
    (["--workload-spec", "{spec}", "--output-tokens-max", "50"], ["--output-tokens-max", "clients[i]"]),
    (["--workload-spec", "{spec}", "--prefix-tokens", "64"], ["--prefix-tokens", "prefix_groups"]),
    (["--workload-spec", "{spec}", "--arrival", "constant"], ["--arrival", "clients[i].arrival"]),
    (["--workload-spec", "{spec}", "--workload", "chatbot"], ["--workload", "leave --workload out"]),
    ([*TRACE_ARGS, "--rate", "5"], ["--rate", "--rate-scale"]),
    ([*TRACE_ARGS, "--seed", "5"], ["--seed", "generate --seed"]),
    ([*TRACE_ARGS, "--prompt-tokens-min", "5"], ["--prompt-tokens-min"]),
    (["--workload-traces-filepath", "{trace}"], ["--workload-traces-filepath", "--workload traces"]),
    (["--gpu-memory-utilization", "0.5"], ["gpu_memory_utilization", "--total-kv-blocks"]),
]


@pytest.mark.parametrize("args,needles", REFUSED_CLI, ids=[" ".join(a[-2:]) for a, _ in REFUSED_CLI])
def test_refused_from_the_command_line_with_exit_2(capsys, files, args, needles):
    args = [a.format(spec=files["spec"], trace=TRACE_CSV) for a in args]
    code, out, err = run_cli(capsys, "run", *args)
    assert code == 2 and out == ""
    assert_one_error_line(err, needles)


def test_refused_from_yaml_naming_the_yaml_path(files):
    for data, field in (
        ({"workload": {"spec_filepath": str(files["spec"]), "arrival": "constant"}}, "workload.arrival"),
        ({"workload": {"type": "traces", "traces_filepath": str(TRACE_CSV), "rate": 5.0}}, "workload.rate"),
        ({"workload_spec": str(files["spec"]), "prompt_tokens": 50}, "prompt_tokens"),
        ({"workload": {"type": "traces", "traces_filepath": str(TRACE_CSV)}, "simulation": {"seed": 1}},
         "simulation.seed"),
    ):
        with pytest.raises(ConfigError) as ei:
            build_config(data)
        assert ei.value.field == field and "has no effect" in ei.value.message


def test_a_flag_switching_a_files_source_leaves_the_files_settings(files):
    """`--workload-spec` over a file's `workload: {type: chatbot, rate: 20}` is fine (the
    file's settings stay as a notice); a whole config passed back in (to_dict()) too."""
    cfg = build_config({"workload": {"type": "chatbot", "rate": 20, "num_requests": 500}},
                       {"workload_spec": str(files["spec"])})
    assert cfg.workload.spec_filepath and cfg.workload.rate == 20
    assert cfg.workload.num_requests is None  # the file's length was the chatbot's: the spec keeps its own
    spec_cfg = build_config({}, {"workload_spec": str(files["spec"])})
    assert build_config(spec_cfg.to_dict()) == spec_cfg  # (the defaults it repeats are not "given")
    # the config taken further (API, studies): only what changes on top of it is checked
    assert blis_fast.simulate(cfg, num_instances=2).cluster["num_instances"] == 2
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(cfg, rate=5)
    assert ei.value.field == "rate"
    with pytest.raises(ConfigError) as ei:  # written out and read back as a file, it is a file's setting again
        build_config(cfg.to_dict())
    assert ei.value.field == "workload.type"


def test_a_ready_workload_refuses_the_settings_describing_one():
    wl = blis_fast.simulate(num_requests=5).workload
    for name, value in (("rate", 5), ("num_requests", 9), ("prompt_tokens", 10), ("workload_spec", "x.yaml")):
        with pytest.raises(ConfigError) as ei:
            blis_fast.simulate(workload=wl, **{name: value})
        assert ei.value.field == name and "Workload passed in" in ei.value.message
    assert blis_fast.simulate(workload=wl, num_instances=2).cluster["completed_requests"] == 5


def test_studies_refuse_the_same_combinations(capsys, files):
    """capacity, sweep and compare build their config as run does: the same refusals, and
    a --set axis that a source does not use is refused too."""
    for command in (["capacity", "--slo", "ttft_p99_ms<=200"], ["sweep", "--set", "num_instances=1,2"],
                    ["compare", str(ROOT / "configs" / "examples" / "compare" / "instances" / "2-instances.yaml")]):
        code, out, err = run_cli(capsys, *command, "--workload-spec", files["spec"], "--prefix-tokens", "50")
        assert code == 2 and out == ""
        assert_one_error_line(err, ["--prefix-tokens", "prefix_groups"])
    code, out, err = run_cli(capsys, "sweep", "--set", "prompt_tokens=50,100", "--workload-spec", files["spec"])
    assert code == 2 and "prompt_tokens" in err and "clients[i].prompt_tokens" in err


def test_studies_on_a_trace_run_one_seed(capsys):
    """A trace draws nothing at random: its study runs keep no seed, and more than one seed
    is refused (every seed would repeat the same run)."""
    trace = dict(workload="traces", workload_traces_filepath=str(TRACE_CSV), metrics="arrived_requests")
    study = blis_fast.sweep("num_instances=1,2", **trace)
    assert [s["arrived_requests"].mean for s in study.stats] == [40, 40]
    with pytest.raises(ConfigError) as ei:
        blis_fast.sweep("num_instances=1,2", seeds=2, **trace)
    assert ei.value.field == "--seeds" and "--seeds 1" in ei.value.message


def test_workload_stats_refuses_a_seed_for_a_trace(capsys, files):
    code, out, err = run_cli(capsys, "workload", "stats", TRACE_CSV, "--seed", "3")
    assert code == 2 and out == ""
    assert_one_error_line(err, ["--seed", "workload spec"])
    code, out, err = run_cli(capsys, "workload", "stats", files["spec"], "--seed", "3")
    assert code == 0 and json.loads(out)["num_requests"] > 0


def test_capacity_on_a_trace_defaults_to_one_seed(capsys):
    code, out, err = run_cli(capsys, "capacity", "--search", "instances", "--slo", "e2e_p99_ms<=100000", "--json",
                             "--workload", "traces", "--workload-traces-filepath", TRACE_CSV)
    assert code == 0, err
    result = json.loads(out)
    assert result["seeds"] == [42]
    # the 40-request trace is too short to trust, and only a longer trace can fix that
    assert result["answer"] is None and "the trace fixes its length" in result["message"]
    assert "--seeds" not in result["message"]


def test_an_evaluation_scenario_refuses_a_seed_for_its_trace():
    from blis_fast.batch.scenarios import scenario_from_dict

    with pytest.raises(ConfigError) as ei:
        scenario_from_dict({"name": "a", "trace": str(TRACE_CSV), "seed": 3}, "scenarios[0]")
    assert ei.value.field == "scenarios[0].seed" and "has no effect with a trace" in ei.value.message


# ----------------------------------------------------------------------------- --num-requests

SESSION_SPEC = """\
seed: 5
duration_s: 3
clients:
  - {name: chat, rate: 4, prompt_tokens: {type: uniform, min: 20, max: 80},
     output_tokens: {type: uniform, min: 5, max: 30},
     session: {turns: {type: constant, value: 4}, think_time_s: {type: constant, value: 0.5}}}
"""


def per_request(result) -> list:
    return result.requests_table().to_pylist()


def test_num_requests_replays_the_first_requests_of_a_trace(tmp_path):
    """A 40-request BLIS trace with num_requests=10 is its first 10 requests (file order)
    replayed alone, request for request; more than the trace holds keeps them all."""
    lines = TRACE_CSV.read_text().splitlines(keepends=True)
    head = tmp_path / "first-10.csv"
    head.write_text("".join(lines[:11]))  # the header and the first 10 records
    trace = dict(BASE, workload="traces", workload_traces_filepath=str(TRACE_CSV))
    capped = blis_fast.simulate(**trace, num_requests=10)
    alone = blis_fast.simulate(**dict(trace, workload_traces_filepath=str(head)))
    assert len(capped.workload) == 10 and capped.workload.source_ids == alone.workload.source_ids
    assert per_request(capped) == per_request(alone)
    assert capped.cluster == alone.cluster
    # too short to trust: the cut replay names --num-requests among the remedies
    assert "a larger --num-requests (the trace's first N requests)" in capped.adequacy.warning()
    whole = blis_fast.simulate(**trace)
    assert len(whole.workload) == 40
    assert per_request(blis_fast.simulate(**trace, num_requests=1000)) == per_request(whole)


def test_num_requests_caps_a_workload_spec_from_flags_yaml_and_the_api(capsys, files):
    """--num-requests replaces the spec's num_requests (its cap on generated requests): 7
    requests, the first 7 of the spec's own; its memory estimate counts 7."""
    from blis_fast.run.resolve import expected_workload_size

    whole = blis_fast.simulate(**BASE, workload_spec=str(files["spec"]))
    seven = blis_fast.simulate(**BASE, workload_spec=str(files["spec"]), num_requests=7)
    assert len(whole.workload) > 7 and len(seven.workload) == 7
    assert np.array_equal(seven.workload.arrival_us, whole.workload.arrival_us[:7])
    cfg = build_config({"workload": {"spec_filepath": str(files["spec"]), "num_requests": 7}})
    assert cfg.workload.num_requests == 7 and expected_workload_size(cfg)[0] <= 7
    code, out, err = run_cli(capsys, "run", "--workload-spec", files["spec"], "--num-requests", "7")
    assert code == 0, err
    assert json.loads(out)["cluster"]["arrived_requests"] == 7
    # without it the spec keeps its own length, and the config says none was given
    assert build_config({}, {"workload_spec": str(files["spec"])}).workload.num_requests is None


def test_num_requests_on_a_rich_trace_with_sessions_cuts_the_sessions(tmp_path):
    """A rich trace's first N rows are kept; a kept turn whose follow-up is dropped ends
    its session there (a follow-up always comes after its parent, so none is orphaned)."""
    from blis_fast.workload.formats.rich_trace import write_trace
    from blis_fast.workload.generate import generate_requests
    from blis_fast.workload.spec import load_spec

    spec = tmp_path / "sessions.yaml"
    spec.write_text(SESSION_SPEC)
    rich = tmp_path / "sessions.parquet"
    write_trace(generate_requests(load_spec(spec), None), rich)
    trace = dict(BASE, workload="traces", workload_traces_filepath=str(rich))
    whole = blis_fast.simulate(**trace)
    n = 10
    assert whole.workload.next_request[n - 1] >= n  # the cut falls inside a session
    capped = blis_fast.simulate(**trace, num_requests=n)
    wl = capped.workload
    assert len(wl) == n and wl.next_request.max() < n and wl.next_request[n - 1] == -1
    assert np.array_equal(wl.next_request[: n - 1], whole.workload.next_request[: n - 1])
    assert capped.cluster["completed_requests"] == n


def test_num_requests_of_a_replaced_distribution_is_dropped(files):
    """A checked distribution config (its 100 requests) taken to a spec or a trace by a
    later setting: its length was the distribution's, the new source keeps its own."""
    dist = build_config({}, {"rate": 5})
    assert dist.workload.num_requests == 100
    for switch in (dict(workload_spec=str(files["spec"])),
                   dict(workload="traces", workload_traces_filepath=str(TRACE_CSV))):
        cfg = build_config(dist.to_dict(), switch)
        assert cfg.workload.num_requests is None


# ----------------------------------------------------------------------------- compat mode

COMPAT = "blis-2026.02"


def test_compat_accepts_the_references_ignored_flags_with_one_warning(capsys):
    """The reference accepts --rate and --seed with a trace and ignores them: under
    --compat its command line runs, with one warning line, and the output is byte for
    byte the run without them; outside compat mode they are refused."""
    base = ["run", *[a.format(trace=TRACE_CSV) for a in TRACE_ARGS], "--compat", COMPAT]
    code, plain, err = run_cli(capsys, *base)
    assert code == 0, err
    code, out, err = run_cli(capsys, *base, "--rate", "5", "--seed", "3")
    assert code == 0 and out == plain
    warned = [line for line in err.splitlines() if "has no effect" in line or "have no effect" in line]
    assert warned == ["blis-fast: warning: --rate, --seed have no effect with a trace (--workload traces) (ignored, "
                      "as the reference does under --compat blis-2026.02)"]
    code, out, err = run_cli(capsys, *base[:-2], "--rate", "5", "--seed", "3")
    assert code == 2 and out == ""
    assert_one_error_line(err, ["--rate", "--rate-scale"])


def test_compat_ignores_settings_from_the_api_and_yaml_too(files):
    from blis_fast.config.effective import CompatIgnoredWarning

    spec = dict(BASE, workload_spec=str(files["spec"]), compat=COMPAT)
    with pytest.warns(CompatIgnoredWarning, match=r"^blis-fast: warning: workload, prefix_tokens have no effect"):
        ignored = blis_fast.simulate(**spec, workload="chatbot", prefix_tokens=64)
    assert fingerprint(ignored) == fingerprint(blis_fast.simulate(**spec))
    with pytest.warns(CompatIgnoredWarning, match="workload.rate has no effect"):
        cfg = build_config({"workload": {"type": "traces", "traces_filepath": str(TRACE_CSV), "rate": 5.0},
                            "simulation": {"compat": COMPAT}})
    assert cfg.workload.rate == 1.0  # reset: the config is the one without it


def test_compat_still_refuses_settings_of_blis_fasts_own(files):
    """--rate-scale is no reference flag: no reference command line holds it, so it stays
    refused with a trace in compat mode too."""
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(**BASE, workload="traces", workload_traces_filepath=str(TRACE_CSV), compat=COMPAT,
                           rate_scale=2)
    assert ei.value.field == "rate_scale"


def test_compat_warning_is_one_line_for_a_study(capsys):
    """A sweep builds a config per point: the warning still shows once, after the output."""
    code, out, err = run_cli(capsys, "sweep", "--set", "num_instances=1,2", "--compat", COMPAT, "--rate", "5",
                             *[a.format(trace=TRACE_CSV) for a in TRACE_ARGS])
    assert code == 0, err
    assert [line for line in err.splitlines() if "no effect" in line] == [
        "blis-fast: warning: --rate has no effect with a trace (--workload traces) (ignored, as the reference does "
        "under --compat blis-2026.02)"]
