"""What every tracker reader shares: finding its files in a cell folder, mapping its keys onto the canonical
train.csv columns, and turning the last logged eval numbers into a metrics.json-shaped test (docs/verify.md §5).

Tracker keys are mapped with the log parser's key table (assets/metrics.toml [log_keys]), so a spelling that
the log parser knows is known here too. pandas and yaml are imported inside the functions that need them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue.metric_registry import DIRECTION_WORDS, direction
from remote_gpu_trainer.audits.catalogue.model import Capsule, InputProblem, TestArtifacts
from remote_gpu_trainer.audits.catalogue.plain_yaml import YamlRefused, load_plain
from remote_gpu_trainer.audits.log.metrics import canonical_key
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    import pandas as pd

MAX_DEPTH = 4  # a tracker's files sit at most this many folders below the cell folder
MAX_ENTRIES = 20_000  # a cell folder holding a dataset is not scanned to the end
TRAIN_COLUMNS = ("step", "epoch", "loss", "lr", "grad_norm", "throughput")
# Eval bookkeeping that trackers log next to the metrics (HF `eval_runtime`, ...): not a metric, never a test.
BOOKKEEPING = frozenset({"runtime", "samples_per_second", "steps_per_second", "step", "epoch", "global_step"})
TEST_PREFIXES = ("test_", "test/")
TRAIN_PREFIXES = ("train/", "train_")
DISCLOSURE = "tracker cell ({source}): last logged eval values, no run record or per-item results; not re-derivable"
WANDB_RUN = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-(?P<id>[A-Za-z0-9]+)$")


@dataclass
class Found:
    """The tracker files of one cell folder, by format (absolute paths, none behind a symlink)."""

    trainer_state: list[Path] = field(default_factory=list)
    metrics_csv: list[Path] = field(default_factory=list)
    events: list[Path] = field(default_factory=list)
    mlruns: list[Path] = field(default_factory=list)
    wandb_files: list[Path] = field(default_factory=list)


def scan(cell_dir: Path) -> Found:
    """Every tracker file under the cell folder, depth-bounded; symlinks are never followed, so nothing
    outside the project root is read."""
    found = Found()
    budget = [MAX_ENTRIES]
    _scan_dir(cell_dir, 1, found, budget)
    for paths in (found.trainer_state, found.metrics_csv, found.events, found.mlruns, found.wandb_files):
        paths.sort()
    return found


def _scan_dir(folder: Path, depth: int, found: Found, budget: list[int]) -> None:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        budget[0] -= 1
        if budget[0] < 0:
            return
        if entry.is_symlink():
            continue
        path = Path(entry.path)
        if entry.is_dir():
            if entry.name == "mlruns":
                found.mlruns.append(path)
            elif entry.name == "files" and WANDB_RUN.match(folder.name) and folder.parent.name == "wandb":
                found.wandb_files.append(path)
            elif depth < MAX_DEPTH:
                _scan_dir(path, depth + 1, found, budget)
        elif entry.is_file():
            _classify_file(path, found)


def _classify_file(path: Path, found: Found) -> None:
    if path.name == "trainer_state.json":
        found.trainer_state.append(path)
    elif path.name == "metrics.csv":
        found.metrics_csv.append(path)
    elif path.name.startswith("events.out.tfevents."):
        found.events.append(path)


# -- keys ------------------------------------------------------------------------------------------------------
def classify(raw: str) -> tuple[str, str] | None:
    """(`train`, canonical column) | (`val`, metric) | (`test`, metric) for a tracker key, None when it is not
    one VERIFY reads. `train/learning_rate` (HF's TensorBoard and W&B tags) is `lr` by the same table."""
    key = raw.strip()
    lowered = key.lower()
    for prefix in TEST_PREFIXES:
        if lowered.startswith(prefix) and len(key) > len(prefix):
            name = key[len(prefix):]
            return None if name.lower() in BOOKKEEPING else ("test", name)
    canon = canonical_key(key)
    if canon is not None and canon not in TRAIN_COLUMNS and not canon.startswith("val/"):
        prefix = next((p for p in TRAIN_PREFIXES if lowered.startswith(p)), "")
        canon = canonical_key(key[len(prefix):]) if prefix else canon
    if canon is None:
        return None
    if canon in TRAIN_COLUMNS:
        return "train", canon
    if canon.startswith("val/"):
        name = canon[len("val/"):]
        return None if name.lower() in BOOKKEEPING else ("val", name)
    return None


def series_column(name: str) -> str | None:
    """The curve column a tracker's series name reads as (`eval/loss`, `eval_loss`, `val_loss` -> `val/loss`;
    `train/loss` -> `loss`; `global_step` -> `step`), None when the readers would not keep it as a curve."""
    kind = classify(name)
    if kind is None or kind[0] == "test":
        return None
    return kind[1] if kind[0] == "train" else f"val/{kind[1]}"


def number(value: Any) -> float | None:
    """A logged value as a float (NaN kept: a NaN loss is evidence); bools, text and containers are not."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


# -- curves and final eval numbers -----------------------------------------------------------------------------
@dataclass
class Curves:
    """What a reader logged, merged by step: curve rows in canonical columns, and per split the last finite
    value of each eval metric (the highest step wins; a value without a step is a summary, final by itself)."""

    rows: dict[int, dict[str, float]] = field(default_factory=dict)
    finals: dict[str, dict[str, tuple[int | None, float]]] = field(default_factory=dict)

    def add_point(self, raw: str, step: int | None, value: float) -> None:
        kind = classify(raw)
        if kind is None:
            return
        split, name = kind
        if split == "train" and name == "step":
            return
        if step is not None:
            column = name if split == "train" else f"{split}/{name}"
            if split != "test":
                self.rows.setdefault(step, {})[column] = value
        if split != "train" and math.isfinite(value):
            held = self.finals.setdefault(split, {}).get(name)
            if held is None or step is None or (held[0] is not None and step >= held[0]):
                self.finals[split][name] = (step, value)

    def add_record(self, record: Mapping[str, Any]) -> None:
        """One logged dict (an HF log_history entry, a Lightning CSV row): its values share its step."""
        step = record_step(record)
        for raw, value in record.items():
            if isinstance(raw, str) and (number_value := number(value)) is not None:
                self.add_point(raw, step, number_value)

    def epoch_at(self, step: int | None) -> float | None:
        value = self.rows.get(step, {}).get("epoch") if step is not None else None
        return value if value is not None and math.isfinite(value) else None


def record_step(record: Mapping[str, Any]) -> int | None:
    """The first key of a record the table calls `step`, as a non-negative whole number."""
    for raw, value in record.items():
        if isinstance(raw, str) and classify(raw) == ("train", "step"):
            step = number(value)
            if step is not None and math.isfinite(step) and step >= 0 and step.is_integer():
                return int(step)
    return None


def curve_frame(curves: Curves) -> pd.DataFrame | None:
    """The train.csv-shaped table: one row per step in step order, canonical columns first, then `val/<m>`
    sorted; a column no row fills is left out (an all-empty `epoch` would hide the step axis)."""
    if not curves.rows:
        return None
    import pandas as pd

    frame = pd.DataFrame([{"step": step, **values} for step, values in sorted(curves.rows.items())])
    frame = frame.dropna(axis=1, how="all")
    ordered = [c for c in TRAIN_COLUMNS if c in frame.columns]
    ordered += sorted(c for c in frame.columns if c not in TRAIN_COLUMNS)
    frame = frame[ordered]
    frame["step"] = frame["step"].astype("int64")
    return frame


def metric_block(name: str, value: float, step: int | None, epoch: float | None) -> dict[str, Any]:
    """A metrics.json block; the direction is the registry's (None when unknown, so V10 asks for it)."""
    short = direction(name)
    return {"value": value, "direction": DIRECTION_WORDS.get(short or ""), "unit": None, "aggregate": "custom",
            "column": None, "step": step, "epoch": epoch}


def tracker_tests(curves: Curves, rel: str, sha: str | None, source: str,
                  extra: Mapping[str, Any] | None = None) -> dict[str, TestArtifacts]:
    """One test per split the tracker logged eval numbers for (`val`, `test`), test id = split."""
    tests: dict[str, TestArtifacts] = {}
    for split, finals in sorted(curves.finals.items()):
        steps = [s for s, _ in finals.values() if s is not None]
        last = max(steps) if steps else None
        body: dict[str, Any] = {
            "source": source, "split": split, "step": last, "epoch": curves.epoch_at(last),
            "metrics": {name: metric_block(name, value, step, curves.epoch_at(step))
                        for name, (step, value) in sorted(finals.items())},
            "metric_applicability": "applicable", "disclosure": DISCLOSURE.format(source=source),
        }
        body.update(extra or {})
        tests[split] = TestArtifacts(test_id=split, metrics_path=rel, metrics=body, metrics_sha256=sha)
    return tests


# -- files -----------------------------------------------------------------------------------------------------
@dataclass
class Reading:
    """The files one reader read (capsule-relative path → sha256) and the problems it met (project-relative)."""

    root: Path
    cell_rel: str
    files: dict[str, str] = field(default_factory=dict)
    problems: list[InputProblem] = field(default_factory=list)

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def problem(self, path: Path, message: str) -> None:
        self.problems.append(InputProblem(self.rel(path), message))

    def read_bytes(self, path: Path) -> bytes | None:
        """A regular file's bytes, recorded with its hash; None (and a problem) when it cannot be read."""
        if path.is_symlink() or not path.is_file():
            return None
        try:
            data = path.read_bytes()
        except OSError as exc:
            self.problem(path, f"unreadable: {exc.strerror or exc}")
            return None
        self.files[path.relative_to(self.root / self.cell_rel).as_posix()] = hashlib.sha256(data).hexdigest()
        return data

    def sha(self, path: Path) -> str | None:
        return self.files.get(path.relative_to(self.root / self.cell_rel).as_posix())

    def read_json(self, path: Path) -> Any:
        """Python's json, on purpose: trackers write NaN for a diverged loss and that must reach the checks."""
        data = self.read_bytes(path)
        if data is None:
            return None
        try:
            return json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            self.problem(path, f"malformed JSON: {exc}")
            return None

    def read_yaml(self, path: Path) -> Any:
        data = self.read_bytes(path)
        if data is None:
            return None
        try:
            return load_plain(data)
        except YamlRefused as exc:
            self.problem(path, str(exc))
            return None

    def capsule(self, run_id: str, cell: str, source: str, curves: Curves, train_source: Path | None,
                **fields: Any) -> Capsule:
        """The Capsule of what was read; `fields` are the Capsule's other fields (config, tests, run_record)."""
        train = curve_frame(curves)
        return Capsule(run_id=run_id, cell=cell, path=self.cell_rel, source=source, train=train,
                       train_path=self.rel(train_source) if train is not None and train_source else None,
                       files=dict(self.files), problems=tuple(self.problems), **fields)


def walk_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """(posix path relative to `folder`, path) of every regular file below it, symlinks skipped; MLflow
    stores a key with `/` as nested folders."""
    for dirpath, dirnames, filenames in os.walk(folder):
        base = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not (base / d).is_symlink())
        for name in sorted(filenames):
            path = base / name
            if not path.is_symlink() and path.is_file():
                yield escape_control(path.relative_to(folder).as_posix()), path  # a name that is not UTF-8, escaped


def typed(text: str) -> Any:
    """A value trackers stored as text (MLflow params): int, float, bool or None where it reads as one, so a
    config diff sees `64` and `64.0` as equal and `"True"` as True."""
    stripped = text.strip()
    if stripped in ("True", "true"):
        return True
    if stripped in ("False", "false"):
        return False
    if stripped in ("None", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(stripped)
        except ValueError:
            continue
    return text


def latest(paths: Iterable[Path], key: Any) -> Path | None:
    """The path with the greatest key (ties: the shortest path), None for none."""
    ranked = sorted(paths, key=lambda p: (key(p), -len(p.parts)))
    return ranked[-1] if ranked else None
