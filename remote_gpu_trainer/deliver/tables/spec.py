"""table.json as the user writes it (docs/deliver.md §4), parsed and checked in one pass: the first problem is
a ConfigError naming the file and the key (`tables/t/table.json: layout.precision.psnr: ...`).

A user writes the rows (a label and the capsules averaged into it) and the metric columns; every other layout
key has a default. A row's capsule is `<run>/<cell>`, or a bare `<run>` for every cell folder of that run
(runs are append-only, so the expansion cannot change under a finished run; the cells used are listed in
source.csv and inputs[]).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.catalogue.load import SAFE_ID, SKIP_DIRS
from remote_gpu_trainer.deliver.document import GENERATED_KEYS
from remote_gpu_trainer.deliver.tables.render import ARROWS, BOLD_RULES, CELL_KINDS, FORMATS, TEX_N, Layout
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.text import has_control
from remote_gpu_trainer.toml_table import refuse_unknown_keys, unknown_keys

SCHEMA = "remote-gpu-trainer/TABLE/v1"
USER_KEYS = ("schema", "table_id", "supports_claims", "test_id", "rows", "layout", "caption")
LAYOUT_KEYS = ("rows", "columns", "cell", "precision", "show_n", "bold", "formats", "labels")
ROW_KEYS = ("method", "capsules", "test_id")
DEFAULT_PRECISION = 2
MAX_PRECISION = 12
MAX_LABEL = 200
_RESERVED_LABELS = ("method", "n", "seeds", TEX_N)


@dataclass(frozen=True)
class TableRow:
    """One displayed row: its label and the capsules (one per seed) averaged into it, on one test."""

    method: str
    capsules: tuple[str, ...]
    test_id: str


@dataclass(frozen=True)
class TableSpec:
    """table.json as the user wrote it, checked: the rows, the layout, the claims it supports and the caption."""

    rows: tuple[TableRow, ...]
    layout: Layout
    supports_claims: tuple[str, ...] = ()
    caption: str | None = None


def parse_spec(document: Mapping[str, Any], root: Path, where: str) -> TableSpec:
    """The user's part of a table.json (generated keys are ignored here: the build rewrites them)."""
    refuse_unknown_keys(document, USER_KEYS + GENERATED_KEYS, f"{where}: ",
                        f"a table.json has {', '.join(USER_KEYS)}; rgt writes {', '.join(GENERATED_KEYS)}")
    claims = document.get("supports_claims", [])
    if not isinstance(claims, list) or not all(isinstance(c, str) and c for c in claims):
        raise ConfigError(f"{where}: supports_claims: a list of claim ids (strings) is expected")
    caption = document.get("caption")
    if caption is not None and not isinstance(caption, str):
        raise ConfigError(f"{where}: caption: a string is expected")
    test_id = document.get("test_id")
    if test_id is not None:
        _test_id(test_id, f"{where}: test_id")
    rows = _rows(document.get("rows"), test_id, root, where)
    layout = _layout(document.get("layout", {}), tuple(r.method for r in rows), where)
    return TableSpec(rows, layout, tuple(claims), caption)


def _test_id(value: Any, at: str) -> str:
    if not isinstance(value, str) or not SAFE_ID.match(value):
        raise ConfigError(f"{at}: {value!r} is not a test id (the folder under test/ in each capsule)")
    return value


