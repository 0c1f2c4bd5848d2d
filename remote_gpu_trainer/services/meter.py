"""The cost meter: money accrued from instance snapshots over time, with each state's billing rate.

A snapshot is taken whenever rgt observes (or causes) a state; between two snapshots the earlier state's
rate applies, and from the last snapshot until now its rate keeps accruing. While the state is `unknown`
the last known rate keeps running and the figure is flagged as an estimate: silence is not a free box.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..state import Snapshot

COMPUTE_STATES = {"pending", "running", "stopping", "terminating"}


@dataclass(frozen=True)
class MeterReading:
    total: float
    burn_per_hour: float
    estimate: bool
    since_finished: float = 0.0


def rate(snapshot: Snapshot) -> float:
    """What one state bills per hour: compute while up, storage while stopped, nothing once terminated."""
    if snapshot.state in COMPUTE_STATES:
        return snapshot.price_per_hour or 0.0
    if snapshot.state == "stopped":
        return snapshot.storage_per_hour or 0.0
    return 0.0


def accrue(snapshots: Sequence[Snapshot], now: datetime, finished_at: datetime | None = None) -> MeterReading:
    """Total cost so far, the current burn rate, and what was spent after the job finished."""
    total = 0.0
    since_finished = 0.0
    estimate = False
    last_known_rate = 0.0
    for index, snapshot in enumerate(snapshots):
        end = snapshots[index + 1].at if index + 1 < len(snapshots) else now
        if snapshot.state == "unknown":
            current = last_known_rate
            estimate = True
        else:
            current = rate(snapshot)
            last_known_rate = current
        start = snapshot.at
        hours = max((end - start).total_seconds(), 0.0) / 3600.0
        total += current * hours
        if finished_at is not None and end > finished_at:
            overlap_start = max(start, finished_at)
            since_finished += current * max((end - overlap_start).total_seconds(), 0.0) / 3600.0
    burn = 0.0
    if snapshots:
        burn = last_known_rate if snapshots[-1].state == "unknown" else rate(snapshots[-1])
    return MeterReading(total=total, burn_per_hour=burn, estimate=estimate, since_finished=since_finished)
