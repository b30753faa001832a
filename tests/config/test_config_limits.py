"""Config-level limits (docs/limits.md): every section checks its fields on construction
with the shared checkers; simulation.max_memory accepts sizes; errors name the field."""

from __future__ import annotations

import pytest

from blis_fast.config.policy import PolicyConfig
from blis_fast.config.sim import DeploymentConfig, SimConfig, SimulationConfig, WorkloadConfig, build_config
from blis_fast.errors import ConfigError


@pytest.mark.parametrize("value, expected", [("4GB", 4 * 10**9), ("512MiB", 512 * 2**20), (2**31, 2**31),
                                             ("3G", 3 * 2**30)])
def test_max_memory_sizes(value, expected):
    assert build_config({"simulation": {"max_memory": value}}).simulation.max_memory == expected
    assert build_config({}, {"max_memory": value}).simulation.max_memory == expected


@pytest.mark.parametrize("cls, kwargs, field", [
    (WorkloadConfig, {"rate": 5e-324}, "workload.rate"),
    (WorkloadConfig, {"rate": "3"}, "workload.rate"),  # the API takes typed values
    (WorkloadConfig, {"num_requests": 10**8 + 1}, "workload.num_requests"),
    (WorkloadConfig, {"prefix_tokens": 2**31}, "workload.prefix_tokens"),
    (WorkloadConfig, {"type": ["chatbot"]}, "workload.type"),
    (DeploymentConfig, {"max_instances": 65537}, "deployment.max_instances"),
    (SimulationConfig, {"horizon": 2**62 + 1}, "simulation.horizon"),
    (SimulationConfig, {"max_events": 2**70}, "simulation.max_events"),
    (SimulationConfig, {"seed": 2**63}, "simulation.seed"),
    (SimulationConfig, {"max_memory": 10}, "simulation.max_memory"),
    (PolicyConfig, {"snapshot_refresh_interval": 2**53 + 1}, "policy.snapshot_refresh_interval"),
    (PolicyConfig, {"scheduler_weights": {"arrival": 1e101}}, "policy.scheduler_weights.arrival"),
    (PolicyConfig, {"routing_scorers": {"queue-depth": float("nan")}}, "policy.routing_scorers.queue-depth"),
    (PolicyConfig, {"preemption_victim": ["last"]}, "policy.preemption_victim"),
    (PolicyConfig, {"slo_class_weights": [1.0] * 64}, "policy.slo_class_weights"),
    (SimConfig, {"alpha_coeffs": [1e10, 0, 0]}, "alpha_coeffs[0]"),
    (SimConfig, {"model": "x" * 5000}, "model"),
])
def test_sections_check_their_fields(cls, kwargs, field):
    with pytest.raises(ConfigError) as ei:
        cls(**kwargs)
    assert ei.value.field == field
    assert "\n" not in str(ei.value) and len(str(ei.value)) < 300


def test_routing_weights_up_to_the_float_maximum_are_valid():
    p = PolicyConfig(routing="weighted", routing_scorers={"queue-depth": 1.7976931348623157e308})
    assert p.scorers()["queue-depth"] == 1.7976931348623157e308


def test_yaml_integral_floats_and_scientific_text():
    cfg = build_config({"num_requests": 1.0e3, "engine": {"max_num_seqs": "1e2"}})
    assert cfg.workload.num_requests == 1000 and cfg.engine.max_num_seqs == 100
    with pytest.raises(ConfigError, match="workload.num_requests"):
        build_config({"workload": {"num_requests": 1.5}})
