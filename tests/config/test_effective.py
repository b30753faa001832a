"""No silent no-ops (blis_fast.config.effective): every flag that used to be accepted and
change nothing -- --pp, --dp, --min/--max-instances, --simulation-seed, --routing-scorers
without weighted routing, token-bucket sizes without token-bucket admission, SLO-class
weights with the constant priority, a TP without a coefficient set silently switching
to the roofline model -- is refused with one line naming it (flags, YAML, keywords),
or, where it applies, changes the run."""

from __future__ import annotations

import pytest

import blis_fast
from blis_fast import ConfigError
from blis_fast.config.sim import build_config
from builders import assert_one_error_line, run_cli

REFUSED_FLAGS = [
    (["--pp", "2"], ["--pp", "pipeline parallelism is not modelled"]),
    (["--dp", "2"], ["--dp", "--num-instances 2"]),
    (["--min-instances", "1", "--num-instances", "2"], ["--min-instances", "no autoscaler"]),
    (["--max-instances", "4"], ["--max-instances", "no autoscaler"]),
    (["--simulation-seed", "7"], ["--simulation-seed", "--seed"]),
    (["--routing-scorers", "queue-depth:1"], ["--routing-scorers", "--routing-policy weighted"]),
    (["--routing-policy", "least-loaded", "--routing-scorers", "queue-depth:1"], ["--routing-scorers", "least-loaded"]),
    (["--token-bucket-capacity", "500"], ["--token-bucket-capacity", "--admission-policy token-bucket"]),
    (["--token-bucket-refill-rate", "5"], ["--token-bucket-refill-rate", "token-bucket"]),
    (["--slo-class-weights", "1,2"], ["--slo-class-weights", "--priority-policy"]),
    (["--tp", "8"], ["latency_model", "H100 TP=8", "--latency-model roofline", "auto"]),
]


@pytest.mark.parametrize("args,needles", REFUSED_FLAGS, ids=[a[0] for a, _ in REFUSED_FLAGS])
def test_flag_that_would_change_nothing_is_refused(capsys, args, needles):
    code, out, err = run_cli(capsys, "run", "--num-requests", "3", *args)
    assert code == 2 and out == ""
    assert_one_error_line(err, needles)


@pytest.mark.parametrize("yaml_data,field", [
    ({"engine": {"pp": 2}}, "engine.pp"),
    ({"engine": {"dp": 4}}, "engine.dp"),
    ({"deployment": {"num_instances": 2, "max_instances": 3}}, "deployment.max_instances"),
    ({"simulation": {"simulation_seed": 1}}, "simulation.simulation_seed"),
    ({"policy": {"routing_scorers": {"queue-depth": 1}}}, "policy.routing_scorers"),
    ({"policy": {"token_bucket_capacity": 5}}, "policy.token_bucket_capacity"),
    ({"routing_scorers": "queue-depth:1"}, "routing_scorers"),  # flat BLIS name at the top level
])
def test_yaml_equivalents_are_refused_naming_the_yaml_path(yaml_data, field):
    with pytest.raises(ConfigError) as ei:
        build_config(yaml_data)
    assert ei.value.field == field


def test_bundle_parameters_follow_the_bundles_own_choice():
    """A bundle's token-bucket sizes with its own always-admit are refused; a flag that
    switches a file's policy keeps the file's now-unused parameters (a notice, not an error)."""
    with pytest.raises(ConfigError) as ei:
        build_config({}, policy_settings={"admission": "always-admit", "token_bucket_capacity": 5.0})
    assert ei.value.field.startswith("--policy-config")
    cfg = build_config({}, {"admission_policy": "always-admit"},
                       policy_settings={"admission": "token-bucket", "token_bucket_capacity": 5.0})
    assert cfg.policy.admission == "always-admit"
    with pytest.raises(ConfigError):  # ... but not the other way round: the flag is the newer word
        build_config({}, {"token_bucket_capacity": 5}, policy_settings={"admission": "always-admit"})


def test_api_errors_name_the_keyword():
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(num_requests=3, pp=2)
    assert ei.value.field == "pp"
    with pytest.raises(ConfigError) as ei:
        blis_fast.simulate(num_requests=3, routing_scorers="queue-depth:1")
    assert ei.value.field == "routing_scorers"


def test_neutral_values_and_a_whole_config_passed_back_are_accepted():
    cfg = build_config({}, {"pp": 1, "dp": 1, "num_instances": 3, "min_instances": 3, "max_instances": 3})
    assert cfg.deployment.bounds() == (3, 3)
    again = build_config(cfg.to_dict())  # every default repeated, token-bucket sizes included
    assert again == cfg


def test_the_parameters_take_effect_where_they_apply():
    """Same workload; weighted routing with different scorers, token-bucket with another
    bucket size, and the roofline model (auto) at a TP without a set: each changes the run."""
    base = dict(num_requests=60, rate=40, num_instances=3, prompt_tokens=400, output_tokens=40)
    qd = blis_fast.simulate(**base, routing_policy="weighted", routing_scorers="queue-depth:1")
    kv = blis_fast.simulate(**base, routing_policy="weighted", routing_scorers="kv-utilization:1,load-balance:5")
    assert qd.state.reqs["instance"].tolist() != kv.state.reqs["instance"].tolist()
    default = blis_fast.simulate(**base, admission_policy="token-bucket")  # 10000 tokens, 1000/s: too small
    large = blis_fast.simulate(**base, admission_policy="token-bucket", token_bucket_capacity=1e7,
                               token_bucket_refill_rate=1e7)
    assert large.cluster["rejected_requests"] == 0 < default.cluster["rejected_requests"]
    auto = blis_fast.simulate(num_requests=3, tp=8, latency_model="auto")
    assert auto.cluster is not None and auto.summary()["run"]["latency_model"] == "roofline"
    assert blis_fast.simulate(num_requests=3, tp=2).summary()["run"]["latency_model"] == "blackbox"
