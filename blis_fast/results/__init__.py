"""What a run produces: the ``Result`` (summary JSON, per-request records and table, files),
built from the kernel's tables by ``metrics`` (latency statistics, exact ITL), ``slo``
(attainment per class / tenant / client), ``anomalies`` and ``fitness``."""

from blis_fast.results.result import Result

__all__ = ["Result"]
