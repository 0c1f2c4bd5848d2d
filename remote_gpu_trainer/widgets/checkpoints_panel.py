"""Checkpoint integrity: one row per file of the manifest, with what verification found."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from ..services.overview import RunView
from .glyphs import badge, short_hash, size


class CheckpointsPanel(Vertical):
    def compose(self) -> ComposeResult:
        table: DataTable[object] = DataTable(id="checkpoints", cursor_type="row")
        table.add_columns("status", "file", "size", "sha256", "load / detail")
        yield table
        yield Static("", id="checkpoint-summary")

    def show(self, run: RunView | None) -> None:
        table = self.query_one("#checkpoints", DataTable)
        table.clear()
        summary = self.query_one("#checkpoint-summary", Static)
        if run is None:
            summary.update("no run")
            return
        for c in run.checkpoints:
            table.add_row(badge(c.status), c.path, size(c.bytes), short_hash(c.sha256), c.detail, key=c.path)
        verified = sum(1 for c in run.checkpoints if c.status == "verified")
        if not run.checkpoints:
            summary.update(f"{run.evidence_state} · no manifest yet: p pulls once the job finished")
        else:
            summary.update(f"{run.evidence_state} · {verified}/{len(run.checkpoints)} verified · p pull · v verify")
