"""What a live matplotlib Figure shows, read back from its artists for the pixel gate (docs/deliver.md §3):
the text it draws with the boxes it occupies, the data points it draws, and the marks of each labelled series.

These read an already drawn figure and change nothing, so the gate can be handed any figure, including one
a test (or a user's build.py) drew wrongly.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.backend_bases import RendererBase
    from matplotlib.figure import Figure
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

BAND_PREFIX = "_band:"


@dataclass(frozen=True)
class Placed:
    """A visible piece of text (or the legend box) and its extent in display pixels."""

    name: str
    box: Bbox


@dataclass
class Marks:
    """The data points drawn for one series label, and whether an error bar or band is drawn with them."""

    points: list[tuple[Any, float]] = field(default_factory=list)
    has_error: bool = False
    kind: str = ""


def labelled(label: object) -> bool:
    return isinstance(label, str) and bool(label) and not label.startswith("_")


def texts(figure: Figure, renderer: RendererBase) -> list[Placed]:
    """Every visible, non-empty text the figure draws (figure texts, titles, axis labels, tick labels in
    view), each named for the notes; legend entries are left to the legend box."""
    found = [Placed(f"figure text {t.get_text()!r}", t.get_window_extent(renderer))
             for t in figure.texts if _shown(t)]
    for index, ax in enumerate(figure.axes, 1):
        where = f"axes {index}"
        for text, what in _axes_texts(ax):
            if _shown(text):
                found.append(Placed(f"{where} {what} {text.get_text()!r}", text.get_window_extent(renderer)))
    return found


def _axes_texts(ax: Axes) -> Iterator[tuple[Text, str]]:
    yield ax.title, "title"
    yield ax.xaxis.label, "x label"
    yield ax.yaxis.label, "y label"
    for text in ax.texts:
        yield text, "text"
    low, high = sorted(ax.get_xlim())
    for label in ax.get_xticklabels():
        if low <= label.get_position()[0] <= high:
            yield label, "x tick label"
    low, high = sorted(ax.get_ylim())
    for label in ax.get_yticklabels():
        if low <= label.get_position()[1] <= high:
            yield label, "y tick label"


def _shown(text: Text) -> bool:
    return text.get_visible() and bool(text.get_text().strip())


def legends(figure: Figure, renderer: RendererBase) -> list[tuple[Axes | None, Placed]]:
    found: list[tuple[Axes | None, Placed]] = []
    for index, ax in enumerate(figure.axes, 1):
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            found.append((ax, Placed(f"axes {index} legend", legend.get_window_extent(renderer))))
    found += [(None, Placed("figure legend", legend.get_window_extent(renderer))) for legend in figure.legends]
    return found


def data_points(ax: Axes) -> list[tuple[float, float]]:
    """The display positions of the points an axes draws (line vertices, scatter offsets), within its view."""
    import numpy as np

    points: list[Any] = []
    for line in ax.lines:
        if line.get_visible() and labelled(line.get_label()):
            points.append(line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float)))
    for collection in ax.collections:
        offsets = np.asarray(collection.get_offsets(), dtype=float)
        if collection.get_visible() and labelled(collection.get_label()) and offsets.size:
            points.append(collection.get_offset_transform().transform(offsets))
    view = ax.get_window_extent()
    return [(float(x), float(y)) for block in points for x, y in block
            if math.isfinite(x) and math.isfinite(y) and view.x0 <= x <= view.x1 and view.y0 <= y <= view.y1]


def bar_boxes(ax: Axes, renderer: RendererBase) -> list[Bbox]:
    from matplotlib.container import BarContainer

    return [patch.get_window_extent(renderer) for container in ax.containers
            if isinstance(container, BarContainer) for patch in container.patches if patch.get_visible()]


def has_data(ax: Axes) -> bool:
    """Whether an axes draws at least one data artist with one finite point."""
    import numpy as np

    for line in ax.lines:
        xy = np.asarray(line.get_xydata(), dtype=float)
        if xy.size and np.isfinite(xy).all(axis=1).any():
            return True
    for collection in ax.collections:
        offsets = np.asarray(collection.get_offsets(), dtype=float)
        vertices = [np.asarray(p.vertices, dtype=float) for p in collection.get_paths()]
        if (offsets.size and np.isfinite(offsets).all(axis=1).any()) or any(
                v.size and np.isfinite(v).all(axis=1).any() for v in vertices):
            return True
    patches = [p for p in ax.patches if math.isfinite(float(p.get_window_extent().width))]
    images = [i for i in ax.images if np.asarray(i.get_array()).size]
    return bool(patches or images)


def series_marks(figure: Figure) -> dict[str, Marks]:
    """Label -> the points drawn for it: bars (position, height), lines and scatters (x, y). A bar container
    without a label names each bar by its tick label; a band `_band:<label>` or an error bar container marks
    the label as drawn with its error."""
    import numpy as np
    from matplotlib.container import BarContainer, ErrorbarContainer

    marks: dict[str, Marks] = {}
    for ax in figure.axes:
        for container in ax.containers:
            if isinstance(container, BarContainer):
                _bars(ax, container, marks)
        for line in ax.lines:
            if labelled(line.get_label()):
                _add(marks, str(line.get_label()), "line", _xy(line))
        for collection in ax.collections:
            label = str(collection.get_label())
            if label.startswith(BAND_PREFIX):
                marks.setdefault(label[len(BAND_PREFIX):], Marks()).has_error = True
            elif labelled(label):
                _add(marks, label, "scatter", np.asarray(collection.get_offsets(), dtype=float).tolist())
        for container in ax.containers:
            if isinstance(container, ErrorbarContainer) and labelled(container.get_label()):
                entry = marks.setdefault(str(container.get_label()), Marks())
                entry.has_error = True
                if container.lines[0] is not None and not labelled(container.lines[0].get_label()):
                    _add(marks, str(container.get_label()), "line", _xy(container.lines[0]))
    return marks


def _bars(ax: Axes, container: Any, marks: dict[str, Marks]) -> None:
    vertical = container.orientation != "horizontal"
    ticks = {round(float(t), 9): label.get_text() for t, label in
             zip(ax.get_xticks() if vertical else ax.get_yticks(),
                 ax.get_xticklabels() if vertical else ax.get_yticklabels(), strict=False)}
    for patch in container.patches:
        centre = patch.get_x() + patch.get_width() / 2 if vertical else patch.get_y() + patch.get_height() / 2
        value = patch.get_height() if vertical else patch.get_width()
        label = str(container.get_label()) if labelled(container.get_label()) else ticks.get(round(centre, 9), "")
        if label:
            _add(marks, label, "bar", [(centre, value)])
            if container.errorbar is not None:
                marks[label].has_error = True


def _xy(line: Any) -> list[list[float]]:
    import numpy as np

    return list(np.asarray(line.get_xydata(), dtype=float).tolist())


def _add(marks: dict[str, Marks], label: str, kind: str, points: Any) -> None:
    entry = marks.setdefault(label, Marks())
    entry.kind = entry.kind or kind
    entry.points += [(x, float(y)) for x, y in points]
