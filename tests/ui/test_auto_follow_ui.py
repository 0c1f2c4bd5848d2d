"""The TUI as a watcher of `auto = ["pull", "verify"]`: opening the dashboard on a finished run pulls and
verifies it once, says so in a notification, opens the gate and tears nothing down; a second app on the same
project does not do it again. The real app through Pilot, on a real sim project."""

from __future__ import annotations

from pathlib import Path

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.state.events import EventKind
from support.helpers import INSTANCE, RUN, launched_and_finished, write_project
from support.tui_helpers import dashboard, gate_open, notified, wait_until


async def test_the_dashboard_pulls_and_verifies_a_finished_run_once_and_never_tears_down(tmp_path: Path) -> None:
    write_project(tmp_path, extra_run='auto = ["pull", "verify"]')
    session = open_session(str(tmp_path))
    await launched_and_finished(session)
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: notified(app, f"run {RUN}: pulled and verified: PULL_VERIFIED.json written"),
                         timeout=60)
        await wait_until(pilot, lambda: gate_open(app))
        overview = dashboard(app).overview
        assert overview is not None and overview.instance(INSTANCE).state == "running"  # type: ignore[union-attr]
    session.close()

    again = open_session(str(tmp_path))
    second = RgtApp(again)
    async with second.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: gate_open(second))
        assert not notified(second, "auto follow-up")
    kinds = [(e.kind, e.actor, e.detail.get("outcome")) for e in again.db.events(run_id=RUN)
             if e.kind in (EventKind.AUTO_FOLLOW, EventKind.VERIFY)]
    assert kinds == [(EventKind.AUTO_FOLLOW, "auto", "started"), (EventKind.VERIFY, "auto", None),
                     (EventKind.AUTO_FOLLOW, "auto", "verified")]
    assert not again.db.events(kind=EventKind.TORN_DOWN) and not again.db.events(kind=EventKind.STOPPED)
    assert (tmp_path / ".rgt" / "sim" / INSTANCE).is_dir()  # the box's disk is still there
    assert (tmp_path / "runs" / RUN / "PULL_VERIFIED.json").is_file()
    again.close()
