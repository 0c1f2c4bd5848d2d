"""The pixel re-open gate G1–G6 (docs/deliver.md §3): `savefig` returning proves only that a file exists, so
after every render the builder re-opens the PNG bytes and reads the live figure, the warnings recorded while
it was drawn and saved, and source.csv.

Every check is a pure function of those inputs (`GateInputs`) returning a `Check` (pass, fail, warn or
disclosed, with notes), so a test can hand the gate a figure it drew wrongly. A check a user may disclose
instead of fixing (figures/spec.py DISCLOSABLE: a truncated bar axis with `expect.baseline`, curves on different x
ranges, non-finite source values) is `disclosed` only when figure.json's `disclose` says why in words.
"""

from __future__ import annotations

import functools
import io
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.deliver.figures import marks
from remote_gpu_trainer.deliver.figures.spec import label_direction
from remote_gpu_trainer.deliver.source_csv import read_source_csv

if TYPE_CHECKING:
    from matplotlib.backend_bases import RendererBase
    from matplotlib.figure import Figure
    from matplotlib.transforms import Bbox, BboxBase

GLYPH_MISSING = re.compile(r"Glyph (\d+) .*missing from (?:current font|font\(s\))")
STD_FLOOR = 0.5  # grayscale standard deviation (0-255) below which the image is one flat colour
REL_TOLERANCE = 1e-9
PT = 1 / 72  # one point, in inches
OVERLAP_PX = 0.5
PASSING = ("pass", "disclosed")


@dataclass(frozen=True)
class Check:
    """One gate check's result: pass, fail, warn or disclosed, its notes, and the sentences that ride into
    figure.json's disclosure."""

    status: str  # pass | fail | warn | disclosed
    notes: tuple[str, ...] = ()
    disclosure: tuple[str, ...] = ()  # sentences that ride into figure.json's disclosure


@dataclass(frozen=True)
class GateInputs:
    """What the gate reads. `expect` is figure.json's with the direction resolved; `problems` are what the
    builder found in the data (check id -> notes), each a failure of that check."""

    png: bytes
    figure: Figure
    warnings: Sequence[str]
    source: bytes
    kind: str
    expect: Mapping[str, Any] = field(default_factory=dict)
    disclose: Mapping[str, str] = field(default_factory=dict)
    problems: Mapping[str, Sequence[str]] = field(default_factory=dict)
    #: the figure's Agg canvas holds the very draw the PNG bytes were made from (the builder saves the PNG last,
    #: on that canvas, at the figure's dpi): the gate then measures that layout instead of drawing once more
    drawn: bool = False


def run_gate(gate: GateInputs) -> dict[str, Check]:
    """All six checks, in order, keyed by their figure.json names."""
    checks: dict[str, Callable[[GateInputs], Check]] = {
        "G1_blank": g1_blank, "G2_glyphs": g2_glyphs, "G3_clipped": g3_clipped, "G4_overlap": g4_overlap,
        "G5_axis": g5_axis, "G6_data": g6_data}
    if not gate.drawn:
        drawn(gate.figure)
    return {name: check(gate) for name, check in checks.items()}


def qa_block(checks: Mapping[str, Check], *, deterministic: bool, checked_at: str) -> dict[str, Any]:
    """figure.json's `qa`: passed when every check is pass or disclosed; notes name the check they come from."""
    return {"passed": all(c.status in PASSING for c in checks.values()), "checked_at": checked_at,
            "deterministic": deterministic, "human_viewed": False,
            "checks": {name: c.status for name, c in checks.items()},
            "notes": "; ".join(f"{name}: {note}" for name, c in checks.items() for note in c.notes)}


def _outcome(fails: Sequence[str], warns: Sequence[str] = (), disclosed: Sequence[str] = (),
             disclosure: Sequence[str] = ()) -> Check:
    if fails:
        return Check("fail", tuple(fails) + tuple(warns) + tuple(disclosed))
    if warns:
        return Check("warn", tuple(warns) + tuple(disclosed))
    if disclosed:
        return Check("disclosed", tuple(disclosed), tuple(dict.fromkeys(disclosure)))
    return Check("pass")


def decode_png(png: bytes) -> Any:
    """The PNG as an RGB(A) float array in 0..1 (matplotlib reads it with Pillow)."""
    import matplotlib.image

    return matplotlib.image.imread(io.BytesIO(png), format="png")


@functools.lru_cache(maxsize=1)
def _pixels(png: bytes) -> Any:
    """The PNG decoded once for G1 and G3 (the same bytes: the cache holds the last one), read-only."""
    image = decode_png(png)
    image.flags.writeable = False
    return image


