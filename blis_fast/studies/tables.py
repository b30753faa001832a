"""Output of a study's tables: aligned text for the terminal, Parquet or CSV files.

Numbers read as in the ``run`` view (blis_fast.cli.output: three significant figures,
thousands separated, fractions as percentages); a mean over seeds with its 95 % interval
is rounded to the precision the interval supports (``interval_text``: ``299 ± 12``, not
``299.166 ± 12.3``).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

from blis_fast.text import metric_text, unit_of
from blis_fast.config.validate import show, show_text
from blis_fast.errors import ConfigError

TABLE_FORMATS = (".parquet", ".csv")
GAP = "  "  # between columns


def terminal_width() -> int | None:
    """The columns of the terminal stdout writes to (``COLUMNS`` when set); None for a
    pipe or a file, where tables keep every column on one line for scripts."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdecimal() and len(columns) <= 6:  # (a longer value is no real terminal: ignored)
        return max(int(columns), 20)
    try:
        if not sys.stdout.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return shutil.get_terminal_size((100, 24)).columns


CELL_CHARS = 80


def text_table(header: list[str], rows: list[list[str]], left: int = 0, width: int | None = None,
               keep: int | None = None) -> str:
    """Columns padded to their widest cell: the first ``left`` left-aligned, the rest
    right-aligned.  Wider than ``width`` characters, the table is split into blocks of
    columns (separated by a blank line), each repeating the first ``keep`` columns (default
    ``left``, at least one) so that every row stays readable on the terminal.  Cells may
    hold user text (a configuration's file name, a swept name, a metric): each is shortened
    to CELL_CHARS with control characters escaped."""
    header = [show_text(c, CELL_CHARS) for c in header]
    rows = [[show_text(c, CELL_CHARS) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def block(cols: list[int]) -> str:
        return "\n".join(GAP.join(r[i].ljust(widths[i]) if i < left else r[i].rjust(widths[i]) for i in cols)
                         for r in [header, *rows])

    everything = list(range(len(header)))
    if width is None or sum(widths) + len(GAP) * (len(widths) - 1) <= width:
        return block(everything)
    keep = min(max(left if keep is None else keep, 1), len(header))
    base = sum(widths[:keep]) + len(GAP) * keep
    blocks, cols, used = [], [], base
    for i in everything[keep:]:
        if cols and used + widths[i] > width:  # (a column wider than the terminal gets a block of its own)
            blocks.append(cols)
            cols, used = [], base
        cols.append(i)
        used += widths[i] + len(GAP)
    blocks.append(cols)
    return "\n\n".join(block(everything[:keep] + c) for c in blocks)


def interval_text(metric: str, mean: float | None, half_width: float = 0.0, with_unit: bool = False) -> str:
    """A mean and the half-width of its 95 % interval for reading: both rounded to two
    significant figures of the half-width (``299 ± 12``, ``10,940 ± 290``, ``97.3 ± 1.2%``);
    without an interval (one seed: 0) the value as the ``run`` view prints it; "-" for
    None or a non-finite mean.  ``with_unit`` appends the metric's unit (``299 ± 12 req/s``)."""
    if mean is None or not math.isfinite(mean):
        return "-"
    if not half_width or not math.isfinite(half_width):
        return metric_text(metric, mean, with_unit)
    unit = unit_of(metric)
    scale = 100.0 if unit == "%" else 1.0
    m, h = mean * scale, abs(half_width) * scale
    text = f"{rounded(m, h)} ± {rounded(h, h)}"
    if unit == "%":
        return text + "%"
    return f"{text} {unit}" if with_unit and unit else text


def rounded(value: float, uncertainty: float) -> str:
    """``value`` rounded to the decimal place of the second significant figure of
    ``uncertainty`` (> 0), thousands separated: ``rounded(299.166, 12.3)`` is "299",
    ``rounded(0.97312, 0.0123)`` "0.973"."""
    place = max(math.floor(math.log10(uncertainty)) - 1, -12)  # (no metric is known to more places)
    step = 10.0 ** place
    units = value / step
    if not abs(units) < 2.0**53:  # more figures than a float holds: the value as it is
        return f"{value:,.0f}" if math.isfinite(value) else "-"
    return f"{round(units) * step + 0.0:,.{max(-place, 0)}f}"  # (+ 0.0: no "-0")


def bracket_text(met: float, failed: float) -> str:
    """A capacity answer known to lie between a met probe and a failed one: the met value
    rounded to the precision the bracket supports (``bracket_text(338.686, 362.039)`` is
    "339"; the JSON keeps every digit)."""
    gap = abs(failed - met)
    return rounded(met, gap) if gap > 0 and math.isfinite(gap) else f"{met:,.6g}"


def check_table_path(path, flag: str = "--out") -> Path:
    """``path`` as a Path ending in .parquet or .csv (ConfigError naming ``flag``)."""
    p = Path(path)
    if p.suffix.lower() not in TABLE_FORMATS:
        raise ConfigError(flag, f"must end in .parquet or .csv, got {show(str(path))}")
    return p


def write_rows(rows: list[dict], path, flag: str = "--out") -> None:
    """``rows`` (dicts with the same keys) as a Parquet or CSV file, by suffix, atomically;
    a column holding any text is written as text."""
    import pyarrow as pa  # deferred: pyarrow

    from blis_fast.config.outputs import atomic_write  # deferred: yaml

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
            import pyarrow.csv as pcsv  # deferred: pyarrow

            pcsv.write_csv(table, str(tmp))
        else:
            import pyarrow.parquet as pq  # deferred: pyarrow

            pq.write_table(table, str(tmp))

    atomic_write(path, write, flag)
