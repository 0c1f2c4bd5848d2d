"""A table's final.{md,tex,csv}, rendered from its source rows (docs/deliver.md §4).

The source rows (one per method × metric: mean and sample std over seeds at full precision, n, seeds) are the
only numbers a table holds; every rendered cell is a function of one of them, so the parse gate
(deliver/tables/gate.py) can recompute each displayed cell with the same functions and compare. Rounding happens
here and only here, with `f"{v:.{p}f}"` (never round() then str, which drops trailing zeros and rounds twice).

Bold marks the best row of a metric column only when its interval [m − std, m + std] does not overlap the
runner-up's, both with at least two seeds: a best mean inside run-to-run noise is not shown as a win.

pandas is imported inside the functions that need it (docs/architecture.md §5).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from remote_gpu_trainer.deliver.source_csv import source_csv

if TYPE_CHECKING:
    import pandas as pd

SOURCE_COLUMNS = ("method", "metric", "mean", "std", "n", "seeds", "capsules", "test_id")
CELL_KINDS = ("mean_pm_std", "mean")
BOLD_RULES = ("best_clears_error_bar", "none")
FORMATS = ("md", "tex", "csv")
ARROWS = {"max": "↑", "min": "↓"}
TEX_ARROWS = {"max": r"$\uparrow$", "min": r"$\downarrow$"}
MD_PM, TEX_PM = " ± ", r" $\pm$ "
TEX_N = "$n$"
_MD_SPECIAL = frozenset("\\|*_`")
_TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                "|": r"\textbar{}", "<": r"\textless{}", ">": r"\textgreater{}"}


@dataclass(frozen=True)
class Layout:
    """How the source rows are shown: `rows` are the method labels and `columns` the metric keys, both in
    display order; `precision` maps each metric to its decimals; `labels` are optional header texts."""

    rows: tuple[str, ...]
    columns: tuple[str, ...]
    precision: Mapping[str, int]
    cell: str = "mean_pm_std"
    show_n: bool = True
    bold: str = "best_clears_error_bar"
    formats: tuple[str, ...] = FORMATS
    labels: Mapping[str, str] = field(default_factory=dict)

    def label(self, metric: str) -> str:
        return self.labels.get(metric, metric)

    def header(self) -> list[str]:
        """The plain column names before the metrics: method, then n and seeds when shown."""
        return ["method", "n", "seeds"] if self.show_n else ["method"]


@dataclass(frozen=True)
class SourceCell:
    """One source.csv row: a metric of a method over its seeds. `std` is None for a single seed."""

    method: str
    metric: str
    mean: float
    std: float | None
    n: int | None  # None: the cells' test size is not recorded (a tracker's eval numbers), shown as `?`
    seeds: int
    capsules: str
    test_id: str


@dataclass(frozen=True)
class BoldVerdict:
    """Which row of a metric column is bold (None: none), and a note when a rule withheld it."""

    method: str | None
    note: str = ""


def read_source(data: bytes) -> pd.DataFrame:
    """source.csv as a DataFrame of its text cells: numbers are turned into floats by Python's float(), which
    gives back exactly the double repr wrote (pandas' own float parser is not exact in every version)."""
    import pandas as pd

    return pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)


def source_cells(frame: pd.DataFrame) -> dict[tuple[str, str], SourceCell]:
    """The rows keyed by (method, metric); ValueError names the first row that is not a source row."""
    missing = [c for c in SOURCE_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    cells: dict[tuple[str, str], SourceCell] = {}
    for index, row in enumerate(frame.to_dict("records"), start=2):  # line 1 is the header
        try:
            cell = SourceCell(str(row["method"]), str(row["metric"]), float(row["mean"]), _std(row["std"]),
                              _whole_or_none(row["n"]), _whole(row["seeds"]), str(row["capsules"]),
                              str(row["test_id"]))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"line {index}: {exc}") from None
        if (cell.method, cell.metric) in cells:
            raise ValueError(f"line {index}: a second row for {cell.method} / {cell.metric}")
        cells[(cell.method, cell.metric)] = cell
    return cells


