"""Read a project's evidence into the model the checks share (docs/verify.md §5).

Reads only local paths under the project root: `runs/<run>/<cell>/` capsules (run.json, config.yaml, train.csv,
test/<t>/metrics.json and results.parquet|csv; best_metrics.json of a legacy cell), `splits/*.json`,
`EVIDENCE.json` and each run's `PULL_MANIFEST.json`. A file that is there but does not parse is an
`InputProblem` naming it, never an exception: the checks that needed it skip and say why.

pandas, pyarrow and yaml are imported here, when an audit runs, never when the UI starts
(docs/architecture.md §5).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue.model import (
    Capsule,
    Comparison,
    InputProblem,
    MetricRule,
    Number,
    ProjectEvidence,
    SplitManifest,
    SplitMember,
    TestArtifacts,
)
from remote_gpu_trainer.audits.catalogue.plain_yaml import YamlRefused, load_plain
from remote_gpu_trainer.strict_json import loads_strict

if TYPE_CHECKING:
    import pandas as pd

SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SKIP_DIRS = {"test", "vis"}
_READ_CHUNK = 1 << 20
READ_THREADS = 4


@dataclass
class _Problems:
    """Problems found while reading, each naming its file (project-relative)."""

    items: list[InputProblem] = field(default_factory=list)

    def add(self, path: str, message: str) -> None:
        self.items.append(InputProblem(path, message))


@dataclass(frozen=True)
class Declarations:
    """What rgt.toml declares for VERIFY: metric directions, comparisons, and per-check overrides."""

    metrics: Mapping[str, MetricRule] = field(default_factory=dict)
    comparisons: tuple[Comparison, ...] = ()
    rosters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # run -> expected cells


def load_project(root: Path, declarations: Declarations | None = None) -> ProjectEvidence:
    """Everything under `root` the catalogue reads, parsed once."""
    decl = declarations or Declarations()
    problems = _Problems()
    capsules = tuple(read_capsules(root, problems))
    splits = tuple(read_splits(root, problems))
    evidence, evidence_sha = _read_json(root, "EVIDENCE.json", problems)
    manifests = {}
    for run_dir in _run_dirs(root):
        manifest, _ = _read_json(root, f"runs/{run_dir.name}/PULL_MANIFEST.json", problems)
        if isinstance(manifest, dict):
            manifests[run_dir.name] = manifest
    capsules = with_outcomes(capsules, manifests)
    project = ProjectEvidence(
        root=root, capsules=capsules, splits=splits,
        evidence=evidence if isinstance(evidence, dict) else None,
        evidence_path="EVIDENCE.json" if evidence is not None else None, evidence_sha256=evidence_sha,
        comparisons=decl.comparisons, metrics=decl.metrics, manifests=manifests,
        problems=tuple(problems.items) + tuple(p for c in capsules for p in c.problems),
        declared_runs=tuple(sorted(decl.rosters)),
    )
    return replace(project, numbers=tuple(numbers_of(project)))


def cell_outcomes(manifest: Mapping[str, Any] | None) -> dict[str, str]:
    """Cell -> "failed (exit N)" | "never started", from a manifest's `cells` (docs/gate.md §2); an entry
    that is not one of those two shapes is not an outcome (the manifest's own parser refuses it)."""
    cells = (manifest or {}).get("cells")
    outcomes: dict[str, str] = {}
    for cell, entry in (cells.items() if isinstance(cells, Mapping) else ()):
        state = entry.get("state") if isinstance(entry, Mapping) else None
        code = entry.get("exit_code") if isinstance(entry, Mapping) else None
        if state == "failed" and isinstance(code, int) and not isinstance(code, bool):
            outcomes[str(cell)] = f"failed (exit {code})"
        elif state == "never_started":
            outcomes[str(cell)] = "never started"
    return outcomes


def with_outcomes(capsules: Iterable[Capsule], manifests: Mapping[str, Any]) -> tuple[Capsule, ...]:
    """The capsules, each cell the run's manifest records as failed or never started marked so."""
    outcomes = {run_id: cell_outcomes(m if isinstance(m, Mapping) else None) for run_id, m in manifests.items()}
    return tuple(replace(c, outcome=outcome) if (outcome := outcomes.get(c.run_id, {}).get(c.cell)) else c
                 for c in capsules)


def _run_dirs(root: Path) -> list[Path]:
    runs = root / "runs"
    if not runs.is_dir():
        return []
    return sorted(p for p in runs.iterdir() if p.is_dir() and not p.is_symlink() and SAFE_ID.match(p.name))


def read_capsules(root: Path, problems: _Problems) -> Iterable[Capsule]:
    """Every capsule under runs/, in run and cell order. The cells are read by a few threads: parsing a table
    (pyarrow, pandas' C parser) releases the GIL, so a second core cuts the wait for 50 capsules by a fifth or
    more; each cell is read on its own and the order is kept, so the result is the same as one by one."""
    from concurrent.futures import ThreadPoolExecutor

    cells = [(run_dir.name, cell) for run_dir in _run_dirs(root) for cell in _folders(run_dir, links=False)
             if SAFE_ID.match(cell) and cell not in SKIP_DIRS]
    workers = min(READ_THREADS, os.cpu_count() or 1, len(cells))
    if workers < 2:
        read = [read_capsule(root, run_id, cell) for run_id, cell in cells]
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="rgt-audit-read") as pool:
            read = list(pool.map(lambda run_cell: read_capsule(root, *run_cell), cells))
    yield from (capsule for capsule in read if capsule is not None)


