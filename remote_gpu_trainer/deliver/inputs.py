"""Reading the evidence a DELIVER output is built from (docs/deliver.md §3): files under `runs/` that a machine we
do not trust wrote, each read once through regular files only, so what is hashed is what is used.

- `read_input(root, rel, where) -> InputFile`: a project-relative file read ONCE through regular files only
  (no `..`, no absolute path, no symlink at any step, nothing outside the root); its sha256 is of those same
  bytes. `InputFile.json()` / `.frame()` parse those bytes.
- `open_input(root, rel, where) -> int`: the same walk, a descriptor for a reader that streams (figures/reduce.py).
- `input_path(spec, where) -> str`: where an input `{capsule: "<run>/<cell>", test_id, metric[, file]}` lives:
  `runs/<run>/<cell>/test/<test_id>/metrics.json` (or `results.parquet|csv` by `file`), and
  `runs/<run>/<cell>/train.csv` for `{capsule, file: "train.csv"}` or a spec without a test id.
- `resolve_input(root, spec, where) -> InputFile`: `input_path` then `read_input`.
- `resolve_test(root, spec, where) -> InputFile`: a test's metrics.json, or, for a cell with no metrics.json and
  no run record, the test a tracker recorded (`TrackerInput`: the tracker file's path and sha256, the
  metrics.json-shaped body VERIFY's readers made of those bytes; docs/frameworks.md).
- `input_entry(spec, found, split) -> dict`: the generated form of an `inputs[]` entry (path, sha256, split).
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue.load import SAFE_ID
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.fsutil import NotRegularFile, lstat_or_none, open_regular
from remote_gpu_trainer.strict_json import loads_strict
from remote_gpu_trainer.text import size

if TYPE_CHECKING:
    import pandas as pd

#: an evidence file is read whole into memory, and a box chooses its size: above these it is refused unread
#: (parsing JSON takes ~15 times its size in memory; a metrics.json is a summary of a few kB)
MAX_INPUT_BYTES = 1 << 30
MAX_JSON_BYTES = 64 << 20
TEST_FILES = ("metrics.json", "results.parquet", "results.csv")
CAPSULE_FILES = ("train.csv",)
#: the keys of an inputs[] entry the user writes; path, sha256 and split are generated
INPUT_KEYS = ("capsule", "test_id", "metric", "file")


@dataclass(frozen=True)
class InputFile:
    """One evidence file as read: project-relative path, the bytes, and the sha256 of exactly those bytes."""

    path: str
    data: bytes
    sha256: str

    def json(self, limit: int = MAX_JSON_BYTES) -> Any:
        if len(self.data) > limit:
            raise ConfigError(f"{self.path}: {size(len(self.data))} of JSON, more than the {size(limit)} rgt "
                              "parses (per-item rows belong in results.parquet or results.csv)")
        try:
            return loads_strict(self.data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{self.path}: malformed JSON ({exc})") from None

    def frame(self) -> pd.DataFrame:
        """The file as a table (CSV, or parquet by its name), parsed from the bytes that were hashed."""
        import pandas as pd

        try:
            if self.path.endswith(".parquet"):
                return pd.read_parquet(io.BytesIO(self.data))
            return pd.read_csv(io.BytesIO(self.data))
        except Exception as exc:  # pandas raises many types for one cause: not the table it claims to be
            raise ConfigError(f"{self.path}: unreadable table ({type(exc).__name__})") from None



def read_input(root: Path, rel: str, where: str) -> InputFile:
    """Open `rel` as open_input does; read it once; hash those bytes."""
    fd = open_input(root, rel, where)
    try:
        info = os.fstat(fd)
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(MAX_INPUT_BYTES + 1) if info.st_size <= MAX_INPUT_BYTES else b""
        if info.st_size > MAX_INPUT_BYTES or len(data) > MAX_INPUT_BYTES:
            raise ConfigError(f"{where}: {rel} is {size(max(info.st_size, len(data)))}, more than the "
                              f"{size(MAX_INPUT_BYTES)} an evidence file may have to be read whole")
    finally:
        os.close(fd)
    return InputFile(rel, data, hashlib.sha256(data).hexdigest())


def open_input(root: Path, rel: str, where: str) -> int:
    """Open `rel` step by step from the root with O_NOFOLLOW, so no symlink anywhere on the path (swapped in
    before or during the walk) can lead out of the project: a descriptor of the regular file, the caller's to
    close (figures/reduce.py streams a train.csv of any length through one)."""
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ConfigError(f"{where}: {rel!r} is not a plain path inside the project (no `..`, not absolute)")
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for part in parts[:-1]:
            fds.append(_open_step(part, fds[-1], rel, where))
        return _open_step(parts[-1], fds[-1], rel, where, last=True)
    finally:
        for fd in fds:
            os.close(fd)


def _open_step(name: str, parent: int, rel: str, where: str, *, last: bool = False) -> int:
    """One step of the walk: a folder, or (`last`) the regular file itself, opened without ever waiting on a
    FIFO (fsutil.open_regular)."""
    try:
        if last:
            return open_regular(name, dir_fd=parent, follow_symlinks=False)
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=parent)
    except NotRegularFile:
        raise ConfigError(f"{where}: {rel} is not a regular file") from None
    except FileNotFoundError:
        raise ConfigError(f"{where}: {rel} is missing") from None
    except OSError as exc:  # ELOOP (a file) or ENOTDIR (a folder): a symlink is refused whatever it points at
        if _is_link(name, parent):
            raise ConfigError(f"{where}: {rel} goes through a symlink (refused: evidence is read only "
                              "through regular files inside the project)") from None
        if exc.errno == errno.ENOTDIR:
            raise ConfigError(f"{where}: {rel} is not a regular file inside the project") from None
        raise ConfigError(f"{where}: {rel} cannot be read ({exc.strerror})") from None


def _is_link(name: str, parent: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def input_path(spec: Mapping[str, Any], where: str) -> str:
    """The project-relative path an input names (see the module docstring)."""
    capsule = spec.get("capsule")
    if not isinstance(capsule, str) or capsule.count("/") != 1 or not all(
            SAFE_ID.match(p) for p in capsule.split("/")):
        raise ConfigError(f"{where}.capsule: {capsule!r} is not a capsule `<run-id>/<cell>`")
    test_id, name = spec.get("test_id"), spec.get("file")
    if test_id is None:
        if name not in (None, *CAPSULE_FILES):
            raise ConfigError(f"{where}.file: {name!r} without a test_id is not one of {', '.join(CAPSULE_FILES)}")
        return f"runs/{capsule}/train.csv"
    if not isinstance(test_id, str) or not SAFE_ID.match(test_id):
        raise ConfigError(f"{where}.test_id: {test_id!r} is not a test id")
    if name in CAPSULE_FILES:
        return f"runs/{capsule}/{name}"
    if name not in (None, *TEST_FILES):
        raise ConfigError(f"{where}.file: {name!r} is not one of {', '.join(TEST_FILES + CAPSULE_FILES)}")
    return f"runs/{capsule}/test/{test_id}/{name or 'metrics.json'}"


def resolve_input(root: Path, spec: Mapping[str, Any], where: str) -> InputFile:
    return read_input(root, input_path(spec, where), where)


@dataclass(frozen=True)
class TrackerInput(InputFile):
    """A test a tracker recorded (trainer_state.json, Lightning metrics.csv, TensorBoard events, MLflow, W&B),
    read through VERIFY's readers (audits/catalogue/readers): `path` and `sha256` are the tracker file's, exactly
    the bytes the reader parsed; `body` is the metrics.json-shaped test it made of them (no `n`: trackers do not
    record the test's size)."""

    body: Mapping[str, Any] = field(default_factory=dict)

    def json(self, limit: int = MAX_JSON_BYTES) -> Any:
        return dict(self.body)


def resolve_test(root: Path, spec: Mapping[str, Any], where: str) -> InputFile:
    """The test's metrics.json; for a cell without one (and without run.json), the tracker's test of that id."""
    rel = input_path(spec, where)
    capsule = str(spec["capsule"])
    if (spec.get("file") in (None, "metrics.json") and lstat_or_none(root / rel) is None
            and lstat_or_none(root / "runs" / capsule / "run.json") is None):
        tracked = tracker_test(root, capsule, str(spec.get("test_id")))
        if tracked is not None:
            return tracked
    return read_input(root, rel, where)


def tracker_test(root: Path, capsule: str, test_id: str) -> TrackerInput | None:
    from remote_gpu_trainer.audits.catalogue.readers import read_tracker_cell

    run_id, cell = capsule.split("/", 1)
    found = read_tracker_cell(root, run_id, cell)
    test = found.tests.get(test_id) if found is not None else None
    if found is None or test is None or test.metrics is None or test.metrics_sha256 is None:
        return None
    return TrackerInput(path=test.metrics_path, data=b"", sha256=test.metrics_sha256, body=dict(test.metrics))


def input_entry(spec: Mapping[str, Any], found: InputFile, split: str | None) -> dict[str, Any]:
    """An inputs[] entry as written into figure.json/table.json: the user's keys, then the generated ones."""
    entry = {k: spec[k] for k in INPUT_KEYS if k in spec}
    entry.update({"split": split, "path": found.path, "sha256": found.sha256})
    return entry

