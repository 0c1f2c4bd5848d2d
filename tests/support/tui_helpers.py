"""Helpers for tests that drive the real app through Pilot: wait for exactly the state a test asserts."""

from __future__ import annotations

from collections.abc import Callable

from textual.pilot import Pilot

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.screens.dashboard import DashboardScreen


async def wait_until(pilot: Pilot[None], predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    """Pause until `predicate` holds. `pilot.pause()` guesses "idle" from this process's CPU time, which a loaded
    machine fools, so a test waits for exactly the state it then asserts on instead."""
    waited = 0.0
    while not predicate():
        await pilot.pause(0.05)
        waited += 0.05
        assert waited < timeout, "condition not reached in time"


def dashboard(app: RgtApp) -> DashboardScreen:
    screen = app.screen_stack[1]
    assert isinstance(screen, DashboardScreen)
    return screen


def notified(app: RgtApp, text: str) -> bool:
    """A toast containing `text` is showing: the proof that a key was handled when it changes nothing else."""
    return any(text in str(n.message) for n in app._notifications)


def focused_id(app: RgtApp) -> str | None:
    return app.focused.id if app.focused is not None else None


def gate_open(app: RgtApp) -> bool:
    run = dashboard(app).current_run()
    return run is not None and run.gate.open
