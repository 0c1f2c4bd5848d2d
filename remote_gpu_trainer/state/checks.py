"""What the user and the phase-0 audit recorded about a run: environment audit records and checklist ticks."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from remote_gpu_trainer.clock import parse_iso
from remote_gpu_trainer.state.store import Store


@dataclass(frozen=True)
class ChecklistTick:
    """The user's answer to one manual checklist item for a run (or for every run), with its note and when it was
    given."""

    item_id: str
    status: str
    note: str
    at: datetime



class CheckTables(Store):
    """The `audit_records` and `checklist` tables."""

    def add_audit(self, run_id: str, kind: str, rows: list[dict[str, Any]]) -> None:
        with self._tx() as conn:
            conn.execute("INSERT INTO audit_records (at, run_id, kind, rows) VALUES (?, ?, ?, ?)",
                         (self._now(), run_id, kind, json.dumps(rows, sort_keys=True)))

    def last_audit(self, run_id: str, kind: str) -> tuple[datetime, list[dict[str, Any]]] | None:
        row = self._one(
            "SELECT at, rows FROM audit_records WHERE run_id = ? AND kind = ? ORDER BY seq DESC LIMIT 1",
            (run_id, kind),
        )
        return (parse_iso(row[0]), list(json.loads(row[1]))) if row else None

    # -- checklist -----------------------------------------------------------------------------
    def set_tick(self, run_id: str, item_id: str, status: str, note: str) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO checklist (run_id, item_id, status, note, at) VALUES (?, ?, ?, ?, ?)",
                (run_id, item_id, status, note, self._now()),
            )

    def ticks(self, run_id: str) -> dict[str, ChecklistTick]:
        rows = self._all(
            "SELECT item_id, status, note, at FROM checklist WHERE run_id = ?", (run_id,)
        )
        return {r[0]: ChecklistTick(r[0], r[1], r[2], parse_iso(r[3])) for r in rows}
