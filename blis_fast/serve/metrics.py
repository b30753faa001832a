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
    """What ``/metrics`` reports for one served model (``model``: its id, INSTANCE_DT.model)."""

    def __init__(self, model_name: str, model: int = 0) -> None:
        self.model = model
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

    def samples(self, state) -> dict[str, list[str]]:
        """{metric family: its HELP and TYPE lines and this model's samples}, the gauges read
        from the engine's ``state`` now."""
        inst = state.inst
        active = (inst["active"] != 0) & (inst["model"] == self.model)
        running = int(inst["batch_len"][active].sum())
        waiting = int(inst["wq_len"][active].sum() + inst["routed_pending"][active].sum())
        total = inst["kv_total"][active].astype(np.float64)
        usage = float((inst["kv_allocated"][active] / np.maximum(total, 1)).mean()) if active.any() else 0.0
        lb = self.labels
        fam: dict[str, list[str]] = {}

        def add(name: str, kind: str, text: str, *samples: str) -> None:
            fam.setdefault(name, [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]).extend(samples)

        for name, kind, text, value in (
                ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", running),
                ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", waiting),
                ("vllm:gpu_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage),
                ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage),
                ("vllm:prefix_cache_queries_total", "counter",
                 "Prefix cache queries, in terms of number of queried tokens.", self.prefix_queries),
                ("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
                 self.prefix_hits),
                ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", self.prompt_tokens),
                ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
                 self.generation_tokens)):
            add(name, kind, text, f"{name}{{{lb}}} {value}")
        add("vllm:request_success_total", "counter", "Count of successfully processed requests.",
            *(f'vllm:request_success_total{{{lb},finished_reason="{k}"}} {v}' for k, v in self.finished.items()))
        for name, text, h in (("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                               self.ttft),
                              ("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
                               self.itl),
                              ("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in "
                                                                   "seconds.", self.e2e),
                              ("blis_fast:emission_lateness_seconds", "Wall seconds a token was sent after the "
                                                                     "time the engine gave it.", self.lateness)):
            add(name, "histogram", text, *h.lines(name, lb))
        return fam


def render(metrics: list[ServerMetrics], state) -> str:
    """The exposition text of every served model's metrics (each family once, its samples
    model by model)."""
    families: dict[str, list[str]] = {}
    for m in metrics:
        for name, lines in m.samples(state).items():
            if name in families:
                families[name].extend(lines[2:])
            else:
                families[name] = list(lines)
    return "\n".join(line for lines in families.values() for line in lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