def drawn(figure: Figure) -> RendererBase:
    """Draw the figure on an Agg canvas (warnings already recorded by the render are not recorded again) and
    return its renderer: text extents and the tight box are measured on what that draw laid out."""
    import warnings

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = figure.canvas if isinstance(figure.canvas, FigureCanvasAgg) else FigureCanvasAgg(figure)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        canvas.draw()
    return canvas.get_renderer()


def renderer_of(figure: Figure) -> RendererBase:
    """The renderer of a figure run_gate has drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = figure.canvas
    return canvas.get_renderer() if isinstance(canvas, FigureCanvasAgg) else drawn(figure)


# -- G1 blank -------------------------------------------------------------------------------------------------
def g1_blank(gate: GateInputs) -> Check:
    import numpy as np

    try:
        image = _pixels(gate.png)
    except Exception as exc:  # Pillow raises many types for one cause: bytes that are not a PNG
        return Check("fail", (f"the PNG does not decode ({type(exc).__name__})",))
    height, width = image.shape[:2]
    fails = []
    if not (0 < width < 2**16 and 0 < height < 2**16):
        fails.append(f"the PNG is {width}×{height} px")
    rgb = image[..., :3].astype(float) * 255
    gray = rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114
    if float(np.std(gray)) <= STD_FLOOR:
        fails.append(f"the image is one flat colour (grayscale std {float(np.std(gray)):.3f} ≤ {STD_FLOOR})")
    axes = gate.figure.axes
    fails += [f"axes {i} of {len(axes)} draws no data (no artist with a finite point)"
              for i, ax in enumerate(axes, 1) if not marks.has_data(ax)]
    if not axes:
        fails.append("the figure has no axes")
    return _outcome(fails)


# -- G2 glyphs ------------------------------------------------------------------------------------------------
def g2_glyphs(gate: GateInputs) -> Check:
    missing = dict.fromkeys(chr(int(m.group(1))) for w in gate.warnings if (m := GLYPH_MISSING.search(w)))
    if not missing:
        return Check("pass")
    listed = ", ".join(f"{c!r} (U+{ord(c):04X})" for c in missing)
    return Check("fail", (f"glyphs missing from the font, drawn as boxes: {listed}",))


# -- G3 clipped -----------------------------------------------------------------------------------------------
def g3_clipped(gate: GateInputs) -> Check:
    figure = gate.figure
    renderer = renderer_of(figure)
    tight, page = figure.get_tightbbox(renderer), figure.bbox_inches
    sides = {"left": page.x0 - tight.x0, "bottom": page.y0 - tight.y0, "right": tight.x1 - page.x1,
             "top": tight.y1 - page.y1}
    outside = {side: over for side, over in sides.items() if over > PT}
    if outside:
        cut = [t.name for t in marks.texts(figure, renderer) if _beyond(t.box, figure.bbox)]
        return Check("fail", tuple(f"drawing extends {over * 72:.1f} pt beyond the {side} edge" for side, over
                                   in outside.items()) + tuple(f"clipped: {name}" for name in cut))
    edges = _inked_edges(gate, renderer)
    return Check("warn", tuple(f"text touches the {side} edge of the PNG" for side in edges)) if edges \
        else Check("pass")


def _beyond(box: BboxBase, page: BboxBase) -> bool:
    return box.x0 < page.x0 - 1 or box.y0 < page.y0 - 1 or box.x1 > page.x1 + 1 or box.y1 > page.y1 + 1


def _inked_edges(gate: GateInputs, renderer: RendererBase) -> list[str]:
    """Sides whose outer 2 px rows/columns of the PNG are not the background where some text reaches them."""
    import numpy as np
    from matplotlib.colors import to_rgb

    image = _pixels(gate.png)[..., :3]
    height, width = image.shape[:2]
    background = np.array(to_rgb(gate.figure.get_facecolor()))
    strips = {"left": image[:, :2], "right": image[:, -2:], "top": image[:2, :], "bottom": image[-2:, :]}
    scale = width / max(gate.figure.bbox.width, 1)
    near = {"left": lambda b: b.x0 * scale <= 2, "right": lambda b: b.x1 * scale >= width - 2,
            "bottom": lambda b: b.y0 * scale <= 2, "top": lambda b: b.y1 * scale >= height - 2}
    boxes = [t.box for t in marks.texts(gate.figure, renderer)]
    return [side for side, strip in strips.items()
            if float(np.abs(strip - background).max(initial=0.0)) > 0.05 and any(near[side](b) for b in boxes)]


# -- G4 overlap -----------------------------------------------------------------------------------------------
def _overlap(a: Bbox, b: Bbox) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > OVERLAP_PX and min(a.y1, b.y1) - max(a.y0, b.y0) > OVERLAP_PX


def g4_overlap(gate: GateInputs) -> Check:
    """Text on text and a legend on data points warn; panels on panels fail."""
    figure = gate.figure
    renderer = renderer_of(figure)
    placed = marks.texts(figure, renderer)
    legends = marks.legends(figure, renderer)
    boxes = placed + [p for _, p in legends]
    warns = [f"{a.name} overlaps {b.name}" for i, a in enumerate(boxes) for b in boxes[i + 1:]
             if _overlap(a.box, b.box)]
    for ax, legend in legends:
        for target in [ax] if ax is not None else figure.axes:
            points = [p for p in marks.data_points(target) if legend.box.contains(*p)]
            bars = [b for b in marks.bar_boxes(target, renderer) if _overlap(b, legend.box)]
            if points or bars:
                warns.append(f"{legend.name} covers {len(points)} data point(s) and {len(bars)} bar(s)")
    fails = []
    axes = [ax for ax in figure.axes if ax.get_visible()]
    for i, a in enumerate(axes):
        for j, b in enumerate(axes[i + 1:], i + 2):
            pa, pb = a.get_position(), b.get_position()
            if not (pa.bounds == pb.bounds) and _overlap(a.get_window_extent(renderer), b.get_window_extent(renderer)):
                fails.append(f"panels {i + 1} and {j} intersect")
    return _outcome(fails, warns)


# -- G5 axis --------------------------------------------------------------------------------------------------
def g5_axis(gate: GateInputs) -> Check:
    """A bar axis that does not start at 0, an inverted or log axis the figure did not declare, an ↑/↓ label
    against the metric's direction, a line whose x goes back, curves compared over different x ranges."""
    expect, user = gate.expect, gate.disclose.get("G5_axis")
    fails = list(gate.problems.get("G5_axis", ()))
    disclosed: list[str] = []
    on_y = expect.get("value_axis", "y") == "y"
    for index, ax in enumerate(gate.figure.axes, 1):
        if not marks.has_data(ax):
            continue
        where = f"axes {index}"
        fails += _bar_baseline(ax, where, expect, user, disclosed)
        inverted = ax.yaxis_inverted() if on_y else ax.xaxis_inverted()
        if inverted != bool(expect.get("inverted", False)):
            fails.append(f"{where}: the value axis is {'' if inverted else 'not '}inverted, expect.inverted is "
                         f"{str(bool(expect.get('inverted', False))).lower()}")
        scale = ax.get_yscale() if on_y else ax.get_xscale()
        if scale != expect.get("scale", "linear"):
            fails.append(f"{where}: the value axis is {scale}, expect.scale is {expect.get('scale', 'linear')}")
        said = label_direction(ax.get_ylabel() if on_y else ax.get_xlabel())
        if said and expect.get("direction") and said != expect["direction"]:
            fails.append(f"{where}: the axis label says {'higher' if said == 'higher_is_better' else 'lower'} is "
                         f"better, the metric is {expect['direction']}")
        fails += _line_x(ax, where, user, disclosed)
    return _outcome(fails, (), disclosed, [user] if user else [])


