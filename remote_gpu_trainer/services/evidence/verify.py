"""Local verification (docs/gate.md §5-§6) and the PULL_VERIFIED marker it writes.

Trust the artifact, not the claim: verification re-derives everything from the local bytes (never from
the hash cache), checks the required files and the metrics, load-verifies the checkpoints (load_checks.py), and
writes PULL_VERIFIED.json only when every error list is empty. It deletes the old marker first, so a failed
or interrupted run never leaves an old success behind, and records every verification in the state
database: a marker the gate finds must be the one that record names. `checkpoint_statuses` is the cheap
view of the last verification for dashboards (stat only, no hashing).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from remote_gpu_trainer import __version__
from remote_gpu_trainer.audits.gate import config_sha256
from remote_gpu_trainer.audits.manifest import (
    MANIFEST_NAME,
    MARKER_NAME,
    CellOutcome,
    Manifest,
    MarkerCheckpoint,
    Problem,
    is_checkpoint,
    marker_bytes,
    parse_manifest,
    required_checkpoints,
    sha256_bytes,
)
from remote_gpu_trainer.clock import utc_now
from remote_gpu_trainer.config.project import ProjectConfig, RunConfig
from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.fsutil import atomic_write, fsync_dir, lstat_or_none
from remote_gpu_trainer.run_records import run_config_record
from remote_gpu_trainer.services.evidence.local_root import (
    box_folders,
    hash_fresh,
    not_home,
    recorded_links,
    walk_local_root,
)
from remote_gpu_trainer.services.evidence.manifest import local_manifest, recorded_adoption
from remote_gpu_trainer.services.evidence.read_only import seal_verified
from remote_gpu_trainer.state.caches import FileKey
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.strict_json import loads_strict

MARKER_TEMP_PREFIX = ".rgt-tmp-PULL_VERIFIED."
STATUSES = ("pending", "pulled", "verified", "missing", "size_mismatch", "hash_mismatch", "unloadable",
            "nonfinite")
_STATUS_OF_CODE = {
    "missing_local": "missing", "required_missing": "missing", "incomplete_part": "missing",
    "size_mismatch": "size_mismatch", "hash_mismatch": "hash_mismatch", "ckpt_nonfinite": "nonfinite",
    "metrics_invalid": "unloadable",
}
_STATUS_RANK = {status: rank for rank, status in enumerate(
    ("missing", "size_mismatch", "hash_mismatch", "nonfinite", "unloadable"))}


@dataclass(frozen=True)
class VerifyStep:
    """One step of a verification, for a status line or a progress bar. `text` says what is happening; while
    hashing, `path` is the file just started and `hashed` the bytes of the files hashed before it, out of
    `total` (the bytes of every file whose size matched); after hashing, `hashed == total`."""

    text: str
    path: str | None = None
    hashed: int = 0
    total: int = 0


@dataclass(frozen=True)
class FileStatus:
    """One file's verification status (STATUSES) and what decided it, as dashboards and the report show it."""

    path: str
    bytes: int
    sha256: str
    status: str  # one of STATUSES
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class VerifyResult:
    """One verification: ok only when no error at all; `marker` is the PULL_VERIFIED.json it wrote."""

    ok: bool
    errors: list[Problem]
    files: list[FileStatus]
    manifest_sha256: str | None = None
    marker: Path | None = None
    cells: tuple[CellOutcome, ...] = ()  # cells the box's wrapper recorded as failed or never started
    adopted_run_id: str | None = None  # the manifest verified was adopted (docs/gate.md §2.1), naming this run id


def verifier_version() -> str:
    """PULL_VERIFIED.json's `verifier_version`: rgt's version and the load check's. The load check program is
    imported here, when a marker is written, not by every report that reads checkpoint statuses (issue 29)."""
    from remote_gpu_trainer.isolated.load_check import LOAD_CHECK_VERSION

    return f"{__version__}+{LOAD_CHECK_VERSION}"


