"""The meter replays state timelines; totals are computed by hand in each test."""

from __future__ import annotations

from datetime import timedelta

from helpers import FIXED_NOW
from remote_gpu_trainer.services.meter import accrue
from remote_gpu_trainer.state import Snapshot

PRICE, STORAGE = 0.89, 0.02


def snap(minutes: float, state: str) -> Snapshot:
    return Snapshot(FIXED_NOW + timedelta(minutes=minutes), "box", "sim", "sim-box", state, PRICE, "profile",
                    STORAGE)


def test_running_stopped_running_terminated() -> None:
    timeline = [snap(0, "running"), snap(60, "stopped"), snap(180, "running"), snap(210, "terminated")]
    reading = accrue(timeline, FIXED_NOW + timedelta(minutes=600))
    expected = 1.0 * PRICE + 2.0 * STORAGE + 0.5 * PRICE  # nothing after terminate
    assert abs(reading.total - expected) < 1e-9
    assert reading.burn_per_hour == 0.0
    assert reading.estimate is False


def test_burn_continues_until_now_and_since_finished() -> None:
    timeline = [snap(0, "running")]
    finished = FIXED_NOW + timedelta(minutes=30)
    reading = accrue(timeline, FIXED_NOW + timedelta(minutes=90), finished_at=finished)
    assert abs(reading.total - 1.5 * PRICE) < 1e-9
    assert abs(reading.since_finished - 1.0 * PRICE) < 1e-9
    assert reading.burn_per_hour == PRICE


def test_unknown_keeps_the_last_known_rate_as_an_estimate() -> None:
    timeline = [snap(0, "stopped"), snap(60, "unknown")]
    reading = accrue(timeline, FIXED_NOW + timedelta(minutes=120))
    assert abs(reading.total - 2.0 * STORAGE) < 1e-9
    assert reading.estimate is True
    assert reading.burn_per_hour == STORAGE
