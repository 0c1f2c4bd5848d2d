"""What every DELIVER builder shares (docs/deliver.md §3): a figure and a table are built the same way, from
files under `runs/` that a machine we do not trust wrote, into one folder holding one JSON contract.

Public API (the figure and the table builder both use these; keep it small and stable):

- `read_input(root, rel, where) -> InputFile`: a project-relative file read ONCE through regular files only
  (no `..`, no absolute path, no symlink at any step, nothing outside the root); its sha256 is of those same
  bytes, so what is hashed is what is used. `InputFile.json()` / `.frame()` parse those bytes.
- `input_path(spec, where) -> str`: where an input `{capsule: "<run>/<cell>", test_id, metric[, file]}` lives:
  `runs/<run>/<cell>/test/<test_id>/metrics.json` (or `results.parquet|csv` by `file`), and
  `runs/<run>/<cell>/train.csv` for `{capsule, file: "train.csv"}` or a spec without a test id.
- `resolve_input(root, spec, where) -> InputFile`: `input_path` then `read_input`.
- `resolve_test(root, spec, where) -> InputFile`: a test's metrics.json, or, for a cell with no metrics.json and
  no run record, the test a tracker recorded (`TrackerInput`: the tracker file's path and sha256, the
  metrics.json-shaped body VERIFY's readers made of those bytes; docs/frameworks.md).
- `input_entry(spec, found, split) -> dict`: the generated form of an `inputs[]` entry (path, sha256, split).
- `code_state(root) -> dict` and `provenance(root, capsules, *, command, builder, env, code) -> dict`: the
  provenance block (git commit, dirty, dirty_diff_sha256, checkpoint_sha256 per capsule, data_sha256,
  command, builder, env, created_at).
- `environment(packages, *, backend=None, fonts=()) -> dict`: the env part of it.
- `mean_std(values) -> (mean, std | None)`: one point's value over its seeds, whatever doubles runs/ holds.
- `source_csv(columns, rows, key, where) -> bytes`: UTF-8, LF, trailing newline, floats via repr, sorted by
  the declared key columns.
- `output_folder(root, kind, ident) -> Path`, `output_ids(root, kind) -> list[str]`: `figures/<id>/` or
  `tables/<id>/` as a plain folder, and the ids a project has; `linked_outputs(root, kind) -> list[str]` and
  `linked_refusal(kind, rel) -> str`: the linked folders a build refuses, and the line that says so.
- `staging(folder) -> Stage` (a context manager): two temp build folders; `Stage.deterministic(names)`,
  `Stage.differing(names)`, `Stage.outputs(names, px)`, `Stage.install(names, document_name, document)`.
- `load_document(path, schema, id_key, ident) -> dict`, `merge_document(user, generated) -> dict`.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import hashlib
import io
import json
import math
import os
import platform
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue.load import SAFE_ID
from remote_gpu_trainer.audits.catalogue.model import plain
from remote_gpu_trainer.audits.catalogue.numbers import mean, sample_std
from remote_gpu_trainer.clock import iso_z, utc_now
from remote_gpu_trainer.errors import ConfigError, VerbFailed
from remote_gpu_trainer.fsutil import NotRegularFile, atomic_write, fsync_dir, lstat_or_none, open_regular, read_regular
from remote_gpu_trainer.strict_json import loads_strict
from remote_gpu_trainer.text import size

if TYPE_CHECKING:
    import pandas as pd

#: an evidence file is read whole into memory, and a box chooses its size: above these it is refused unread
#: (parsing JSON takes ~15 times its size in memory; a metrics.json is a summary of a few kB)
MAX_INPUT_BYTES = 1 << 30
MAX_JSON_BYTES = 64 << 20
#: PULL_MANIFEST.json lists every file of a run (about 200 bytes each): the pull's own limit for it applies
#: (services/evidence/manifest.py MANIFEST_MAX_BYTES), so provenance reads every seal a pull accepted
MAX_MANIFEST_BYTES = 256 << 20
TEST_FILES = ("metrics.json", "results.parquet", "results.csv")
CAPSULE_FILES = ("train.csv",)
#: the keys of an inputs[] entry the user writes; path, sha256 and split are generated
INPUT_KEYS = ("capsule", "test_id", "metric", "file")
#: keys a build (re)writes; every other key of figure.json / table.json is the user's and kept as written
GENERATED_KEYS = ("inputs", "source", "provenance", "outputs", "qa", "disclosure")


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


# -- reading evidence ---------------------------------------------------------------------------------------
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
    close (figure_reduce streams a train.csv of any length through one)."""
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


