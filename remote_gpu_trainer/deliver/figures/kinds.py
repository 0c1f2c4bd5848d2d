"""The built-in figure kinds (docs/deliver.md §3): `line` (curves from train.csv, mean over seeds with a ±std
band), `bar` (one bar per series, mean over seeds with std error bars) and `scatter` (x metric vs y metric, one
point per capsule).

Each kind has two halves: `prepare` reads the inputs (once, hashed) and computes the source.csv rows at full
precision; `draw` draws those same rows, so a drawn value can differ from source.csv only through a bug, which
the pixel gate's G6 then catches. Anything the data itself makes dishonest (seeds logged at different steps)
is recorded as a problem for the gate's check, not hidden.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue import metric_registry
from remote_gpu_trainer.audits.catalogue.model import MetricRule, plain
from remote_gpu_trainer.deliver.figures import reduce as figure_reduce
from remote_gpu_trainer.deliver.figures.spec import FigureSpec, Series, arrow
from remote_gpu_trainer.deliver.inputs import InputFile, input_entry, input_path, open_input, resolve_test
from remote_gpu_trainer.deliver.source_csv import mean_std
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.fsutil import lstat_or_none

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

SOURCE_COLUMNS = ("series", "x", "y", "err_lo", "err_hi", "n", "seeds", "capsules", "test_id", "metric")
SORT_KEY = ("series", "x", "capsules")
BAND_PREFIX = "_band:"  # the label of a line's ±std band: `_band:<series>` (a leading _ keeps it off the legend)


@dataclass
class Prepared:
    """The rows to write and draw (in drawing order), the inputs[] entries, what the data made dishonest
    (check id -> notes) and what must be disclosed about the numbers (a validation split)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)
    problems: dict[str, list[str]] = field(default_factory=dict)
    disclosures: list[str] = field(default_factory=list)
    direction: str | None = None
    #: a `line` series drawn from fewer points than its curve has (figures/reduce.py), as the provenance records it
    reductions: list[dict[str, Any]] = field(default_factory=list)

    def problem(self, check: str, note: str) -> None:
        self.problems.setdefault(check, []).append(note)


def prepare(spec: FigureSpec, root: Path, declared: Mapping[str, MetricRule] | None = None) -> Prepared:
    if spec.kind == "line":
        return _prepare_line(spec, root, declared)
    if spec.kind == "bar":
        return _prepare_bar(spec, root, declared)
    return _prepare_scatter(spec, root, declared)


def row(series: str, x: Any, values: Sequence[float], *, n: int | None, capsules: Sequence[str],
        test_id: str | None, metric: str) -> dict[str, Any]:
    """One source.csv row: y is the mean of `values` (one per seed), the error the sample std (none for one)."""
    y, err = mean_std(values)
    return {"series": series, "x": x, "y": y, "err_lo": err, "err_hi": err, "n": n, "seeds": len(values),
            "capsules": ";".join(capsules), "test_id": test_id, "metric": metric}


def _direction(name: str, declared: Mapping[str, MetricRule] | None, stated: Any = None) -> str | None:
    short = metric_registry.stated_or_registered(name, (stated,), declared)
    return metric_registry.DIRECTION_WORDS.get(short or "")


# -- line ---------------------------------------------------------------------------------------------------
def _prepare_line(spec: FigureSpec, root: Path, declared: Mapping[str, MetricRule] | None) -> Prepared:
    """Each series' curves, read in chunks (figures/reduce.py): a curve short enough is drawn as it is, as before;
    a longer one is averaged over seeds as it streams and reduced to the extremes of each pixel column."""
    assert spec.x is not None and spec.y is not None
    found = Prepared(direction=_direction(spec.y, declared))
    split = "val" if spec.y.lower().startswith(("val/", "val_", "eval/", "eval_")) else "train"
    for index, series in enumerate(spec.series):
        sources: list[_Source] = []
        for key in series.capsules:
            ispec = {"capsule": key, "file": "train.csv", "metric": spec.y}
            where = f"series[{index}].capsules ({key})"
            if not _has_train_csv(root, key) and (tracked := _tracker_curve(root, key, spec.x, spec.y, where)):
                pairs, path, sha256 = tracked
                sources.append(_Source.listed(key, path, sha256, pairs, ispec))
                continue
            path = input_path(ispec, where)
            stream, chunks = figure_reduce.stream_curve(open_input(root, path, where), path, spec.x, spec.y)
            sources.append(_Source(key, path, ispec, chunks, stream))
        found.rows += _series_rows(series, sources, spec, found)
        for source in sources:
            digest = source.stream.sha256 if source.stream is not None else source.sha256
            if digest is None:  # every chunk is read before the rows exist; a build never draws half a file
                raise ConfigError(f"{source.path}: not read to its end")
            found.entries.append(input_entry(source.ispec, InputFile(source.path, b"", digest), split))
    return found


