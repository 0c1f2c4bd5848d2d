"""The dashboard's box actions (docs/ux.md §6): `t` terminates and `s` stops the current run's box, from the key,
the button or the palette, through the teardown modal and services/teardown.py.

A base class of DashboardScreen, so the screen module stays one screen's worth of code. The service decides
everything (the plan, the gate, the approval); this only collects the person's answer and shows the outcome and
the wait while the provider confirms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from textual import on, work
from textual.widgets import Button

from remote_gpu_trainer.errors import GateRefused, RgtError
from remote_gpu_trainer.screens.confirm import ConfirmScreen
from remote_gpu_trainer.screens.deliver_actions import DeliverActions
from remote_gpu_trainer.screens.teardown import TeardownScreen
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.text import escape_control
from remote_gpu_trainer.views import RunView
from remote_gpu_trainer.widgets.checkpoints_panel import CheckpointsPanel

if TYPE_CHECKING:
    from remote_gpu_trainer.app import RgtApp


class BoxActions(DeliverActions):
    refresh_overview: Callable[[], object]  # DashboardScreen's worker

    @property
    def rgt(self) -> RgtApp:
        raise NotImplementedError  # DashboardScreen's

    def current_run(self) -> RunView | None:
        raise NotImplementedError  # DashboardScreen's: the run the panels show

    def busy_with(self, action: str) -> bool:
        raise NotImplementedError  # DashboardScreen's

    @on(Button.Pressed, "#teardown")
    def _teardown_clicked(self) -> None:
        """The Terminate button, clicked or pressed: the same path as `t`."""
        if self.check_action("teardown", ()):
            self.action_teardown()

    @work(group="teardown")  # never exclusive: a second press must not cancel a teardown under way
    async def action_teardown(self) -> None:
        await self._box_action("teardown", self._teardown)

    async def _box_action(self, name: str, act: Callable[[str], Awaitable[None]]) -> None:
        """Terminate or stop, from the key, the button or the palette: offered and enabled as the service decided
        (RunView.teardown / RunView.stop), greyed while it runs, the overview refreshed after."""
        run = self.current_run()
        if run is None or self.rgt.session.read_only or self.busy_with(name):
            return
        view = run.teardown if name == "teardown" else run.stop
        if not view.enabled and not (name == "teardown" and view.waivable):  # the modal takes the names
            self.notify(escape_control(f"{view.label} not available: {view.why_not}"), severity="warning",
                        timeout=10, markup=False)
            return
        self.set_busy("teardown", True)
        try:
            await act(run.instance)
        finally:
            self.set_busy("teardown", False)
        self.refresh_overview()

    async def _teardown(self, instance: str) -> None:
        plan = await teardown.plan(self.rgt.session, instance)
        modal = TeardownScreen(plan)
        typed = await self.app.push_screen_wait(modal)
        if typed is None:
            self.notify("teardown cancelled: nothing was done")
            return
        panel = self.query_one(CheckpointsPanel)

        def waiting(step: teardown.WaitStep) -> None:  # the provider confirming the box gone, look by look
            panel.show_progress(int(step.elapsed_s), int(step.limit_s), step.line)

        try:
            # shielded: once approved, the provider call and the record of its outcome run to their end
            result = await asyncio.shield(teardown.execute(self.rgt.session, instance, typed, plan.lines,
                                                           accept_loss=modal.accepted, progress=waiting))
        except GateRefused as exc:
            self.notify(f"refused: {exc}", severity="error", timeout=15)
        except RgtError as exc:
            self.notify(f"teardown failed: {exc}", severity="error", timeout=15)
        else:
            self.notify(result.message, severity="information" if result.confirmed else "warning", timeout=15)
        finally:
            panel.hide_progress()

    @work(group="teardown")
    async def action_stop(self) -> None:
        """Stop keeps the disk: a reversible action gets a plain confirmation that lists what still bills."""
        await self._box_action("stop", self._stop)

    async def _stop(self, instance: str) -> None:
        plan = await teardown.plan(self.rgt.session, instance, "stop")
        if not plan.enabled:
            self.notify(escape_control(f"{plan.action_label} not available: {plan.why_not}"), severity="warning",
                        timeout=10, markup=False)
            return
        typed: str | None = None
        if plan.gated:  # this provider's stop destroys data: the typed id, as for terminate
            typed = await self.app.push_screen_wait(TeardownScreen(plan))
            approved = typed is not None
        else:
            title = f"{plan.action_label} {plan.provider_id} — reversible, storage keeps billing"
            confirm_screen = ConfirmScreen(title, plan.lines, plan.action_label)
            approved = await self.app.push_screen_wait(confirm_screen) is True
        if not approved:
            self.notify("stop cancelled: nothing was done")
            return
        try:
            result = await asyncio.shield(teardown.execute(self.rgt.session, instance, typed, plan.lines,
                                                           action_id="stop"))
        except RgtError as exc:
            self.notify(f"stop failed: {exc}", severity="error", timeout=15)
        else:
            self.notify(result.message, timeout=10)