# -- provenance ---------------------------------------------------------------------------------------------
def code_state(root: Path) -> dict[str, Any]:
    """git commit, dirty and dirty_diff_sha256 of the project's tree (docs/formats.md defines the hash; the
    one implementation is the capsule helper's). Computed once per `rgt build`, shared by every output."""
    from remote_gpu_trainer.remote.rgt_capsule import code_provenance

    code = code_provenance(str(root))
    return {"git_commit": code["commit"], "git_dirty": code["dirty"], "dirty_diff_sha256": code["dirty_diff_sha256"]}


def provenance(root: Path, capsules: Iterable[str], *, command: str, builder: Mapping[str, str] | None,
               env: Mapping[str, Any], code: Mapping[str, Any] | None = None,
               now: datetime | None = None) -> dict[str, Any]:
    """The provenance block of a figure or table (docs/deliver.md §3). `checkpoint_sha256` of a capsule is its
    `best.pth` hash in the run's PULL_MANIFEST.json (the seal), else run.json's `checkpoints.best.sha256`;
    `data_sha256` is run.json's, one value when every capsule agrees, else the sorted distinct values."""
    keys = sorted(set(capsules))
    manifests: dict[str, Mapping[str, Any]] = {}
    checkpoints: dict[str, str | None] = {}
    data: set[str] = set()
    for key in keys:
        run_id, cell = key.split("/", 1)
        if run_id not in manifests:
            manifests[run_id] = _manifest_shas(_json_or_none(root, f"runs/{run_id}/PULL_MANIFEST.json",
                                                             MAX_MANIFEST_BYTES))
        record = _json_or_none(root, f"runs/{key}/run.json") or {}
        checkpoints[key] = manifests[run_id].get(f"{cell}/best.pth") or _dig(record, "checkpoints", "best", "sha256")
        recorded = _dig(record, "provenance", "data", "data_sha256")
        if isinstance(recorded, str):
            data.add(recorded)
    data_sha: str | list[str] | None = sorted(data) if len(data) > 1 else next(iter(data), None)
    return {**(code if code is not None else code_state(root)), "checkpoint_sha256": checkpoints,
            "data_sha256": data_sha, "command": command, "builder": dict(builder) if builder else None,
            "env": dict(env), "created_at": iso_z(now or utc_now())}


def stable_provenance(document_inputs: Sequence[Mapping[str, Any]], source_sha256: str,
                      prov: Mapping[str, Any]) -> dict[str, Any]:
    """The part of the provenance that is the same on every rebuild of the same inputs (no created_at, no
    dirty-tree hash, which the build's own outputs change): what goes into the PNG and SVG metadata."""
    builder = prov.get("builder")
    return {"inputs": {str(i.get("path")): i.get("sha256") for i in document_inputs},
            "source_sha256": source_sha256, "git_commit": prov.get("git_commit"),
            "builder_sha256": builder.get("sha256") if isinstance(builder, Mapping) else None}


def environment(packages: Sequence[str], *, backend: str | None = None,
                fonts: Sequence[str] = ()) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    env: dict[str, Any] = {"python": platform.python_version()}
    for name in packages:
        try:
            env[name] = version(name)
        except PackageNotFoundError:
            env[name] = None
    if backend is not None:
        env["backend"] = backend
    if fonts:
        env["fonts"] = sorted(set(fonts))
    return env


def _json_or_none(root: Path, rel: str, limit: int = MAX_JSON_BYTES) -> Any:
    """A JSON file that provenance reads when present; absent, linked or malformed reads as None."""
    try:
        return read_input(root, rel, rel).json(limit)
    except ConfigError:
        return None


def _manifest_shas(manifest: Any) -> dict[str, str]:
    files = manifest.get("files") if isinstance(manifest, dict) else None
    return {str(f["path"]): str(f["sha256"]) for f in files or [] if isinstance(files, list)
            and isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("sha256"), str)}


def _dig(node: Any, *keys: str) -> Any:
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


# -- source.csv ---------------------------------------------------------------------------------------------
def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """VERIFY's mean and sample std (audits/catalogue/numbers.py) of one point's per-seed values, for any doubles a
    box wrote: finite values whose sum overflows are averaged pre-divided, a spread beyond a double is inf, and a
    non-finite value (a diverged loss in train.csv) makes the mean inf or nan and the spread nan, so the gates
    (G6, Q2) report it instead of the build dying inside `statistics`."""
    listed = [float(v) for v in values]
    if not all(math.isfinite(v) for v in listed):
        return sum(listed) / len(listed), (math.nan if len(listed) > 1 else None)
    try:
        centre = mean(listed)
    except OverflowError:
        centre = math.fsum(v / len(listed) for v in listed)
    try:
        spread = sample_std(listed)
    except OverflowError:
        spread = math.inf
    return centre, spread


