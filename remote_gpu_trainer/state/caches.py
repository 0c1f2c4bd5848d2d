"""Caches the gate and the dashboards may rebuild at any time: file hashes keyed on what changes when the
bytes do, and checkpoint load-check verdicts keyed on the checkpoint's hash (their table keeps its name,
`checkpoint_probes`: a schema is a contract)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from remote_gpu_trainer.state.store import Store


@dataclass(frozen=True)
class FileKey:
    """What the hash cache is keyed on: a file whose bytes changed has a different key (ctime moves on
    every write and cannot be set back by the user, unlike mtime)."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int

    @classmethod
    def of(cls, info: os.stat_result) -> FileKey:
        return cls(info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)



class CacheTables(Store):
    """The `file_hashes` and `checkpoint_probes` (load-check verdicts) tables."""

    def cached_hash(self, path: str, key: FileKey) -> str | None:
        """A hash for dashboards and the gate's freshness check; never for a verdict (verify re-hashes)."""
        row = self._one(
            "SELECT sha256 FROM file_hashes WHERE path = ? AND size = ? AND mtime_ns = ? AND ctime_ns = ?"
            " AND inode = ?", (path, key.size, key.mtime_ns, key.ctime_ns, key.inode),
        )
        return str(row[0]) if row else None

    def store_hash(self, path: str, key: FileKey, sha256: str) -> None:
        self.store_hashes([(path, key, sha256)])

    def store_hashes(self, rows: Sequence[tuple[str, FileKey, str]]) -> None:
        """Many cache entries in one transaction (a pull of 2,000 files commits once, not 2,000 times)."""
        with self._tx() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO file_hashes (path, size, mtime_ns, ctime_ns, inode, sha256)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(path, key.size, key.mtime_ns, key.ctime_ns, key.inode, sha256) for path, key, sha256 in rows],
            )

    def cached_load_check(self, sha256: str, key: str) -> dict[str, Any] | None:
        row = self._one(
            "SELECT result FROM checkpoint_probes WHERE sha256 = ? AND probe_key = ?", (sha256, key)
        )
        return json.loads(row[0]) if row else None

    def store_load_check(self, sha256: str, key: str, result: dict[str, Any]) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO checkpoint_probes (sha256, probe_key, result) VALUES (?, ?, ?)",
                (sha256, key, json.dumps(result, sort_keys=True)),
            )
