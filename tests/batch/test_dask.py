"""Distributed evaluation on a Dask LocalCluster (worker processes: the prepared scenario
and the compiled candidates travel pickled) equals local evaluation byte for byte, from
the API (executor=) and the CLI (--dask-scheduler)."""

from __future__ import annotations

import importlib.util

import pyarrow.parquet as pq
import pytest

from builders import expect_cli_error, run_cli, write
from test_evaluate_many import BAD, GOOD, OBJECTIVES, SCENARIOS, parquet_bytes

from blis_fast.batch import evaluate_many

# in the test extra (CI runs these); found, not imported, at collection (dask takes ~1 s to import)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="dask.distributed not installed")


@pytest.mark.slow
def test_local_cluster_equals_local(capsys, tmp_path):
    from dask.distributed import Client, LocalCluster

    cands = {"good": GOOD, "rr": {"routing": "round-robin"}, "nan": BAD["nan"]}
    local = evaluate_many(cands, SCENARIOS, objectives=OBJECTIVES, workers=1).table
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        remote = evaluate_many(cands, SCENARIOS, objectives=OBJECTIVES, executor=client.get_executor()).table
        assert parquet_bytes(remote) == parquet_bytes(local)
        pol = tmp_path / "pol"
        pol.mkdir()
        write(pol, "good.yaml", GOOD)
        scen = write(tmp_path, "s.yaml", {"objectives": OBJECTIVES, "scenarios": SCENARIOS})
        for out, extra in ((tmp_path / "local.parquet", ["--workers", "1"]),
                           (tmp_path / "dask.parquet", ["--dask-scheduler", cluster.scheduler_address])):
            code, _, err = run_cli(capsys, "evaluate", "--policies", pol, "--scenarios", scen, "--out", out, *extra)
            assert code == 0, err
        assert pq.read_table(tmp_path / "dask.parquet").equals(pq.read_table(tmp_path / "local.parquet"))


@pytest.mark.slow  # waits for the connection timeout (5 s, little CPU)
def test_unreachable_scheduler_is_one_line(capsys, tmp_path):
    pol = tmp_path / "pol"
    pol.mkdir()
    write(pol, "good.yaml", GOOD)
    scen = write(tmp_path, "s.yaml", {"scenarios": SCENARIOS[:1]})
    expect_cli_error(capsys, "evaluate", "--policies", pol, "--scenarios", scen, "--out", tmp_path / "r.parquet",
                     "--dask-scheduler", "tcp://127.0.0.1:9", needles=["--dask-scheduler", "127.0.0.1:9"])
