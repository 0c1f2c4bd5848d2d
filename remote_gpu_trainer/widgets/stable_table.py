"""A DataTable that is refilled only when its rows changed, keeping the cursor where the user left it.

The dashboard refreshes every two seconds; rebuilding unchanged tables would reset column widths until the
next idle moment and make the screen flicker under load.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable

from remote_gpu_trainer.text import escape_control

Row = tuple[str, Sequence[str | Text]]


class StableTable(DataTable[object]):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._signature: list[tuple[str, tuple[str, ...]]] | None = None

    def fill(self, rows: Sequence[Row]) -> bool:
        """Replace the rows (key, cells) unless they equal what is shown; returns whether anything changed."""
        signature = [(key, tuple(str(cell) for cell in cells)) for key, cells in rows]
        if signature == self._signature:
            return False
        self._signature = signature
        cursor = self.cursor_row
        self.clear()
        for key, cells in rows:
            # plain strings become Text: a log line or a note may hold "[...]", which is not markup, and
            # control characters from the box are shown escaped (a newline would break the row)
            self.add_row(*(Text(escape_control(cell)) if isinstance(cell, str) else cell for cell in cells),
                         key=key)
        self._measure_now()
        if rows:
            self.move_cursor(row=min(max(cursor, 0), len(rows) - 1))
        return True

    def _measure_now(self) -> None:
        """Size the columns for the new rows now, not at the next idle moment as DataTable does.

        DataTable caches each rendered cell without its column width; on a loaded machine a paint can come
        before that idle moment, and the cells drawn as narrow as the column labels then stay cached until
        the rows next change. Measuring here is what DataTable's idle handler does (the same private
        fields), so the first paint after a refill already has the final widths.
        """
        new_rows = set(self._new_rows)
        self._new_rows.clear()
        self._require_update_dimensions = False
        self._update_dimensions(new_rows)
