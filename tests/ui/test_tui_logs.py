"""The log panel as a user drives it: toasts, loss chart, jump to the first error, filter, acknowledge."""

from __future__ import annotations

import shlex
from pathlib import Path

from test_tui import dashboard, focused_id, notified, wait_until

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.screens.note import NoteScreen
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.widgets.log_panel import LogPanel
from remote_gpu_trainer.widgets.log_view import LogView
from remote_gpu_trainer.widgets.loss_chart import LossChart
from support.helpers import FIXTURES, INSTANCE, RUN, wait_for_liveness, write_project

OOM_LOG = FIXTURES / "logs" / "monitor" / "oom_after_training.log"


async def oom_session(root: Path) -> Session:
    write_project(root, f"cat {shlex.quote(str(OOM_LOG))}; exit 1", roster=("seed0",))
    session = open_session(str(root))
    await create_instance(session, INSTANCE)
    await launch_run(session, RUN)
    await wait_for_liveness(session, states=("dead",))
    return session


async def test_oom_log_toasts_charts_jumps_and_acknowledges(tmp_path: Path) -> None:
    session = await oom_session(tmp_path / "p")
    app = RgtApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        panel = app.screen.query_one(LogPanel)
        await wait_until(pilot, lambda: panel.first_error is not None)
        assert panel.first_error is not None and panel.first_error.text.startswith("torch.OutOfMemoryError")

        def s01_toasted() -> bool:
            return any(n.title.startswith("S01 ") and RUN in n.title for n in app._notifications)

        await wait_until(pilot, s01_toasted)  # toasts come from the log poll, not with the first error
        titles = [n.title for n in app._notifications]
        assert any(t.startswith("S01 ") and RUN in t for t in titles)

        chart = panel.query_one(LossChart)
        await wait_until(pilot, lambda: bool(chart.query("#chart-plot")) and chart.shown_points() == 40
                         and "step 40/40" in chart.chart_title())
        assert chart.shown_points() == 40 and "step 40/40" in chart.chart_title()

        log = panel.query_one("#log", LogView)
        await pilot.press("e")
        await wait_until(pilot, lambda: not log.auto_scroll and notified(app, "line 48"))
        assert not log.auto_scroll  # parked on the error, no longer following
        assert any("line 48" in str(n.message) for n in app._notifications)
        await pilot.press("f")
        await wait_until(pilot, lambda: log.auto_scroll)
        assert log.auto_scroll

        error_text = panel.first_error.text
        await pilot.press("slash", *"outofmemory")
        await wait_until(pilot, lambda: [str(line.text) for line in log.lines] == [error_text])
        assert [str(line.text) for line in log.lines] == [panel.first_error.text]
        await pilot.press("escape")
        await wait_until(pilot, lambda: len(log.lines) > 40)
        assert len(log.lines) > 40

        await pilot.press("4")
        await wait_until(pilot, lambda: focused_id(app) == "checklist")  # `a` acts on the highlighted finding
        await pilot.press("a")
        await wait_until(pilot, lambda: isinstance(app.screen, NoteScreen))
        await pilot.press(*"known: batch 64 too big, rerun at 32", "enter")
        await wait_until(pilot, lambda: any(f.signature == "S01" and f.status == "acknowledged"
                                            for f in session.db.log_findings(RUN)))
    events = session.db.events(kind="finding_ack")
    assert events and events[0].detail == {"signature": "S01", "note": "known: batch 64 too big, rerun at 32"}
    session.close()
