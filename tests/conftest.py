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
