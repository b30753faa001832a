"""``blis-fast models [NAME] [--json]``: every model blis-fast knows (blis_fast.config.catalog)
-- its fitted coefficient sets, whether an architecture config ships, which latency models
can run it."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from blis_fast.cli.app import app
from blis_fast.config.catalog import KnownModel, did_you_mean, find_known_model, known_model_list
from blis_fast.config.validate import show
from blis_fast.errors import ConfigError
from blis_fast.studies.tables import terminal_width, text_table


def _version_tag(image: str) -> str:
    """``vllm/vllm-openai:v0.8.4`` -> ``v0.8.4`` (the table's column; --json has the image)."""
    return image.rsplit(":", 1)[-1]


def _rows(model: KnownModel, with_coefficients: bool) -> list[list[str]]:
    """Its table rows: one per coefficient set (the model's own cells on the first), or one
    without sets."""
    own = [model.name, "yes" if model.config is not None else "no", ", ".join(model.latency_models) or "-"]
    if not model.sets:
        return [own + ["-"] * (6 if with_coefficients else 4)]
    rows = []
    for k, s in enumerate(model.sets):
        cells = [s.gpu, str(s.tp), _version_tag(s.vllm_version), f"{s.total_kv_blocks:,}"]
        if with_coefficients:
            cells += [", ".join(f"{v:.6g}" for v in s.alpha), ", ".join(f"{v:.6g}" for v in s.beta)]
        rows.append((own if k == 0 else ["", "", ""]) + cells)
    return rows


@app.command("models")
def models_cmd(
    name: Annotated[Optional[str], typer.Argument(help="one model: its id (org/name) or its name after the '/', "
                                                      "any case (default: every known model)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """The models blis-fast knows: each model id of the fitted coefficient file
    (configs/defaults.yaml: GPU, TP, vLLM version and KV blocks of each set) and each shipped
    architecture config (configs/models/), with the latency models that can run it --
    blackbox needs a coefficient set (or --alpha-coeffs, --beta-coeffs and
    --total-kv-blocks), roofline a config.  Any other model runs from its HuggingFace
    config.json: --model path/to/config.json."""
    if name is None:
        models = known_model_list()
    else:
        one = find_known_model(name)
        if one is None:
            raise ConfigError("model", f"unknown model {show(name)}{did_you_mean(name)}; blis-fast models lists "
                                       "the known models (or give a HuggingFace config.json: --model "
                                       "path/to/config.json)")
        models = [one]
    if as_json:
        typer.echo(json.dumps([m.as_dict() for m in models], indent=1))
        return
    detail = name is not None  # (one model: its α and β too)
    header = ["model", "config", "latency models", "GPU", "TP", "vLLM", "KV blocks"] + (["alpha", "beta"] if detail
                                                                                         else [])
    rows = [row for m in models for row in _rows(m, detail)]
    typer.echo(text_table(header, rows, left=4, width=terminal_width(), keep=1))
    if not detail:
        with_sets = sum(1 for m in models if m.sets)
        with_config = sum(1 for m in models if m.config is not None)
        typer.echo(f"\n{len(models)} models: {with_sets} with coefficient sets (blackbox), {with_config} with a "
                   "config (roofline); any other model: --model path/to/config.json")
