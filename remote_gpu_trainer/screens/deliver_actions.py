"""The dashboard's Deliver panel actions (docs/deliver.md §9): `b` builds everything, `r` reconciles (only
while the Deliver panel is shown; elsewhere `r` refreshes), enter on a figure opens it.

A helper the dashboard owns (screens/dashboard.py makes one with the session it was given and routes the keys
here), so the screen module stays one screen's worth of code without a base class of stubs. Building and
reconciling read and write files for seconds: each runs in a thread worker on the screen, one at a time, its
progress drawn in the panel, and never cancelled by pressing its key again.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from textual.app import SuspendNotSupported

from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.screens.figure import FigurePathScreen, FigureScreen, image_support
from remote_gpu_trainer.views import BuildStep, DeliverView
from remote_gpu_trainer.widgets.deliver_panel import DeliverPanel

if TYPE_CHECKING:
    from textual.screen import Screen
    from textual.widget import Widget

    from remote_gpu_trainer.services.session import Session

DELIVER_PANEL = "panel-deliver"


class DeliverActions:
    """The Deliver panel's actions, owned by the dashboard: the screen routes `b`, `r` and enter on the panel's
    table here, and asks `allowed()` whether to offer b and r. Workers run on the screen (they end with it)."""

    def __init__(self, screen: Screen[None], session: Session, *, busy: Callable[[str], bool],
                 set_busy: Callable[[str, bool], None]) -> None:
        self.screen = screen
        self.session = session
        self.busy = busy  # the screen's: whether the action's slot is taken
        self.set_busy = set_busy  # the screen's: greys the key while it runs
        self.view: DeliverView | None = None
        self.generation = 0  # a view made before the latest request is dropped, never drawn over a newer one
        self._panel: Widget | None = None  # the Deliver panel, once active() found it

    def active(self) -> bool:
        """Whether the Deliver panel is the one shown. Asked for every binding each time the footer is drawn
        (check_action): the panel is found once, not by a query over the whole screen each time."""
        if self._panel is None:
            panels = self.screen.query(f"#{DELIVER_PANEL}")
            if not panels:
                return False
            self._panel = panels.first()
        return self._panel.has_class("-active")

    def allowed(self, action: str) -> bool | None:
        """b and the reconciling r: offered only while the Deliver panel is shown in a writable session
        (False hides them, and r then falls through to refresh); greyed while one runs."""
        if not self.active() or self.session.read_only:
            return False
        return None if self.busy(action) else True

    def refresh(self) -> None:
        self.generation += 1
        self.screen.run_worker(partial(self._read_view, self.generation), name="_deliver_view_worker",
                               group="deliver-view", thread=True)

    def _read_view(self, generation: int) -> None:
        app = self.screen.app
        try:
            from remote_gpu_trainer.services.deliver import build as deliver  # when the panel is first shown

            view = deliver.deliver_view(self.session.project.root)
        except Exception as exc:  # noqa: BLE001 - a bug in the view is a toast, never a dashboard taken down
            app.call_from_thread(self.screen.notify, f"the Deliver panel could not be read: {type(exc).__name__}: "
                                 f"{exc}", severity="error", timeout=15)
            return
        app.call_from_thread(self._show, view, generation)

    def _show(self, view: DeliverView, generation: int) -> None:
        if generation != self.generation or not self.screen.query(DeliverPanel):
            return
        self.view = view
        self.screen.query_one(DeliverPanel).deliver = view

    # -- b: build everything --------------------------------------------------------------------------------
    def build(self) -> None:
        if self.busy("build"):
            return
        self.set_busy("build", True)
        self.screen.query_one(DeliverPanel).show_progress(("building: figures, tables, evidence, macros…",))
        self.screen.run_worker(self._build, name="_build_worker", group="deliver-build", thread=True)

    def _build(self) -> None:
        app = self.screen.app
        lines: list[str] = []

        def progress(step: BuildStep | str) -> None:
            lines[:] = [line for line in lines if not line.endswith("…")]
            lines.append(step.line if isinstance(step, BuildStep) else step)
            app.call_from_thread(self.screen.query_one(DeliverPanel).show_progress, tuple(lines))

        try:
            session = self.session
            from remote_gpu_trainer.services.deliver import build as deliver

            outcome = deliver.build_all(session.project, session.db, session.clock(), progress=progress)
        except RgtError as exc:
            app.call_from_thread(self.screen.notify, f"build failed: {exc}", severity="error", timeout=15)
        else:
            severity = "information" if outcome.exit_code == 0 else "warning"
            app.call_from_thread(self.screen.notify, outcome.summary, severity=severity, timeout=10)
        finally:
            app.call_from_thread(self.set_busy, "build", False)
            app.call_from_thread(self.refresh)

    # -- r: reconcile ---------------------------------------------------------------------------------------
    def reconcile(self) -> None:
        if self.busy("reconcile"):
            return
        self.set_busy("reconcile", True)
        self.screen.run_worker(self._reconcile, name="_reconcile_worker", group="deliver-reconcile", thread=True)

    def _reconcile(self) -> None:
        app = self.screen.app
        try:
            from remote_gpu_trainer.services.deliver import build as deliver

            line = deliver.reconcile_now(self.session.project)
        except RgtError as exc:
            app.call_from_thread(self.screen.notify, f"reconcile failed: {exc}", severity="error", timeout=15)
        else:
            app.call_from_thread(self.screen.notify, line, timeout=10)
        finally:
            app.call_from_thread(self.set_busy, "reconcile", False)
            app.call_from_thread(self.refresh)

    # -- enter: open a figure -------------------------------------------------------------------------------
    def open_output(self, key: str) -> None:
        """Enter on a row of the panel's table: a table's files are named, a figure opens (drawn where the
        terminal can, else its path and the command that opens it)."""
        output = self.view.output(key) if self.view is not None else None
        if output is None:
            return
        screen, app = self.screen, self.screen.app
        if output.kind == "table":
            screen.notify(f"tables/{output.id}/final.md (final.tex and final.csv beside it)")
        elif output.image is None or not os.path.isfile(output.image):
            screen.notify(f"figure {output.id} has no final.png yet: b builds everything", severity="warning")
        elif image_support(os.environ) and self._images_loaded():
            app.push_screen(FigureScreen(f"figure {output.id}", output.image))
        else:
            app.push_screen(FigurePathScreen(f"figure {output.id}", output.image, output.open_command))

    def _images_loaded(self) -> bool:
        """Import textual-image once, with Textual's hold on the terminal suspended: it asks the terminal
        what it can draw, and the answer would otherwise be read as keys."""
        if "textual_image.widget" in sys.modules:
            return True
        app = self.screen.app
        try:
            if app.is_headless:
                importlib.import_module("textual_image.widget")
            else:
                with app.suspend():
                    importlib.import_module("textual_image.widget")
        except (ImportError, SuspendNotSupported):
            return False
        return True
