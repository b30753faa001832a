"""Workload file formats: BLIS trace CSV (``blis_csv``) and blis-fast rich traces
(``rich_trace``: YAML header + CSV/Parquet table)."""
