"""The TUI as a watcher of preempted runs (docs/remote-ops.md §10.1): whenever the dashboard's overview shows a run
with `recover` limits preempted, a worker hands it to recovery (services/recover/run.py decides under the run's lock,
records each step once for every watcher, and relaunches only within a person's standing approval), then says the
outcome in a notification and refreshes the overview. A run recovery refused is asked again at most every RETRY_S
(its limits or approval may change meanwhile), not at every refresh. Nothing here can tear anything down.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from remote_gpu_trainer.screens.dashboard import DashboardScreen
    from remote_gpu_trainer.views import Overview, RunView

WORKER_PREFIX = "auto-recover-"
RETRY_S = 60.0  # a refused or waiting run is handed to recovery again at most this often
PREEMPTED = "preempted"


def watch_preemptions(screen: DashboardScreen) -> None:
    """Start recoveries from each overview the dashboard shows."""
    tried: dict[str, float] = {}
    screen.watch(screen, "overview", lambda overview: start_recoveries(screen, overview, tried), init=False)


def preempted(run: RunView) -> bool:
    """The overview's word for a run the watchers call preempted (audits/preemption.py)."""
    return run.liveness in ("dead", "unknown") and run.liveness_detail.startswith(PREEMPTED)


def start_recoveries(screen: DashboardScreen, overview: Overview | None, tried: dict[str, float]) -> None:
    if overview is None or overview.read_only:
        return
    now = time.monotonic()
    for run in overview.runs:
        name = f"{WORKER_PREFIX}{run.id}"
        if run.recovery is None or not preempted(run) or now - tried.get(run.id, -RETRY_S) < RETRY_S:
            continue
        if any(worker.name == name and not worker.is_finished for worker in screen.workers):
            continue  # one worker per run at a time; the run's lock keeps other processes out
        tried[run.id] = now
        screen.run_worker(_recover(screen, run.id), name=name, group="auto-recover")


async def _recover(screen: DashboardScreen, run_id: str) -> None:
    from remote_gpu_trainer.services.recover.run import recover_run  # the launch wing: once a run was preempted

    outcome = await recover_run(screen.session, run_id)
    if outcome is None:
        return
    screen.notify(outcome.line(), title="recovery", severity="information" if outcome.relaunched else "warning",
                  timeout=30)
    screen.refresh_overview()
