"""``python -m blis_fast.cli``."""

from blis_fast.cli import main

main()
