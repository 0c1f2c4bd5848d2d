"""The verification checklist: automatic answers and the user's ticks with their notes.

The rows, their keys and the text shown for the highlighted one come with the run's view
(RunView.checklist_rows, built by services/audit/checklist.py); this panel lays them out.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from remote_gpu_trainer.views import Overview, RunView
from remote_gpu_trainer.widgets.glyphs import badge, show_text
from remote_gpu_trainer.widgets.stable_table import StableTable

HINT = "space: tick / untick a manual item · a: acknowledge a finding (a note is required)"


class ChecklistPanel(Vertical):
    # repaint=False: a container draws through its children, each redrawn only when its own text changed (issue 29)
    overview: reactive[Overview | None] = reactive(None, always_update=True, init=False, repaint=False)
    run_id: reactive[str | None] = reactive(None, init=False)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.run: RunView | None = None

    def compose(self) -> ComposeResult:
        table = StableTable(id="checklist", cursor_type="row")
        table.add_columns("status", "item", "note")
        yield table
        yield Static(HINT, id="checklist-summary")

    def watch_overview(self, overview: Overview | None) -> None:
        if overview is not None:
            self.border_subtitle = overview.audit.caption
            self.show(overview.run(self.run_id) if self.run_id else None)

    def show(self, run: RunView | None) -> None:
        self.run = run
        table = self.query_one("#checklist", StableTable)
        rows = [(row.key, (badge(row.status), row.label, row.note)) for row in (run.checklist_rows if run else ())]
        if not table.fill(rows) and table.row_count:
            self._describe(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def highlighted_item(self) -> str | None:
        table = self.query_one("#checklist", DataTable)
        if table.row_count == 0:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return str(row_key.value) if row_key.value is not None else None

    @on(DataTable.RowHighlighted, "#checklist")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._describe(event.row_key.value)

    def _describe(self, key: str | None) -> None:
        """The highlighted row's answer or note, in full, under the table: narrow screens cut the column."""
        row = next((r for r in self.run.checklist_rows if r.key == key), None) if self.run else None
        show_text(self.query_one("#checklist-summary", Static), Text(row.describe if row is not None else HINT))
