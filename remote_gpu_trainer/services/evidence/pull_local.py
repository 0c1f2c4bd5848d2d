"""The local side of a pull: where each manifest entry lands, and how its bytes get there durably.

A file is written as `<name>.part` (never through a symlink, never a hard-linked one), resumed from the
prefix already there (re-hashed, since hash state cannot be persisted), fsynced, renamed into place and
checked to be the very file written (same inode). Nothing may land outside the local root: an entry
whose path could is refused (`Refused`), never retried. The small files a batch brought back are written
here several at once and made durable together before any is renamed (`write_batch`). The folders' fsyncs
come once per pull, from pull.py.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.manifest import ManifestFile, Problem, path_problems
from remote_gpu_trainer.fsutil import lstat_or_none, remove_if_present, sync_filesystem
from remote_gpu_trainer.services.evidence.local_root import CHUNK, hash_with_cache_sync
from remote_gpu_trainer.state.db import StateDB

FSYNC_THREADS = 8  # threads fsyncing one chunk's files where syncfs is not to be had (they share journal commits)
CHUNK_FILES = 256  # files of a batch held open until renamed (ulimit -n is often 1024; two batches in flight)


class Refused(Exception):
    """A manifest entry that may not land here at all (its Problem says why); never retried."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.detail)
        self.problem = problem


# Each folder's verdict for _local_target, as one check of many files saw it: its local path, and why files may
# not land there (None: they may).
FolderVerdicts = dict[tuple[str, ...], tuple[Path, str | None]]


def _local_target(root: Path, path: str, folders: FolderVerdicts | None = None) -> tuple[Path | None, Problem | None]:
    """The local path for a manifest entry, refusing anything that could land outside the local root.

    `folders` lets one check of many entries (`local_checks`, a batch) judge each folder once: every
    component a folder and the folder resolving inside the root. The file itself is then only lstat'ed:
    a regular file or nothing resolves to its folder's resolved path plus its name (path_problems already
    refused `.` and `..`), so `target.resolve()` per file (an lstat per component) would say nothing more."""
    reasons = path_problems(path)
    if reasons:
        return None, Problem("path_unsafe", path, reasons[0])
    parts = tuple(path.split("/"))
    key = parts[:-1]
    known = folders.get(key) if folders is not None else None
    if known is None:
        known = _folder_problem(root, key)
        if folders is not None:
            folders[key] = known
    folder, verdict = known
    if verdict is not None:
        return None, Problem("path_unsafe", path, verdict)
    target = folder / parts[-1]
    info = lstat_or_none(target)
    if info is not None and not stat.S_ISREG(info.st_mode):
        return None, Problem("path_unsafe", path, f"{target} exists and is not a regular file")
    return target, None


def _folder_problem(root: Path, parts: tuple[str, ...]) -> tuple[Path, str | None]:
    """root/parts, and why files may not land there: a component that is a symlink or not a folder, or a
    folder that resolves outside the local root (None when they may)."""
    current = root
    for part in parts:
        current = current / part
        info = lstat_or_none(current)
        if info is not None and not stat.S_ISDIR(info.st_mode):
            return current, f"{current} is a symlink or not a folder"
    if not current.resolve().is_relative_to(root.resolve()):
        return current, "resolves outside the local root"
    return current, None


def local_side(root: Path, path: str, db: StateDB, size: int, sha256: str,
               folders: FolderVerdicts | None = None) -> tuple[Path, bool]:
    """Where the entry lands, and whether the local copy already holds the manifest's bytes. A copy
    with other bytes (damaged or edited here) loses its `.part` too: it is fetched whole again. So does a copy
    that is already right: a `.part` left beside it (a pull interrupted after the rename, or a copy put back by
    hand) is rgt's own leftover, and verification would otherwise ask for another pull forever."""
    target, problem = _local_target(root, path, folders)
    if problem is not None:
        raise Refused(problem)
    assert target is not None
    info = lstat_or_none(target)
    if info is None or not stat.S_ISREG(info.st_mode) or info.st_size != size:
        return target, False
    present = hash_with_cache_sync(db, target) == sha256
    remove_if_present(target.with_name(target.name + ".part"))
    return target, present


def open_part(part: Path, size: int) -> tuple[int, int, Any]:
    """The `.part` opened for appending (never through a symlink), its resume offset, and a hasher fed
    with the prefix already there."""
    part.parent.mkdir(parents=True, exist_ok=True)
    offset, digest = _resume_prefix(part, size)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    opened = os.fstat(fd)
    if opened.st_nlink != 1 or opened.st_size != offset:  # changed between the check and the open
        os.close(fd)
        raise OSError(errno.EIO, "the .part changed while it was opened", str(part))
    return fd, offset, digest


