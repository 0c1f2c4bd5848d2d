"""The live loss chart: one plotext path (textual-plotext, docs/environment.md §8) behind `set_series`.

plotext costs about 90 ms to import, which the first frame cannot afford (budget < 1 s), so the plot
widget is imported and mounted only when the first loss value arrives; until then one line says why the
chart is empty. Swapping to another plotting path means changing this one module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from remote_gpu_trainer.text import escape_control, utf8_terminal

EMPTY_TEXT = "loss chart: no loss parsed from the log yet"


class LossChart(Vertical):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plot: Any = None
        self._shown: tuple[tuple[float, ...], tuple[float, ...], str] | None = None

    def compose(self) -> ComposeResult:
        yield Static(EMPTY_TEXT, id="chart-empty")

    def set_series(self, steps: Sequence[float], values: Sequence[float], title: str) -> None:
        """Plot the finite points; the title carries what a chart cannot show (nan steps, ETA)."""
        title = escape_control(title)  # it names the roster cell the log's marker line gave
        points = [(x, y) for x, y in zip(steps, values, strict=True) if math.isfinite(y)]
        xs = tuple(p[0] for p in points)
        ys = tuple(p[1] for p in points)
        if (xs, ys, title) == self._shown:
            return  # nothing new: no redraw
        self._shown = (xs, ys, title)
        empty = self.query_one("#chart-empty", Static)
        if len(points) < 2:
            empty.update(Text(title if points or title != EMPTY_TEXT else EMPTY_TEXT))  # never markup
            empty.display = True
            if self._plot is not None:
                self._plot.display = False
            return
        empty.display = False
        plot = self._ensure_plot()
        plot.display = True
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(f"{title} (x: step)")
        plt.plot(list(xs), list(ys), marker="braille" if utf8_terminal() else "dot")
        plot.refresh()

    def shown_points(self) -> int:
        return len(self._shown[0]) if self._shown else 0

    def chart_title(self) -> str:
        return self._shown[2] if self._shown else EMPTY_TEXT

    def _ensure_plot(self) -> Any:
        if self._plot is None:
            from textual_plotext import PlotextPlot

            self._plot = PlotextPlot(id="chart-plot")
            self.mount(self._plot)
        return self._plot