def source_csv(columns: Sequence[str], rows: Iterable[Mapping[str, Any]], key: Sequence[str], where: str) -> bytes:
    """The bytes of source.csv: the header, then one line per row sorted by the `key` columns; every row must
    have exactly `columns`. Floats are written with repr (full precision), None as an empty cell."""
    listed = [dict(row) for row in rows]
    for index, row in enumerate(listed):
        if set(row) != set(columns):
            missing, extra = sorted(set(columns) - set(row)), sorted(set(row) - set(columns))
            raise ConfigError(f"{where}: row {index} has columns that are not source.csv's ({', '.join(columns)})"
                              f"{': missing ' + ', '.join(missing) if missing else ''}"
                              f"{': extra ' + ', '.join(extra) if extra else ''}")
    listed.sort(key=lambda row: tuple(_order(row[k]) for k in key))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in listed:
        writer.writerow([cell_text(row[c]) for c in columns])
    return buffer.getvalue().encode("utf-8")


def cell_text(value: Any) -> str:
    value = plain(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _order(value: Any) -> tuple[int, Any]:
    """A total order over cells of mixed type: numbers, then text, then NaN, then empty."""
    value = plain(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (2, 0) if math.isnan(value) else (0, value)
    return (3, "") if value is None else (1, cell_text(value))


def read_source_csv(data: bytes) -> list[dict[str, str]]:
    """source.csv read back as text cells (the gates compare what was written, not what was meant)."""
    return list(csv.DictReader(io.StringIO(data.decode("utf-8"))))


# -- building into a folder ---------------------------------------------------------------------------------
def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Stage:
    """Two temp folders inside the figure/table folder (same file system, so the finished set moves in by
    rename). A build renders into `first`, renders again into `second` for the determinism check, and only
    then `install`s; a build that raised before that leaves the folder as it was."""

    folder: Path
    first: Path
    second: Path

    def deterministic(self, names: Sequence[str]) -> bool:
        return not self.differing(names)

    def differing(self, names: Sequence[str]) -> list[str]:
        """The outputs whose two builds hashed differently (none: the build is deterministic)."""
        return [n for n in names if sha256_of(self.first / n) != sha256_of(self.second / n)]

    def outputs(self, names: Sequence[str], px: Mapping[str, Sequence[int]] | None = None) -> list[dict[str, Any]]:
        """`[{path, sha256, px?}]` of the outputs (source.csv is described by `source`, not listed here)."""
        listed = []
        for name in names:
            entry: dict[str, Any] = {"path": name, "sha256": sha256_of(self.first / name)}
            if px and name in px:
                entry["px"] = list(px[name])
            listed.append(entry)
        return listed

    def install(self, names: Sequence[str], document_name: str, document: Mapping[str, Any]) -> None:
        """Move the finished files in (each by rename), drop `final.*` files no longer produced, and move the
        JSON document in last, so it never describes outputs that are not there yet. What can fail does so
        before the first rename (a folder where an output goes; a full disk while the document is written, into
        the staging folder), so a build that cannot finish leaves every previous output as it was."""
        for name in (*names, document_name):
            info = lstat_or_none(self.folder / name)
            if info is not None and stat.S_ISDIR(info.st_mode):
                raise ConfigError(f"{self.folder.parent.name}/{self.folder.name}/{name} is a folder where the "
                                  "build writes a file: move it out of the way and build again")
        write_document(self.first / document_name, document)
        for name in names:
            os.replace(self.first / name, self.folder / name)
        for stale in self.folder.glob("final.*"):
            if stale.name not in names and stale.is_file() and not stale.is_symlink():
                stale.unlink()
        os.replace(self.first / document_name, self.folder / document_name)
        fsync_dir(self.folder)


@contextlib.contextmanager
def staging(folder: Path) -> Iterator[Stage]:
    """The two temp folders of a build, removed whatever happens. A folder the build cannot write (read-only,
    a full disk) fails it in one line naming the folder (exit 1), not as an internal error of rgt."""
    try:
        with _temp_folder(folder) as first, _temp_folder(folder) as second:
            yield Stage(folder, first, second)
    except OSError as exc:
        raise VerbFailed(f"{folder.parent.name}/{folder.name}/: cannot write the build "
                         f"({exc.strerror or type(exc).__name__})") from None


@contextlib.contextmanager
def _temp_folder(folder: Path) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=".rgt-build-", dir=folder))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def output_folder(root: Path, kind: str, ident: str) -> Path:
    """`figures/<id>/` or `tables/<id>/` as a plain folder inside the project (no link on the way), else
    ConfigError naming what was expected."""
    if not SAFE_ID.match(ident):
        raise ConfigError(f"rgt build {kind}: {ident!r} is not a {kind} id (letters, digits, . _ -)")
    folder = root / f"{kind}s" / ident
    for path in (folder.parent, folder):
        try:
            plain_folder = stat.S_ISDIR(os.lstat(path).st_mode)
        except OSError:
            plain_folder = False
        if not plain_folder:
            raise ConfigError(f"rgt build {kind}: no {kind} {ident!r} (expected the folder {kind}s/{ident}/ with "
                              f"a {kind}.json, as a plain folder inside the project)")
    return folder


