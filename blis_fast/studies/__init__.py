"""Studies above single runs: many simulations answering one question.

    capacity.py  the highest rate / fewest instances meeting SLOs (``blis_fast.capacity``)
    sweep.py     grids of settings (``blis_fast.sweep``) and configurations side by side (``compare``)
    slo.py       SLO predicates (``ttft_p99_ms<=200``) and their margins
    runs.py      running configurations in parallel (threads: the kernel is nogil), seed statistics
    measure.py   the metrics a study keeps of each run
    tables.py    text tables, Parquet / CSV files
    plots.py     matplotlib figures (optional extra ``plot``)
"""
