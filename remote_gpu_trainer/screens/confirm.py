"""The lighter approval of the confirm family (docs/ux.md §6): a statement, the lines to read, Yes/No.

Used for reversible cost-affecting actions (stop) and for trusting a host key. Focus starts on No; there
is no key that says yes without moving to it first.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from remote_gpu_trainer.text import escape_control


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [Binding("escape", "no", "Cancel"), Binding("left", "focus_previous", show=False),
                Binding("right", "focus_next", show=False)]
    AUTO_FOCUS = "#no"

    def __init__(self, title: str, lines: list[str] | tuple[str, ...], yes_label: str, no_label: str = "Cancel"):
        super().__init__()
        self.title_text = title
        self.lines = lines
        self.yes_label = yes_label
        self.no_label = no_label

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog") as dialog:
            dialog.border_title = self.title_text
            yield Static(escape_control("\n".join(self.lines), keep_newlines=True), id="confirm-lines", markup=False)
            with Horizontal(id="confirm-buttons"):
                yield Button(self.no_label, id="no", variant="primary")
                yield Button(self.yes_label, id="yes", variant="warning")

    @on(Button.Pressed, "#yes")
    def _yes(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#no")
    def action_no(self) -> None:
        self.dismiss(False)

    def action_focus_previous(self) -> None:
        self.focus_previous()

    def action_focus_next(self) -> None:
        self.focus_next()
