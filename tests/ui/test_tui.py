"""The real app driven by keyboard through Pilot, on a real sim project with a real finished run."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Button, Input, ProgressBar

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.screens.dashboard import DashboardScreen
from remote_gpu_trainer.screens.help import HelpScreen
from remote_gpu_trainer.screens.teardown import TeardownScreen
from remote_gpu_trainer.services import instances
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.instances import create_instance, instance_status
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.watch.liveness import run_state
from remote_gpu_trainer.services.watch.monitors import tail_log
from support.helpers import INSTANCE, RUN, launched_and_finished
from support.tui_helpers import dashboard, focused_id, gate_open, notified, wait_until


async def test_teardown_only_after_verify_and_typed_id(project_dir: Path) -> None:
    session = open_session(str(project_dir))
    await launched_and_finished(session)
    disk = project_dir / ".rgt" / "sim" / INSTANCE
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        button = app.screen.query_one("#teardown", Button)
        assert button.disabled
        assert dashboard(app).check_action("teardown", ()) is None  # shown greyed, with reasons
        await pilot.press("t")
        await pilot.pause()
        assert not isinstance(app.screen, TeardownScreen)

        await pilot.press("p")
        await wait_until(pilot, lambda: (project_dir / "runs" / RUN / "seed1" / "best.pth").is_file()
                         and "pull" not in dashboard(app).busy)
        bar = app.screen.query_one("#pull-progress", ProgressBar)
        pulled = sum(p.stat().st_size for p in (project_dir / "runs" / RUN).rglob("*")
                     if p.is_file() and p.name != "PULL_MANIFEST.json")
        await wait_until(pilot, lambda: bar.total == pulled and bar.progress == pulled)
        assert bar.total == pulled and bar.progress == pulled  # the bar counted every byte of every file
        await pilot.press("v")
        await wait_until(pilot, lambda: gate_open(app))
        await wait_until(pilot, lambda: not app.screen.query_one("#teardown", Button).disabled)

        await pilot.press("t")
        await wait_until(pilot, lambda: isinstance(app.screen, TeardownScreen) and focused_id(app) == "cancel")
        assert app.focused is not None and app.focused.id == "cancel"
        await pilot.press("enter")  # Enter on Cancel cancels
        await wait_until(pilot, lambda: not isinstance(app.screen, TeardownScreen))
        assert disk.is_dir()

        await pilot.press("t")
        await wait_until(pilot, lambda: isinstance(app.screen, TeardownScreen))
        await wait_until(pilot, lambda: focused_id(app) == "cancel")
        await pilot.press("shift+tab")  # from Cancel back to the id field
        await wait_until(pilot, lambda: focused_id(app) == "confirm-id")
        assert app.focused is not None and app.focused.id == "confirm-id"
        await pilot.press(*"wrong-id")
        await wait_until(pilot, lambda: app.screen.query_one("#confirm-id", Input).value == "wrong-id")
        assert app.screen.query_one("#confirm", Button).disabled
        await pilot.press("enter")
        await wait_until(pilot, lambda: notified(app, "'wrong-id' is not the instance id"))
        assert isinstance(app.screen, TeardownScreen) and disk.is_dir()
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, TeardownScreen))
        assert disk.is_dir()

        await pilot.press("t")
        await wait_until(pilot, lambda: isinstance(app.screen, TeardownScreen))
        plan_id = app.screen.plan.provider_id  # type: ignore[attr-defined]
        await wait_until(pilot, lambda: focused_id(app) == "cancel")
        await pilot.press("shift+tab")
        await wait_until(pilot, lambda: focused_id(app) == "confirm-id")
        await pilot.press(*plan_id)
        await wait_until(pilot, lambda: app.screen.query_one("#confirm-id", Input).value == plan_id
                         and not app.screen.query_one("#confirm", Button).disabled)
        assert app.screen.query_one("#confirm-id", Input).value == plan_id
        assert not app.screen.query_one("#confirm", Button).disabled
        await pilot.press("enter")
        await wait_until(pilot, lambda: not disk.exists())
        await wait_until(pilot, lambda: dashboard(app).overview is not None and
                         dashboard(app).overview.instance(INSTANCE).state == "terminated")  # type: ignore[union-attr]
    approvals = [e for e in session.db.events(kind="approval") if "terminate" in e.summary]
    assert len(approvals) == 1 and approvals[0].detail["typed_id"] == plan_id
    session.close()


async def test_read_only_hides_teardown_and_help_opens(project_dir: Path) -> None:
    session = open_session(str(project_dir), read_only=True)
    app = RgtApp(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        assert dashboard(app).check_action("teardown", ()) is False
        assert not app.screen.query_one("#teardown", Button).display
        assert "READ-ONLY" in str(app.screen.query_one("#topbar").render())
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen))
    session.close()


async def test_log_streams_and_filters(project_dir: Path) -> None:
    session = open_session(str(project_dir))
    await launched_and_finished(session)
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = dashboard(app)
        from remote_gpu_trainer.widgets.log_panel import LogPanel

        panel = screen.query_one(LogPanel)
        await wait_until(pilot, lambda: "cell seed1 complete" in panel.text())
        await pilot.press("slash")
        await pilot.press(*"seed0")
        await wait_until(pilot, lambda: "seed1" not in panel.text() and "cell seed0 complete" in panel.text())
        assert "cell seed0 complete" in panel.text()
        await pilot.press("escape")
        await wait_until(pilot, lambda: "cell seed1 complete" in panel.text())
    session.close()


async def test_job_survives_the_tui_quitting(project_dir: Path) -> None:
    from support.helpers import wait_for_liveness, write_project

    write_project(project_dir, command="sleep 3 && echo slow-job-done")
    session = open_session(str(project_dir))
    await create_instance(session, INSTANCE)
    await launch_run(session, RUN)
    app = RgtApp(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        await pilot.press("q")
    session.close()
    reopened = open_session(str(project_dir))
    assert (await run_state(reopened, RUN)).liveness.state == "running"
    assert await wait_for_liveness(reopened, states=("finished", "dead")) == "dead"  # no artifacts: incomplete
    assert (await run_state(reopened, RUN)).liveness.detail.startswith("incomplete")
    log, _ = await tail_log(reopened, RUN, 0)
    assert log.count(b"slow-job-done") == 2
    reopened.close()


async def test_ticking_a_manual_checklist_item_needs_a_note(project_dir: Path) -> None:
    from remote_gpu_trainer.screens.note import NoteScreen

    session = open_session(str(project_dir))
    app = RgtApp(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        await pilot.press("4")
        await wait_until(pilot, lambda: focused_id(app) == "checklist")  # the keys below go to the checklist
        rows = [row.key for row in dashboard(app).current_run().checklist_rows]  # type: ignore[union-attr]
        await pilot.press(*["down"] * rows.index("T01"))  # A01 and the VERIFY checks are automatic; then T01
        await pilot.press("space")
        await wait_until(pilot, lambda: isinstance(app.screen, NoteScreen))
        await pilot.press("enter")  # an empty note is refused
        await wait_until(pilot, lambda: notified(app, "a note is required"))
        assert isinstance(app.screen, NoteScreen)
        await pilot.press(*"same budget for all", "enter")
        await wait_until(pilot, lambda: "T01" in session.db.ticks("r1"))
        await wait_until(pilot, lambda: any(c.id == "T01" and c.status == "ticked"
                                            for c in dashboard(app).current_run().checklist))  # type: ignore[union-attr]
        await wait_until(pilot, lambda: "T01 ticked: same budget for all" in
                         str(app.screen.query_one("#checklist-summary").render()))
        assert "T01 ticked: same budget for all" in str(app.screen.query_one("#checklist-summary").render())
        await wait_until(pilot, lambda: focused_id(app) == "checklist")  # back from the note, on the checklist
        await pilot.press("up", "space")  # automatic items cannot be ticked
        await wait_until(pilot, lambda: notified(app, "is answered automatically"))
        assert not isinstance(app.screen, NoteScreen)
    tick = session.db.ticks("r1")["T01"]
    assert tick.status == "ticked" and tick.note == "same budget for all"
    assert session.db.events(kind="checklist")[0].detail["note"] == "same budget for all"
    session.close()


async def test_stop_is_a_plain_confirmation_and_the_disk_keeps_billing(project_dir: Path) -> None:
    from remote_gpu_trainer.screens.confirm import ConfirmScreen
    from support.helpers import write_project

    write_project(project_dir, command="sleep 60")
    session = open_session(str(project_dir))
    await create_instance(session, INSTANCE)
    await launch_run(session, RUN)
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        await pilot.press("s")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and focused_id(app) == "no" and
                         "the disk keeps billing" in str(app.screen.query_one("#confirm-lines").render()))
        assert app.focused is not None and app.focused.id == "no"
        lines = str(app.screen.query_one("#confirm-lines").render())
        assert "the disk keeps billing at the storage price" in lines
        await pilot.press("enter")  # Enter on Cancel does nothing
        await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert (await instance_status(session, INSTANCE)).state == "running"
        await pilot.press("s")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and focused_id(app) == "no")
        await pilot.press("right", "enter")
        await wait_until(pilot, lambda: dashboard(app).overview is not None and
                         dashboard(app).overview.instance(INSTANCE).state == "stopped")  # type: ignore[union-attr]
        instance = dashboard(app).overview.instance(INSTANCE)  # type: ignore[union-attr]
        assert instance is not None and instance.burn_per_hour == 0.02 and instance.billing == "storage only"
    approval = [e for e in session.db.events(kind="approval") if "stop" in e.summary]
    assert len(approval) == 1 and approval[0].detail["gated"] is False
    assert (await run_state(session, RUN)).liveness.state == "dead"  # powering off killed the job
    session.close()


async def test_an_incomplete_pull_says_so_and_names_the_file(project_dir: Path) -> None:
    """The TUI face of a pull that did not fetch every file: an error toast naming it, never 'pulled'."""
    from remote_gpu_trainer.services.evidence.manifest import build_manifest

    session = open_session(str(project_dir))
    await launched_and_finished(session)
    run = run_config(session, RUN)
    await build_manifest(await instances.remote(session, INSTANCE), run, session.db)
    box_root = project_dir / ".rgt" / "sim" / INSTANCE / "workspace" / "rgt" / RUN
    (box_root / "seed1" / "best.pth").unlink()
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        await pilot.press("p")
        await wait_until(pilot, lambda: notified(app, "pull incomplete"))
        assert notified(app, "seed1/best.pth: missing on the box")
        assert not notified(app, "pulled ")
    session.close()