@dataclass
class _Source:
    """One capsule's curve: a train.csv being streamed, or a tracker's curve already read (`listed`)."""

    key: str
    path: str
    ispec: dict[str, Any]
    chunks: Iterator[tuple[Any, Any]]
    stream: figure_reduce.CurveStream | None = None
    sha256: str | None = None
    pairs: list[tuple[Any, float]] | None = None  # the tracker's pairs (its own x values), when listed
    buffered: list[tuple[Any, Any]] = field(default_factory=list)
    ended: bool = False

    @classmethod
    def listed(cls, key: str, path: str, sha256: str, pairs: list[tuple[Any, float]],
               ispec: dict[str, Any]) -> _Source:
        import numpy as np

        xs = np.array([float(x) for x, _ in pairs], dtype=np.float64)
        ys = np.array([y for _, y in pairs], dtype=np.float64)
        return cls(key, path, ispec, iter([(xs, ys)]), sha256=sha256, pairs=pairs)

    def fill(self, rows: int) -> None:
        """Buffer chunks until more than `rows` rows are held or the curve ends."""
        held = sum(len(xs) for xs, _ in self.buffered)
        while not self.ended and held <= rows:
            chunk = next(self.chunks, None)
            if chunk is None:
                self.ended = True
                break
            self.buffered.append(chunk)
            held += len(chunk[0])

    def all_pairs(self) -> list[tuple[Any, float]]:
        """The whole (ended) curve as (x, y) pairs in file order, x an int where train.csv's column is."""
        if self.pairs is not None:
            return self.pairs
        integer = self.stream is not None and self.stream.integer_x
        return [(int(x) if integer else x, y) for xs, ys in self.buffered
                for x, y in zip(xs.tolist(), ys.tolist(), strict=True)]

    def rest(self) -> Iterator[tuple[Any, Any]]:
        yield from self.buffered
        self.buffered = []
        yield from self.chunks


def _series_rows(series: Series, sources: list[_Source], spec: FigureSpec, found: Prepared) -> list[dict[str, Any]]:
    for source in sources:
        source.fill(figure_reduce.EXACT_ROWS)
    if all(source.ended for source in sources):
        curves = [(s.key, _checked_axis(s.all_pairs(), s.path, str(spec.x), found)) for s in sources]
        return _curve_rows(series, curves, str(spec.y), found)
    merged = figure_reduce.MergeReport()
    chunks = figure_reduce.merge_seeds([s.key for s in sources], [s.rest() for s in sources], merged)
    columns = int(spec.figsize[0] * spec.dpi)
    reduced = figure_reduce.reduce_curve(chunks, columns)
    for source in sources:
        if merged.backwards.get(source.key):
            found.problem("G5_axis", f"{source.path}: {spec.x} is not strictly increasing "
                                     f"({merged.backwards[source.key]} row(s) out of order not drawn)")
    if merged.unshared:
        found.problem("G5_axis", f"series {series.label!r}: seeds do not share x values ({merged.unshared} "
                                 "row(s) at an x not every seed logged)")
    if reduced.rows == 0:
        found.problem("G6_data", f"series {series.label!r}: no x value every seed logged")
    integer = all(s.stream.integer_x if s.stream is not None else
                  all(isinstance(x, int) for x, _ in s.pairs or ()) for s in sources)
    keys = ";".join(s.key for s in sources)
    errs = reduced.err.tolist() if reduced.err is not None else [None] * len(reduced.x)
    rows = [{"series": series.label, "x": int(x) if integer else x, "y": y, "err_lo": err, "err_hi": err,
             "n": len(sources), "seeds": len(sources), "capsules": keys, "test_id": None, "metric": spec.y}
            for x, y, err in zip(reduced.x.tolist(), reduced.y.tolist(), errs, strict=True)]
    if reduced.columns:
        found.reductions.append({
            "series": series.label, "method": "m4_pixel_columns", "rows": reduced.rows, "drawn": len(rows),
            "columns": reduced.columns, "x0": reduced.x0, "column_width": reduced.column_width,
            "note": f"reduced from {reduced.rows} rows to {len(rows)} for drawing: the first, last, minimum and "
                    f"maximum point of each of {reduced.columns} x columns (at most one per pixel of the "
                    f"figure's {columns} px width); source.csv holds the points drawn"})
    return rows


def _checked_axis(pairs: list[tuple[Any, float]], path: str, x: str, found: Prepared) -> list[tuple[Any, float]]:
    steps = [s for s, _ in pairs]
    if any(not b > a for a, b in zip(steps, steps[1:], strict=False)):
        found.problem("G5_axis", f"{path}: {x} is not strictly increasing")
    return pairs


