"""`.rgt/state.db`: the project's memory, in SQLite with WAL so it survives kill -9.

The event log is append-only (triggers refuse UPDATE and DELETE): every approval and cost-affecting action
is written here, with its time and what the screen said, *before* the provider call it authorises.
The other tables are caches or samples that later code may rebuild; none of them holds a secret.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.log.samples import Sample, severity_rank
from remote_gpu_trainer.clock import Clock, iso_offset, parse_iso, utc_now
from remote_gpu_trainer.errors import StateError

SCHEMA_VERSION = 3

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    run_id TEXT,
    instance TEXT,
    actor TEXT NOT NULL,
    summary TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
CREATE TABLE IF NOT EXISTS instance_snapshots (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    instance TEXT NOT NULL,
    provider TEXT NOT NULL,
    provider_id TEXT,
    state TEXT NOT NULL,
    price_per_hour REAL,
    price_source TEXT NOT NULL,
    storage_per_hour REAL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS instance_snapshots_by_instance ON instance_snapshots (instance, seq);
CREATE TABLE IF NOT EXISTS meter_samples (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    instance TEXT NOT NULL,
    state TEXT NOT NULL,
    burn_per_hour REAL NOT NULL,
    cost_so_far REAL NOT NULL,
    estimate INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS verification_records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    run_id TEXT NOT NULL,
    ok INTEGER NOT NULL,
    manifest_sha256 TEXT,
    errors TEXT NOT NULL,
    files TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS file_hashes (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    sha256 TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoint_probes (
    sha256 TEXT NOT NULL,
    probe_key TEXT NOT NULL,
    result TEXT NOT NULL,
    PRIMARY KEY (sha256, probe_key)
);
CREATE TABLE IF NOT EXISTS run_records (
    run_id TEXT PRIMARY KEY,
    manifest_sha256 TEXT,
    manifest_built_at TEXT
);
CREATE TABLE IF NOT EXISTS launches (
    run_id TEXT PRIMARY KEY,
    instance TEXT NOT NULL,
    at TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    run_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    rows TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS checklist (
    run_id TEXT NOT NULL,
    item_id TEXT NOT NULL,
    status TEXT NOT NULL,
    note TEXT NOT NULL,
    at TEXT NOT NULL,
    PRIMARY KEY (run_id, item_id)
);
CREATE TABLE IF NOT EXISTS log_cursors (
    run_id TEXT PRIMARY KEY,
    offset INTEGER NOT NULL,
    tail BLOB NOT NULL,
    line_no INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS metric_samples (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    t REAL NOT NULL,
    step INTEGER,
    epoch REAL,
    key TEXT NOT NULL,
    value REAL,
    source TEXT NOT NULL,
    approx INTEGER NOT NULL DEFAULT 0,
    unit TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS metric_samples_by_key ON metric_samples (run_id, key, seq);
CREATE TABLE IF NOT EXISTS log_findings (
    run_id TEXT NOT NULL,
    signature TEXT NOT NULL,
    severity TEXT NOT NULL,
    count INTEGER NOT NULL,
    first_t REAL NOT NULL,
    last_t REAL NOT NULL,
    evidence TEXT NOT NULL,
    last_evidence TEXT NOT NULL,
    line_no INTEGER,
    status TEXT NOT NULL DEFAULT 'open',
    note TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, signature)
);
"""

# The ladder: MIGRATIONS[n] takes a database at schema version n to n + 1, in one transaction. A database
# is created at version 1 by _SCHEMA and climbs the whole ladder, so a new database and an upgraded one
# are built by the same statements. Rungs are only ever added, never edited.
MIGRATIONS: dict[int, str] = {
    # 1 -> 2: launches become an append-only history bound to the physical box (the gate covers every run
    # ever launched on a box, also runs since removed from rgt.toml); verification records name the marker
    # they wrote and the run configuration they were made under.
    1: """
CREATE TABLE launch_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    instance TEXT NOT NULL,
    box TEXT,
    at TEXT NOT NULL,
    config TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX launch_log_by_box ON launch_log (box, seq);
INSERT INTO launch_log (run_id, instance, box, at, config, detail)
    SELECT run_id, instance, NULL, at, '{}', detail FROM launches;
CREATE TRIGGER launch_log_no_update BEFORE UPDATE ON launch_log
    BEGIN SELECT RAISE(ABORT, 'the launch log is append-only'); END;
CREATE TRIGGER launch_log_no_delete BEFORE DELETE ON launch_log
    BEGIN SELECT RAISE(ABORT, 'the launch log is append-only'); END;
ALTER TABLE verification_records ADD COLUMN marker_sha256 TEXT;
ALTER TABLE verification_records ADD COLUMN config_sha256 TEXT;
ALTER TABLE verification_records ADD COLUMN config TEXT;
""",
    # 2 -> 3: the hash cache is keyed on ctime too, which no user tool can set back: bytes edited in place
    # with the mtime restored are hashed again. The old rows are a cache, so they simply go.
    2: """
DROP TABLE file_hashes;
CREATE TABLE file_hashes (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    sha256 TEXT NOT NULL
);
""",
}
assert sorted(MIGRATIONS) == list(range(1, SCHEMA_VERSION)), "one rung per schema version"


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


