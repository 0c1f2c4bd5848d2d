"""The verification checklist: automatic answers and the user's ticks with their notes."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from remote_gpu_trainer.views import RunView
from remote_gpu_trainer.widgets.glyphs import badge
from remote_gpu_trainer.widgets.stable_table import StableTable

HINT = "space: tick / untick a manual item · a: acknowledge a finding (a note is required)"


class ChecklistPanel(Vertical):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.run: RunView | None = None

    def compose(self) -> ComposeResult:
        table = StableTable(id="checklist", cursor_type="row")
        table.add_columns("status", "item", "note")
        yield table
        yield Static(HINT, id="checklist-summary")

    def show(self, run: RunView | None) -> None:
        self.run = run
        table = self.query_one("#checklist", StableTable)
        rows = [(f.id, (badge(f.severity if f.status == "open" else "acknowledged"),
                        f"{f.id} [{f.check}] {f.message}" + (f" ×{f.count}" if f.count > 1 else ""), f.fix))
                for f in (run.sorted_findings() if run else ()) if f.check.startswith("log:")]
        rows += [(item.id, (badge(item.status), f"{item.id} [{item.kind}] {item.title}", item.note))
                 for item in (run.checklist if run else ())]
        rows += [(f"E{row.id:02d}", (badge(row.status), f"E{row.id:02d} [env] {row.check}", row.detail))
                 for row in (run.environment if run else ())]
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

    def _describe(self, item_id: str | None) -> None:
        """The highlighted item's answer or note, in full, under the table: narrow screens cut the column."""
        finding = next((f for f in self.run.findings if f.id == item_id), None) if self.run else None
        item = next((c for c in self.run.checklist if c.id == item_id), None) if self.run else None
        env = next((r for r in self.run.environment if f"E{r.id:02d}" == item_id), None) if self.run else None
        if finding is not None:
            text = f"{finding.id} {finding.severity} {finding.status}: {finding.message} → fix: {finding.fix}"
        elif item is not None:
            text = f"{item.id} {item.status}: {item.note or item.title}"
        elif env is not None:
            text = f"E{env.id:02d} {env.check} {env.status}: {env.detail}"
        else:
            text = HINT
        self.query_one("#checklist-summary", Static).update(Text(text))
