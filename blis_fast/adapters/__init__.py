"""Fitness adapters for evolutionary search frameworks, on top of ``blis_fast.batch``:

- ``gepa``: ``BlisGEPAAdapter`` (gepa's adapter protocol) and an ``optimize_anything``
  evaluator (extra ``blis-fast[gepa]``);
- ``openevolve``: module-level ``evaluate`` / ``evaluate_stage1`` / ``evaluate_stage2``
  for OpenEvolve's evaluation file (extra ``blis-fast[openevolve]``);
- ``core``: what both share -- scenarios prepared once, candidates evaluated in
  parallel, feedback text an LLM can act on.  No framework is imported by it.
"""
