"""The live log of the selected run: bounded memory, follow/pause and a substring filter."""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, RichLog

MAX_LINES = 5000


class LogPanel(Vertical):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lines: deque[str] = deque(maxlen=MAX_LINES)
        self.filter_text = ""
        self._partial = ""

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter the log (esc clears)", id="log-filter")
        yield RichLog(id="log", max_lines=MAX_LINES, wrap=False, markup=False, highlight=False,
                      auto_scroll=True)

    def feed(self, data: bytes) -> None:
        """Append raw bytes: split on newlines and carriage returns, keep the last partial line."""
        text = self._partial + data.decode("utf-8", errors="replace")
        parts = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._partial = parts.pop()
        log = self.query_one("#log", RichLog)
        for line in parts:
            line = line[:2000]
            self.lines.append(line)
            if self._matches(line):
                log.write(Text(line))

    def reset(self) -> None:
        self.lines.clear()
        self._partial = ""
        self.query_one("#log", RichLog).clear()

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        log = self.query_one("#log", RichLog)
        log.clear()
        for line in self.lines:
            if self._matches(line):
                log.write(Text(line))
        self.border_subtitle = f"filter: {text}" if text else ""

    def toggle_follow(self) -> bool:
        log = self.query_one("#log", RichLog)
        log.auto_scroll = not log.auto_scroll
        if log.auto_scroll:
            log.scroll_end(animate=False)
        return log.auto_scroll

    def _matches(self, line: str) -> bool:
        return not self.filter_text or self.filter_text.lower() in line.lower()

    def text(self) -> str:
        return "\n".join(line.text for line in self.query_one("#log", RichLog).lines)
