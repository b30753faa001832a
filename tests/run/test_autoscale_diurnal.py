"""The autoscaling examples (configs/examples/autoscaling/, docs/autoscaling.md), read
from the kernel's lifecycle and tick logs: the diurnal example scales up on the morning
ramp and down after the peak, within its bounds at every lifecycle change, the same
bytes every run; the oscillator flaps up and down on every tick; the study script's
GPU-hours agree with a per-instance recount, and its commands run."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import blis_fast
from blis_fast_kernels.schema.enums import LIFE_STATE_NAMES, SCALE_REASON_NAMES
from builders import ROOT, doc_commands, run_cli
from tests.hardening.hardening_helpers import assert_clean_error

EXAMPLES = ROOT / "configs" / "examples" / "autoscaling"


def study_script():
    """configs/examples/autoscaling/study.py as a module."""
    spec = importlib.util.spec_from_file_location("autoscaling_study", EXAMPLES / "study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def study():
    return study_script()


@pytest.fixture(scope="module")
def diurnal(study):
    """The diurnal example, run twice."""
    return study.run_diurnal(), study.run_diurnal()


def tick_log(result) -> np.ndarray:
    st = result.state
    return st.scale_log[: int(st.loop[0]["scale_records"])]


def test_diurnal_runs_are_the_same_bytes(diurnal, study):
    first, second = diurnal
    assert len(study.lifecycle_log(first)) > 0
    assert study.lifecycle_log(first).tobytes() == study.lifecycle_log(second).tobytes()
    assert tick_log(first).tobytes() == tick_log(second).tobytes()
    assert first.evaluate().to_dict() == second.evaluate().to_dict()


def test_diurnal_scales_up_on_the_ramp_and_down_after_the_peak_within_its_bounds(diurnal, study):
    result = diurnal[0]
    cfg = result.setup.config.deployment
    assert (cfg.num_instances, cfg.min_instances, cfg.max_instances) == (2, 1, 8)
    times, counts = study.instance_timeline(result)
    held = counts[:, study.HELD].sum(axis=1)
    current = counts[:, study.CURRENT].sum(axis=1)
    serving = counts[:, study.SERVING].sum(axis=1)
    # at every lifecycle change: min <= current <= held <= max, serving <= current
    assert (1 <= current).all() and (current <= held).all() and (held <= 8).all()
    assert (serving <= current).all()
    log = study.lifecycle_log(result)
    t_s = log["time_us"] / 1e6
    ups = t_s[log["state"] == study.STATE["provisioning"]]
    downs = t_s[log["state"] == study.STATE["draining"]]
    # diurnal-day.yaml: night [0, 600) s, ramp [600, 1500), peak [1500, 2400), fall [2400, 3000)
    assert ((600 <= ups) & (ups < 1500)).sum() >= 5  # out on the morning ramp ...
    assert (downs >= 2400).sum() >= 5  # ... in after the peak
    at_peak = np.searchsorted(times, [1600, 2000, 2300], side="right") - 1  # the counts in force then
    assert (serving[at_peak] >= 6).all()  # the peak is served by most of the pool
    assert current[-1] == 1 and serving[-1] == 1  # night again: back at the minimum
    assert result.evaluation_metrics["completed_requests"] == len(result.workload)


def test_oscillator_flaps_up_and_down_on_every_tick():
    result = blis_fast.simulate(str(EXAMPLES / "oscillator.yaml"))
    reasons = [SCALE_REASON_NAMES[r] for r in tick_log(result)["reason"]]
    assert len(reasons) >= 30
    assert reasons == ["up", "down"] * (len(reasons) // 2) + ["up"] * (len(reasons) % 2)
    study = study_script()
    times, counts = study.instance_timeline(result)
    current = counts[:, study.CURRENT].sum(axis=1)
    assert set(current.tolist()) == {2, 3} and (counts[:, study.HELD].sum(axis=1) <= 4).all()
    log = study.lifecycle_log(result)
    started = np.count_nonzero(log["state"] == study.STATE["provisioning"])
    assert started == np.count_nonzero(log["state"] == study.STATE["draining"]) >= 15
    # every instance it starts serves before the next tick drains one (5 s node + 5 s load < 15 s)
    assert np.count_nonzero(log["state"] == study.STATE["active"]) == started
    assert result.evaluation_metrics["completed_requests"] == len(result.workload)


def held_gpu_hours_recount(result, tp: int) -> float:
    """GPU-hours instance by instance: held from provisioning (or the start, for one whose
    first record is not provisioning) to terminated or the run's end."""
    provisioning, terminated = LIFE_STATE_NAMES.index("provisioning"), LIFE_STATE_NAMES.index("terminated")
    unused = (LIFE_STATE_NAMES.index("off"), terminated)
    st = result.state
    end = int(st.loop[0]["clock_us"])
    log = st.life_log[: int(st.loop[0]["life_records"])]
    total = 0
    for i in range(st.life.shape[0]):
        mine = log[log["instance"] == i]
        if mine.size == 0 and int(st.life[i]["state"]) in unused:  # a row never used
            continue
        since = None if mine.size and int(mine[0]["state"]) == provisioning else 0
        for rec in mine:
            if int(rec["state"]) == provisioning:
                since = int(rec["time_us"])
            elif int(rec["state"]) == terminated and since is not None:
                total += int(rec["time_us"]) - since
                since = None
        if since is not None:
            total += end - since
    return total * tp / 3.6e9


