"""The dashboard's Deliver panel actions (docs/deliver.md §9): `b` builds everything, `r` reconciles (only
while the Deliver panel is shown; elsewhere `r` refreshes), enter on a figure opens it.

A base class of DashboardScreen, so the screen module stays one screen's worth of code. Building and
reconciling read and write files for seconds: each runs in a thread worker, one at a time, its progress drawn
in the panel, and never cancelled by pressing its key again.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import SuspendNotSupported
from textual.screen import Screen
from textual.widgets import DataTable

from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.screens.figure import FigurePathScreen, FigureScreen, image_support
from remote_gpu_trainer.services.deliver import build as deliver
from remote_gpu_trainer.views import BuildStep, DeliverView
from remote_gpu_trainer.widgets.deliver_panel import DeliverPanel

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

DELIVER_PANEL = "panel-deliver"


class DeliverActions(Screen[None]):
    busy: set[str]
    deliver_view: DeliverView | None = None
    deliver_generation = 0  # a view made before the latest request is dropped, never drawn over a newer one

    def set_busy(self, slot: str, running: bool) -> None: ...  # DashboardScreen's: greys the key while it runs

    @property
    def deliver_session(self) -> Session:
        from remote_gpu_trainer.app import RgtApp

        assert isinstance(self.app, RgtApp)
        return self.app.session

    def deliver_active(self) -> bool:
        panels = self.query(f"#{DELIVER_PANEL}")
        return bool(panels) and panels.first().has_class("-active")

    def deliver_allowed(self, action: str) -> bool | None:
        """b and the reconciling r: offered only while the Deliver panel is shown in a writable session
        (False hides them, and r then falls through to refresh); greyed while one runs."""
        if not self.deliver_active() or self.deliver_session.read_only:
            return False
        return None if action in self.busy else True

    def refresh_deliver(self) -> None:
        self.deliver_generation += 1
        self._deliver_view_worker(self.deliver_generation)

    @work(group="deliver-view", thread=True)
    def _deliver_view_worker(self, generation: int) -> None:
        try:
            view = deliver.deliver_view(self.deliver_session.project.root)
        except Exception as exc:  # noqa: BLE001 - a bug in the view is a toast, never a dashboard taken down
            self.app.call_from_thread(self.notify, f"the Deliver panel could not be read: {type(exc).__name__}: "
                                      f"{exc}", severity="error", timeout=15)
            return
        self.app.call_from_thread(self._show_deliver, view, generation)

    def _show_deliver(self, view: DeliverView, generation: int) -> None:
        if generation != self.deliver_generation or not self.query(DeliverPanel):
            return
        self.deliver_view = view
        self.query_one(DeliverPanel).deliver = view

    # -- b: build everything --------------------------------------------------------------------------------
    def action_build(self) -> None:
        if "build" in self.busy:
            return
        self.set_busy("build", True)
        self.query_one(DeliverPanel).show_progress(("building: figures, tables, evidence, macros…",))
        self._build_worker()

    @work(group="deliver-build", thread=True)
    def _build_worker(self) -> None:
        lines: list[str] = []

        def progress(step: BuildStep | str) -> None:
            lines[:] = [line for line in lines if not line.endswith("…")]
            lines.append(step.line if isinstance(step, BuildStep) else step)
            self.app.call_from_thread(self.query_one(DeliverPanel).show_progress, tuple(lines))

        try:
            session = self.deliver_session
            outcome = deliver.build_all(session.project, session.db, session.clock(), progress=progress)
        except RgtError as exc:
            self.app.call_from_thread(self.notify, f"build failed: {exc}", severity="error", timeout=15)
        else:
            severity = "information" if outcome.exit_code == 0 else "warning"
            self.app.call_from_thread(self.notify, outcome.summary, severity=severity, timeout=10)
        finally:
            self.app.call_from_thread(self.set_busy, "build", False)
            self.app.call_from_thread(self.refresh_deliver)

    # -- r: reconcile ---------------------------------------------------------------------------------------
    def action_reconcile(self) -> None:
        if "reconcile" in self.busy:
            return
        self.set_busy("reconcile", True)
        self._reconcile_worker()

    @work(group="deliver-reconcile", thread=True)
    def _reconcile_worker(self) -> None:
        try:
            line = deliver.reconcile_now(self.deliver_session.project)
        except RgtError as exc:
            self.app.call_from_thread(self.notify, f"reconcile failed: {exc}", severity="error", timeout=15)
        else:
            self.app.call_from_thread(self.notify, line, timeout=10)
        finally:
            self.app.call_from_thread(self.set_busy, "reconcile", False)
            self.app.call_from_thread(self.refresh_deliver)

    # -- enter: open a figure -------------------------------------------------------------------------------
    @on(DataTable.RowSelected, "#deliver")
    def _deliver_selected(self, event: DataTable.RowSelected) -> None:
        view = self.deliver_view
        output = view.output(str(event.row_key.value)) if view is not None else None
        if output is None:
            return
        if output.kind == "table":
            self.notify(f"tables/{output.id}/final.md (final.tex and final.csv beside it)")
        elif output.image is None or not os.path.isfile(output.image):
            self.notify(f"figure {output.id} has no final.png yet: b builds everything", severity="warning")
        elif image_support(os.environ) and self._images_loaded():
            self.app.push_screen(FigureScreen(f"figure {output.id}", output.image))
        else:
            self.app.push_screen(FigurePathScreen(f"figure {output.id}", output.image, output.open_command))

    def _images_loaded(self) -> bool:
        """Import textual-image once, with Textual's hold on the terminal suspended: it asks the terminal
        what it can draw, and the answer would otherwise be read as keys."""
        if "textual_image.widget" in sys.modules:
            return True
        try:
            if self.app.is_headless:
                importlib.import_module("textual_image.widget")
            else:
                with self.app.suspend():
                    importlib.import_module("textual_image.widget")
        except (ImportError, SuspendNotSupported):
            return False
        return True
