"""Agent workflows as DAGs (issue 26): scenario files (``scenario.py``), the per-run
request and node arrays an event loop consumes (``generate.py``), running a scenario's runs
(``run.py``) and their results (``results.py``).

``run_scenario(path_or_dict, runs=None) -> AgentResult`` is the Python API of
``blis-fast agents run`` (docs/agents.md)."""

from blis_fast.agents.results import AgentResult, run_scenario

__all__ = ["AgentResult", "run_scenario"]
