"""services/overview.py: observe() keeps the record of watching, build() only reads."""

from __future__ import annotations

from pathlib import Path

from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import build, observe
from support.helpers import INSTANCE, RUN, launched_and_finished, write_project


async def test_build_writes_nothing_and_observe_records_what_it_saw(tmp_path: Path) -> None:
    write_project(tmp_path / "p")
    session = open_session(str(tmp_path / "p"))
    try:
        await launched_and_finished(session)
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


async def test_a_watcher_trusts_a_settled_runs_recent_look_and_a_report_or_a_relaunch_asks_again(
        tmp_path: Path) -> None:
    """A finished run changes only when it is launched again: a watcher refreshing every 2 s reuses its look for
    SETTLED_LOOK_S instead of forking one on the box each time (issue 29, idle CPU). The box is changed under it to
    show which answers were asked: the report asks every box, and a relaunch is looked at at once."""
    write_project(tmp_path / "p")
    session = open_session(str(tmp_path / "p"))
    try:
        await launched_and_finished(session)
        first = await observe(session, wait_s=5.0)
        assert first.run_states[RUN].liveness.state == "finished"
        exit_code = tmp_path / "p" / ".rgt" / "sim" / INSTANCE / "workspace" / "job" / ".rgt" / RUN / "exit_code"
        exit_code.write_text("3\n")  # what a fresh look would now call dead
        trusted = await observe(session, wait_s=5.0)
        assert trusted.run_states[RUN].liveness.state == "finished"  # the settled look stands
        asked = await observe(session)  # a report (no wait_s): every box asked
        assert (asked.run_states[RUN].liveness.state, asked.run_states[RUN].liveness.detail) == ("dead", "exit 3")
        exit_code.write_text("0\n")
        await launch_run(session, RUN, resume=True)  # a new launch: its look is not the old one's
        relaunched = await observe(session, wait_s=5.0)
        assert relaunched.run_states[RUN].liveness.state in ("running", "finished")
        assert relaunched.run_states[RUN] != first.run_states[RUN]
    finally:
        await session.close_transports()
        session.close()