def _has_train_csv(root: Path, key: str) -> bool:
    return lstat_or_none(root / "runs" / key / "train.csv") is not None


def _tracker_curve(root: Path, key: str, x: str, y: str, where: str
                   ) -> tuple[list[tuple[Any, float]], str, str] | None:
    """(x, y) pairs of a cell with no train.csv, from the tracker file VERIFY reads its curve from
    (audits/catalogue/readers), with that file's path and the sha256 of the bytes read. `x` and `y` may be
    the tracker's own names (`eval/loss`, `val_loss`, `global_step`): they are mapped as the readers map
    them. None when the cell holds no tracker curve either (the caller then names the missing train.csv)."""
    from remote_gpu_trainer.audits.catalogue.readers import read_tracker_cell
    from remote_gpu_trainer.audits.catalogue.readers.common import series_column

    run_id, cell = key.split("/", 1)
    capsule = read_tracker_cell(root, run_id, cell)
    if capsule is None or capsule.train is None or capsule.train_path is None:
        return None
    frame = capsule.train
    columns: dict[str, str] = {}
    for name in (x, y):
        column = name if name in frame.columns else series_column(name)
        if column is None or column not in frame.columns:
            raise ConfigError(f"{where}: {capsule.train_path} ({capsule.source}) has no series {name!r} "
                              f"(series: {', '.join(map(str, frame.columns))})")
        columns[name] = column
    pairs = []
    for step, value in zip(frame[columns[x]].tolist(), frame[columns[y]].tolist(), strict=True):
        if isinstance(value, float) and math.isnan(value) or isinstance(step, float) and math.isnan(step):
            continue
        pairs.append((plain(step), float(value)))
    relative = _series_file(capsule.files, columns[y]) or capsule.train_path[len(capsule.path) + 1:]
    sha256 = capsule.files.get(relative)
    if sha256 is None:
        raise ConfigError(f"{where}: {capsule.train_path} could not be hashed as it was read")
    return pairs, f"{capsule.path}/{relative}", sha256


def _series_file(files: Mapping[str, str], column: str) -> str | None:
    """The file that holds just this series, where the tracker keeps one file per series (MLflow's
    `metrics/<key>`), so the figure's input names the bytes it was drawn from; None elsewhere."""
    from remote_gpu_trainer.audits.catalogue.readers.common import series_column

    return next((path for path in sorted(files) if "/metrics/" in f"/{path}"
                 and series_column(path.rsplit("/", 1)[-1]) == column), None)


def _curve_rows(series: Series, curves: list[tuple[str, list[tuple[Any, float]]]], metric: str,
                found: Prepared) -> list[dict[str, Any]]:
    """Mean and std over seeds at each x every seed logged; seeds logged at different x are a G5 problem
    (averaging where only some seeds have a value would change the curve's meaning), drawn on the shared x."""
    first = list(dict.fromkeys(x for x, _ in curves[0][1]))
    shared = set(first).intersection(*({x for x, _ in pairs} for _, pairs in curves[1:]))
    for key, pairs in curves:
        if {x for x, _ in pairs} != set(first):
            found.problem("G5_axis", f"series {series.label!r}: seeds do not share x values ({curves[0][0]}: "
                                     f"{len(first)}, {key}: {len({x for x, _ in pairs})})")
    if not shared:
        found.problem("G6_data", f"series {series.label!r}: no x value every seed logged")
    lookups = [dict(pairs) for _, pairs in curves]
    keys = [key for key, _ in curves]
    rows = []
    for x in (x for x in first if x in shared):
        values = [lookup[x] for lookup in lookups]
        rows.append(row(series.label, x, values, n=len(values), capsules=keys, test_id=None,
                        metric=metric))
    return rows


# -- bar and scatter ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reading:
    """One metric of one metrics.json for a bar or scatter figure: its value, the direction the file gives, and the n
    and split it was measured on."""

    value: float
    direction: Any
    n: int | None
    split: str | None