def _bar_baseline(ax: Any, where: str, expect: Mapping[str, Any], user: str | None,
                  disclosed: list[str]) -> list[str]:
    from matplotlib.container import BarContainer

    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    vertical = all(c.orientation != "horizontal" for c in bars)
    values = [p.get_height() if vertical else p.get_width() for c in bars for p in c.patches]
    widths = {round(p.get_width() if vertical else p.get_height(), 9) for c in bars for p in c.patches}
    unequal = [f"{where}: bars of unequal width ({', '.join(f'{w:g}' for w in sorted(widths))})"] \
        if len(widths) > 1 else []
    if not values or not all(math.isfinite(v) and v >= 0 for v in values):
        return unequal
    limits = ax.get_ylim() if vertical else ax.get_xlim()
    low = min(limits)
    if abs(low) <= REL_TOLERANCE * max(1.0, abs(max(limits) - low)):
        return unequal
    baseline = expect.get("baseline")
    if user and baseline not in (None, 0) and math.isclose(low, baseline, rel_tol=REL_TOLERANCE, abs_tol=1e-12):
        disclosed.append(f"{where}: the bar axis starts at {low:g} (expect.baseline), disclosed")
        return unequal
    return [*unequal, f"{where}: the bar value axis starts at {low:g}, not 0 (a truncated bar axis exaggerates "
                      "differences; to keep it, set expect.baseline to it and say why in disclose.G5_axis)"]


def _line_x(ax: Any, where: str, user: str | None, disclosed: list[str]) -> list[str]:
    import numpy as np

    fails, ranges = [], {}
    for line in ax.lines:
        if not marks.labelled(line.get_label()):
            continue
        xs = np.asarray(line.get_xydata(), dtype=float)[:, 0]
        xs = xs[np.isfinite(xs)]
        if len(xs) >= 2 and bool((np.diff(xs) <= 0).any()):
            fails.append(f"{where}: line {line.get_label()!r}: x is not increasing")
        if len(xs):
            ranges[str(line.get_label())] = (float(xs.min()), float(xs.max()))
    if len(set(ranges.values())) > 1:
        listed = ", ".join(f"{label} {low:g}–{high:g}" for label, (low, high) in ranges.items())
        if user:
            disclosed.append(f"{where}: curves on different x ranges ({listed}), disclosed")
        else:
            fails.append(f"{where}: compared curves cover different x ranges ({listed})")
    return fails


