"""The verification checklist: automatic answers and the user's ticks with their notes."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from ..services.overview import RunView
from .glyphs import badge

HINT = "space: tick / untick a manual item (a note is required)"


class ChecklistPanel(Vertical):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.run: RunView | None = None

    def compose(self) -> ComposeResult:
        table: DataTable[object] = DataTable(id="checklist", cursor_type="row")
        table.add_columns("status", "item", "note")
        yield table
        yield Static(HINT, id="checklist-summary")

    def show(self, run: RunView | None) -> None:
        self.run = run
        table = self.query_one("#checklist", DataTable)
        cursor = table.cursor_row
        table.clear()
        if run is None:
            return
        for item in run.checklist:
            kind = "auto" if item.kind == "auto" else "tick"
            table.add_row(badge(item.status), f"{item.id} [{kind}] {item.title}", item.note, key=item.id)
        if run.checklist:
            table.move_cursor(row=min(cursor, len(run.checklist) - 1))

    def highlighted_item(self) -> str | None:
        table = self.query_one("#checklist", DataTable)
        if table.row_count == 0:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return str(row_key.value) if row_key.value is not None else None

    @on(DataTable.RowHighlighted, "#checklist")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        """The highlighted item's answer or note, in full, under the table: narrow screens cut the column."""
        item = next((c for c in self.run.checklist if c.id == event.row_key.value), None) if self.run else None
        text = f"{item.id} {item.status}: {item.note or item.title}" if item else HINT
        self.query_one("#checklist-summary", Static).update(text)
