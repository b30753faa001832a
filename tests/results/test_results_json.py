"""The results file (``--results-path``) is written column by column
(``Result.results_json``); its bytes equal the json module's ``indent=2`` dump of
``results_document()`` for every kind of record: normal and compat, cut by a horizon,
with workload labels (workload specs) and source ids (traces)."""

from __future__ import annotations

import json

import pytest

from blis_fast.results.result import _records_json
from builders import COMPAT, LOADED, LOADED_HORIZON, WORKLOAD_EXAMPLES, make_trace, sim, trace_sim


def _reference(result) -> str:
    return json.dumps(result.results_document(), indent=2, allow_nan=False) + "\n"


@pytest.mark.parametrize("extra", [{}, {"compat": COMPAT}, {"horizon": LOADED_HORIZON},
                                   {"horizon": LOADED_HORIZON, "compat": COMPAT}],
                         ids=["normal", "compat", "horizon", "horizon-compat"])
def test_results_json_equals_the_json_module(extra):
    r = sim(**{**LOADED, **extra})
    assert r.results_json() == _reference(r)


def test_results_json_with_labels_and_source_ids(tmp_path):
    spec = next(p for p in WORKLOAD_EXAMPLES if p.name == "multi-tenant.yaml")
    r = sim(workload_spec=str(spec), num_instances=2, horizon=20_000_000)
    assert r.request_labels()  # tenant, slo_class, ... columns present
    assert r.results_json() == _reference(r)
    t = trace_sim(make_trace(tmp_path / "t.csv"), check_invariants=True)
    assert t.workload.source_ids is not None
    assert t.results_json() == _reference(t)


def test_write_results(tmp_path):
    r = sim(**LOADED)
    path = tmp_path / "results.json"
    r.write_results(path)
    assert path.read_text() == _reference(r)
    assert json.loads(path.read_text())["requests"] == r.request_records()


def test_records_json_edge_cases():
    def ref(keys, cols):
        rows = [dict(zip(keys, row)) for row in zip(*cols)]
        return json.dumps({"requests": rows}, indent=2)[len('{\n  "requests": '):-2]

    for keys, cols in ((["a%b", "c"], [[1, 2], ["x", None]]),
                       (["f", "s"], [[0.1, None], ["\u00e9\n\"", "plain"]]),
                       (["n"], [[]]),
                       (["i", "j"], [[None, None], [-3, 2**70]])):
        assert _records_json(keys, cols) == ref(keys, cols), keys
    assert _records_json(["x"], [[float("nan")]]) is None  # the json module raises: fall back to it
    assert _records_json(["x"], [[True]]) is None
    assert _records_json(["x"], [[[1, 2]]]) is None
