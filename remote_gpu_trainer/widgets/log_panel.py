"""The live log of the selected run with its loss chart: bounded memory, follow/pause, filter, jump to error.

The panel only renders what services.log_monitor hands it (numbered, classified lines); it parses
nothing. Memory is bounded by MAX_LINES whatever the log's length. The lines go to a LogView, which renders
only the rows on screen, so a backlog poll of thousands of lines costs a list append, not a frame
(docs/architecture.md §5: no frame later than 50 ms while a log is ingested).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, Static

from remote_gpu_trainer.text import escape_control
from remote_gpu_trainer.views import LogLineView
from remote_gpu_trainer.widgets.log_view import LogView
from remote_gpu_trainer.widgets.loss_chart import LossChart

MAX_LINES = 5000


class LogPanel(Vertical):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lines: deque[LogLineView] = deque(maxlen=MAX_LINES)
        self.filter_text = ""
        self.first_error: LogLineView | None = None
        self.progress_text = ""  # what #log-progress shows (it starts empty and hidden)

    def compose(self) -> ComposeResult:
        yield LossChart(id="loss-chart")  # the filter's field comes above it, made when first asked for
        yield LogView(MAX_LINES, id="log")
        yield Static("", id="log-progress")

    def filter_field(self) -> Input:
        """The filter's field, mounted the first time `/` asks for it (not with the first frame: an Input's
        styles and its cursor's blink timer are work no start needs)."""
        found = next(self.query("#log-filter").results(Input), None)
        if found is None:
            found = Input(placeholder="filter the log (esc clears)", id="log-filter")
            self.mount(found, before=0)
        return found

    @property
    def following(self) -> bool:
        return self.query_one("#log", LogView).auto_scroll

    def append(self, lines: Sequence[LogLineView]) -> None:
        if self.first_error is None:
            self.first_error = next((line for line in lines if line.level in ("error", "critical")), None)
        self.lines.extend(lines)
        visible = lines if not self.filter_text else [line for line in lines if self._matches(line.text)]
        self.query_one("#log", LogView).write_lines(visible)

    def reset(self, why: str) -> None:
        """The followed file started over (truncated or replaced): say so in the log itself."""
        self.lines.clear()
        self.first_error = None
        marker = LogLineView(0, f"── {why} ──", "warn")
        self.lines.append(marker)
        self._redraw([marker])

    def set_progress(self, text: str) -> None:
        """The live progress bar (a line still being redrawn with carriage returns). The same text again draws
        nothing: the log is polled every 0.5 s and an idle dashboard must cost nothing (issue 29)."""
        if text == self.progress_text:
            return
        self.progress_text = text
        progress = self.query_one("#log-progress", Static)
        # one row high whatever it says (app.tcss): a new bar frame is a repaint, never a layout of the whole
        # screen (one per batch while a backlog is read, up to 30 ms each: the late frames of issue 29)
        progress.update(Text(escape_control(text[:500]), no_wrap=True, overflow="ellipsis"), layout=False)
        progress.set_class(bool(text), "-visible")

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._redraw([line for line in self.lines if self._matches(line.text)])
        self.border_subtitle = f"filter: {text}" if text else ""

    def toggle_follow(self) -> bool:
        log = self.query_one("#log", LogView)
        log.auto_scroll = not log.auto_scroll
        if log.auto_scroll:
            log.scroll_end(animate=False)
        return log.auto_scroll

    def jump_to(self, line_no: int) -> bool:
        """Scroll to a log line and stop following there; False when it is no longer held or filtered out."""
        log = self.query_one("#log", LogView)
        row = log.index_of(line_no)
        if row is None:
            return False
        log.auto_scroll = False
        log.scroll_to(y=row, animate=False)
        return True

    def _redraw(self, lines: Sequence[LogLineView]) -> None:
        log = self.query_one("#log", LogView)
        log.clear()
        log.write_lines(lines)

    def _matches(self, line: str) -> bool:
        return not self.filter_text or self.filter_text.lower() in line.lower()

    def text(self) -> str:
        return "\n".join(line.text for line in self.query_one("#log", LogView).lines)
