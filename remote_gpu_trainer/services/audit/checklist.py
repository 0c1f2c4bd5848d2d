"""The checklist: items from assets/checklist.toml, automatic ones answered by audits, ticks from the db."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from remote_gpu_trainer.audits.checklist import CHECKS, ChecklistFacts
from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.errors import ConfigError, RgtError
from remote_gpu_trainer.services.audit import findings
from remote_gpu_trainer.services.audit.audit import for_run
from remote_gpu_trainer.shipped_toml import ASSETS
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.views import NO_AUDIT, AuditView, ChecklistItem, ChecklistRow, CheckView, GateView, RunView

TICK_STATUSES = ("open", "ticked", "not_applicable")


def load_items() -> list[dict[str, Any]]:
    text = (ASSETS / "checklist.toml").read_text(encoding="utf-8")
    items = tomllib.loads(text).get("items", [])
    for item in items:
        if item.get("kind") == "auto" and item.get("check") not in CHECKS:
            raise ConfigError(f"assets/checklist.toml: item {item.get('id')}: unknown check {item.get('check')!r}")
    return list(items)


PROJECT_TICKS = "*"  # the run id under which ticks of scope "project" are stored: every run shares them


def evaluate(run_id: str, facts: ChecklistFacts, db: StateDB, audit: AuditView = NO_AUDIT) -> list[ChecklistItem]:
    """A01, then every VERIFY check with its latest answer, then the ticks (docs/verify.md §4)."""
    ticks = {**db.ticks(PROJECT_TICKS), **db.ticks(run_id)}
    items = load_items()
    result = []
    for item in items:
        if item["kind"] == "auto":
            status, note = CHECKS[item["check"]](facts, item)
        else:
            tick = ticks.get(item["id"])
            status, note = (tick.status, tick.note) if tick else ("open", "")
        result.append(ChecklistItem(item["id"], item["kind"], item["title"], status, note))
    autos = sum(1 for item in items if item["kind"] == "auto")
    mine = for_run(audit, run_id)  # each check's answer for this run, not the project's (attribution.py)
    return result[:autos] + [_check_item(check) for check in mine.checks] + result[autos:]


def _check_item(check: CheckView) -> ChecklistItem:
    note = check.note + (f" ({check.findings} finding{'s' if check.findings != 1 else ''})" if check.findings else "")
    return ChecklistItem(check.id, check.kind, check.title or check.name, check.status, note.strip())


def set_tick(db: StateDB, run_id: str, item_id: str, status: str, note: str, actor: str = "user") -> None:
    """Ticking or marking not applicable needs a note: the note is what a reader of the paper will see.
    A project-scoped tick is stored once for every run; T10 also acknowledges its check for the whole project
    (a check-scoped acknowledgement of V04, docs/verify.md §3)."""
    items = {item["id"]: item for item in load_items()}
    if item_id not in items or items[item_id]["kind"] != "tick":
        raise RgtError(f"checklist item {item_id!r} is not a manual item (see assets/checklist.toml)")
    if status not in TICK_STATUSES:
        raise RgtError(f"checklist status must be one of {', '.join(TICK_STATUSES)}")
    if status != "open" and not note.strip():
        raise RgtError(f"checklist item {item_id}: a note is required to mark it {status}")
    item = items[item_id]
    scope_id = PROJECT_TICKS if item.get("scope") == "project" else run_id
    db.set_tick(scope_id, item_id, status, note.strip())
    events.tick_set(db, run_id=scope_id, item_id=item_id, status=status, note=note.strip(), actor=actor)
    check = item.get("acknowledges")
    if check and status == "ticked":
        findings.acknowledge_check(db, str(check), note=note.strip(),
                                   disclosure=f"{item['title'].split(' (')[0]}: {note.strip()}", actor=actor)
    elif check:
        findings.withdraw_check(db, str(check), note=f"{item_id} is {status} again", actor=actor)


@dataclass(frozen=True)
class TickToggle:
    """What space on a checklist row does: untick a ticked item, tick an open one (a note is asked for), or
    refuse an item the audits answer."""

    item_id: str
    status: str  # the status the item moves to
    needs_note: bool
    prompt: str = ""  # the note dialog's title
    refusal: str = ""  # why nothing happens; empty when something does


def tick_toggle(items: Iterable[ChecklistItem], item_id: str) -> TickToggle:
    entry = next((c for c in items if c.id == item_id), None)
    if entry is None or entry.kind != "tick":
        return TickToggle(item_id, "", False, refusal=f"{item_id} is answered automatically by rgt's audits")
    if entry.status == "ticked":
        return TickToggle(item_id, "open", needs_note=False)
    return TickToggle(item_id, "ticked", needs_note=True, prompt=f"{item_id}: {entry.title}")


def checklist_facts(run: RunConfig, gate: GateView) -> ChecklistFacts:
    """What the automatic items read: the gate's evidence verdict."""
    return ChecklistFacts(gate_evidence_ok=gate.evidence_ok, evidence_reasons=gate.reasons, roster=run.roster)


def panel_rows(run: RunView, audit: AuditView = NO_AUDIT) -> tuple[ChecklistRow, ...]:
    """The checklist panel's rows: the log's findings worst first, VERIFY's open and acknowledged findings, the
    checklist items (A01, every VERIFY check, the ticks), then the phase-0 environment rows (`E01`...), each
    keyed by the id the dashboard's acknowledge and tick actions use."""
    rows = [ChecklistRow(f.id, f.severity if f.status == "open" else "acknowledged",
                         f"{f.id} [{f.check}] {f.message}" + (f" ×{f.count}" if f.count > 1 else ""), f.fix, "")
            for f in run.sorted_findings() if f.check.startswith("log:")]
    shown = [f for f in for_run(audit, run.id).sorted_findings()
             if f.status in ("open", "acknowledged") and f.subject != "project"]
    rows += [ChecklistRow(f.id, f.severity if f.status == "open" else "acknowledged",
                          f"{f.id} [{f.check}] {f.subject}: {f.message}", f.disclosure or f.fix, "") for f in shown]
    rows += [ChecklistRow(item.id, item.status, f"{item.id} [{item.kind}] {item.title}", item.note, "")
             for item in run.checklist]
    rows += [ChecklistRow(f"E{row.id:02d}", row.status, f"E{row.id:02d} [env] {row.check}", row.detail, "")
             for row in run.environment]
    return tuple(dataclasses.replace(row, describe=_describe(run, audit, row.key)) for row in rows)


def _describe(run: RunView, audit: AuditView, key: str) -> str:
    """A row's answer or note in full, shown under the table when highlighted: narrow screens cut the column."""
    finding = run.finding(key)
    catalogued = audit.finding(key)
    item = next((c for c in run.checklist if c.id == key), None)
    env = next((r for r in run.environment if f"E{r.id:02d}" == key), None)
    if catalogued is not None:
        return (f"{catalogued.id} {catalogued.severity} {catalogued.status}: {catalogued.message}"
                + (f" · disclosed: {catalogued.disclosure}" if catalogued.disclosure else "") + " (enter: detail)")
    if finding is not None:
        return f"{finding.id} {finding.severity} {finding.status}: {finding.message} → fix: {finding.fix}"
    if item is not None:
        return f"{item.id} {item.status}: {item.note or item.title}"
    if env is not None:
        return f"E{env.id:02d} {env.check} {env.status}: {env.detail}"
    return ""
