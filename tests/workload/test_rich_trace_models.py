"""Rich traces carry a model column (written by ``workload generate`` only when a spec
client names a model) and runs use it like a BLIS trace's model column."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from blis_fast.config.sim import build_config
from blis_fast.run.resolve import build_workload
from tests.hardening.hardening_helpers import assert_clean_error, cli_in_process

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "configs/workloads/two-models.yaml"
CONFIG = ROOT / "configs/examples/two-models.yaml"


def trace_config(tmp_path: Path) -> dict:
    """The example's config without its workload and seed (a trace draws nothing at random)."""
    cfg = yaml.safe_load(CONFIG.read_text())
    cfg.pop("workload", None)
    (cfg.get("simulation") or {}).pop("seed", None)
    return cfg


def generate(spec: Path, out: Path) -> Path:
    code, stdout, err = cli_in_process("workload", "generate", "--spec", spec, "--out", out)
    assert code == 0, err
    return out


@pytest.mark.parametrize("ext", ["parquet", "csv"])
def test_replayed_trace_routes_like_the_spec(tmp_path, ext):
    trace = generate(SPEC, tmp_path / f"t.{ext}")
    cfg = trace_config(tmp_path)
    from_spec = build_workload(build_config({**cfg, "workload": {"spec_filepath": str(SPEC)}}))
    from_trace = build_workload(build_config({**cfg, "workload": {"type": "traces",
                                                                   "traces_filepath": str(trace)}}))
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    assert from_trace.models == from_spec.models
    np.testing.assert_array_equal(from_trace.model, from_spec.model)
    assert len(set(from_trace.model.tolist())) == 2
    runs = []
    for args in (("--workload-spec", SPEC), ("--workload", "traces", "--workload-traces-filepath", trace)):
        code, out, err = cli_in_process("run", "--config", cfg_path, *args, "--quiet")
        assert code == 0, err
        runs.append(json.loads(out))
    for key in ("models", "deployments"):
        assert runs[0].get(key) == runs[1].get(key)


def test_unknown_model_in_the_column_is_refused_with_counts(tmp_path):
    trace = generate(SPEC, tmp_path / "t.parquet")
    table = pq.read_table(trace)
    models = ["other/model" if i % 2 else m for i, m in enumerate(table.column("model").to_pylist())]
    table = table.set_column(table.column_names.index("model"), "model", pa.array(models, pa.string()))
    pq.write_table(table, trace)
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(trace_config(tmp_path)))
    code, out, err = cli_in_process("run", "--config", cfg_path, "--workload", "traces",
                                    "--workload-traces-filepath", trace)
    assert_clean_error(code, out, err, ["'other/model'", f"({len(models) // 2} requests)", "served"])


@pytest.mark.parametrize("ext", ["parquet", "csv"])
def test_specs_without_models_write_the_same_bytes(tmp_path, ext):
    trace = generate(ROOT / "configs/workloads/rag.yaml", tmp_path / f"rag.{ext}")
    names = pq.read_table(trace).column_names if ext == "parquet" else trace.read_text().splitlines()
    assert "model" not in (names if ext == "parquet" else [l for l in names if not l.startswith("#")][0].split(","))


@pytest.mark.parametrize("values, needle", [(["\x1b" + "m" * 300], "at most 256 characters"),
                                            ([7], "must hold model names")])
def test_model_column_is_validated(tmp_path, values, needle):
    trace = generate(SPEC, tmp_path / "t.parquet")
    table = pq.read_table(trace)
    n = table.num_rows
    col = pa.array(values * n, pa.string() if isinstance(values[0], str) else pa.int64())
    pq.write_table(table.set_column(table.column_names.index("model"), "model", col), trace)
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(trace_config(tmp_path)))
    code, out, err = cli_in_process("run", "--config", cfg_path, "--workload", "traces",
                                    "--workload-traces-filepath", trace)
    line = assert_clean_error(code, out, err, ["column model", needle])
    assert "\x1b" not in line
