"""A hung box never freezes the others: a local server that accepts TCP and never speaks stands in for an
SSH box that hangs, next to a healthy sim box. Every box is asked at once, each within its own timeout."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.report import render
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import observe_and_build
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.views import Overview
from support.helpers import HUNG, INSTANCE, RUN, launched_and_finished, two_box_project
from support.tui_helpers import dashboard, wait_until


def row(overview: Overview, name: str) -> object:
    return next(i for i in overview.instances if i.name == name)


async def test_the_healthy_row_is_drawn_while_the_hung_box_is_still_being_asked(
        tmp_path: Path, silent_server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = two_box_project(tmp_path / "p", silent_server, tmp_path / "home")
    session = Session(load_project(root / "rgt.toml"), provider_timeout_s=3.0)
    try:
        await launched_and_finished(session)
        first = await observe_and_build(session, wait_s=0.5)
        sim, hung = row(first, INSTANCE), row(first, HUNG)
        assert (sim.state, sim.price_per_hour) == ("running", 0.89)  # type: ignore[attr-defined]
        assert hung.state == "unknown" and "waiting" in hung.note  # type: ignore[attr-defined]
        # the report's path awaits every answer: the hung box costs its own timeout once, and says so
        full = await observe_and_build(session)
        hung = row(full, HUNG)
        assert hung.state == "unknown" and "no answer within 3 s" in hung.note  # type: ignore[attr-defined]
        assert row(full, INSTANCE).state == "running"  # type: ignore[attr-defined]
        # never answered: its user price is billed as an estimate, said after the reason (the meter's unknown rule)
        assert any(line.startswith(f"  {HUNG}: no answer within 3 s; state unknown")
                   for line in render(full, "text").splitlines())
    finally:
        await session.close_transports()
        session.close()






def instance_state(app: RgtApp, name: str) -> str | None:
    overview = dashboard(app).overview
    if overview is None:
        return None
    found = [i for i in overview.instances if i.name == name]
    return found[0].state if found else None


def hung_note(app: RgtApp) -> str:
    overview = dashboard(app).overview
    return next((i.note for i in overview.instances if i.name == HUNG), "") if overview else ""


async def test_the_dashboard_keeps_updating_next_to_a_hung_box(
        tmp_path: Path, silent_server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = two_box_project(tmp_path / "p", silent_server, tmp_path / "home")
    session = Session(load_project(root / "rgt.toml"), provider_timeout_s=4.0)
    await launched_and_finished(session)
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        # the sim row is there and priced long before the hung box's timeout
        await wait_until(pilot, lambda: instance_state(app, INSTANCE) == "running")
        assert "waiting" in hung_note(app) or "no answer" in hung_note(app)
        await wait_until(pilot, lambda: "no answer within 4 s" in hung_note(app))
        assert instance_state(app, HUNG) == "unknown"
        # refreshes go on after the timeout: a new overview replaces the old one
        seen = dashboard(app).overview
        await wait_until(pilot, lambda: dashboard(app).overview is not seen)
        assert instance_state(app, INSTANCE) == "running"
    await session.close_transports()
    session.close()


async def test_a_second_pull_press_never_cancels_the_pull_that_runs(project_dir: Path) -> None:
    """Pressing p again while a pull runs changes nothing: one pull starts, and it finishes."""
    box_cell = project_dir / ".rgt" / "sim" / INSTANCE / "workspace" / "rgt" / RUN
    session = open_session(str(project_dir))
    await launched_and_finished(session)
    (box_cell / "seed0" / "big.bin").write_bytes(b"\0" * (384 << 20))  # takes far longer than two keys

    def finished() -> bool:
        return any(e.kind == "pull" and "finished" in e.summary for e in session.db.events(run_id=RUN))

    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        await pilot.press("p")
        await wait_until(pilot, lambda: "pull" in dashboard(app).busy, timeout=120)
        assert dashboard(app).check_action("pull", ()) is None  # greyed while it runs
        await pilot.press("p", "p")  # the old exclusive worker cancelled the running pull on each press
        await wait_until(pilot, lambda: finished() and "pull" not in dashboard(app).busy, timeout=120)
    pulls = [e.summary for e in session.db.events(run_id=RUN) if e.kind.startswith("pull")]
    assert pulls[0] == f"pull of run {RUN} started" and len(pulls) == 2, pulls
    assert pulls[1].startswith(f"pull of run {RUN} finished"), pulls
    session.close()
    await asyncio.sleep(0)
