"""Policy configuration: the CLI acceptance command, the policy bundle YAML (our
``type``/``params`` form and BLIS's ``policy`` + ``scorers: [{name, weight}]`` form) giving
the same run as the flags, flags overriding the file, and bad policy input -> one
``error:`` line naming the flag or YAML path, exit code 2 (docs/policies.md)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import blis_fast
from blis_fast.config.policy import PolicyConfig, load_policy_bundle
from blis_fast.errors import ConfigError
from blis_fast.policy import compile_policies
from builders import ROOT, assert_one_error_line, cli, expect_cli_error, run_main, write
from naive.anomalies import brute_force_hol, brute_force_inversions
from blis_fast_kernels.schema import RequestState

ACCEPTANCE_FLAGS = [
    "--num-instances", "4", "--routing-policy", "weighted",
    "--routing-scorers", "prefix-affinity:3,queue-depth:2,kv-utilization:2",
    "--admission-policy", "token-bucket", "--priority-policy", "slo-based", "--scheduler", "priority-fcfs",
    "--fitness-weights", "throughput:0.5,p99_ttft:0.3,mean_e2e:0.2",
]
FITNESS = {"throughput": 0.5, "p99_ttft": 0.3, "mean_e2e": 0.2}

OUR_BUNDLE = """\
admission: {type: token-bucket}
routing:
  type: weighted
  params:
    scorers: {prefix-affinity: 3, queue-depth: 2, kv-utilization: 2}
priority: {type: slo-based}
scheduler: {type: priority-fcfs}
fitness:
  weights: {throughput: 0.5, p99_ttft: 0.3, mean_e2e: 0.2}
"""

BLIS_BUNDLE = """\
admission:
  policy: token-bucket
  token_bucket_capacity: 10000
  token_bucket_refill_rate: 1000
routing:
  policy: weighted
  scorers:
    - {name: prefix-affinity, weight: 3}
    - {name: queue-depth, weight: 2}
    - {name: kv-utilization, weight: 2}
priority:
  policy: slo-based
scheduler: priority-fcfs
fitness: {throughput: 0.5, p99_ttft: 0.3, mean_e2e: 0.2}
"""


# ============================================================================ acceptance command


@pytest.mark.parametrize("mode", ["in-process", pytest.param("console-script", marks=pytest.mark.slow)])
def test_acceptance_command(mode, capsys):
    if mode == "in-process":
        out = run_main(capsys, *ACCEPTANCE_FLAGS)
    else:
        exe = Path(sys.executable).parent / "blis-fast"
        cmd = [str(exe), "run", *ACCEPTANCE_FLAGS] if exe.exists() else \
            [sys.executable, "-m", "blis_fast.cli", "run", *ACCEPTANCE_FLAGS]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
    fit = out["fitness"]
    assert set(fit["components"]) == set(FITNESS)
    assert fit["weights"] == FITNESS
    assert fit["score"] == pytest.approx(sum(w * fit["components"][k] for k, w in FITNESS.items()), rel=1e-12)
    assert 0 < fit["score"] <= 1
    for k, c in fit["components"].items():
        assert 0 < c <= 1, k
    pol = out["run"]["config"]["policy"]
    assert pol["routing"] == "weighted" and pol["admission"] == "token-bucket"
    assert pol["priority"] == "slo-based" and pol["scheduler"] == "priority-fcfs"
    assert pol["routing_scorers"] == {"prefix-affinity": 3.0, "queue-depth": 2.0, "kv-utilization": 2.0}
    c = out["cluster"]
    assert c["num_instances"] == 4 and len(out["instances"]) == 4
    assert c["completed_requests"] + c["rejected_requests"] == 100
    # the command runs the API's simulation; its anomaly counters match the references
    r = blis_fast.simulate(num_instances=4, routing_policy="weighted",
                           routing_scorers="prefix-affinity:3,queue-depth:2,kv-utilization:2",
                           admission_policy="token-bucket", priority_policy="slo-based", scheduler="priority-fcfs",
                           fitness_weights="throughput:0.5,p99_ttft:0.3,mean_e2e:0.2")
    assert c == r.cluster
    assert c["priority_inversions"] == brute_force_inversions(r)
    assert c["hol_blocking_instances"] == brute_force_hol(r)
    assert c["rejected_requests"] == int((r.state.reqs["state"] == RequestState.REJECTED).sum())


def test_policy_config_bundle_forms_equal_flags(tmp_path, capsys):
    flags = run_main(capsys, *ACCEPTANCE_FLAGS)
    ours = run_main(capsys, "--num-instances", "4", "--policy-config", write(tmp_path, "ours.yaml", OUR_BUNDLE))
    blis = run_main(capsys, "--num-instances", "4", "--policy-config", write(tmp_path, "blis.yaml", BLIS_BUNDLE))
    assert ours == flags
    assert blis == flags
    assert "fitness" in flags


def test_shipped_blis_bundle_equals_flags(capsys):
    """configs/policies/blis-bundle.yaml is BLIS's format for the same policies."""
    shipped = run_main(capsys, "--num-instances", "4", "--num-requests", "30",
                       "--policy-config", ROOT / "configs/policies/blis-bundle.yaml")
    flags = run_main(capsys, "--num-requests", "30", *ACCEPTANCE_FLAGS[:-2])
    assert shipped == flags


