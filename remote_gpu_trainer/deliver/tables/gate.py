"""The parse gate of a table, Q1–Q6 (docs/deliver.md §4): the rendered files read back and compared with
source.csv, never trusted because the writer returned.

Q1 parse back: final.csv parses with pandas; the Markdown and LaTeX files parse as tables (every row the header's
   width, LF line ends, a trailing newline); source.csv parses as source rows.
Q2 no NaN/inf in any number of source.csv, final.csv, or a displayed cell.
Q3 cells match source: the rows are the layout's, in its order; every metric cell equals the formatter of
   deliver/tables/render.py applied to its source.csv row (final.csv: the same doubles, exactly).
Q4 bold rule: the bold cells are exactly the ones bold_verdict allows; a bold withheld for a single seed or an
   unknown direction is `disclosed`.
Q5 n shown: n and seeds columns with the source's values (`disclosed` when layout.show_n is false).
Q6 direction marked: each metric header carries the arrow of its direction (`disclosed` when unknown).

Everything here is a pure function of bytes: the build feeds it what it wrote, and a test feeds it
hand-broken outputs.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from remote_gpu_trainer.deliver.tables.render import (
    ARROWS,
    MD_PM,
    TEX_ARROWS,
    TEX_N,
    TEX_PM,
    Layout,
    SourceCell,
    cell_text,
    column_cells,
    csv_header,
    md_escape,
    read_source,
    row_counts,
    source_cells,
    tex_escape,
    verdicts,
)

CHECKS = ("Q1_parse_back", "Q2_no_nan", "Q3_cells_match_source", "Q4_bold_rule", "Q5_n_shown",
          "Q6_direction_marked")
Q1, Q2, Q3, Q4, Q5, Q6 = CHECKS
_NON_FINITE = re.compile(r"(?i)(?<![a-z])(nan|[-+]?inf(inity)?)(?![a-z])")
_MD_RULE = re.compile(r"^:?-+:?$")


@dataclass(frozen=True)
class GateResult:
    """Each check's verdict (`pass`, `fail`, `disclosed`) and the notes that say why."""

    checks: Mapping[str, str]
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return all(v in ("pass", "disclosed") for v in self.checks.values())


@dataclass
class _Verdicts:
    """The table gate's fails and disclosures, collected per check while it runs and turned into one GateResult at
    the end."""

    fails: dict[str, list[str]] = field(default_factory=dict)
    disclosures: dict[str, list[str]] = field(default_factory=dict)

    def fail(self, check: str, note: str) -> None:
        self.fails.setdefault(check, []).append(note)

    def disclose(self, check: str, note: str) -> None:
        self.disclosures.setdefault(check, []).append(note)

    def result(self) -> GateResult:
        checks = {c: "fail" if c in self.fails else "disclosed" if c in self.disclosures else "pass" for c in CHECKS}
        notes = [f"{c}: {n}" for c in CHECKS for n in self.fails.get(c, []) + self.disclosures.get(c, [])]
        return GateResult(checks, tuple(dict.fromkeys(notes)))


@dataclass(frozen=True)
class _Dialect:
    """How one text format writes a table: its ± and n, bold, arrows and escaping."""

    file: str
    pm: str
    bold_open: str
    bold_close: str
    arrows: Mapping[str, str]
    n_header: str
    tex: bool

    def escape(self, text: str) -> str:
        return tex_escape(text) if self.tex else md_escape(text)

    def unbold(self, cell: str) -> tuple[str, bool]:
        if len(cell) > len(self.bold_open) + len(self.bold_close) and cell.startswith(self.bold_open) \
                and cell.endswith(self.bold_close):
            return cell[len(self.bold_open):-len(self.bold_close)], True
        return cell, False

    def split_header(self, cell: str) -> tuple[str, str | None]:
        """(label, direction its arrow names or None)."""
        for direction, arrow in self.arrows.items():
            if cell.endswith(" " + arrow):
                return cell[:-len(arrow) - 1], direction
        return cell, None


MD = _Dialect("final.md", MD_PM, "**", "**", ARROWS, "n", tex=False)
TEX = _Dialect("final.tex", TEX_PM, r"\textbf{", "}", TEX_ARROWS, TEX_N, tex=True)


