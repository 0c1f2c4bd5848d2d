"""What every table of the state database shares: the one connection, its lock and the clock.

Each table module (events, billing, evidence, ...) is a small class over this base that `StateDB` combines, so a
caller holds one handle, `db.events()` and `db.add_snapshot()` alike, while each table's SQL lives in one module.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from remote_gpu_trainer.clock import Clock, iso_offset


class Store:
    """The connection and the write transaction; `StateDB` opens the connection and sets these."""

    _conn: sqlite3.Connection
    _lock: threading.RLock
    clock: Clock

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction at a time on this connection: worker threads (hashing during a pull, log
        digests) share it, and two BEGINs on one connection would collide."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """One row of a read, under the connection's lock: worker threads share the connection, and a read
        racing a `close()` on another thread (a screen closing while its refresh worker still reads) freed
        the statement under it, a segfault in CI; after `close()` a read is sqlite3's ProgrammingError."""
        with self._lock:
            return self._conn.execute(sql, params).fetchone()

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Every row of a read, under the connection's lock (see `_one`)."""
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def _now(self) -> str:
        return iso_offset(self.clock())
