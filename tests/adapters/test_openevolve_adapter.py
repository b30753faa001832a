"""The OpenEvolve evaluator with the real openevolve package, offline: OpenEvolve's own
Evaluator scores our seed programs (both forms) and malformed ones (score 0, every
feature metric, an actionable artifact, no hang); `blis-fast openevolve init`; a short
evolution loop with a fake LLM and one worker."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import logging
import re
import signal

import pytest

from builders import expect_cli_error, run_cli, write

from blis_fast.adapters.openevolve import FEATURE_METRICS, SCENARIOS_ENV

# CI installs the openevolve extra (test extra): these run there.  Found, not imported, at
# collection (openevolve takes ~2 s to import; the tests import what they use).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("openevolve") is None, reason="openevolve not installed")

TINY = """\
objectives: "slo_attainment:max,ttft_p99_ms:min:300"
budget: {max_wall_s: 30}
scenarios:
  - name: quick
    config: {num_instances: 2, workload: chatbot, rate: 200, num_requests: 80}
    seed: 1
    slo_classes: {default: {ttft_ms: 300}}
  - name: more
    config: {num_instances: 2, workload: chatbot, rate: 300, num_requests: 120, max_num_seqs: 32}
    seed: 2
"""
_ids = itertools.count()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    d = tmp_path_factory.mktemp("oe") / "proj"
    from blis_fast.adapters.openevolve_starter import write_starter

    write_starter(d)
    (d / "scenarios.yaml").write_text(TINY)  # small scenarios: the test stays fast
    return d


def run_evaluator(project, text: str, suffix: str) -> tuple[dict, dict]:
    from openevolve.config import EvaluatorConfig
    from openevolve.evaluator import Evaluator

    ev = Evaluator(EvaluatorConfig(timeout=60, max_retries=0, cascade_evaluation=True, cascade_thresholds=[0.1]),
                   str(project / "evaluator.py"), suffix=suffix)
    pid = f"p{next(_ids)}"
    metrics = asyncio.run(ev.evaluate_program(text, pid))
    return metrics, ev.get_pending_artifacts(pid) or {}


@pytest.mark.parametrize("name,suffix", [("initial_program.yaml", ".yaml"), ("initial_program.py", ".py"),
                                         ("initial_program_expression.yaml", ".yaml")])
def test_openevolve_scores_the_seed_programs(project, name, suffix):
    metrics, artifacts = run_evaluator(project, (project / name).read_text(), suffix)
    assert 0.0 < metrics["combined_score"] <= 1.0
    assert set(FEATURE_METRICS) <= set(metrics) and {"score.quick", "score.more"} <= set(metrics)
    assert "Scenario quick" in artifacts["feedback"] and "error" not in artifacts
    # nothing OpenEvolve's artifact filter would redact (alphanumeric runs of 32 or more)
    assert re.search(r"[A-Za-z0-9]{32,}", artifacts["feedback"]) is None


def test_both_seed_forms_are_the_same_policy(project):
    y, _ = run_evaluator(project, (project / "initial_program.yaml").read_text(), ".yaml")
    p, _ = run_evaluator(project, (project / "initial_program.py").read_text(), ".py")
    assert y == p


MALFORMED = [
    ("routing: [weighted\n", ".yaml", "malformed YAML"),
    ("routing: {type: weighted, params: {scorers: {queue-lenght: 1}}}\n", ".yaml", "queue-lenght"),
    ("routing: {type: weighted, params: {scorers: {queue-depth: .nan}}}\n", ".yaml", "finite"),
    ('routing: {type: expression, score: "hit_blocks - lod"}\n', ".yaml", "unknown name 'lod'"),
    ("def get_policy():\n    raise RuntimeError('weights not ready')\n", ".py", "RuntimeError: weights not ready"),
    ("def get_policy():\n    while True:\n        pass\n", ".py", "within 0.5 s"),
    ("def get_policy():\n    a = []\n    while True:\n        a.append(bytearray(10**8))\n", ".py", "memory"),
]


@pytest.mark.parametrize("text,suffix,needle", MALFORMED, ids=["yaml", "scorer", "nan", "expression", "raises",
                                                                        "loops", "hogs"])
def test_malformed_programs_score_zero_with_every_feature(project, monkeypatch, text, suffix, needle):
    if "while True:\n        pass" in text:
        monkeypatch.setenv("BLIS_FAST_PROGRAM_TIMEOUT_S", "0.5")  # the others must fail for their own reason
    metrics, artifacts = run_evaluator(project, text, suffix)
    assert metrics["combined_score"] == 0.0
    assert set(FEATURE_METRICS) <= set(metrics)
    assert needle in artifacts["error"] and needle in artifacts["feedback"]
    assert artifacts["failure_stage"] == "stage1"


def test_module_level_evaluate_reads_the_environment(project, monkeypatch, tmp_path):
    from blis_fast.adapters import openevolve as oe

    prog = write(tmp_path, "p.yaml", "routing: least-loaded\n")
    monkeypatch.delenv(SCENARIOS_ENV, raising=False)
    missing = oe.evaluate(str(prog))
    assert missing.metrics["combined_score"] == 0.0 and SCENARIOS_ENV in missing.artifacts["error"]
    monkeypatch.setenv(SCENARIOS_ENV, str(project / "scenarios.yaml"))
    one = oe.evaluate_stage1(str(prog))
    assert set(one.metrics) >= {"combined_score", "score.quick"} and "score.more" not in one.metrics
    assert oe.evaluate(str(prog)).metrics == oe.evaluate_stage2(str(prog)).metrics


def test_init_command(capsys, tmp_path):
    code, out, err = run_cli(capsys, "openevolve", "init", tmp_path / "p")
    assert code == 0, err
    assert "evaluator.py" in out and (tmp_path / "p" / "initial_program.py").is_file()
    shim = (tmp_path / "p" / "evaluator.py").read_text()
    assert len(shim.strip().splitlines()) == 1 and "evaluate_stage1" in shim
    assert "initial_program_expression.yaml" in out
    # the expression seed: a routing expression and, in its comments, every feature of every slot
    from blis_fast.config.expression import FEATURES
    from blis_fast.config.policy import bundle_to_settings
    from blis_fast.config.yamlfile import load_yaml_text

    seed = (tmp_path / "p" / "initial_program_expression.yaml").read_text()
    assert bundle_to_settings(load_yaml_text(seed, "seed"))["routing"] == "expression"
    comments = " ".join(line for line in seed.splitlines() if line.startswith("#"))
    assert all(re.search(rf"\b{f}\b", comments) for names in FEATURES.values() for f in names)
    before = (tmp_path / "p" / "config.yaml").read_text()
    expect_cli_error(capsys, "openevolve", "init", tmp_path / "p", needles=["already holds"])
    assert (tmp_path / "p" / "config.yaml").read_text() == before
    from openevolve.config import load_config

    cfg = load_config(str(tmp_path / "p" / "config.yaml"))
    assert cfg.language == "yaml" and cfg.evaluator.max_retries == 0
    assert cfg.database.max_snapshot_artifacts is None and cfg.evaluator.parallel_evaluations <= 2
    assert set(cfg.database.feature_dimensions) <= set(FEATURE_METRICS)


@pytest.mark.slow
def test_evolution_loop_with_a_fake_llm(project, tmp_path):
    from openevolve import run_evolution
    from openevolve.config import LLMModelConfig, load_config

    from oe_fake_llm import init_client

    seed = write(tmp_path, "seed.yaml", "# EVOLVE-BLOCK-START\nrouting: always-busiest\n# EVOLVE-BLOCK-END\n")
    cfg = load_config(str(project / "config.yaml"))
    cfg.llm.models = [LLMModelConfig(name="fake", weight=1.0, init_client=init_client)]
    cfg.llm.evaluator_models = list(cfg.llm.models)  # (copied from the file's models when it was read)
    cfg.evaluator.parallel_evaluations = 1
    cfg.evaluator.cascade_thresholds = [0.1]
    cfg.max_iterations = 3
    # the controller installs SIGINT/SIGTERM handlers and root-logger handlers: undone afterwards
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    root = logging.getLogger()
    log_state = (list(root.handlers), root.level)
    try:
        result = run_evolution(str(seed), str(project / "evaluator.py"), config=cfg, iterations=3,
                               output_dir=str(tmp_path / "out"), cleanup=False)
    finally:
        for sig, h in handlers.items():
            signal.signal(sig, h)
        root.handlers[:], root.level = log_state
    base, _ = run_evaluator(project, seed.read_text(), ".yaml")
    assert result.best_score > base["combined_score"]
    assert "always-busiest" not in result.best_code