async def verify(project: ProjectConfig, run: RunConfig, db: StateDB,
                 progress: Callable[[VerifyStep], None] | None = None, *,
                 load_check_timeout: float | None = None, noted: Sequence[Problem] = ()) -> VerifyResult:
    """§5 in order; the marker is written only when every error list is empty.

    `progress` receives each step (its text for a status line, its byte counts for a progress bar). `noted`
    are problems found before verification began (the box refused to let its manifest be adopted, §2.1):
    errors like any other.
    """
    root = project.run_dir(run.id)
    report = progress or (lambda _: None)
    elsewhere = not_home(project.root, run.id, box_folders(project, run))
    if elsewhere is not None:  # docs/gate.md §5: never a marker in the box's own files
        problem = Problem("not_home", f"runs/{run.id}", f"not a local copy: {elsewhere}")
        return _finish(root, run, db, None, [*noted, problem], {}, {}, [])
    _remove_marker(root)
    errors: list[Problem] = list(noted)
    manifest = _verify_manifest(root, run, db, errors)
    report(VerifyStep(f"manifest {MANIFEST_NAME} checked"))
    if manifest is None:
        return _finish(root, run, db, None, errors, {}, {}, [])
    local = _local_entries(root, errors, manifest)
    listed = manifest.by_path()
    per_file: dict[str, list[Problem]] = {path: [] for path in listed}
    stats: dict[str, os.stat_result] = {}
    for path, info in sorted(local.items()):
        if path in listed:
            stats[path] = info
        elif not path.endswith(".part"):
            errors.append(Problem("unexpected_local", path, "not in the manifest; remove it or re-pull"))
    for path, entry in listed.items():
        seen = stats.get(path)
        if seen is None:
            per_file[path].append(Problem("missing_local", path, "in the manifest, absent here: run pull"))
        elif seen.st_size != entry.bytes:
            per_file[path].append(Problem("size_mismatch", path,
                                          f"{seen.st_size} bytes here, {entry.bytes} in the manifest"))
    hashed = await _hash_listed(root, manifest, per_file, db, report)
    _check_required(run, manifest, errors)
    await asyncio.to_thread(_check_metrics, root, hashed, per_file)
    hashed_bytes = sum(entry.bytes for entry in manifest.files if entry.path in hashed)

    def after_hashing(text: str) -> None:  # the load checks and the marker: every byte that could be hashed, was
        report(VerifyStep(text, hashed=hashed_bytes, total=hashed_bytes))

    from remote_gpu_trainer.services.evidence.load_checks import load_check_checkpoints  # verify only, not the report

    checkpoints = await load_check_checkpoints(root, run, manifest, hashed, per_file, db, after_hashing,
                                               load_check_timeout)
    for problems in per_file.values():
        errors.extend(problems)
    if not errors:  # every byte checked: the copy becomes read-only before its record and marker are written
        sealed = await asyncio.to_thread(seal_verified, root, manifest, hashed, stats, db)
        stats.update(sealed.stats)
        for problem in sealed.changed:
            per_file[problem.path].append(problem)
            errors.append(problem)
        after_hashing(sealed.line())
    return _finish(root, run, db, manifest, errors, per_file, stats, checkpoints, after_hashing)


def _remove_marker(root: Path) -> None:
    """Step 0: no old success may survive a verification that fails or is interrupted."""
    if not root.is_dir():
        return
    names = [MARKER_NAME] + [name for name in os.listdir(root) if name.startswith(MARKER_TEMP_PREFIX)]
    try:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(root / name)
        fsync_dir(root)
    except OSError as exc:
        raise VerbFailed(f"{root / MARKER_NAME}: cannot remove the old marker ({exc.strerror}): "
                         "verification aborted") from None


def _verify_manifest(root: Path, run: RunConfig, db: StateDB, errors: list[Problem]) -> Manifest | None:
    path = root / MANIFEST_NAME
    info = lstat_or_none(path)
    if info is None:
        errors.append(Problem("missing_local", MANIFEST_NAME, "no manifest in the local root: run pull"))
        return None
    if not stat.S_ISREG(info.st_mode):
        errors.append(Problem("symlink", MANIFEST_NAME, "manifest is a symlink or not a regular file"))
        return None
    data = path.read_bytes()
    manifest, problems = parse_manifest(data, roster=run.roster, run_id=run.id, adopted=recorded_adoption(db, run.id))
    errors.extend(problems)
    recorded = db.recorded_manifest(run.id)
    if recorded is not None and recorded != sha256_bytes(data):
        errors.append(Problem("manifest_mismatch", MANIFEST_NAME,
                              f"sha256 {sha256_bytes(data)[:12]} is not the manifest recorded at build time "
                              f"({recorded[:12]})"))
    return manifest


