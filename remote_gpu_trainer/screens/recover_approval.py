"""A person's approval of a run's recovery limits in the TUI (docs/remote-ops.md §10.1): `R` on the dashboard.

The same lines and the same typed figure as `rgt recover RUN --approve`: the limits in words and what they are bound
to, then the `max_spend` figure typed. Focus starts on Cancel, Approve stays disabled until the typed figure is the
one shown, and Enter approves only a matching one. The dialog only collects what the person typed; `approve_in_tui`
records it through services/recover/approval.py for the limits that were shown (refused there if rgt.toml states
others by then). The actor is `person:tui`, like the inbox's decisions in the TUI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.screens.typed_field import type_into
from remote_gpu_trainer.services.inbox.model import person_actor
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.config.recover import RecoverLimits
    from remote_gpu_trainer.screens.dashboard import DashboardScreen

CSS = """
RecoverApproveScreen { align: center middle; }
#recover-dialog { width: 90%; max-width: 100; height: auto; max-height: 100%; background: $surface; padding: 0 1;
                  border: thick $warning; border-title-color: $warning; border-title-style: bold; }
#recover-buttons { height: auto; align-horizontal: right; }
#recover-buttons Button { margin: 0 1; }
"""


class RecoverApproveScreen(ModalScreen[bool]):
    """Dismisses True once the typed figure is the shown `max_spend`, False on cancel."""

    DEFAULT_CSS = CSS
    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    AUTO_FOCUS = "#cancel"

    def __init__(self, run_id: str, lines: tuple[str, ...], figure: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.lines = lines
        self.figure = figure

    def compose(self) -> ComposeResult:
        with Vertical(id="recover-dialog") as dialog:
            dialog.border_title = escape_control(f"Approve recovery of {self.run_id}: it may rent and spend")
            yield Static("\n".join(escape_control(line) for line in self.lines), markup=False, id="recover-lines")
            yield Label(f"Type the max_spend shown ({self.figure}) to approve:", markup=False)
            yield Input(id="recover-figure", placeholder=self.figure, select_on_focus=False)
            with Horizontal(id="recover-buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Approve", id="approve", variant="warning", disabled=True)

    def on_key(self, event: events.Key) -> None:
        """Typing goes into the #recover-figure field wherever the focus is (screens/typed_field.py)."""
        type_into(self, "#recover-figure", event)

    @on(Input.Changed, "#recover-figure")
    def _typed(self, event: Input.Changed) -> None:
        self.query_one("#approve", Button).disabled = not self._matches(event.value)

    @on(Input.Submitted, "#recover-figure")
    def _submitted(self, event: Input.Submitted) -> None:
        if self._matches(event.value):
            self.dismiss(True)
        else:
            self.notify(escape_control(f"{event.value.strip()!r} is not {self.figure}: nothing was approved"),
                        severity="warning", markup=False)

    @on(Button.Pressed, "#approve")
    def _approve(self) -> None:
        if self._matches(self.query_one("#recover-figure", Input).value):
            self.dismiss(True)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(False)

    def _matches(self, typed: str) -> bool:
        return typed.strip() == self.figure


def open_approval(screen: DashboardScreen, run_id: str | None) -> None:
    """`R`: the approval dialog for the shown run's recovery limits, or a line saying why there is none."""
    from remote_gpu_trainer.services.recover import approval

    run = screen.session.project.runs.get(run_id or "")
    if run is None or run.recover is None:
        screen.notify(f"run {run_id}: no runs.{run_id}.recover limits in rgt.toml: nothing to approve", markup=False)
        return
    if screen.session.read_only:
        screen.notify("read-only session: approvals are given where rgt may write", markup=False)
        return
    shown: RecoverLimits = run.recover
    lines = approval.approval_prompt(screen.session, run.id)
    figure = f"{shown.max_spend:.2f}"

    def decided(approved: bool | None) -> None:
        if approved:
            approve_in_tui(screen, run.id, shown)

    screen.app.push_screen(RecoverApproveScreen(run.id, lines, figure), callback=decided)


def approve_in_tui(screen: DashboardScreen, run_id: str, shown: RecoverLimits) -> None:
    """Record the approval of the limits the dialog showed; a refusal (edited meanwhile) is said, nothing recorded."""
    from remote_gpu_trainer.services.recover import approval

    try:
        event = approval.approve(screen.session, run_id, shown, person_actor("tui"))
    except RgtError as exc:
        screen.notify(escape_control(str(exc)), severity="error", markup=False)
        return
    screen.notify(f"recovery of {run_id} approved by person:tui (event {event.seq})", markup=False)
    screen.refresh_overview()
