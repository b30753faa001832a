"""Expression and tree policies in every slot, end to end (docs/policies.md, "Expression and
tree policies"): an expression restating a built-in template gives byte-identical results
(every request, every summary figure, every decision-trace record), programs run in
per-model and prefill routing, values that are not finite are given the slot's worst value
and counted, and bad programs are refused with one line from the API and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blis_fast
from blis_fast.errors import ConfigError
from blis_fast_kernels.kv.cache import kv_conserved
from blis_fast_kernels.schema import RequestState
from builders import ROOT, expect_cli_error, run_main

# three tenants, three SLO classes, a shared system prompt, and a KV cache small enough to preempt
SCENARIO = dict(workload_spec=str(ROOT / "configs/workloads/multi-tenant.yaml"), num_requests=400,
                num_instances=3, total_kv_blocks=700, max_num_seqs=24, trace_level="full", check_invariants=True)

# weighted routing with BLIS's default scorers (prefix-affinity 3, queue-depth 2, kv-utilization 2),
# written in the template's order of operations: Σ w·clamp01(scorer) / Σ w
CLAMP = "min(max({}, 0), 1)"
QUEUE_DEPTH = CLAMP.format("((max_load - load) / (max_load - min_load) if max_load > min_load else 1)")
KV = CLAMP.format("1 - kv_utilization")
LOAD_BALANCE = CLAMP.format("1 / (1 + load)")
AFFINITY = CLAMP.format("(hit_blocks / request_blocks if request_blocks > 0 else 0)")
WEIGHTED_DEFAULT = f"(2*{QUEUE_DEPTH} + 2*{KV} + 3*{AFFINITY}) / 7"
WEIGHTED_CUSTOM = f"(1.5*{QUEUE_DEPTH} + 0.25*{LOAD_BALANCE} + 4*{AFFINITY}) / 5.75"

SLO = dict(priority_policy="slo-based", slo_class_weights="3,1")  # age, and the SLO classes apart
RESTATEMENTS = {
    "least-loaded": (dict(routing_policy="least-loaded"), dict(routing_policy="expression", routing_program="-load")),
    "always-busiest": (dict(routing_policy="always-busiest"),
                       dict(routing_policy="expression", routing_program="load")),
    "weighted": (dict(routing_policy="weighted"), dict(routing_policy="expression", routing_program=WEIGHTED_DEFAULT)),
    "weighted-custom": (dict(routing_policy="weighted",
                             routing_scorers="queue-depth:1.5,load-balance:0.25,prefix-affinity:4"),
                        dict(routing_policy="expression", routing_program=WEIGHTED_CUSTOM)),
    "prefix-affinity": (dict(routing_policy="prefix-affinity"),
                        dict(routing_policy="expression", routing_program="hit_blocks if max_hit > 0 else -load")),
    "always-admit": (dict(admission_policy="always-admit"), dict(admission_policy="expression", admission_program="1")),
    "reject-all": (dict(admission_policy="reject-all"), dict(admission_policy="expression", admission_program="0")),
    "token-bucket": (dict(admission_policy="token-bucket", token_bucket_capacity=20000, token_bucket_refill_rate=4000),
                     dict(admission_policy="expression", admission_program="prompt_tokens <= bucket_tokens",
                          token_bucket_capacity=20000, token_bucket_refill_rate=4000)),
    "slo-based": (dict(priority_policy="slo-based", slo_class_weights="3,1", scheduler="priority-fcfs"),
                  dict(priority_policy="expression", scheduler="priority-fcfs",
                       priority_program="1e-6*age_us + (3 if slo_class == 0 else (1 if slo_class == 1 else 0))")),
    "inverted-slo": (dict(priority_policy="inverted-slo", slo_class_weights="3,1", scheduler="priority-fcfs"),
                     dict(priority_policy="expression", scheduler="priority-fcfs",
                          priority_program="-1e-6*age_us + (-3 if slo_class == 0 else (-1 if slo_class == 1 else 0))")),
    # fcfs keeps the queue's order: a stable sort by the place in it keeps it too
    "fcfs": (dict(scheduler="fcfs", **SLO), dict(scheduler="expression", scheduler_program="position", **SLO)),
    "constant": (dict(priority_policy="constant", scheduler="priority-fcfs"),
                 dict(priority_policy="expression", priority_program="0", scheduler="priority-fcfs")),
    "sjf": (dict(scheduler="sjf"), dict(scheduler="expression", scheduler_program="prompt_tokens")),
    "priority-fcfs": (dict(**SLO, scheduler="priority-fcfs"),
                      dict(**SLO, scheduler="expression", scheduler_program="-priority + 0")),
    "reverse-priority": (dict(**SLO, scheduler="reverse-priority"),
                         dict(**SLO, scheduler="expression", scheduler_program="priority + 0")),
    "sort": (dict(**SLO, scheduler="sort", scheduler_weights="priority:-2,output_len:0.01"),
             dict(**SLO, scheduler="expression",
                  scheduler_program="-2*priority + 0*arrival_us + 0*prompt_tokens + 0.01*output_tokens")),
    "lowest-priority": (dict(**SLO, preemption_victim="lowest-priority"),
                        dict(**SLO, preemption_victim="expression", victim_program="-priority")),
    "last": (dict(preemption_victim="last"), dict(preemption_victim="expression", victim_program="0")),
}


def comparable(result) -> dict:
    """What a restatement must leave unchanged: the results document but its config echo
    (which names the policy) and the program fault counts, the decision trace, the request table."""
    doc = result.results_document()
    doc["run"].pop("config")
    doc.pop("program_faults", None)
    trace = result.decision_table().to_pylist()
    for row in trace:  # an admission record's reason names the policy (always-admit, bucket, expression)
        if row["record"] == "admission":
            row.pop("reason")
    return {"doc": json.dumps(doc, allow_nan=False), "trace": trace, "reqs": result.state.reqs.tobytes()}


@pytest.mark.parametrize("name", list(RESTATEMENTS))
def test_restating_a_template_is_byte_identical(name):
    template, expression = RESTATEMENTS[name]
    a = blis_fast.simulate(**SCENARIO, **template)
    b = blis_fast.simulate(**SCENARIO, **expression)
    ca, cb = comparable(a), comparable(b)
    if name == "fcfs":  # fcfs sorts nothing: its scheduling records carry no sort key
        for row in cb["trace"]:
            row["sched_key"] = None
    assert ca["reqs"] == cb["reqs"]
    assert ca["trace"] == cb["trace"]
    assert ca["doc"] == cb["doc"]
    assert "program_faults" not in a.results_document()
    assert sum(b.cluster["program_faults"].values()) == 0


def test_the_scenario_exercises_what_the_restatements_check():
    """Routing choices differ between templates, requests are preempted, rejected by the
    bucket and reordered by priority -- so a restatement wired to the wrong branch fails."""
    base = blis_fast.simulate(**SCENARIO)
    assert base.cluster["preemption_count"] > 0
    bucket = blis_fast.simulate(**SCENARIO, **RESTATEMENTS["token-bucket"][0])
    assert 0 < bucket.cluster["rejected_requests"] < bucket.cluster["arrived_requests"]
    picks = {name: blis_fast.simulate(**SCENARIO, **RESTATEMENTS[name][0]).state.reqs["instance"].tobytes()
             for name in ("least-loaded", "weighted", "prefix-affinity", "always-busiest")}
    assert len(set(picks.values())) == 4
    for name in ("sjf", "priority-fcfs", "inverted-slo", "lowest-priority", "sort"):
        order = blis_fast.simulate(**SCENARIO, **RESTATEMENTS[name][0]).state.reqs["first_scheduled_us"]
        assert order.tobytes() != base.state.reqs["first_scheduled_us"].tobytes(), name


def test_a_nonlinear_routing_rule_changes_decisions_and_needs_the_prefix_index():
    r = blis_fast.simulate(**SCENARIO, routing_policy="expression",
                           routing_program="hit_blocks**2 - 0.3*queue/(1 + kv_free)")
    ll = blis_fast.simulate(**SCENARIO, routing_policy="least-loaded")
    assert r.state.reqs["instance"].tobytes() != ll.state.reqs["instance"].tobytes()
    assert r.state.settings[0]["prefix_index"] != 0
    assert r.cluster["completed_requests"] + r.cluster["still_in_flight"] > 0


def test_tree_policies_run_from_the_api():
    tree = {"feature": "max_hit", "threshold": 0, "left": "-load",
            "right": {"feature": "queue", "threshold": 6, "left": "hit_blocks", "right": "-load"}}
    r = blis_fast.simulate(**SCENARIO, routing_policy="tree", routing_program=tree)
    expr = blis_fast.simulate(**SCENARIO, routing_policy="expression",
                              routing_program="(-load if max_hit <= 0 else (hit_blocks if queue <= 6 else -load))")
    assert r.state.reqs["instance"].tobytes() == expr.state.reqs["instance"].tobytes()
    # as YAML text (the CLI's form)
    text = "{feature: max_hit, threshold: 0, left: -load, right: {feature: queue, threshold: 6, left: hit_blocks, " \
           "right: -load}}"
    assert blis_fast.simulate(**SCENARIO, routing_policy="tree", routing_program=text).state.reqs.tobytes() == \
        r.state.reqs.tobytes()


@pytest.mark.parametrize("settings, slot", [
    (dict(routing_policy="expression", routing_program="1e300 * 1e300 * load"), "routing"),
    (dict(admission_policy="expression", admission_program="prompt_tokens * 1e300 * 1e300"), "admission"),
    (dict(priority_policy="expression", priority_program="(exp(50) ** 4) ** 4 if slo_class == 0 else 1",
          scheduler="priority-fcfs"), "priority"),
])
def test_non_finite_values_take_the_worst_value_and_are_counted(settings, slot):
    r = blis_fast.simulate(**SCENARIO, **settings)
    faults = r.cluster["program_faults"]
    assert faults[slot] > 0
    assert all(v == 0 for k, v in faults.items() if k != slot)
    if slot == "admission":  # every request's value is inf: rejected
        assert r.cluster["rejected_requests"] == r.cluster["arrived_requests"]
    if slot == "routing":  # every score is inf -> -inf: ties to the lowest index, a request is still routed
        assert r.cluster["injected_requests"] > 0
        assert set(r.state.reqs["instance"][r.state.reqs["instance"] >= 0].tolist()) == {0}


def test_policy_bundle_forms(tmp_path):
    bundle = tmp_path / "policy.yaml"
    bundle.write_text("routing: {type: expression, score: \"-load\"}\n"
                      "admission: {type: expression, admit: \"prompt_tokens < 4000\"}\n"
                      "priority: {type: tree, tree: {feature: slo_class, threshold: 0, left: 2, right: 0}}\n"
                      "scheduler: {type: expression, key: \"-priority\"}\n"
                      "preemption: {victim: expression, evict: \"generated\"}\n")
    r = blis_fast.simulate(**SCENARIO, policy=str(bundle))
    p = r.setup.config.policy
    assert (p.routing, p.admission, p.priority, p.scheduler, p.preemption_victim) == (
        "expression", "expression", "tree", "expression", "expression")
    assert r.cluster["program_faults"] == dict(admission=0, routing=0, priority=0, scheduler=0, victim=0)
    assert 0 < r.cluster["rejected_requests"] < r.cluster["arrived_requests"]


@pytest.mark.parametrize("text, field, message", [
    ("routing: {type: expression, score: \"loda\"}", "routing.score", "did you mean load"),
    ("routing: {type: expression}", "policy.routing_program", "missing"),
    ("routing: {type: weighted, score: \"-load\"}", "routing.score", "applies only to type expression or tree"),
    ("routing: {type: expression, tree: {feature: load, threshold: 1, left: 1, right: 0}}", "routing.tree",
     "type expression takes score"),
    ("admission: {type: expression, admit: \"__import__('os')\"}", "admission.admit", "call of __import__"),
    ("scheduler: {type: expression, key: \"priority.real\"}", "scheduler.key", "attribute access"),
    ("preemption: {victim: tree, tree: [1, 2]}", "preemption.tree", "mapping"),
])
def test_bad_bundles_refused(tmp_path, text, field, message):
    bundle = tmp_path / "policy.yaml"
    bundle.write_text(text + "\n")
    with pytest.raises(ConfigError, match=message) as e:
        blis_fast.simulate(**SCENARIO, policy=str(bundle))
    assert e.value.field.endswith(field)


@pytest.mark.parametrize("settings, field, message", [
    (dict(routing_policy="least-loaded", routing_program="-load"), "routing_program", "has no effect"),
    (dict(routing_policy="expression"), "routing_program", "missing"),
    (dict(routing_policy="expression", routing_program=3), "routing_program", "string"),
    (dict(scheduler="expression", scheduler_program="prompt_tokens", scheduler_weights="priority:1"),
     "scheduler_weights", "apply only to scheduler sort"),
    (dict(priority_policy="expression", priority_program="1", slo_class_weights="1,2"), "slo_class_weights",
     "can read slo_class"),
    (dict(admission_policy="expression", admission_program="1", token_bucket_capacity=5),
     "token_bucket_capacity", "does not read bucket_tokens"),
])
def test_bad_settings_refused(settings, field, message):
    with pytest.raises(ConfigError, match=message) as e:
        blis_fast.simulate(**SCENARIO, **settings)
    assert field in e.value.field


def test_cli_runs_and_refuses(capsys):
    doc = run_main(capsys, "--num-requests", "60", "--num-instances", "2", "--routing-policy", "expression",
                   "--routing-program", "hit_blocks - 0.5*queue")
    assert doc["cluster"]["program_faults"] == {"routing": 0}
    expect_cli_error(capsys, "run", "--num-requests", "5", "--routing-policy", "expression", "--routing-program",
                     "load.__class__", needles=("--routing-program", "column 1: attribute access (x.y) is not allowed"))


def test_per_model_routing_programs():
    cfg = str(ROOT / "configs/examples/two-models.yaml")
    r = blis_fast.simulate(config=cfg, num_requests=200, routing_policy="least-loaded")
    per = blis_fast.simulate(config=cfg, num_requests=200, routing_per_model={
        m: {"type": "expression", "score": "-load"} for m in r.setup.served_models})
    assert per.state.reqs.tobytes() == r.state.reqs.tobytes()
    assert per.cluster["program_faults"] == {"routing": 0}
    np.testing.assert_array_equal(per.state.routing_kind, [5, 5])


# ============================================================================ the P/D decider, autoscaling, dispatch order

PD = dict(config=str(ROOT / "configs/examples/pd/2p6d.yaml"),
          workload_spec=str(ROOT / "configs/examples/pd/long-prompts.yaml"), num_requests=300)
AUTOSCALED = dict(num_requests=1500, rate=120, num_instances=1, min_instances=1, max_instances=6,
                  autoscale_interval_s=0.5, autoscale_metrics_delay_s=0.2, provisioning_delay_s=1.0,
                  loading_delay_s=1.0, check_invariants=True)
OVERLOAD = dict(workload_spec=str(ROOT / "configs/examples/flow-control/overload.yaml"), num_requests=1500,
                num_instances=2, flow_control="utilization", check_invariants=True)
GATEWAY = {k: v for k, v in OVERLOAD.items() if k != "flow_control"}  # (a flat setting would replace the bundle's)

BUNDLE_RESTATEMENTS = {
    "pd-always": (PD, {"pd": {"decider": "always"}}, {"pd": {"decider": "expression", "disaggregate": "1"}}),
    "pd-never": (PD, {"pd": {"decider": "never"}}, {"pd": {"decider": "expression", "disaggregate": "0"}}),
    "pd-prefix-threshold": (PD, {"pd": {"decider": "prefix-threshold", "threshold": 3000}},
                            {"pd": {"decider": "expression", "disaggregate": "uncached_tokens >= 3000"}}),
    "autoscale-threshold": (AUTOSCALED, {"autoscale": {"policy": "threshold", "signal": "in_flight", "up": 8,
                                                       "down": 2}},
                            {"autoscale": {"policy": "expression", "desired":
                                           "current + 1 if in_flight > 8 else (current - 1 if in_flight < 2 else "
                                           "current)"}}),
    "autoscale-target": (AUTOSCALED, {"autoscale": {"policy": "target", "signal": "waiting", "target": 3}},
                         {"autoscale": {"policy": "expression",
                                        "desired": "current * waiting / 3 if ready > 0 else current"}}),
    "autoscale-saturation": (AUTOSCALED, {"autoscale": {"policy": "saturation", "kv_up": 0.5, "kv_down": 0.2}},
                             {"autoscale": {"policy": "expression", "desired":
                                            "current + 1 if kv_demand > 0.5 else (current - 1 if kv_demand < 0.2 "
                                            "and kv_demand_fewer <= 0.5 else current)"}}),
    "autoscale-oscillator": (AUTOSCALED, {"autoscale": {"policy": "oscillator", "period_ticks": 2}},
                             {"autoscale": {"policy": "expression", "desired":
                                            "current + 1 if floor(ticks / 2) - 2*floor(ticks / 4) == 0 else "
                                            "current - 1"}}),
    "dispatch-fifo": (OVERLOAD, {"flow_control": {"policy": "utilization", "dispatch_order": "fifo"}},
                      {"flow_control": {"policy": "utilization", "dispatch_order": "expression", "dispatch_key": "0"}}),
    "dispatch-deadline": (OVERLOAD, {"flow_control": {"policy": "utilization", "dispatch_order": "deadline"}},
                          {"flow_control": {"policy": "utilization", "dispatch_order": "expression", "dispatch_key":
                                            "arrival_us + ttft_target_us if ttft_target_us >= 0 else "
                                            "4611686018427387904"}}),
    "dispatch-priority": (OVERLOAD, {"priority": {"type": "slo-based", "params": {"slo_class_weights": [3, 1]}},
                                     "flow_control": {"policy": "utilization", "dispatch_order": "priority"}},
                          {"priority": {"type": "slo-based", "params": {"slo_class_weights": [3, 1]}},
                           "flow_control": {"policy": "utilization", "dispatch_order": "expression", "dispatch_key":
                                            "1e-6*arrival_us - (3 if slo_class == 0 else (1 if slo_class == 1 "
                                            "else 0))"}}),
    # the saturation detectors: a value per ready instance, summed into total; saturated iff the test > 0
    "flow-concurrency": (GATEWAY, {"flow_control": {"policy": "concurrency", "concurrency_limit": 8}},
                         {"flow_control": {"policy": "expression", "instance": "max(0, 8 - in_flight)",
                                           "saturated": "total <= in_routing", "recheck": "concurrency"}}),
    "flow-utilization": (GATEWAY, {"flow_control": {"policy": "utilization", "queue_threshold": 4,
                                                     "kv_threshold": 0.8}},
                         {"flow_control": {"policy": "expression",
                                           "instance": "max((queue + routed) / 4, kv_utilization / 0.8)",
                                           "saturated": "(total + in_routing / 4) / instances >= 1",
                                           "recheck": "utilization"}}),
    "flow-free-slot": (GATEWAY, {"flow_control": {"policy": "free-slot"}},
                       {"flow_control": {"policy": "expression", "recheck": "free-slot",  # (saturated: the default)
                                         "instance": "queue == 0 and routed == 0 and slots_taken < max_num_seqs"}}),
    "flow-concurrency-shed": (dict(GATEWAY, workload_spec=str(ROOT / "configs/examples/flow-control/"
                                                                      "overload-shed.yaml")),
                              {"flow_control": {"policy": "concurrency", "concurrency_limit": 8,
                                                "dispatch_order": "deadline"}},
                              {"flow_control": {"policy": "expression", "instance": "max(0, 8 - in_flight)",
                                                "dispatch_order": "deadline"}}),
}


def scaling_free(result) -> dict:
    """``comparable`` for runs whose autoscaler may be a program: its tick log's signal is
    the program's value there (what it read), so the autoscale group is compared without it."""
    out = comparable(result)
    group = result.autoscale
    out["autoscale"] = None if group is None else json.dumps(
        {k: v for k, v in group.items() if k not in ("signal", "signal_name")}, sort_keys=True)
    return out


