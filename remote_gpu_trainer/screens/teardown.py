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

from remote_gpu_trainer.screens.typed_field import type_into
from remote_gpu_trainer.text import escape_control
from remote_gpu_trainer.views import TeardownPlan


class TeardownScreen(ModalScreen[str | None]):
    """Dismisses with the typed instance id on confirm, or None on cancel; `accepted` then holds the runs whose
    results the person typed to give up (docs/gate.md §7.2), when the plan had any at risk."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    AUTO_FOCUS = "#cancel"

    def __init__(self, plan: TeardownPlan) -> None:
        super().__init__()
        self.plan = plan
        self.accepted: tuple[str, ...] = ()

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
            if self.plan.at_risk:
                names = escape_control(", ".join(self.plan.loss_names))
                yield Label(f"Results not known to be home: {names}. To give them up, type their names "
                            "(comma-separated):", markup=False, id="accept-loss-label")
                yield Input(placeholder="names of the runs you accept to lose", id="accept-loss",
                            select_on_focus=False)
            yield Label(f"Type the instance id ({shown_id}) to confirm:", markup=False)
            yield Input(placeholder="instance id", id="confirm-id", select_on_focus=False)
            yield Static("", id="teardown-progress")
            with Horizontal(id="teardown-buttons"):
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button(self.plan.action_label, id="confirm", variant="error", disabled=True)

    def on_key(self, event: events.Key) -> None:
        """Typing goes into the #confirm-id field wherever the focus is (screens/typed_field.py)."""
        type_into(self, "#confirm-id", event, over_other_inputs=False)

    @on(Input.Changed, "#confirm-id")
    def _typed(self, event: Input.Changed) -> None:
        self.query_one("#confirm", Button).disabled = not self._accepts(event.value)

    @on(Input.Changed, "#accept-loss")
    def _losses_typed(self, event: Input.Changed) -> None:
        """The names typed so far waive their runs' reasons; what is left closed stays shown."""
        self.accepted = tuple(n.strip() for n in event.value.split(",") if n.strip())
        current = self._current()
        self.query_one("#teardown-reasons", Static).update(
            escape_control("\n".join(f"✖ {r}" for r in current.reasons), keep_newlines=True))
        self.query_one("#confirm", Button).disabled = not self._accepts(self.query_one("#confirm-id", Input).value)

    def _current(self) -> TeardownPlan:
        return self.plan.accepting(self.accepted) if self.plan.at_risk else self.plan

    @on(Input.Submitted, "#confirm-id")
    def _submitted(self, event: Input.Submitted) -> None:
        current = self._current()
        if self._accepts(event.value):
            self.dismiss(event.value.strip())
        elif not current.enabled:
            self.notify(escape_control(f"gate closed: {current.why_not}: nothing was done"), severity="warning",
                        markup=False)
        else:
            self.notify(escape_control(f"{event.value.strip()!r} is not the instance id: nothing was done"),
                        severity="warning", markup=False)

    def _accepts(self, typed: str) -> bool:
        return self._current().enabled and typed.strip() == self.plan.provider_id

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#confirm")
    def _confirm(self) -> None:
        self.dismiss(self.query_one("#confirm-id", Input).value.strip())
