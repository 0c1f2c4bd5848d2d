"""Labelled snapshots of the dashboard, at 80×24 and at a large size, on a fixed clock.

The job copies committed checkpoints, so hashes, sizes and log lines are the same on every run.
Regenerate deliberately with `pytest tests/test_snapshots.py --snapshot-update` and look at the SVGs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import Button, DataTable, Input

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.screens.confirm import ConfirmScreen
from remote_gpu_trainer.screens.dashboard import DashboardScreen
from remote_gpu_trainer.screens.help import HelpScreen
from remote_gpu_trainer.screens.note import NoteScreen
from remote_gpu_trainer.screens.teardown import TeardownScreen
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.widgets.log_panel import LogPanel
from support.helpers import FIXED_NOW, INSTANCE, RUN, FixedClock, wait_for_liveness, write_project


def finished_session(root: Path, verified: bool) -> Session:
    write_project(root)
    session = open_session(str(root), clock=FixedClock(FIXED_NOW))

    async def prepare() -> None:
        await create_instance(session, INSTANCE)
        await launch_run(session, RUN)
        await wait_for_liveness(session)
        if verified:
            await pull_run(session, RUN)
            assert (await verify_run(session, RUN)).ok

    asyncio.run(prepare())
    return session


def still_app(session: Session) -> RgtApp:
    """The app without animations: a tab underline caught mid-slide would differ from run to run."""
    app = RgtApp(session)
    app.animation_level = "none"
    return app


async def settle(pilot: Pilot[None]) -> None:
    """Wait for the whole log, then for an overview made after it, then let the screen redraw."""
    app = pilot.app
    for _ in range(400):
        screen = app.screen_stack[-1] if len(app.screen_stack) > 1 else None
        if isinstance(screen, DashboardScreen) and screen.overview is not None and \
                "exited 0" in screen.query_one(LogPanel).text().split("seed1")[-1]:
            break
        await pilot.pause(0.05)
    else:
        raise AssertionError("dashboard never settled")
    await fresh_overview(pilot, screen)
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


async def fresh_overview(pilot: Pilot[None], screen: DashboardScreen) -> None:
    """Refresh (`r`) and wait until an overview made after the log was read is applied and every table is sized.

    The log poll stores its findings; only the next overview shows them, and refilling a table resets its
    column widths until the app is idle. An overview that started before the log was read to its end could
    still be refilling the checklist when the screenshot is taken.
    """
    shown = screen.overview
    await pilot.press("r")
    for _ in range(400):
        if screen.overview is not shown and all(sized(table) for table in screen.query(DataTable)):
            return
        await pilot.pause(0.05)
    raise AssertionError("no fresh overview after the log was read")


def sized(table: DataTable[Any]) -> bool:
    """Every column is as wide as its widest cell: DataTable measures new rows only when the app is idle, which
    under load can come after the first paint (the snapshot would show columns as narrow as their labels)."""
    if table._require_update_dimensions:
        return False
    for index, column in enumerate(table.ordered_columns):
        cells = table.get_column_at(index) if table.row_count else []
        widest = max((cell.cell_len if isinstance(cell, Text) else cell_len(str(cell)) for cell in cells), default=0)
        if column.content_width < widest:
            return False
    return True


async def wait_for(pilot: Pilot[None], ready: Callable[[Pilot[None]], bool], what: str) -> None:
    """Pause until `ready` holds: a fixed pause after a key is too short on a loaded machine."""
    for _ in range(400):
        if ready(pilot):
            return
        await pilot.pause(0.05)
    raise AssertionError(f"{what} never happened")


def panel_shown(panel_id: str) -> Callable[[Pilot[None]], bool]:
    """The panel is the active one and laid out (it has a region on screen), its tables sized."""
    def ready(pilot: Pilot[None]) -> bool:
        screen = pilot.app.screen
        if not isinstance(screen, DashboardScreen):
            return False
        panel = screen.query_one(f"#{panel_id}")
        return panel.has_class("-active") and panel.region.area > 0 and \
            not any(table._require_update_dimensions for table in panel.query(DataTable))
    return ready


def before(*keys: str, ready: Callable[[Pilot[None]], bool] | None = None,
           then: Callable[[Pilot[None]], Awaitable[None]] | None = None) -> Callable[[Pilot[None]], Awaitable[None]]:
    async def run_before(pilot: Pilot[None]) -> None:
        await settle(pilot)
        if keys:
            await pilot.press(*keys)
        if ready is not None:
            await wait_for(pilot, ready, f"the screen after {keys}")
        if then is not None:
            await then(pilot)
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_dashboard_gate_closed(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    """[gate closed] the run finished, nothing pulled: teardown greyed with its reasons."""
    session = finished_session(tmp_path / "p", verified=False)
    assert snap_compare(still_app(session), terminal_size=size, run_before=before())
    session.close()


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_dashboard_gate_open(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    """[gate open] pulled and verified: every checkpoint verified, the teardown control enabled."""
    session = finished_session(tmp_path / "p", verified=True)
    assert snap_compare(still_app(session), terminal_size=size, run_before=before())
    session.close()


def test_checkpoints_tab_at_80x24(snap_compare: Any, tmp_path: Path) -> None:
    """[checkpoints tab] number keys switch panels on a narrow terminal."""
    session = finished_session(tmp_path / "p", verified=True)
    assert snap_compare(still_app(session), terminal_size=(80, 24),
                        run_before=before("2", ready=panel_shown("panel-checkpoints")))
    session.close()


@pytest.mark.parametrize("size", [(80, 24), (100, 32)], ids=["80x24", "100x32"])
def test_teardown_modal_id_typed(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    """[id typed] the confirmation with the instance id typed: Terminate enabled, nothing done yet."""
    session = finished_session(tmp_path / "p", verified=True)

    async def type_id(pilot: Pilot[None]) -> None:
        for _ in range(200):
            if isinstance(pilot.app.screen, TeardownScreen):
                break
            await pilot.pause(0.05)
        screen = pilot.app.screen
        assert isinstance(screen, TeardownScreen)
        field = screen.query_one("#confirm-id", Input)
        field.cursor_blink = False
        field.focus()
        await pilot.press(*screen.plan.provider_id)
        await wait_for(pilot, lambda _: field.value == screen.plan.provider_id and
                       not screen.query_one("#confirm", Button).disabled, "Terminate enabled by the typed id")

    assert snap_compare(still_app(session), terminal_size=size, run_before=before("t", then=type_id))
    assert (tmp_path / "p" / ".rgt" / "sim" / INSTANCE).is_dir()
    session.close()


def screen_is(kind: type) -> Callable[[Pilot[None]], bool]:
    return lambda pilot: isinstance(pilot.app.screen, kind) and pilot.app.screen.region.area > 0


def test_stop_confirmation_at_80x24(snap_compare: Any, tmp_path: Path) -> None:
    """[stop] the plain confirmation of a reversible action: what still bills, focus on No."""
    session = finished_session(tmp_path / "p", verified=False)
    assert snap_compare(still_app(session), terminal_size=(80, 24),
                        run_before=before("s", ready=screen_is(ConfirmScreen)))
    assert (tmp_path / "p" / ".rgt" / "sim" / INSTANCE).is_dir()
    session.close()


def test_help_at_80x24(snap_compare: Any, tmp_path: Path) -> None:
    """[?] keys and glossary."""
    session = finished_session(tmp_path / "p", verified=False)
    assert snap_compare(still_app(session), terminal_size=(80, 24), run_before=before("question_mark",
                        ready=screen_is(HelpScreen)))
    session.close()


def test_note_modal_at_80x24(snap_compare: Any, tmp_path: Path) -> None:
    """[note] ticking a manual checklist item asks for the note a reader of the paper will see."""
    session = finished_session(tmp_path / "p", verified=False)

    async def tick_first_manual_item(pilot: Pilot[None]) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, DashboardScreen)
        run = screen.current_run()
        assert run is not None
        manual = next(item.id for item in run.checklist if item.kind == "tick")
        table = screen.query_one("#checklist", DataTable)
        table.focus()
        table.move_cursor(row=[row.key.value for row in table.ordered_rows].index(manual))
        await pilot.press("space")
        await wait_for(pilot, screen_is(NoteScreen), "the note dialog after space")
        field = pilot.app.screen.query_one("#note", Input)
        field.cursor_blink = False
        await pilot.press(*"same budget for every method")
        await wait_for(pilot, lambda _: field.value == "same budget for every method", "the typed note")

    assert snap_compare(still_app(session), terminal_size=(80, 24),
                        run_before=before("4", ready=panel_shown("panel-checklist"), then=tick_first_manual_item))
    assert session.db.ticks(RUN) == {}  # nothing is ticked until the note is saved
    session.close()


def oom_session(root: Path) -> Session:
    oom_log = Path(__file__).parents[1] / "fixtures" / "logs" / "monitor" / "oom_after_training.log"
    write_project(root, f"cat {oom_log}; exit 1", roster=("seed0",))
    session = open_session(str(root), clock=FixedClock(FIXED_NOW))

    async def prepare() -> None:
        await create_instance(session, INSTANCE)
        await launch_run(session, RUN)
        await wait_for_liveness(session, states=("dead",))

    asyncio.run(prepare())
    return session


async def settle_oom(pilot: Pilot[None]) -> None:
    """The whole log read, the chart drawn, the findings listed, and the toasts gone."""
    from remote_gpu_trainer.widgets.loss_chart import LossChart

    app = pilot.app
    for _ in range(400):
        screen = app.screen_stack[-1] if len(app.screen_stack) > 1 else None
        if isinstance(screen, DashboardScreen) and screen.overview is not None and \
                "exited 1" in screen.query_one(LogPanel).text() and \
                screen.query_one(LossChart).shown_points() == 40 and \
                screen.query_one("#checklist", DataTable).row_count > 0:
            break
        await pilot.pause(0.05)
    else:
        raise AssertionError("dashboard never settled")
    await fresh_overview(pilot, screen)
    app.clear_notifications()
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_oom_log_chart_and_findings(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    """[log + findings] a run that died of CUDA OOM: loss chart, the traceback in the log, S01/S03/S02 listed."""
    session = oom_session(tmp_path / "p")

    async def run_before(pilot: Pilot[None]) -> None:
        await settle_oom(pilot)
        if size == (80, 24):
            await pilot.press("3")
            await wait_for(pilot, panel_shown("panel-log"), "the log panel after 3")
            from remote_gpu_trainer.widgets.loss_chart import LossChart

            chart = pilot.app.screen.query_one(LossChart)  # drawn in the background once it has a size
            await wait_for(pilot, lambda _: chart.shown_points() == 40, "the loss chart drawn")
        await pilot.pause()

    assert snap_compare(still_app(session), terminal_size=size, run_before=run_before)


@pytest.fixture(scope="module")
def demo_projects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`rgt demo` (three seeds) and `rgt demo --flawed` (plus its planted run), each run on the sim box on the
    fixed clock, pulled and verified (so audited) once for the module. Launched as `rgt demo` does but without
    its phase-0 audit, whose rows (free disk, RAM, the temp folder's path, boot id) differ from machine to
    machine and would change the checklist's width. The job replays a committed training
    (support/demo_replay.py): trained bytes differ from CPU to CPU, and the screen shows their sha256 and
    losses. The tests that read what the demo trains train it for real under two ATen CPU capabilities
    (support/cpu_capability.py)."""
    from support.demo_replay import replayed_demo

    return {name: replayed_demo(tmp_path_factory.mktemp(name) / "rgt-demo", flawed=flawed)
            for name, flawed in (("demo", False), ("flawed", True))}


