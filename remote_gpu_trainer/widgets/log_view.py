"""A scrolling view of log lines that renders only the rows on screen (Textual's line API).

RichLog renders every line it is given through Rich when it is written: ~0.3 ms a line, so a backlog poll
that wrote a screenful of 300 lines held a frame for ~90 ms. Here writing a line costs a list append and a
width measure; a line becomes a `Strip` only when a row of the screen shows it, so the cost of a frame is
the screen's height whatever the log's length (the approach of Textualize/toolong's LogLines).

Text from the box is never markup: each line is one plain segment, its control characters escaped here
(text.escape_control) whoever wrote it, and styled by its level only.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from remote_gpu_trainer.text import escape_control, has_control
from remote_gpu_trainer.views import LogLineView

_TEXT = itemgetter(1)  # LogLineView.text, read in C
LEVEL_STYLES = {"critical": Style.parse("bold red"), "error": Style.parse("red"), "warn": Style.parse("yellow")}


class LogView(ScrollView, can_focus=True):
    """Holds at most `max_lines` lines (the oldest go first); follows the end while `auto_scroll` is on."""

    DEFAULT_CSS = """
    LogView {
        background: $surface;
        color: $foreground;
        overflow-y: scroll;
        &:focus {
            background-tint: $foreground 5%;
        }
    }
    """

    def __init__(self, max_lines: int, *, auto_scroll: bool = True, id: str | None = None) -> None:
        super().__init__(id=id)
        self.max_lines = max_lines
        self.auto_scroll = auto_scroll
        self._lines: list[LogLineView] = []
        self._widest = 0  # cells of the widest line written since the last clear

    @property
    def lines(self) -> Sequence[LogLineView]:
        """The lines held, oldest first, as shown (escaped)."""
        return self._lines

    def write_lines(self, lines: Sequence[LogLineView]) -> None:
        """Append lines; only their width is measured now, their rendering waits until a row shows them."""
        if not lines:
            return
        fresh = list(lines[-self.max_lines:])
        joined = " ".join(map(_TEXT, fresh))  # a backlog batch is thousands of lines: C-level scans of them all
        plain = not has_control(joined)
        if not plain:
            fresh = [_escaped(line) for line in fresh]
        if plain and joined.isascii() and "\t" not in joined:
            widest = max(map(len, map(_TEXT, fresh)))  # every character one cell wide
        else:
            widest = max(map(_cells, map(_TEXT, fresh)))
        self._widest = max(self._widest, widest)
        self._lines.extend(fresh)
        dropped = len(self._lines) - self.max_lines
        if dropped > 0:
            del self._lines[:dropped]
        self._size_to_lines()
        if self.auto_scroll:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
            # and again once laid out: a line wider than the view brings a horizontal scrollbar, a row less to show
            self.call_after_refresh(self.on_resize)
        elif dropped > 0:  # keep the rows the reader is looking at in place
            self.scroll_to(y=max(0, self.scroll_offset.y - dropped), animate=False, immediate=True)
        self.refresh()

    def on_resize(self) -> None:
        """A view that follows the end keeps its last line in sight when its height changes (the loss chart
        appearing above it takes rows): the scroll to the end at the last write used the height before."""
        if self.auto_scroll:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def watch_show_horizontal_scrollbar(self, shown: bool) -> None:
        """The horizontal scrollbar takes the view's last row when a wide line arrives: a view that follows the
        end scrolls to it again once that layout is done (the scroll at the write measured the row it had)."""
        if shown and self.auto_scroll:
            self.call_after_refresh(self.on_resize)

    def clear(self) -> None:
        self._lines.clear()
        self._widest = 0
        self.virtual_size = Size(0, 0)
        self.refresh()

    def _size_to_lines(self) -> None:
        """As wide as the widest line (a wider one scrolls sideways), as tall as the lines held."""
        self.virtual_size = Size(self._widest, len(self._lines))

    def index_of(self, line_no: int) -> int | None:
        """The row of a log line, None when it is not held (filtered out or dropped)."""
        for index in range(len(self._lines) - 1, -1, -1):
            if self._lines[index].line_no == line_no:
                return index
        return None

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        base = self.rich_style
        index = scroll_y + y
        if index >= len(self._lines):
            return Strip.blank(width, base)
        line = self._lines[index]
        text = line.text.expandtabs() if "\t" in line.text else line.text
        level = LEVEL_STYLES.get(line.level or "")
        strip = Strip([Segment(text, base + level if level else base)], cell_len(text))
        return strip.crop_extend(scroll_x, scroll_x + width, base)


def _escaped(line: LogLineView) -> LogLineView:
    text = escape_control(line.text)
    return line if text is line.text else LogLineView(line.line_no, text, line.level)


def _cells(text: str) -> int:
    if text.isascii():
        return len(text.expandtabs()) if "\t" in text else len(text)
    return cell_len(text.expandtabs())
