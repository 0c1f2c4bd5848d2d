"""Every box in one view, drawn (docs/remote-ops.md §9.3): the summary, one table row per instance of every
known project (the cells `rgt status` prints, text.box_cells), then the orphans with their mark, the projects
that could not be read and the accounts that could not be listed. It renders the FleetView it is given."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from remote_gpu_trainer.fleet_views import FleetView
from remote_gpu_trainer.text import (
    BOX_COLUMNS,
    box_notes,
    escape_control,
    fleet_rows,
    fleet_summary,
    orphan_cells,
    project_line,
)

LOADING = "All boxes · asking every box of every project you opened, and every cloud account …"


def tilde(root: str) -> str:
    """A project folder under the home folder as `~/…`: the table has no room for /home/someone."""
    home = str(Path.home())
    return "~" + root[len(home):] if root == home or root.startswith(home + "/") else root


def detail_lines(view: FleetView) -> list[str]:
    """What the table has no column for: notes of boxes, orphans, projects not read, accounts not listed."""
    lines = box_notes(view)
    if view.orphans:
        lines += ["", "Orphans (listed by a cloud account, named by no project):"]
        lines += ["  ".join(orphan_cells(orphan)) for orphan in view.orphans]
    troubled = [p for p in view.projects if p.status != "ok"]
    if troubled:
        lines += ["", "Projects not read:"] + [project_line(p, tilde(p.root)) for p in troubled]
    if view.account_errors:
        lines += ["", "Accounts not listed:"] + [escape_control(f"✖ {error}") for error in view.account_errors]
    return lines


class AllBoxesPanel(Vertical):
    DEFAULT_CSS = """
    AllBoxesPanel { height: 1fr; }
    AllBoxesPanel #all-boxes-summary { height: auto; padding: 0 1; text-style: bold; }
    AllBoxesPanel #all-boxes-table { height: auto; max-height: 60%; }
    AllBoxesPanel #all-boxes-details { height: auto; padding: 0 1; margin-top: 1; }
    """

    view: reactive[FleetView | None] = reactive(None)

    def compose(self) -> ComposeResult:
        yield Static(LOADING, id="all-boxes-summary", markup=False)
        table: DataTable[str] = DataTable(id="all-boxes-table", cursor_type="row")
        table.add_columns(*BOX_COLUMNS)
        yield table
        yield Static("", id="all-boxes-details", markup=False)

    def watch_view(self, view: FleetView | None) -> None:
        if not self.is_mounted:
            return
        summary = self.query_one("#all-boxes-summary", Static)
        table: DataTable[str] = self.query_one("#all-boxes-table", DataTable)
        details = self.query_one("#all-boxes-details", Static)
        table.clear()
        if view is None:
            summary.update(LOADING)
            details.update("")
            return
        summary.update(f"All boxes · {fleet_summary(view)} · asked at {view.generated_at:%H:%M:%S} UTC")
        for box, cells in zip(view.instances, fleet_rows(view), strict=True):
            table.add_row(*cells, key=f"{box.root}\0{box.name}")
        details.update("\n".join(detail_lines(view)).strip("\n") or ("no instances" if not view.instances else ""))

    def on_mount(self) -> None:
        self.watch_view(self.view)
