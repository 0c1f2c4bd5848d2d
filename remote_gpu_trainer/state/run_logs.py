"""What following a run's log left behind: where reading stopped, the metric series parsed from it, and the
signature findings (one row per signature, repeats bump a count)."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from remote_gpu_trainer.audits.log.samples import Sample, severity_rank
from remote_gpu_trainer.state.store import Store


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



class RunLogTables(Store):
    """The `log_cursors`, `metric_samples` and `log_findings` tables."""

    def log_cursor(self, run_id: str) -> LogCursor:
        row = self._one("SELECT offset, tail, line_no FROM log_cursors WHERE run_id = ?",
                        (run_id,))
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
        rows = self._all("SELECT DISTINCT key FROM metric_samples WHERE run_id = ? ORDER BY key",
                         (run_id,))
        return [r[0] for r in rows]

    def metric_sample_count(self, run_id: str) -> int:
        return int(self._one("SELECT COUNT(*) FROM metric_samples WHERE run_id = ?", (run_id,))[0])

    def metric_counts(self, run_id: str, from_seq: int = 0) -> dict[str, int]:
        """Stored rows per key from `from_seq` on (a restarted thinner resumes from them)."""
        rows = self._all("SELECT key, COUNT(*) FROM metric_samples WHERE run_id = ? AND seq >= ?"
                                  " GROUP BY key", (run_id, from_seq))
        return {str(key): int(count) for key, count in rows}

    def metric_sample_seq(self, run_id: str, ordinal: int) -> int | None:
        """The row id of the run's `ordinal`-th stored sample (0-based), in storing order."""
        row = self._one("SELECT seq FROM metric_samples WHERE run_id = ? ORDER BY seq LIMIT 1 OFFSET ?",
                        (run_id, ordinal))
        return int(row[0]) if row else None

    def metric_samples(self, run_id: str, key: str, *, first: int | None = None, last: int | None = None,
                       max_points: int | None = None, from_seq: int = 0) -> list[Sample]:
        """The series in arrival order: the oldest `first` or newest `last` samples, or the whole run thinned
        to about `max_points` evenly spaced samples (keeping the newest) so a chart never loads a million rows."""
        base = ("SELECT t, step, epoch, key, value, source, approx, unit FROM metric_samples"
                " WHERE run_id = ? AND key = ? AND seq >= ?")
        if first is not None:
            rows = self._all(base + " ORDER BY seq LIMIT ?", (run_id, key, from_seq, first))
        elif last is not None:
            rows = self._all(base + " ORDER BY seq DESC LIMIT ?", (run_id, key, from_seq, last))
            rows.reverse()
        else:
            rows = self._all(base + " ORDER BY seq", (run_id, key, from_seq))
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
        rows = self._all(
            "SELECT signature, severity, count, first_t, last_t, evidence, last_evidence, line_no, status, note"
            " FROM log_findings WHERE run_id = ? ORDER BY signature", (run_id,))
        return [LogFinding(*r) for r in rows]

    def acknowledge_log_finding(self, run_id: str, signature: str, note: str) -> bool:
        with self._tx() as conn:
            cursor = conn.execute("UPDATE log_findings SET status = 'acknowledged', note = ?"
                                  " WHERE run_id = ? AND signature = ?", (note, run_id, signature))
        return cursor.rowcount > 0
