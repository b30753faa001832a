"""The kernels run as plain Python too (NUMBA_DISABLE_JIT=1): the same small
scenarios, interpreted and compiled, must give byte-identical results.  This catches
numba-specific semantics (integer widths, truncation, float rounding) and keeps a
coverage run of the kernels possible."""

import json
import os
import subprocess
import sys

import pytest

import blis_fast

SCENARIOS = [
    dict(num_requests=30, rate=10, num_instances=2, total_kv_blocks=200, routing_policy="weighted",
         workload="chatbot", prefix_tokens=64, check_invariants=True),
    dict(num_requests=25, rate=50, num_instances=3, total_kv_blocks=120, max_num_scheduled_tokens=256,
         long_prefill_token_threshold=64, scheduler="priority-fcfs", priority_policy="slo-based",
         preemption_victim="lowest-priority", admission_policy="token-bucket", token_bucket_capacity=3000,
         token_bucket_refill_rate=2000, check_invariants=True),
    dict(num_requests=20, rate=5, compat="blis-2026.02", horizon=3_000_000, latency_model="roofline",
         routing_policy="prefix-affinity", num_instances=2, snapshot_refresh_interval=50_000),
]

_SCRIPT = """
import json, sys
import pytest

import blis_fast
out = [blis_fast.simulate(**s).results_document() for s in json.loads(sys.argv[1])]
print(json.dumps(out, sort_keys=True))
"""


@pytest.mark.slow  # a subprocess, interpreted kernels
def test_interpreted_kernels_match_compiled():
    compiled = json.dumps([blis_fast.simulate(**s).results_document() for s in SCENARIOS], sort_keys=True)
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(SCENARIOS)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == compiled
