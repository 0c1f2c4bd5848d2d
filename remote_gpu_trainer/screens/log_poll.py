"""The dashboard's log panel fed from the run's log (docs/ux.md §4): when the timer polls, and one poll. Its own
module so that screens/dashboard.py stays about the screen's layout and actions."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.services.watch import run_logs
from remote_gpu_trainer.widgets.log_panel import LogPanel
from remote_gpu_trainer.widgets.loss_chart import LossChart

if TYPE_CHECKING:
    from remote_gpu_trainer.screens.dashboard import DashboardScreen


def log_poll_due(screen: DashboardScreen) -> bool:
    """Whether the shown run's log is read at this tick (run_logs.log_poll_interval: a run that ended, less often);
    when it is, the tick is remembered."""
    run = screen.current_run()
    now = time.monotonic()
    if now - screen.log_polled_at < run_logs.log_poll_interval(run.liveness if run else None):
        return False
    screen.log_polled_at = now
    return True


async def poll_log_once(screen: DashboardScreen) -> None:
    """One read of the shown run's log: the backfill first, then what it gained, its alerts and its chart."""
    run_id = screen.run_id
    assert run_id is not None
    panel = screen.query_one(LogPanel)
    try:
        if not screen.log_backfilled:
            backfill = await run_logs.log_backfill(screen.session, run_id)
            if not screen.showing() or screen.run_id != run_id:  # removed, or another run is shown now
                return
            panel.append(backfill)
            screen.log_backfilled = True
        update = await run_logs.follow_log(screen.session, run_id, max_reads=1)
    except RgtError:
        return  # the box is unreachable or gone; the overview says so
    if update is None or not screen.showing() or screen.run_id != run_id:
        return
    if update.restarted:
        panel.reset("the log was truncated or replaced: following it from its first line")
    panel.append(update.lines)
    panel.set_progress(update.partial)
    screen.show_alerts(update.alerts)
    if update.alerts:
        screen.refresh_overview()  # the checklist lists the findings the toasts announce
    chart = run_logs.loss_chart(screen.session, screen.run_id)
    if chart is not None:
        panel.query_one(LossChart).set_series(chart.steps, chart.values, chart.title, chart.x)
    if update.more:
        screen.call_later(screen.poll_log)  # a backlog: keep reading, one bounded chunk per frame
