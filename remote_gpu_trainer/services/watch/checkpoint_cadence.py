"""A run's checkpoint cadence (docs/remote-ops.md §10): gathers μ and C and hands them to
audits/checkpoint_cadence.py; the overview shows the result and the run rules (S94) judge the newest
checkpoint's age against it.

μ, first found: rgt.toml `runs.<id>.mtbp_hours`, `instances.<name>.mtbp_hours`, then the profile's
`[preemption] mtbp_hours`, which applies only to a box that can be preempted (rented interruptible, an API that
says interruptible, or a Slurm allocation). C, first found: the save times the log states, then the newest
checkpoint's creation-to-write gap from the liveness look. The last C the log stated is remembered per log
monitor, because the line that said it leaves the monitor's 200-line tail long before the next save.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from remote_gpu_trainer.audits import preemption
from remote_gpu_trainer.audits.checkpoint_cadence import Cadence, cadence, write_time_from_lines
from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.providers import table as provider_table
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.watch.monitors import opened_monitor
from remote_gpu_trainer.views import CadenceView

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.services.watch.liveness import RunState
    from remote_gpu_trainer.services.watch.log_monitor import RunLogMonitor

_LOG_WRITE: WeakKeyDictionary[RunLogMonitor, float] = WeakKeyDictionary()


def mtbp(session: Session, run: RunConfig, status_detail: Mapping[str, Any] | None = None) -> tuple[float | None, str]:
    """μ in seconds and where it came from; (None, "") when nothing says the box can be preempted."""
    if run.mtbp_hours is not None:
        return run.mtbp_hours * 3600, f"rgt.toml runs.{run.id}.mtbp_hours"
    instance = session.instance(run.instance)
    if instance.mtbp_hours is not None:
        return instance.mtbp_hours * 3600, f"rgt.toml instances.{run.instance}.mtbp_hours"
    hours = session.profile(run.instance).raw.get("preemption", {}).get("mtbp_hours")
    interruptible = instance.preemptible or provider_table.kind_of(instance.provider) == "slurm" \
        or preemption.interruptible_status(status_detail or {})
    if isinstance(hours, int | float) and hours > 0 and interruptible:
        return float(hours) * 3600, f"profile {session.profile(run.instance).id} [preemption]"
    return None, ""


def log_write_time(session: Session, run_id: str) -> float | None:
    """The save time the log's tail states, else the last one it stated earlier in this session."""
    monitor = opened_monitor(session, run_id)
    if monitor is None:
        return None
    found = write_time_from_lines(monitor.tail)
    if found is not None:
        _LOG_WRITE[monitor] = found
    return _LOG_WRITE.get(monitor)


def run_cadence(session: Session, run_id: str, state: RunState | None,
                status_detail: Mapping[str, Any] | None = None) -> Cadence | None:
    run = run_config(session, run_id)
    mtbp_s, source = mtbp(session, run, status_detail)
    if mtbp_s is None:
        return None
    monitor = opened_monitor(session, run_id)
    per_step = monitor.progress.seconds_per_step(session.clock().timestamp()) if monitor is not None else None
    return cadence(mtbp_s=mtbp_s, mtbp_source=source, log_write_s=log_write_time(session, run_id),
                   file_write_s=state.ckpt_write_s if state is not None else None, s_per_iteration=per_step)


def cadence_view(found: Cadence | None, state: RunState | None) -> CadenceView | None:
    if found is None:
        return None
    age = state.newest_ckpt_age_s if state is not None else None
    return CadenceView(
        interval_s=found.interval_s, write_s=found.write_s, write_source=found.write_source, mtbp_s=found.mtbp_s,
        mtbp_source=found.mtbp_source, iterations=found.iterations, s_per_iteration=found.s_per_iteration,
        newest_age_s=age, overdue=age is not None and age > found.stale_after_s,
    )
