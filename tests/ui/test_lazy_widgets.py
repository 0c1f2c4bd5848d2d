"""Widgets the first frame does without (issue 29): the log filter's field and the pull's progress bar are made
when first needed, and everything that reaches for them works before and after."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Input, ProgressBar

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.services.opening import open_session
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
