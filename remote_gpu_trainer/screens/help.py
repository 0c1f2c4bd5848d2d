"""`?`: the keys of the dashboard and a short glossary, from assets/help.md."""

from __future__ import annotations

from importlib import resources

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape", "close", "Close"), Binding("question_mark", "close", "Close"),
                Binding("q", "close", "Close", show=False)]

    def compose(self) -> ComposeResult:
        text = resources.files("remote_gpu_trainer").joinpath("assets/help.md").read_text(encoding="utf-8")
        with VerticalScroll(id="help-dialog"):
            yield Markdown(text)

    def action_close(self) -> None:
        self.dismiss(None)
