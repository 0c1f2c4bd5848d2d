"""The TUI as a watcher of preempted runs (docs/remote-ops.md §10.1): whenever the dashboard's overview shows a run
with `recover` limits preempted, a worker hands it to recovery (services/recover/run.py decides under the run's lock,
records each step once for every watcher, and relaunches only within a person's standing approval), then says the
outcome in a notification and refreshes the overview. A run recovery refused is asked again at most every RETRY_S
(its limits or approval may change meanwhile), not at every refresh. While such a run runs, another worker keeps its
newest checkpoint home when that is due (services/recover/checkpoint_home.py decides when; this only offers it every
HOME_LOOK_S). Nothing here can tear anything down.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from remote_gpu_trainer.screens.dashboard import DashboardScreen
    from remote_gpu_trainer.views import Overview, RunView

WORKER_PREFIX = "auto-recover-"
HOME_PREFIX = "checkpoint-home-"
RETRY_S = 60.0  # a refused or waiting run is handed to recovery again at most this often
HOME_LOOK_S = 60.0  # a running run is offered to checkpoint_home at most this often (it asks the box once per W)
PREEMPTED = "preempted"


def watch_preemptions(screen: DashboardScreen) -> None:
    """Start recoveries from each overview the dashboard shows."""
    tried: dict[str, float] = {}
    offered: dict[str, float] = {}

    def on_overview(overview: Overview | None) -> None:
        start_recoveries(screen, overview, tried)
        keep_checkpoints_home(screen, overview, offered)

    screen.watch(screen, "overview", on_overview, init=False)


def preempted(run: RunView) -> bool:
    """The overview's word for a run the watchers call preempted (audits/preemption.py), or a dead run whose box a
    watcher saw preempted under this launch (vast.ai's outbid box, back without its word: recovery resumes it)."""
    seen = run.recovery is not None and bool(run.recovery.preempted_seen) and run.liveness == "dead"
    return seen or (run.liveness in ("dead", "unknown") and run.liveness_detail.startswith(PREEMPTED))


def start_recoveries(screen: DashboardScreen, overview: Overview | None, tried: dict[str, float]) -> None:
    """Each preempted run with `recover` limits handed to recovery, at most every RETRY_S."""
    _start_workers(screen, overview, tried, RETRY_S, WORKER_PREFIX,
                   lambda run: run.recovery is not None and preempted(run), lambda run: _recover(screen, run.id))


def keep_checkpoints_home(screen: DashboardScreen, overview: Overview | None, offered: dict[str, float]) -> None:
    """While a run with `recover` limits runs, a worker keeps its newest checkpoint home when that is due."""
    _start_workers(screen, overview, offered, HOME_LOOK_S, HOME_PREFIX,
                   lambda run: run.recovery is not None and run.liveness in ("running", "stalled"),
                   lambda run: _keep_home(screen, run.id, run.liveness))


def _start_workers(screen: DashboardScreen, overview: Overview | None, last: dict[str, float], every_s: float,
                   prefix: str, wanted: Callable[[RunView], bool],
                   work: Callable[[RunView], Coroutine[Any, Any, None]]) -> None:
    """For each run `wanted` picks: one worker named `prefix` + the run's id at a time (the run's lock keeps other
    processes out), started at most every `every_s`."""
    if overview is None or overview.read_only:
        return
    now = time.monotonic()
    for run in overview.runs:
        name = f"{prefix}{run.id}"
        if not wanted(run) or now - last.get(run.id, -every_s) < every_s:
            continue
        if any(worker.name == name and not worker.is_finished for worker in screen.workers):
            continue
        last[run.id] = now
        screen.run_worker(work(run), name=name, group=prefix.rstrip("-"))


async def _keep_home(screen: DashboardScreen, run_id: str, liveness: str) -> None:
    from remote_gpu_trainer.services.recover.checkpoint_home import watcher_lines

    lines = await watcher_lines(screen.session, run_id, liveness)
    if lines:
        screen.notify("\n".join(lines), title="checkpoint kept home", timeout=10, markup=False)  # box text
        screen.refresh_overview()


async def _recover(screen: DashboardScreen, run_id: str) -> None:
    from remote_gpu_trainer.services.recover.run import recover_run  # the launch wing: once a run was preempted

    outcome = await recover_run(screen.session, run_id)
    if outcome is None:
        return
    screen.notify(outcome.line(), title="recovery", severity="information" if outcome.relaunched else "warning",
                  timeout=30, markup=False)
    screen.refresh_overview()
