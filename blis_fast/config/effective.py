"""Every accepted setting changes the run, or is rejected with the reason
(``check_effective``, called by ``blis_fast.config.sim.build_config``).

Settings the simulator does not model yet (pipeline and data parallelism, an autoscaled
pool, a seed for stochastic policies) are refused unless they hold their neutral value.
Parameters of a policy that is not selected (token-bucket sizes without token-bucket
admission, scorers without weighted routing, SLO-class weights with the constant priority)
are refused when given at the same layer as the policy choice or a later one (YAML <
policy bundle < flags / keywords): a flag that switches the policy of a file is fine, and
its now-unused parameters are only reported as a notice (``-v``).
"""

from __future__ import annotations

import logging
from dataclasses import fields
from typing import Callable

from blis_fast.errors import ConfigError

logger = logging.getLogger("blis_fast.config")

# layers, in the order build_config applies them
YAML, BUNDLE, FLAGS = 0, 1, 2

# policy parameter -> (policy choice, the choice it needs, how to say it)
POLICY_PARAMETERS = {
    "policy.token_bucket_capacity": ("policy.admission", "token-bucket",
                                     "admission token-bucket (--admission-policy token-bucket)"),
    "policy.token_bucket_refill_rate": ("policy.admission", "token-bucket",
                                        "admission token-bucket (--admission-policy token-bucket)"),
    "policy.routing_scorers": ("policy.routing", "weighted", "routing weighted (--routing-policy weighted)"),
    "policy.slo_class_weights": ("policy.priority", "!constant",
                                 "priority slo-based or inverted-slo (--priority-policy)"),
}


def check_effective(cfg, layer: dict[str, int], where: Callable[[str], str]) -> None:
    """Raise ConfigError naming the setting (as the user spelled it) if a given setting
    would change nothing.  ``layer`` maps each given path to the layer that set it."""
    e, d = cfg.engine, cfg.deployment
    if e.pp != 1:
        raise ConfigError(where("engine.pp"), f"pipeline parallelism is not modelled yet (the latency models and KV "
                                              f"budget are for one stage); only 1 is accepted, got {e.pp}")
    if e.dp != 1:
        raise ConfigError(where("engine.dp"), f"data parallelism is not modelled yet; simulate {e.dp} engine "
                                              f"replicas as --num-instances {e.dp * d.num_instances}, got dp={e.dp}")
    for name in ("min_instances", "max_instances"):
        value = getattr(d, name)
        if value is not None and value != d.num_instances:
            raise ConfigError(where(f"deployment.{name}"),
                              f"there is no autoscaler yet: the pool stays at num_instances ({d.num_instances}) for "
                              f"the whole run; leave it out or set it to {d.num_instances}, got {value}")
    if cfg.simulation.simulation_seed is not None:
        raise ConfigError(where("simulation.simulation_seed"),
                          "no policy draws random numbers yet: the run is fully determined by the workload seed "
                          "(--seed); leave it out")
    defaults = {f.name: f.default for f in fields(cfg.policy)}
    for path, (choice_path, needed, how) in POLICY_PARAMETERS.items():
        name = path.rpartition(".")[2]
        if path not in layer or getattr(cfg.policy, name) == defaults[name]:
            continue  # (a whole config passed back in -- SimConfig.to_dict() -- repeats the defaults)
        chosen = getattr(cfg.policy, choice_path.rpartition(".")[2])
        in_use = chosen != needed[1:] if needed.startswith("!") else chosen == needed
        if in_use:
            continue
        if layer.get(choice_path, -1) > layer[path]:  # a later layer switched the policy: fine
            logger.info("%s (from %s) has no effect with %s %s", path, where(path), choice_path, chosen)
            continue
        raise ConfigError(where(path), f"has no effect with {choice_path.rpartition('.')[2]} {chosen}; it needs {how}")