def _folders(folder: Path | str, *, links: bool) -> list[str]:
    """The names of the folders in `folder`, sorted (`links`: also links to folders). One scandir, whose
    entries know their type: a Path and two stat calls per entry were a good part of reading 50 capsules."""
    try:
        with os.scandir(folder) as entries:
            return sorted(e.name for e in entries if e.is_dir() and (links or not e.is_symlink()))
    except (FileNotFoundError, NotADirectoryError):
        return []


def read_capsule(root: Path, run_id: str, cell: str) -> Capsule | None:
    """One cell folder in the native capsule format, or None when it holds none of its files."""
    rel = f"runs/{run_id}/{cell}"
    problems = _Problems()
    run_record, run_sha = _read_json(root, f"{rel}/run.json", problems)
    config, config_sha = _read_yaml(root, f"{rel}/config.yaml", problems)
    legacy, legacy_sha = _read_json(root, f"{rel}/best_metrics.json", problems)
    train_sha: list[str] = []  # kept with the capsule: V03 and V10 cite train.csv by it (no second read)
    train = _read_table(root, f"{rel}/train.csv", problems, required=("step",), sha=train_sha)
    tests = dict(_read_tests(root, rel, problems))
    if run_record is None and config is None and legacy is None and train is None and not tests:
        from remote_gpu_trainer.audits.catalogue.readers import read_tracker_cell

        tracker = read_tracker_cell(root, run_id, cell)
        return replace(tracker, problems=tuple(problems.items) + tracker.problems) if tracker else None
    if run_record is None and legacy is not None:
        from remote_gpu_trainer.audits.catalogue.readers.best_metrics import legacy_test

        legacy_artifacts, found = legacy_test(f"{rel}/best_metrics.json", legacy, legacy_sha)
        problems.items.extend(found)
        if legacy_artifacts is not None:
            tests.setdefault(legacy_artifacts.test_id, legacy_artifacts)
    return Capsule(
        run_id=run_id, cell=cell, path=rel, source="capsule" if run_record is not None else "legacy",
        run_record=run_record if isinstance(run_record, dict) else None, run_record_sha256=run_sha,
        config=config if isinstance(config, dict) else None, config_sha256=config_sha,
        train=train, train_path=f"{rel}/train.csv" if train is not None else None, tests=tests,
        files={"train.csv": train_sha[0]} if train is not None and train_sha else {},
        legacy_metrics=legacy if isinstance(legacy, dict) else None,
        problems=tuple(problems.items),
    )


def _read_tests(root: Path, rel: str, problems: _Problems) -> Iterable[tuple[str, TestArtifacts]]:
    for name in (n for n in _folders(os.path.join(root, rel, "test"), links=True) if SAFE_ID.match(n)):
        base = f"{rel}/test/{name}"
        metrics, metrics_sha = _read_json(root, f"{base}/metrics.json", problems)
        results_rel = next((f"{base}/{file}" for file in ("results.parquet", "results.csv")
                            if os.path.isfile(os.path.join(root, base, file))), None)
        hashed: list[str] = []  # the results file is read once: its sha256 and its table from the same bytes
        results = _read_table(root, results_rel, problems, required=("item_id",), sha=hashed) if results_rel else None
        if metrics is not None and not isinstance(metrics, dict):
            problems.add(f"{base}/metrics.json", "is not a JSON object")
            metrics = None
        yield name, TestArtifacts(
            test_id=name, metrics_path=f"{base}/metrics.json", metrics=metrics, metrics_sha256=metrics_sha,
            results_path=results_rel if results is not None else None, results=results,
            results_sha256=hashed[0] if results is not None and hashed else None,
        )


