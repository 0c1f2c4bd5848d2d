"""Results first (docs/deliver.md §8): each run's numbers as `rgt --report` opens with them.

Read from the capsules under `runs/<run>/<cell>/` with the json and csv modules only: run.json, each
`test/<test>/metrics.json` (or a legacy cell's best_metrics.json) and the `loss` and `val/*` columns of
train.csv. Per-item results tables are not read and pandas is never imported, so a report stays as cheap as the
files it names (docs/architecture.md §5). Folders and files are taken as they are under the project root: a
symlink is never followed, a file that does not parse is a problem line, never an exception.

The aggregation is VERIFY's (audits/catalogue/numbers.py: the finite values of each cell's metrics.json, their
mean and sample standard deviation), over the same numbers VERIFY forms for a run no claim cites
(audits/catalogue/load.numbers_of), so the report and the checks never disagree about a run's number.
"""

from __future__ import annotations

import csv
import math
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.catalogue.load import SAFE_ID, SKIP_DIRS, cell_outcomes, numbers_of
from remote_gpu_trainer.audits.catalogue.metric_registry import DIRECTION_WORDS, normalise, stated_or_registered
from remote_gpu_trainer.audits.catalogue.model import Capsule, MetricRule, Number, ProjectEvidence, TestArtifacts
from remote_gpu_trainer.audits.catalogue.numbers import SeedValue, mean, sample_std, seed_values
from remote_gpu_trainer.clock import parse_iso
from remote_gpu_trainer.strict_json import loads_strict
from remote_gpu_trainer.views import ARROWS, ResultRowView

MAX_JSON_BYTES = 16 << 20  # a run.json or metrics.json larger than this is not read (it is not one)
LOSS = "loss"


@dataclass(frozen=True)
class Curve:
    """One train.csv column over the logged steps: its last, lowest and highest finite value."""

    last: float
    low: float
    high: float

    def then(self, value: float) -> Curve:
        return Curve(value, min(self.low, value), max(self.high, value))


@dataclass(frozen=True)
class CellResults:
    """What the report reads of one cell: run.json and each test's metrics (as a VERIFY Capsule without
    tables), the `loss` and `val/*` curves of train.csv, and what could not be read."""

    capsule: Capsule
    curves: Mapping[str, Curve] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


# -- reading ------------------------------------------------------------------------------------------------
def read_cells(root: Path) -> list[CellResults]:
    """Every cell folder under `runs/<run>/` (safe names, no symlinks, not `test` or `vis`) that holds any of
    run.json, a test's metrics.json, best_metrics.json or train.csv, by run then cell."""
    cells = []
    for run_dir in _folders(root / "runs"):
        if not SAFE_ID.match(run_dir.name):
            continue
        outcomes = run_outcomes(root, run_dir.name)
        for cell_dir in _folders(run_dir):
            if SAFE_ID.match(cell_dir.name) and cell_dir.name not in SKIP_DIRS:
                cell = read_cell(root, run_dir.name, cell_dir.name)
                if cell is not None and cell_dir.name in outcomes:
                    cell = replace(cell, capsule=replace(cell.capsule, outcome=outcomes[cell_dir.name]))
                if cell is not None:
                    cells.append(cell)
    return cells


def run_outcomes(root: Path, run_id: str) -> dict[str, str]:
    """The run's cells its pulled manifest records as failed or never started (docs/gate.md §2): cell -> words."""
    manifest = _json_object(root, f"runs/{run_id}/PULL_MANIFEST.json", [])
    return cell_outcomes(manifest)


def read_cell(root: Path, run_id: str, cell: str) -> CellResults | None:
    rel = f"runs/{run_id}/{cell}"
    problems: list[str] = []
    record = _json_object(root, f"{rel}/run.json", problems)
    tests = {}
    for test_dir in _folders(root / rel / "test"):
        if SAFE_ID.match(test_dir.name):
            metrics = _json_object(root, f"{rel}/test/{test_dir.name}/metrics.json", problems)
            if metrics is not None:
                tests[test_dir.name] = TestArtifacts(test_dir.name, f"{rel}/test/{test_dir.name}/metrics.json",
                                                     metrics)
    legacy = _json_object(root, f"{rel}/best_metrics.json", problems) if record is None else None
    if legacy is not None:
        from remote_gpu_trainer.audits.catalogue.readers.best_metrics import legacy_test

        test, found = legacy_test(f"{rel}/best_metrics.json", legacy, None)
        problems.extend(f"{p.path}: {p.message}" for p in found)
        if test is not None:
            tests.setdefault(test.test_id, test)
    curves = read_curves(root / rel / "train.csv", f"{rel}/train.csv", problems)
    if record is None and not tests and not curves and legacy is None:
        return tracker_cell(root, run_id, cell)
    capsule = Capsule(run_id=run_id, cell=cell, path=rel, source="capsule" if record is not None else "legacy",
                      run_record=record, tests=tests)
    return CellResults(capsule, curves, tuple(problems))


