"""Workload-generation speed: 1M requests from the 5-client spec bench/workload_1m.yaml.

    python bench/workload_gen.py [SPEC] [--repeats 3]

Prints JSON: best and all wall times of generate_requests (arrivals, lengths, sessions)
and of the sequence-block keys (to_workload, block size 16: prompt then output blocks), after an untimed warm-up that
loads (or compiles) the kernels.  The check before timing: the request count.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from blis_fast.workload.generate import generate_requests
from blis_fast.workload.spec import load_spec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("spec", nargs="?", default=str(Path(__file__).with_name("workload_1m.yaml")))
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    spec = load_spec(args.spec)
    wl = generate_requests(spec).to_workload(16)  # warm-up + correctness check
    assert spec.num_requests is None or len(wl) == spec.num_requests, len(wl)
    runs = []
    for _ in range(args.repeats):
        del wl
        t0 = time.perf_counter()
        req = generate_requests(spec)
        t1 = time.perf_counter()
        wl = req.to_workload(16, validate=False)
        t2 = time.perf_counter()
        runs.append({"requests_s": round(t1 - t0, 3), "keys_s": round(t2 - t1, 3), "total_s": round(t2 - t0, 3)})
    print(json.dumps({"spec": args.spec, "num_requests": len(wl), "block_keys": int(wl.block_keys.size),
                      "mean_prompt_tokens": round(float(wl.prompt_len.mean()), 1),
                      "best_total_s": min(r["total_s"] for r in runs), "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