def read_splits(root: Path, problems: _Problems) -> Iterable[SplitManifest]:
    folder = root / "splits"
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.json")):
        rel = f"splits/{path.name}"
        data, sha = _read_json(root, rel, problems)
        if data is None:
            continue
        manifest = _split_manifest(root, rel, sha or "", data, problems)
        if manifest is not None:
            yield manifest


def _split_manifest(root: Path, rel: str, sha: str, data: Any, problems: _Problems) -> SplitManifest | None:
    members_raw = data.get("members") if isinstance(data, dict) else None
    if not isinstance(members_raw, dict):
        problems.add(rel, "no `members` object (split name -> list of {id, path, sha256})")
        return None
    members: list[SplitMember] = []
    for split, rows in members_raw.items():
        if not isinstance(rows, list):
            problems.add(rel, f"members.{split} is not a list")
            continue
        for index, row in enumerate(rows):
            member = _member(split, row)
            if member is None:
                problems.add(rel, f"members.{split}[{index}] has no string `id`")
                continue
            members.append(member)
    inside = _InsideRoot(root)
    disk = {m.path: _member_sha(inside, m.path) for m in members if m.path}
    fit = data.get("fit_records")
    return SplitManifest(
        split_set_id=str(data.get("split_set_id") or Path(rel).stem), path=rel, sha256=sha,
        method=str(data.get("method") or ""), hash_unit=str(data.get("hash_unit") or "file_bytes"),
        members=tuple(members), fit_records=tuple(r for r in fit if isinstance(r, dict)) if isinstance(fit, list)
        else (), standard_reference=data.get("standard_reference") if isinstance(data.get("standard_reference"),
                                                                                 dict) else None,
        disk_sha256=disk,
    )


def _member(split: str, row: Any) -> SplitMember | None:
    if not isinstance(row, dict) or not isinstance(row.get("id"), str):
        return None

    def text(key: str) -> str | None:
        value = row.get(key)
        return str(value) if value is not None else None

    return SplitMember(split=split, id=row["id"], path=text("path"), sha256=text("sha256"),
                       group=text("group"), time=text("time"))


class _InsideRoot:
    """Whether a path stays inside the project root once every symlink is followed. Members share folders, so
    each folder is resolved once (a split of 100,000 files lies in a few hundred), the file itself only when it
    is a link. Plain strings and one lstat per member: a split's members are most of an audit's file system
    calls."""

    def __init__(self, root: Path) -> None:
        self.root = os.path.realpath(root)
        self.folders: dict[str, bool] = {}

    def regular_file(self, path: str) -> str | None:
        """The path with links followed when it is a regular file inside the root, else None (absent, not a
        file, or it or a folder above it leaves the root)."""
        folder = os.path.dirname(path)
        if folder not in self.folders:
            self.folders[folder] = self._inside(os.path.realpath(folder))
        if not self.folders[folder]:
            return None
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            return None
        if stat.S_ISLNK(mode):
            target = os.path.realpath(path)
            return target if self._inside(target) and os.path.isfile(target) else None
        return path if stat.S_ISREG(mode) else None

    def _inside(self, real: str) -> bool:
        return real == self.root or real.startswith(self.root + os.sep)


def _member_sha(inside: _InsideRoot, rel: str) -> str | None:
    """The hash of a member's bytes on disk; None when the path is absent or leaves the project root."""
    if rel.startswith("/") or ".." in rel.replace(os.sep, "/").split("/"):
        return None
    real = inside.regular_file(os.path.join(inside.root, rel))
    return file_sha256(real) if real is not None else None


