"""Widgets the first frame does without (issue 29): the log filter's field, the pull's progress bar and the
Deliver panel's table are made when first needed, and everything that reaches for them works before and after."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Input, ProgressBar

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.widgets.deliver_panel import DeliverPanel
from remote_gpu_trainer.widgets.log_panel import LogPanel
from support.helpers import launched_and_finished
from support.tui_helpers import dashboard, focused_id, wait_until


async def test_filter_field_is_made_at_the_first_slash(project_dir: Path) -> None:
    session = open_session(str(project_dir))
    await launched_and_finished(session)
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        screen = dashboard(app)
        assert not screen.query("#log-filter") and not screen.query(ProgressBar)  # not composed at start
        await pilot.press("escape")  # clearing a filter never opened: nothing to clear, nothing raised
        panel = screen.query_one(LogPanel)
        assert panel.filter_text == ""

        await pilot.press("slash", *"epoch")
        await wait_until(pilot, lambda: panel.filter_text == "epoch" and focused_id(app) == "log-filter")
        field = screen.query_one("#log-filter", Input)
        assert field.has_class("-visible") and field.value == "epoch"
        assert panel.children[0] is field  # above the chart and the log, where it was composed before

        await pilot.press("escape")
        await wait_until(pilot, lambda: panel.filter_text == "" and not field.has_class("-visible"))
        assert field.value == ""
        await pilot.press("slash")
        await wait_until(pilot, lambda: field.has_class("-visible"))
        assert len(screen.query("#log-filter")) == 1  # made once
    session.close()


async def test_deliver_panel_is_filled_when_first_shown(project_dir: Path) -> None:
    session = open_session(str(project_dir))
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        panel = dashboard(app).query_one(DeliverPanel)
        assert not panel.children  # hidden at start: nothing composed in it
        await pilot.press("5")
        await wait_until(pilot, lambda: focused_id(app) == "deliver")
        assert [child.id for child in panel.children] == ["deliver", "deliver-summary", "deliver-status"]
        await pilot.press("1", "5")
        await wait_until(pilot, lambda: focused_id(app) == "deliver")
        assert len(panel.children) == 3  # made once
    session.close()
