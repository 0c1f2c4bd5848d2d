"""The live loss chart: one plotext path (textual-plotext, docs/environment.md §8) behind `set_series`.

Nothing of plotext runs on the event loop (docs/architecture.md §5: no frame later than 50 ms while a log is
ingested). Importing it costs about 90 ms and drawing a figure 25-45 ms of pure Python, so:
- textual-plotext is imported in a thread when the first two loss values arrive (never at start: the first
  frame's budget is < 1 s); until then one line says why the chart is empty;
- each figure is drawn in a thread, at most once per REDRAW_S (a backlog changes the series on every poll),
  and a frame only shows the last finished drawing.
Swapping to another plotting path means changing this one module.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from remote_gpu_trainer.text import escape_control, utf8_terminal

EMPTY_TEXT = "loss chart: no loss parsed from the log yet"
Shown = tuple[tuple[float, ...], tuple[float, ...], str, str]  # xs, ys, title, x axis ("step" or "epoch")


class LossChart(Vertical):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plot: Any = None
        self._importing = False
        self._shown: Shown | None = None

    def compose(self) -> ComposeResult:
        yield Static(EMPTY_TEXT, id="chart-empty")

    def set_series(self, steps: Sequence[float], values: Sequence[float], title: str, x: str = "step") -> None:
        """Plot the finite points against `x` (steps, or epochs); the title carries what a chart cannot show
        (nan steps, ETA)."""
        title = escape_control(title)  # it names the roster cell the log's marker line gave
        points = [(x, y) for x, y in zip(steps, values, strict=True) if math.isfinite(y)]
        xs = tuple(p[0] for p in points)
        ys = tuple(p[1] for p in points)
        if (xs, ys, title, x) == self._shown:
            return  # nothing new: no redraw
        self._shown = (xs, ys, title, x)
        empty = self.query_one("#chart-empty", Static)
        if len(points) < 2:
            empty.update(Text(title if points or title != EMPTY_TEXT else EMPTY_TEXT))  # never markup
            empty.display = True
            if self._plot is not None:
                self._plot.display = False
            return
        empty.display = False
        if self._plot is not None:
            self._show_plot()
        elif not self._importing:
            self._importing = True
            self.run_worker(self._import_plot, thread=True, exit_on_error=False, group="loss-chart-import")

    def shown_points(self) -> int:
        """Points the chart shows; 0 while the newest series is still being drawn in the background (a chart
        that is not on screen draws when it is shown, so it counts the series it holds)."""
        drawn = self._drawn()
        return len(drawn[0]) if drawn else 0

    def chart_title(self) -> str:
        drawn = self._drawn()
        return drawn[2] if drawn else EMPTY_TEXT

    def _drawn(self) -> Shown | None:
        if self._shown is None or len(self._shown[0]) < 2:
            return self._shown
        if self._plot is None:
            return None
        if not self.region.area:
            return self._shown
        drawn = self._plot.drawn
        return self._shown if drawn is not None and drawn[:4] == self._shown else None

    def _import_plot(self) -> None:
        cls = importlib.import_module("remote_gpu_trainer.widgets.background_plot").BackgroundPlot
        self.app.call_from_thread(self._mount_plot, cls)

    def _mount_plot(self, cls: Any) -> None:
        self._plot = cls(id="chart-plot")
        self.mount(self._plot)
        if self._shown is not None and len(self._shown[0]) >= 2:
            self._show_plot()
        else:
            self._plot.display = False

    def _show_plot(self) -> None:
        assert self._shown is not None
        self._plot.display = True
        self._plot.show((*self._shown, "braille" if utf8_terminal() else "dot"))

