"""Findings as every face lists them: the checklist's automatic findings, the log's signature findings and
VERIFY's finding records (their lifecycle: open, acknowledged, fixed, waived, never raised twice), with the ids
the dashboard, `rgt ack`, `rgt finding` and the report name them by.

Audits disclose, never block: a finding stays listed once acknowledged (with the note saying why), and an
acknowledged finding is not raised again for the same run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue.model import SEVERITY_RANK, CheckResult, Finding
from remote_gpu_trainer.audits.catalogue.runner import specs
from remote_gpu_trainer.errors import ConfigError, RgtError
from remote_gpu_trainer.services.watch.monitors import catalogue
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.audit import FindingRecord, FindingWrite
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.views import ChecklistItem, FindingView

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session


def checklist_findings(run_id: str, items: Iterable[ChecklistItem]) -> tuple[FindingView, ...]:
    """An automatic checklist item that found something, as a finding named `RUN:ITEM` (VERIFY checks are
    listed by their own finding records instead)."""
    return tuple(
        FindingView(id=f"{run_id}:{item.id}", check=item.id, severity="warn", status="open",
                    message=f"{item.title}: {item.note}")
        for item in items if item.kind == "auto" and item.status == "findings" and item.id.startswith("A")
    )


def log_findings(session: Session, run_id: str) -> tuple[FindingView, ...]:
    """The log's signature findings as the report and the checklist panel show them, named by signature."""
    findings = session.db.log_findings(run_id)
    if not findings:
        return ()  # the catalogue (parsed and checked: ~20 ms) is read only to word findings there are
    rows = catalogue(session).rows
    views = []
    for f in findings:
        row = rows.get(f.signature)
        cause = row.cause if row is not None else "user signature"
        where = f"line {f.line_no}: " if f.line_no else ""
        views.append(FindingView(
            id=f.signature, check=f"log:{row.source if row is not None else 'log'}", severity=f.severity,
            status=f.status, message=f"{cause} ({where}{f.evidence[:160]})",
            fix=row.fix if row is not None else "", count=f.count, evidence=f.last_evidence))
    return tuple(views)


def acknowledge(session: Session, run_id: str, signature: str, note: str, actor: str = "user") -> None:
    """Acknowledge a log finding with the note saying why; logged as an event."""
    if not note.strip():
        raise RgtError("an acknowledgement needs a note saying why")
    if not session.db.acknowledge_log_finding(run_id, signature, note.strip()):
        raise RgtError(f"run {run_id} has no finding {signature}")
    events.finding_acknowledged(session.db, run_id=run_id, signature=signature, note=note.strip(), actor=actor)


# -- VERIFY finding records (docs/verify.md §3) -------------------------------------------------------------------

USER_STATUSES = ("acknowledged", "waived", "fixed", "open")


@dataclass(frozen=True)
class LifecycleOutcome:
    """What one audit did to the records: `raised` are new or reopened open records (the panel badge and the
    report's "new"); `records` every record the audit touched."""

    raised: tuple[FindingRecord, ...]
    fixed: tuple[FindingRecord, ...]
    records: tuple[FindingRecord, ...]


def apply_results(db: StateDB, results: Sequence[CheckResult], *, actor: str = "rgt") -> LifecycleOutcome:
    """The no-re-raise rule (docs/verify.md §3), per (check, subject), first matching row wins:
    no record but a check-scoped acknowledgement -> created acknowledged with its disclosure, not raised; no
    record -> created open (raised); open -> values refreshed; acknowledged/waived -> last_seen only unless the
    severity rose (reopened); fixed -> reopened as regressed; open/acknowledged and the subject passed -> fixed.
    A skipped (or not yet run) check judged nothing and moves nothing."""
    existing = {(r.check, r.subject): r for r in db.finding_records()}
    raised: list[FindingRecord] = []
    fixed: list[FindingRecord] = []
    touched: list[FindingRecord] = []
    for check in results:
        if check.status in ("skipped", "not_run"):
            continue
        scoped = _check_scope_ack(existing.values(), check.check)
        for finding in check.findings:
            record, was_raised = _on_fires(db, existing.get((finding.check, finding.subject)), finding, check,
                                           scoped, actor)
            existing[(finding.check, finding.subject)] = record
            touched.append(record)
            if was_raised:
                raised.append(record)
        for subject in check.passed_subjects:
            passed = existing.get((check.check, subject))
            if passed is not None and passed.status in ("open", "acknowledged"):
                updated = _move(db, passed, "fixed", status_by="auto", note=passed.note, actor=actor)
                existing[(check.check, subject)] = updated
                fixed.append(updated)
                touched.append(updated)
    return LifecycleOutcome(tuple(raised), tuple(fixed), tuple(touched))


def _check_scope_ack(records: Iterable[FindingRecord], check: str) -> FindingRecord | None:
    """The project-wide acknowledgement of a check (scope `check`, e.g. a single-seed budget). It keeps covering
    new subjects after the subject it was made on passed (and was marked fixed): it is a decision about the
    check, not about that subject."""
    return next((r for r in records if r.check == check and r.scope == "check" and r.disclosure
                 and r.status in ("acknowledged", "fixed")), None)


def _body(finding: Finding, check: CheckResult) -> dict[str, Any]:
    spec = specs().get(finding.check)
    return {
        "check_name": check.name, "kind": check.kind, "values": dict(finding.values),
        "evidence": [{"path": ref.path, "sha256": ref.sha256} for ref in finding.evidence],
        "claims": list(finding.claims), "integrity_class": finding.integrity_class,
        "fix": finding.fix or (spec.fix if spec is not None else ""), "finding_disclosure": finding.disclosure_text,
    }


