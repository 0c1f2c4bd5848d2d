"""The Deliver panel (5): claims with their ladder state and numbers, figures and tables with their QA and
whether they are current, and the last reconcile's drifts.

The rows, their keys and the text shown for the highlighted one come with the DeliverView (built by
services/deliver/build.py); this panel lays them out and shows the progress of a build it is told about.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from remote_gpu_trainer.views import DeliverRow, DeliverView
from remote_gpu_trainer.widgets.glyphs import badge, plain
from remote_gpu_trainer.widgets.stable_table import StableTable

HINT = "b: build everything · r: reconcile the documents · enter on a figure: open it"


class DeliverPanel(Vertical):
    deliver: reactive[DeliverView | None] = reactive(None, always_update=True, init=False)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.view: DeliverView | None = None
        self.progress: tuple[str, ...] = ()

    def compose(self) -> ComposeResult:
        """Nothing until the panel is first shown (`populate`): it is hidden at start, and its table and texts
        were work the dashboard's first frame did for nothing (issue 29)."""
        yield from ()

    def populate(self) -> None:
        """The panel's table and texts, mounted the first time it is shown."""
        if self.children:
            return
        table = StableTable(id="deliver", cursor_type="row")
        table.add_columns("status", "item", "detail")
        self.mount(table, Static(HINT, id="deliver-summary"), Static("", id="deliver-status"))

    def watch_deliver(self, view: DeliverView | None) -> None:
        if view is None:
            return
        self.view = view
        self.border_subtitle = view.caption
        table = self.query_one("#deliver", StableTable)
        rows = [(row.key, (badge(row.status), row.label, row.detail)) for row in view.rows]
        if not table.fill(rows) and table.row_count:
            self._describe(self.highlighted_key())
        elif not rows:
            self._describe(None)
        self._status()

    def highlighted_key(self) -> str | None:
        table = self.query_one("#deliver", DataTable)
        if table.row_count == 0:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return str(row_key.value) if row_key.value is not None else None

    def show_progress(self, lines: tuple[str, ...]) -> None:
        """The build's lines so far (one per item built, the last one what is being built now)."""
        self.progress = lines
        self._status()

    def _status(self) -> None:
        view = self.view
        lines = list(self.progress[-3:])
        if view is not None:
            lines.append(view.reconcile_line)
            lines += view.problems[:2]
        self.query_one("#deliver-status", Static).update(plain("\n".join(lines), keep_newlines=True))

    @on(DataTable.RowHighlighted, "#deliver")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._describe(event.row_key.value)

    def _describe(self, key: str | None) -> None:
        """The highlighted row in full under the table: the numbers and disclosures the column cuts."""
        row: DeliverRow | None = next((r for r in self.view.rows if r.key == key), None) if self.view else None
        self.query_one("#deliver-summary", Static).update(
            plain(row.describe if row is not None else HINT, keep_newlines=True))
