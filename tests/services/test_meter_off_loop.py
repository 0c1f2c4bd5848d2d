"""The overview's meter sample is written from a worker thread, never the event loop (services/overview.py
meter_readings, docs/architecture.md §5): on the loop, its wait for SQLite's write lock while a log digest
committed was a late frame. Seen through SQLite's own trace hook, which runs in the thread executing the SQL."""

from __future__ import annotations

import threading
from pathlib import Path

from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import observe_and_build
from support.helpers import FIXED_NOW, INSTANCE, FixedClock


async def test_the_meter_sample_is_inserted_off_the_event_loop(project_dir: Path) -> None:
    session = open_session(str(project_dir), clock=FixedClock(FIXED_NOW))
    await create_instance(session, INSTANCE)
    inserts: list[int] = []

    def trace(sql: str) -> None:
        if sql.startswith("INSERT INTO meter_samples"):
            inserts.append(threading.get_ident())

    session.db._conn.set_trace_callback(trace)
    try:
        overview = await observe_and_build(session)
    finally:
        session.db._conn.set_trace_callback(None)
    loop_thread = threading.get_ident()
    assert len(inserts) == 1 and inserts[0] != loop_thread
    assert session.db.meter_sample_count(INSTANCE) == 1
    instance = overview.instance(INSTANCE)
    assert instance is not None and instance.burn_per_hour == 0.89  # the reading came back from the thread
    session.close()
