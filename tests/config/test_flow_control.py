"""Gateway flow control and request deadlines, the configuration layer (issue 25;
blis_fast.config.flow_control, the flow-control policy in blis_fast.config.policy and
blis_fast.policy.compile): the flags, the policy section and the bundle's ``flow_control:``
section, the compiled FLOW row, a workload spec's ``ttl_s`` / ``sheddable`` / ``retries``
and ``--request-ttl-s`` as the Workload's deadline columns, the config echo, and every
rule's one-line error naming the field, and the one refusal left: flow control or
deadlines with prefill/decode disaggregation or KV tiers (blis_fast.run.flow
check_flow_support).  What they do in a run is tests/run/test_flow_engine.py's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from blis_fast.adapters.core import SECTIONS, bundle_of_components
from blis_fast.config.flow_control import (
    MAX_RETRIES,
    ClientDeadlines,
    deadline_columns,
    resolve_deadlines,
)
from blis_fast.config.policy import PolicyConfig, bundle_to_settings
from blis_fast.config.sim import build_config, with_overrides
from blis_fast.errors import ConfigError, WorkloadError
from blis_fast.policy import compile_policies
from blis_fast.results.evaluation import TEMPLATE_WIDTH, _digest, policy_id, workload_id
from blis_fast.run.api import simulate
from blis_fast.run.resolve import build_workload, config_deadlines, with_deadlines
from blis_fast.workload.spec import parse_spec
from blis_fast_kernels import schema as S
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

F = S.FlowParam
ROOT = Path(__file__).resolve().parents[2]

# a small spec: an interactive class with a TTL and retries, a sheddable batch class, and a
# client overriding its class's TTL
SPEC = {
    "seed": 3, "rate": 5, "num_requests": 40,
    "slo_classes": {
        "interactive": {"ttft_ms": 300, "ttl_s": 20, "retries": {"max": 2, "backoff": {"base_s": 0.5, "factor": 3,
                                                                                         "jitter": 0.1}}},
        "batch": {"e2e_ms": 60000, "sheddable": True, "retries": 1},
    },
    "clients": [
        {"name": "chat", "slo_class": "interactive", "rate_fraction": 0.5, "prompt_tokens": 64, "output_tokens": 8},
        {"name": "jobs", "slo_class": "batch", "rate_fraction": 0.3, "prompt_tokens": 64, "output_tokens": 8},
        {"name": "agent", "slo_class": "interactive", "rate_fraction": 0.2, "prompt_tokens": 64, "output_tokens": 8,
         "ttl_s": 5, "retries": 0},
    ],
}


def write_spec(tmp_path, data, name: str = "spec.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(path)


def row(**columns) -> tuple[float, ...]:
    out = np.zeros(S.POLICY_WIDTH)
    for name, value in columns.items():
        out[getattr(F, name)] = value
    return tuple(out)


# ----------------------------------------------------------------------------- the policy


def test_without_flow_control_nothing_changes():
    cfg = build_config({})
    assert cfg.policy.flow_control == "never" and cfg.workload.request_ttl_s is None
    data = cfg.to_dict()  # (the results JSON's config echo: the keys it had before flow control)
    assert not {"flow_control", "dispatch_order", "gateway_fairness"} & set(data["policy"])
    assert not {k for k in data["policy"] if k.startswith("flow_")} and "request_ttl_s" not in data["workload"]
    compiled = compile_policies(cfg.policy)
    assert S.PolicySlot.FLOW == 7 and compiled.kinds.shape == (S.N_POLICY_SLOTS,) == (12,)  # (+ the program slots)
    assert compiled.kinds[S.PolicySlot.FLOW] == S.FlowDetector.NEVER and not compiled.params[S.PolicySlot.FLOW].any()
    # the policy id hashes the slots before AUTOSCALE then: every existing candidate keeps its id
    six = _digest([compiled.kinds[:6], compiled.params[:6, :TEMPLATE_WIDTH], cfg.policy.prefix_index_capacity])
    assert policy_id(compiled.kinds, compiled.params, cfg.policy.prefix_index_capacity) == six


def test_an_autoscaled_candidate_keeps_its_id():
    cfg = build_config({}, {"autoscaler": "saturation", "max_instances": "3"})
    c = compile_policies(cfg.policy)
    seven = _digest([c.kinds[:7], c.params[:7, :TEMPLATE_WIDTH], cfg.policy.prefix_index_capacity])
    assert policy_id(c.kinds, c.params, cfg.policy.prefix_index_capacity) == seven


@pytest.mark.parametrize("flags,kind,params", [
    ({"flow_control": "concurrency"}, S.FlowDetector.CONCURRENCY, row(CONCURRENCY_LIMIT=100)),
    ({"flow_control": "utilization"}, S.FlowDetector.UTILIZATION, row(QUEUE_THRESHOLD=5, KV_THRESHOLD=0.8)),
    ({"flow_control": "free-slot"}, S.FlowDetector.FREE_SLOT, row()),
    ({"flow_control": "concurrency", "flow_concurrency_limit": "7", "dispatch_order": "deadline",
      "gateway_fairness": "round-robin"}, S.FlowDetector.CONCURRENCY,
     row(CONCURRENCY_LIMIT=7, DISPATCH_ORDER=S.DispatchOrder.DEADLINE, FAIRNESS=S.Fairness.ROUND_ROBIN)),
    ({"flow_control": "utilization", "flow_queue_threshold": "2.5", "flow_kv_threshold": "0.9",
      "dispatch_order": "priority", "priority_policy": "slo-based"}, S.FlowDetector.UTILIZATION,
     row(QUEUE_THRESHOLD=2.5, KV_THRESHOLD=0.9, DISPATCH_ORDER=S.DispatchOrder.PRIORITY)),
])
def test_each_detector_compiles_to_its_columns(flags, kind, params):
    compiled = compile_policies(build_config({}, flags).policy)
    assert compiled.kinds[S.PolicySlot.FLOW] == kind
    assert tuple(compiled.params[S.PolicySlot.FLOW]) == params


def test_the_policy_id_covers_the_flow_control():
    ids = set()
    for flags in ({}, {"flow_control": "free-slot"}, {"flow_control": "concurrency"},
                  {"flow_control": "concurrency", "flow_concurrency_limit": "8"}):
        p = build_config({}, flags).policy
        c = compile_policies(p)
        ids.add(policy_id(c.kinds, c.params, p.prefix_index_capacity))
    assert len(ids) == 4


def test_yaml_flags_bundle_and_api_agree():
    want = (S.FlowDetector.UTILIZATION, row(QUEUE_THRESHOLD=3, KV_THRESHOLD=0.7, FAIRNESS=S.Fairness.ROUND_ROBIN))
    flags = build_config({}, {"flow_control": "utilization", "flow_queue_threshold": "3", "flow_kv_threshold": "0.7",
                              "gateway_fairness": "round-robin"})
    data = build_config({"policy": {"flow_control": "utilization", "flow_queue_threshold": 3, "flow_kv_threshold": 0.7,
                                    "gateway_fairness": "round-robin"}})
    bundle = build_config({}, policy_settings=bundle_to_settings({"flow_control": {
        "policy": "utilization", "params": {"queue_threshold": 3, "kv_threshold": 0.7, "fairness": "round-robin"}}}))
    api = PolicyConfig(flow_control="utilization", flow_queue_threshold=3, flow_kv_threshold=0.7,
                       gateway_fairness="round-robin")
    for policy in (flags.policy, data.policy, bundle.policy, api):
        c = compile_policies(policy)
        assert (c.kinds[S.PolicySlot.FLOW], tuple(c.params[S.PolicySlot.FLOW])) == want


def test_the_config_echo_round_trips():
    cfg = build_config({}, {"flow_control": "concurrency", "flow_concurrency_limit": "12", "request_ttl_s": "30"})
    again = build_config(cfg.to_dict())
    assert again.policy == cfg.policy and again.workload.request_ttl_s == 30


def test_the_adapters_search_the_flow_control_section():
    assert "flow_control" in SECTIONS
    bundle = bundle_of_components({"routing": "type: least-loaded",
                                   "flow_control": "policy: concurrency\nparams: {concurrency_limit: 4}"})
    settings = bundle_to_settings(bundle)
    assert settings["flow_control"] == "concurrency" and settings["flow_concurrency_limit"] == 4
    assert settings["flow_kv_threshold"] is None  # (the section replaces the whole flow control)


def test_a_later_layer_switching_the_detector_drops_the_files_parameters():
    data = {"policy": {"flow_control": "utilization", "flow_kv_threshold": 0.9}}
    flag = build_config(data, {"flow_control": "free-slot"})
    assert (flag.policy.flow_control, flag.policy.flow_kv_threshold) == ("free-slot", None)
    point = with_overrides(build_config(data), flow_control="concurrency")  # (a study's --set flow_control=...)
    assert (point.policy.flow_control, point.policy.flow_kv_threshold) == ("concurrency", None)
    with pytest.raises(ConfigError) as same_layer:
        build_config({"policy": {"flow_control": "free-slot", "flow_kv_threshold": 0.9}})
    assert same_layer.value.field == "policy.flow_kv_threshold"


# ----------------------------------------------------------------------------- deadlines


def test_spec_deadlines_resolve_per_client(tmp_path):
    cfg = build_config({}, {"workload_spec": write_spec(tmp_path, SPEC), "flow_control": "free-slot"})
    chat, jobs, agent = config_deadlines(cfg)
    assert (chat.ttl_us, chat.sheddable, chat.retries.max) == (20_000_000, False, 2)
    assert (chat.retries.base_s, chat.retries.factor, chat.retries.jitter) == (0.5, 3, 0.1)
    assert (jobs.ttl_us, jobs.sheddable, jobs.retries.max, jobs.retries.base_s) == (-1, True, 1, 1.0)
    assert (agent.ttl_us, agent.sheddable, agent.retries.max) == (5_000_000, False, 0)  # (its own replace its class's)
    # the run default fills only the TTLs nobody gave
    with_default = build_config({}, {"workload_spec": write_spec(tmp_path, SPEC), "flow_control": "free-slot",
                                     "request_ttl_s": "60"})
    assert [c.ttl_us for c in config_deadlines(with_default)] == [20_000_000, 60_000_000, 5_000_000]


def test_the_workload_carries_the_deadline_columns(tmp_path):
    cfg = build_config({}, {"workload_spec": write_spec(tmp_path, SPEC), "flow_control": "free-slot"})
    plain = build_workload(build_config({}, {"workload_spec": write_spec(tmp_path, name="plain.yaml", data={
        **SPEC, "slo_classes": {"interactive": {"ttft_ms": 300}, "batch": {"e2e_ms": 60000}},
        "clients": [{k: v for k, v in c.items() if k not in ("ttl_s", "retries")} for c in SPEC["clients"]]})}))
    assert not plain.has_deadlines and plain.ttl_us is None
    wl = build_workload(cfg)
    assert wl.has_deadlines and len(wl) == len(plain)
    client = wl.column("client")
    assert np.array_equal(wl.ttl_us, np.array([20_000_000, -1, 5_000_000])[client])
    assert np.array_equal(wl.sheddable, np.array([0, 1, 0], np.uint8)[client])
    assert np.array_equal(wl.max_retries, np.array([2, 1, 0], np.int32)[client])
    assert wl.retry_backoff.shape == (3, S.N_RETRY_BACKOFF)
    assert tuple(wl.retry_backoff[0]) == (500_000.0, 3.0, 0.1) and tuple(wl.retry_backoff[2]) == (0, 1, 0)  # (no retries)
    assert wl.first(5).ttl_us.shape == (5,)
    # the same requests otherwise: the columns change the workload's id, not its requests
    assert np.array_equal(wl.arrival_us, plain.arrival_us) and workload_id(wl) != workload_id(plain)


def test_a_run_default_ttl_covers_a_distribution():
    wl = build_workload(build_config({}, {"request_ttl_s": "2.5", "num_requests": "7"}))
    assert np.array_equal(wl.ttl_us, np.full(7, 2_500_000)) and not wl.sheddable.any() and not wl.max_retries.any()


def test_workload_validation_refuses_bad_deadline_columns():
    wl = build_workload(build_config({}, {"request_ttl_s": "1", "num_requests": "4"}))
    assert with_deadlines(wl, None) is wl
    with pytest.raises(WorkloadError, match="ttl_us"):
        replace(wl, ttl_us=np.zeros(4, np.int64)).validate()  # (0 µs: use -1 for none)
    with pytest.raises(WorkloadError, match="together"):
        replace(wl, retry_backoff=None).validate()
    with pytest.raises(WorkloadError, match="factor"):
        replace(wl, retry_backoff=np.array([[1.0, 0.5, 0.0]])).validate()
    # a hand-built workload cannot overflow the clock: a TTL beyond 10^6 s, or a backoff whose last
    # retry waits beyond 3600 s (base 3600 s x factor 10^15 would not fit an int64 of µs)
    with pytest.raises(WorkloadError, match="ttl_us"):
        replace(wl, ttl_us=np.full(4, 2**62, np.int64)).validate()
    with pytest.raises(WorkloadError, match="last retry") as exc:
        replace(wl, max_retries=np.full(4, 16, np.int32), retry_backoff=np.array([[3.6e9, 10.0, 0.0]])).validate()
    assert exc.value.field == "workload.retry_backoff"
    replace(wl, max_retries=np.full(4, 2, np.int32), retry_backoff=np.array([[1e6, 2.0, 0.5]])).validate()  # (fine)
    with pytest.raises(WorkloadError) as exc:
        deadline_columns([ClientDeadlines(-1, False, None)], np.array([0, 1], np.int32))
    assert exc.value.field == "workload.client"


# ----------------------------------------------------------------------------- refusals


def test_runs_with_flow_control_or_deadlines_run(tmp_path):
    spec = write_spec(tmp_path, _spec_with(slo_classes__batch__sheddable=False, slo_classes__batch__retries=0))
    for args in (["--flow-control", "utilization"], ["--request-ttl-s", "5"],
                 ["--workload-spec", spec, "--flow-control", "concurrency"], ["--workload-spec", spec]):
        code, out, err = cli_in_process("run", "--num-requests", "5", *args)
        assert code == 0 and "error" not in err, (args, err)


# (arguments after run --num-requests 5 that turn flow control or deadlines on, the field named)
FLOW_OR_DEADLINES = [(["--flow-control", "free-slot"], "flow_control"), (["--request-ttl-s", "5"], "workload.ttl_s")]
# (arguments, words of the refusal) of the deployments flow control does not cover yet
UNSUPPORTED = [(["--prefill-instances", "1", "--decode-instances", "1"], "prefill/decode disaggregation"),
               (["--kv-cpu-blocks", "1000"], "KV cache tiers")]


@pytest.mark.parametrize("deployment,words", UNSUPPORTED, ids=["pd", "kv-tiers"])
@pytest.mark.parametrize("flow,field", FLOW_OR_DEADLINES, ids=["flow-control", "ttl"])
def test_flow_control_and_deadlines_with_pd_or_kv_tiers_are_refused(deployment, words, flow, field):
    line = assert_clean_error(*cli_in_process("run", "--num-requests", "5", *deployment, *flow), needles=(words,))
    assert line.startswith(f"error: {field}: "), line
    api = {"--flow-control": "flow_control", "--request-ttl-s": "request_ttl_s", "--kv-cpu-blocks": "kv_cpu_blocks",
           "--prefill-instances": "prefill_instances", "--decode-instances": "decode_instances"}
    settings = {api[k]: v for k, v in zip((deployment + flow)[::2], (deployment + flow)[1::2])}
    with pytest.raises(ConfigError) as exc:
        simulate(num_requests=5, **settings)
    assert exc.value.field == field and words in exc.value.message, exc.value


def test_a_ready_workload_with_deadlines_runs_and_a_run_ttl_with_one_is_refused():
    wl = build_workload(build_config({}, {"request_ttl_s": "1", "num_requests": "4"}))
    assert simulate(workload=wl).state.loop[0]["injected"] == 4
    plain = build_workload(build_config({}, {"num_requests": "4"}))
    with pytest.raises(ConfigError, match="Workload passed in") as exc:  # (the TTL describes the workload to build)
        simulate(workload=plain, request_ttl_s=3)
    assert exc.value.field == "request_ttl_s"


# (arguments after run --num-requests 5, the field named, words)
CLI_REFUSALS = [
    (["--flow-control", "sometimes"], "--flow-control", "free-slot"),
    (["--flow-kv-threshold", "0.5"], "--flow-kv-threshold", "--flow-control utilization"),
    (["--flow-control", "concurrency", "--flow-queue-threshold", "3"], "--flow-queue-threshold", "utilization"),
    (["--dispatch-order", "deadline"], "--dispatch-order", "not of never"),
    (["--gateway-fairness", "round-robin"], "--gateway-fairness", "not of never"),
    (["--flow-control", "utilization", "--flow-kv-threshold", "1.5"], "--flow-kv-threshold", "(0, 1]"),
    (["--flow-control", "utilization", "--flow-queue-threshold", "0"], "--flow-queue-threshold", "(0, 1e+09]"),
    (["--flow-control", "concurrency", "--flow-concurrency-limit", "0"], "--flow-concurrency-limit", "[1, 1000000]"),
    (["--flow-control", "concurrency", "--flow-concurrency-limit", "1e30"], "--flow-concurrency-limit", "1000000"),
    (["--flow-control", "free-slot", "--dispatch-order", "priority"], "--dispatch-order", "priority constant"),
    (["--request-ttl-s", "-1"], "--request-ttl-s", "[1e-06, 1e+06]"),
    (["--request-ttl-s", "nan"], "--request-ttl-s", "[1e-06, 1e+06]"),
    (["--request-ttl-s", "1e300"], "--request-ttl-s", "[1e-06, 1e+06]"),
]


@pytest.mark.parametrize("args,field,words", CLI_REFUSALS, ids=[" ".join(a) for a, _, _ in CLI_REFUSALS])
def test_refused_from_the_command_line(args, field, words):
    line = assert_clean_error(*cli_in_process("run", "--num-requests", "5", *args), needles=(words,))
    assert line.startswith(f"error: {field}: "), line


API_REFUSALS = [
    (dict(flow_control="concurrency", flow_kv_threshold=0.5), "flow_kv_threshold", "utilization"),
    (dict(flow_control="utilization", flow_kv_threshold=float("nan")), "flow_kv_threshold", "(0, 1]"),
    (dict(request_ttl_s=0), "request_ttl_s", "[1e-06, 1e+06]"),
]


@pytest.mark.parametrize("settings,field,words", API_REFUSALS, ids=[f for _, f, _ in API_REFUSALS])
def test_refused_from_the_api(settings, field, words):
    with pytest.raises(ConfigError) as exc:
        simulate(num_requests=5, **settings)
    assert exc.value.field == field and words in exc.value.message, exc.value


def test_refused_from_a_config_file_and_a_bundle_file_on_the_command_line(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("policy: {flow_control: free-slot, flow_queue_threshold: 3}\n", encoding="utf-8")
    line = assert_clean_error(*cli_in_process("run", "--config", config), needles=("utilization",))
    assert line.startswith("error: policy.flow_queue_threshold: "), line
    bundle = tmp_path / "bundle.yaml"
    bundle.write_text("flow_control: {policy: concurrency, params: {concurrency_limit: -4}}\n", encoding="utf-8")
    line = assert_clean_error(*cli_in_process("run", "--num-requests", "5", "--policy-config", bundle),
                              needles=("[1, 1000000]",))
    assert "flow_concurrency_limit" in line.split(": ")[1], line


def test_refused_from_yaml_naming_the_path():
    with pytest.raises(ConfigError) as exc:
        build_config({"policy": {"flow_control": "free-slot", "flow_concurrency_limit": 3}})
    assert exc.value.field == "policy.flow_concurrency_limit" and "concurrency" in exc.value.message
    with pytest.raises(ConfigError) as exc:
        build_config({"workload": {"request_ttl_s": -2}})
    assert exc.value.field == "workload.request_ttl_s"


@pytest.mark.parametrize("section,path,words", [
    ({"policy": "sometimes"}, "flow_control.policy", "free-slot"),
    ({"policy": "free-slot", "params": {"kv_threshold": 0.5}}, "flow_control.params.kv_threshold", "utilization"),
    ({"policy": "concurrency", "params": {"burst": 3}}, "flow_control.params.burst", "unknown parameter"),
    ({"params": {"concurrency_limit": 3}}, "flow_control.policy", "missing"),
])
def test_a_bad_bundle_section_names_its_path(section, path, words):
    with pytest.raises(ConfigError) as exc:
        bundle_to_settings({"flow_control": section})
    assert exc.value.field == path and words in exc.value.message, exc.value


def _spec_with(**changes) -> dict:
    data = yaml.safe_load(yaml.safe_dump(SPEC))
    for path, value in changes.items():
        *keys, last = path.split("__")
        node = data
        for key in keys:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value
    return data


# (spec changes, the field named, words): parsing
SPEC_REFUSALS = [
    ({"slo_classes__interactive__ttl_s": -1}, "slo_classes.interactive.ttl_s", "[1e-06, 1e+06]"),
    ({"slo_classes__interactive__ttl_s": ".nan"}, "slo_classes.interactive.ttl_s", "[1e-06, 1e+06]"),
    ({"slo_classes__interactive__ttl_s": 1e12}, "slo_classes.interactive.ttl_s", "[1e-06, 1e+06]"),
    ({"clients__0__ttl_s": 0}, "clients[0].ttl_s", "[1e-06, 1e+06]"),
    ({"slo_classes__batch__sheddable": "maybe"}, "slo_classes.batch.sheddable", "true"),
    ({"clients__0__sheddable": True}, "clients[0].sheddable", "unknown key"),
    ({"slo_classes__batch__retries": MAX_RETRIES + 1}, "slo_classes.batch.retries", f"[0, {MAX_RETRIES}]"),
    ({"slo_classes__batch__retries": {"max": -1}}, "slo_classes.batch.retries.max", f"[0, {MAX_RETRIES}]"),
    ({"slo_classes__batch__retries": "twice"}, "slo_classes.batch.retries", f"[0, {MAX_RETRIES}]"),
    ({"slo_classes__batch__retries": {"backoff": {"base_s": 1}}}, "slo_classes.batch.retries.max", "required"),
    ({"slo_classes__batch__retries": {"max": 2, "backoff": {"factor": 0.5}}},
     "slo_classes.batch.retries.backoff.factor", "[1, 10]"),
    ({"slo_classes__batch__retries": {"max": 2, "backoff": {"jitter": 2}}},
     "slo_classes.batch.retries.backoff.jitter", "[0, 1]"),
    ({"slo_classes__batch__retries": {"max": 2, "backoff": {"base_s": -1}}},
     "slo_classes.batch.retries.backoff.base_s", "[0, 3600]"),
    ({"slo_classes__batch__retries": {"max": 16, "backoff": {"base_s": 10, "factor": 10}}},
     "slo_classes.batch.retries.backoff", "at most 3600 s"),
    ({"slo_classes__batch__retries": {"max": 2, "backoff": {"delay": 1}}},
     "slo_classes.batch.retries.backoff.delay", "unknown key"),
]


@pytest.mark.parametrize("changes,field,words", SPEC_REFUSALS, ids=[f for _, f, _ in SPEC_REFUSALS])
def test_a_bad_spec_names_its_path(changes, field, words):
    data = _spec_with(**changes)
    if isinstance(data["slo_classes"]["interactive"].get("ttl_s"), str):
        data["slo_classes"]["interactive"]["ttl_s"] = float("nan")
    with pytest.raises(WorkloadError) as exc:
        parse_spec(data)
    assert exc.value.field == field and words in exc.value.message, exc.value


def test_sheddable_without_flow_control_is_refused(tmp_path):
    spec = write_spec(tmp_path, SPEC)
    line = assert_clean_error(*cli_in_process("run", "--workload-spec", spec), needles=("--flow-control never",))
    assert line.startswith("error: slo_classes.batch.sheddable: "), line
    with pytest.raises(ConfigError) as exc:
        simulate(workload_spec=spec)
    assert exc.value.field == "slo_classes.batch.sheddable"


def test_retries_that_nothing_triggers_are_refused(tmp_path):
    data = _spec_with(slo_classes__batch__sheddable=False)
    spec = write_spec(tmp_path, data)
    line = assert_clean_error(*cli_in_process("run", "--workload-spec", spec), needles=("nothing triggers",))
    assert line.startswith("error: slo_classes.batch.retries: "), line
    # a run TTL triggers them: then the run goes ahead
    code, _, err = cli_in_process("run", "--workload-spec", spec, "--request-ttl-s", "30")
    assert code == 0 and "error" not in err, err
    # retries: 0 asks for none (and alone leaves the run without deadlines)
    quiet = {**SPEC, "slo_classes": {"interactive": {"retries": 0}, "batch": {}},
             "clients": [{k: v for k, v in c.items() if k not in ("ttl_s", "retries")} for c in SPEC["clients"]]}
    assert resolve_deadlines("never", None, parse_spec(quiet)) is None


def test_workload_generate_refuses_a_spec_with_deadlines(tmp_path):
    out = tmp_path / "trace.csv"
    line = assert_clean_error(*cli_in_process("workload", "generate", "--spec", write_spec(tmp_path, SPEC), "--out",
                                              out), needles=("rich trace",))
    assert line.startswith("error: slo_classes.batch.sheddable: ") and not out.exists(), line  # (keys sorted)
    only_client = {**SPEC, "slo_classes": {"interactive": {}, "batch": {}}}
    line = assert_clean_error(*cli_in_process("workload", "generate", "--spec", write_spec(tmp_path, only_client),
                                              "--out", out), needles=("rich trace",))
    assert line.startswith("error: clients[2].ttl_s: "), line


def test_the_workloads_page_example_parses():
    text = (ROOT / "docs" / "workloads.md").read_text(encoding="utf-8")
    section = text[text.index("### Deadlines, shedding and retries"):]
    block = section[section.index("```yaml\n") + len("```yaml\n"):section.index("```\n", section.index("```yaml"))]
    spec = parse_spec({"duration_s": 10, **yaml.safe_load(block)})
    agent, = resolve_deadlines("free-slot", None, spec)
    assert (agent.ttl_us, agent.retries.max, spec.class_deadlines["batch"].sheddable) == (5_000_000, 0, True)


def test_the_limits_page_example_resolves():
    text = (ROOT / "docs" / "limits.md").read_text(encoding="utf-8")
    section = text[text.index("## Flow control and deadlines: configuration"):]
    blocks = section.split("```yaml\n")[1:3]
    config, spec = (yaml.safe_load(block[:block.index("```")]) for block in blocks)
    cfg = build_config(config)
    per_client = resolve_deadlines(cfg.policy.flow_control, cfg.workload.request_ttl_s, parse_spec(spec))
    assert compile_policies(cfg.policy).kinds[S.PolicySlot.FLOW] == S.FlowDetector.UTILIZATION
    assert [c.ttl_us for c in per_client] == [30_000_000, 120_000_000]
    assert [c.sheddable for c in per_client] == [False, True]
    assert [c.retries.max for c in per_client] == [2, 1]