def _std(value: object) -> float | None:
    """An empty cell is a single seed's missing std; any other text must be a number (`nan` stays NaN, for Q2)."""
    return None if value == "" else float(value)  # type: ignore[arg-type]


def _whole_or_none(value: object) -> int | None:
    """An empty cell is an unknown count (None); anything else must be a whole number."""
    return None if value == "" else _whole(value)


def _whole(value: object) -> int:
    if not isinstance(value, str) or not value.isdigit():
        raise ValueError(f"{value!r} is not a whole number")
    return int(value)


def number_text(value: float, decimals: int) -> str:
    """The one rounding of a table: `f"{v:.{p}f}"`."""
    return f"{value:.{decimals}f}"


def cell_text(cell: SourceCell, layout: Layout, pm: str = MD_PM) -> str:
    """A metric cell as displayed, without bold: `mean ± std` (just the mean for one seed or cell = mean)."""
    decimals = layout.precision[cell.metric]
    shown = number_text(cell.mean, decimals)
    if layout.cell == "mean_pm_std" and cell.std is not None:
        shown += pm + number_text(cell.std, decimals)
    return shown


def bold_verdict(cells: Sequence[SourceCell], direction: str | None, rule: str) -> BoldVerdict:
    """The bold row of one metric column under `rule` (docs/deliver.md §4): the best mean, only when
    [m − std, m + std] of the best and of the runner-up do not overlap. A single-seed best or runner-up has
    no interval, so nothing is bold and the note says why."""
    if rule == "none" or len(cells) < 2:
        return BoldVerdict(None)
    if direction not in ARROWS:
        return BoldVerdict(None, f"{cells[0].metric}: direction unknown, so no row is marked best")
    higher = direction == "max"
    best, runner = sorted(cells, key=lambda c: (-c.mean if higher else c.mean, c.method))[:2]
    if best.mean == runner.mean:
        return BoldVerdict(None)
    single = next((c for c in (best, runner) if c.std is None), None)
    if single is not None:
        role = "best row" if single is best else "runner-up"
        return BoldVerdict(None, f"{best.metric}: the {role} {single.method!r} is single-seed (no error bar), "
                                 "so no row is bold")
    assert best.std is not None and runner.std is not None
    clears = (best.mean - best.std > runner.mean + runner.std if higher
              else best.mean + best.std < runner.mean - runner.std)
    return BoldVerdict(best.method if clears else None)


def column_cells(cells: Mapping[tuple[str, str], SourceCell], layout: Layout, metric: str) -> list[SourceCell]:
    return [cells[(method, metric)] for method in layout.rows if (method, metric) in cells]


def verdicts(cells: Mapping[tuple[str, str], SourceCell], layout: Layout,
             directions: Mapping[str, str | None]) -> dict[str, BoldVerdict]:
    """The bold verdict of every metric column."""
    return {m: bold_verdict(column_cells(cells, layout, m), directions.get(m), layout.bold) for m in layout.columns}


def render(frame: pd.DataFrame, layout: Layout, directions: Mapping[str, str | None]) -> dict[str, bytes]:
    """Every format of `layout.formats` as `{"final.<fmt>": bytes}`: UTF-8, LF, a trailing newline."""
    cells = source_cells(frame)
    for method in layout.rows:
        for metric in layout.columns:
            if (method, metric) not in cells:
                raise ValueError(f"source has no row for method {method!r}, metric {metric!r}")
    bold = verdicts(cells, layout, directions)
    writers = {"md": _markdown, "tex": _latex, "csv": _csv}
    return {f"final.{fmt}": writers[fmt](cells, layout, directions, bold).encode() for fmt in layout.formats}


