"""Checkpoint integrity: one row per file of the manifest, with what verification found."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import DataTable, ProgressBar, Static

from remote_gpu_trainer.text import cadence_line, location_drift_line, recovery_line
from remote_gpu_trainer.views import Overview, RunView
from remote_gpu_trainer.widgets.glyphs import badge, plain, short_hash, show_text, size
from remote_gpu_trainer.widgets.stable_table import StableTable


class CheckpointsPanel(Vertical):
    # repaint=False: a container draws through its children, each redrawn only when its own text changed (issue 29)
    overview: reactive[Overview | None] = reactive(None, always_update=True, init=False, repaint=False)
    run_id: reactive[str | None] = reactive(None, init=False)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.run: RunView | None = None
        self.summary = ""

    def compose(self) -> ComposeResult:
        table = StableTable(id="checkpoints", cursor_type="row")
        table.add_columns("status", "file", "size", "sha256", "load / detail")
        yield table
        yield Static("", id="checkpoint-summary")  # a pull's progress bar comes above it, made at the first pull

    def watch_overview(self, overview: Overview | None) -> None:
        if overview is not None:
            self.show(overview.run(self.run_id) if self.run_id else None)

    def show(self, run: RunView | None) -> None:
        self.run = run
        table = self.query_one("#checkpoints", StableTable)
        summary = self.query_one("#checkpoint-summary", Static)
        if run is None:
            summary.update("no run")
            return
        table.fill([(c.path, (badge(c.status), c.path, size(c.bytes), short_hash(c.sha256), c.detail))
                    for c in run.checkpoints])
        verified = sum(1 for c in run.checkpoints if c.status == "verified")
        if not run.checkpoints:
            self.summary = f"{run.evidence_state} · no manifest yet: p pulls once the job finished"
        else:
            self.summary = f"{run.evidence_state} · {verified}/{len(run.checkpoints)} verified · p pull · v verify"
        if run.sentinel:  # the on-box sentinel that notifies while rgt is not running (docs/remote-ops.md §9.1)
            self.summary += f" · sentinel {run.sentinel}"
        if run.checkpoint_cadence is not None:  # Young/Daly on a preemptible box (docs/remote-ops.md §10)
            self.summary += f"\n{cadence_line(run.checkpoint_cadence)}"
        if run.recovery is not None:  # runs.<id>.recover: approved or not, restarts and spending (§10.1)
            self.summary += f"\n{recovery_line(run.recovery)}"
        if run.location_drift:  # rgt.toml moved the run since its launch: shown, applied at the next (docs/gate.md §7)
            self.summary += f"\n{location_drift_line(run.location_drift)}"
        show_text(summary, plain(self.summary))

    @on(DataTable.RowHighlighted, "#checkpoints")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        """The highlighted file's full result under the table, when the focus is here."""
        row = next((c for c in self.run.checkpoints if c.path == event.row_key.value), None) if self.run else None
        if row is not None and self.query_one("#checkpoints", DataTable).has_focus:
            self.query_one("#checkpoint-summary", Static).update(plain(f"{row.path}: {row.status} · {row.detail}"))

    def show_progress(self, done: int, total: int, line: str) -> None:
        """The pull's bytes so far over all files, and the latest file's line under it."""
        found = self.query("#pull-progress").results(ProgressBar)
        bar = next(found, None)
        if bar is None:  # not composed with the panel: four widgets and their styles the first frame did without
            bar = ProgressBar(id="pull-progress", show_eta=True)
            self.mount(bar, before="#checkpoint-summary")
        bar.add_class("-visible")
        bar.update(total=max(total, 1), progress=done)
        self.query_one("#checkpoint-summary", Static).update(plain(line))

    def hide_progress(self) -> None:
        self.query("#pull-progress").remove_class("-visible")