@dataclass(frozen=True)
class Displayed:
    """A text table read back: the header and data rows as raw cell text (escapes kept)."""

    dialect: _Dialect
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def column(self, name: str) -> int | None:
        labels = [self.dialect.split_header(h)[0] for h in self.header]
        return labels.index(name) if name in labels else None


def check_table(source: bytes, outputs: Mapping[str, bytes], layout: Layout,
                directions: Mapping[str, str | None]) -> GateResult:
    """Q1–Q6 over source.csv and the rendered files (`{"final.<fmt>": bytes}`)."""
    v = _Verdicts()
    cells = _source(source, v)
    shown, csv_rows = _parse_outputs(outputs, layout, v)
    _check_no_nan(cells, shown, csv_rows, layout, v)
    if cells is not None:
        _check_cells(cells, shown, csv_rows, layout, v)
        _check_bold(cells, shown, layout, directions, v)
        _check_n(cells, shown, csv_rows, layout, v)
    _check_arrows(shown, layout, directions, v)
    return v.result()


# -- Q1 parse back --------------------------------------------------------------------------------------------
def _source(data: bytes, v: _Verdicts) -> dict[tuple[str, str], SourceCell] | None:
    try:
        _text(data, "source.csv")
        return source_cells(read_source(data))
    except Exception as exc:  # pandas raises many types for one cause: bytes that are not the table
        v.fail(Q1, f"source.csv does not parse: {_first_line(exc)}")
        return None


def _parse_outputs(outputs: Mapping[str, bytes], layout: Layout,
                   v: _Verdicts) -> tuple[list[Displayed], list[dict[str, str]] | None]:
    shown: list[Displayed] = []
    csv_rows: list[dict[str, str]] | None = None
    for fmt in layout.formats:
        name = f"final.{fmt}"
        if name not in outputs:
            v.fail(Q1, f"{name} is missing (layout.formats lists {fmt})")
            continue
        try:
            if fmt == "csv":
                csv_rows = parse_csv(outputs[name])
            else:
                shown.append(parse_markdown(outputs[name]) if fmt == "md" else parse_latex(outputs[name]))
        except Exception as exc:  # as above: any parser error is this file not parsing back
            v.fail(Q1, f"{name} does not parse back: {_first_line(exc)}")
    return shown, csv_rows


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _text(data: bytes, name: str) -> str:
    text = data.decode("utf-8")
    if "\r" in text:
        raise ValueError(f"{name} has CR line ends (LF only)")
    if not text.endswith("\n"):
        raise ValueError(f"{name} does not end with a newline")
    return text


def parse_csv(data: bytes) -> list[dict[str, str]]:
    """final.csv through pandas, every field as its text (numbers are compared as exact doubles later)."""
    import pandas as pd

    _text(data, "final.csv")
    frame = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
    return [{str(k): str(val) for k, val in row.items()} for row in frame.to_dict("records")]


def parse_markdown(data: bytes) -> Displayed:
    """A pipe table: header, a `---` rule row, data rows, all of one width."""
    lines = _text(data, "final.md")[:-1].split("\n")
    if len(lines) < 2:
        raise ValueError("fewer than two lines (a header and its rule)")
    table = [_md_cells(line, number) for number, line in enumerate(lines, 1)]
    if not all(_MD_RULE.match(cell) for cell in table[1]):
        raise ValueError("line 2 is not the header's rule row (| --- | ---: |)")
    return _displayed(MD, table[0], table[2:])


def _md_cells(line: str, number: int) -> list[str]:
    """Cells split at unescaped pipes, escapes kept as written (compared with md_escape's output)."""
    if not (line.startswith("| ") and line.endswith(" |")):
        raise ValueError(f"line {number} is not a table row (| ... |)")
    cells: list[str] = []
    current: list[str] = []
    escaped = False
    for ch in line[1:]:
        if escaped or ch == "\\":
            current.append(ch)
            escaped = not escaped
        elif ch == "|":
            cells.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if current:
        raise ValueError(f"line {number} does not end with an unescaped |")
    return cells


