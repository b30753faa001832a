"""Workloads: synthetic distributions and presets, BLIS trace files (SEMANTICS §7)."""

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
from blis_fast.workload.trace_format import is_rich_trace, load_trace, read_trace, workload_stats, write_trace
from blis_fast.workload.traces import TRACE_HEADER, load_blis_trace, write_blis_trace
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
