"""`.rgt/state.db`: the project's memory, in SQLite with WAL so it survives kill -9.

The event log is append-only (triggers refuse UPDATE and DELETE): every approval and cost-affecting action
is written here, with its time and what the screen said, *before* the provider call it authorises.
The other tables are caches or samples that later code may rebuild; none of them holds a secret.

`StateDB` is one handle over every table: each table's SQL lives in its own module (events, billing, evidence,
caches, launches, checks, run_logs, audit) as a class over `Store`, and `StateDB` combines them, so a caller holds one
handle while a reader of one table opens one module. The schema and its upgrade ladder are in migrations.py.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from remote_gpu_trainer.clock import Clock, utc_now
from remote_gpu_trainer.errors import StateError
from remote_gpu_trainer.state.approvals import ApprovalTables
from remote_gpu_trainer.state.audit import AuditTables
from remote_gpu_trainer.state.billing import BillingTables
from remote_gpu_trainer.state.caches import CacheTables
from remote_gpu_trainer.state.checks import CheckTables
from remote_gpu_trainer.state.events import EventLog
from remote_gpu_trainer.state.evidence import EvidenceTables
from remote_gpu_trainer.state.launches import LaunchTables
from remote_gpu_trainer.state.migrations import migrate
from remote_gpu_trainer.state.run_logs import RunLogTables


class StateDB(EventLog, BillingTables, EvidenceTables, CacheTables, LaunchTables, CheckTables, RunLogTables,
              AuditTables, ApprovalTables):
    """Thin typed access to the state database; one connection per process, short transactions."""

    def __init__(self, path: Path, clock: Clock = utc_now, *, read_only: bool = False) -> None:
        """Open (creating and upgrading when writable) the database at `path`.

        `read_only` is for a project folder rgt may not write to (the read-only verbs still work there):
        the database is copied into memory, so what those verbs record (snapshots, samples) goes nowhere.
        A damaged database, or one written by a newer rgt, is a StateError naming the path.
        """
        self.path = path
        self.clock = clock
        self.read_only = read_only
        self._lock = threading.RLock()
        try:
            self._conn = self._open_read_only(path) if read_only else self._open_writable(path)
        except sqlite3.DatabaseError as exc:
            raise StateError(f"{path}: the state database is damaged or unreadable ({exc}): move it aside "
                             "to start a new one (the teardown gate stays closed until then)") from None

    @staticmethod
    def _open_writable(path: Path) -> sqlite3.Connection:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            migrate(conn, path)
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _open_read_only(path: Path) -> sqlite3.Connection:
        memory = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        if path.exists():
            uri = path.resolve().as_uri()
            try:
                source = sqlite3.connect(f"{uri}?mode=ro", uri=True)
                source.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.OperationalError:  # a WAL database in a folder nobody may write: no -shm to share
                source = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True)
            try:
                source.backup(memory)
            finally:
                source.close()
        migrate(memory, path)
        return memory

    def close(self) -> None:
        with self._lock:  # never under a worker thread's open transaction
            self._conn.close()

    def twin(self) -> StateDB:
        """A second handle for a worker thread: its own connection, or this one when the database is a
        read-only copy in memory (a second copy would not see what this one records)."""
        return self if self.read_only else StateDB(self.path, self.clock)
