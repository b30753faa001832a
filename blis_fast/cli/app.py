"""The typer application every command registers on, and the helpers commands share:
option help taken from the config dataclasses (one source of truth); flag values are kept
as text for the shared checkers."""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Annotated

import typer
from typer.core import TyperCommand

from blis_fast.cli import feedback

from blis_fast.config.autoscale import AutoscaleConfig
from blis_fast.config.disaggregation import PDConfig
from blis_fast.config.engine import EngineConfig
from blis_fast.config.kv_tiers import KvTiersConfig
from blis_fast.config.policy import PolicyConfig
from blis_fast.config.sim import FLAG_PATHS, DeploymentConfig, SimConfig, SimulationConfig, WorkloadConfig
from blis_fast.config.validate import show
from blis_fast.version import __version__

app = typer.Typer(
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: long BLIS flag names are never truncated, [brackets] stay text
    help="blis-fast: fast, deterministic simulation of vLLM-style LLM inference clusters.",
)


class GroupedHelpCommand(TyperCommand):
    """A command whose --help lists its options in groups (the options'
    ``rich_help_panel``, in PANELS order), in typer's plain format."""

    def format_options(self, ctx, formatter) -> None:
        groups: dict[str, list] = {}
        help_record = None
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.name == "help":
                help_record = record  # last, after every group
            else:
                groups.setdefault(getattr(param, "rich_help_panel", None) or OTHER, []).append(record)
        panels = sorted(groups, key=lambda p: PANELS.index(p) if p in PANELS else len(PANELS))
        if help_record is not None:
            if not panels:
                panels = [OTHER]
            groups.setdefault(panels[-1], []).append(help_record)
        for panel in panels:
            with formatter.section(panel):
                formatter.write_dl(groups[panel])


MODEL, ENGINE, KV_TIERS, AUTOSCALING, WORKLOAD, POLICIES, SIMULATION, OUTPUT, OTHER = (
    "Model & hardware", "Engine & cluster", "KV tiers", "Autoscaling", "Workload", "Policies", "Simulation", "Output",
    "Options")
PANELS = [OTHER, MODEL, ENGINE, KV_TIERS, AUTOSCALING, WORKLOAD, POLICIES, SIMULATION, OUTPUT]  # OTHER: a command's own options
_MODEL_SETTINGS = {"model", "hardware", "vllm_version", "latency_model", "alpha_coeffs", "beta_coeffs", "tp", "pp",
                   "dp"}
_SECTION_PANELS = {"engine": ENGINE, "deployment": ENGINE, "pd": ENGINE, "kv_tiers": KV_TIERS,
                   "autoscale": AUTOSCALING, "workload": WORKLOAD,
                   "policy": POLICIES, "simulation": SIMULATION}


def panel_of(flag: str) -> str:
    """The help group of a flat setting."""
    if flag in _MODEL_SETTINGS:
        return MODEL
    if flag in ("autoscaler", "min_instances", "max_instances") or flag.startswith("autoscale_"):
        return AUTOSCALING  # (the autoscaler's policy settings and the bounds, next to its pool settings)
    section = FLAG_PATHS[flag].rpartition(".")[0]
    return _SECTION_PANELS.get(section, OUTPUT if flag == "objectives" else OTHER)


_typer_command = app.command


def _command(*args, cls=None, **kwargs):
    """``app.command`` with grouped help by default (every command of the app)."""
    return _typer_command(*args, cls=cls or GroupedHelpCommand, **kwargs)


app.command = _command


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"blis-fast {__version__}")
        raise typer.Exit()


@app.callback()
def _app_options(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="print the version and exit")] = False,
) -> None:
    """blis-fast: fast, deterministic simulation of vLLM-style LLM inference clusters."""

_SECTION_CLASSES = {"engine": EngineConfig, "deployment": DeploymentConfig, "pd": PDConfig, "kv_tiers": KvTiersConfig,
                    "autoscale": AutoscaleConfig,
                    "workload": WorkloadConfig, "simulation": SimulationConfig, "policy": PolicyConfig}


def setting_field(flag: str):
    """The dataclass field a flat setting (a FLAG_PATHS name) sets, None if it has none."""
    section, _, name = FLAG_PATHS[flag].rpartition(".")
    cls = _SECTION_CLASSES.get(section, SimConfig)
    for f in fields(cls):
        if f.name == name:
            return f
    return None


def field_help(flag: str) -> str:
    """Help text of a flat setting, taken from its dataclass field (one source of truth)."""
    f = setting_field(flag)
    return f.metadata.get("help", "") if f is not None else ""


def raw_text(value: str) -> str:
    """The flag's text as given: numbers are parsed (strictly) and range-checked by the
    shared checkers of blis_fast.config.validate, like YAML values, so one parser
    serves every surface ('1_0', '0x10' are refused; '1e6' is an integer)."""
    return value


_METAVARS = {"int": "INTEGER", "float": "FLOAT", "list[float]": "NUMBERS", "str": "TEXT"}


def option(*names: str, flag: str | None = None, help: str | None = None):
    key = flag or names[0].lstrip("-").replace("-", "_")
    f = setting_field(key) if key in FLAG_PATHS else None
    extra = {}
    text = help if help is not None else field_help(key)
    if f is not None:
        base = str(f.type).replace(" | None", "").strip()
        metavar = f.metadata.get("metavar") or ("SIZE" if "parse" in f.metadata else _METAVARS.get(base, "TEXT"))
        extra = {"parser": raw_text, "metavar": metavar, "rich_help_panel": panel_of(key)}
        default = f.default if f.default is not MISSING else None
        if default is not None and default is not False and "default" not in text:
            text += f"  [default: {default}]"
    return typer.Option(*names, help=text, show_default=False, **extra)


def number_option(*names: str, help: str, metavar: str = "INTEGER"):
    """An option outside the run config whose text the command checks with the shared
    checkers (``blis_fast.config.validate``)."""
    return typer.Option(*names, help=help, show_default=False, parser=raw_text, metavar=metavar)




def _set_quiet(value: bool) -> bool:
    feedback.configure(quiet=value)
    return value


def _set_verbose(value: int) -> int:
    feedback.configure(verbose=value)
    return value


# Every command takes these two (``quiet: Quiet = False, verbose: Verbose = 0``); they set
# blis_fast.cli.feedback while the options are parsed, so the command need not.
Quiet = Annotated[bool, typer.Option("--quiet", "-q", callback=_set_quiet, rich_help_panel=OUTPUT,
                                     help="no progress bars or notices on stderr (errors are still printed)")]
Verbose = Annotated[int, typer.Option("--verbose", "-v", count=True, callback=_set_verbose, rich_help_panel=OUTPUT,
                                      show_default=False,
                                      help="more notices on stderr (-vv: debug details)")]


def printable_path(path) -> str:
    """A path as a command prints it on stdout: as is, or -- when it holds control
    characters (a BEL in a folder name) -- quoted with them escaped, never raw."""
    text = str(path)
    return text if text.isprintable() else show(text, 4200)