def test_flags_override_the_file(tmp_path, capsys):
    bundle = write(tmp_path, "b.yaml", """\
admission: {type: reject-all}
routing: {type: round-robin}
priority: {type: inverted-slo}
scheduler: {type: sjf}
preemption: {victim: lowest-priority}
observability: {snapshot_refresh_interval: 5000}
fitness: {weights: {throughput: 1}}
""")
    out = run_main(capsys, "--policy-config", bundle, *ACCEPTANCE_FLAGS, "--preemption-victim", "last",
                   "--snapshot-refresh-interval", "0")
    assert out == run_main(capsys, *ACCEPTANCE_FLAGS)
    # only some flags: the rest comes from the file
    out = run_main(capsys, "--policy-config", bundle, "--admission-policy", "always-admit", "--num-requests", "10")
    pol = out["run"]["config"]["policy"]
    assert pol["admission"] == "always-admit"
    assert (pol["routing"], pol["priority"], pol["scheduler"], pol["preemption_victim"]) == \
        ("round-robin", "inverted-slo", "sjf", "lowest-priority")
    assert pol["snapshot_refresh_interval"] == 5000
    assert out["fitness"]["weights"] == {"throughput": 1.0}
    assert out["cluster"]["rejected_requests"] == 0


def test_flag_parameters_override_file_parameters(tmp_path, capsys):
    bundle = write(tmp_path, "b.yaml", """\
admission: {type: token-bucket, params: {capacity: 1, refill_rate: 0}}
routing: {type: weighted, params: {scorers: {queue-depth: 1}}}
""")
    pol = run_main(capsys, "--policy-config", bundle, "--num-requests", "5")["run"]["config"]["policy"]
    assert pol["token_bucket_capacity"] == 1 and pol["routing_scorers"] == {"queue-depth": 1.0}
    out = run_main(capsys, "--policy-config", bundle, "--num-requests", "5", "--token-bucket-capacity", "1e9",
                   "--routing-scorers", "kv-utilization:2")
    pol = out["run"]["config"]["policy"]
    assert pol["token_bucket_capacity"] == 1e9 and pol["token_bucket_refill_rate"] == 0
    assert pol["routing_scorers"] == {"kv-utilization": 2.0}  # replaced, not merged
    assert out["cluster"]["rejected_requests"] == 0