def metric_reading(got: InputFile, metric: str) -> Reading:
    """One metric of one metrics.json: its value (a finite number, else refused naming the file and key)."""
    data = got.json()
    block = data.get("metrics", {}).get(metric) if isinstance(data, dict) and isinstance(data.get("metrics"),
                                                                                          dict) else None
    value = block.get("value") if isinstance(block, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{got.path}: metrics.{metric}.value is {value!r}, not a finite number")
    n = data.get("n")
    split = data.get("split")
    return Reading(float(value), block.get("direction") if isinstance(block, dict) else None,
                   n if isinstance(n, int) and not isinstance(n, bool) else None, split if isinstance(split, str)
                   else None)


def _read_metrics(root: Path, spec: FigureSpec, index: int, key: str, metrics: Sequence[str], label: str,
                  found: Prepared) -> list[Reading]:
    """The named metrics of one capsule's metrics.json, read once; a split other than test is disclosed."""
    ispec = {"capsule": key, "test_id": spec.test_id, "metric": label}
    got = resolve_test(root, ispec, f"series[{index}].capsules ({key})")
    readings = [metric_reading(got, metric) for metric in metrics]
    found.entries.append(input_entry(ispec, got, readings[0].split))
    if readings[0].split not in (None, "test"):
        note = f"{spec.series[index].label}: {readings[0].split}-split numbers, not test"
        if note not in found.disclosures:
            found.disclosures.append(note)
    return readings


def _prepare_bar(spec: FigureSpec, root: Path, declared: Mapping[str, MetricRule] | None) -> Prepared:
    assert spec.metric is not None
    found = Prepared()
    for index, series in enumerate(spec.series):
        readings = [_read_metrics(root, spec, index, key, [spec.metric], spec.metric, found)[0]
                    for key in series.capsules]
        values = [r.value for r in readings]
        counts = {r.n for r in readings}
        if len(counts) > 1:
            found.problem("G6_data", f"series {series.label!r}: seeds were tested on different n "
                                     f"({', '.join(sorted(map(str, counts)))})")
        found.rows.append(row(series.label, index, values, n=counts.pop() if len(counts) == 1
                              else None, capsules=series.capsules, test_id=spec.test_id, metric=spec.metric))
        found.direction = found.direction or _direction(spec.metric, declared, readings[0].direction)
    return found


def _prepare_scatter(spec: FigureSpec, root: Path, declared: Mapping[str, MetricRule] | None) -> Prepared:
    assert spec.x is not None and spec.y is not None
    found = Prepared()
    label = f"{spec.y} vs {spec.x}"
    for index, series in enumerate(spec.series):
        for key in series.capsules:
            x, y = _read_metrics(root, spec, index, key, [spec.x, spec.y], label, found)
            found.rows.append(row(series.label, x.value, [y.value], n=y.n, capsules=[key],
                                  test_id=spec.test_id, metric=label))
            found.direction = found.direction or _direction(spec.y, declared, y.direction)
    return found


# -- drawing ---------------------------------------------------------------------------------------------------
def draw(fig: Figure, spec: FigureSpec, rows: Sequence[Mapping[str, Any]], direction: str | None) -> None:
    """Draw the rows on one axes of `fig`, series in the order figure.json lists them."""
    ax = fig.add_subplot()
    order = [s.label for s in spec.series]
    by_series = {label: [r for r in rows if r["series"] == label] for label in order}
    if spec.kind == "line":
        _draw_line(ax, by_series)
    elif spec.kind == "bar":
        _draw_bar(ax, by_series)
    else:
        for label, points in by_series.items():
            ax.scatter([p["x"] for p in points], [p["y"] for p in points], label=label, s=24)
        ax.legend(loc="best")
    default_x = {"line": spec.x, "bar": None, "scatter": spec.x}[spec.kind]
    default_y = spec.metric if spec.kind == "bar" else spec.y
    if spec.title:
        ax.set_title(spec.title)
    if spec.xlabel or default_x:
        ax.set_xlabel(spec.xlabel or default_x or "")
    ax.set_ylabel(spec.ylabel if spec.ylabel is not None else f"{default_y}{arrow(direction)}")


def _draw_line(ax: Axes, by_series: Mapping[str, list[Mapping[str, Any]]]) -> None:
    for label, points in by_series.items():
        xs, ys = [p["x"] for p in points], [p["y"] for p in points]
        (line,) = ax.plot(xs, ys, label=label, linewidth=1.5)
        if any(p["err_lo"] is not None for p in points):
            ax.fill_between(xs, [p["y"] - (p["err_lo"] or 0.0) for p in points],
                            [p["y"] + (p["err_hi"] or 0.0) for p in points], color=line.get_color(), alpha=0.25,
                            linewidth=0, label=f"{BAND_PREFIX}{label}")
    ax.legend(loc="best")


def _draw_bar(ax: Axes, by_series: Mapping[str, list[Mapping[str, Any]]]) -> None:
    for index, (label, points) in enumerate(by_series.items()):
        for point in points:
            err = None if point["err_lo"] is None else [[point["err_lo"]], [point["err_hi"]]]
            ax.bar([point["x"]], [point["y"]], yerr=err, capsize=4, label=label, color=f"C{index % 10}", width=0.6)
    ax.set_xticks(range(len(by_series)), list(by_series))
