"""Workloads: what arrives at the cluster, as arrays (``workload.Workload``).

    distribution.py   BLIS's ``distribution`` workload and presets
    spec.py           multi-client workload specs (YAML) -> WorkloadSpec
    sampling.py       length distributions, arrival processes, load profiles
    generate.py       WorkloadSpec -> Requests -> Workload
    formats/          BLIS trace CSV, rich traces (YAML header + CSV/Parquet)
    stats.py          workload summaries
"""

from blis_fast.workload.distribution import (
    MAX_TOKEN_ID,
    PRESETS,
    WORKLOAD_KINDS,
    DistributionSpec,
    constant_gap_us,
    generate_distribution,
    load_preset,
    preset_spec,
    round_half_away,
    sample_arrivals,
    sample_lengths,
)
from blis_fast.workload.generate import Requests, generate_from_spec, generate_requests
from blis_fast.workload.spec import WorkloadSpec, load_spec, parse_spec
from blis_fast.workload.formats.blis_csv import TRACE_HEADER, load_blis_trace, write_blis_trace
from blis_fast.workload.formats.rich_trace import is_rich_trace, load_trace, read_trace, write_trace
from blis_fast.workload.stats import workload_stats
from blis_fast.workload.workload import Workload

__all__ = [
    "MAX_TOKEN_ID",
    "PRESETS",
    "TRACE_HEADER",
    "WORKLOAD_KINDS",
    "DistributionSpec",
    "Requests",
    "Workload",
    "WorkloadSpec",
    "constant_gap_us",
    "generate_distribution",
    "generate_from_spec",
    "generate_requests",
    "is_rich_trace",
    "load_blis_trace",
    "load_preset",
    "load_spec",
    "load_trace",
    "parse_spec",
    "preset_spec",
    "read_trace",
    "round_half_away",
    "sample_arrivals",
    "sample_lengths",
    "workload_stats",
    "write_blis_trace",
    "write_trace",
]