@pytest.mark.parametrize("name", list(BUNDLE_RESTATEMENTS))
def test_restating_a_template_of_the_other_slots_is_byte_identical(name):
    settings, template, expression = BUNDLE_RESTATEMENTS[name]
    a = blis_fast.simulate(**settings, policy=template)
    b = blis_fast.simulate(**settings, policy=expression)
    ca, cb = scaling_free(a), scaling_free(b)
    assert ca["reqs"] == cb["reqs"]
    assert ca["doc"] == cb["doc"]
    assert ca["autoscale"] == cb["autoscale"]
    assert sum(b.cluster["program_faults"].values()) == 0


def test_the_other_slots_scenarios_exercise_their_choices():
    """Each pair's template matters in its scenario: the restatements above would fail if
    the program were ignored."""
    def reqs(settings, policy):
        return blis_fast.simulate(**settings, policy=policy).state.reqs.tobytes()
    for group in (("pd-always", "pd-never", "pd-prefix-threshold"),
                  ("autoscale-threshold", "autoscale-target", "autoscale-saturation"),
                  ("dispatch-fifo", "dispatch-deadline"),
                  ("flow-concurrency", "flow-utilization", "flow-free-slot")):
        runs = {reqs(BUNDLE_RESTATEMENTS[n][0], BUNDLE_RESTATEMENTS[n][1]) for n in group}
        assert len(runs) == len(group), group
    for name in ("flow-concurrency", "flow-utilization", "flow-free-slot", "flow-concurrency-shed"):
        settings, template, _ = BUNDLE_RESTATEMENTS[name]
        gateway = blis_fast.simulate(**settings, policy=template).flow_control["models"]
        assert all(m["dispatched"] > 0 for m in gateway.values()), name  # (requests waited in the gateway)
        assert any(m["sheds"] > 0 for m in gateway.values()) == name.endswith("shed"), name


