"""`A` on the dashboard: every box of every project this user opened (docs/remote-ops.md §9.3), through the
real app and Pilot on a real sim project whose run finished, next to a registered project whose folder was
deleted. Snapshots at 80×24 and 160×48 on a fixed clock; regenerate deliberately with `--snapshot-update` and
look at the SVGs.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Markdown, Static

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.screens.all_boxes import AllBoxesScreen
from remote_gpu_trainer.screens.dashboard import DashboardScreen
from remote_gpu_trainer.screens.help import HelpScreen
from remote_gpu_trainer.services import project_registry
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import observe_and_build
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.widgets.all_boxes_panel import AllBoxesPanel
from support.helpers import FIXED_NOW, INSTANCE, RUN, FixedClock, wait_for_liveness, write_project
from support.tui_helpers import wait_until

GONE_DETAIL = "?: no rgt.toml there any more (moved or deleted?); `rgt status` keeps listing it until it is back"


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Session:
    """The project `proj` (its run finished on the sim box) and a registered project `gone`, since deleted;
    HOME is tmp_path, so the screen shows folders as ~/…"""
    monkeypatch.setenv("HOME", str(tmp_path))
    write_project(tmp_path / "gone")
    project_registry.remember(tmp_path / "gone")
    shutil.rmtree(tmp_path / "gone")
    write_project(tmp_path / "proj")
    opened = open_session(str(tmp_path / "proj"), clock=FixedClock(FIXED_NOW))

    async def finish() -> None:
        await create_instance(opened, INSTANCE)
        await launch_run(opened, RUN)
        await wait_for_liveness(opened)
        await opened.close_transports()

    asyncio.run(finish())
    return opened


def loaded(app: RgtApp) -> bool:
    screen = app.screen
    return isinstance(screen, AllBoxesScreen) and screen.query_one(AllBoxesPanel).view is not None \
        and not screen.loading


async def open_all_boxes(pilot: Pilot[None]) -> None:
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, DashboardScreen))
    await pilot.press("A")
    await wait_until(pilot, lambda: loaded(pilot.app))  # type: ignore[arg-type]
    table = pilot.app.screen.query_one("#all-boxes-table", DataTable)
    await wait_until(pilot, lambda: not table._require_update_dimensions)
    await pilot.pause()


def text_of(static: Static) -> str:
    return str(static.render())


async def test_a_opens_every_box_and_escape_closes_it(session: Session, tmp_path: Path) -> None:
    app = RgtApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await open_all_boxes(pilot)
        screen = app.screen
        table = screen.query_one("#all-boxes-table", DataTable)
        assert table.row_count == 1
        assert [str(cell) for cell in table.get_row_at(0)] == [
            "test-project", "box", "sim", "sim-box", "running", "$0.89/h", "$0.00", "0s", "r1 finished"]
        summary = text_of(screen.query_one("#all-boxes-summary", Static))
        assert summary == "All boxes · 2 project(s) · 1 instance(s) · burning $0.89/h · asked at 12:00:00 UTC"
        details = text_of(screen.query_one("#all-boxes-details", Static)).splitlines()
        assert details == ["Projects not read:", f"gone       ~/gone  {GONE_DETAIL}"]

        previous = screen.query_one(AllBoxesPanel).view
        await pilot.press("r")  # asks again: a new view replaces the old one
        await wait_until(pilot, lambda: loaded(app) and screen.query_one(AllBoxesPanel).view is not previous)

        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        assert not any(isinstance(s, AllBoxesScreen) for s in app.screen_stack)
        await pilot.press("question_mark")  # the help lists the key
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        source = app.screen.query_one(Markdown).source
        assert "| `A` | all boxes: every instance of every project you opened" in source
    await session.close_transports()
    session.close()


async def test_the_screen_changes_nothing(session: Session) -> None:
    """Opening it twice leaves the box running and the run's gate closed (nothing was pulled)."""
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(2):
            await open_all_boxes(pilot)
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen))
    overview = await observe_and_build(session)
    assert overview.instances[0].state == "running"
    assert overview.runs[0].gate.open is False and overview.runs[0].evidence_state == "trained"
    await session.close_transports()
    session.close()


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_all_boxes_snapshot(snap_compare: Any, session: Session, size: tuple[int, int]) -> None:
    app = RgtApp(session)
    app.animation_level = "none"
    assert snap_compare(app, terminal_size=size, run_before=open_all_boxes)
