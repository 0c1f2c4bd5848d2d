"""The teardown confirmation (docs/ux.md §6): the exact action, what it destroys, what still burns.

Focus starts on Cancel; the Terminate button stays disabled until the typed id matches; there is no
shortcut key. The screen only collects the approval: the teardown service decides and acts.
"""

from __future__ import annotations

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from remote_gpu_trainer.text import escape_control
from remote_gpu_trainer.views import TeardownPlan


class TeardownScreen(ModalScreen[str | None]):
    """Dismisses with the typed instance id on confirm, or None on cancel."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    AUTO_FOCUS = "#cancel"

    def __init__(self, plan: TeardownPlan) -> None:
        super().__init__()
        self.plan = plan

    def compose(self) -> ComposeResult:
        kind = "IRREVERSIBLE" if self.plan.irreversible else "reversible, storage keeps billing"
        with Vertical(id="teardown-dialog") as dialog:
            # the id, the lines and the reasons can quote the provider and the box: shown, never obeyed
            shown_id = escape_control(self.plan.provider_id)
            dialog.border_title = escape(f"{self.plan.action_label} {shown_id} — {kind}")
            yield Static(escape_control("\n".join(self.plan.lines), keep_newlines=True), id="teardown-lines",
                         markup=False)
            yield Static(escape_control("\n".join(f"✖ {r}" for r in self.plan.reasons), keep_newlines=True),
                         id="teardown-reasons", markup=False)
            yield Label(f"Type the instance id ({shown_id}) to confirm:", markup=False)
            yield Input(placeholder="instance id", id="confirm-id", select_on_focus=False)
            yield Static("", id="teardown-progress")
            with Horizontal(id="teardown-buttons"):
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button(self.plan.action_label, id="confirm", variant="error", disabled=True)

    def on_key(self, event: events.Key) -> None:
        """Typing goes into the id field wherever the focus is (it starts on Cancel, so Enter alone never
        confirms): the approval is what was typed, and only a matching id enables the action. A key that
        arrives before the dialog is composed is left alone rather than crashing the app."""
        fields = self.query("#confirm-id").results(Input)
        field = next(fields, None)
        if field is not None and not field.has_focus and event.is_printable and event.character:
            field.focus()
            field.insert_text_at_cursor(event.character)
            event.stop()
            event.prevent_default()

    @on(Input.Changed, "#confirm-id")
    def _typed(self, event: Input.Changed) -> None:
        self.query_one("#confirm", Button).disabled = not self._accepts(event.value)

    @on(Input.Submitted, "#confirm-id")
    def _submitted(self, event: Input.Submitted) -> None:
        if self._accepts(event.value):
            self.dismiss(event.value.strip())
        elif not self.plan.enabled:
            self.notify(escape_control(f"gate closed: {self.plan.why_not}: nothing was done"), severity="warning",
                        markup=False)
        else:
            self.notify(escape_control(f"{event.value.strip()!r} is not the instance id: nothing was done"),
                        severity="warning", markup=False)

    def _accepts(self, typed: str) -> bool:
        return self.plan.enabled and typed.strip() == self.plan.provider_id

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#confirm")
    def _confirm(self) -> None:
        self.dismiss(self.query_one("#confirm-id", Input).value.strip())