def parse_latex(data: bytes) -> Displayed:
    r"""The tabular of the renderer: \begin{tabular}, \toprule, header, \midrule, rows, \bottomrule, \end."""
    lines = _text(data, "final.tex")[:-1].split("\n")
    if len(lines) < 6 or not lines[0].startswith(r"\begin{tabular}{") or lines[-1] != r"\end{tabular}":
        raise ValueError(r"not a \begin{tabular} ... \end{tabular} block")
    if lines[1] != r"\toprule" or lines[3] != r"\midrule" or lines[-2] != r"\bottomrule":
        raise ValueError(r"rules are not \toprule, header, \midrule, rows, \bottomrule")
    table = [_tex_cells(line, number) for number, line in [(3, lines[2])] + list(enumerate(lines[4:-2], 5))]
    spec = lines[0][len(r"\begin{tabular}{"):-1]
    if len(spec) != len(table[0]):
        raise ValueError(f"the column spec {spec!r} has {len(spec)} columns, the header {len(table[0])}")
    return _displayed(TEX, table[0], table[1:])


def _tex_cells(line: str, number: int) -> list[str]:
    if not line.endswith(r" \\"):
        raise ValueError(f"line {number} does not end with \\\\")
    cells: list[str] = []
    current: list[str] = []
    escaped = False
    for ch in line[:-3]:
        if ch == "&" and not escaped:
            cells.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        escaped = ch == "\\" and not escaped
    return cells + ["".join(current).strip()]


def _displayed(dialect: _Dialect, header: list[str], rows: list[list[str]]) -> Displayed:
    for number, row in enumerate(rows, 1):
        if len(row) != len(header):
            raise ValueError(f"data row {number} has {len(row)} cells, the header {len(header)}")
    return Displayed(dialect, tuple(header), tuple(tuple(r) for r in rows))


# -- Q2 no NaN/inf --------------------------------------------------------------------------------------------
def _check_no_nan(cells: Mapping[tuple[str, str], SourceCell] | None, shown: list[Displayed],
                  csv_rows: list[dict[str, str]] | None, layout: Layout, v: _Verdicts) -> None:
    for cell in (cells or {}).values():
        if not all(math.isfinite(x) for x in (cell.mean, cell.std or 0.0)):
            v.fail(Q2, f"source.csv {cell.method} / {cell.metric}: mean {cell.mean!r}, std {cell.std!r}")
    numeric = set(csv_header(layout)) - {"method"}
    for record in csv_rows or []:
        for key in sorted(numeric & set(record)):
            if _NON_FINITE.search(record[key]):
                v.fail(Q2, f"final.csv {record.get('method', '?')} / {key}: {record[key]!r}")
    for table in shown:
        for row in table.rows:
            for text in row[1:]:
                if _NON_FINITE.search(text):
                    v.fail(Q2, f"{table.dialect.file} {row[0]}: a cell shows {text!r}")


# -- Q3 cells match source ------------------------------------------------------------------------------------
def _check_cells(cells: Mapping[tuple[str, str], SourceCell], shown: list[Displayed],
                 csv_rows: list[dict[str, str]] | None, layout: Layout, v: _Verdicts) -> None:
    absent = [f"{m} / {c}" for m in layout.rows for c in layout.columns if (m, c) not in cells]
    if absent:
        v.fail(Q3, f"source.csv has no row for {', '.join(absent)}")
        return
    for table in shown:
        _check_text_cells(table, cells, layout, v)
    if csv_rows is not None:
        _check_csv_cells(csv_rows, cells, layout, v)


def _check_text_cells(table: Displayed, cells: Mapping[tuple[str, str], SourceCell], layout: Layout,
                      v: _Verdicts) -> None:
    name, dialect = table.dialect.file, table.dialect
    methods = [row[0] for row in table.rows]
    expected = [dialect.escape(m) for m in layout.rows]
    if table.column("method") != 0 or methods != expected:
        v.fail(Q3, f"{name} rows are {methods}, the layout's {expected}")
        return
    known = set(layout.header()) | {dialect.n_header} | {dialect.escape(layout.label(m)) for m in layout.columns}
    for extra in [h for h in (dialect.split_header(h)[0] for h in table.header) if h not in known]:
        v.fail(Q3, f"{name} has a column {extra!r} the layout does not")
    for metric in layout.columns:
        index = table.column(dialect.escape(layout.label(metric)))
        if index is None:
            v.fail(Q3, f"{name} has no column {layout.label(metric)!r}")
            continue
        for method, row in zip(layout.rows, table.rows, strict=True):
            text, _ = dialect.unbold(row[index])
            want = cell_text(cells[(method, metric)], layout, dialect.pm)
            if text != want:
                v.fail(Q3, f"{name} {method} / {metric} shows {text!r}; source.csv gives {want!r}")


