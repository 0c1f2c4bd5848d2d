"""Findings as every face lists them: the checklist's automatic findings and the log's signature findings,
with the ids the dashboard, `rgt ack` and the report name them by, and their acknowledgement.

Audits disclose, never block: a finding stays listed once acknowledged (with the note saying why), and an
acknowledged finding is not raised again for the same run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.state import events
from remote_gpu_trainer.views import ChecklistItem, FindingView

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session


def checklist_findings(run_id: str, items: Iterable[ChecklistItem]) -> tuple[FindingView, ...]:
    """An automatic checklist item that found something, as a finding named `RUN:ITEM`."""
    return tuple(
        FindingView(id=f"{run_id}:{item.id}", check=item.id, severity="warn", status="open",
                    message=f"{item.title}: {item.note}")
        for item in items if item.kind == "auto" and item.status == "findings"
    )


def log_findings(session: Session, run_id: str) -> tuple[FindingView, ...]:
    """The log's signature findings as the report and the checklist panel show them, named by signature."""
    rows = session.catalogue().rows
    views = []
    for f in session.db.log_findings(run_id):
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
