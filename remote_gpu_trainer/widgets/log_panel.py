"""The live log of the selected run with its loss chart: bounded memory, follow/pause, filter, jump to error.

The panel only renders what services.log_monitor hands it (numbered, classified lines); it parses
nothing. Memory is bounded by MAX_LINES whatever the log's length, and one poll never writes more than
RENDER_CAP lines, so a backlog of a million lines cannot freeze a frame.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, RichLog, Static

from remote_gpu_trainer.text import escape_control
from remote_gpu_trainer.views import LogLineView
from remote_gpu_trainer.widgets.loss_chart import LossChart

MAX_LINES = 5000
RENDER_CAP = 300  # more than a screen; writing thousands of lines in one frame would stall it
_LEVEL_STYLE = {"critical": "bold red", "error": "red", "warn": "yellow"}


class LogPanel(Vertical):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lines: deque[LogLineView] = deque(maxlen=MAX_LINES)
        self.shown: deque[int] = deque(maxlen=MAX_LINES)  # line numbers in the RichLog, in order
        self.filter_text = ""
        self.first_error: LogLineView | None = None

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter the log (esc clears)", id="log-filter")
        yield LossChart(id="loss-chart")
        yield RichLog(id="log", max_lines=MAX_LINES, wrap=False, markup=False, highlight=False,
                      auto_scroll=True)
        yield Static("", id="log-progress")

    @property
    def following(self) -> bool:
        return self.query_one("#log", RichLog).auto_scroll

    def append(self, lines: Sequence[LogLineView]) -> None:
        for line in lines:
            self.lines.append(line)
            if self.first_error is None and line.level in ("error", "critical"):
                self.first_error = line
        visible = [line for line in lines if self._matches(line.text)]
        if len(visible) > RENDER_CAP:
            self._redraw(list(self.lines)[-RENDER_CAP:])  # a backlog: show its newest lines only
            return
        log = self.query_one("#log", RichLog)
        for line in visible:
            self._write(log, line)

    def reset(self, why: str) -> None:
        """The followed file started over (truncated or replaced): say so in the log itself."""
        self.lines.clear()
        self.first_error = None
        marker = LogLineView(0, f"── {why} ──", "warn")
        self.lines.append(marker)
        self._redraw([marker])

    def set_progress(self, text: str) -> None:
        """The live progress bar (a line still being redrawn with carriage returns)."""
        progress = self.query_one("#log-progress", Static)
        progress.update(Text(escape_control(text[:500]), no_wrap=True, overflow="ellipsis"))
        progress.set_class(bool(text), "-visible")

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._redraw([line for line in self.lines if self._matches(line.text)][-MAX_LINES:])
        self.border_subtitle = f"filter: {text}" if text else ""

    def toggle_follow(self) -> bool:
        log = self.query_one("#log", RichLog)
        log.auto_scroll = not log.auto_scroll
        if log.auto_scroll:
            log.scroll_end(animate=False)
        return log.auto_scroll

    def jump_to(self, line_no: int) -> bool:
        """Scroll to a log line and stop following there; False when it is no longer held or filtered out."""
        if line_no not in self.shown:
            return False
        log = self.query_one("#log", RichLog)
        log.auto_scroll = False
        log.scroll_to(y=list(self.shown).index(line_no), animate=False)
        return True

    def _redraw(self, lines: Sequence[LogLineView]) -> None:
        log = self.query_one("#log", RichLog)
        log.clear()
        self.shown.clear()
        for line in lines:
            self._write(log, line)

    def _write(self, log: RichLog, line: LogLineView) -> None:
        # log_lines.py escaped the log's lines already; a line from anywhere else is escaped here too
        log.write(Text(escape_control(line.text), style=_LEVEL_STYLE.get(line.level or "", "")))
        self.shown.append(line.line_no)

    def _matches(self, line: str) -> bool:
        return not self.filter_text or self.filter_text.lower() in line.lower()

    def text(self) -> str:
        return "\n".join(line.text for line in self.query_one("#log", RichLog).lines)
