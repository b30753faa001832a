"""Evolving autoscaler settings (docs/autoscaling.md): the shipped candidate set
(configs/evaluate/candidates/autoscale/, bundles with an ``autoscale:`` section) on the
shipped autoscaling scenarios (configs/evaluate/autoscale-scenarios.yaml).  Batch
evaluation -- with cohorts and without -- gives every candidate the same row, which is
that of its own ``blis_fast.simulate`` run (checked for a cohort member, a threshold and
a target candidate); candidates that differ in their autoscaler run as separate
states (their compiled AUTOSCALE rows differ), the two differing only in routing weights
share a cohort; and the settings change the runs as the study says (eager scales out
earlier and meets the TTFT target, frugal misses it)."""

from __future__ import annotations

import pytest

import blis_fast
from blis_fast.batch import Budget
from blis_fast.batch.candidates import load_candidate
from blis_fast.batch.cohorts import form_cohorts
from blis_fast.batch.evaluate import evaluate_prepared, make_task
from blis_fast.batch.scenarios import load_scenarios_file, prepare
from builders import ROOT

SCENARIOS_FILE = ROOT / "configs" / "evaluate" / "autoscale-scenarios.yaml"
CANDIDATES = sorted((ROOT / "configs" / "evaluate" / "candidates" / "autoscale").glob("*.yaml"))
EXAMPLES = ROOT / "configs" / "examples" / "autoscaling"


@pytest.fixture(scope="module")
def day():
    """The file's first scenario ("day"), prepared with the file's objectives."""
    scenarios, objectives, _ = load_scenarios_file(SCENARIOS_FILE)
    assert [s.name for s in scenarios] == ["day", "day-seed-8"]
    return prepare(scenarios[0], objectives), objectives


def candidates():
    return [load_candidate(str(path), path.stem) for path in CANDIDATES]


def test_the_shipped_candidates_are_autoscale_bundles():
    names = [p.stem for p in CANDIDATES]
    assert sorted(names) == ["balanced", "balanced-weighted", "balanced-weighted-queue", "eager", "frugal",
                             "hpa-target"]
    for path, cand in zip(CANDIDATES, candidates()):
        assert cand.error is None, cand.error
        assert "autoscale" in blis_fast.load_yaml(path)


def test_batch_rows_with_and_without_cohorts_equal_each_candidates_own_run(day):
    ps, objectives = day
    cands = candidates()
    tasks = [make_task(i, c, ps, {}) for i, c in enumerate(cands)]
    groups = [[t.candidate_id for t in group] for group in form_cohorts(tasks, True, ps.setup)]
    # only the two bundles that differ in routing weights alone share a state
    assert sorted(sorted(g) for g in groups if len(g) > 1) == [["balanced-weighted", "balanced-weighted-queue"]]
    assert len(groups) == len(cands) - 1
    alone = evaluate_prepared(cands, [ps], Budget(max_wall_s=None), 1, cohorts=False)
    together = evaluate_prepared(cands, [ps], Budget(max_wall_s=None), 1, cohorts=True)
    assert [r.to_dict() for r in together] == [r.to_dict() for r in alone]
    by_name = dict(zip([c.id for c in cands], alone))
    for path in [p for p in CANDIDATES if p.stem in ("balanced-weighted-queue", "frugal", "hpa-target")]:
        own = blis_fast.simulate(str(EXAMPLES / "diurnal.yaml"), workload_spec=str(EXAMPLES / "diurnal-day.yaml"),
                                 policy=str(path)).evaluate(objectives)
        assert own.to_dict() == by_name[path.stem].to_dict(), path.stem
    assert all(r.status == "ok" for r in alone)
    # the autoscaler settings decide the runs: eager meets the TTFT target, frugal does not;
    # eager pays for it in GPU-hours, and the HPA-like target autoscaler does best on both
    eager, frugal, balanced, hpa = by_name["eager"], by_name["frugal"], by_name["balanced"], by_name["hpa-target"]
    assert eager.metrics["ttft_p99_ms"] < 1000 < frugal.metrics["ttft_p99_ms"]
    assert eager.metrics["gpu_hours"] > balanced.metrics["gpu_hours"] > frugal.metrics["gpu_hours"]
    assert hpa.score > balanced.score > eager.score > frugal.score
    assert len({r.policy_id for r in alone}) == len(cands)
    # the cohort split on the way (its members route differently at some point), and each
    # side still has its own row: the split copies carry the autoscaler's state
    assert by_name["balanced-weighted"].metrics != by_name["balanced-weighted-queue"].metrics


@pytest.mark.slow
def test_the_shipped_evaluate_command_runs(capsys, tmp_path):
    """The page's `blis-fast evaluate` command as written: every candidate ok on both days."""
    import pyarrow.parquet as pq

    from builders import run_cli

    out = tmp_path / "autoscale.parquet"
    code, _, err = run_cli(capsys, "evaluate", "--policies", str(CANDIDATES[0].parent), "--scenarios",
                           str(SCENARIOS_FILE), "--out", str(out))
    assert code == 0, err
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 2 * len(CANDIDATES) and {r["status"] for r in rows} == {"ok"}
