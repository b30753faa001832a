"""Shared fixtures (the builders they use are in builders.py).

``loaded`` / ``loaded_cut`` / ``any_loaded``: the ``LOADED`` 3-instance run with KV
pressure, run to the end and cut at ``LOADED_HORIZON``; computed once per session and
shared by the tests/run/ modules (treat them as read-only).
"""

from __future__ import annotations

import pytest

from builders import LOADED, LOADED_HORIZON, make_trace


@pytest.fixture(scope="session")
def loaded():
    import blis_fast

    return blis_fast.simulate(**LOADED)


@pytest.fixture(scope="session")
def loaded_cut():
    import blis_fast

    return blis_fast.simulate(horizon=LOADED_HORIZON, **LOADED)


@pytest.fixture(scope="session", params=["full", "horizon"])
def any_loaded(request, loaded, loaded_cut):
    return loaded if request.param == "full" else loaded_cut


@pytest.fixture(scope="session")
def trace40(tmp_path_factory):
    """A 40-request BLIS trace CSV (``make_trace``)."""
    return make_trace(tmp_path_factory.mktemp("trace") / "T.csv")


@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch):
    """pytest-xdist's workers set ``COLUMNS=80``; the CLI reads it as the terminal's width
    (study tables split to fit), so without this a test's output would depend on whether
    the suite runs on one process or several.  Tests that want a width set it themselves."""
    monkeypatch.delenv("COLUMNS", raising=False)


def pytest_collection_modifyitems(config, items):
    """A realtime test times a server on the wall clock: beside other tests in parallel
    workers the machine is too busy for its tolerances, so under pytest-xdist it is skipped
    with the command that runs it alone (.ci/run does, after the suite)."""
    if getattr(config, "workerinput", None) is None:  # (not an xdist worker: one process)
        return
    skip = pytest.mark.skip(reason="realtime: run alone with `python -m pytest -q -m realtime`")
    for item in items:
        if "realtime" in item.keywords:
            item.add_marker(skip)
