"""Agent workflows (issue 26): the exact multi-resource fair share of tool nodes
(``fairshare.py``)."""