def _local_entries(root: Path, errors: list[Problem],
                   manifest: Manifest | None = None) -> dict[str, os.stat_result]:
    """Step 2: every regular file under the root by relative path.

    Symlinks, other non-regular entries and `.part` files become errors, except the manifest's links as the
    pull re-created them (local_root.recorded_links), which are not files.
    """
    found: dict[str, os.stat_result] = {}
    links = recorded_links(root, manifest)
    for path, info in walk_local_root(root):
        if path in links:
            continue
        if stat.S_ISLNK(info.st_mode):
            errors.append(Problem("symlink", path, "symlink in the local root; replace it by the file"))
        elif not stat.S_ISREG(info.st_mode):
            errors.append(Problem("symlink", path, "not a regular file"))
        elif path.endswith(".part"):
            errors.append(Problem("incomplete_part", path, "incomplete transfer: run pull again"))
            found[path] = info
        else:
            found[path] = info
    return found


async def _hash_listed(root: Path, manifest: Manifest, per_file: dict[str, list[Problem]], db: StateDB,
                       report: Callable[[VerifyStep], None]) -> dict[str, str]:
    """Steps 3-4: hash every file whose size matched, from its bytes (the hashes then seed the cache)."""
    todo = [entry for entry in manifest.files if not per_file[entry.path]]
    hashed: dict[str, str] = {}
    total, done = sum(entry.bytes for entry in todo), 0
    for index, entry in enumerate(todo, start=1):
        report(VerifyStep(f"hashing {entry.path} ({index}/{len(todo)})", entry.path, done, total))
        done += entry.bytes
        local = root.joinpath(*entry.path.split("/"))
        try:
            digest = await hash_fresh(db, local)  # a verdict: from the bytes, never from the cache
        except OSError as exc:
            per_file[entry.path].append(Problem("missing_local", entry.path, f"unreadable: {exc.strerror}"))
            continue
        if digest != entry.sha256:
            detail = f"sha256 {digest[:12]} here, {entry.sha256[:12]} in the manifest"
            per_file[entry.path].append(Problem("hash_mismatch", entry.path, detail))
        else:
            hashed[entry.path] = digest
    return hashed


def _check_required(run: RunConfig, manifest: Manifest, errors: list[Problem]) -> None:
    """Step 5a: every roster cell that finished lists every required file (a failed or never-started cell,
    as the box's wrapper recorded it in the manifest's `cells`, is listed as it is)."""
    listed = manifest.by_path()
    for cell in manifest.finished(run.roster):
        for name in run.required:
            path = f"{cell}/{name}"
            if path not in listed:
                errors.append(Problem("required_missing", path, "required file is not in the manifest"))


def _check_metrics(root: Path, hashed: dict[str, str], per_file: dict[str, list[Problem]]) -> None:
    """Step 5b: every `*metrics*.json` is a JSON object with no NaN or Infinity."""

    for path in sorted(hashed):
        name = path.rsplit("/", 1)[-1]
        if "metrics" not in name or not name.endswith(".json"):
            continue
        try:
            value = loads_strict(root.joinpath(*path.split("/")).read_bytes())
        except ValueError as exc:
            per_file[path].append(Problem("metrics_invalid", path, f"not valid finite JSON: {exc}"))
            continue
        if not isinstance(value, dict):
            per_file[path].append(Problem("metrics_invalid", path, "not a JSON object"))


def _finish(root: Path, run: RunConfig, db: StateDB, manifest: Manifest | None, errors: list[Problem],
            per_file: dict[str, list[Problem]], stats: dict[str, os.stat_result],
            checkpoints: list[MarkerCheckpoint],
            report: Callable[[str], None] | None = None) -> VerifyResult:
    """Step 7 and the verification record: statuses per file, the marker only on full success."""
    files = _file_statuses(manifest, errors, per_file, checkpoints)
    marker_path: Path | None = None
    marker_sha: str | None = None
    ok = not errors and manifest is not None
    if ok and manifest is not None:
        verified_at = utc_now()  # after the last read: nothing read later can predate it
        data = marker_bytes(run_id=manifest.run_id, manifest_sha256=manifest.sha256, verified_at=verified_at,
                            verifier_version=verifier_version(), files=len(manifest.files),
                            total_bytes=manifest.total_bytes, checkpoints=checkpoints)
        marker_sha = sha256_bytes(data)
        marker_path = _write_marker(root, data)
        if report is not None:
            report(f"verified: wrote {MARKER_NAME}")
    records = []
    for status in files:
        record = status.to_dict()
        info = stats.get(status.path)
        record["local_key"] = dataclasses.asdict(FileKey.of(info)) if info is not None else None
        records.append(record)
    # the record that makes the marker evidence: a marker the gate finds must be this one, made under
    # this configuration (a crash between the marker and this record leaves a marker the gate refuses)
    db.add_verification(run.id, ok, manifest.sha256 if manifest else None,
                        [problem.to_dict() for problem in errors], records, marker_sha256=marker_sha,
                        config_sha256=config_sha256(run), config=run_config_record(run))
    return VerifyResult(ok=ok, errors=errors, files=files,
                        manifest_sha256=manifest.sha256 if manifest else None, marker=marker_path,
                        cells=manifest.cells if manifest else (),
                        adopted_run_id=manifest.adopted_run_id if manifest else None)