def tracker_cell(root: Path, run_id: str, cell: str) -> CellResults | None:
    """A cell with no capsule file, as its trackers recorded it (audits/catalogue/readers: trainer_state.json,
    Lightning metrics.csv, TensorBoard events, MLflow mlruns, W&B): the same reader VERIFY uses, so the report
    and the checks read one number. Only such cells pay for the readers (and pandas)."""
    from remote_gpu_trainer.audits.catalogue.readers import read_tracker_cell

    capsule = read_tracker_cell(root, run_id, cell)
    if capsule is None:
        return None
    curves: dict[str, Curve] = {}
    if capsule.train is not None:
        for name in capsule.train.columns:
            if name == LOSS or str(name).startswith("val/"):
                values = [float(v) for v in capsule.train[name].tolist() if _finite(v)]
                if values:
                    curves[str(name)] = Curve(values[-1], min(values), max(values))
    problems = tuple(f"{p.path}: {p.message}" for p in capsule.problems)
    return CellResults(capsule, curves, problems)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def read_curves(path: Path, rel: str, problems: list[str]) -> dict[str, Curve]:
    """The `loss` and `val/<metric>` columns of a train.csv, read row by row with the csv module; empty and
    non-numeric cells are skipped, as are NaN and infinities."""
    if not _regular(path):
        return {}
    curves: dict[str, Curve] = {}
    try:
        with path.open(encoding="utf-8", errors="replace", newline="") as handle:
            reader = csv.reader(handle)
            wanted = [(i, name) for i, name in enumerate(next(reader, []))
                      if name == LOSS or name.startswith("val/")]
            for row in reader:
                for index, name in wanted:
                    value = _number(row[index]) if index < len(row) else None
                    if value is not None:
                        seen = curves.get(name)
                        curves[name] = Curve(value, value, value) if seen is None else seen.then(value)
    except (OSError, csv.Error) as exc:
        problems.append(f"{rel}: unreadable ({exc})")
        return {}
    return curves


