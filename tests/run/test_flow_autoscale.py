"""Flow control with an autoscaled pool (kernels/engine/flow.py, engine/autoscale.py): the
requests a gateway holds count in the autoscaler's ``waiting`` signal, and a new instance
takes waiting requests as soon as it is ready.  Step times and autoscaler timings as
tests/run/test_autoscale_engine.py's hand cases (a tick every 10 ms, acting 5 ms later, an
instance provisioned in 20 ms and loaded in 30 ms)."""

from __future__ import annotations

import numpy as np

from blis_fast_kernels.schema import LifeState, RequestState
from test_autoscale_engine import MS, life_log, run, workload

A = LifeState.ACTIVE
# 12 requests at t = 0, each with 40 output tokens: one instance with one running slot serves
# them one after the other (about 41 ms each), the others waiting in the free-slot gateway
BURST = dict(num_instances=1, min_instances=1, max_instances=2, max_num_seqs=1, autoscaler="threshold",
             autoscale_signal="waiting", autoscale_up=2, autoscale_down=0.5, routing_policy="least-loaded",
             flow_control="free-slot")


def test_the_gateway_queue_is_waiting_work_for_the_autoscaler():
    res, st = run(workload(np.zeros(12, np.int64), output_len=40), **BURST)
    # nothing waits at the instance (late binding) -- the 11 in the gateway make the tick at
    # 10 ms want 2 instances: acting at 15 ms, active at 15 + 20 + 30 = 65 ms
    assert (65 * MS, 1, A) in life_log(st)
    assert int(res.state.scale_pools[0]["scale_ups"]) == 1
    # the new instance took a waiting request the moment it was ready (its gateway's dispatch)
    on_second = st.reqs["instance"] == 1
    assert on_second.any()
    assert int(st.reqs["first_scheduled_us"][on_second].min()) == 65 * MS
    assert (st.reqs["state"] == RequestState.COMPLETED).all()
    assert int(st.loop[0]["gateway_depth"]) == 0 and int(st.inst["wq_peak"].max()) <= 1
