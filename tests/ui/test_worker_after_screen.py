"""A worker that finishes after its screen was removed draws nothing and crashes nothing (issue 26, item 15).

Seen once while a benchmark drove the dashboard: `NoMatches("No nodes match '#topbar' on DashboardScreen")`
from the overview worker. A screen's widgets are removed one by one: #topbar, a leaf, is gone while the panels
(whose own children go first) are still there, so the worker's old guard (`query(InstancesPanel)`) said "still
here" and its result went to watch_overview, which looked for #topbar.

Driven deterministically through Pilot, with two gates the test holds and nothing of rgt's replaced:
- the refresh in flight: the state database's write lock, held by the test's own connection. The clock has moved
  past the meter's sample interval, so the refresh stores a sample and waits for the lock in its thread;
- the removal in flight: a widget of the test's inside the instances panel, whose message loop is busy until
  the test lets it go, so the panel outlives #topbar as panels do while a screen is taken down.
The dashboard is popped; once its loop has stopped and #topbar is gone, the lock is released and the worker's
result arrives in that window.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from textual.message import Message
from textual.widget import Widget
from textual.worker import WorkerState

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.services.meter import METER_SAMPLE_S
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.widgets.instances_panel import InstancesPanel
from support.helpers import FixedClock, write_project
from support.tui_helpers import dashboard, wait_until


class Holder(Widget):
    """Stands for a panel still being taken down: its message loop is busy until the test sets `gate`."""

    class Hold(Message):
        pass

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.entered = False

    async def on_holder_hold(self, _: Holder.Hold) -> None:
        self.entered = True
        await self.gate.wait()


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Loop turns until `predicate` holds: the app may be mid-removal, where Pilot's pause does not apply."""
    for _ in range(3000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not reached: {what}")


async def test_an_overview_that_arrives_after_the_dashboard_was_removed_is_dropped(tmp_path: Path) -> None:
    write_project(tmp_path / "p")
    clock = FixedClock(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    session = Session(load_project(tmp_path / "p" / "rgt.toml"), clock=clock)
    app = RgtApp(session)
    holder = Holder()
    lock = sqlite3.connect(session.project.state_db, isolation_level=None, timeout=30)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            screen = dashboard(app)
            await wait_until(pilot, lambda: screen.overview is not None)
            try:
                lock.execute("BEGIN IMMEDIATE")  # gate 1: no write to the state database until released
                clock.advance(seconds=METER_SAMPLE_S + 1)  # the next refresh stores a meter sample
                screen.refresh_overview()  # starts one, or has the running one go round once more
                await until(lambda: screen.refreshing, "a refresh in flight")
                workers = [w for w in app.workers if w.group == "overview" and w.node is screen]
                await screen.query_one(InstancesPanel).mount(holder)
                holder.post_message(Holder.Hold())
                await until(lambda: holder.entered, "the holder busy")  # gate 2
                app.pop_screen()  # the dashboard is removed; its removal now waits for the holder
                await until(lambda: not screen.is_running and not screen.query("#topbar"), "#topbar removed")
                assert screen.query(InstancesPanel), "the panel outlives #topbar while the screen goes"
                lock.execute("COMMIT")  # the refresh goes on and finishes while the screen is half gone
                await until(lambda: all(w.is_finished for w in workers), "the refresh finished")
                states = [w.state for w in workers]
            finally:
                holder.gate.set()
                if lock.in_transaction:
                    lock.execute("ROLLBACK")
            await until(lambda: not app.screen_stack or app.screen is not screen, "the dashboard gone")
        assert states and set(states) == {WorkerState.SUCCESS}, [(w.state, w.error) for w in workers]
    finally:
        lock.close()
        await session.close_transports()
        session.close()