def _check_csv_cells(rows: list[dict[str, str]], cells: Mapping[tuple[str, str], SourceCell], layout: Layout,
                     v: _Verdicts) -> None:
    methods = [row.get("method") for row in rows]
    if methods != list(layout.rows):
        v.fail(Q3, f"final.csv rows are {methods}, the layout's {list(layout.rows)}")
        return
    for metric in layout.columns:
        for part in ("mean", "std"):
            column = f"{metric}_{part}"
            if rows and column not in rows[0]:
                v.fail(Q3, f"final.csv has no column {column!r}")
                continue
            for method, row in zip(layout.rows, rows, strict=True):
                want = getattr(cells[(method, metric)], part)
                if not _same_number(row[column], want):
                    v.fail(Q3, f"final.csv {method} / {column} is {row[column]!r}; source.csv gives "
                               f"{'' if want is None else repr(want)!r}")


def _same_number(text: str, want: float | None) -> bool:
    """Exactly the source's double (an empty field for a missing std)."""
    if want is None:
        return text == ""
    try:
        return repr(float(text)) == repr(want)  # exactly the double (a NaN written from a NaN source agrees)
    except ValueError:
        return False


# -- Q4 bold rule ---------------------------------------------------------------------------------------------
def _check_bold(cells: Mapping[tuple[str, str], SourceCell], shown: list[Displayed], layout: Layout,
                directions: Mapping[str, str | None], v: _Verdicts) -> None:
    allowed = verdicts(cells, layout, directions)
    for verdict in allowed.values():
        if verdict.note:
            v.disclose(Q4, verdict.note)
    for table in shown:
        dialect = table.dialect
        labels = {dialect.escape(layout.label(m)): m for m in layout.columns}
        methods = {dialect.escape(m): m for m in layout.rows}
        for index, head in enumerate(table.header):
            metric = labels.get(dialect.split_header(head)[0])
            bold = [methods.get(shown, shown) for shown in _bold_rows(table, index)]
            if metric is None:
                if bold:
                    v.fail(Q4, f"{dialect.file} bolds {', '.join(bold)} in column {head!r}, which is no metric")
                continue
            want = [] if allowed[metric].method is None else [str(allowed[metric].method)]
            if bold != want:
                v.fail(Q4, f"{dialect.file} {metric}: " + _bold_problem(bold, want, metric, cells, layout,
                                                                          directions.get(metric)))


def _bold_rows(table: Displayed, index: int) -> list[str]:
    return [row[0] for row in table.rows if table.dialect.unbold(row[index])[1]]


def _bold_problem(bold: list[str], want: list[str], metric: str, cells: Mapping[tuple[str, str], SourceCell],
                  layout: Layout, direction: str | None) -> str:
    """Why the bold cells break the rule, with the intervals it was judged on."""
    column = column_cells(cells, layout, metric)
    ranked = sorted(column, key=lambda c: (-c.mean if direction == "max" else c.mean, c.method))
    intervals = "; ".join(f"{c.method} {_interval(c)}" for c in ranked[:2])
    if not want:
        return f"{', '.join(bold)} bold, but the rule allows none here ({intervals or 'one row'})"
    if not bold:
        return f"{want[0]} clears the runner-up ({intervals}) and is not bold"
    return f"{', '.join(bold)} bold; the rule bolds {want[0]} ({intervals})"


def _interval(cell: SourceCell) -> str:
    if cell.std is None:
        return f"{cell.mean:.10g} (single seed)"
    return f"[{cell.mean - cell.std:.10g}, {cell.mean + cell.std:.10g}]"


