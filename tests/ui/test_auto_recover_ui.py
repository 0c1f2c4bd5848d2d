"""The TUI as a watcher of preempted runs (screens/auto_recover.py, docs/remote-ops.md §10.1): the dashboard shows a
preempted run's recovery as refused until a person approves its limits, then, once approved, relaunches it on its
box, says so, and tears nothing down; while such a run runs, it keeps the run's newest checkpoint home and shows it.
The real app through Pilot, on an interruptible sim box whose job the test
preempts with SIGTERM."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.widgets import Button, Static

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.screens.recover_approval import RecoverApproveScreen
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.recover import approval
from remote_gpu_trainer.services.recover.checkpoint_home import home_copies
from remote_gpu_trainer.state.events import EventKind
from remote_gpu_trainer.text import recovery_line
from support.helpers import RUN, wait_for_liveness
from support.recover_project import (
    PERSON,
    checkpoint,
    hold,
    launched_and_preempted,
    launched_holding,
    launches,
    never_torn_down,
    project,
)
from support.tui_helpers import dashboard, notified, wait_until


async def test_the_dashboard_relaunches_a_preempted_run_only_once_its_limits_are_approved(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    session = open_session(str(root))
    await launched_and_preempted(session, root)
    app = RgtApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: notified(app, "r1: recovery refused: no person approved recovery of r1"),
                         timeout=60)
        overview = dashboard(app).overview
        assert overview is not None and overview.runs[0].recovery is not None
        assert not overview.runs[0].recovery.approved and len(launches(session)) == 1
    session.close()

    again = open_session(str(root))
    approval.approve(again, RUN, again.project.run(RUN).recover, PERSON)
    hold(root, None)
    second = RgtApp(again)
    async with second.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: notified(second, "r1: recovery relaunched: relaunched on box, restart 1"),
                         timeout=60)
        await asyncio.wait_for(wait_for_liveness(again), 60)
    launched = [e for e in again.db.events(run_id=RUN, kind=EventKind.RECOVER) if e.detail["step"] == "launched"]
    assert len(launched) == 1 and launched[0].actor == "rgt:recover" and len(launches(again)) == 2
    never_torn_down(again)
    again.close()


async def test_while_a_recoverable_run_runs_the_dashboard_keeps_its_newest_checkpoint_home(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    session = open_session(str(root))
    await launched_holding(session, root, 2)
    app = RgtApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: notified(app, "r1: seed0/ckpt_001.pt kept home"), timeout=60)
        await wait_until(pilot, lambda: "kept home: seed0/ckpt_001.pt" in _recovery_line(app), timeout=30)
    kept = home_copies(session, RUN)["seed0"]
    assert kept.local.read_bytes() == checkpoint(root, 1).read_bytes() and kept.loaded
    hold(root, None)
    await session.close_transports()
    session.close()


def _recovery_line(app: RgtApp) -> str:
    overview = dashboard(app).overview
    if overview is None or overview.runs[0].recovery is None:
        return ""
    return recovery_line(overview.runs[0].recovery)


async def test_a_person_approves_recovery_in_the_tui_by_typing_the_max_spend_shown(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    session = open_session(str(root))
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None, timeout=30)
        await pilot.press("R")
        await wait_until(pilot, lambda: isinstance(app.screen, RecoverApproveScreen), timeout=10)
        shown = str(app.screen.query_one("#recover-lines", Static).render())
        assert "at most 25.00 USD spent by recovery in all" in shown, shown
        for key in "2.5":
            await pilot.press(key)
        await pilot.press("enter")  # a figure that is not the one shown approves nothing
        await wait_until(pilot, lambda: notified(app, "'2.5' is not 25.00: nothing was approved"), timeout=10)
        assert isinstance(app.screen, RecoverApproveScreen) and app.screen.query_one("#approve", Button).disabled
        assert approval.last_decision(session, RUN) is None
        await pilot.press("backspace", "backspace", "backspace")
        for key in "25.00":
            await pilot.press(key)
        assert not app.screen.query_one("#approve", Button).disabled
        await pilot.press("enter")
        await wait_until(pilot, lambda: notified(app, "recovery of r1 approved by person:tui"), timeout=10)
    decided = approval.last_decision(session, RUN)
    assert decided is not None and decided.actor == "person:tui" and decided.detail["step"] == "approved"
    assert approval.check_approval(session, session.project.run(RUN), session.project.run(RUN).recover).ok
    session.close()
