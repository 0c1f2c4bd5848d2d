"""The dashboard's box actions (docs/ux.md §6): `t` terminates and `s` stops the current run's box, from the key,
the button or the palette, through the teardown modal and services/teardown.py.

A helper the dashboard owns, so the screen module stays one screen's worth of code. The service decides
everything (the plan, the gate, the approval); this only collects the person's answer and shows the outcome and
the wait while the provider confirms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from remote_gpu_trainer.errors import GateRefused, RgtError
from remote_gpu_trainer.screens.confirm import ConfirmScreen
from remote_gpu_trainer.views import RunView
from remote_gpu_trainer.widgets.checkpoints_panel import CheckpointsPanel

if TYPE_CHECKING:
    from textual.screen import Screen

    from remote_gpu_trainer.services.session import Session


class BoxActions:
    """Terminate and stop for the dashboard that owns it: the screen routes `t`, `s`, the button and the palette
    here (in its own workers), and says which run is shown and which slots are busy."""

    def __init__(self, screen: Screen[None], session: Session, *, current_run: Callable[[], RunView | None],
                 busy: Callable[[str], bool], set_busy: Callable[[str, bool], None],
                 refresh_overview: Callable[[], object]) -> None:
        self.screen = screen
        self.session = session
        self.current_run = current_run
        self.busy = busy
        self.set_busy = set_busy
        self.refresh_overview = refresh_overview

    async def teardown(self) -> None:
        await self._box_action("teardown", self._teardown)

    async def stop(self) -> None:
        """Stop keeps the disk: a reversible action gets a plain confirmation that lists what still bills."""
        await self._box_action("stop", self._stop)

    async def _box_action(self, name: str, act: Callable[[str], Awaitable[None]]) -> None:
        """Terminate or stop, from the key, the button or the palette: offered and enabled as the service decided
        (RunView.teardown / RunView.stop), greyed while it runs, the overview refreshed after."""
        run = self.current_run()
        if run is None or self.session.read_only or self.busy(name):
            return
        view = run.teardown if name == "teardown" else run.stop
        if not view.enabled and not (name == "teardown" and view.waivable):  # the modal takes the names
            self.screen.notify(f"{view.label} not available: {view.why_not}", severity="warning", timeout=10)
            return
        self.set_busy("teardown", True)
        try:
            await act(run.instance)
        finally:
            self.set_busy("teardown", False)
        self.refresh_overview()

    async def _teardown(self, instance: str) -> None:
        from remote_gpu_trainer.screens.teardown import TeardownScreen  # the modal and its service: when asked
        from remote_gpu_trainer.services import teardown

        plan = await teardown.plan(self.session, instance)
        modal = TeardownScreen(plan)
        typed = await self.screen.app.push_screen_wait(modal)
        if typed is None:
            self.screen.notify("teardown cancelled: nothing was done")
            return
        panel = self.screen.query_one(CheckpointsPanel)

        def waiting(step: teardown.WaitStep) -> None:  # the provider confirming the box gone, look by look
            panel.show_progress(int(step.elapsed_s), int(step.limit_s), step.line)

        try:
            # shielded: once approved, the provider call and the record of its outcome run to their end
            result = await asyncio.shield(teardown.execute(self.session, instance, typed, plan.lines,
                                                           accept_loss=modal.accepted, progress=waiting))
        except GateRefused as exc:
            self.screen.notify(f"refused: {exc}", severity="error", timeout=15)
        except RgtError as exc:
            self.screen.notify(f"teardown failed: {exc}", severity="error", timeout=15)
        else:
            self.screen.notify(result.message, severity="information" if result.confirmed else "warning", timeout=15)
        finally:
            panel.hide_progress()

    async def _stop(self, instance: str) -> None:
        from remote_gpu_trainer.screens.teardown import TeardownScreen
        from remote_gpu_trainer.services import teardown

        plan = await teardown.plan(self.session, instance, "stop")
        if not plan.enabled:
            self.screen.notify(f"{plan.action_label} not available: {plan.why_not}", severity="warning", timeout=10)
            return
        typed: str | None = None
        if plan.gated:  # this provider's stop destroys data: the typed id, as for terminate
            typed = await self.screen.app.push_screen_wait(TeardownScreen(plan))
            approved = typed is not None
        else:
            title = f"{plan.action_label} {plan.provider_id} — reversible, storage keeps billing"
            confirm_screen = ConfirmScreen(title, plan.lines, plan.action_label)
            approved = await self.screen.app.push_screen_wait(confirm_screen) is True
        if not approved:
            self.screen.notify("stop cancelled: nothing was done")
            return
        try:
            result = await asyncio.shield(teardown.execute(self.session, instance, typed, plan.lines,
                                                           action_id="stop"))
        except RgtError as exc:
            self.screen.notify(f"stop failed: {exc}", severity="error", timeout=15)
        else:
            self.screen.notify(result.message, timeout=10)