def output_ids(root: Path, kind: str) -> list[str]:
    """The figures (or tables) of a project: every plain folder under figures/ (tables/) holding a
    figure.json (table.json), sorted."""
    top = root / f"{kind}s"
    try:
        entries = list(os.scandir(top)) if stat.S_ISDIR(os.lstat(top).st_mode) else []
    except OSError:
        entries = []
    return sorted(e.name for e in entries if SAFE_ID.match(e.name) and e.is_dir(follow_symlinks=False)
                  and (top / e.name / f"{kind}.json").is_file())


def linked_outputs(root: Path, kind: str) -> list[str]:
    """Where a figure (table) folder would be but a symlink to a folder is: `figures/` itself, else each
    `figures/<id>`, project-relative and sorted. output_ids never lists them, so nothing reads through them;
    `rgt build` and the Deliver panel name each one (linked_refusal) instead of passing it over in silence."""
    top = root / f"{kind}s"
    info = lstat_or_none(top)
    if info is not None and stat.S_ISLNK(info.st_mode):
        return [f"{kind}s/"] if top.is_dir() else []
    try:
        entries = list(os.scandir(top)) if info is not None and stat.S_ISDIR(info.st_mode) else []
    except OSError:
        entries = []
    return sorted(f"{kind}s/{e.name}" for e in entries if e.is_symlink() and e.is_dir())


def linked_refusal(kind: str, rel: str) -> str:
    """The one line that refuses a linked_outputs entry."""
    return (f"{rel} is a symlink: refused, never read through (a {kind} is built only from a plain folder "
            "inside the project)")


# -- the JSON document --------------------------------------------------------------------------------------
def read_json_object(path: Path, missing: str) -> dict[str, Any]:
    """A user-written JSON object (figure.json, table.json, EVIDENCE.json) read as a regular file only (a link
    could point anywhere) and strictly (NaN, Infinity and duplicate keys are no evidence); every way it can fail
    is one line naming the file. `missing` says what to do when it is absent."""
    if lstat_or_none(path) is None:
        raise ConfigError(f"{path}: no such file: {missing}")
    try:
        raw = read_regular(path)
    except OSError as exc:
        raise ConfigError(f"{path}: unreadable: {exc.strerror or exc}") from None
    if raw is None:
        raise ConfigError(f"{path}: not a regular file (a link or a folder): refused unread")
    try:
        document = loads_strict(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: malformed JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: not a JSON object")
    return document


def load_document(path: Path, schema: str, id_key: str, ident: str) -> dict[str, Any]:
    """figure.json / table.json as the user wrote it; a wrong schema or id is refused naming the key."""
    document = read_json_object(path, f"write it (docs/formats.md), then `rgt build {id_key.split('_')[0]} {ident}`")
    if document.get("schema") != schema:
        raise ConfigError(f"{path}: schema: {document.get('schema')!r}, expected {schema!r}")
    if document.get(id_key, ident) != ident:
        raise ConfigError(f"{path}: {id_key}: {document.get(id_key)!r} is not the folder's name {ident!r}")
    return document


def merge_document(user: Mapping[str, Any], generated: Mapping[str, Any]) -> dict[str, Any]:
    """The user's document with the generated keys (GENERATED_KEYS) replaced: user keys keep their order and
    values; an inputs[] entry the user wrote keeps its own keys and gains path/sha256/split; `qa.human_viewed`
    is the user's tick (T03) and survives a rebuild."""
    merged = {k: v for k, v in user.items()}
    for key in GENERATED_KEYS:
        if key not in generated:
            continue
        value = generated[key]
        if key == "inputs" and isinstance(user.get("inputs"), list):
            value = _merged_inputs(user["inputs"], value)
        if key == "qa" and isinstance(user.get("qa"), Mapping) and isinstance(value, Mapping):
            value = {**value, "human_viewed": bool(user["qa"].get("human_viewed", False))}
        merged[key] = value
    return merged


def _merged_inputs(user: list[Any], generated: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    def identity(entry: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(entry.get(k) for k in INPUT_KEYS)

    written = {identity(e): e for e in user if isinstance(e, Mapping)}
    return [{**written.get(identity(entry), {}), **entry} for entry in generated]


def document_bytes(document: Mapping[str, Any]) -> bytes:
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write_document(path: Path, document: Mapping[str, Any]) -> None:
    atomic_write(path, document_bytes(document))
