"""Giving up another run's results in the teardown modal (docs/gate.md §7.2), as a person does it.

r1 is pulled and verified; r2 ran on the same sim box and was never pulled. The dashboard's Terminate for r1 is
not enabled (r2 is at risk), yet `t` opens the modal, which names r2 and asks for it: the typed id alone leaves
Confirm disabled, typing `r2` enables it, and the approval records what was given up, with its reasons, before
the box is destroyed. The real app through Pilot, on a real sim project with real jobs.
"""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Button, Input

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.screens.teardown import TeardownScreen
from remote_gpu_trainer.services.opening import open_session
from support.gate_helpers import SIM_ID, launch_finished, project_text, pull_and_verify, sim_disk, write_text_project
from support.helpers import RUN
from support.tui_helpers import dashboard, wait_until


async def test_the_modal_takes_the_names_of_the_runs_given_up_and_the_approval_records_them(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_text_project(root, project_text(second_run=True))
    await launch_finished(root, "r2")
    await launch_finished(root, RUN, create=False)
    await pull_and_verify(root)
    session = open_session(str(root))
    app = RgtApp(session)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: (run := dashboard(app).current_run()) is not None and run.id == RUN
                             and run.gate.open and run.teardown.at_risk == ("r2",))
            control = dashboard(app).current_run().teardown  # type: ignore[union-attr]
            assert not control.enabled and control.waivable and any(r.startswith("r2: ") for r in control.reasons)
            await pilot.press("t")
            await wait_until(pilot, lambda: isinstance(app.screen, TeardownScreen)
                             and bool(app.screen.query("#accept-loss")))
            modal = app.screen
            assert isinstance(modal, TeardownScreen) and modal.plan.loss_names == ("r2",)
            confirm = modal.query_one("#confirm", Button)
            await pilot.press(*SIM_ID)
            await wait_until(pilot, lambda: modal.query_one("#confirm-id", Input).value == SIM_ID)
            assert confirm.disabled  # the id alone does not give up r2's results
            modal.query_one("#accept-loss", Input).focus()
            await pilot.press(*"r2")
            await wait_until(pilot, lambda: not confirm.disabled)
            assert modal.accepted == ("r2",)
            await pilot.click("#confirm")
            await wait_until(pilot, lambda: not sim_disk(root).exists(), timeout=60)
        approval = session.db.events(kind="approval")[-1]
        waived = approval.detail["accepted_loss"]
        assert list(waived) == ["r2"] and all(reason.startswith("r2") for reason in waived["r2"]), waived
    finally:
        await session.close_transports()
        session.close()