@dataclass(frozen=True)
class LaunchRecord:
    """One launch of a run, from the append-only launch log: on which instance entry and physical box,
    when, and the run's configuration at the time (so a run removed from rgt.toml is still covered)."""

    seq: int
    run_id: str
    instance: str
    box: str | None
    at: datetime
    config: dict[str, Any]
    detail: dict[str, Any]


@dataclass(frozen=True)
class VerificationRecord:
    """The outcome of one verification, as the gate compares it with the marker on disk."""

    at: datetime
    ok: bool
    manifest_sha256: str | None
    marker_sha256: str | None
    config_sha256: str | None
    config: dict[str, Any]
    errors: list[dict[str, Any]]
    files: list[dict[str, Any]]


@dataclass(frozen=True)
class Event:
    seq: int
    at: datetime
    kind: str
    run_id: str | None
    instance: str | None
    actor: str
    summary: str
    detail: dict[str, Any]


@dataclass(frozen=True)
class Snapshot:
    at: datetime
    instance: str
    provider: str
    provider_id: str | None
    state: str
    price_per_hour: float | None
    price_source: str
    storage_per_hour: float | None


@dataclass(frozen=True)
class LogCursor:
    """Where following a run's log stopped: the byte offset, the bytes just before it (to notice a
    replaced file whose size grew past the offset) and the number of lines read so far."""

    offset: int = 0
    tail: bytes = b""
    line_no: int = 0


@dataclass(frozen=True)
class LogFinding:
    """One signature row's alert for one run: repeats bump `count`, never add rows."""

    signature: str
    severity: str
    count: int
    first_t: float
    last_t: float
    evidence: str
    last_evidence: str
    line_no: int | None
    status: str = "open"  # open | acknowledged
    note: str = ""


@dataclass(frozen=True)
class ChecklistTick:
    item_id: str
    status: str
    note: str
    at: datetime