# -- G6 data --------------------------------------------------------------------------------------------------
def g6_data(gate: GateInputs) -> Check:
    """source.csv has the expected rows, finite numbers, and is what the figure draws; a series over several
    seeds is drawn with its error, a single-seed one is disclosed as such."""
    try:
        rows = read_source_csv(gate.source)
    except (UnicodeDecodeError, ValueError) as exc:
        return Check("fail", (f"source.csv does not parse ({exc})",))
    user = gate.disclose.get("G6_data")
    fails = list(gate.problems.get("G6_data", ()))
    disclosed: list[str] = []
    disclosure: list[str] = []
    expected = gate.expect.get("rows")
    if not rows:
        fails.append("source.csv has no rows")
    elif expected is not None and len(rows) != expected:
        fails.append(f"source.csv has {len(rows)} rows, expect.rows is {expected}")
    odd = [f"row {i} {col}={row.get(col)}" for i, row in enumerate(rows, 1) for col in ("x", "y", "err_lo", "err_hi")
           if _number(row.get(col)) is not None and not math.isfinite(_number(row.get(col)) or 0.0)]
    if odd:
        note = f"non-finite values in source.csv: {', '.join(odd[:5])}{' …' if len(odd) > 5 else ''}"
        (disclosed if user else fails).append(note)
        disclosure += [user] if user else []
    shown = marks.series_marks(gate.figure)
    fails += _mismatches(rows, shown)
    for series, seeds in _seeds(rows).items():
        if series not in shown or not shown[series].points:
            continue  # not drawn at all: _mismatches said so
        has_error = shown[series].has_error
        if seeds > 1 and not has_error:
            fails.append(f"series {series!r} averages {seeds} seeds but no error bar or band is drawn")
        elif seeds == 1 and not has_error and gate.kind != "scatter":
            disclosed.append(f"{series!r} is single-seed: no error bar")
            disclosure.append(f"{series} is single-seed (no error bar)")
    return _outcome(fails, (), disclosed, disclosure)


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def _seeds(rows: Sequence[Mapping[str, str]]) -> dict[str, int]:
    """The most seeds any row of a series averages (a series is as uncertain as its least-seeded point)."""
    found: dict[str, int] = {}
    for row in rows:
        seeds = _number(row.get("seeds"))
        if seeds is not None and math.isfinite(seeds):
            found[row["series"]] = max(found.get(row["series"], 0), int(seeds))
    return found


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= REL_TOLERANCE * max(abs(a), abs(b))


def _mismatches(rows: Sequence[Mapping[str, str]], shown: Mapping[str, marks.Marks]) -> list[str]:
    """Each series of source.csv against what is drawn under its label: the same number of points, at the same
    x (when x is numeric) with y equal within 1e-9 relative."""
    grouped: dict[str, list[Mapping[str, str]]] = {}
    for row in rows:
        grouped.setdefault(row.get("series") or "", []).append(row)
    fails = [f"drawn series {label!r} is not in source.csv" for label, m in shown.items()
             if m.points and label not in grouped]
    for series, members in grouped.items():
        drawn_points = shown[series].points if series in shown else []
        if not drawn_points:
            fails.append(f"series {series!r} is in source.csv but not drawn")
            continue
        if len(drawn_points) != len(members):
            fails.append(f"series {series!r}: {len(drawn_points)} drawn point(s), {len(members)} source.csv row(s)")
            continue
        xs = [_number(r.get("x")) for r in members]
        ys = [_number(r.get("y")) for r in members]
        numeric = all(x is not None for x in xs)
        source = sorted(zip(xs, ys, strict=True), key=_key) if numeric else sorted(((0.0, y) for y in ys), key=_key)
        shown_sorted = sorted(((float(x), y) if numeric else (0.0, y) for x, y in drawn_points), key=_key)
        for (sx, sy), (dx, dy) in zip(source, shown_sorted, strict=True):
            if sy is None or not (_close(float(sx or 0.0), dx) and _close(sy, dy)):
                fails.append(f"series {series!r}: drawn ({dx:g}, {dy!r}) but source.csv has ({sx:g}, {sy!r})")
                break
    return fails


def _key(pair: tuple[Any, Any]) -> tuple[float, float]:
    x, y = pair
    return (float(x) if x is not None else math.inf, float(y) if y is not None and not math.isnan(y) else math.inf)
