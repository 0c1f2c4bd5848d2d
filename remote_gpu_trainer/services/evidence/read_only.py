"""The verified copy is made read-only (docs/deliver.md §1): a guard against an editor, a notebook or a
script writing into the evidence by accident, never a proof. V33 and the teardown gate still re-hash the bytes,
and a user who puts the write bit back and edits a file is caught by them exactly as before.

Only the files lose their write bits. Folders stay writable, so everything that legitimately writes into
`runs/<run>/` afterwards still can: a re-pull renames a fresh `.part` over a file (a rename needs the folder,
not the file, to be writable), a resumed pull appends to its `.part`, and a new verification unlinks and
replaces its marker.

`chmod` moves a file's ctime, and ctime is part of the key the hash cache and the verification record keep
(state/caches.FileKey). So the mark is set before the record is written, the record keeps the stat taken after
it, and the hash cache learns the new key for the digest just verified. That is only sound when the file did
not change between the walk that listed it and the chmod: the stat read through the same descriptor just before
the chmod must equal the walk's (ctime included, which no writer can set back); otherwise the file was written
during verification and is a `hash_mismatch`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from remote_gpu_trainer.audits.manifest import MANIFEST_NAME, Manifest, Problem
from remote_gpu_trainer.state.caches import FileKey
from remote_gpu_trainer.state.db import StateDB

WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


@dataclass
class Sealed:
    """What marking a verified copy read-only did: the stat of every file after it (for the record), the
    files that changed while they were verified, and the files whose mode could not be changed (left as
    they were: the guard is missing there, the verification still holds)."""

    stats: dict[str, os.stat_result] = field(default_factory=dict)
    changed: list[Problem] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One progress line: how many files are read-only now, and which could not be made so."""
        text = f"{len(self.stats)} verified files are read-only now"
        if self.refused:
            shown = ", ".join(self.refused[:3]) + (" …" if len(self.refused) > 3 else "")
            text += f"; {len(self.refused)} could not be marked ({shown})"
        return text


def seal_verified(root: Path, manifest: Manifest, hashed: Mapping[str, str],
                  walked: Mapping[str, os.stat_result], db: StateDB) -> Sealed:
    """Remove the write bits of every manifest file that verified (`hashed`: path -> sha256 from its bytes) and
    of PULL_MANIFEST.json; re-key the hash cache for each. `walked` is the stat each file had when the local
    root was listed, before it was hashed."""
    sealed = Sealed()
    cache_rows: list[tuple[str, FileKey, str]] = []
    for entry in manifest.files:
        digest, seen = hashed.get(entry.path), walked.get(entry.path)
        if digest is None or seen is None:
            continue
        path = root.joinpath(*entry.path.split("/"))
        try:
            before, after = _drop_write_bits(path)
        except OSError as exc:
            sealed.refused.append(f"{entry.path}: {exc.strerror or exc}")
            continue
        if FileKey.of(before) != FileKey.of(seen):
            sealed.changed.append(Problem("hash_mismatch", entry.path,
                                          "written while it was being verified (its ctime moved): verify again"))
            continue
        sealed.stats[entry.path] = after
        cache_rows.append((str(path), FileKey.of(after), digest))
    try:
        _drop_write_bits(root / MANIFEST_NAME)
    except OSError as exc:
        sealed.refused.append(f"{MANIFEST_NAME}: {exc.strerror or exc}")
    db.store_hashes(cache_rows)
    return sealed


def _drop_write_bits(path: Path) -> tuple[os.stat_result, os.stat_result]:
    """The file's stat before and after its write bits are removed, both through one descriptor opened without
    following a link (a link swapped in is never chmodded through). A file that is read-only already is left
    untouched, so verifying twice does not move its ctime."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise OSError(f"{path.name}: not a regular file")
        if before.st_mode & WRITE_BITS:
            os.fchmod(fd, stat.S_IMODE(before.st_mode) & ~WRITE_BITS)
        return before, os.fstat(fd)
    finally:
        os.close(fd)
