"""The Approvals screen (`i`) as a person meets it: an agent's request counted in the dashboard's header, listed
with the plan computed now, approved only with the box's id typed and only once the gate is open, rejected with
a note, an allowance granted from the form, and nothing to decide in a read-only session. The real app through
Pilot on a real sim project; the request is filed as `rgt mcp` files it (services/inbox/requests.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Button, DataTable, Input, Static

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.screens.approval_dialogs import ApproveScreen, GrantScreen
from remote_gpu_trainer.screens.approvals import ApprovalsScreen
from remote_gpu_trainer.screens.dashboard import DashboardScreen
from remote_gpu_trainer.screens.note import NoteScreen
from remote_gpu_trainer.services.inbox import allowances
from remote_gpu_trainer.services.inbox.model import RequestKind, agent_actor
from remote_gpu_trainer.services.inbox.requests import file_request, get_request
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.state.events import EventKind
from remote_gpu_trainer.widgets.approvals_panel import COMPUTING, ApprovalsPanel
from support.gate_helpers import (
    SIM_ID,
    launch_finished,
    project_text,
    pull_and_verify,
    seed_verdicts,
    sim_disk,
    write_text_project,
)
from support.helpers import INSTANCE
from support.tui_helpers import dashboard, notified, wait_until

AGENT = agent_actor("claude-code")
WHY = "results are home; stop paying"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A sim project whose run r1 finished on its box (not pulled yet), with one teardown request of an agent."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = tmp_path / "p"
    write_text_project(root, project_text())
    seed_verdicts(root)
    asyncio.run(launch_finished(root))
    asyncio.run(file_teardown(root))
    return root


async def file_teardown(root: Path) -> str:
    session = open_session(str(root))
    try:
        request = await file_request(session, RequestKind.TEARDOWN, actor=AGENT, why=WHY, instance=INSTANCE)
        return request.id
    finally:
        await session.close_transports()
        session.close()


def topbar(app: RgtApp) -> str:
    return str(dashboard(app).query_one("#topbar", Static).render())


def inbox(app: RgtApp) -> ApprovalsScreen:
    screen = app.screen
    assert isinstance(screen, ApprovalsScreen)
    return screen


def plan_shown(app: RgtApp, request_id: str, *, blocked: bool | None = None) -> bool:
    """The Approvals screen shows `request_id` highlighted with its plan computed now (and blocked or not)."""
    screen = app.screen
    if not isinstance(screen, ApprovalsScreen):
        return False
    panel = screen.query_one(ApprovalsPanel)
    view = screen.plans.get(request_id)
    return panel.highlighted() == request_id and view is not None and not panel.computing and \
        panel.detail == view and (blocked is None or bool(view.plan.blocked) == blocked)


def detail(app: RgtApp) -> str:
    return str(inbox(app).query_one("#request-detail", Static).render())


async def open_inbox(pilot: Pilot[None], app: RgtApp) -> None:
    await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and dashboard(app).overview is not None)
    await pilot.press("i")
    await wait_until(pilot, lambda: isinstance(app.screen, ApprovalsScreen) and
                     app.screen.query_one("#requests", DataTable).row_count > 0)


async def test_the_header_counts_the_request_and_approving_it_with_the_typed_id_tears_the_box_down(
        project: Path) -> None:
    session = open_session(str(project))
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: "⚑ 1 request ·" in topbar(app))
        assert dashboard(app).check_action("approvals", ()) is True  # `i Approvals` in the footer while one waits
        await open_inbox(pilot, app)
        table = inbox(app).query_one("#requests", DataTable)
        assert [str(cell) for cell in table.get_row_at(0)][:5] == \
            ["Q-000001", "teardown", "box", "claude-code", "· pending"]
        await wait_until(pilot, lambda: plan_shown(app, "Q-000001", blocked=True))
        assert WHY in detail(app) and "Gate:      closed: no PULL_VERIFIED.json" in detail(app)

        # the gate is closed (nothing pulled): y approves nothing and says why, with no dialog to type into
        await pilot.press("y")
        await wait_until(pilot, lambda: notified(app, "Q-000001 cannot run now: no PULL_VERIFIED.json"))
        assert isinstance(app.screen, ApprovalsScreen) and sim_disk(project).is_dir()
        assert get_request(session, "Q-000001").state == "pending"

        # pulled and verified meanwhile (another terminal): y asks for the plan again, which now lets it run
        await pull_and_verify(project)
        await wait_until(pilot, lambda: not inbox(app).deciding and plan_shown(app, "Q-000001"))
        await pilot.press("enter")  # Enter on the highlighted request, as y
        await wait_until(pilot, lambda: isinstance(app.screen, ApproveScreen))
        dialog = app.screen
        assert isinstance(dialog, ApproveScreen) and dialog.expected == SIM_ID
        field = dialog.query_one("#approve-id", Input)
        await pilot.press(*"sim-bx")  # typed while Cancel has the focus: it goes into the id field
        await wait_until(pilot, lambda: field.value == "sim-bx")
        assert dialog.query_one("#approve", Button).disabled
        await pilot.press("enter")  # a wrong id does nothing
        await wait_until(pilot, lambda: notified(app, "'sim-bx' is not the instance id: nothing was done"))
        assert isinstance(app.screen, ApproveScreen) and sim_disk(project).is_dir()
        assert get_request(session, "Q-000001").state == "pending"

        await pilot.press("backspace", "o", "x")  # sim-bx → sim-box
        await wait_until(pilot, lambda: field.value == SIM_ID and not dialog.query_one("#approve", Button).disabled)
        await pilot.press("enter")
        await wait_until(pilot, lambda: not sim_disk(project).exists())
        await wait_until(pilot, lambda: notified(app, "Q-000001 done: box terminated"))
        assert get_request(session, "Q-000001").state == "done"
        approvals = [e for e in session.db.events(kind=EventKind.APPROVAL) if e.detail.get("action") == "terminate"]
        assert [e.actor for e in approvals] == ["person:tui"]
        await wait_until(pilot, lambda: "✔ done" in [str(c) for c in table.get_row_at(0)])

        await pilot.press("escape")  # back on the dashboard, the count is gone
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and "⚑" not in topbar(app))
        assert dashboard(app).check_action("approvals", ()) is False
    session.close()


async def test_rejecting_asks_for_a_note_and_moves_the_request_to_rejected(project: Path) -> None:
    session = open_session(str(project))
    app = RgtApp(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_inbox(pilot, app)
        await wait_until(pilot, lambda: plan_shown(app, "Q-000001"))
        await pilot.press("x")
        await wait_until(pilot, lambda: isinstance(app.screen, NoteScreen))
        await pilot.press("enter")  # a note is required
        await wait_until(pilot, lambda: notified(app, "a note is required"))
        await pilot.press(*"pull first")
        note = app.screen.query_one("#note", Input)
        await wait_until(pilot, lambda: note.value == "pull first")
        await pilot.press("enter")
        await wait_until(pilot, lambda: get_request(session, "Q-000001").state == "rejected")
        await wait_until(pilot, lambda: "rejected by person:tui" in detail(app) and "pull first" in detail(app))
        assert inbox(app).check_action("approve", ()) is None  # greyed: nothing left to decide
        moved = [e for e in session.db.events(kind=EventKind.REQUEST) if e.detail.get("state") == "rejected"]
        assert [(e.actor, e.detail["note"]) for e in moved] == [("person:tui", "pull first")]
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and "⚑" not in topbar(app))
    assert sim_disk(project).is_dir()
    session.close()


async def test_an_allowance_is_granted_from_the_form(project: Path) -> None:
    session = open_session(str(project))
    app = RgtApp(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_inbox(pilot, app)
        await pilot.press("g")
        await wait_until(pilot, lambda: isinstance(app.screen, GrantScreen))
        form = app.screen
        for field_id, typed in (("grant-price", "1.5"), ("grant-total", "20"), ("grant-hours", "8")):
            field = form.query_one(f"#{field_id}", Input)
            await wait_until(pilot, lambda f=field: app.focused is f)  # type: ignore[misc]
            await pilot.press(*typed)
            await wait_until(pilot, lambda f=field, t=typed: f.value == t)  # type: ignore[misc]
            await pilot.press("enter")
        await wait_until(pilot, lambda: notified(app, "granted A-000001"))
        granted = allowances.allowances(session)
        assert [(a.max_price_per_hour, a.total, a.granted_by, a.active) for a in granted] == \
            [(1.5, 20.0, "person:tui", True)]
        summary = inbox(app).query_one("#approvals-summary", Static)
        await wait_until(pilot, lambda: "A-000001: ≤ $1.50/h, $20.00 of $20.00 left" in str(summary.render()))
    session.close()


async def test_a_read_only_session_lists_the_requests_and_offers_no_decision(project: Path) -> None:
    session = open_session(str(project), read_only=True)
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None and "⚑ 1 request" in topbar(app))
        await open_inbox(pilot, app)
        await wait_until(pilot, lambda: plan_shown(app, "Q-000001"))
        screen = inbox(app)
        assert [screen.check_action(a, ()) for a in ("approve", "reject", "grant", "revoke")] == [False] * 4
        shown = {active.binding.action for active in screen.active_bindings.values() if active.enabled}
        assert shown.isdisjoint({"approve", "reject", "grant", "revoke"}) and "close" in shown
        await pilot.press("y", "x", "g")
        await pilot.press("r")  # handled after the three keys above: none of them opened anything
        await wait_until(pilot, lambda: plan_shown(app, "Q-000001"))
        assert app.screen is screen and "READ-ONLY" in str(screen.query_one("#approvals-summary", Static).render())
        assert COMPUTING not in detail(app)
    assert get_request(session, "Q-000001").state == "pending" and allowances.allowances(session) == []
    session.close()
