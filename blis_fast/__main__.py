"""``python -m blis_fast``: the ``blis-fast`` command."""

from blis_fast.cli import main

main()