def _resume_prefix(part: Path, size: int) -> tuple[int, Any]:
    """Resume offset and a hasher fed with the existing prefix (hash state cannot be persisted)."""
    digest = hashlib.sha256()
    info = lstat_or_none(part)
    if info is None:
        return 0, digest
    if not stat.S_ISREG(info.st_mode):
        raise OSError(f"{part}: not a regular file")
    if info.st_nlink != 1:  # hard-linked elsewhere: appending or truncating would change the other name too
        os.unlink(part)
        return 0, digest
    if info.st_size > size:
        os.truncate(part, 0)
        return 0, digest
    with open(part, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return info.st_size, digest


def append_hashed(fd: int, chunk: bytes, digest: Any) -> None:
    """Append the whole chunk to `fd` (short writes continued) and feed it to the running hash."""
    view = memoryview(chunk)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    digest.update(chunk)


def seal(fd: int, part: Path, target: Path) -> os.stat_result:
    """fsync and close the complete `.part`, rename it into place; the folder's fsync comes once per pull
    (`pull._Puller.seal_all`). Returns the renamed file's stat for the hash cache."""
    try:
        os.fsync(fd)
        written = os.fstat(fd)
    finally:
        os.close(fd)
    os.replace(part, target)
    return _same_file(target, written)


def _same_file(target: Path, written: os.stat_result) -> os.stat_result:
    """The renamed file's stat, provided it is the file that was written (not one swapped in under its
    `.part` name meanwhile); OSError otherwise, which the per-file path retries."""
    info = os.lstat(target)
    if (info.st_ino, info.st_dev) != (written.st_ino, written.st_dev):
        raise OSError(errno.EIO, "the .part was replaced while it was written", str(target))
    return info


def local_checks(root: Path, entries: Sequence[ManifestFile], db: StateDB) -> list[tuple[Path | None, str]]:
    """For each entry: where it lands and whether it is 'present', to 'fetch' whole, or 'single' (a
    `.part` to resume, or a path refused here: the per-file path handles and reports those)."""
    out: list[tuple[Path | None, str]] = []
    folders: FolderVerdicts = {}
    for entry in entries:
        try:
            target, present = local_side(root, entry.path, db, entry.bytes, entry.sha256, folders)
        except (Refused, OSError):
            out.append((None, "single"))
            continue
        part = target.with_name(target.name + ".part")
        out.append((target, "present" if present else "single" if os.path.lexists(part) else "fetch"))
    return out


def write_batch(items: Sequence[tuple[ManifestFile, Path, memoryview | None]],
                sync: Callable[[Path], bool] = sync_filesystem) -> list[tuple[ManifestFile, Path, os.stat_result]]:
    """Write each file whose bytes hash to the manifest's; the others are left for the per-file path.

    The `.part` files are written one after the other by the calling thread (the pull writes two batches at
    once, each in its own thread; more writers only contend for the file system's locks and the GIL:
    bench_pull_ssh.py measured 8 writers per batch 0.4 s of CPU dearer than one, for no faster pull), made
    durable together, then renamed into place: one `sync` (fsutil.sync_filesystem: syncfs(2)) per file system
    they are on, or, where that is not to be had, an fsync of each (several at once, sharing the journal's
    commits). Either way every file's bytes are on disk before its name appears, as `seal` does for one file;
    an fsync per file made 2,000 files of 100 KB 0.9 s slower than rsync's whole pull (bench_pull_ssh.py).
    CHUNK_FILES at a time, each held open until it is renamed, so the rename is checked against the very file
    written (`_same_file`)."""
    out: list[tuple[ManifestFile, Path, os.stat_result]] = []
    for start in range(0, len(items), CHUNK_FILES):
        out.extend(_write_chunk(items[start:start + CHUNK_FILES], sync))
    return out


def _write_chunk(items: Sequence[tuple[ManifestFile, Path, memoryview | None]],
                 sync: Callable[[Path], bool]) -> list[tuple[ManifestFile, Path, os.stat_result]]:
    made: set[Path] = set()  # folders made (or found) already: one mkdir per folder, not per file
    parts = [_write_part(*item, made) for item in items]
    written = [(item, part) for item, part in zip(items, parts, strict=True) if part is not None]
    out = []
    try:
        folders = {os.fstat(fd).st_dev: part.parent for _, (part, fd) in written}
        if not all(sync(folder) for folder in folders.values()):
            with ThreadPoolExecutor(FSYNC_THREADS) as pool:
                durable = list(pool.map(lambda pair: _fsynced(*pair[1]), written))
            written = [pair for pair, ok in zip(written, durable, strict=True) if ok]
        for (entry, target, _), (part, fd) in written:
            try:
                info = os.fstat(fd)
                os.replace(part, target)
                out.append((entry, target, _same_file(target, info)))
            except OSError:
                remove_if_present(part)  # the per-file path says what happened
    finally:
        for opened in parts:
            if opened is not None:
                os.close(opened[1])
    return out


def _write_part(entry: ManifestFile, target: Path, data: memoryview | None,
                made: set[Path]) -> tuple[Path, int] | None:
    """A new `.part` with exactly these bytes, not yet durable and still open, if they are the manifest's; None
    otherwise (or when the local disk refuses: the per-file path reports why)."""
    if data is None or hashlib.sha256(data).hexdigest() != entry.sha256:
        return None
    part = target.with_name(target.name + ".part")
    try:
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError:
        return None  # something is there (not ours to remove) or the folder is refused: the per-file path says
    try:
        view = data
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        os.close(fd)
        remove_if_present(part)
        return None
    return part, fd


def _fsynced(part: Path, fd: int) -> bool:
    """fsync one written `.part` through its own descriptor; False (the file removed) when the disk refused."""
    try:
        os.fsync(fd)
    except OSError:
        remove_if_present(part)
        return False
    return True
