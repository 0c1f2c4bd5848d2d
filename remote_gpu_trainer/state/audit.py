"""The audit catalogue's tables (docs/verify.md §3): finding records with their lifecycle, audit runs, model probe
answers. The tables keep their `verify_*` names: a schema is a contract (state/migrations.py).

A finding record is keyed by (check, subject); its status moves open -> acknowledged | waived | fixed and back
(services/audit/findings.py decides the moves, here they are only stored). `body` holds what the record shows but no
query selects on: values, evidence, claims, the check's name, kind, fix and integrity class.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from remote_gpu_trainer.clock import parse_iso
from remote_gpu_trainer.state.store import Store

_COLUMNS = ("seq, check_id, subject, severity, status, scope, message, disclosure, note, body, fingerprint, "
            "first_seen, last_seen, status_changed_at, status_by, reopened_reason")


@dataclass(frozen=True)
class FindingRecord:
    """One stored finding record, keyed by (check, subject), with its lifecycle status and who moved it last; every
    face shows findings from these."""

    seq: int
    check: str
    subject: str
    severity: str
    status: str  # open | acknowledged | fixed | waived
    scope: str  # subject | check
    message: str
    disclosure: str
    note: str
    body: Mapping[str, Any]
    fingerprint: str
    first_seen: datetime
    last_seen: datetime
    status_changed_at: datetime
    status_by: str  # user | auto
    reopened_reason: str | None = None

    @property
    def id(self) -> str:
        """The id every face names it by (`F-000041`)."""
        return f"F-{self.seq:06d}"


@dataclass(frozen=True)
class FindingWrite:
    """The fields of a record as the lifecycle writes them (first_seen is set on insert only)."""

    check: str
    subject: str
    severity: str
    status: str
    message: str
    fingerprint: str
    body: Mapping[str, Any] = field(default_factory=dict)
    scope: str = "subject"
    disclosure: str = ""
    note: str = ""
    status_by: str = "auto"
    reopened_reason: str | None = None
    status_changed: bool = True


@dataclass(frozen=True)
class AuditRecord:
    """One stored audit run: when it ran, the digest of the inputs it read (audit_if_changed compares it) and each
    check's answer."""

    seq: int
    at: datetime
    inputs_sha256: str
    results: list[dict[str, Any]]


def _record(row: tuple[Any, ...]) -> FindingRecord:
    return FindingRecord(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], json.loads(row[9]),
                         row[10], parse_iso(row[11]), parse_iso(row[12]), parse_iso(row[13]), row[14], row[15])


class AuditTables(Store):
    """The `verify_findings`, `verify_audits` and `probe_records` tables (the catalogue's findings, its audit runs
    and the model probes' answers)."""

    def finding_records(self) -> list[FindingRecord]:
        rows = self._all(f"SELECT {_COLUMNS} FROM verify_findings ORDER BY seq")
        return [_record(r) for r in rows]

    def finding_record(self, finding_id: str) -> FindingRecord | None:
        """A record by its `F-000041` id (or the bare number)."""
        digits = finding_id.upper().removeprefix("F-")
        if not digits.isdigit():
            return None
        row = self._one(f"SELECT {_COLUMNS} FROM verify_findings WHERE seq = ?", (int(digits),))
        return _record(row) if row else None

    def write_finding(self, write: FindingWrite) -> FindingRecord:
        """Insert or update the record of (check, subject); `status_changed_at` moves only with the status."""
        now = self._now()
        body = json.dumps(dict(write.body), sort_keys=True, ensure_ascii=False, default=str)
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO verify_findings (check_id, subject, severity, status, scope, message, disclosure, note, "
                "body, fingerprint, first_seen, last_seen, status_changed_at, status_by, reopened_reason) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (check_id, subject) DO UPDATE SET severity = excluded.severity, "
                "status = excluded.status, scope = excluded.scope, message = excluded.message, "
                "disclosure = excluded.disclosure, note = excluded.note, body = excluded.body, "
                "fingerprint = excluded.fingerprint, last_seen = excluded.last_seen, "
                "status_changed_at = CASE WHEN ? THEN excluded.status_changed_at ELSE status_changed_at END, "
                "status_by = excluded.status_by, reopened_reason = excluded.reopened_reason",
                (write.check, write.subject, write.severity, write.status, write.scope, write.message,
                 write.disclosure, write.note, body, write.fingerprint, now, now, now, write.status_by,
                 write.reopened_reason, 1 if write.status_changed else 0))
            row = conn.execute(f"SELECT {_COLUMNS} FROM verify_findings WHERE check_id = ? AND subject = ?",
                               (write.check, write.subject)).fetchone()
        return _record(row)

    # -- audit runs ------------------------------------------------------------------------------------
    def add_catalogue_audit(self, inputs_sha256: str, results: list[dict[str, Any]]) -> None:
        with self._tx() as conn:
            conn.execute("INSERT INTO verify_audits (at, inputs_sha256, results) VALUES (?, ?, ?)",
                         (self._now(), inputs_sha256, json.dumps(results, sort_keys=True, default=str)))

    def last_catalogue_audit(self) -> AuditRecord | None:
        row = self._one(
            "SELECT seq, at, inputs_sha256, results FROM verify_audits ORDER BY seq DESC LIMIT 1")
        return AuditRecord(row[0], parse_iso(row[1]), row[2], json.loads(row[3])) if row else None

    # -- probe answers ---------------------------------------------------------------------------------
    def add_probe_record(self, check: str, subject: str, output: Mapping[str, Any]) -> None:
        with self._tx() as conn:
            conn.execute("INSERT INTO probe_records (at, check_id, subject, output) VALUES (?, ?, ?, ?)",
                         (self._now(), check, subject, json.dumps(dict(output), sort_keys=True)))

    def probe_records(self) -> dict[tuple[str, str], dict[str, Any]]:
        """The newest answer per (check, subject)."""
        rows = self._all("SELECT check_id, subject, output FROM probe_records ORDER BY seq")
        return {(r[0], r[1]): json.loads(r[2]) for r in rows}