@pytest.mark.parametrize("path", sorted((ROOT / "configs/policies").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_bundles_load_and_run(path):
    settings = load_policy_bundle(path)
    assert settings
    r = blis_fast.simulate(num_requests=20, num_instances=3, rate=20, **_flat(settings))
    assert r.cluster["arrived_requests"] == 20


def test_docs_example_bundle_parses(tmp_path):
    text = (ROOT / "docs/policies.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    s = load_policy_bundle(write(tmp_path, "doc.yaml", block))
    cfg = PolicyConfig(**s)
    assert cfg.admission == "token-bucket" and cfg.token_bucket_capacity == 200000
    assert cfg.token_bucket_refill_rate == 40000
    assert cfg.routing == "weighted"
    assert cfg.scorers() == {"prefix-affinity": 3.0, "queue-depth": 2.0, "kv-utilization": 2.0}
    assert cfg.priority == "slo-based" and cfg.slo_class_weights == [0, 0.5]
    assert cfg.scheduler == "priority-fcfs" and cfg.preemption_victim == "lowest-priority"
    assert cfg.snapshot_refresh_interval == 100000 and cfg.snapshot_intervals == {"queue_depth": 0}
    assert cfg.fitness_weights == FITNESS


def _flat(settings: dict) -> dict:
    """PolicyConfig field names -> flat setting names of blis_fast.simulate."""
    rename = {"admission": "admission_policy", "routing": "routing_policy", "priority": "priority_policy"}
    return {rename.get(k, k): v for k, v in settings.items()}


# ============================================================================ compile_policies


def test_compile_policies_layout():
    from blis_fast_kernels.schema import (
        N_SNAP,
        SNAPSHOT_FIELD_NAMES,
        AdmissionKind,
        PolicySlot,
        PriorityKind,
        RouteWeight,
        RoutingKind,
        SchedulerKind,
    )

    c = compile_policies(PolicyConfig(routing="weighted", routing_scorers={"kv-utilization": 2, "load-balance": 1},
                                      priority="inverted-slo", slo_class_weights=[1, -2], scheduler="sjf",
                                      scheduler_weights={"output_len": 3}, snapshot_refresh_interval=70,
                                      snapshot_intervals={"queue_depth": 5, "free_kv_blocks": 9},
                                      admission="token-bucket", token_bucket_capacity=12, token_bucket_refill_rate=3))
    kind = lambda slot: int(c.kinds[slot])  # noqa: E731
    row = c.params  # one parameter row per policy slot
    assert kind(PolicySlot.ROUTING) == RoutingKind.WEIGHTED and not c.uses_prefix_index
    rw = row[PolicySlot.ROUTING]
    assert rw[RouteWeight.KV_UTILIZATION] == 2 and rw[RouteWeight.LOAD_BALANCE] == 1
    assert rw[RouteWeight.QUEUE_DEPTH] == 0 and rw[RouteWeight.PREFIX_AFFINITY] == 0
    assert kind(PolicySlot.PRIORITY) == PriorityKind.AGE_AND_CLASS
    assert row[PolicySlot.PRIORITY, :3].tolist() == [-1e-6, -1.0, 2.0] and not row[PolicySlot.PRIORITY, 3:].any()
    assert c.scheduler_kind == kind(PolicySlot.SCHEDULER) == SchedulerKind.SORT
    assert row[PolicySlot.SCHEDULER, :4].tolist() == [0.0, 0.0, 1.0, 3.0]
    iv = dict(zip(SNAPSHOT_FIELD_NAMES, row[PolicySlot.SNAPSHOT, :N_SNAP].tolist()))
    assert iv == {"queue_depth": 5, "batch_size": 0, "kv_utilization": 70, "free_kv_blocks": 9,
                  "cache_hit_rate": 70, "pending": 0, "in_flight": 0}
    assert kind(PolicySlot.ADMISSION) == AdmissionKind.TOKEN_BUCKET
    assert row[PolicySlot.ADMISSION, :2].tolist() == [12.0, 3.0]
    d = compile_policies(PolicyConfig())
    assert d.scheduler_kind == SchedulerKind.FCFS and int(d.kinds[PolicySlot.ROUTING]) == RoutingKind.ROUND_ROBIN
    assert int(d.kinds[PolicySlot.PRIORITY]) == PriorityKind.CONSTANT  # no priority to compute
    assert compile_policies(PolicyConfig(routing="weighted")).uses_prefix_index  # default scorers include it
    assert compile_policies(PolicyConfig(routing="prefix-affinity")).uses_prefix_index


# ============================================================================ bad input


BAD_FLAGS = [
    # (id, args, substrings of the single error line)
    ("routing-x", ["--routing-policy", "x"], ["--routing-policy", "'x'"]),
    ("admission-x", ["--admission-policy", "x"], ["--admission-policy"]),
    ("priority-x", ["--priority-policy", "x"], ["--priority-policy"]),
    ("scheduler-x", ["--scheduler", "x"], ["--scheduler"]),
    ("victim-x", ["--preemption-victim", "x"], ["--preemption-victim"]),
    ("scorer-negative", ["--routing-policy", "weighted", "--routing-scorers", "queue-depth:-1"], ["--routing-scorers"]),
    ("scorer-nan", ["--routing-policy", "weighted", "--routing-scorers", "queue-depth:nan"], ["--routing-scorers"]),
    ("scorer-inf", ["--routing-scorers", "queue-depth:inf"], ["--routing-scorers"]),
    ("scorer-zero", ["--routing-scorers", "queue-depth:0"], ["--routing-scorers"]),
    ("scorer-unknown", ["--routing-scorers", "queue-dept:1"], ["--routing-scorers", "queue-dept"]),
    ("scorer-no-colon", ["--routing-scorers", "queue-depth"], ["--routing-scorers"]),
    ("scorer-twice", ["--routing-scorers", "queue-depth:1,queue-depth:2"], ["--routing-scorers"]),
    ("scorer-text", ["--routing-scorers", "queue-depth:abc"], ["--routing-scorers"]),
    ("fitness-unknown", ["--fitness-weights", "throughput:1,p98_ttft:1"], ["--fitness-weights", "p98_ttft"]),
    ("fitness-negative", ["--fitness-weights", "throughput:-1"], ["--fitness-weights"]),
    ("fitness-nan", ["--fitness-weights", "throughput:nan"], ["--fitness-weights"]),
    ("tb-capacity-negative", ["--token-bucket-capacity", "-5"], ["--token-bucket-capacity"]),
    ("tb-capacity-nan", ["--token-bucket-capacity", "nan"], ["--token-bucket-capacity"]),
    ("tb-refill-negative", ["--token-bucket-refill-rate", "-1"], ["--token-bucket-refill-rate"]),
    ("snapshot-negative", ["--snapshot-refresh-interval", "-1"], ["--snapshot-refresh-interval"]),
    ("sched-weights-unknown", ["--scheduler", "sort", "--scheduler-weights", "age:1"], ["--scheduler-weights"]),
    ("sched-weights-nan", ["--scheduler", "sort", "--scheduler-weights", "prompt_len:nan"], ["--scheduler-weights"]),
    ("slo-weights-text", ["--slo-class-weights", "a,b"], ["--slo-class-weights"]),
    ("prefix-capacity-0", ["--prefix-index-capacity", "0"], ["--prefix-index-capacity"]),
    ("admission-latency-negative", ["--admission-latency", "-1"], ["--admission-latency"]),
]

BAD_BUNDLES = [
    ("yaml-routing-type-x", "routing: {type: x}\n", ["routing.type", "'x'"]),
    ("yaml-routing-policy-x", "routing: {policy: x}\n", ["routing.type"]),
    ("yaml-typo-key", "routing: {tpye: weighted}\n", ["routing.tpye"]),
    ("yaml-unknown-section", "routng: {type: weighted}\n", ["routng"]),
    ("yaml-unknown-param", "routing: {type: weighted, params: {scorrers: {queue-depth: 1}}}\n",
     ["routing.params.scorrers"]),
    ("yaml-scorer-negative", "routing: {type: weighted, params: {scorers: {queue-depth: -1}}}\n",
     ["routing.scorers.queue-depth"]),
    ("yaml-scorer-nan", "routing:\n  policy: weighted\n  scorers:\n    - {name: queue-depth, weight: .nan}\n",
     ["routing.scorers"]),
    ("yaml-scorer-unknown", "routing: {type: weighted, params: {scorers: {queue-dept: 1}}}\n",
     ["routing.scorers", "queue-dept"]),
    ("yaml-scorer-bad-entry", "routing:\n  policy: weighted\n  scorers:\n    - {nme: queue-depth, weight: 1}\n",
     ["routing.scorers[0]"]),
    ("yaml-type-and-policy", "routing: {type: weighted, policy: weighted}\n", ["routing"]),
    ("yaml-tb-negative", "admission: {type: token-bucket, params: {capacity: -1}}\n", ["admission.params.capacity"]),
    ("yaml-blis-tb-negative", "admission: {policy: token-bucket, token_bucket_capacity: -1}\n",
     ["token_bucket_capacity"]),
    ("yaml-admission-x", "admission: {type: admit-some}\n", ["admission.type"]),
    ("yaml-priority-x", "priority: {type: slo}\n", ["priority.type"]),
    ("yaml-scheduler-x", "scheduler: sjff\n", ["scheduler.type", "sjff"]),
    ("yaml-victim-x", "preemption: {victim: first}\n", ["preemption.victim"]),
    ("yaml-fitness-key", "fitness: {weights: {throughput: 1, latency: 2}}\n", ["fitness", "latency"]),
    ("yaml-fitness-negative", "fitness: {weights: {throughput: -1}}\n", ["fitness"]),
    ("yaml-observability-key", "observability: {refresh: 5}\n", ["observability.refresh"]),
    ("yaml-observability-field", "observability: {fields: {kv_utilisation: 5}}\n", ["kv_utilisation"]),
    ("yaml-snapshot-negative", "observability: {snapshot_refresh_interval: -5}\n", ["snapshot_refresh_interval"]),
    ("yaml-slo-weights-nan", "priority: {type: slo-based, params: {slo_class_weights: [0, .nan]}}\n",
     ["slo_class_weights"]),
    ("yaml-malformed", "routing: {type: [\n", ["--policy-config"]),
    ("yaml-not-mapping", "- routing\n", ["bundle.yaml"]),
]


def _expect_one_line_error(capsys, args, needles):
    expect_cli_error(capsys, "run", "--num-requests", "3", *args, needles=needles)


@pytest.mark.parametrize("case_id, args, needles", BAD_FLAGS, ids=[c[0] for c in BAD_FLAGS])
def test_bad_policy_flag_one_line_exit_2(capsys, case_id, args, needles):
    _expect_one_line_error(capsys, args, needles)


@pytest.mark.parametrize("case_id, text, needles", BAD_BUNDLES, ids=[c[0] for c in BAD_BUNDLES])
def test_bad_policy_bundle_one_line_exit_2(tmp_path, capsys, case_id, text, needles):
    path = write(tmp_path, "bundle.yaml", text)
    _expect_one_line_error(capsys, ["--policy-config", path], needles)


def test_missing_bundle_file(tmp_path, capsys):
    _expect_one_line_error(capsys, ["--policy-config", tmp_path / "nope.yaml"], ["--policy-config", "nope.yaml"])


@pytest.mark.slow
def test_bad_policy_cli_subprocess():
    """The real console path: exit status 2 and one line, no traceback."""
    p = cli("run", "--routing-policy", "x", timeout=120)
    assert p.returncode == 2
    assert assert_one_error_line(p.stderr).startswith("error: --routing-policy")


@pytest.mark.parametrize("kw, field", [
    (dict(routing="x"), "policy.routing"),
    (dict(admission="x"), "policy.admission"),
    (dict(routing_scorers={"queue-depth": -1.0}), "policy.routing_scorers.queue-depth"),
    (dict(routing_scorers={"queue-depth": float("nan")}), "policy.routing_scorers.queue-depth"),
    (dict(routing_scorers={}), "policy.routing_scorers"),
    (dict(token_bucket_capacity=-1.0), "policy.token_bucket_capacity"),
    (dict(fitness_weights={"bogus": 1.0}), "policy.fitness_weights"),
    (dict(fitness_weights={}), "policy.fitness_weights"),
    (dict(slo_class_weights=[0.0, float("inf")]), "policy.slo_class_weights[1]"),
    (dict(snapshot_intervals={"queue_depth": -1}), "policy.snapshot_intervals.queue_depth"),
])
def test_policy_config_api_errors(kw, field):
    with pytest.raises(ConfigError) as ei:
        PolicyConfig(**kw)
    assert ei.value.field == field


def test_simulate_api_error_names_the_setting():
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(num_requests=3, routing_policy="x")
    assert "routing" in str(ei.value)
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(num_requests=3, routing_scorers="queue-depth:-2")
    assert "routing_scorers" in str(ei.value) or "routing-scorers" in str(ei.value)


@pytest.mark.parametrize("source", ["flag", "bundle"])
def test_bad_slo_class_weight_names_its_origin(tmp_path, capsys, source):
    if source == "flag":
        _expect_one_line_error(capsys, ["--slo-class-weights", "0,inf"], ["--slo-class-weights"])
    else:
        path = write(tmp_path, "bundle.yaml", "priority: {type: slo-based, params: {slo_class_weights: [0, .inf]}}\n")
        _expect_one_line_error(capsys, ["--policy-config", path], ["--policy-config"])


def test_bundle_key_with_a_newline_is_named_on_one_line():
    """The API's error (not only the CLI's, which joins lines) is one line: an odd key is quoted."""
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(num_requests=3, policy={"observability": {"re\nfresh": 5}})
    assert ei.value.field.startswith("observability.") and "\n" not in str(ei.value)