async def settle_demo(pilot: Pilot[None]) -> None:
    """The demo's log read to its last cell, an overview made after it, the checklist sized, toasts gone."""
    for _ in range(600):
        screen = pilot.app.screen_stack[-1] if len(pilot.app.screen_stack) > 1 else None
        if isinstance(screen, DashboardScreen) and screen.overview is not None and \
                "cell seed2 exited 0" in screen.query_one(LogPanel).text():
            break
        await pilot.pause(0.05)
    else:
        raise AssertionError("the demo dashboard never settled")
    await fresh_overview(pilot, screen)
    pilot.app.clear_notifications()
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


def flawed_run_settled(pilot: Pilot[None]) -> bool:
    """The dashboard shows demo-flawed, its whole log read and its checklist filled."""
    screen = pilot.app.screen
    if not isinstance(screen, DashboardScreen) or screen.run_id != "demo-flawed":
        return False
    run = screen.current_run()
    return run is not None and run.id == "demo-flawed" and \
        "cell seed0 exited 0" in screen.query_one(LogPanel).text() and bool(run.checklist_rows)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
@pytest.mark.parametrize("which", ["demo", "flawed"])
def test_demo_checklist(snap_compare: Any, demo_projects: dict[str, Path], size: tuple[int, int],
                        which: str) -> None:
    """[VERIFY] the demo's checklist after verification: every check's answer (real passes for the clean demo;
    V05 does not judge EVIDENCE.json's claims before b on the Deliver panel builds them); with --flawed, the
    flawed run's (n moves to it): its planted findings (V26 critical, V14 error, V04 info) first, worst first."""
    session = open_session(str(demo_projects[which]), clock=FixedClock(FIXED_NOW))

    async def run_before(pilot: Pilot[None]) -> None:
        await settle_demo(pilot)
        if which == "flawed":
            await pilot.press("n")
            await wait_for(pilot, flawed_run_settled, "the flawed run's dashboard after n")
            screen = pilot.app.screen
            assert isinstance(screen, DashboardScreen)
            await fresh_overview(pilot, screen)
            pilot.app.clear_notifications()  # "showing run demo-flawed" would cover the panel's corner
            await pilot.wait_for_scheduled_animations()
        await pilot.press("4")
        await wait_for(pilot, panel_shown("panel-checklist"), "the checklist panel after 4")
        await pilot.pause()

    assert snap_compare(still_app(session), terminal_size=size, run_before=run_before)
    session.close()


