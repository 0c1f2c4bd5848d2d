"""PyTorch Lightning CSVLogger `metrics.csv` as a capsule (docs/verify.md §5).

CSVLogger writes `<save_dir>/<name>/version_<n>/metrics.csv`: a header of every key logged so far (sorted),
one row per `log_metrics` call with empty cells for keys that call did not log, so train and validation
values of one step sit on separate rows; `step` is always a column, `epoch` is logged beside the metrics.
Rows are merged by step. `hparams.yaml` in the same folder is the config. The highest version is the run
(an earlier version is an earlier attempt).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from pathlib import Path

from remote_gpu_trainer.audits.catalogue.model import Capsule
from remote_gpu_trainer.audits.catalogue.readers.common import Curves, Reading, classify, latest, tracker_tests

SOURCE = "lightning"
VERSION = re.compile(r"^version_(\d+)$")


def read(root: Path, run_id: str, cell: str, paths: list[Path]) -> Capsule:
    reading = Reading(root, f"runs/{run_id}/{cell}")
    path = latest(paths, _version)
    curves = Curves()
    if path is None:
        return reading.capsule(run_id, cell, SOURCE, curves, None)
    if _read_rows(reading, path, curves):
        config = _hparams(reading, path.parent / "hparams.yaml")
        tests = tracker_tests(curves, reading.rel(path), reading.sha(path), SOURCE)
        return reading.capsule(run_id, cell, SOURCE, curves, path, config=config, tests=tests)
    return reading.capsule(run_id, cell, SOURCE, curves, None)


def _version(path: Path) -> int:
    """`version_3` → 3; a metrics.csv outside a version folder ranks below every versioned one."""
    match = VERSION.match(path.parent.name)
    return int(match[1]) if match else -1


def _read_rows(reading: Reading, path: Path, curves: Curves) -> bool:
    """Fold every row into `curves`; False (with a problem) when the file is not a CSVLogger table."""
    data = reading.read_bytes(path)
    if data is None:
        return False
    try:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    except (csv.Error, UnicodeDecodeError) as exc:
        reading.problem(path, f"unreadable CSV: {exc}")
        return False
    if not rows:
        reading.problem(path, "empty file: no header row")
        return False
    header = [cell.strip() for cell in rows[0]]
    if not any(classify(name) == ("train", "step") for name in header):
        reading.problem(path, "missing column: step")
        return False
    bad = 0
    for row in rows[1:]:
        record, row_bad = _record(header, row)
        bad += row_bad
        curves.add_record(record)
    if bad:
        reading.problem(path, f"{bad} cell{'s' if bad > 1 else ''} not a number (left out)")
    return True


def _record(header: list[str], row: list[str]) -> tuple[dict[str, float], int]:
    """A row's non-empty cells as numbers (`nan` stays NaN: a diverged loss is evidence), and how many
    cells were text."""
    record: dict[str, float] = {}
    bad = 0
    for name, cell in zip(header, row, strict=False):
        text = cell.strip()
        if not text:
            continue
        try:
            record[name] = float(text)
        except ValueError:
            bad += 1
    return record, bad


def _hparams(reading: Reading, path: Path) -> Mapping[str, object] | None:
    """hparams.yaml, when it is there and is a mapping."""
    if not path.is_file() or path.is_symlink():
        return None
    data = reading.read_yaml(path)
    if data is not None and not isinstance(data, Mapping):
        reading.problem(path, "is not a mapping of keys to values")
        return None
    return dict(data) if isinstance(data, Mapping) and data else None
