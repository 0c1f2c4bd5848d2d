"""`rgt watch RUN`'s progress line (docs/remote-ops.md §9.2): step/total, loss, ETA and what finishing costs,
at most once per `--progress-every` seconds of the session clock, besides the state changes and alerts.

Every figure comes from where the dashboard takes it: step, total and ETA from the log monitor's snapshot
(services/watch/log_monitor.py, as services/overview.run_view reads it), the loss from its chart series, the burn rate
from the meter (services/meter.py) and the cost to finish from services/overview.cost_to_finish.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from remote_gpu_trainer.clock import iso_z
from remote_gpu_trainer.services import instances, meter, overview
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.watch.monitors import opened_monitor
from remote_gpu_trainer.text import duration, escape_control, money

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session


@dataclass
class ProgressTicker:
    """When the next progress line is due: `every_s` seconds of the session clock after the last one, and never
    twice at the same instant (so `--progress-every 0` means once per poll whose clock moved)."""

    every_s: float
    last: datetime | None = None

    def due(self, now: datetime) -> bool:
        if self.last is not None and (now <= self.last or (now - self.last).total_seconds() < self.every_s):
            return False
        self.last = now
        return True


async def progress_line(session: Session, run_id: str, ticker: ProgressTicker) -> str | None:
    """The run's progress line when one is due and the log has shown a step; None otherwise. Asks the
    provider for the box's state (the meter's burn rate) only when a line is printed."""
    monitor = opened_monitor(session, run_id)
    snapshot = monitor.snapshot if monitor is not None else None
    if monitor is None or snapshot is None or snapshot.step is None:
        return None
    now = session.clock()
    if not ticker.due(now):
        return None
    run = run_config(session, run_id)
    eta = snapshot.eta(now.timestamp())
    await instances.instance_status(session, run.instance)  # records the snapshot the meter reads
    reading = meter.meter_reading(session, run.instance)
    currency = session.profile(run.instance).pricing.currency
    step = f"step {snapshot.step}" + (f"/{snapshot.total_steps}" if snapshot.total_steps else "")
    loss = f"loss {monitor.loss.last[1]:.4g}" if monitor.loss.last is not None else "loss —"
    finish = money(overview.cost_to_finish(reading.burn_per_hour, eta), currency) if eta is not None else "—"
    return escape_control(f"{iso_z(now)} run {run_id}: progress {step} · {loss} · ETA {duration(eta)} · "
                          f"to finish {finish} at {money(reading.burn_per_hour, currency)}/h")
