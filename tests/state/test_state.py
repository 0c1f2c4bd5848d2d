"""The state database: WAL, append-only event log, and values that survive a reopen."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import observe_and_build
from remote_gpu_trainer.state.billing import Snapshot
from remote_gpu_trainer.state.db import StateDB
from support.helpers import FIXED_NOW, FixedClock


def test_events_are_append_only_and_survive_reopen(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "state.db", FixedClock(FIXED_NOW))
    event = db.append_event("approval", "approved terminate", instance="box", actor="user",
                            detail={"shown": ["Action: terminate"]})
    assert event.seq == 1
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db._conn.execute("UPDATE events SET summary = 'x'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db._conn.execute("DELETE FROM events")
    db.close()
    again = StateDB(tmp_path / "state.db")
    [stored] = again.events()
    assert stored.summary == "approved terminate"
    assert stored.detail == {"shown": ["Action: terminate"]}
    assert stored.at == FIXED_NOW
    mode = again._conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_snapshots_launches_and_ticks_round_trip(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "state.db", FixedClock(FIXED_NOW))
    db.add_snapshot(Snapshot(FIXED_NOW, "box", "sim", "sim-box", "running", 0.89, "profile", 0.02))
    db.record_launch("r1", "box", {"pid": 42, "ctl_dir": "/w/.rgt/r1"})
    db.set_tick("r1", "T01", "ticked", "same budget")
    assert db.last_snapshot("box") == Snapshot(FIXED_NOW, "box", "sim", "sim-box", "running", 0.89, "profile",
                                               0.02)
    launch = db.launch("r1")
    assert launch is not None and launch["pid"] == 42 and launch["instance"] == "box"
    assert db.ticks("r1")["T01"].note == "same budget"
    assert db.launch("other") is None


async def test_meter_samples_are_stored_at_most_every_30_seconds(project_dir: Path) -> None:
    from support.helpers import INSTANCE

    clock = FixedClock(FIXED_NOW)
    session = open_session(str(project_dir), clock=clock)
    await create_instance(session, INSTANCE)
    await observe_and_build(session)
    clock.advance(seconds=10)
    await observe_and_build(session)
    assert session.db.meter_sample_count(INSTANCE) == 1
    clock.advance(seconds=25)
    overview = await observe_and_build(session)
    assert session.db.meter_sample_count(INSTANCE) == 2
    instance = overview.instance(INSTANCE)
    assert instance is not None and abs(instance.cost_so_far - 0.89 * 35 / 3600) < 1e-9
    session.close()
