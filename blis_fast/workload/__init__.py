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
from blis_fast.workload.traces import TRACE_HEADER, load_blis_trace, write_blis_trace
from blis_fast.workload.workload import Workload

__all__ = [
    "MAX_TOKEN_ID",
    "PRESETS",
    "TRACE_HEADER",
    "WORKLOAD_KINDS",
    "DistributionSpec",
    "Workload",
    "constant_gap_us",
    "generate_distribution",
    "load_blis_trace",
    "load_preset",
    "preset_spec",
    "round_half_away",
    "sample_arrivals",
    "sample_lengths",
    "write_blis_trace",
]
