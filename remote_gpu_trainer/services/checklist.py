"""The checklist: items from assets/checklist.toml, automatic ones answered by audits, ticks from the db."""

from __future__ import annotations

import tomllib
from importlib import resources
from typing import Any

from remote_gpu_trainer.audits.checklist import CHECKS, ChecklistFacts
from remote_gpu_trainer.errors import ConfigError, RgtError
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.views import ChecklistItem

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
    db.append_event("checklist", f"{item_id} marked {status}", run_id=run_id, actor=actor,
                    detail={"item": item_id, "status": status, "note": note.strip()})
