"""The setting options of ``blis-fast run`` and the studies are built from one table
(blis_fast/cli/setting_flags.py over config.sim.FLAG_PATHS): every setting with a flag is
listed once in ``run --help``, and each option reaches its SimConfig field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import blis_fast.run.api as api
from blis_fast.cli.app import setting_field
from blis_fast.cli.setting_flags import setting_names
from blis_fast.config.sim import FLAG_PATHS, build_config
from hardening.hardening_helpers import cli_in_process

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

# a value per setting that differs from the default, and the settings it needs to take effect
SAMPLES = {
    "model": ("qwen/qwen2.5-7b-instruct", {}), "hardware": ("A100-80", {}), "tp": ("2", {}),
    "vllm_version": ("0.8.5", {}), "latency_model": ("roofline", {}), "alpha_coeffs": ("1,2,3", {}),
    "beta_coeffs": ("1,2,3", {}), "seed": ("7", {}), "horizon": ("1000000", {}), "workload": ("chatbot", {}),
    "workload_traces_filepath": (str(CONFIGS / "examples" / "trace.csv"), {"workload": "traces"}),
    "workload_spec": (str(CONFIGS / "workloads" / "chat.yaml"), {}), "rate": ("2.5", {}), "rate_scale": ("2", {}),
    "num_requests": ("20", {}), "arrival": ("constant", {}), "prefix_tokens": ("32", {}),
    "prompt_tokens": ("100", {}), "prompt_tokens_stdev": ("10", {}), "prompt_tokens_min": ("5", {}),
    "prompt_tokens_max": ("500", {}), "output_tokens": ("100", {}), "output_tokens_stdev": ("10", {}),
    "output_tokens_min": ("5", {}), "output_tokens_max": ("500", {}), "num_instances": ("3", {}),
    "total_kv_blocks": ("5000", {}), "block_size_in_tokens": ("32", {}), "max_num_running_reqs": ("64", {}),
    "max_num_scheduled_tokens": ("4096", {}), "long_prefill_token_threshold": ("512", {}),
    "gpu_memory_utilization": ("0.8", {}), "enable_prefix_caching": (False, {}), "admission_latency": ("5", {}),
    "routing_latency": ("6", {}), "compat": ("blis-2026.02", {}), "admission_policy": ("token-bucket", {}),
    "token_bucket_capacity": ("5", {"admission_policy": "token-bucket"}),
    "token_bucket_refill_rate": ("5", {"admission_policy": "token-bucket"}), "routing_policy": ("least-loaded", {}),
    "routing_scorers": ("queue-depth:2", {"routing_policy": "weighted"}), "priority_policy": ("slo-based", {}),
    "slo_class_weights": ("1,2", {"priority_policy": "slo-based"}), "scheduler": ("sjf", {}),
    "scheduler_weights": ("priority:1", {"scheduler": "sort"}), "preemption_victim": ("lowest-priority", {}),
    "snapshot_refresh_interval": ("10", {}), "snapshot_intervals": ("queue_depth:5", {}),
    "prefix_index_capacity": ("100", {}), "fitness_weights": ("throughput:1", {}), "objectives": ("ttft_p99_ms", {}),
    "trace_level": ("none", {}), "counterfactual_k": ("2", {}), "sample_interval_ms": ("50", {}),
    "check_invariants": (True, {}), "max_memory": ("2GB", {}), "warmup_s": ("1", {}), "cooldown_s": ("1", {}),
    "prefill_instances": ("2", {"decode_instances": "6"}), "decode_instances": ("6", {"prefill_instances": "2"}),
}
PD_POOLS = {"prefill_instances": "2", "decode_instances": "6"}  # (every P/D setting needs both pools)
SAMPLES.update({name: (value, PD_POOLS) for name, value in (
    ("pd_decider", "always"), ("pd_threshold", "8"), ("pd_transfer_bandwidth_gbps", "1.5"),
    ("pd_transfer_base_latency_ms", "0"), ("pd_transfer_charge", "full-prompt"), ("pd_transfer_contention", "link"),
    ("pd_first_token", "prefill"), ("pd_on_decode_full", "drop"))})
CPU_TIER = {"kv_cpu_blocks": "1000"}  # (a tier's link and the modes need a tier size)
SAMPLES.update({"kv_cpu_blocks": ("1000", {}), "kv_cpu_bytes": ("1e11", {}), "kv_disk_blocks": ("5000", {}),
                "kv_disk_bytes": ("1e12", {}), "kv_store": ("all", CPU_TIER), "kv_load": ("step", CPU_TIER)})
SAMPLES.update({f"kv_{tier}_{name}": (value, {f"kv_{tier}_blocks": "1000"}) for tier in ("cpu", "disk")
                for name, value in (("read_gbps", "12.5"), ("write_gbps", "2"), ("latency_us", "50"))})
# autoscaling: every setting needs an autoscaler and a pool it can scale (the run itself is refused until the
# kernel part lands: tests/config/test_autoscale.py)
SCALING = {"autoscaler": "threshold", "max_instances": "3"}
SAMPLES.update({"autoscaler": ("threshold", {"max_instances": "3"}), "max_instances": ("3", {"autoscaler": "threshold"}),
                "min_instances": ("1", {"num_instances": "2", "autoscaler": "threshold"}),
                "autoscale_signal": ("waiting", {**SCALING, "autoscale_up": "4", "autoscale_down": "1"}),
                "autoscale_target": ("0.5", {"autoscaler": "target", "max_instances": "3"}),
                "autoscale_kv_up": ("0.9", {"autoscaler": "saturation", "max_instances": "3"}),
                "autoscale_kv_down": ("0.2", {"autoscaler": "saturation", "max_instances": "3"}),
                "autoscale_period_ticks": ("4", {"autoscaler": "oscillator", "max_instances": "3"}),
                "instance_warmup_factor": ("2", {**SCALING, "instance_warmup_requests": "5"}),
                "instance_warmup_curve": ("linear", {**SCALING, "instance_warmup_factor": "2",
                                                     "instance_warmup_requests": "5"}),
                "instance_warmup_requests": ("5", {**SCALING, "instance_warmup_factor": "2"}),
                "instance_warmup_seconds": ("5", {**SCALING, "instance_warmup_factor": "2"})})
SAMPLES.update({name: (value, SCALING) for name, value in (
    ("autoscale_up", "0.9"), ("autoscale_down", "0.1"), ("autoscale_interval_s", "10"),
    ("autoscale_metrics_delay_s", "5"), ("provisioning_delay_s", "mean:60,std:5"), ("loading_delay_s", "100"),
    ("stabilization_up_s", "60"), ("stabilization_down_s", "60"), ("autoscale_max_change", "2"),
    ("drain", "redirect"), ("drain_timeout_s", "30"), ("scale_down", "newest"), ("cost_per_gpu_hour", "3"))})
# flow control and deadlines: a detector's parameters need it (the run itself is refused until the kernel
# part lands: tests/config/test_flow_control.py)
SAMPLES.update({"flow_control": ("free-slot", {}), "request_ttl_s": ("30", {}),
                "flow_concurrency_limit": ("8", {"flow_control": "concurrency"}),
                "flow_queue_threshold": ("2", {"flow_control": "utilization"}),
                "flow_kv_threshold": ("0.9", {"flow_control": "utilization"}),
                "dispatch_order": ("deadline", {"flow_control": "free-slot"}),
                "gateway_fairness": ("round-robin", {"flow_control": "free-slot"})})
# settings that accept only their default today: a different value is refused naming the flag
SAMPLES.update({"admission_program": ("prompt_tokens < 4000", {"admission_policy": "expression"}),
                "routing_program": ("-load", {"routing_policy": "expression"}),
                "priority_program": ("slo_class", {"priority_policy": "expression"}),
                "scheduler_program": ("prompt_tokens", {"scheduler": "expression"}),
                "victim_program": ("generated", {"preemption_victim": "expression"}),
                "autoscale_program": ("current + 1", {"autoscaler": "expression", "max_instances": "3"}),
                "dispatch_program": ("-arrival_us", {"flow_control": "free-slot", "dispatch_order": "expression"}),
                "flow_instance_program": ("max(0, 4 - in_flight)", {"flow_control": "expression"}),
                "flow_saturated_program": ("largest <= 0", {"flow_control": "expression",
                                                            "flow_instance_program": "1"}),
                "flow_recheck": ("free-slot", {"flow_control": "expression", "flow_instance_program": "1"})})
REFUSED = {"pp": "2", "dp": "2", "simulation_seed": "8"}


def _get(cfg, path: str):
    for part in path.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _args(name: str, value, flag: str) -> list[str]:
    if value is True:
        return [flag]
    if value is False:
        return [f"--disable-{name.removeprefix('enable_').replace('_', '-')}"]
    return [flag, value]


class _Ran(Exception):
    """Raised instead of simulating: the test only wants the config."""


@pytest.fixture
def captured(monkeypatch) -> list:
    seen = []

    def fake_run_config(cfg, *args, **kwargs):
        seen.append(cfg)
        raise _Ran

    monkeypatch.setattr(api, "run_config", fake_run_config)
    return seen


def test_the_samples_cover_the_table():
    assert set(SAMPLES) | set(REFUSED) == set(setting_names())


def test_every_setting_flag_is_in_run_help_exactly_once():
    code, out, _ = cli_in_process("run", "--help")
    assert code == 0
    # the option column: a line's names before its help text (flags named in help text do not count)
    listed = [flag for line in out.splitlines() if re.match(r"\s{2}--", line)
              for flag in re.findall(r"--[a-z][a-z0-9-]*", re.split(r"\s{2,}", line.strip())[0])]
    for name, flags in setting_names().items():
        assert flags[0] == "--" + name.replace("_", "-")
        for flag in flags:
            assert listed.count(flag) == 1, flag
        f = setting_field(name)
        assert f.metadata["help"].split()[0] in out
    # every flat name of the table is a flag or an alias of one, but the YAML-only settings
    flat = {flag for flags in setting_names().values() for flag in flags}
    yaml_only = {n for n in FLAG_PATHS if setting_field(n) is not None and setting_field(n).metadata.get("cli") is False}
    assert {"--" + n.replace("_", "-") for n in FLAG_PATHS} - flat == {"--" + n.replace("_", "-") for n in yaml_only}
    assert "--max-events" not in listed


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_setting_flag_reaches_its_config_field(name, captured, tmp_path):
    value, needs = SAMPLES[name]
    default = _get(build_config({}, {}), FLAG_PATHS[name])
    want = _get(build_config({}, {name: value, **needs}), FLAG_PATHS[name])
    assert want != default
    extra = [a for k, v in needs.items() for a in _args(k, v, "--" + k.replace("_", "-"))]
    if name == "sample_interval_ms":
        extra += ["--timeseries-out", str(tmp_path / "ts.parquet")]
    for flag in setting_names()[name]:  # the flag and each alias
        try:
            code, _, err = cli_in_process("run", *_args(name, value, flag), *extra)
            pytest.fail(f"{flag} {value}: exit {code}: {err}")
        except _Ran:  # stopped by the fake run_config, with the config built
            pass
        assert _get(captured.pop(), FLAG_PATHS[name]) == want


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_single_value_setting_flag_reaches_the_config(name, captured):
    flag = setting_names()[name][0]
    code, _, err = cli_in_process("run", flag, REFUSED[name])
    assert code == 2 and err.startswith("error: --") and err.count("\n") == 1
    assert flag in err
    assert not captured