# -- Q5 n shown -----------------------------------------------------------------------------------------------
def _check_n(cells: Mapping[tuple[str, str], SourceCell], shown: list[Displayed],
             csv_rows: list[dict[str, str]] | None, layout: Layout, v: _Verdicts) -> None:
    unknown = sorted({c.method for c in cells.values() if c.n is None})
    if unknown:
        v.disclose(Q5, f"n is unknown for {', '.join(unknown)}: their cells come from a tracker's eval numbers, "
                       "which do not record the test's size (shown as ?)")
    counts: dict[str, tuple[int | None, int] | None] = {}
    for method in layout.rows:
        row = {(c.n, c.seeds) for c in (cells.get((method, m)) for m in layout.columns) if c is not None}
        if len(row) > 1:
            v.fail(Q5, f"source.csv rows of {method} disagree on n / seeds: {sorted(row)}")
        counts[method] = row_counts(cells, layout, method) if (method, layout.columns[0]) in cells else None
    tables: list[tuple[str, list[str], dict[str, int | None], dict[str, int | None]]] = []
    if layout.show_n:
        for table in shown:
            n_at, seeds_at = table.column(table.dialect.n_header), table.column("seeds")
            tables.append((table.dialect.file, [r[0] for r in table.rows], _ints(table.rows, n_at),
                           _ints(table.rows, seeds_at)))
    else:
        held = "final.csv and source.csv hold them" if "csv" in layout.formats else "source.csv holds them"
        v.disclose(Q5, f"n and seeds are not shown in the table (layout.show_n = false); {held}")
    if csv_rows is not None:
        tables.append(("final.csv", [r.get("method", "") for r in csv_rows], _csv_ints(csv_rows, "n"),
                       _csv_ints(csv_rows, "seeds")))
    for name, methods, ns, seeds in tables:
        _compare_counts(name, layout, methods, ns, seeds, counts, v)


def _compare_counts(name: str, layout: Layout, methods: list[str], ns: dict[str, int | None],
                    seeds: dict[str, int | None], counts: Mapping[str, tuple[int | None, int] | None],
                    v: _Verdicts) -> None:
    if not ns or not seeds:
        v.fail(Q5, f"{name} has no {'n' if not ns else 'seeds'} column")
        return
    escape = tex_escape if name == "final.tex" else md_escape if name == "final.md" else str
    for method in layout.rows:
        shown_as = escape(method)
        want = counts.get(method)
        if want is None or shown_as not in methods:
            continue
        got = (ns.get(shown_as), seeds.get(shown_as))
        if got != want:
            v.fail(Q5, f"{name} {method} shows n, seeds = {got}; source.csv gives {want}")


def _ints(rows: tuple[tuple[str, ...], ...], index: int | None) -> dict[str, int | None]:
    if index is None:
        return {}
    return {row[0]: int(row[index]) if row[index].isdigit() else None for row in rows}


def _csv_ints(rows: list[dict[str, str]], column: str) -> dict[str, int | None]:
    if not rows or column not in rows[0]:
        return {}
    return {row.get("method", ""): int(row[column]) if row[column].isdigit() else None for row in rows}


# -- Q6 direction marked --------------------------------------------------------------------------------------
def _check_arrows(shown: list[Displayed], layout: Layout, directions: Mapping[str, str | None],
                  v: _Verdicts) -> None:
    for key in layout.columns:
        if directions.get(key) not in ARROWS:
            v.disclose(Q6, f"the direction of {key} is unknown (declare it in rgt.toml [metrics]): no arrow")
    for table in shown:
        dialect = table.dialect
        for head in table.header:
            label, arrow = dialect.split_header(head)
            metric = next((m for m in layout.columns if dialect.escape(layout.label(m)) == label), None)
            if metric is None:
                continue
            direction = directions.get(metric)
            want = direction if direction in ARROWS else None
            if arrow != want:
                shows = f"{ARROWS[arrow]}" if arrow else "no arrow"
                needs = f"{ARROWS[want]} ({want})" if want else "none (direction unknown)"
                v.fail(Q6, f"{dialect.file} header {head!r} shows {shows}; {metric} needs {needs}")
