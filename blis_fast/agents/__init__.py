"""Agent workflows as DAGs (issue 26): scenario files (``scenario.py``) and the per-run
request and node arrays an event loop consumes (``generate.py``)."""
