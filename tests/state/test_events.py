"""The event log's kinds: the stored strings never change, and only state/events.py writes an event."""

from __future__ import annotations

import ast
from pathlib import Path

import remote_gpu_trainer
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.state.events import EventKind
from support.helpers import FIXED_NOW, FixedClock

PACKAGE = Path(remote_gpu_trainer.__file__).parent

# The `kind` column of databases already written: renaming one would hide old events from every reader.
STORED = {
    "approval", "action", "action_failed", "refused", "residuals", "torn_down", "stopped", "teardown_unconfirmed",
    "host_key_trusted", "meter_gap", "env_audit", "env_ack", "launch", "rerun", "cell_started", "finding_ack",
    "checklist", "pull", "pull_failed", "pull_incomplete", "verify", "launch_refused", "launched",
    "launch_over_budget", "verify_audit", "finding_status", "probe", "acceptance", "notified", "auto_follow",
    "adopted", "request", "allowance", "agent_tool", "recover",
}


def test_every_stored_kind_is_a_member_and_nothing_else_is() -> None:
    assert {kind.value for kind in EventKind} == STORED


def test_only_the_writers_append_events() -> None:
    """Package code writes an event through its writer in state/events.py, never with a bare kind string."""
    callers = []
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "state" / "events.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "append_event":
                callers.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert callers == []


def test_a_writer_stores_its_kind_and_a_reader_gets_the_member_back(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "state.db", FixedClock(FIXED_NOW))
    events.teardown_confirmed(db, instance="box", terminated=True, message="box terminated", evidence="command",
                              state="terminated")
    stored = db._conn.execute("SELECT kind FROM events").fetchone()[0]
    [event] = db.events(kind=EventKind.TORN_DOWN)
    assert stored == "torn_down" and event.kind is EventKind.TORN_DOWN
    assert event.detail == {"evidence": "command", "state": "terminated"}
    db.close()
