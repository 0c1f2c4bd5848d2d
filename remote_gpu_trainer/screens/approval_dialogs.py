"""The two dialogs of the Approvals screen (screens/approvals.py): the typed approval of an irreversible request,
and the form that grants the agent a spending allowance.

ApproveScreen is the teardown modal's twin (screens/teardown.py, docs/ux.md §6): focus starts on Cancel, typing
goes into the id field wherever the focus is, Approve stays disabled until the typed id is the box's, and Enter
approves only a matching id. Both dialogs only collect what the person typed: services/inbox/decide.py and
services/inbox/allowances.py check it again and act.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from remote_gpu_trainer.request_views import RequestView
from remote_gpu_trainer.screens.typed_field import type_into
from remote_gpu_trainer.text import escape_control
from remote_gpu_trainer.widgets.glyphs import plain

DIALOG_CSS = """
ApproveScreen, GrantScreen { align: center middle; }
#approve-dialog, #grant-dialog {
    width: 90%; max-width: 100; height: auto; max-height: 100%; background: $surface; padding: 0 1;
}
#approve-dialog { border: thick $error; border-title-color: $error; border-title-style: bold; }
#grant-dialog { border: thick $warning; border-title-color: $warning; border-title-style: bold; }
#approve-lines { height: auto; max-height: 12; }
#approve-buttons, #grant-buttons { height: auto; align-horizontal: right; }
#approve-buttons Button, #grant-buttons Button { margin: 0 1; }
#grant-dialog Input { width: 1fr; }
#grant-dialog .grant-row { height: auto; }
#grant-dialog .grant-row Label { width: 22; padding: 1 1 0 0; }
"""


class ApproveScreen(ModalScreen[str | None]):
    """Dismisses with the typed instance id when it is the plan's `type_to_confirm`, or None on cancel."""

    DEFAULT_CSS = DIALOG_CSS
    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    AUTO_FOCUS = "#cancel"

    def __init__(self, view: RequestView) -> None:
        super().__init__()
        self.view = view
        self.expected = view.plan.type_to_confirm or ""

    def compose(self) -> ComposeResult:
        with Vertical(id="approve-dialog") as dialog:
            # the id and the lines quote the provider, the box and the agent: shown, never obeyed
            shown_id = escape_control(self.expected)
            dialog.border_title = escape(escape_control(f"Approve {self.view.id}: {self.view.kind} of "
                                                        f"{self.view.subject} — IRREVERSIBLE"))
            yield Static(plain(f"Why ({self.view.filed_by}): {self.view.why}", keep_newlines=True), id="approve-why")
            yield Static(plain("\n".join(self.view.plan.lines), keep_newlines=True), id="approve-lines")
            yield Label(f"Type the instance id ({shown_id}) to approve:", markup=False)
            yield Input(placeholder="instance id", id="approve-id", select_on_focus=False)
            with Horizontal(id="approve-buttons"):
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button("Approve", id="approve", variant="error", disabled=True)

    def on_key(self, event: events.Key) -> None:
        """Typing goes into the #approve-id field wherever the focus is (screens/typed_field.py)."""
        type_into(self, "#approve-id", event)

    @on(Input.Changed, "#approve-id")
    def _typed(self, event: Input.Changed) -> None:
        self.query_one("#approve", Button).disabled = event.value.strip() != self.expected

    @on(Input.Submitted, "#approve-id")
    def _submitted(self, event: Input.Submitted) -> None:
        if event.value.strip() == self.expected:
            self.dismiss(self.expected)
        else:
            self.notify(escape_control(f"{event.value.strip()!r} is not the instance id: nothing was done"),
                        severity="warning", markup=False)

    @on(Button.Pressed, "#approve")
    def _approve(self) -> None:
        typed = self.query_one("#approve-id", Input).value.strip()
        if typed == self.expected:
            self.dismiss(typed)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


@dataclass(frozen=True)
class Grant:
    """What a person typed into the allowance form; services/inbox/allowances.py checks it again before granting
    anything."""

    max_price_per_hour: float
    total: float
    hours: float


GRANT_FIELDS = (("grant-price", "max price per hour $", "e.g. 1.50"), ("grant-total", "total $", "e.g. 20"),
                ("grant-hours", "for hours", "e.g. 8"))


class GrantScreen(ModalScreen[Grant | None]):
    """The three figures of an allowance; services/inbox/allowances.grant checks them and records it."""

    DEFAULT_CSS = DIALOG_CSS
    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    AUTO_FOCUS = "#grant-price"

    def compose(self) -> ComposeResult:
        with Vertical(id="grant-dialog") as dialog:
            dialog.border_title = "Grant the agent a spending allowance"
            yield Static("Rents and resumes an agent asks for within it run without a keystroke, and are counted "
                         "against its total. A teardown, a stop or a finding decision always waits for you.",
                         markup=False)
            for field_id, label, placeholder in GRANT_FIELDS:
                with Horizontal(classes="grant-row"):
                    yield Label(label, markup=False)
                    yield Input(placeholder=placeholder, id=field_id, type="number")
            with Horizontal(id="grant-buttons"):
                yield Button("Cancel", id="grant-cancel")
                yield Button("Grant", id="grant", variant="warning")

    @on(Input.Submitted, "#grant-price")
    @on(Input.Submitted, "#grant-total")
    def _next_field(self) -> None:
        self.focus_next()

    @on(Input.Submitted, "#grant-hours")
    @on(Button.Pressed, "#grant")
    def _grant(self) -> None:
        values = []
        for field_id, label, _ in GRANT_FIELDS:
            text = self.query_one(f"#{field_id}", Input).value.strip()
            try:
                values.append(float(text))
            except ValueError:
                self.notify(escape_control(f"{label.rstrip(' $')}: {text!r} is not a number"), severity="warning",
                            markup=False)
                self.query_one(f"#{field_id}", Input).focus()
                return
        self.dismiss(Grant(*values))

    @on(Button.Pressed, "#grant-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