def test_gpu_hours_of_the_study_script(diurnal, study):
    result = diurnal[0]
    assert study.gpu_hours(result) == pytest.approx(held_gpu_hours_recount(result, 4), rel=1e-12)
    fleet = blis_fast.simulate(study.static_config(3), workload_spec=str(study.SPEC), num_requests=300)
    assert study.lifecycle_log(fleet).size == 0
    assert study.gpu_hours(fleet) == pytest.approx(3 * 4 * int(fleet.state.loop[0]["clock_us"]) / 3.6e9, rel=1e-12)


def test_the_page_commands_run_small(capsys, monkeypatch, tmp_path, study):
    """Every command of docs/autoscaling.md but the evaluation and the bench runs as
    written, made small (the day's first 300 requests), its files in a temporary directory.
    (The evaluation's rows are checked in tests/batch/test_autoscale_candidates.py, the
    bench's scenarios in tests/cli/test_bench_module.py.)"""
    pytest.importorskip("matplotlib")
    commands = doc_commands("autoscaling.md")
    script = "configs/examples/autoscaling/study.py"
    assert [c[:3] for c in commands] == [
        ["blis-fast", "run", "--num-instances"], ["blis-fast", "run", "--config"], ["python", script, "timeline"], ["blis-fast", "run", "--config"],
        ["python", script, "sweep"], ["blis-fast", "evaluate", "--policies"], ["blis-fast", "bench", "--scenarios"]]
    monkeypatch.chdir(ROOT)  # the page's paths are relative to the repository
    for k, command in enumerate(commands):
        if command[1] in ("evaluate", "bench"):
            continue
        args, it = [], iter(command[2:] if command[0] == "python" else command[1:])
        for a in it:
            args += [a, tmp_path / f"{k}-{next(it)}"] if a == "--plot" else [a]
        if command[0] == "python":
            study.main([str(a) for a in args] + ["--num-requests", "300"])
            rows = capsys.readouterr().out.splitlines()
            assert rows[0].startswith("| time (min) |" if command[2] == "timeline" else "| run |")
            if command[2] == "sweep":
                assert len(rows) == 2 + len(study.THRESHOLDS) + len(study.STATIC_FLEETS)
        else:
            code, _, err = run_cli(capsys, *args, "--num-requests", "300")
            assert code == 0, (command, err)
        for a, value in zip(command, command[1:]):
            if a == "--plot":
                assert (tmp_path / f"{k}-{value}").is_file(), value


@pytest.mark.parametrize("args, needle", [
    (["timeline", "--jobs", "-1"], "--jobs"),
    (["sweep", "--num-requests", "0"], "--num-requests"),
    (["timeline", "--plot", "figure.pdf"], "--plot: must end in .png or .svg"),
    (["sweep", "--plot", "figure.jpg"], "--plot: must end in .png or .svg"),
    (["sideways"], "invalid choice"),
    ([], "the following arguments are required: what"),
    (["sweep", "--bogus"], "unrecognized arguments"),
])
def test_the_study_script_refuses_bad_input_in_one_line(capsys, args, needle, study):
    """Before anything runs: one line, exit code 2."""
    with pytest.raises(SystemExit) as exc:
        study.main(args)
    out = capsys.readouterr()
    assert_clean_error(exc.value.code, out.out, out.err, [needle])
