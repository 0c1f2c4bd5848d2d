"""The loss chart's plot widget: a PlotextPlot whose figures are drawn in a thread (see loss_chart.py).

Its own module so that textual-plotext (about 90 ms to import) is imported only when loss_chart.py asks for it,
in a thread, once the first loss values arrive.
"""

from __future__ import annotations

import threading
from typing import Any

from rich.text import Text
from textual_plotext import PlotextPlot

REDRAW_S = 0.5  # a backlog's chart moves at most twice a second

Series = tuple[tuple[float, ...], tuple[float, ...], str, str, str]  # xs, ys, title, x axis, marker
Key = tuple[int, int, str, Series]  # what one drawing depends on: width, height, plotext theme, series


class BackgroundPlot(PlotextPlot):
    """PlotextPlot whose figure is drawn in a thread; `render` shows the last finished drawing and asks
    for a new one when the series, the size or the theme changed."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lock = threading.Lock()  # one drawing at a time on the one plotext figure
        self._series: Series | None = None
        self._text = Text("")
        self._text_key: Key | None = None
        self._drawing = False

    @property
    def drawn(self) -> Series | None:
        return self._text_key[3] if self._text_key else None

    def show(self, series: Series) -> None:
        self._series = series
        self._want()

    def render(self) -> Text:
        self._want()  # a new size or theme (the first layout, a resize) is drawn in the background too
        return self._text

    def _want(self) -> None:
        key = self._key()
        if key is not None and key != self._text_key and not self._drawing:
            self._drawing = True
            self.run_worker(self._draw_in_thread, thread=True, exit_on_error=False, group="loss-chart")

    def _key(self) -> Key | None:
        if self._series is None or not self.size.area:
            return None
        return self.size.width, self.size.height, self._get_plotext_theme_name(self.app.theme), self._series

    def _draw_in_thread(self) -> None:
        """One drawing; the pause before the next is a timer on the event loop, not a sleep in this thread:
        a sleeping thread held every exit of the app up to REDRAW_S (the executor joins its threads)."""
        drew = False
        try:
            key = self._key()
            if key is not None and key != self._text_key:
                self.app.call_from_thread(self._done, key, self._draw(key))
                drew = True
        finally:
            self.app.call_from_thread(self._finished, drew)

    def _finished(self, drew: bool) -> None:
        if drew and self.is_mounted:
            self.set_timer(REDRAW_S, self._rested)  # a backlog's chart moves at most twice a second
        else:
            self._rested()

    def _rested(self) -> None:
        self._drawing = False
        self._want()  # a change that came after the last drawing

    def _done(self, key: Key, text: Text) -> None:
        self._text, self._text_key = text, key
        self.refresh()

    def _draw(self, key: Key) -> Text:
        width, height, theme, (xs, ys, title, x, marker) = key
        with self._lock:
            plt = self.plt
            plt.clear_data()
            plt.clear_figure()
            plt.title(f"{title} (x: {x})")
            plt.plot(list(xs), list(ys), marker=marker)
            # then as PlotextPlot.render does (the theme after the plot: it keeps plotext's line colour)
            plt.plotsize(width, height)
            plt._set_size(width, height)  # textual-plotext issue 5
            plt.theme(theme)
            return Text.from_ansi(plt.build())