def _on_fires(db: StateDB, record: FindingRecord | None, finding: Finding, check: CheckResult,
              scoped: FindingRecord | None, actor: str) -> tuple[FindingRecord, bool]:
    """The record after `finding` fired, and whether that raised it."""
    fresh = FindingWrite(check=finding.check, subject=finding.subject, severity=finding.severity, status="open",
                         message=finding.message, fingerprint=finding.fingerprint, body=_body(finding, check))
    if record is None and scoped is not None:
        created = db.write_finding(dataclasses.replace(fresh, status="acknowledged", disclosure=scoped.disclosure,
                                                       note=scoped.note, status_by="auto", scope="check"))
        _event(db, created, None, "check_scope", actor)
        return created, False
    if record is None:
        created = db.write_finding(fresh)
        _event(db, created, None, None, actor)
        return created, True
    if record.status == "open":
        return db.write_finding(_kept(fresh, record)), False
    rank = SEVERITY_RANK
    if record.status in ("acknowledged", "waived") and rank[finding.severity] <= rank.get(record.severity, 0):
        kept = dataclasses.replace(_kept(fresh, record), severity=record.severity, message=record.message,
                                   fingerprint=record.fingerprint, body=record.body)
        return db.write_finding(kept), False
    reason = "regressed" if record.status == "fixed" else "severity_increased"
    reopened = db.write_finding(dataclasses.replace(fresh, scope=record.scope, reopened_reason=reason))
    _event(db, reopened, record.status, reason, actor)
    return reopened, True


def _kept(fresh: FindingWrite, record: FindingRecord) -> FindingWrite:
    """A refresh that keeps the record's status, scope, note, disclosure and status stamps."""
    return dataclasses.replace(fresh, status=record.status, scope=record.scope, note=record.note,
                               disclosure=record.disclosure, status_by=record.status_by,
                               reopened_reason=record.reopened_reason, status_changed=False)


def _move(db: StateDB, record: FindingRecord, status: str, *, status_by: str, note: str, actor: str,
          disclosure: str | None = None, scope: str | None = None) -> FindingRecord:
    write = FindingWrite(check=record.check, subject=record.subject, severity=record.severity, status=status,
                         message=record.message, fingerprint=record.fingerprint, body=record.body,
                         scope=scope or record.scope,
                         disclosure=record.disclosure if disclosure is None else disclosure, note=note,
                         status_by=status_by)
    updated = db.write_finding(write)
    _event(db, updated, record.status, None, actor)
    return updated


def _event(db: StateDB, record: FindingRecord, old: str | None, reason: str | None, actor: str) -> None:
    events.finding_status_changed(db, finding_id=record.id, check=record.check, subject=record.subject, old=old,
                                  new=record.status, note=record.note, reason=reason, actor=actor)


def set_status(db: StateDB, finding_id: str, status: str, *, note: str, disclosure: str = "",
               scope: str = "subject", actor: str = "user") -> FindingRecord:
    """The user's moves: acknowledge (note and disclosure required; `scope="check"` covers the whole check),
    waive (note: why it does not apply), fixed (provisional until the next audit), or open again."""
    record = db.finding_record(finding_id)
    if record is None:
        raise ConfigError(f"no VERIFY finding {finding_id} (rgt audit lists them)")
    if status not in USER_STATUSES:
        raise ConfigError(f"a finding's status must be one of {', '.join(USER_STATUSES)}")
    if scope not in ("subject", "check"):
        raise ConfigError("a finding's scope is `subject` or `check`")
    if status != "open" and not note.strip():
        raise ConfigError(f"{record.id}: a note is required to mark it {status} (say why)")
    if status == "acknowledged" and not disclosure.strip():
        raise ConfigError(f"{record.id}: acknowledging needs a disclosure: the text that rides with the claims it "
                       "touches")
    kept_disclosure = disclosure.strip() if status == "acknowledged" else ""
    return _move(db, record, status, status_by=actor, note=note.strip(), actor=actor, disclosure=kept_disclosure,
                 scope=scope if status == "acknowledged" else "subject")


def acknowledge_check(db: StateDB, check: str, *, note: str, disclosure: str, actor: str = "user") -> None:
    """A project-wide acknowledgement of a check (a tick such as T10): every open record of the check is
    acknowledged with scope `check`, and a record on the subject `project` carries the acknowledgement for
    subjects the check has not found yet."""
    for record in db.finding_records():
        if record.check == check and record.status == "open":
            _move(db, record, "acknowledged", status_by=actor, note=note, actor=actor, disclosure=disclosure,
                  scope="check")
    holder = next((r for r in db.finding_records() if r.check == check and r.subject == "project"), None)
    write = FindingWrite(check=check, subject="project", severity="info", status="acknowledged",
                         message=f"{check} acknowledged for the whole project", fingerprint="",
                         body={"kind": "auto", "values": {}, "evidence": [], "claims": []}, scope="check",
                         disclosure=disclosure, note=note, status_by=actor)
    created = db.write_finding(write)
    if holder is None or holder.status != "acknowledged":
        _event(db, created, holder.status if holder is not None else None, "check_scope", actor)


def withdraw_check(db: StateDB, check: str, *, note: str, actor: str = "user") -> None:
    """Undo `acknowledge_check` (the tick that made it was unticked): every record acknowledged for the whole
    check is open again, and the acknowledgement no longer covers new subjects."""
    for record in db.finding_records():
        if record.check != check or record.scope != "check" or record.status not in ("acknowledged", "fixed"):
            continue
        status = "fixed" if record.subject == "project" else "open"
        _move(db, record, status, status_by=actor, note=note, actor=actor, disclosure="", scope="subject")