def row_counts(cells: Mapping[tuple[str, str], SourceCell], layout: Layout, method: str) -> tuple[int | None, int]:
    """(n, seeds) shown for a row: its first metric's (every metric of a row reads the same metrics.json)."""
    first = cells[(method, layout.columns[0])]
    return first.n, first.seeds


def metric_header(layout: Layout, metric: str, direction: str | None, *, tex: bool) -> str:
    label = tex_escape(layout.label(metric)) if tex else md_escape(layout.label(metric))
    arrow = (TEX_ARROWS if tex else ARROWS).get(direction or "")
    return f"{label} {arrow}" if arrow else label


def md_escape(text: str) -> str:
    """Backslash before each character Markdown would read as table structure or emphasis."""
    return "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in text)


def tex_escape(text: str) -> str:
    return "".join(_TEX_ESCAPES.get(ch, ch) for ch in text)


def _markdown(cells: Mapping[tuple[str, str], SourceCell], layout: Layout, directions: Mapping[str, str | None],
              bold: Mapping[str, BoldVerdict]) -> str:
    header = layout.header() + [metric_header(layout, m, directions.get(m), tex=False) for m in layout.columns]
    lines = [_md_line(header), _md_line([":---"] + ["---:"] * (len(header) - 1))]
    for method in layout.rows:
        row = [md_escape(method)] + (_counts_text(cells, layout, method) if layout.show_n else [])
        for metric in layout.columns:
            text = cell_text(cells[(method, metric)], layout, MD_PM)
            row.append(f"**{text}**" if bold[metric].method == method else text)
        lines.append(_md_line(row))
    return "\n".join(lines) + "\n"


def _counts_text(cells: Mapping[tuple[str, str], SourceCell], layout: Layout, method: str) -> list[str]:
    """n and seeds as shown: an unknown n is `?`, never a number rgt does not have."""
    return ["?" if v is None else str(v) for v in row_counts(cells, layout, method)]


def _md_line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _latex(cells: Mapping[tuple[str, str], SourceCell], layout: Layout, directions: Mapping[str, str | None],
           bold: Mapping[str, BoldVerdict]) -> str:
    plain = [TEX_N if name == "n" else name for name in layout.header()]
    header = plain + [metric_header(layout, m, directions.get(m), tex=True) for m in layout.columns]
    lines = [r"\begin{tabular}{l" + "r" * (len(header) - 1) + "}", r"\toprule", _tex_line(header), r"\midrule"]
    for method in layout.rows:
        row = [tex_escape(method)] + (_counts_text(cells, layout, method) if layout.show_n else [])
        for metric in layout.columns:
            text = cell_text(cells[(method, metric)], layout, TEX_PM)
            row.append(rf"\textbf{{{text}}}" if bold[metric].method == method else text)
        lines.append(_tex_line(row))
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def _tex_line(cells: list[str]) -> str:
    return " & ".join(cells) + r" \\"


def csv_header(layout: Layout) -> list[str]:
    """final.csv's columns: method, n, seeds, then `<metric>_mean` and `<metric>_std` per metric column."""
    return ["method", "n", "seeds"] + [f"{m}_{part}" for m in layout.columns for part in ("mean", "std")]


def _csv(cells: Mapping[tuple[str, str], SourceCell], layout: Layout, directions: Mapping[str, str | None],
         bold: Mapping[str, BoldVerdict]) -> str:
    """Full precision in the layout's row order: floats via repr, an empty std for one seed, n and seeds always
    (this is data). Written by the one CSV writer of DELIVER (deliver/source_csv.py), without a sort key."""
    rows: list[dict[str, object]] = []
    for method in layout.rows:
        n, seeds = row_counts(cells, layout, method)
        row: dict[str, object] = {"method": method, "n": n, "seeds": seeds}
        for metric in layout.columns:
            cell = cells[(method, metric)]
            row.update({f"{metric}_mean": cell.mean, f"{metric}_std": cell.std})
        rows.append(row)
    return source_csv(csv_header(layout), rows, (), "final.csv").decode("utf-8")
