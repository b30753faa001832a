"""The server's ``/metrics``: Prometheus text exposition (format 0.0.4) under vLLM's metric
names, so dashboards and autoscalers written for vLLM read the emulator unchanged.

Gauges are read from the live engine's State when scraped (running and waiting requests,
KV-cache usage); counters and histograms are fed as requests progress.  Latencies are on
the *simulated* clock (what the engine computed; with ``--time-scale K`` the wall clock
runs K times slower or faster).  Histogram buckets are vLLM's.
"""

from __future__ import annotations

import bisect

import numpy as np

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
               960.0, 1920.0, 7680.0)
LATENESS_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


class Histogram:
    """Cumulative buckets, a sum and a count (Prometheus's histogram)."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last: above every bound (+Inf only)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out, total = [], 0
        for bound, c in zip(self.buckets, self.counts):
            total += c
            out.append(f'{name}_bucket{{{labels},le="{bound}"}} {total}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{{{labels}}} {self.sum!r}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


class ServerMetrics:
    """What ``/metrics`` reports for one served model."""

    def __init__(self, model_name: str) -> None:
        self.labels = f'model_name="{_escape(model_name)}"'
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.lateness = Histogram(LATENESS_BUCKETS)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.finished = {"length": 0, "abort": 0, "rejected": 0}

    def first_token(self, prompt_tokens: int, cached_tokens: int, ttft_s: float) -> None:
        self.ttft.observe(ttft_s)
        self.prompt_tokens += prompt_tokens
        self.prefix_queries += prompt_tokens
        self.prefix_hits += cached_tokens

    def render(self, state) -> str:
        """The exposition text, with the gauges read from the engine's ``state`` now."""
        inst = state.inst
        active = inst["active"] != 0
        running = int(inst["batch_len"][active].sum())
        waiting = int(inst["wq_len"][active].sum() + inst["routed_pending"][active].sum())
        total = inst["kv_total"][active].astype(np.float64)
        usage = float((inst["kv_allocated"][active] / np.maximum(total, 1)).mean()) if active.any() else 0.0
        lb = self.labels
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lb}}} {running}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{lb}}} {waiting}",
            "# HELP vllm:gpu_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:gpu_cache_usage_perc gauge", f"vllm:gpu_cache_usage_perc{{{lb}}} {usage!r}",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{lb}}} {usage!r}",
            "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
            "# TYPE vllm:prefix_cache_queries_total counter",
            f"vllm:prefix_cache_queries_total{{{lb}}} {self.prefix_queries}",
            "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
            "# TYPE vllm:prefix_cache_hits_total counter", f"vllm:prefix_cache_hits_total{{{lb}}} {self.prefix_hits}",
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter", f"vllm:prompt_tokens_total{{{lb}}} {self.prompt_tokens}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{lb}}} {self.generation_tokens}",
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
            *(f'vllm:request_success_total{{{lb},finished_reason="{k}"}} {v}' for k, v in self.finished.items()),
        ]
        for name, text, h in (("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                               self.ttft),
                              ("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
                               self.itl),
                              ("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in "
                                                                   "seconds.", self.e2e),
                              ("blis_fast:emission_lateness_seconds", "Wall seconds a token was sent after the "
                                                                     "time the engine gave it.", self.lateness)):
            lines += [f"# HELP {name} {text}", f"# TYPE {name} histogram", *h.lines(name, lb)]
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
