"""The TUI's share of the automatic follow-ups (docs/remote-ops.md §9.2): whenever the dashboard's overview is
refreshed, a finished run whose rgt.toml asks for `auto = ["pull", "verify"]` and whose follow-up nobody took yet
gets a worker that runs it (services/fleet/auto_follow.py decides, and records it once for every watcher), then a
notification with the outcome and a fresh overview. Nothing here can tear anything down.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from remote_gpu_trainer.screens.dashboard import DashboardScreen
    from remote_gpu_trainer.views import Overview

WORKER_PREFIX = "auto-follow-"


def watch_follow_ups(screen: DashboardScreen) -> None:
    """Start follow-ups from each overview the dashboard shows."""
    screen.watch(screen, "overview", lambda overview: start_follow_ups(screen, overview), init=False)


def start_follow_ups(screen: DashboardScreen, overview: Overview | None) -> None:
    if overview is None or overview.read_only or all(run.liveness != "finished" for run in overview.runs):
        return
    from remote_gpu_trainer.services.fleet import auto_follow  # pull and verify: imported once a run finished

    session = screen.session
    for run in overview.runs:
        name = f"{WORKER_PREFIX}{run.id}"
        if run.liveness != "finished" or auto_follow.status(session, run.id) != "waiting":
            continue
        if any(worker.name == name and not worker.is_finished for worker in screen.workers):
            continue  # one worker per run at a time; the lock and the event keep other processes out
        screen.run_worker(_follow(screen, run.id), name=name, group="auto-follow")


async def _follow(screen: DashboardScreen, run_id: str) -> None:
    from remote_gpu_trainer.services.fleet import auto_follow

    done = await auto_follow.follow_up(screen.session, run_id, "finished")
    if done is None:
        return
    screen.notify(f"run {run_id}: {done.summary}", title=f"auto follow-up {done.outcome}",
                  severity="information" if done.ok else "error", timeout=30)
    screen.refresh_overview()
