"""Every setting flag of ``blis-fast run`` on another command, without repeating them.

``@with_run_flags`` gives a command the options of ``run`` that describe a simulation
(``--config``, ``--policy-config`` and every flat setting of ``FLAG_PATHS``) with the same
names, help and parsing -- the settings' options built from the one table ``run``'s are
(``cli/setting_flags.py``), so a setting added there appears on every study command too.  The command declares a ``run_flags: dict`` parameter
and receives them there; ``config_from_flags(run_flags)`` builds the SimConfig exactly as
``run`` does (defaults <- YAML <- policy bundle <- flags).
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path

from blis_fast.config.sim import FLAG_PATHS, SimConfig
from blis_fast.config.policy import load_policy_bundle
from blis_fast.config.sim import build_config, load_yaml
from blis_fast.cli.run import run
from blis_fast.cli.setting_flags import setting_parameters
from blis_fast.config.outputs import config_inputs

FILE_FLAGS = ("config", "policy_config")
# settings that only add outputs of a single run (evaluation score, fitness, traces, time
# series, counterfactual replays): a study keeps none of them, so its commands leave them out
SINGLE_RUN_OUTPUTS = ("objectives", "fitness_weights", "trace_level", "sample_interval_ms", "counterfactual_k")


def _run_parameters() -> list[inspect.Parameter]:
    """``run``'s file options, then an option per setting (help groups them by panel)."""
    files = [p for p in inspect.signature(run, eval_str=True).parameters.values() if p.name in FILE_FLAGS]
    return files + list(setting_parameters())


def with_run_flags(command=None, *, exclude: tuple[str, ...] = ()):
    """Decorator: ``command``'s own parameters, then every run flag but ``exclude`` (see
    the module docstring); the run flags arrive as the ``run_flags`` keyword argument."""
    if command is None:
        return functools.partial(with_run_flags, exclude=exclude)
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "run_flags"]
    flags = [p for p in _run_parameters() if p.name not in {q.name for q in own} and p.name not in exclude]
    names = {p.name for p in flags}

    @functools.wraps(command)
    def wrapper(**kwargs):
        run_flags = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
        return command(**kwargs, run_flags=run_flags)

    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own + flags]
    wrapper.__signature__ = inspect.Signature(params)
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    del wrapper.__wrapped__  # typer must see the merged signature, not the command's
    return wrapper


def config_from_flags(run_flags: dict) -> SimConfig:
    """The SimConfig of ``run_flags`` (as ``blis-fast run`` builds it)."""
    config, policy_config = run_flags.get("config"), run_flags.get("policy_config")
    overrides = {k: v for k, v in run_flags.items() if k in FLAG_PATHS and v is not None}
    if not overrides.get("check_invariants"):
        overrides.pop("check_invariants", None)  # a YAML file may still turn it on
    bundle = load_policy_bundle(policy_config) if policy_config else None
    return build_config(load_yaml(config) if config else {}, overrides, policy_settings=bundle,
                        policy_origin=f"--policy-config {policy_config}")


def input_paths(run_flags: dict, cfg: SimConfig) -> list[tuple[str, Path]]:
    """Every file the runs read (never to be overwritten by an output)."""
    given = [("--" + k.replace("_", "-"), run_flags[k]) for k in FILE_FLAGS if run_flags.get(k)]
    return given + config_inputs(cfg)
