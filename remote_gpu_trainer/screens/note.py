"""Ask for a note: ticking a checklist item or acknowledging a finding needs one."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label


class NoteScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    AUTO_FOCUS = "#note"

    def __init__(self, title: str) -> None:
        super().__init__()
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical(id="note-dialog"):
            yield Label(self.title_text)
            yield Input(placeholder="note (required)", id="note")
            with Horizontal(id="note-buttons"):
                yield Button("Cancel", id="note-cancel")
                yield Button("Save", id="note-save", variant="primary")

    @on(Input.Submitted, "#note")
    @on(Button.Pressed, "#note-save")
    def _save(self) -> None:
        value = self.query_one("#note", Input).value.strip()
        if value:
            self.dismiss(value)
        else:
            self.notify("a note is required", severity="warning")

    @on(Button.Pressed, "#note-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
