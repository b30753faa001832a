"""``blis-fast bench`` agent scenarios: kernel time of agent DAG runs (docs/agents.md "Speed").

    agents-100k       ~100K requests of a 5-tool DAG, tools only, through the fair-share
                      driver (kernels/agents/fairshare.py ``run_tool_dags``)
    agents-100k-loop  the same run in the simulator's event loop beside an idle default
                      cluster (kernels/engine/agents.py): the cost of hosting the agents
                      in the one loop ("x base": against agents-100k)
    agents-llm        ~20K requests of the same DAG with plan and answer as llm nodes on an
                      8-instance cluster (40K LLM requests): the cost of mixing in llm nodes
                      ("x base": against agents-100k, per agent request)

Untimed: the run is generated (run 0 of the scenario file, configs/agents/bench/), one run
loads the kernels and checks that every request completed.  Timed: ``repeats`` runs; the
best kernel time is reported (the driver's call, or the event loop's), with the agents'
events (their arrivals and resource finish events: the founding document's "events") per
second, and the event loop's own count beside (its agent instants, the llm requests' and
the engine steps' events).
Every repeat must give the warm-up's node finish times (a fast wrong run is no result).
"""

from __future__ import annotations

import statistics

import numpy as np

from blis_fast.errors import BlisFastError
from blis_fast.experiments.scenarios import text_table
from blis_fast.paths import configs_dir

# name -> (scenario file under configs/agents/bench, path: "driver" or "loop", the scenario compared with)
AGENT_SCENARIOS = {
    "agents-100k": ("tools-100k.yaml", "driver", None),
    "agents-100k-loop": ("tools-100k.yaml", "loop", "agents-100k"),
    "agents-llm": ("llm-20k.yaml", "loop", "agents-100k"),
}


def bench_agents(name: str, repeats: int = 3) -> dict:
    """Timings of one agent bench scenario (module docstring)."""
    from blis_fast.agents.generate import build_templates, generate_run  # deferred: yaml, the kernels
    from blis_fast.agents.run import run_setup, scenario_of, simulate_cluster_run, simulate_run  # deferred: as above
    from blis_fast.run.api import as_config  # deferred: yaml
    from blis_fast.run.resolve import resolve  # deferred: the shipped model and hardware data

    file, path, _ = AGENT_SCENARIOS[name]
    scenario = scenario_of(configs_dir() / "agents" / "bench" / file)
    templates, run = build_templates(scenario), generate_run(scenario, 0)
    setup = run_setup(scenario) if path == "loop" else None
    if path == "loop" and setup is None:  # tools only, in the event loop beside an idle default cluster
        setup = resolve(as_config(None))

    def once():
        if setup is None:
            return simulate_run(scenario, templates, run)
        return simulate_cluster_run(scenario, templates, run, setup)

    warm = once()
    if not (warm.node_finish_us >= 0).all():
        raise BlisFastError(f"scenario {name}: {int((warm.node_finish_us < 0).sum())} agent nodes did not finish")
    times = []
    for _ in range(repeats):
        out = once()
        times.append(out.kernel_s)
        if not np.array_equal(out.node_finish_us, warm.node_finish_us):
            raise BlisFastError(f"scenario {name}: a repeat differs from the warm-up run (not deterministic)")
    best = min(times)
    loop_events = int(warm.cluster.state.loop[0]["events"]) if warm.cluster is not None else 0
    return {
        "name": name, "path": path, "scenario": file, "requests": int(run.num_requests), "nodes": int(run.num_nodes),
        "llm_requests": int(np.count_nonzero(run.node_prompt_tokens >= 0)), "repeats": repeats,
        "kernel_times_s": times, "kernel_best_s": best, "kernel_median_s": statistics.median(times),
        "agent_events": warm.events, "loop_events": loop_events,
        "agent_events_per_s": warm.events / best if best > 0 else None,
        "requests_per_s": run.num_requests / best if best > 0 else None,
    }


def relate(rows: list[dict]) -> None:
    """Each row's kernel time per agent request against its base scenario's, when measured."""
    per_request = {r["name"]: r["kernel_best_s"] / max(r["requests"], 1) for r in rows}
    for r in rows:
        base = AGENT_SCENARIOS[r["name"]][2]
        if base in per_request and per_request[base] > 0:
            r["relative_to"] = {"scenario": base, "ratio_per_request": round(per_request[r["name"]] / per_request[base], 3)}


def format_agents(rows: list[dict]) -> list[str]:
    """Lines of the agents table (for ``experiments.bench.format_report``)."""
    out = ["", "agent DAGs (configs/agents/bench; kernel = the fair-share driver or the event loop; best of repeats; "
               "x base = kernel time per agent request against the base scenario's)"]
    out += text_table(
        ["agents", "path", "requests", "nodes", "llm requests", "kernel s", "agent events", "agent events/s",
         "loop events", "x base"],
        [[r["name"], r["path"], str(r["requests"]), str(r["nodes"]), str(r["llm_requests"]),
          f"{r['kernel_best_s']:.3f}", str(r["agent_events"]),
          "-" if r["agent_events_per_s"] is None else f"{r['agent_events_per_s'] / 1e6:.2f}M",
          str(r["loop_events"]) if r["path"] == "loop" else "-",
          f"{r['relative_to']['ratio_per_request']:.2f}" if "relative_to" in r else "-"]
         for r in rows],
    )
    return out


__all__ = ["AGENT_SCENARIOS", "bench_agents", "format_agents", "relate"]
