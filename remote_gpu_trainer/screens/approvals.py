"""`i` on the dashboard: the approval inbox (docs/agents.md). An agent (`rgt mcp`) asks; a person decides here.

The screen lists every request with the services/inbox/ calls (requests.list_requests, allowances.allowances)
and reads the list again every POLL_S, so a request an agent files while it is open shows up. The highlighted
pending request's plan is computed now in a worker (decide.current_plan asks the box; "computing the plan…"
meanwhile), and an approval passes that plan's digest: if the plan changed since, the service runs nothing and
the new plan is shown. `y` or Enter approves (an irreversible request after the instance id is typed, as in
the teardown modal; any other after a confirmation), `x` rejects with a note, `g` grants a spending allowance,
`R` revokes the active ones, `r` reads and computes again, escape goes back. In `--read-only` nothing here
decides. The screen holds no rule: the service decides, records and acts; this collects the person's answer.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.markup import escape
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import DataTable, Footer

from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.request_views import RequestView
from remote_gpu_trainer.screens.approval_dialogs import ApproveScreen, GrantScreen
from remote_gpu_trainer.screens.confirm import ConfirmScreen
from remote_gpu_trainer.screens.note import NoteScreen
from remote_gpu_trainer.services.inbox import allowances, decide, requests
from remote_gpu_trainer.services.inbox.model import person_actor
from remote_gpu_trainer.text import escape_control, money
from remote_gpu_trainer.widgets.approvals_panel import ApprovalsPanel, InboxShown

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

POLL_S = 2.0  # how often the list is read again (a database read: no box is asked)
ACTOR = person_actor("tui")
DECIDING = ("approve", "reject", "grant", "revoke")


class ApprovalsScreen(Screen[None]):
    BINDINGS = [
        Binding("escape", "close", "Back"),
        Binding("y", "approve", "Approve"),
        Binding("x", "reject", "Reject"),
        Binding("g", "grant", "Grant"),
        Binding("R", "revoke", "Revoke", show=False),
        Binding("r", "reload", "Refresh"),
        Binding("q", "close", "Back", show=False),  # as on the All boxes screen: q leaves this screen, not rgt
    ]

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.plans: dict[str, RequestView] = {}  # each pending request's plan as computed now, by id
        self.problems: dict[str, str] = {}  # why a request's plan could not be computed now
        self.computing: set[str] = set()
        self.deciding = False  # one decision at a time; never cancelled once the person confirmed it
        self.placed = False  # the cursor was put on the first pending request once

    def compose(self) -> ComposeResult:
        yield ApprovalsPanel(id="approvals")
        yield Footer()

    def on_mount(self) -> None:
        self.reload()
        self.set_interval(POLL_S, self.reload)
        self.query_one("#requests", DataTable).focus()

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Toasts quote the agent and the box (a why, a provider's error): never markup, control characters
        escaped (the dashboard's one rule, screens/dashboard.py)."""
        super().notify(escape_control(message, keep_newlines=True), title=escape_control(title),
                       severity=severity, timeout=timeout, markup=markup)

    def showing(self) -> bool:
        """Whether a worker's result may still be drawn: not once the screen was closed (dashboard.showing)."""
        return self.is_running and self.is_attached

    # -- reading -----------------------------------------------------------------------------------------
    def reload(self) -> None:
        """Read the requests and allowances again; a computed plan is kept while its request is unchanged."""
        if not self.showing():
            return
        listed = requests.list_requests(self.session)
        by_id = {view.id: view for view in listed}
        for request_id, known in list(self.plans.items()):
            now = by_id.get(request_id)
            if now is None or now.state != known.state or now.state_at != known.state_at:
                del self.plans[request_id]  # decided, or moved, elsewhere: its plan is computed again
        panel = self.query_one(ApprovalsPanel)
        panel.shown = InboxShown(tuple(listed), tuple(allowances.allowances(self.session)), self.session.clock(),
                                 read_only=self.session.read_only)
        if not self.placed and listed:
            self.placed = True
            first = next((i for i, view in enumerate(listed) if view.state == "pending"), 0)
            self.query_one("#requests", DataTable).move_cursor(row=first)
        self.show_highlighted()

    @on(DataTable.RowHighlighted, "#requests")
    def _highlighted(self) -> None:
        self.show_highlighted()

    def show_highlighted(self) -> None:
        """The highlighted request in full: its plan computed now when it is pending (a worker), else as stored."""
        panel = self.query_one(ApprovalsPanel)
        listed = self.highlighted_request()
        if listed is None:
            panel.detail = None
            return
        pending = listed.state == "pending"
        panel.computing = pending and listed.id not in self.plans and listed.id not in self.problems
        panel.problem = self.problems.get(listed.id, "")
        panel.detail = self.plans.get(listed.id, listed)
        if panel.computing and listed.id not in self.computing:
            self.compute_plan(listed.id)
        self.refresh_bindings()

    def highlighted_request(self) -> RequestView | None:
        """The highlighted request as last listed; None before the first list or when there is none."""
        panels = self.query(ApprovalsPanel)
        panel = panels.first() if panels else None
        if panel is None or panel.shown is None:
            return None
        request_id = panel.highlighted()
        return next((v for v in panel.shown.requests if v.id == request_id), None)

    @work(group="plan")  # never exclusive: a plan under way finishes (it may record that the plan changed)
    async def compute_plan(self, request_id: str) -> None:
        self.computing.add(request_id)
        try:
            view = await decide.current_plan(self.session, request_id)
        except RgtError as exc:
            self.problems[request_id] = f"the plan could not be computed now: {exc} (r tries again)"
        else:
            self.plans[request_id] = view
            self.problems.pop(request_id, None)
        finally:
            self.computing.discard(request_id)
        if self.showing():
            self.reload()

    def action_reload(self) -> None:
        """`r`: read the inbox again and compute every shown plan afresh."""
        self.plans.clear()
        self.problems.clear()
        self.reload()

    # -- deciding ----------------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in DECIDING and self.session.read_only:
            return False  # read-only: nothing here decides, and the footer does not offer it
        if action in ("approve", "reject"):
            if self.deciding:
                return None
            current = self.decidable(quiet=True)
            return True if current is not None else None
        return True

    def decidable(self, *, quiet: bool = False) -> RequestView | None:
        """The highlighted request with its plan computed now, if it is pending; else None (said unless quiet)."""
        listed = self.highlighted_request()
        why = ""
        if listed is None:
            why = "no request is highlighted"
        elif listed.state != "pending":
            why = f"{listed.id} is {listed.state}: only a pending request is decided"
        elif listed.id not in self.plans:
            why = f"{listed.id}: its plan is not computed yet (r computes it again)"
        if why:
            if not quiet:
                self.notify(why, severity="warning")
            return None
        return self.plans[listed.id] if listed is not None else None

    @on(DataTable.RowSelected, "#requests")
    def _selected(self) -> None:
        """Enter on a request: the same as `y`."""
        if self.check_action("approve", ()):
            self.action_approve()

    @work(group="decide")  # never exclusive: a decision under way is never cancelled by another key
    async def action_approve(self) -> None:
        view = self.decidable()
        if view is None or self.deciding or self.session.read_only:
            return
        self.set_deciding(True)  # from here to the outcome: a second y or x starts nothing
        try:
            await self._approval(view)
        finally:
            self.plans.pop(view.id, None)
            self.set_deciding(False)

    async def _approval(self, view: RequestView) -> None:
        """The plan asked again if it was blocked, the person's confirmation (the typed id for an irreversible
        request), then the service's approval bound to the plan the dialog showed."""
        if view.plan.blocked:  # what blocked it may be done by now (a pull, a verify): the plan is asked again
            view = await self.fresh_plan(view)
        plan = view.plan
        if plan.blocked:  # the service's own word: it would run nothing now
            more = f" (+{len(plan.blocked) - 1} more)" if len(plan.blocked) > 1 else ""
            self.notify(f"{view.id} cannot run now: {plan.blocked[0]}{more}; nothing was done and it stays "
                        "pending", severity="warning", timeout=10)
            return
        typed: str | None = None
        if plan.type_to_confirm is not None:
            typed = await self.app.push_screen_wait(ApproveScreen(view))
            approved = typed is not None
        else:
            title = f"Approve {view.id}: {view.kind} of {view.subject}"
            confirm = ConfirmScreen(escape(escape_control(title)), (f"Why: {view.why}", "", *plan.lines), "Approve")
            approved = await self.app.push_screen_wait(confirm) is True
        if not approved:
            self.notify(f"{view.id}: approval cancelled, nothing was done")
            return
        await self._approve(view, typed)

    async def fresh_plan(self, view: RequestView) -> RequestView:
        """The request's plan computed again now ("computing the plan…" meanwhile); the shown one on failure."""
        panel = self.query_one(ApprovalsPanel)
        panel.computing = True
        try:
            fresh = await decide.current_plan(self.session, view.id)
        except RgtError as exc:
            self.notify(f"{view.id}: the plan could not be computed now: {exc}", severity="error", timeout=10)
            return view
        finally:
            panel.computing = False
        self.plans[view.id] = fresh
        self.show_highlighted()
        return fresh

    async def _approve(self, view: RequestView, typed: str | None) -> None:
        self.notify(f"approving {view.id} ({view.kind} of {view.subject})…")
        try:
            # shielded: once approved, the action and the record of its outcome run to their end
            done = await asyncio.shield(decide.approve(self.session, view.id, actor=ACTOR,
                                                       shown_digest=view.plan.digest, typed_id=typed))
        except decide.PlanChanged as exc:
            self.notify(str(exc), severity="warning", timeout=15)
        except RgtError as exc:
            self.notify(str(exc), severity="error", timeout=15)
        else:
            ok = done.state == "done"
            self.notify(f"{done.id} {done.state}: {done.outcome}", severity="information" if ok else "error",
                        timeout=15)

    def set_deciding(self, deciding: bool) -> None:
        self.deciding = deciding
        if self.showing():
            self.reload()
            self.refresh_bindings()

    @work(group="decide")
    async def action_reject(self) -> None:
        view = self.decidable()
        if view is None or self.deciding or self.session.read_only:
            return
        self.set_deciding(True)
        try:
            await self._rejection(view)
        finally:
            self.plans.pop(view.id, None)
            self.set_deciding(False)

    async def _rejection(self, view: RequestView) -> None:
        note = await self.app.push_screen_wait(NoteScreen(escape_control(
            f"Reject {view.id} ({view.kind}): a note the agent reads")))
        if note is None:
            return
        try:
            done = decide.reject(self.session, view.id, actor=ACTOR, note=note)
        except RgtError as exc:
            self.notify(str(exc), severity="error", timeout=10)
        else:
            self.notify(f"{done.id} rejected: {note}")

    @work(group="allowance")
    async def action_grant(self) -> None:
        if self.session.read_only:
            return
        grant = await self.app.push_screen_wait(GrantScreen())
        if grant is None:
            return
        try:
            granted = allowances.grant(self.session, actor=ACTOR, max_price_per_hour=grant.max_price_per_hour,
                                       total=grant.total, hours=grant.hours)
        except RgtError as exc:
            self.notify(str(exc), severity="error", timeout=10)
        else:
            self.notify(f"granted {granted.id}: rents and resumes up to {money(granted.max_price_per_hour)}/h, "
                        f"{money(granted.total)} in all, for {grant.hours:g} h (R revokes)")
        self.action_reload()  # a plan's "counted against an allowance" reads differently now

    @work(group="allowance")
    async def action_revoke(self) -> None:
        active = [a for a in allowances.allowances(self.session) if a.active]
        if self.session.read_only or not active:
            if not active:
                self.notify("no allowance is active")
            return
        lines = [f"{a.id}: up to {money(a.max_price_per_hour)}/h, {money(a.left)} of {money(a.total)} left"
                 for a in active]
        if not await self.app.push_screen_wait(ConfirmScreen("Revoke every active allowance", lines, "Revoke")):
            return
        for allowance in active:
            try:
                allowances.revoke(self.session, allowance.id, actor=ACTOR)
            except RgtError as exc:
                self.notify(str(exc), severity="error", timeout=10)
        self.notify(f"revoked {', '.join(a.id for a in active)}: every rent waits for you again")
        self.reload()

    def action_close(self) -> None:
        self.dismiss(None)
