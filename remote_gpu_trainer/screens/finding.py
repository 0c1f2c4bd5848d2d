"""A VERIFY finding's detail, and the user's decision about it: acknowledge (a note and the disclosure that
rides with the claims it touches; optionally for the whole check) or waive (a note saying why it does not
apply). The screen only collects the decision; services/audit/findings.py checks and records it."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Static

from remote_gpu_trainer.text import escape_control
from remote_gpu_trainer.views import AuditFindingView
from remote_gpu_trainer.widgets.glyphs import plain


@dataclass(frozen=True)
class FindingDecision:
    """What the user decided on the finding screen (acknowledge or waive, with a note, a disclosure and a scope);
    services/audit/findings.py checks and records it."""

    status: str  # acknowledged | waived
    note: str
    disclosure: str
    scope: str  # subject | check


class FindingScreen(ModalScreen[FindingDecision | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    AUTO_FOCUS = "#finding-note"

    def __init__(self, finding: AuditFindingView, detail: str) -> None:
        super().__init__()
        self.finding = finding
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="finding-dialog"):
            with VerticalScroll(id="finding-detail"):
                yield Static(plain(self.detail, keep_newlines=True))
            # the message quotes the box (a metric's name, a path): escaped before it is put in an editable field
            yield Input(value=escape_control(self.finding.note), placeholder="why (required)", id="finding-note")
            yield Input(value=escape_control(self.finding.disclosure or self.finding.message),
                        id="finding-disclosure", placeholder="the text that rides with the claims it touches")
            yield Checkbox("for the whole check (every subject of the project)", self.finding.scope == "check",
                           id="finding-scope")
            with Horizontal(id="finding-buttons"):
                yield Button("Cancel", id="finding-cancel")
                yield Button("Waive", id="finding-waive")
                yield Button("Acknowledge", id="finding-ack", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#finding-note", Input).border_title = "note"
        self.query_one("#finding-disclosure", Input).border_title = "disclosure (required to acknowledge)"

    def _decision(self, status: str) -> FindingDecision:
        return FindingDecision(status, self.query_one("#finding-note", Input).value,
                               self.query_one("#finding-disclosure", Input).value,
                               "check" if self.query_one("#finding-scope", Checkbox).value else "subject")

    @on(Button.Pressed, "#finding-ack")
    @on(Input.Submitted)
    def _acknowledge(self) -> None:
        self._submit("acknowledged")

    @on(Button.Pressed, "#finding-waive")
    def _waive(self) -> None:
        self._submit("waived")

    def _submit(self, status: str) -> None:
        """The service decides; the two refusals a person can mend here are caught before the dialog closes,
        so nothing typed is lost."""
        decision = self._decision(status)
        if not decision.note.strip():
            self.notify("a note is required", severity="warning")
            return
        if status == "acknowledged" and not decision.disclosure.strip():
            self.notify("acknowledging needs a disclosure: the text that rides with the claims", severity="warning")
            return
        self.dismiss(decision)

    @on(Button.Pressed, "#finding-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
