"""The local root as the pull, verification and the gate all read it: one walk and one hash cache (the small
file-system helpers they share, lstat and read without following links, live in fsutil.py).

The hash cache answers "has this file changed since it was hashed?" from its size, mtime, ctime and inode;
it serves dashboards, the pull's "already here?" check and the gate's freshness check, never a verdict:
verification always re-derives the hash from the bytes (`hash_fresh`), which then seeds the cache.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from remote_gpu_trainer.audits.manifest import MANIFEST_NAME, MARKER_NAME
from remote_gpu_trainer.state.caches import FileKey
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.text import escape_control

CHUNK = 4 << 20  # bytes read (and streamed) at a time


def walk_local_root(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every non-directory entry under the local root with its lstat (links never followed), by relative
    path; the manifest and the marker at the root are not entries. Verification and the gate both read
    the local root through this one walk, so they can never disagree about what is there. A name that is not
    UTF-8 (left by some tool; never one the manifest lists) comes out escaped, as every face shows it."""
    stack = [""]
    while stack:
        relative = stack.pop()
        with os.scandir(root / relative if relative else root) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
        for entry in entries:
            path = f"{relative}/{entry.name}" if relative else entry.name
            if not relative and entry.name in (MANIFEST_NAME, MARKER_NAME):
                continue
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                stack.append(path)
            else:
                yield escape_control(path), info


async def hash_with_cache(db: StateDB, path: Path) -> str:
    """SHA-256 of a regular file for dashboards and the gate's freshness check: a file whose size, mtime,
    ctime and inode are unchanged is answered from the cache. Never used for a verdict (see `hash_fresh`)."""
    return await asyncio.to_thread(hash_with_cache_sync, db, path)


def hash_with_cache_sync(db: StateDB, path: Path) -> str:
    """The same, for synchronous callers (the gate, dashboards run it in a worker thread)."""
    cached = db.cached_hash(str(path), FileKey.of(os.lstat(path)))
    if cached is not None:
        return cached
    return hash_fresh_sync(db, path)


async def hash_fresh(db: StateDB, path: Path) -> str:
    """SHA-256 re-derived from the bytes, whatever the cache says; the result seeds the cache."""
    return await asyncio.to_thread(hash_fresh_sync, db, path)


def hash_fresh_sync(db: StateDB, path: Path) -> str:
    """The same, for synchronous callers."""
    digest, key = _hash_stable(path)
    if key is not None:
        db.store_hash(str(path), key, digest)
    return digest


def _hash_stable(path: Path) -> tuple[str, FileKey | None]:
    """Hash from one descriptor; the cache key comes back only if the file did not change meanwhile."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise OSError(f"{path}: not a regular file")
        digest = hashlib.sha256()
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    stable = FileKey.of(before) == FileKey.of(after)
    return digest.hexdigest(), FileKey.of(after) if stable else None