@pytest.mark.parametrize("name, tree_policy", [
    ("pd-prefix-threshold", {"pd": {"decider": "tree", "tree": {"feature": "uncached_tokens", "threshold": 2999,
                                                                "left": 0, "right": 1}}}),
    ("autoscale-threshold", {"autoscale": {"policy": "tree", "tree": {  # no ready instance (no signal): hold
        "feature": "ready", "threshold": 0, "left": "current",
        "right": {"feature": "in_flight", "threshold": 8, "right": "current + 1",
                  "left": {"feature": "in_flight", "threshold": 1.9999999999, "left": "current - 1",
                           "right": "current"}}}}}),
    ("dispatch-fifo", {"flow_control": {"policy": "utilization", "dispatch_order": "tree",
                                        "tree": {"feature": "slo_class", "threshold": 0, "left": 0, "right": 0}}}),
    ("flow-free-slot", {"flow_control": {"policy": "tree", "recheck": "free-slot", "instance": {
        "feature": "queue", "threshold": 0, "right": 0,
        "left": {"feature": "routed", "threshold": 0, "right": 0, "left": "slots_taken < max_num_seqs"}}}}),
    ("flow-concurrency", {"flow_control": {"policy": "tree", "instance": "{feature: in_flight, threshold: 8, "
                                                                      "left: 8 - in_flight, right: 0}",
                                           "saturated": {"value": "total <= in_routing"}}}),  # (a leaf)
])
def test_trees_in_the_other_slots(name, tree_policy):
    """A tree restates the template too (uncached >= 3000 is not <= 2999 for integers;
    in_flight, a mean over at most 6 instances, is < 2 iff <= 1.9999999999)."""
    settings, template, _ = BUNDLE_RESTATEMENTS[name]
    a = blis_fast.simulate(**settings, policy=template)
    b = blis_fast.simulate(**settings, policy=tree_policy)
    assert scaling_free(a)["reqs"] == scaling_free(b)["reqs"]


