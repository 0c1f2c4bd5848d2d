"""The evidence store `runs/` as one snapshot, to prove that code rgt runs beside it left it as it was
(docs/deliver.md §1): a figure's own build.py during `rgt build`, a probe's loader hook (docs/verify.md §9).

A snapshot holds every entry under `runs/` by project-relative path (links never followed): what it is, its
permission bits and, for a file, the sha256 of its bytes (a link: its target text). Two snapshots are compared
on those, never on size or mtime, which a writer can put back. Hashing is what it costs, so a file whose
size, mtime, ctime and inode are all what they were when it was last hashed is answered from the state
database's hash cache (services/evidence/local_root.py): ctime moves on every write and chmod and cannot be
set back, so an edited file always misses the cache and is hashed again from its bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from remote_gpu_trainer.fsutil import file_kind, lstat_or_none
from remote_gpu_trainer.state.caches import FileKey
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.state.db import StateDB

STORE = "runs"
CHUNK = 4 << 20
SHOWN = 5  # changes named in one line; the rest are counted


@dataclass(frozen=True)
class Entry:
    """One entry of an evidence-store snapshot: what it is, its permission bits and its content (a file's sha256, a
    link's target); snapshots are compared on these, never on size or mtime."""

    kind: str  # "file", "folder", "link", or file_kind's word for anything else
    mode: int  # the permission bits
    content: str | None  # a file's sha256, a link's target; None for the rest


Snapshot = Mapping[str, Entry]


def snapshot(root: Path, db: StateDB | None = None) -> dict[str, Entry]:
    """Every entry under `root/runs/` (the folder itself included), by project-relative path."""
    top = root / STORE
    found: dict[str, Entry] = {}
    cached: list[tuple[str, FileKey, str]] = []
    info = lstat_or_none(top)
    if info is None:
        return found
    found[STORE] = _entry(top, info, db, cached)
    stack = [top] if stat.S_ISDIR(info.st_mode) else []
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError:
            continue
        for item in entries:
            path = Path(item.path)
            try:
                entry_info = item.stat(follow_symlinks=False)
            except OSError:
                continue
            found[escape_control(path.relative_to(root).as_posix())] = _entry(path, entry_info, db, cached)
            if stat.S_ISDIR(entry_info.st_mode):
                stack.append(path)
    if db is not None and cached:
        with contextlib.suppress(sqlite3.Error):  # a read-only state database keeps no cache: hashed anyway
            db.store_hashes(cached)
    return found


def _entry(path: Path, info: os.stat_result, db: StateDB | None, cached: list[tuple[str, FileKey, str]]) -> Entry:
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode):
        return Entry("folder", mode, None)
    if stat.S_ISLNK(info.st_mode):
        try:
            return Entry("link", mode, os.readlink(path))
        except OSError:
            return Entry("link", mode, None)
    if not stat.S_ISREG(info.st_mode):
        return Entry(file_kind(info.st_mode), mode, None)
    key = FileKey.of(info)
    known = db.cached_hash(str(path), key) if db is not None else None
    if known is not None:
        return Entry("file", mode, known)
    digest, after = _hash(path)
    if digest is not None and after == key:
        cached.append((str(path), key, digest))
    return Entry("file", mode, digest)


def _hash(path: Path) -> tuple[str | None, FileKey | None]:
    """The sha256 of a regular file read through one descriptor (never a link, never a wait on a FIFO swapped
    in), and the key it had while read; None when it cannot be read (a change is then still seen by its mode
    or by the other snapshot's hash)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None, None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, None
        digest = hashlib.sha256()
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
        return digest.hexdigest(), FileKey.of(os.fstat(fd))
    except OSError:
        return None, None
    finally:
        os.close(fd)


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """What differs, one phrase per path in path order: `runs/r1/x added`, `runs/r1/y removed`,
    `runs/r1/z content changed, mode 0o444 → 0o644`."""
    said = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if old is None:
            said.append(f"{path} added")
        elif new is None:
            said.append(f"{path} removed")
        elif old.kind != new.kind:
            said.append(f"{path} was a {old.kind}, is a {new.kind}")
        else:
            parts = []
            if old.content != new.content:
                parts.append("target changed" if old.kind == "link" else "content changed")
            if old.mode != new.mode:
                parts.append(f"mode {old.mode:#o} → {new.mode:#o}")
            said.append(f"{path} {', '.join(parts)}")
    return said


def summary(changed: list[str]) -> str:
    """The changes in one line: the first few, then how many more."""
    more = f" and {len(changed) - SHOWN} more" if len(changed) > SHOWN else ""
    return "; ".join(changed[:SHOWN]) + more