class StateDB:
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
            _migrate(conn, path)
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
        _migrate(memory, path)
        return memory
    def close(self) -> None:
        with self._lock:  # never under a worker thread's open transaction
            self._conn.close()

    def twin(self) -> StateDB:
        """A second handle for a worker thread: its own connection, or this one when the database is a
        read-only copy in memory (a second copy would not see what this one records)."""
        return self if self.read_only else StateDB(self.path, self.clock)

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

    def _now(self) -> str:
        return iso_offset(self.clock())

    # -- event log -----------------------------------------------------------------------------
    def append_event(self, kind: str, summary: str, *, run_id: str | None = None,
                     instance: str | None = None, actor: str = "rgt",
                     detail: dict[str, Any] | None = None, at: datetime | None = None) -> Event:
        stamp = iso_offset(at) if at is not None else self._now()
        body = json.dumps(detail or {}, sort_keys=True, ensure_ascii=False)
        with self._tx() as conn:
            cursor = conn.execute(
                "INSERT INTO events (at, kind, run_id, instance, actor, summary, detail)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (stamp, kind, run_id, instance, actor, summary, body),
            )
        seq = cursor.lastrowid
        assert seq is not None
        return Event(seq, parse_iso(stamp), kind, run_id, instance, actor, summary, detail or {})

    def launched_provider_id(self, instance: str) -> str | None:
        """The provider id of the box `rgt up` last rented for this instance name (rgt.toml is never rewritten)."""
        row = self._conn.execute(
            "SELECT detail FROM events WHERE instance = ? AND kind IN ('launched', 'launch_over_budget')"
            " ORDER BY seq DESC LIMIT 1", (instance,)).fetchone()
        ident = json.loads(row[0]).get("provider_id") if row else None
        return str(ident) if ident else None

    def events(self, *, run_id: str | None = None, kind: str | None = None,
               limit: int | None = None) -> list[Event]:
        query = "SELECT seq, at, kind, run_id, instance, actor, summary, detail FROM events WHERE 1=1"
        args: list[Any] = []
        if run_id is not None:
            query += " AND run_id = ?"
            args.append(run_id)
        if kind is not None:
            query += " AND kind = ?"
            args.append(kind)
        query += " ORDER BY seq"
        if limit is not None:
            query = f"SELECT * FROM ({query.replace('ORDER BY seq', 'ORDER BY seq DESC')} LIMIT ?) ORDER BY seq"
            args.append(limit)
        rows = self._conn.execute(query, args).fetchall()
        return [Event(r[0], parse_iso(r[1]), r[2], r[3], r[4], r[5], r[6], json.loads(r[7])) for r in rows]

    # -- instance snapshots --------------------------------------------------------------------
    def add_snapshot(self, snapshot: Snapshot, detail: dict[str, Any] | None = None) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO instance_snapshots (at, instance, provider, provider_id, state, price_per_hour,"
                " price_source, storage_per_hour, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (iso_offset(snapshot.at), snapshot.instance, snapshot.provider, snapshot.provider_id,
                 snapshot.state, snapshot.price_per_hour, snapshot.price_source, snapshot.storage_per_hour,
                 json.dumps(detail or {}, sort_keys=True)),
            )

    def snapshots(self, instance: str) -> list[Snapshot]:
        rows = self._conn.execute(
            "SELECT at, instance, provider, provider_id, state, price_per_hour, price_source,"
            " storage_per_hour FROM instance_snapshots WHERE instance = ? ORDER BY seq",
            (instance,),
        ).fetchall()
        return [Snapshot(parse_iso(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7]) for r in rows]

    def last_snapshot(self, instance: str) -> Snapshot | None:
        row = self._conn.execute(
            "SELECT at, instance, provider, provider_id, state, price_per_hour, price_source,"
            " storage_per_hour FROM instance_snapshots WHERE instance = ? ORDER BY seq DESC LIMIT 1",
            (instance,),
        ).fetchone()
        if row is None:
            return None
        return Snapshot(parse_iso(row[0]), row[1], row[2], row[3], row[4], row[5], row[6], row[7])

    # -- meter samples -------------------------------------------------------------------------
    def add_meter_sample(self, instance: str, state: str, burn_per_hour: float, cost_so_far: float,
                         estimate: bool = False) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO meter_samples (at, instance, state, burn_per_hour, cost_so_far, estimate)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (self._now(), instance, state, burn_per_hour, cost_so_far, int(estimate)),
            )

    def last_meter_sample_at(self, instance: str) -> datetime | None:
        row = self._conn.execute(
            "SELECT at FROM meter_samples WHERE instance = ? ORDER BY seq DESC LIMIT 1", (instance,)
        ).fetchone()
        return parse_iso(row[0]) if row else None

    def meter_sample_count(self, instance: str) -> int:
        row = self._conn.execute("SELECT COUNT(*) FROM meter_samples WHERE instance = ?", (instance,))
        return int(row.fetchone()[0])

    # -- verification --------------------------------------------------------------------------
    def add_verification(self, run_id: str, ok: bool, manifest_sha256: str | None,
                         errors: list[dict[str, str]], files: list[dict[str, Any]], *,
                         marker_sha256: str | None = None, config_sha256: str | None = None,
                         config: dict[str, Any] | None = None) -> None:
        """One verification's outcome; a successful one names the marker bytes it wrote and the run
        configuration it was made under, so a forged or edited marker, or an edited rgt.toml, is noticed."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO verification_records (at, run_id, ok, manifest_sha256, errors, files, marker_sha256,"
                " config_sha256, config) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self._now(), run_id, int(ok), manifest_sha256, json.dumps(errors), json.dumps(files),
                 marker_sha256, config_sha256, json.dumps(config or {}, sort_keys=True)),
            )

    def last_verification(self, run_id: str) -> dict[str, Any] | None:
        record = self.last_verification_record(run_id)
        if record is None:
            return None
        return {"at": record.at, "ok": record.ok, "manifest_sha256": record.manifest_sha256,
                "errors": record.errors, "files": record.files}

    def last_verification_record(self, run_id: str) -> VerificationRecord | None:
        row = self._conn.execute(
            "SELECT at, ok, manifest_sha256, marker_sha256, config_sha256, config, errors, files"
            " FROM verification_records WHERE run_id = ? ORDER BY seq DESC LIMIT 1", (run_id,),
        ).fetchone()
        if row is None:
            return None
        return VerificationRecord(at=parse_iso(row[0]), ok=bool(row[1]), manifest_sha256=row[2],
                                  marker_sha256=row[3], config_sha256=row[4], config=json.loads(row[5] or "{}"),
                                  errors=json.loads(row[6]), files=json.loads(row[7]))

    # -- caches: file hashes and checkpoint probes --------------------------------------------------
    def cached_hash(self, path: str, key: FileKey) -> str | None:
        """A hash for dashboards and the gate's freshness check; never for a verdict (verify re-hashes)."""
        row = self._conn.execute(
            "SELECT sha256 FROM file_hashes WHERE path = ? AND size = ? AND mtime_ns = ? AND ctime_ns = ?"
            " AND inode = ?", (path, key.size, key.mtime_ns, key.ctime_ns, key.inode),
        ).fetchone()
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

    def cached_probe(self, sha256: str, probe_key: str) -> dict[str, Any] | None:
        row = self._conn.execute(
            "SELECT result FROM checkpoint_probes WHERE sha256 = ? AND probe_key = ?", (sha256, probe_key)
        ).fetchone()
        return json.loads(row[0]) if row else None

    def store_probe(self, sha256: str, probe_key: str, result: dict[str, Any]) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO checkpoint_probes (sha256, probe_key, result) VALUES (?, ?, ?)",
                (sha256, probe_key, json.dumps(result, sort_keys=True)),
            )

    # -- run records and launches -------------------------------------------------------------------
    def record_manifest(self, run_id: str, manifest_sha256: str) -> None:
        """The manifest's hash as the builder printed it (trust boundary 1), stamped with the real time in
        microseconds like the launch log: the gate asks whether the manifest was built after the last launch."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO run_records (run_id, manifest_sha256, manifest_built_at) VALUES (?, ?, ?)"
                " ON CONFLICT(run_id) DO UPDATE SET manifest_sha256 = excluded.manifest_sha256,"
                " manifest_built_at = excluded.manifest_built_at",
                (run_id, manifest_sha256, utc_now().isoformat(timespec="microseconds")),
            )

    def manifest_built_at(self, run_id: str) -> datetime | None:
        row = self._conn.execute("SELECT manifest_built_at FROM run_records WHERE run_id = ?", (run_id,)).fetchone()
        return parse_iso(row[0]) if row and row[0] else None

    def recorded_manifest(self, run_id: str) -> str | None:
        row = self._conn.execute(
            "SELECT manifest_sha256 FROM run_records WHERE run_id = ?", (run_id,)
        ).fetchone()
        return str(row[0]) if row and row[0] else None

    def record_launch(self, run_id: str, instance: str, detail: dict[str, Any], *, box: str | None = None,
                      config: dict[str, Any] | None = None) -> None:
        """The latest launch per run (for re-attaching) and, append-only, every launch with its box.

        The log's stamp is the real time with microseconds, like the marker's `verified_at_utc`, because
        the gate orders the two: a launch after the verification is not covered by it."""
        now = self._now()
        stamp = utc_now().isoformat(timespec="microseconds")
        with self._tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO launches (run_id, instance, at, detail) VALUES (?, ?, ?, ?)",
                (run_id, instance, now, json.dumps(detail, sort_keys=True)),
            )
            conn.execute(
                "INSERT INTO launch_log (run_id, instance, box, at, config, detail) VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, instance, box, stamp, json.dumps(config or {}, sort_keys=True),
                 json.dumps(detail, sort_keys=True)),
            )

    def launch(self, run_id: str) -> dict[str, Any] | None:
        row = self._conn.execute(
            "SELECT instance, at, detail FROM launches WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None:
            return None
        detail = json.loads(row[2])
        detail.update({"instance": row[0], "at": row[1]})
        return dict(detail)

    def launch_history(self, run_id: str | None = None) -> list[LaunchRecord]:
        """Every launch ever recorded (of one run, or of all), oldest first."""
        query = "SELECT seq, run_id, instance, box, at, config, detail FROM launch_log"
        rows = self._conn.execute(query + (" WHERE run_id = ? ORDER BY seq" if run_id else " ORDER BY seq"),
                                  (run_id,) if run_id else ()).fetchall()
        return [LaunchRecord(r[0], r[1], r[2], r[3], parse_iso(r[4]), json.loads(r[5]), json.loads(r[6]))
                for r in rows]

    # -- audit records (phase-0 environment audit, ...) --------------------------------------------
    def add_audit(self, run_id: str, kind: str, rows: list[dict[str, Any]]) -> None:
        with self._tx() as conn:
            conn.execute("INSERT INTO audit_records (at, run_id, kind, rows) VALUES (?, ?, ?, ?)",
                         (self._now(), run_id, kind, json.dumps(rows, sort_keys=True)))

    def last_audit(self, run_id: str, kind: str) -> tuple[datetime, list[dict[str, Any]]] | None:
        row = self._conn.execute(
            "SELECT at, rows FROM audit_records WHERE run_id = ? AND kind = ? ORDER BY seq DESC LIMIT 1",
            (run_id, kind),
        ).fetchone()
        return (parse_iso(row[0]), list(json.loads(row[1]))) if row else None

    # -- checklist -----------------------------------------------------------------------------
    def set_tick(self, run_id: str, item_id: str, status: str, note: str) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO checklist (run_id, item_id, status, note, at) VALUES (?, ?, ?, ?, ?)",
                (run_id, item_id, status, note, self._now()),
            )

    def ticks(self, run_id: str) -> dict[str, ChecklistTick]:
        rows = self._conn.execute(
            "SELECT item_id, status, note, at FROM checklist WHERE run_id = ?", (run_id,)
        ).fetchall()
        return {r[0]: ChecklistTick(r[0], r[1], r[2], parse_iso(r[3])) for r in rows}

    # -- followed logs: cursor, metric series, findings ----------------------------------------------
    def log_cursor(self, run_id: str) -> LogCursor:
        row = self._conn.execute("SELECT offset, tail, line_no FROM log_cursors WHERE run_id = ?",
                                 (run_id,)).fetchone()
        return LogCursor(int(row[0]), bytes(row[1]), int(row[2])) if row else LogCursor()

    def save_log_progress(self, run_id: str, cursor: LogCursor, samples: Sequence[Sample],
                          findings: Sequence[LogFinding]) -> None:
        """Cursor, samples and findings of one poll in one transaction: after a crash the log is re-read
        from the old cursor and nothing is counted twice."""
        with self._tx() as conn:
            conn.execute("INSERT OR REPLACE INTO log_cursors (run_id, offset, tail, line_no) VALUES (?, ?, ?, ?)",
                         (run_id, cursor.offset, cursor.tail, cursor.line_no))
            if samples:
                conn.executemany(
                    "INSERT INTO metric_samples (run_id, t, step, epoch, key, value, source, approx, unit)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(run_id, s.t, s.step, s.epoch, s.key, s.value, s.source, int(s.approx_step), s.unit)
                     for s in samples],
                )
            for finding in findings:
                self._upsert_finding(conn, run_id, finding)

    def reset_log_state(self, run_id: str, offset: int) -> None:
        """A new launch: its log lines start at `offset`; the previous launch's series and findings go."""
        with self._tx() as conn:
            conn.execute("DELETE FROM metric_samples WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM log_findings WHERE run_id = ?", (run_id,))
            conn.execute("INSERT OR REPLACE INTO log_cursors (run_id, offset, tail, line_no) VALUES (?, ?, ?, ?)",
                         (run_id, offset, b"", 0))

    def metric_keys(self, run_id: str) -> list[str]:
        rows = self._conn.execute("SELECT DISTINCT key FROM metric_samples WHERE run_id = ? ORDER BY key",
                                  (run_id,)).fetchall()
        return [r[0] for r in rows]

    def metric_sample_count(self, run_id: str) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM metric_samples WHERE run_id = ?", (run_id,)).fetchone()[0])

    def metric_sample_seq(self, run_id: str, ordinal: int) -> int | None:
        """The row id of the run's `ordinal`-th stored sample (0-based), in storing order."""
        row = self._conn.execute("SELECT seq FROM metric_samples WHERE run_id = ? ORDER BY seq LIMIT 1 OFFSET ?",
                                 (run_id, ordinal)).fetchone()
        return int(row[0]) if row else None

    def metric_samples(self, run_id: str, key: str, *, first: int | None = None, last: int | None = None,
                       max_points: int | None = None, from_seq: int = 0) -> list[Sample]:
        """The series in arrival order: the oldest `first` or newest `last` samples, or the whole run thinned
        to about `max_points` evenly spaced samples (keeping the newest) so a chart never loads a million rows."""
        base = ("SELECT t, step, epoch, key, value, source, approx, unit FROM metric_samples"
                " WHERE run_id = ? AND key = ? AND seq >= ?")
        if first is not None:
            rows = self._conn.execute(base + " ORDER BY seq LIMIT ?", (run_id, key, from_seq, first)).fetchall()
        elif last is not None:
            rows = self._conn.execute(base + " ORDER BY seq DESC LIMIT ?", (run_id, key, from_seq, last)).fetchall()
            rows.reverse()
        else:
            rows = self._conn.execute(base + " ORDER BY seq", (run_id, key, from_seq)).fetchall()
            if max_points is not None and len(rows) > max_points:
                stride = -(-len(rows) // max_points)
                rows = rows[len(rows) - 1 - ((len(rows) - 1) // stride) * stride::stride]
        # SQLite stores NaN as NULL (infinities survive as REAL): NULL reads back as the NaN it was
        return [Sample(r[0], r[1], r[2], r[3], math.nan if r[4] is None else r[4], r[5], bool(r[6]), r[7])
                for r in rows]

    @staticmethod
    def _upsert_finding(conn: sqlite3.Connection, run_id: str, finding: LogFinding) -> None:
        """Counts and the latest evidence change; an acknowledgement survives unless the row got worse."""
        row = conn.execute("SELECT severity, status, note FROM log_findings WHERE run_id = ? AND signature = ?",
                           (run_id, finding.signature)).fetchone()
        status, note = finding.status, finding.note
        worse = row is not None and severity_rank(finding.severity) > severity_rank(row[0])
        if row is not None and row[1] == "acknowledged" and not worse:
            status, note = row[1], row[2]
        conn.execute(
            "INSERT OR REPLACE INTO log_findings (run_id, signature, severity, count, first_t, last_t, evidence,"
            " last_evidence, line_no, status, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, finding.signature, finding.severity, finding.count, finding.first_t, finding.last_t,
             finding.evidence, finding.last_evidence, finding.line_no, status, note),
        )

    def log_findings(self, run_id: str) -> list[LogFinding]:
        rows = self._conn.execute(
            "SELECT signature, severity, count, first_t, last_t, evidence, last_evidence, line_no, status, note"
            " FROM log_findings WHERE run_id = ? ORDER BY signature", (run_id,)).fetchall()
        return [LogFinding(*r) for r in rows]

    def acknowledge_log_finding(self, run_id: str, signature: str, note: str) -> bool:
        with self._tx() as conn:
            cursor = conn.execute("UPDATE log_findings SET status = 'acknowledged', note = ?"
                                  " WHERE run_id = ? AND signature = ?", (note, run_id, signature))
        return cursor.rowcount > 0


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring the database to SCHEMA_VERSION one rung at a time; refuse one written by a newer rgt."""
    has_meta = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
    version = 0
    if has_meta:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row and str(row[0]).isdigit() else 0
    if version > SCHEMA_VERSION:
        raise StateError(f"{path}: written by a newer rgt (state schema {version}; this rgt reads up to "
                         f"{SCHEMA_VERSION}): upgrade rgt")
    if version == 0:
        conn.executescript(_SCHEMA)
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', '1')")
        version = 1
    while version < SCHEMA_VERSION:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(MIGRATIONS[version]):
                conn.execute(statement)
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version + 1),))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        version += 1


def _statements(script: str) -> list[str]:
    """A migration script split into statements (executescript would commit the open transaction);
    sqlite3.complete_statement knows that a trigger body's semicolons do not end the CREATE TRIGGER."""
    statements: list[str] = []
    current = ""
    for line in script.strip().splitlines():
        current += line + "\n"
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    return statements
