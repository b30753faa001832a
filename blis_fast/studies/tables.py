"""Output of a study's tables: aligned text for the terminal, Parquet or CSV files."""

from __future__ import annotations

from pathlib import Path

from blis_fast.config.validate import show, show_text
from blis_fast.errors import ConfigError

TABLE_FORMATS = (".parquet", ".csv")


CELL_CHARS = 80


def text_table(header: list[str], rows: list[list[str]], left: int = 0) -> str:
    """Columns padded to their widest cell: the first ``left`` left-aligned, the rest
    right-aligned.  Cells may hold user text (a configuration's file name, a swept name,
    a metric): each is shortened to CELL_CHARS with control characters escaped."""
    header = [show_text(c, CELL_CHARS) for c in header]
    rows = [[show_text(c, CELL_CHARS) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in [header, *rows])


def check_table_path(path, flag: str = "--out") -> Path:
    """``path`` as a Path ending in .parquet or .csv (ConfigError naming ``flag``)."""
    p = Path(path)
    if p.suffix.lower() not in TABLE_FORMATS:
        raise ConfigError(flag, f"must end in .parquet or .csv, got {show(str(path))}")
    return p


def write_rows(rows: list[dict], path, flag: str = "--out") -> None:
    """``rows`` (dicts with the same keys) as a Parquet or CSV file, by suffix, atomically;
    a column holding any text is written as text."""
    import pyarrow as pa

    from blis_fast.config.outputs import atomic_write

    names = list(rows[0]) if rows else []
    columns = {}
    for n in names:
        values = [r[n] for r in rows]
        if any(isinstance(v, str) for v in values):
            values = [None if v is None else str(v) for v in values]
        columns[n] = values
    table = pa.table(columns)
    csv = Path(path).suffix.lower() == ".csv"

    def write(tmp: Path) -> None:
        if csv:
            import pyarrow.csv as pcsv

            pcsv.write_csv(table, str(tmp))
        else:
            import pyarrow.parquet as pq

            pq.write_table(table, str(tmp))

    atomic_write(path, write, flag)
