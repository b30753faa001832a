"""Workload-spec labels (SLO class, tenant, client, session, turn) reach the per-request
records and the Parquet table; BLIS-style workloads carry none."""

import pyarrow.parquet as pq

import blis_fast
from builders import ROOT


def test_spec_labels_in_records_and_table(tmp_path):
    r = blis_fast.simulate(workload_spec=str(ROOT / "configs/workloads/multi-tenant.yaml"), num_instances=2)
    recs = r.request_records()
    names = r.workload.names
    for rec in recs[:50]:
        i = int(rec["requestID"].split("_")[1])
        assert rec["tenant_id"] == names["tenant"][r.state.reqs[i]["tenant"]]
        assert rec["slo_class"] == names["slo_class"][r.state.reqs[i]["slo_class"]]
        assert rec["client"] == names["client"][r.state.reqs[i]["client"]]
    path = tmp_path / "req.parquet"
    r.write_parquet(path)
    t = pq.read_table(path)
    assert {"tenant_id", "slo_class", "client"} <= set(t.column_names)
    assert sorted(set(t.column("tenant_id").to_pylist())) == sorted(set(names["tenant"]))


def test_blis_workloads_have_no_labels():
    r = blis_fast.simulate(num_requests=5)
    assert r.request_labels() == {}
    assert "tenant_id" not in r.request_records()[0]
