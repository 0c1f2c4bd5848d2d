"""The checklist: items from assets/checklist.toml, automatic ones answered by audits, ticks from the db."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from remote_gpu_trainer.audits.checklist import CHECKS, ChecklistFacts
from remote_gpu_trainer.audits.manifest import sha256_bytes
from remote_gpu_trainer.config import ProjectConfig, RunConfig
from remote_gpu_trainer.errors import ConfigError, RgtError
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.views import ChecklistItem, ChecklistRow, GateView, RunView

TICK_STATUSES = ("open", "ticked", "not_applicable")


def load_items() -> list[dict[str, Any]]:
    text = resources.files("remote_gpu_trainer").joinpath("assets/checklist.toml").read_text(encoding="utf-8")
    items = tomllib.loads(text).get("items", [])
    for item in items:
        if item.get("kind") == "auto" and item.get("check") not in CHECKS:
            raise ConfigError(f"assets/checklist.toml: item {item.get('id')}: unknown check {item.get('check')!r}")
    return list(items)


def evaluate(run_id: str, facts: ChecklistFacts, db: StateDB) -> list[ChecklistItem]:
    ticks = db.ticks(run_id)
    result = []
    for item in load_items():
        if item["kind"] == "auto":
            status, note = CHECKS[item["check"]](facts, item)
        else:
            tick = ticks.get(item["id"])
            status, note = (tick.status, tick.note) if tick else ("open", "")
        result.append(ChecklistItem(item["id"], item["kind"], item["title"], status, note))
    return result


def set_tick(db: StateDB, run_id: str, item_id: str, status: str, note: str, actor: str = "user") -> None:
    """Ticking or marking not applicable needs a note: the note is what a reader of the paper will see."""
    items = {item["id"]: item for item in load_items()}
    if item_id not in items or items[item_id]["kind"] != "tick":
        raise RgtError(f"checklist item {item_id!r} is not a manual item (see assets/checklist.toml)")
    if status not in TICK_STATUSES:
        raise RgtError(f"checklist status must be one of {', '.join(TICK_STATUSES)}")
    if status != "open" and not note.strip():
        raise RgtError(f"checklist item {item_id}: a note is required to mark it {status}")
    db.set_tick(run_id, item_id, status, note.strip())
    events.tick_set(db, run_id=run_id, item_id=item_id, status=status, note=note.strip(), actor=actor)


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


def checklist_facts(project: ProjectConfig, run: RunConfig, db: StateDB, gate: GateView) -> ChecklistFacts:
    """What the automatic checks read: the gate's evidence verdict and each roster cell's metrics file,
    with whether its bytes are the ones verification saw."""
    local_root = project.run_dir(run.id)
    last = db.last_verification(run.id)
    verified_paths = {f["path"]: f for f in (last or {}).get("files", []) if f.get("status") == "verified"}
    metric_files: dict[str, tuple[bytes | None, bool]] = {}
    for cell in run.roster:
        rel = f"{cell}/best_metrics.json"
        path = local_root / rel
        data = path.read_bytes() if path.is_file() else None
        record = verified_paths.get(rel)
        verified = bool(gate.evidence_ok and record is not None and data is not None
                        and sha256_bytes(data) == record.get("sha256"))
        metric_files[cell] = (data, verified)
    return ChecklistFacts(
        gate_evidence_ok=gate.evidence_ok, evidence_reasons=gate.reasons, roster=run.roster,
        metric_name=run.metric.name if run.metric else None,
        metric_direction=run.metric.direction if run.metric else None, metric_files=metric_files,
    )


def panel_rows(run: RunView) -> tuple[ChecklistRow, ...]:
    """The checklist panel's rows: the log's findings worst first, the checklist items, then the phase-0
    environment rows (`E01`...), each keyed by the id the dashboard's acknowledge and tick actions use."""
    rows = [ChecklistRow(f.id, f.severity if f.status == "open" else "acknowledged",
                         f"{f.id} [{f.check}] {f.message}" + (f" ×{f.count}" if f.count > 1 else ""), f.fix, "")
            for f in run.sorted_findings() if f.check.startswith("log:")]
    rows += [ChecklistRow(item.id, item.status, f"{item.id} [{item.kind}] {item.title}", item.note, "")
             for item in run.checklist]
    rows += [ChecklistRow(f"E{row.id:02d}", row.status, f"E{row.id:02d} [env] {row.check}", row.detail, "")
             for row in run.environment]
    return tuple(dataclasses.replace(row, describe=_describe(run, row.key)) for row in rows)


def _describe(run: RunView, key: str) -> str:
    """A row's answer or note in full, shown under the table when highlighted: narrow screens cut the column."""
    finding = run.finding(key)
    item = next((c for c in run.checklist if c.id == key), None)
    env = next((r for r in run.environment if f"E{r.id:02d}" == key), None)
    if finding is not None:
        return f"{finding.id} {finding.severity} {finding.status}: {finding.message} → fix: {finding.fix}"
    if item is not None:
        return f"{item.id} {item.status}: {item.note or item.title}"
    if env is not None:
        return f"E{env.id:02d} {env.check} {env.status}: {env.detail}"
    return ""
