"""`A` on the dashboard: every box of every project this user opened, and the orphans of their cloud accounts
(docs/remote-ops.md §9.3), the view `rgt status --all` prints.

The view is gathered by services/fleet/status.py in a worker, each box within the session's provider timeout and the
whole within LOAD_BUDGET_S, so the UI never waits on a box; `r` asks again (ignored while a load is running:
the one in flight is never cancelled), escape closes. Nothing here acts on a box.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer

from remote_gpu_trainer.services.fleet import status as fleet
from remote_gpu_trainer.widgets.all_boxes_panel import AllBoxesPanel

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session


def load_budget_s(box_timeout_s: float) -> float:
    """The most one load may take: every project's bounded look, then the accounts' list calls, and a margin."""
    return (fleet.PROJECT_ROUNDS + 1) * (box_timeout_s + fleet.ANSWER_GRACE_S) + 5.0


class AllBoxesScreen(Screen[None]):
    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("r", "reload", "Refresh"),
        Binding("q", "close", "Close", show=False),
    ]

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.loading = False

    def compose(self) -> ComposeResult:
        yield AllBoxesPanel(id="all-boxes")
        yield Footer()

    def on_mount(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        if self.loading:
            self.notify("still asking every box …", timeout=3)
            return
        self.loading = True
        self.query_one(AllBoxesPanel).view = None
        self.load()

    @work(group="all-boxes")
    async def load(self) -> None:
        """The current project first, then every other registered one; each box bounded by the session's
        provider timeout, the whole by load_budget_s."""
        timeout_s = self.session.provider_timeout_s
        registered = fleet.registered_roots()
        roots = [self.session.project.root, *registered]
        try:
            view = await asyncio.wait_for(
                fleet.fleet_view(roots, clock=self.session.clock, timeout_s=timeout_s, known_roots=registered),
                load_budget_s(timeout_s))
        except TimeoutError:
            self.notify(f"no answer within {load_budget_s(timeout_s):g} s: press r to ask again",
                        severity="warning")
        else:
            self.query_one(AllBoxesPanel).view = view
        finally:
            self.loading = False

    def action_close(self) -> None:
        self.dismiss(None)
