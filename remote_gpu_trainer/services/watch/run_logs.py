"""Each run's followed log as the faces ask for it: new lines, the backfill a new view shows, the catch-up
a headless report does, the loss chart, and the alerts the stateful rules raised.

The pipeline itself (reading, splitting, classifying, rules) is services/watch/log_monitor.py; the session
keeps one monitor per run (services/watch/monitors.py), and this module is what the dashboard, the CLI and the
overview call. It also keeps each instance's latest GPU samples for the GPU rules (note_gpu_samples).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.gpu_health import GpuSample
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.watch import host_signals
from remote_gpu_trainer.services.watch.checkpoint_cadence import run_cadence
from remote_gpu_trainer.services.watch.log_monitor import Alert, ChartData, LogUpdate, open_alerts
from remote_gpu_trainer.services.watch.monitors import catalogue, log_monitor, opened_monitor, opened_monitors
from remote_gpu_trainer.views import LogLineView

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.services.watch.liveness import RunState


LIVE_POLL_S = 0.5  # a run whose log may grow now: running, stalled, or not known
QUIET_POLL_S = 5.0  # one that ended or never started: its log grows only when it is launched again
LIVE_STATES = ("running", "stalled", "unknown")


def log_poll_interval(liveness: str | None) -> float:
    """How often a watcher reads a run's log: a finished or dead run's log is stat'ed every 5 s, not every 0.5 s
    (issue 29: the log poll was a sixth of an idle dashboard's CPU); a relaunch makes it live again."""
    return LIVE_POLL_S if liveness is None or liveness in LIVE_STATES else QUIET_POLL_S


async def follow_log(session: Session, run_id: str, max_reads: int = 8) -> LogUpdate | None:
    """New lines since the last call (at most `max_reads` MiB), classified, with the alerts they raised;
    None before launch. The TUI reads 1 MiB at a time so each batch renders before the next."""
    monitor = log_monitor(session, run_id)
    return await monitor.poll(max_reads) if monitor is not None else None


async def log_backfill(session: Session, run_id: str) -> list[LogLineView]:
    """What a log view opening now should show of the lines read before it (by any rgt process)."""
    monitor = log_monitor(session, run_id)
    launch = session.db.launch(run_id)
    if monitor is None or launch is None:
        return []
    return await monitor.backfill(int(str(launch.get("log_offset", 0))))


async def catch_up_logs(session: Session, max_polls: int = 16) -> None:
    """Read what the logs gained since rgt last looked (bounded), so a headless report is current."""
    for run_id in sorted(session.project.runs):
        for _ in range(max_polls):
            try:
                update = await follow_log(session, run_id)
            except RgtError:
                break
            if update is None or not update.more:
                break


def loss_chart(session: Session, run_id: str) -> ChartData | None:
    monitor = log_monitor(session, run_id)
    return monitor.chart() if monitor is not None else None


def cadence_signals(session: Session, run_id: str, state: RunState) -> dict[str, float | None]:
    """S94's inputs: the Young/Daly W and the newest checkpoint's time on the monitor's clock (the liveness look
    measured its age on the box's clock, so clock skew does not age it)."""
    found = run_cadence(session, run_id, state)
    age = state.newest_ckpt_age_s
    return {"ckpt_interval_s": found.interval_s if found else None,
            "newest_ckpt_mtime": session.clock().timestamp() - age if age is not None else None}


def take_alerts(session: Session) -> list[Alert]:
    """Alerts raised by the stateful rules since the last call (the log's own come with each update)."""
    alerts: list[Alert] = []
    for monitor in opened_monitors(session):
        alerts.extend(monitor.pending_alerts)
        monitor.pending_alerts.clear()
    return alerts


def current_alerts(session: Session, run_id: str) -> list[Alert]:
    """Every alert the run's launch raised that is still open (warn and above; acknowledged ones left out), from
    the state database: `rgt watch RUN --once --format json` reports these, not only the ones new to this pass."""
    findings = session.db.log_findings(run_id)
    return open_alerts(run_id, catalogue(session), findings) if findings else []


async def evaluate_rules(session: Session, run_id: str, state: RunState) -> None:
    """The stateful run rules over the run's latest answer; what they raise waits in take_alerts()."""
    monitor = opened_monitor(session, run_id)
    if monitor is None:
        return
    run = run_config(session, run_id)
    host = await host_signals.tick(session, run, monitor.host, monitor.tail, monitor.cell,
                                   session.db.launch(run_id), state)
    gpu = host.gpu_readings or _gpu_samples(session).get(run.instance, [])  # timed readings when the box gave them
    monitor.pending_alerts.extend(await monitor.evaluate(
        state.liveness, gpu, t_log=run.stall_after, started_at=host.started_at, exit_code=state.exit_code,
        more={**cadence_signals(session, run_id, state), **host.fields()}))


def note_gpu_samples(session: Session, instance: str, samples: list[GpuSample]) -> None:
    """The instance's latest GPU samples (services/watch/gpu_samples.py's gpu_text takes them for the panel):
    the GPU rules read them where the box's own timed readings are missing."""
    _gpu_samples(session)[instance] = samples


def _gpu_samples(session: Session) -> dict[str, list[GpuSample]]:
    return session.cache(__name__, dict)