def _folders(path: Path) -> list[Path]:
    """Sub-folders that are real folders (a symlink to one is never entered), by name."""
    try:
        with os.scandir(path) as scan:
            return sorted(Path(e.path) for e in scan if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _json_object(root: Path, rel: str, problems: list[str]) -> dict[str, Any] | None:
    path = root / rel
    if not _regular(path):
        return None
    if path.lstat().st_size > MAX_JSON_BYTES:
        problems.append(f"{rel}: larger than {MAX_JSON_BYTES >> 20} MiB, not read")
        return None
    try:
        value = loads_strict(path.read_bytes())
    except (OSError, ValueError) as exc:
        problems.append(f"{rel}: malformed JSON: {exc}")
        return None
    if not isinstance(value, dict):
        problems.append(f"{rel}: is not a JSON object")
        return None
    return value


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# -- the rows -----------------------------------------------------------------------------------------------
def result_rows(cells: Sequence[CellResults], declared: Mapping[str, MetricRule] | None = None
                ) -> dict[str, tuple[ResultRowView, ...]]:
    """Run id -> one row per (test, metric) with at least one finite value, sorted by test then metric."""
    project = ProjectEvidence(root=Path("."), capsules=tuple(c.capsule for c in cells))
    by_key = {c.capsule.key: c for c in cells}
    rows: dict[str, list[ResultRowView]] = {}
    for number in numbers_of(project):  # no EVIDENCE here: one number per (run, test, metric)
        values = seed_values(project, number)
        if values:
            run_id = values[0].capsule.run_id
            rows.setdefault(run_id, []).append(_row(number, values, by_key, declared or {}))
    return {run_id: tuple(found) for run_id, found in rows.items()}


def _row(number: Number, values: list[SeedValue], cells: Mapping[str, CellResults],
         declared: Mapping[str, MetricRule]) -> ResultRowView:
    tests = [v.test for v in values]
    block = tests[0].metric_block(number.metric) or {}
    way = metric_direction(number.metric, block, declared)
    splits = sorted({t.split or "?" for t in tests})
    ns = sorted({t.n if t.n is not None else -1 for t in tests})
    notes = []
    if len(splits) > 1:
        notes.append(f"the cells name different splits: {', '.join(splits)}")
    if len(ns) > 1:
        notes.append("n differs across the cells: " + ", ".join("?" if n < 0 else str(n) for n in ns))
    notes.extend(dict.fromkeys(str(t.metrics["disclosure"]) for t in tests
                               if t.metrics and isinstance(t.metrics.get("disclosure"), str)))
    dropped = [f"{c.capsule.key} {c.capsule.outcome}" for key in number.cells
               if (c := cells.get(key)) is not None and c.capsule.outcome is not None]
    if dropped:
        notes.append("left out (did not finish): " + ", ".join(dropped))
    curve, best, last, on = _curve(number.metric, way, [cells[v.capsule.key].curves for v in values])
    if curve is not None and on < len(values):
        notes.append(f"best and last from the {on} of {len(values)} cells whose train.csv has {curve}")
    unit = block.get("unit")
    return ResultRowView(
        test_id=number.test_id, split=splits[0] if len(splits) == 1 and splits[0] != "?" else None,
        metric=number.metric, direction=way, unit=unit if isinstance(unit, str) and unit else None,
        mean=mean([v.value for v in values]), std=sample_std([v.value for v in values]), seeds=len(values),
        n=ns[0] if len(ns) == 1 and ns[0] >= 0 else None, cells=tuple(v.capsule.key for v in values),
        curve=curve, best=best, last=last, note="; ".join(notes),
        sources=tuple(dict.fromkeys(t.metrics_path for t in tests)),
        source=", ".join(dict.fromkeys(v.capsule.source for v in values)))


def metric_direction(metric: str, block: Mapping[str, Any], declared: Mapping[str, MetricRule]) -> str | None:
    """`higher_is_better` / `lower_is_better`: metrics.json's own word first, then rgt.toml [metrics] and the
    shipped registry; None when none of them knows (the report shows `?`, never a guess)."""
    short = stated_or_registered(metric, (block.get("direction"),), declared)
    return DIRECTION_WORDS.get(short or "")


def _curve(metric: str, way: str | None, curves: list[Mapping[str, Curve]]
           ) -> tuple[str | None, float | None, float | None, int]:
    """The column best and last come from (`val/<metric>`, else `loss`), the mean over the cells of each one's
    best and last value, and how many cells had the column. Best follows the metric's direction (the loss:
    lowest); with the direction unknown there is no best."""
    names = (f"val/{metric}", f"val/{normalise(metric)}")
    column = next((name for name in names if any(name in c for c in curves)), None)
    if column is None:
        if not any(LOSS in c for c in curves):
            return None, None, None, 0
        column, way = LOSS, "lower_is_better"
    have = [c[column] for c in curves if column in c]
    last = mean([c.last for c in have])
    if way not in ARROWS:
        return column, None, last, len(have)
    best = mean([c.high if way == "higher_is_better" else c.low for c in have])
    return column, best, last, len(have)


# -- time and links -----------------------------------------------------------------------------------------
def capsule_window(cells: Sequence[CellResults]) -> tuple[datetime, datetime] | None:
    """From the first cell's run.json `created_at` to the last one's `closed_at`, when every cell with a run
    record has both stamps (a cell still open, or a stamp that does not parse, leaves the window to the
    launch records)."""
    created, closed = [], []
    for cell in cells:
        record = cell.capsule.run_record
        if record is None:
            continue
        start, end = _stamp(record.get("created_at")), _stamp(record.get("closed_at"))
        if start is None or end is None:
            return None
        created.append(start)
        closed.append(end)
    if not created or max(closed) < min(created):
        return None
    return min(created), max(closed)


def tracker_urls(cells: Sequence[CellResults]) -> tuple[str, ...]:
    """Each cell's run.json `provenance.tracker.url`, once each, in cell order; http and https links only."""
    urls = (cell.capsule.prov("tracker", "url") for cell in cells)
    return tuple(dict.fromkeys(url for url in urls if isinstance(url, str)
                               and url.startswith(("https://", "http://")) and len(url) < 2048))


def _stamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_iso(value)
    except ValueError:
        return None
