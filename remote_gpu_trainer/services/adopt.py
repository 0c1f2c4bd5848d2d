"""`rgt adopt` (docs/gate.md §7.2): the box's ledger back into this project's launch log, when the state
database was lost or replaced.

A verb of its own above the ledger: it reads the box's entries (services/box_ledger.py), names the box the way
the gate does (services/gate.py) and records launches where the launch put them (services/box_layout.py). The
ledger module stays the ledger's format and its reads and writes, which the gate and the launch verb import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from remote_gpu_trainer.services import instances
from remote_gpu_trainer.services.box_layout import ctl_dir, log_path
from remote_gpu_trainer.services.box_ledger import (
    LedgerEntry,
    box_home,
    entry_path,
    is_ours,
    project_id,
    read_ledger,
)
from remote_gpu_trainer.services.gate import session_box_key
from remote_gpu_trainer.state import events

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session


@dataclass(frozen=True)
class Adoption:
    """What `rgt adopt` found on a box: launches recorded now, launches already known, other projects' runs."""

    adopted: tuple[LedgerEntry, ...]
    known: tuple[LedgerEntry, ...]
    foreign: tuple[LedgerEntry, ...]


async def adopt(session: Session, name: str, actor: str = "user") -> Adoption:
    """Rebuild this project's launch records from the box's ledger (a lost or replaced state database): every
    entry of this project whose launch id the launch log does not hold is recorded as a launch, with the table
    the box recorded, so liveness, pull and verify find the run where its launch put it. The record is stamped
    now, so the gate wants a verification after it: nothing adopted opens anything by itself."""
    session.require_writable("adopting the box's ledger")
    entries = await read_ledger(await instances.remote(session, name))
    own = project_id(session.project)
    known_ids = {str(record.detail.get("launch_id")) for record in session.db.launch_history()}
    box = await session_box_key(session, name)
    adopted: list[LedgerEntry] = []
    known: list[LedgerEntry] = []
    foreign: list[LedgerEntry] = []
    for entry in entries:
        run = entry.run_config()
        if not is_ours(entry, session.project, own) or run is None:
            foreign.append(entry)
            continue
        if entry.launch_id in known_ids:
            known.append(entry)
            continue
        detail: dict[str, object] = {
            "ctl_dir": ctl_dir(run), "log": log_path(run), "started_at": entry.started_at, "method": "adopted",
            "pushed": [], "log_offset": 0, "pid": None, "launch_id": entry.launch_id,
            "ledger": entry_path(await box_home(await instances.remote(session, name)), entry)}
        session.db.record_launch(run.id, name, detail, box=box, config=entry.config)
        events.launch_adopted(session.db, run_id=run.id, instance=name, detail=detail, actor=actor)
        adopted.append(entry)
    return Adoption(tuple(adopted), tuple(known), tuple(foreign))