def label(value: Any, at: str) -> str:
    """A row label or header text: one line without control characters or surrounding spaces, and without an
    arrow of its own (rgt adds the direction's arrow)."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{at}: a non-empty string is expected")
    if value != value.strip() or has_control(value) or len(value) > MAX_LABEL:
        shown = value if len(value) <= 40 else value[:40] + "…"
        raise ConfigError(f"{at}: {shown!r} must be one line of at most {MAX_LABEL} characters, without control "
                          "characters or surrounding spaces")
    if any(value.endswith(" " + arrow) for arrow in ARROWS.values()):
        raise ConfigError(f"{at}: {value!r} ends with an arrow: rgt adds ↑/↓ from the metric's direction")
    return value


# -- rows -----------------------------------------------------------------------------------------------------
def _rows(raw: Any, test_id: str | None, root: Path, where: str) -> tuple[TableRow, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: rows: a non-empty list of {{\"method\": label, \"capsules\": [...]}} is "
                          "required")
    rows: list[TableRow] = []
    for index, entry in enumerate(raw):
        at = f"{where}: rows[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{at}: an object {{\"method\": label, \"capsules\": [...]}} is expected")
        refuse_unknown_keys(entry, ROW_KEYS, f"{at}.", f"a row has {', '.join(ROW_KEYS)}")
        method = label(entry.get("method"), f"{at}.method")
        if any(r.method == method for r in rows):
            raise ConfigError(f"{at}.method: {method!r} names two rows")
        row_test = entry.get("test_id", test_id)
        if row_test is None:
            raise ConfigError(f"{at}.test_id: no test id (set test_id at the top of table.json or on the row)")
        rows.append(TableRow(method, _capsules(entry.get("capsules"), root, f"{at}.capsules"),
                             _test_id(row_test, f"{at}.test_id")))
    return tuple(rows)


def _capsules(raw: Any, root: Path, at: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{at}: a non-empty list of capsules `<run>/<cell>` (or a run id for all its cells)")
    found: list[str] = []
    for position, item in enumerate(raw):
        parts = item.split("/") if isinstance(item, str) else []
        if not parts or len(parts) > 2 or not all(SAFE_ID.match(p) for p in parts):
            raise ConfigError(f"{at}[{position}]: {item!r} is not a capsule `<run>/<cell>` or a run id")
        for capsule in [item] if len(parts) == 2 else run_cells(root, item, f"{at}[{position}]"):
            if capsule in found:
                raise ConfigError(f"{at}[{position}]: {capsule} is listed twice (one capsule per seed)")
            found.append(capsule)
    return tuple(found)


def run_cells(root: Path, run_id: str, at: str) -> list[str]:
    """Every cell folder of runs/<run>/, sorted; the run folder must be a plain folder in the project."""
    folder = root / "runs" / run_id
    for path in (root / "runs", folder):
        try:
            info = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            info = None
        if info is None or not stat.S_ISDIR(info.st_mode):
            raise ConfigError(f"{at}: runs/{run_id} is not a run folder in the project")
    entries = [e for e in os.scandir(folder) if SAFE_ID.match(e.name) and e.name not in SKIP_DIRS]
    linked = sorted(e.name for e in entries if e.is_symlink())
    if linked:  # skipping it would average fewer seeds than the run has, without a word
        raise ConfigError(f"{at}: runs/{run_id}/{linked[0]} is a link, not a cell folder (evidence is read only "
                          "through plain folders inside the project): list the cells `<run>/<cell>` instead")
    cells = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    if not cells:
        raise ConfigError(f"{at}: runs/{run_id} holds no cell folders")
    return [f"{run_id}/{cell}" for cell in cells]


# -- layout ---------------------------------------------------------------------------------------------------
def _layout(raw: Any, methods: tuple[str, ...], where: str) -> Layout:
    at = f"{where}: layout"
    if not isinstance(raw, dict):
        raise ConfigError(f"{at}: an object is expected")
    refuse_unknown_keys(raw, LAYOUT_KEYS, f"{at}.", f"layout has {', '.join(LAYOUT_KEYS)}")
    if raw.get("rows", "method") != "method":
        raise ConfigError(f"{at}.rows: {raw.get('rows')!r}: only \"method\" (each row's label) is supported")
    columns = _columns(raw.get("columns"), f"{at}.columns")
    return Layout(
        rows=methods, columns=columns, precision=_precision(raw.get("precision", DEFAULT_PRECISION), columns,
                                                            f"{at}.precision"),
        cell=_choice(raw.get("cell", CELL_KINDS[0]), CELL_KINDS, f"{at}.cell"),
        show_n=_flag(raw.get("show_n", True), f"{at}.show_n"),
        bold=_choice(raw.get("bold", BOLD_RULES[0]), BOLD_RULES, f"{at}.bold"),
        formats=_formats(raw.get("formats", list(FORMATS)), f"{at}.formats"),
        labels=_labels(raw.get("labels", {}), columns, f"{at}.labels"))


def _columns(raw: Any, at: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{at}: a non-empty list of metric keys (as in metrics.json `metrics`) is required")
    columns = tuple(label(item, f"{at}[{i}]") for i, item in enumerate(raw))
    if len(set(columns)) != len(columns):
        raise ConfigError(f"{at}: a metric is listed twice")
    return columns


def _precision(raw: Any, columns: tuple[str, ...], at: str) -> dict[str, int]:
    """One number of decimals for every column, or a map metric → decimals (others: the default)."""
    if not isinstance(raw, dict):
        return {m: _decimals(raw, at) for m in columns}
    _only_columns(raw, columns, at)
    return {m: _decimals(raw.get(m, DEFAULT_PRECISION), f"{at}.{m}") for m in columns}


def _only_columns(raw: Mapping[str, Any], columns: tuple[str, ...], at: str) -> None:
    """A map metric → setting (precision, labels) names only columns: its keys are metrics, not layout keys, so
    a stray one is worded as a metric that is not a column."""
    unknown = sorted(unknown_keys(raw, columns))
    if unknown:
        raise ConfigError(f"{at}.{unknown[0]}: not a column of layout.columns")


def _decimals(value: Any, at: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PRECISION:
        raise ConfigError(f"{at}: {value!r} is not a number of decimals (a whole number 0..{MAX_PRECISION})")
    return value


def _choice(value: Any, allowed: tuple[str, ...], at: str) -> str:
    if value not in allowed:
        raise ConfigError(f"{at}: {value!r} is not one of {', '.join(allowed)}")
    return str(value)


def _flag(value: Any, at: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{at}: true or false is expected")
    return value


def _formats(raw: Any, at: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(f, str) for f in raw):
        raise ConfigError(f"{at}: a non-empty list of {', '.join(FORMATS)} is expected")
    unknown = [f for f in raw if f not in FORMATS]
    if unknown:
        raise ConfigError(f"{at}: {unknown[0]!r} is not one of {', '.join(FORMATS)}")
    return tuple(f for f in FORMATS if f in raw)


def _labels(raw: Any, columns: tuple[str, ...], at: str) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{at}: an object metric → header text is expected")
    _only_columns(raw, columns, at)
    labels = {m: label(raw[m], f"{at}.{m}") for m in columns if m in raw}
    shown = [labels.get(m, m) for m in columns]
    clash = next((s for s in shown if s in _RESERVED_LABELS or shown.count(s) > 1), None)
    if clash is not None:
        raise ConfigError(f"{at}: the header {clash!r} is used twice or is one of {', '.join(_RESERVED_LABELS)}")
    return labels
