"""Every accepted setting changes the run, or is rejected with the reason
(``check_effective``, called by ``blis_fast.config.sim.build_config``).

Settings the simulator does not model yet (pipeline and data parallelism, a seed for
stochastic policies) are refused unless they hold their neutral value; a pool's autoscaling
settings (bounds other than its instance count, delays, drain, ...) are refused without an
autoscaler (``check_autoscale_settings``), and an autoscaler without a pool it can scale;
a flow-control detector's parameters without that detector (``policy.check_flow_control``),
a sheddable SLO class without flow control and retries nothing triggers
(``blis_fast.config.flow_control.resolve_deadlines``, once the spec is read).
Parameters of a policy that is not selected (token-bucket sizes without token-bucket
admission, scorers without weighted routing, SLO-class weights with the constant priority)
are refused when given at the same layer as the policy choice or a later one (YAML <
policy bundle < flags / keywords): a flag that switches the policy of a file is fine, and
its now-unused parameters are only reported as a notice (``-v``).

Workload settings follow the same rule against the workload source
(``workload_source``): a workload spec describes its own clients (rates, lengths, arrival
processes, prefixes), and a trace records its requests, so the settings of a generated
distribution are refused with them -- each with the way to get the intended effect
(``UNUSED_BY_SOURCE``).  A flag that switches the source of a YAML file
(``--workload-spec`` over a file's ``workload: {type: chatbot, rate: 20}``) leaves the
file's settings as a notice.  ``num_requests`` counts for every source when given, as in
the reference (blis_fast.run.resolve: a spec's cap, a trace's first N requests).  Under
``--compat blis-2026.02`` the refused settings that the reference accepts and ignores are
accepted with one ``CompatIgnoredWarning`` and reset to their defaults, so that the
reference's command lines run unchanged and give the run without them.

Settings of a config that was already checked (``blis_fast.config.sim.with_overrides``:
the studies' per-point configs) sit at the layer ``SETTLED``, below YAML: they are never
refused again, only the settings changed on top of them are checked.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import fields, replace
from typing import Callable

import numpy as np

from blis_fast.config.autoscale import autoscaled_pools, draws_delays
from blis_fast.config.disaggregation import PD_ENTRY_KEYS, PDSpec, unused_with_decider
from blis_fast.config.policy import (AUTOSCALER_PARAMETERS, AUTOSCALE_FIELDS, FLOW_CONTROL_FIELDS,
                                     FLOW_CONTROL_PARAMETERS)
from blis_fast.errors import ConfigError
from blis_fast_kernels import schema as S

logger = logging.getLogger("blis_fast.config")

# layers, in the order build_config applies them (SETTLED: taken from a config already checked)
SETTLED, YAML, BUNDLE, FLAGS = -1, 0, 1, 2

# policy parameter -> (policy choice, the choice it needs, how to say it)
POLICY_PARAMETERS = {
    # (an admission program reads the bucket as bucket_tokens: config.policy.check_programs)
    "policy.token_bucket_capacity": ("policy.admission", "token-bucket|expression|tree",
                                     "admission token-bucket (--admission-policy token-bucket)"),
    "policy.token_bucket_refill_rate": ("policy.admission", "token-bucket|expression|tree",
                                        "admission token-bucket (--admission-policy token-bucket)"),
    "policy.routing_scorers": ("policy.routing", "weighted", "routing weighted (--routing-policy weighted)"),
    "policy.slo_class_weights": ("policy.priority", "!constant",
                                 "priority slo-based or inverted-slo (--priority-policy)"),
    # a program: with its slot's policy expression or tree ("|": any of them)
    **{f"policy.{program}": (f"policy.{kind}", "expression|tree", f"{kind} expression or tree ({how})")
       for kind, program, how in (("admission", "admission_program", "--admission-policy expression"),
                                  ("routing", "routing_program", "--routing-policy expression"),
                                  ("priority", "priority_program", "--priority-policy expression"),
                                  ("scheduler", "scheduler_program", "--scheduler expression"),
                                  ("preemption_victim", "victim_program", "--preemption-victim expression"),
                                  ("autoscaler", "autoscale_program", "--autoscaler expression"),
                                  ("dispatch_order", "dispatch_program", "--dispatch-order expression"),
                                  ("pd_decider", "pd_program", "a policy bundle's pd: {decider: expression}"),
                                  ("flow_control", "flow_instance_program", "--flow-control expression"),
                                  ("flow_control", "flow_saturated_program", "--flow-control expression"))},
    "policy.flow_recheck": ("policy.flow_control", "expression|tree",
                            "flow control expression or tree (--flow-control expression)"),
}


SPEC, TRACE, DISTRIBUTION = "spec", "trace", "distribution"
SOURCE_NAMES = {SPEC: "a workload spec (--workload-spec)", TRACE: "a trace (--workload traces)",
                DISTRIBUTION: "a generated distribution (--workload distribution or a preset)"}

_SPEC_LENGTHS = ("the spec's clients draw their own lengths: set clients[i].prompt_tokens / output_tokens in the "
                 "spec (docs/workloads.md)")
_TRACE_LENGTHS = "a trace records every request's prompt and output; replay another trace"
_SPEC_LENGTH_PATHS = {f"workload.{kind}_tokens{part}": (_SPEC_LENGTHS, _TRACE_LENGTHS)
                      for kind in ("prompt", "output") for part in ("", "_stdev", "_min", "_max")}

# setting -> {workload source that does not use it: why, and how to get the intended effect}
UNUSED_BY_SOURCE: dict[str, dict[str, str]] = {
    "workload.type": {
        SPEC: "the spec replaces the workload type; leave --workload out (or drop --workload-spec to run the "
              "type)",
    },
    "workload.traces_filepath": {
        SPEC: "the spec replaces the trace; give one of them (a spec can replay trace timestamps: a client "
              "with arrival: {type: trace})",
        DISTRIBUTION: "a trace is read only with --workload traces; add it to replay the file",
    },
    "workload.rate": {
        SPEC: "the spec's clients set their own rates; scale them all with --rate-scale (or edit the spec's "
              "rate and clients[i].rate)",
        TRACE: "a trace records its arrival times; to vary the load, generate the requests from a workload "
               "spec (--workload-spec with --rate-scale)",
    },
    "workload.arrival": {
        SPEC: "each client of the spec has its own arrival process (clients[i].arrival)",
        TRACE: "a trace records its arrival times",
    },
    "workload.prefix_tokens": {
        SPEC: "shared prefixes come from the spec's prefix_groups and clients[i].prefix",
        TRACE: "a trace records its prompts, shared prefixes included",
    },
    **{path: {SPEC: spec_why, TRACE: trace_why} for path, (spec_why, trace_why) in _SPEC_LENGTH_PATHS.items()},
    "workload.rate_scale": {
        TRACE: "a trace records its arrival times; to vary the load, generate the requests from a workload "
               "spec (--workload-spec with --rate-scale)",
    },
    "simulation.seed": {
        TRACE: "a trace records its requests, so nothing is drawn at random; leave --seed out (blis-fast "
               "workload generate --seed writes a trace of a spec with another seed)",
    },
}


# every source uses it when given (as the reference does): it generates that many requests from a
# distribution, replaces a spec's num_requests, replays a trace's first N requests
NUM_REQUESTS = "workload.num_requests"

# settings of blis-fast's own, which no reference command line holds: refused in compat mode too
NOT_REFERENCE_FLAGS = ("workload.rate_scale",)

# the settings that describe the workload to build: a Workload passed in ready-made
# (blis_fast.simulate(workload=...)) uses none of them
WORKLOAD_SETTINGS = tuple(p for p in UNUSED_BY_SOURCE if p.startswith("workload.")) + (
    NUM_REQUESTS, "workload.spec_filepath", "workload.request_ttl_s")


class CompatIgnoredWarning(UserWarning):
    """Settings a workload source does not use, accepted and ignored under ``--compat
    blis-2026.02`` because the reference accepts them (the CLI prints the message as one
    line on stderr once the command succeeds)."""


def workload_source(workload) -> str:
    """Where a WorkloadConfig's requests come from: SPEC (a workload spec file, whatever
    the type says), TRACE (--workload traces) or DISTRIBUTION (BLIS's distribution or a
    preset)."""
    if workload.spec_filepath:
        return SPEC
    return TRACE if workload.type == "traces" else DISTRIBUTION


def _source_choice(source: str) -> str:
    """The setting that picks a workload source."""
    return "workload.spec_filepath" if source == SPEC else "workload.type"


def _given(path: str, value, default, layer: dict[str, int]) -> bool:
    """A setting counts as given when set explicitly (flags / keywords: whatever its value)
    or to something other than its default (a whole config passed back in -- to_dict() --
    repeats the defaults)."""
    if layer.get(path, SETTLED) == SETTLED:
        return False
    return layer[path] == FLAGS or value != default


def check_workload_source(cfg, layer: dict[str, int], where: Callable[[str], str]):
    """Refuse a given workload setting that the config's workload source does not use
    (``UNUSED_BY_SOURCE``), naming it and saying how to get the intended effect.  Returns
    the config to run: under ``--compat blis-2026.02`` such settings are accepted, as the
    reference accepts them, and reset to their defaults (the run is exactly the run
    without them) with one ``CompatIgnoredWarning`` naming them all; a ``num_requests``
    left over from the source a later layer switched away from is dropped."""
    source = workload_source(cfg.workload)
    sections = {"workload": cfg.workload, "simulation": cfg.simulation}
    defaults = {f"{name}.{f.name}": f.default for name, obj in sections.items() for f in fields(obj)}
    choice = _source_choice(source)
    ignored = []
    for path, unused in UNUSED_BY_SOURCE.items():
        section, _, name = path.partition(".")
        value = getattr(sections[section], name)
        if source not in unused or not _given(path, value, defaults[path], layer):
            continue
        if layer.get(choice, SETTLED) > layer[path]:  # a later layer switched the source: fine
            logger.info("%s (from %s) has no effect with %s", path, where(path), SOURCE_NAMES[source])
            continue
        if cfg.simulation.compat is not None and path not in NOT_REFERENCE_FLAGS:
            ignored.append(path)
            continue
        raise ConfigError(where(path), f"has no effect with {SOURCE_NAMES[source]}: {unused[source]}")
    reset = {path: defaults[path] for path in ignored}
    if source != DISTRIBUTION and cfg.workload.num_requests is not None \
            and layer.get(NUM_REQUESTS, SETTLED) < layer.get(choice, SETTLED):
        # the length of the distribution a later layer replaced (a file's, or a checked config's 100)
        logger.info("%s (from %s) has no effect with %s", NUM_REQUESTS, where(NUM_REQUESTS), SOURCE_NAMES[source])
        reset[NUM_REQUESTS] = None
    if ignored:
        flags = [where(path) for path in ignored]
        verb = "has" if len(flags) == 1 else "have"
        warnings.warn(CompatIgnoredWarning(
            f"blis-fast: warning: {', '.join(flags)} {verb} no effect with {SOURCE_NAMES[source]} (ignored, as the "
            f"reference does under --compat {cfg.simulation.compat})"), stacklevel=2)
    if not reset:
        return cfg
    changed = {}
    for section in sections:
        values = {path.partition(".")[2]: v for path, v in reset.items() if path.startswith(section + ".")}
        if values:
            changed[section] = replace(sections[section], **values)
    return replace(cfg, **changed)


def check_class_weights(cfg, workload) -> None:
    """Refuse SLO-class weights on a workload whose requests are all in one SLO class (a
    distribution, a preset, a BLIS trace, a spec or rich trace with one class): the weight
    shifts every request's priority alike and changes no order.  Checked once the
    workload the config describes is built (its classes are known then)."""
    if not cfg.policy.slo_class_weights or cfg.policy.priority == "constant":
        return  # (constant: refused by check_effective)
    classes = workload.slo_class
    if classes is not None and (len(classes) == 0 or (classes != classes[0]).any()):
        return  # several classes (or no request at all)
    raise ConfigError("slo_class_weights", "has no effect: every request of this workload is in one SLO class, so "
                                           "the weights shift every priority alike; SLO classes come from a "
                                           "workload spec's slo_classes (or a rich trace written from one)")


def check_store_mode(cfg, setup, workload) -> None:
    """Refuse ``kv_store: all`` on a workload none of whose generated blocks another request
    sends again (no follow-up turn re-sends an answer): the mode stores exactly those blocks
    beyond what prompt-only stores, so it would change nothing.  Checked once the workload
    is built (its content is known then)."""
    stores_all = [i for i, d in enumerate(setup.deployments)
                  if any(p.kv_tiers is not None and p.kv_tiers.store_all for p in d.pools)]
    if not stores_all:
        return
    keys, offsets = workload.block_keys, workload.key_offsets
    counts = np.diff(offsets)
    bs = workload.request_block_sizes()
    prompt = np.minimum(np.asarray(workload.prompt_len, np.int64) // bs, counts)  # each request's prompt keys
    # key positions of the blocks holding a generated token: [offset + prompt keys, next offset) of each request
    marks = np.zeros(len(keys) + 1, np.int64)
    np.add.at(marks, offsets[:-1] + prompt, 1)
    np.add.at(marks, offsets[1:], -1)
    generated = np.cumsum(marks[:-1]) > 0
    if generated.any() and np.isin(keys[generated], keys[~generated]).any():
        return
    field = "kv_store" if cfg.deployments is None else f"deployments[{stores_all[0]}].kv_store"
    raise ConfigError(field, "has no effect: store all also stores the blocks holding generated tokens, and no "
                             "request of this workload sends another's answer again (no multi-turn session); leave "
                             "it at prompt-only, or use a workload spec with sessions")


SEED_UNUSED = ("nothing in this run draws random numbers (only an autoscaler's delays given as mean:M,std:S and "
               "retries with a backoff jitter do): the run is fully determined by the workload seed (--seed); leave "
               "it out")


def check_seed_used(cfg, workload) -> None:
    """Refuse ``simulation.simulation_seed`` in a run that draws nothing: no autoscaler delay
    with a std and no retry backoff with a jitter (``workload.retry_backoff`` of the clients
    that retry)."""
    if cfg.simulation.simulation_seed is None or draws_delays(cfg):
        return
    if workload.has_deadlines and len(workload):
        clients = np.unique(workload.column("client")[workload.max_retries > 0])
        if np.any(workload.retry_backoff[clients, S.RetryBackoff.JITTER] > 0):
            return
    raise ConfigError("simulation_seed", SEED_UNUSED)


def check_effective(cfg, layer: dict[str, int], where: Callable[[str], str]):
    """Raise ConfigError naming the setting (as the user spelled it) if a given setting
    would change nothing.  ``layer`` maps each given path to the layer that set it.
    Returns the config to run (``check_workload_source``)."""
    e, d = cfg.engine, cfg.deployment
    if e.pp != 1:
        raise ConfigError(where("engine.pp"), f"pipeline parallelism is not modelled yet (the latency models and KV "
                                              f"budget are for one stage); only 1 is accepted, got {e.pp}")
    if e.dp != 1:
        raise ConfigError(where("engine.dp"), f"data parallelism is not modelled yet; simulate {e.dp} engine "
                                              f"replicas as --num-instances {e.dp * d.num_instances}, got dp={e.dp}")
    check_autoscale_settings(cfg, layer, where)
    if cfg.simulation.simulation_seed is not None and not draws_delays(cfg) and not cfg.workload.spec_filepath:
        # (a workload spec's retries may draw their jitter: checked once the workload is built, check_seed_used)
        raise ConfigError(where("simulation.simulation_seed"), SEED_UNUSED)
    defaults = {f.name: f.default for f in fields(cfg.policy)}
    for path, (choice_path, needed, how) in POLICY_PARAMETERS.items():
        name = path.rpartition(".")[2]
        if layer.get(path, SETTLED) == SETTLED or getattr(cfg.policy, name) == defaults[name]:
            continue  # (a whole config passed back in -- SimConfig.to_dict() -- repeats the defaults)
        chosen = getattr(cfg.policy, choice_path.rpartition(".")[2])
        in_use = chosen != needed[1:] if needed.startswith("!") else chosen in needed.split("|")
        if in_use:
            continue
        if layer.get(choice_path, SETTLED) > layer[path]:  # a later layer switched the policy: fine
            logger.info("%s (from %s) has no effect with %s %s", path, where(path), choice_path, chosen)
            continue
        raise ConfigError(where(path), f"has no effect with {choice_path.rpartition('.')[2]} {chosen}; it needs {how}")
    check_pd_settings(cfg, layer, where)
    return check_workload_source(cfg, layer, where)


def check_pd_settings(cfg, layer: dict[str, int], where: Callable[[str], str]) -> None:
    """Refuse a P/D setting of the ``pd`` section that the decider in force does not read
    (the threshold without prefix-threshold; any with never), given at the decider's
    layer or a later one; a later layer that switched the decider leaves it as a notice."""
    pd = cfg.pd
    if not pd.pools:
        return  # (refused without pools: SimConfig)
    decider = pd.decider or PDSpec().decider
    for name in pd.given():
        path = f"pd.{name}"
        why = unused_with_decider(PD_ENTRY_KEYS[name].split(".")[1], decider)
        if why is None or name == "decider" or layer.get(path, SETTLED) == SETTLED:
            continue
        if layer.get("pd.decider", SETTLED) > layer[path]:  # a later layer switched the decider: fine
            logger.info("%s (from %s) has no effect with decider %s", path, where(path), decider)
            continue
        raise ConfigError(where(path), why)


_AUTOSCALERS_TEXT = "--autoscaler threshold, target, saturation or oscillator (policy.autoscaler)"


def check_autoscale_settings(cfg, layer: dict[str, int], where: Callable[[str], str]) -> None:
    """A pool's autoscaling settings need an autoscaler: without one (``none``) the pool
    keeps its instances, so its bounds (other than its count), delays, drain, ... are
    refused naming the first one given, with the remedy.  An autoscaler needs a pool
    whose bounds let it change (else it changes nothing)."""
    deployments = cfg.deployment_list()
    pools = autoscaled_pools(deployments)
    if cfg.deployments is None:  # (the shorthand: named as its flags / section keys)
        given = [f"deployment.{name}" for name in ("min_instances", "max_instances")
                 if getattr(cfg.deployment, name) not in (None, cfg.deployment.num_instances)]
        given += [f"autoscale.{name}" for name in cfg.autoscale.given()]
        names = [where(path) for path in given]
    else:
        names = [prefix + spec.first_effective_key(initial)
                 for prefix, spec, initial in pools if not spec.neutral(initial)]  # (equal bounds: as the flags)
    if cfg.policy.autoscaler == "none":
        if names:
            raise ConfigError(names[0], f"has no effect with no autoscaler (policy.autoscaler none): the pool keeps "
                                        f"its instances for the whole run; add {_AUTOSCALERS_TEXT}, or leave it out")
        return
    if not any(lo < hi for lo, hi in (spec.bounds(initial) for _, spec, initial in pools)):
        if cfg.deployments is None and not cfg.pd.pools:
            how = "--min-instances / --max-instances (deployment.min_instances, max_instances)"
        else:  # (the pd section's pools scale only from a deployments: entry)
            how = "deployments[i].min_instances / max_instances, or a pool's (deployments[i].decode.max_instances)"
        raise ConfigError(where("policy.autoscaler"), f"has no pool to scale: every pool's bounds equal its instance "
                                                      f"count; give {how} around it")


# policy slots whose policies have parameters of their own: the field choosing the policy ->
# (policy -> its parameter fields, every parameter field, what the messages call it)
SLOT_PARAMETERS = {
    "autoscaler": (AUTOSCALER_PARAMETERS, AUTOSCALE_FIELDS, "autoscaler"),
    "flow_control": (FLOW_CONTROL_PARAMETERS, FLOW_CONTROL_FIELDS, "flow control"),
}


def drop_switched_slot_parameters(nested: dict, layer: dict[str, int], where: Callable[[str], str]) -> None:
    """A parameter of an autoscaler or a flow control (``policy.autoscale_up``,
    ``policy.flow_kv_threshold``, ...) set at an earlier layer than the policy choice that
    does not read it -- a flag, a bundle or a study point switching the policy of a file --
    is dropped from ``nested`` (build_config's settings by path) with a notice, as a
    switched policy's parameters are (module docstring); given at the choice's layer or a
    later one, it stays and PolicyConfig refuses it."""
    for choice, (parameters, names, what) in SLOT_PARAMETERS.items():
        chosen = nested.get(f"policy.{choice}")
        if not isinstance(chosen, str) or chosen not in parameters:
            continue  # (none switched, or a bad value: the policy section names it)
        for name in names:
            path = f"policy.{name}"
            if nested.get(path) is None or name in parameters[chosen]:
                continue
            if layer.get(f"policy.{choice}", SETTLED) > layer.get(path, SETTLED):
                logger.info("%s (from %s) has no effect with %s %s", path, where(path), what, chosen)
                del nested[path]
