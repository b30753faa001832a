"""One place where a request's phase ends (kernels/engine/phases.py ``end_phase``): the
engine marks first tokens, completions and closed-loop releases nowhere else, so a later
feature that hooks there sees every one of them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import entry as E
from blis_fast_kernels.schema import ClusterEvent, PhaseEnd, RequestState
from builders import lengths_workload
from states import make_state

KERNELS = Path(__file__).resolve().parents[2] / "kernels"
PHASE_WRITES = {
    # (setting it back to -1, "none", is not a phase end: a retry's new attempt, engine/flow.py)
    "first token time": r'\["first_token_us"\]\s*=\s*(?!-1\b)[^=\s]',
    "completion": r"=\s*RequestState\.COMPLETED",
    "closed-loop release": r"release_follower\(st",
}


def test_phase_ends_are_written_only_in_end_phase():
    for what, pattern in PHASE_WRITES.items():
        where = sorted(str(p.relative_to(KERNELS)) for p in KERNELS.rglob("*.py")
                       if re.search(pattern, p.read_text()))
        assert where == ["engine/phases.py"], (what, where)


def test_end_phase_marks_each_phase():
    import dataclasses

    wl = dataclasses.replace(lengths_workload([0, 0], [32, 32], [2, 2]), arrival_us=np.array([0, -1]),
                             next_request=np.array([1, -1]), follow_delay_us=np.array([500, 0]))
    st = make_state(wl, num_instances=1)
    E.end_phase(st, 0, 0, np.int64(PhaseEnd.PREFILL_DONE), 1234, 7)
    assert (int(st.reqs[0]["first_token_us"]), int(st.reqs[0]["run_start_step"])) == (1234, 7)
    E.end_phase(st, 0, 0, np.int64(PhaseEnd.OUTPUT_DONE), 2000, 9)
    assert int(st.reqs[0]["state"]) == RequestState.COMPLETED and int(st.inst[0]["completed"]) == 1
    st.reqs[0]["last_token_us"] = 2000
    E.end_phase(st, 0, 0, np.int64(PhaseEnd.FOLLOWER_RELEASED), 2100, 9)
    assert int(st.reqs[1]["arrival_us"]) == 2500 and int(st.loop[0]["heap_size"]) == 1
    size, t, prio, _, r, _ = E.heap_pop(st.heap, 1)
    assert (int(t), int(prio), int(r)) == (2500, int(E.event_priority(ClusterEvent.ARRIVAL, -1)), 1)