def numbers_of(project: ProjectEvidence) -> Iterable[Number]:
    """Every reported number: EVIDENCE claims' evidence rows, then each (run, test, metric) no claim cites."""
    cited: set[tuple[str, str, str]] = set()
    for claim in (project.evidence or {}).get("claims", []) or []:
        if not isinstance(claim, dict) or not isinstance(claim.get("id"), str):
            continue
        for index, row in enumerate(claim.get("evidence", []) or []):
            if not isinstance(row, dict):
                continue
            cells = tuple(str(c) for c in row.get("cells", []) or [] if isinstance(c, str))
            metric = row.get("metric") or claim.get("metric")
            test_id = row.get("test_id")
            if not cells or not isinstance(metric, str) or not isinstance(test_id, str):
                continue
            suffix = f"#{index}" if len(claim.get("evidence", [])) > 1 else ""
            for cell in cells:
                cited.add((cell.split("/")[0], test_id, metric))
            yield Number(subject=f"claim:{claim['id']}{suffix}", claim=claim["id"], cells=cells, test_id=test_id,
                         metric=metric, aggregate=str(row.get("aggregate") or "mean_over_seeds"), stated=row)
    groups: dict[tuple[str, str, str], list[str]] = {}
    for capsule in project.capsules:
        for test in capsule.tests.values():
            blocks = (test.metrics or {}).get("metrics")
            for metric in blocks if isinstance(blocks, dict) else {}:
                groups.setdefault((capsule.run_id, test.test_id, metric), []).append(capsule.key)
    for (run_id, test_id, metric), keys in sorted(groups.items()):
        if (run_id, test_id, metric) not in cited:
            yield Number(subject=f"number:{run_id}/{test_id}/{metric}", claim=None, cells=tuple(keys),
                         test_id=test_id, metric=metric)


# -- files ----------------------------------------------------------------------------------------------------
def file_sha256(path: Path | str) -> str:
    """The sha256 of a file's bytes, read with os.read: an audit hashes every split member, mostly small
    files, and a buffered file object cost twice the syscalls' time."""
    digest = hashlib.sha256()
    handle = os.open(path, os.O_RDONLY)
    try:
        while chunk := os.read(handle, _READ_CHUNK):
            digest.update(chunk)
    finally:
        os.close(handle)
    return digest.hexdigest()


def _read_bytes(root: Path, rel: str) -> bytes | None:
    """A plain file's bytes; None when it is absent, a link or not a file (one lstat, no Path objects)."""
    path = os.path.join(root, rel)
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(mode):
        return None
    with open(path, "rb") as handle:
        return handle.read()


def _read_json(root: Path, rel: str, problems: _Problems) -> tuple[Any, str | None]:
    data = _read_bytes(root, rel)
    if data is None:
        return None, None
    sha = hashlib.sha256(data).hexdigest()
    try:
        return loads_strict(data), sha
    except (ValueError, UnicodeDecodeError) as exc:
        problems.add(rel, f"malformed JSON: {exc}")
        return None, sha


def _read_yaml(root: Path, rel: str, problems: _Problems) -> tuple[Any, str | None]:
    data = _read_bytes(root, rel)
    if data is None:
        return None, None
    sha = hashlib.sha256(data).hexdigest()
    try:
        parsed = load_plain(data)
    except YamlRefused as exc:
        problems.add(rel, str(exc))
        return None, sha
    if parsed is not None and not isinstance(parsed, dict):
        problems.add(rel, "is not a mapping of keys to values")
        return None, sha
    return parsed, sha


def _read_table(root: Path, rel: str | None, problems: _Problems, *, required: tuple[str, ...] = (),
                sha: list[str] | None = None) -> pd.DataFrame | None:
    """A CSV or parquet table, or None (with a problem naming the file) when it cannot be read or lacks a
    required column; `sha` receives the sha256 of the bytes parsed."""
    if rel is None or not os.path.isfile(os.path.join(root, rel)):
        return None
    import io

    import pandas as pd

    try:
        with open(os.path.join(root, rel), "rb") as handle:
            data = handle.read()
        if sha is not None:
            sha.append(hashlib.sha256(data).hexdigest())
        # one thread: a per-item table is small, and starting pyarrow's pool for it cost more than it saved
        frame = (pd.read_parquet(io.BytesIO(data), use_threads=False) if rel.endswith(".parquet")
                 else pd.read_csv(io.BytesIO(data)))
    except Exception as exc:  # pandas raises many types for one cause: a file that is not the table it claims
        problems.add(rel, f"unreadable table: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        problems.add(rel, f"missing column{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
        return None
    return frame


def finite(value: Any) -> float | None:
    """A number that is a real finite float, else None (bools, strings and NaN are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