# ============================================================================ the expression detector's edges

SMALL = dict(num_requests=40, num_instances=2, rate=200, check_invariants=True)
DETECTOR = dict(flow_control="expression")


def test_a_detector_never_saturated_routes_as_without_flow_control():
    a = blis_fast.simulate(**SMALL)
    b = blis_fast.simulate(**SMALL, **DETECTOR, flow_instance_program="0", flow_saturated_program="0")
    assert a.state.reqs.tobytes() == b.state.reqs.tobytes()
    assert b.flow_control["models"] == {b.setup.served_models[0]: {"dispatched": 0, "sheds": 0, "depth_peak": 0}}


def test_a_detector_always_saturated_holds_every_request_in_the_gateway():
    r = blis_fast.simulate(**SMALL, **DETECTOR, flow_instance_program="1", flow_saturated_program="1")
    assert (r.state.reqs["state"] == RequestState.GATEWAY).all()
    assert r.cluster["completed_requests"] == 0
    assert r.flow_control["models"][r.setup.served_models[0]]["depth_peak"] == 40


def test_one_request_in_flight_serves_them_one_at_a_time():
    """``max(0, 1 - in_flight)`` on one instance: a request is released exactly when the
    step that completes the one before it ends (fifo; every one but the first waited in
    the gateway).  A token's time is its step's end + a2 (docs/semantics.md), so the last
    token of each trails the next one's routing by that one constant."""
    r = blis_fast.simulate(num_requests=12, num_instances=1, rate=400, check_invariants=True, **DETECTOR,
                           flow_instance_program="max(0, 1 - in_flight)")
    reqs = np.sort(r.state.reqs, order="arrival_us")
    assert (reqs["state"] == RequestState.COMPLETED).all()
    gap = reqs["last_token_us"][:-1] - reqs["routed_us"][1:]
    assert (gap == gap[0]).all() and 0 <= gap[0] < 10_000
    assert r.flow_control["models"][r.setup.served_models[0]]["dispatched"] == 11


