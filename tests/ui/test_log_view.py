"""The log view under a backlog: what it holds, what the screen shows, what scrolling reaches, and that the
text from the box stays text (escaped, never markup) with its level's colour. Real Textual app via Pilot."""

from __future__ import annotations

from textual.app import App, ComposeResult

from remote_gpu_trainer.views import LogLineView
from remote_gpu_trainer.widgets.log_panel import MAX_LINES, LogPanel
from remote_gpu_trainer.widgets.log_view import LogView
from support.tui_helpers import wait_until


class PanelApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LogPanel()


def numbered(first: int, count: int) -> list[LogLineView]:
    """`line N`, every 1000th an error (the first one is line 1000)."""
    return [LogLineView(n, f"line {n}", "error" if n % 1000 == 0 else None) for n in range(first, first + count)]


def row_text(view: LogView, y: int) -> str:
    return view.render_line(y).text.rstrip()


async def test_a_backlog_keeps_the_newest_lines_shows_the_last_and_every_held_line_scrolls_into_view() -> None:
    app = PanelApp()
    async with app.run_test(size=(100, 30)) as pilot:
        panel = app.query_one(LogPanel)
        view = panel.query_one("#log", LogView)
        await wait_until(pilot, lambda: view.size.height > 0)
        panel.append(numbered(1, 12_000))  # one poll's worth of a backlog, in one call
        await wait_until(pilot, lambda: row_text(view, view.size.height - 1) == "line 12000")
        assert MAX_LINES == 5000 and len(view.lines) == 5000
        assert (view.lines[0].line_no, view.lines[-1].line_no) == (7001, 12_000)
        assert panel.first_error is not None and panel.first_error.line_no == 1000  # seen, though no longer held
        assert row_text(view, view.size.height - 1) == "line 12000" and view.auto_scroll

        view.scroll_home(animate=False, immediate=True)
        await wait_until(pilot, lambda: row_text(view, 0) == "line 7001")
        assert row_text(view, 0) == "line 7001"  # the oldest held line, rendered when scrolled to

        assert panel.jump_to(9000) and not view.auto_scroll
        await wait_until(pilot, lambda: row_text(view, 0) == "line 9000")
        assert row_text(view, 0) == "line 9000"
        assert not panel.jump_to(7000)  # dropped from the view: cannot be jumped to

        panel.append(numbered(12_001, 1000))  # 1000 more drop 7001..8000 while the reader is parked on 9000
        await wait_until(pilot, lambda: view.lines[0].line_no == 8001)
        assert row_text(view, 0) == "line 9000" and not view.auto_scroll  # the rows read stay in place

        assert panel.toggle_follow()
        await wait_until(pilot, lambda: row_text(view, view.size.height - 1) == "line 13000")
        assert row_text(view, view.size.height - 1) == "line 13000"


async def test_lines_from_the_box_are_escaped_never_markup_and_coloured_by_level() -> None:
    app = PanelApp()
    async with app.run_test(size=(100, 30)) as pilot:
        panel = app.query_one(LogPanel)
        view = panel.query_one("#log", LogView)
        await wait_until(pilot, lambda: view.size.height > 0)
        panel.append([LogLineView(1, "plain [bold]not markup[/bold]"),
                      LogLineView(2, "\x1b[2J\x1b]0;title\x07 cleared?", "error"),
                      LogLineView(3, "tab\tstop", "warn")])
        await wait_until(pilot, lambda: len(view.lines) == 3 and row_text(view, 2).startswith("tab"))
        assert row_text(view, 0) == "plain [bold]not markup[/bold]"
        assert row_text(view, 1) == "\\x1b[2J\\x1b]0;title\\x07 cleared?"
        assert row_text(view, 2) == "tab     stop"
        assert panel.text() == "plain [bold]not markup[/bold]\n\\x1b[2J\\x1b]0;title\\x07 cleared?\ntab\tstop"
        error = view.render_line(1)
        colours = {segment.style.color.name for segment in error if segment.text.strip() and segment.style
                   and segment.style.color}
        assert colours == {"red"}
        warn = view.render_line(2)
        assert {segment.style.color.name for segment in warn if segment.text.strip() and segment.style
                and segment.style.color} == {"yellow"}
