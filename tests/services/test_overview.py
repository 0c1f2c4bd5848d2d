"""services/overview.py: observe() keeps the record of watching, build() only reads."""

from __future__ import annotations

from pathlib import Path

from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import build, observe
from support.helpers import INSTANCE, RUN, wait_for_liveness, write_project


async def test_build_writes_nothing_and_observe_records_what_it_saw(tmp_path: Path) -> None:
    write_project(tmp_path / "p")
    session = open_session(str(tmp_path / "p"))
    try:
        await create_instance(session, INSTANCE)
        await launch_run(session, RUN)
        await wait_for_liveness(session)
        connection = session.db._conn
        before = connection.total_changes
        seen = await observe(session)
        assert connection.total_changes > before  # at least the meter sample of this look
        after_observe = connection.total_changes
        first = await build(session, seen)
        second = await build(session, seen)
        assert connection.total_changes == after_observe
        assert first == second
        run = first.run(RUN)
        assert run is not None and run.liveness == "finished" and first.instance(INSTANCE) is not None
    finally:
        await session.close_transports()
        session.close()