@pytest.mark.parametrize("settings, slot", [
    (dict(flow_instance_program="1e300 * 1e300 * queue - 1e300 * 1e300 * queue"), "flow_instance"),
    (dict(flow_instance_program="1", flow_saturated_program="total * 1e300 * 1e300"), "flow_saturated"),
])
def test_a_detector_value_not_finite_is_saturated_and_counted(settings, slot):
    r = blis_fast.simulate(**SMALL, **DETECTOR, **settings)
    faults = r.cluster["program_faults"]
    assert faults[slot] > 0 and sum(faults.values()) == faults[slot]
    assert r.cluster["completed_requests"] == 0  # (held back: the detector's worst)


@pytest.mark.parametrize("settings, field, message", [
    (dict(flow_control="expression"), "flow_instance_program", "missing"),
    (dict(flow_control="concurrency", flow_instance_program="1"), "flow_instance_program",
     "parameter of flow control expression or tree"),
    (dict(flow_control="utilization", flow_recheck="free-slot"), "flow_recheck", "expression or tree"),
    (dict(flow_control="expression", flow_instance_program="1", flow_recheck="never"), "flow_recheck",
     "concurrency"),
    (dict(flow_control="expression", flow_instance_program="total"), "flow_instance_program", "unknown name"),
    (dict(flow_control="expression", flow_instance_program="1", flow_saturated_program="queue > 2"),
     "flow_saturated_program", "unknown name"),
    (dict(flow_control="expression", flow_instance_program="1", flow_saturated_program="{feature: total}"),
     "flow_saturated_program", "missing: left, right, threshold"),
    (dict(flow_control="concurrency", flow_per_model={"m": {"policy": "expression", "instance": "1"}}),
     "flow_per_model", "run-wide only"),
])
def test_bad_detectors_refused(settings, field, message):
    with pytest.raises(ConfigError, match=message) as e:
        blis_fast.simulate(**SMALL, **settings)
    assert field in e.value.field


