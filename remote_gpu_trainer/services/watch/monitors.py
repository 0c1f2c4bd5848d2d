"""The session's log monitors: one per launched run, the signature catalogue they classify with, and the
reading of the log they follow.

A monitor keeps state between polls (its cursor, its series, the alerts it has not handed out), so it lives
as long as the session: this module keeps them in the session's cache (services/session.py's cache()) and is
the only code that touches it. Everyone else asks here: run_logs.py to follow and chart, the checkpoint cadence
and the overview for the progress a log showed, the launch verb to drop a finished launch's monitor. The
pipeline itself (reading, splitting, classifying, rules) is services/watch/log_monitor.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.log.signatures import Catalogue, load_catalogue
from remote_gpu_trainer.config.project import user_config_dir
from remote_gpu_trainer.services import instances
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.box_layout import log_path
from remote_gpu_trainer.services.watch.log_monitor import RunLogMonitor

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session


@dataclass
class _Monitors:
    """What this module keeps on a session: the monitors by run, and the catalogue once it was loaded."""

    by_run: dict[str, RunLogMonitor] = field(default_factory=dict)
    catalogue: Catalogue | None = None

    def close(self) -> None:
        for monitor in self.by_run.values():
            monitor.close()


def _kept(session: Session) -> _Monitors:
    return session.cache(__name__, _Monitors, _Monitors.close)


def catalogue(session: Session) -> Catalogue:
    """Shipped signatures plus the user's (signatures.d and rgt.toml), checked once per session."""
    kept = _kept(session)
    if kept.catalogue is None:
        kept.catalogue = load_catalogue(user_dirs=(user_config_dir() / "signatures.d",),
                                        user_rows=session.project.signatures, user_origin=str(session.project.file))
    return kept.catalogue


def log_monitor(session: Session, run_id: str) -> RunLogMonitor | None:
    """The run's log pipeline, once the run was launched (before that there is no log to follow)."""
    by_run = _kept(session).by_run
    if run_id not in by_run:
        if session.db.launch(run_id) is None:
            return None
        run = run_config(session, run_id)
        by_run[run_id] = RunLogMonitor(
            run_id, lambda offset, limit: tail_log(session, run_id, offset, limit), session.db,
            lambda: catalogue(session), now=lambda: session.clock().timestamp(), total_steps=run.total_steps or None)
    return by_run[run_id]


def opened_monitor(session: Session, run_id: str) -> RunLogMonitor | None:
    """The run's monitor when this session has followed its log already; never opens one (a reader that only
    shows what was followed must not start following)."""
    return _kept(session).by_run.get(run_id)


def opened_monitors(session: Session) -> list[RunLogMonitor]:
    """Every monitor this session has opened, in the order it opened them."""
    return list(_kept(session).by_run.values())


def forget_monitor(session: Session, run_id: str) -> None:
    """Close and drop the run's monitor: a new launch appends to the log from a new offset, so the next
    poll opens a fresh one instead of carrying the previous launch's state on."""
    stale = _kept(session).by_run.pop(run_id, None)
    if stale is not None:
        stale.close()


async def tail_log(session: Session, run_id: str, offset: int, limit: int = 1 << 20) -> tuple[bytes, int]:
    """Up to `limit` bytes of the run's log from `offset`, and the log's size, from the box it was launched on."""
    run = run_config(session, run_id)
    return await (await instances.remote(session, run.instance)).tail(log_path(run), offset, limit)
