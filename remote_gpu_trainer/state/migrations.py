"""The schema of `.rgt/state.db` and the ladder that upgrades an older database to it.

A database is created at version 1 by `_SCHEMA` and climbs every rung of `MIGRATIONS`, so a new database and an
upgraded one are built by the same statements; one written by a newer rgt is refused, never guessed at.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from remote_gpu_trainer.errors import StateError

SCHEMA_VERSION = 6

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
    # 3 -> 4: VERIFY (docs/verify.md §3): one finding record per (check, subject) with its lifecycle, each audit
    # run's check results, and the answers of model probes (V20, V22, V27, V28).
    3: """
CREATE TABLE verify_findings (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    check_id TEXT NOT NULL,
    subject TEXT NOT NULL,
    severity TEXT NOT NULL,
    status TEXT NOT NULL,
    scope TEXT NOT NULL DEFAULT 'subject',
    message TEXT NOT NULL,
    disclosure TEXT NOT NULL DEFAULT '',
    note TEXT NOT NULL DEFAULT '',
    body TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    first_seen TEXT NOT NULL,
    last_seen TEXT NOT NULL,
    status_changed_at TEXT NOT NULL,
    status_by TEXT NOT NULL,
    reopened_reason TEXT,
    UNIQUE (check_id, subject)
);
CREATE TABLE verify_audits (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    inputs_sha256 TEXT NOT NULL,
    results TEXT NOT NULL
);
CREATE TABLE probe_records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    check_id TEXT NOT NULL,
    subject TEXT NOT NULL,
    output TEXT NOT NULL
);
CREATE INDEX probe_records_by_subject ON probe_records (check_id, subject, seq);
""",
    # 4 -> 5: a manifest adopted instead of built (docs/gate.md §2.1) keeps the run id its bytes name beside
    # its hash; NULL for every manifest rgt's own builder wrote.
    4: """
ALTER TABLE run_records ADD COLUMN adopted_run_id TEXT;
""",
    # 5 -> 6: the approval inbox (docs/agents.md): an agent's requests with the plan a person approves, the
    # spending allowances a person granted and each use of one. Every change of a request is also an event.
    5: """
CREATE TABLE agent_requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    filed_at TEXT NOT NULL,
    kind TEXT NOT NULL,
    filed_by TEXT NOT NULL,
    run_id TEXT,
    instance TEXT,
    why TEXT NOT NULL,
    params TEXT NOT NULL,
    plan TEXT NOT NULL,
    binding TEXT NOT NULL,
    state TEXT NOT NULL,
    state_at TEXT NOT NULL,
    decided_by TEXT,
    outcome TEXT NOT NULL DEFAULT '',
    allowance_id INTEGER
);
CREATE INDEX agent_requests_by_state ON agent_requests (state, seq);
CREATE TABLE allowances (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    granted_at TEXT NOT NULL,
    granted_by TEXT NOT NULL,
    max_price_per_hour REAL NOT NULL,
    total REAL NOT NULL,
    expires_at TEXT NOT NULL,
    revoked_at TEXT,
    revoked_by TEXT
);
CREATE TABLE allowance_uses (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    allowance_seq INTEGER NOT NULL,
    request_seq INTEGER NOT NULL,
    at TEXT NOT NULL,
    amount REAL NOT NULL
);
CREATE TRIGGER allowance_uses_no_update BEFORE UPDATE ON allowance_uses
    BEGIN SELECT RAISE(ABORT, 'allowance uses are append-only'); END;
CREATE TRIGGER allowance_uses_no_delete BEFORE DELETE ON allowance_uses
    BEGIN SELECT RAISE(ABORT, 'allowance uses are append-only'); END;
""",
}
assert sorted(MIGRATIONS) == list(range(1, SCHEMA_VERSION)), "one rung per schema version"


def migrate(conn: sqlite3.Connection, path: Path) -> None:
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
