"""source.csv, the numbers a figure or table shows (docs/deliver.md §3): one point's value over its seeds, and the
one CSV writer and reader of DELIVER, so a rebuild of the same rows writes the same bytes.

- `mean_std(values) -> (mean, std | None)`: one point's value over its seeds, whatever doubles runs/ holds.
- `source_csv(columns, rows, key, where) -> bytes`: UTF-8, LF, trailing newline, floats via repr, sorted by
  the declared key columns.
- `read_source_csv(data) -> list[dict]`: the file read back as text cells, for the gates.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from remote_gpu_trainer.audits.catalogue.model import plain
from remote_gpu_trainer.audits.catalogue.numbers import mean, sample_std
from remote_gpu_trainer.errors import ConfigError


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """VERIFY's mean and sample std (audits/catalogue/numbers.py) of one point's per-seed values, for any doubles a
    box wrote: finite values whose sum overflows are averaged pre-divided, a spread beyond a double is inf, and a
    non-finite value (a diverged loss in train.csv) makes the mean inf or nan and the spread nan, so the gates
    (G6, Q2) report it instead of the build dying inside `statistics`."""
    listed = [float(v) for v in values]
    if not all(math.isfinite(v) for v in listed):
        return sum(listed) / len(listed), (math.nan if len(listed) > 1 else None)
    try:
        centre = mean(listed)
    except OverflowError:
        centre = math.fsum(v / len(listed) for v in listed)
    try:
        spread = sample_std(listed)
    except OverflowError:
        spread = math.inf
    return centre, spread


def source_csv(columns: Sequence[str], rows: Iterable[Mapping[str, Any]], key: Sequence[str], where: str) -> bytes:
    """The bytes of source.csv: the header, then one line per row sorted by the `key` columns; every row must
    have exactly `columns`. Floats are written with repr (full precision), None as an empty cell."""
    listed = [dict(row) for row in rows]
    for index, row in enumerate(listed):
        if set(row) != set(columns):
            missing, extra = sorted(set(columns) - set(row)), sorted(set(row) - set(columns))
            raise ConfigError(f"{where}: row {index} has columns that are not source.csv's ({', '.join(columns)})"
                              f"{': missing ' + ', '.join(missing) if missing else ''}"
                              f"{': extra ' + ', '.join(extra) if extra else ''}")
    listed.sort(key=lambda row: tuple(_order(row[k]) for k in key))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in listed:
        writer.writerow([cell_text(row[c]) for c in columns])
    return buffer.getvalue().encode("utf-8")


def cell_text(value: Any) -> str:
    value = plain(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _order(value: Any) -> tuple[int, Any]:
    """A total order over cells of mixed type: numbers, then text, then NaN, then empty."""
    value = plain(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (2, 0) if math.isnan(value) else (0, value)
    return (3, "") if value is None else (1, cell_text(value))


def read_source_csv(data: bytes) -> list[dict[str, str]]:
    """source.csv read back as text cells (the gates compare what was written, not what was meant)."""
    return list(csv.DictReader(io.StringIO(data.decode("utf-8"))))

