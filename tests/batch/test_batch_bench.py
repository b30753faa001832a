"""The batch bench's candidates are valid and distinct; its report formats (a small run:
the real scenarios take minutes and are measured by `blis-fast bench`)."""

from __future__ import annotations

from blis_fast.batch.candidates import load_candidate
from blis_fast.experiments.batch_bench import BATCH_SCENARIOS, bench_candidates, format_batch


def test_candidates_are_valid_and_distinct():
    cands = bench_candidates()
    assert len(cands) == 64
    loaded = [load_candidate(src, cid) for cid, src in cands.items()]
    assert all(c.error is None for c in loaded)
    assert len({repr(sorted(c.settings.items())) for c in loaded}) == 64
    assert bench_candidates() == cands  # deterministic


def test_format_and_scenario_names():
    row = {"name": "batch-10k", "scenario": "10k", "workers": 2, "serial_s": 10.0, "serial_evals_per_s": 6.4,
           "parallel_s": 5.5, "parallel_evals_per_s": 11.6, "speedup": 1.82, "serial_s_per_eval": 0.156,
           "kernel_best_s": 0.13, "parallel_busy_cores": 1.96, "kernel_scaling": 1.93,
           "phase_s_per_eval": {"build_s": 0.005, "kernel_s": 0.13, "judge_s": 0.02}}
    text = "\n".join(format_batch([row, {**row, "name": "batch-100k", "serial_s": None, "serial_evals_per_s": None,
                                           "speedup": None, "serial_s_per_eval": None, "phase_s_per_eval": None}]))
    assert "batch-10k" in text and "1.82" in text and "batch-100k" in text and "0.0050/0.1300/0.0200" in text
    assert "kernel scaling" in text and "1.93" in text
    assert set(BATCH_SCENARIOS) == {"batch-10k", "batch-100k"}
