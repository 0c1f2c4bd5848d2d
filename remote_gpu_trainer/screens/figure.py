"""Enter on a figure in the Deliver panel: the figure itself where the terminal draws images (textual-image,
loaded only then), otherwise a dialog with its path and the command that opens it.

Whether a terminal draws images is read from what it says about itself (TERM, TERM_PROGRAM and the variables
kitty, WezTerm, Konsole set); `RGT_IMAGES=1` or `0` decides when that guess is wrong. textual-image asks the
terminal itself when it is first imported, which it cannot do while Textual reads the keyboard: the dashboard
imports it inside `App.suspend()` (screens/deliver_actions.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from remote_gpu_trainer.text import escape_control

IMAGE_TERMS = ("kitty", "foot", "mlterm", "contour", "ghostty", "wezterm")
IMAGE_PROGRAMS = ("wezterm", "iterm.app", "ghostty", "konsole", "contour")


def image_support(environ: Mapping[str, str]) -> bool:
    """Whether the terminal draws pixels (Sixel or the kitty graphics protocol), from its own variables."""
    forced = environ.get("RGT_IMAGES", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    term = environ.get("TERM", "").lower()
    program = environ.get("TERM_PROGRAM", "").lower()
    return (any(name in term for name in IMAGE_TERMS) or program in IMAGE_PROGRAMS
            or "KITTY_WINDOW_ID" in environ or "KONSOLE_VERSION" in environ)


class FigurePathScreen(ModalScreen[None]):
    """Where the figure is and how to open it, for a terminal that cannot draw it."""

    BINDINGS = [Binding("escape", "close", "Close"), Binding("enter", "close", "Close", show=False)]
    AUTO_FOCUS = "#figure-close"

    def __init__(self, title: str, path: str, command: str) -> None:
        super().__init__()
        self.title_text = title
        self.lines = ("This terminal does not draw images (set RGT_IMAGES=1 if it does).", "", "The file:",
                      f"  {path}", "", "Open it with:", f"  {command}")

    def compose(self) -> ComposeResult:
        with Vertical(id="figure-dialog") as dialog:
            dialog.border_title = escape_control(self.title_text)
            yield Static(escape_control("\n".join(self.lines), keep_newlines=True), id="figure-lines",
                         markup=False)
            with Horizontal(id="figure-buttons"):
                yield Button("Close", id="figure-close", variant="primary")

    @on(Button.Pressed, "#figure-close")
    def action_close(self) -> None:
        self.dismiss(None)


class FigureScreen(ModalScreen[None]):
    """The figure drawn in the terminal, its path under it; escape closes."""

    BINDINGS = [Binding("escape", "close", "Close"), Binding("enter", "close", "Close", show=False),
                Binding("q", "close", "Close", show=False)]

    def __init__(self, title: str, path: str) -> None:
        super().__init__()
        self.title_text = title
        self.path = path

    def compose(self) -> ComposeResult:
        from textual_image.widget import Image  # loaded on the first figure opened, never at start-up

        with Vertical(id="figure-dialog") as dialog:
            dialog.border_title = escape_control(self.title_text)
            yield Image(self.path, id="figure-image")
            yield Static(escape_control(f"{self.path} · esc closes"), id="figure-caption", markup=False)

    def action_close(self) -> None:
        self.dismiss(None)
