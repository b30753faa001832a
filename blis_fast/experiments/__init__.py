"""Studies above single runs: the benchmark scenarios (``bench``)."""