def test_cli_runs_an_expression_detector_and_refuses_a_bad_one(capsys):
    doc = run_main(capsys, "--num-requests", "60", "--num-instances", "2", "--flow-control", "expression",
                   "--flow-instance-program", "max(0, 4 - in_flight)", "--flow-recheck", "concurrency")
    assert doc["cluster"]["program_faults"] == {"flow_instance": 0, "flow_saturated": 0}
    assert doc["flow_control"]["detector"] == "expression"
    expect_cli_error(capsys, "run", "--num-requests", "5", "--flow-control", "expression", "--flow-instance-program",
                     "in_flight.real", needles=("--flow-instance-program", "attribute access"))


INSTANCE_TERMS = ["in_flight", "routed", "queue", "running", "slots_taken", "max_num_seqs", "kv_utilization",
                  "kv_free_blocks", "stepping", "instances", "in_routing", "gateway_depth"]
SATURATION_TESTS = ["total <= in_routing", "largest <= 0", "smallest < 0", "total / instances < {k}",
                    "gateway_depth > {k} * instances", "1e300 * 1e300 * total"]


@settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(INSTANCE_TERMS), st.sampled_from(INSTANCE_TERMS), st.integers(-3, 12),
       st.sampled_from(SATURATION_TESTS), st.integers(0, 4), st.sampled_from(["concurrency", "utilization",
                                                                               "free-slot"]))
def test_random_detectors_keep_every_request_and_block(a, b, k, test, j, recheck):
    """Whatever the formulas, every request is accounted for (ended, or still held in the
    gateway at the end: nothing else is left in flight), KV blocks are conserved, and a
    request is never routed before it arrived."""
    r = blis_fast.simulate(workload_spec=GATEWAY["workload_spec"], num_requests=150, num_instances=2,
                           check_invariants=True, flow_control="expression", flow_recheck=recheck,
                           flow_instance_program=f"{k} - {a} + 0.5 * {b}", flow_saturated_program=test.format(k=j))
    s = r.state
    assert (s.inst["kv_allocated"] == 0).all() and all(kv_conserved(s, i) for i in range(len(s.inst)))
    assert (s.inst["batch_len"] == 0).all() and (s.inst["wq_len"] == 0).all()
    held = int((s.reqs["state"] == RequestState.GATEWAY).sum())
    assert held == int(s.loop[0]["gateway_depth"])
    c = r.cluster
    assert c["still_in_flight"] == held
    routed = s.reqs["routed_us"] >= 0
    assert (s.reqs["routed_us"][routed] >= s.reqs["arrival_us"][routed]).all()