def delivered_session(root: Path) -> Session:
    """support/deliver_project's project built (figure, table, EVIDENCE.json, macros) and reconciled against a
    paper quoting one stale number, all before the app opens, on the fixed clock: the Deliver panel's rows
    are the same on every machine (no run, no box, no path outside the project on screen). Its capsules were
    written, not pulled: the claim is planned and its number discloses them as unverified evidence."""
    from remote_gpu_trainer.services.deliver.build import build_all
    from remote_gpu_trainer.services.deliver.reconcile import reconcile_project
    from support.deliver_project import user_project

    user_project(root).close()
    toml = root / "rgt.toml"
    toml.write_text(toml.read_text(encoding="utf-8") + '\n[deliver]\ndocs = ["paper.md"]\n', encoding="utf-8")
    (root / "paper.md").write_text("# Results\n\nOur model reaches acc 0.83 on the test set.\n", encoding="utf-8")
    session = open_session(str(root), clock=FixedClock(FIXED_NOW))
    built = build_all(session.project, session.db, FIXED_NOW)
    assert built.exit_code == 0, [step.line for step in built.steps]
    assert reconcile_project(session.project).report.exit_code == 1
    return session


def deliver_shown(rows: int) -> Callable[[Pilot[None]], bool]:
    def ready(pilot: Pilot[None]) -> bool:
        screen = pilot.app.screen
        return isinstance(screen, DashboardScreen) and screen.overview is not None and \
            screen.deliver_view is not None and panel_shown("panel-deliver")(pilot) and \
            screen.query_one("#deliver", DataTable).row_count == rows and \
            all(sized(table) for table in screen.query(DataTable))
    return ready


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_deliver_panel(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    """[deliver] 5: the claim with its ladder state and number, the figure and the table current with their QA,
    the drift reconcile found in the paper; b and r (reconcile) in the footer."""
    session = delivered_session(tmp_path / "p")

    async def run_before(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda p: isinstance(p.app.screen, DashboardScreen) and
                       p.app.screen.overview is not None, "the first overview")
        await pilot.press("5")
        await wait_for(pilot, deliver_shown(4), "the Deliver panel after 5")
        pilot.app.clear_notifications()
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()

    assert snap_compare(still_app(session), terminal_size=size, run_before=run_before)
    session.close()


def inbox_session(root: Path) -> Session:
    """The verified project with the approval inbox filled on the fixed clock: an agent's teardown (the gate is
    open: it waits for the typed id), its rent a person rejected, and an allowance; read five minutes later."""
    from remote_gpu_trainer.services.inbox import allowances, decide
    from remote_gpu_trainer.services.inbox.model import RequestKind, agent_actor, person_actor
    from remote_gpu_trainer.services.inbox.requests import file_request

    session = finished_session(root, verified=True)
    agent, person = agent_actor("claude-code"), person_actor("tui")

    async def fill() -> None:
        await file_request(session, RequestKind.TEARDOWN, actor=agent, why="r1 is pulled and verified; stop paying",
                           instance=INSTANCE)
        rent = await file_request(session, RequestKind.RENT, actor=agent, why="train seed2 as well", run_id=RUN,
                                  params={"hours": 3})
        decide.reject(session, rent.id, actor=person, note="one seed more is not in the budget")
        await session.close_transports()

    asyncio.run(fill())
    allowances.grant(session, actor=person, max_price_per_hour=1.0, total=10.0, hours=8)
    assert isinstance(session.clock, FixedClock)
    session.clock.advance(minutes=5)
    return session


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_approvals_screen(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    """[i] the approval inbox: the pending teardown highlighted with its plan computed now and what approving it
    takes (the typed id), the rejected rent with its note, the allowance in the summary line."""
    from remote_gpu_trainer.screens.approvals import ApprovalsScreen
    from remote_gpu_trainer.widgets.approvals_panel import ApprovalsPanel

    session = inbox_session(tmp_path / "p")

    def plan_computed(pilot: Pilot[None]) -> bool:
        screen = pilot.app.screen
        if not isinstance(screen, ApprovalsScreen) or screen.region.area == 0:
            return False
        panel = screen.query_one(ApprovalsPanel)
        return panel.highlighted() == "Q-000001" and "Q-000001" in screen.plans and not panel.computing and \
            panel.detail == screen.plans["Q-000001"] and all(sized(table) for table in screen.query(DataTable))

    async def clear(pilot: Pilot[None]) -> None:
        pilot.app.clear_notifications()
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(still_app(session), terminal_size=size, run_before=before("i", ready=plan_computed,
                                                                                   then=clear))
    assert (tmp_path / "p" / ".rgt" / "sim" / INSTANCE).is_dir()
    session.close()