def _file_statuses(manifest: Manifest | None, errors: list[Problem], per_file: dict[str, list[Problem]],
                   checkpoints: Sequence[MarkerCheckpoint] = ()) -> list[FileStatus]:
    """Each file's worst problem, or what passed: the load result for a checkpoint, the hash for the rest."""
    if manifest is None:
        return []
    loads = {c.path: f"loads: {c.format} · {c.tensors} tensors · {c.elements:,} values · "
                     + (f"key {c.state_key}" if c.state_key else "training state")
             for c in checkpoints}
    statuses: list[FileStatus] = []
    for entry in manifest.files:
        problems = per_file.get(entry.path, [])
        worst = min(problems, key=lambda p: _STATUS_RANK[_status_of(p.code)], default=None)
        status = _status_of(worst.code) if worst is not None else "verified"
        passed = loads.get(entry.path, "size and sha256 match")
        statuses.append(FileStatus(entry.path, entry.bytes, entry.sha256, status,
                                   worst.detail if worst is not None else passed))
    for problem in errors:
        if problem.code == "required_missing":
            statuses.append(FileStatus(problem.path, 0, "", "missing", problem.detail))
    return sorted(statuses, key=lambda item: item.path)


def _status_of(code: str) -> str:
    """§5 mapping: missing, size/hash mismatch, nonfinite, every other ckpt_* (and bad metrics) unloadable."""
    return _STATUS_OF_CODE.get(code, "unloadable")


def _write_marker(root: Path, data: bytes) -> Path:
    """A reader sees no marker or a whole one (fsutil.atomic_write; its temp name starts with
    MARKER_TEMP_PREFIX, which verification sweeps)."""
    final = root / MARKER_NAME
    atomic_write(final, data)
    return final


def checkpoint_statuses(project: ProjectConfig, run: RunConfig, db: StateDB) -> list[FileStatus]:
    """Cheap per-checkpoint status for dashboards: no hashing, only stat and the last verification record.

    `pending` = not local yet; `pulled` = present but not verified as it is now; otherwise the status of
    the last verification, as long as the file's size and mtime are what that verification saw.
    """
    root = project.run_dir(run.id)
    manifest = local_manifest(root, run, recorded_adoption(db, run.id))
    record = db.last_verification(run.id)
    seen: dict[str, dict[str, Any]] = {}
    if record is not None and manifest is not None and record.get("manifest_sha256") == manifest.sha256:
        seen = {item["path"]: item for item in record["files"] if isinstance(item, dict) and "path" in item}
    if manifest is None:
        names = required_checkpoints(run.roster, run.required, run.checkpoint_globs)
        return [FileStatus(path, 0, "", "pending", "no manifest pulled yet") for path in names]
    statuses = []
    for entry in manifest.files:
        if not is_checkpoint(entry.path, run.checkpoint_globs):
            continue
        info = lstat_or_none(root.joinpath(*entry.path.split("/")))
        previous = seen.get(entry.path)
        if info is None or not stat.S_ISREG(info.st_mode):
            status, detail = "pending", ""
        elif previous is not None and previous.get("local_key") == dataclasses.asdict(FileKey.of(info)):
            status, detail = str(previous.get("status")), str(previous.get("detail", ""))
        else:
            status, detail = "pulled", "not verified since it was written"
        statuses.append(FileStatus(entry.path, entry.bytes, entry.sha256, status, detail))
    return statuses
