"""The Terminate control as a user meets it: the button works with the mouse, typing goes into the id field
wherever the focus is, Enter confirms only a matching id, Escape cancels, and a terminated box offers no
teardown control any more. The real app through Pilot, on a real sim project."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Button, Input

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.screens.teardown import TeardownScreen
from remote_gpu_trainer.services.opening import open_session
from support.helpers import INSTANCE, launched_and_finished
from support.tui_helpers import dashboard, gate_open, notified, wait_until

INSTANCE_ID = "sim-box"


def state_of(app: RgtApp) -> str | None:
    overview = dashboard(app).overview
    instance = overview.instance(INSTANCE) if overview is not None else None
    return instance.state if instance is not None else None


async def verified(pilot: Pilot[None], app: RgtApp) -> None:
    await wait_until(pilot, lambda: dashboard(app).overview is not None)
    await pilot.press("p")
    await wait_until(pilot, lambda: "pull" not in dashboard(app).busy and dashboard(app).overview is not None
                     and any(c.status == "pulled" for c in dashboard(app).current_run().checkpoints))  # type: ignore[union-attr]
    await pilot.press("v")
    await wait_until(pilot, lambda: gate_open(app))
    await wait_until(pilot, lambda: not app.screen.query_one("#teardown", Button).disabled)


async def test_click_type_anywhere_enter_and_the_row_after_terminate(project_dir: Path) -> None:
    session = open_session(str(project_dir))
    await launched_and_finished(session)
    disk = project_dir / ".rgt" / "sim" / INSTANCE
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await verified(pilot, app)
        await pilot.click("#teardown")  # the mouse, not `t`
        await wait_until(pilot, lambda: isinstance(app.screen, TeardownScreen))
        modal = app.screen
        assert isinstance(modal, TeardownScreen)
        await wait_until(pilot, lambda: app.focused is not None and app.focused.id == "cancel")
        await pilot.press(*"sim-bo")  # typed while Cancel has the focus: it goes into the id field
        field = modal.query_one("#confirm-id", Input)
        await wait_until(pilot, lambda: field.value == "sim-bo")
        await pilot.press("enter")  # a partial id never confirms
        await wait_until(pilot, lambda: any("is not the instance id" in str(n.message) for n in app._notifications))
        assert isinstance(app.screen, TeardownScreen) and disk.is_dir()
        await pilot.press("x", "backspace", "backspace", "x")  # "sim-bx": still wrong
        await wait_until(pilot, lambda: field.value == "sim-bx")
        assert modal.query_one("#confirm", Button).disabled
        await pilot.press("backspace", "o", "x")
        await wait_until(pilot, lambda: field.value == INSTANCE_ID)
        assert not modal.query_one("#confirm", Button).disabled
        await pilot.press("enter")
        await wait_until(pilot, lambda: not disk.exists())
        await wait_until(pilot, lambda: state_of(app) == "terminated")
        await wait_until(pilot, lambda: not app.screen.query_one("#teardown", Button).display)
        assert dashboard(app).check_action("teardown", ()) is False  # the key is not offered either
        run = dashboard(app).current_run()
        assert run is not None and not run.teardown.offered and "terminated" in run.teardown.why_not
        palette = [command.title for command in app.get_system_commands(app.screen)]
        assert "Teardown…" not in palette and "Pull" in palette
    session.close()


async def test_escape_cancels_and_nothing_is_done(project_dir: Path) -> None:
    session = open_session(str(project_dir))
    await launched_and_finished(session)
    disk = project_dir / ".rgt" / "sim" / INSTANCE
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await verified(pilot, app)
        await pilot.press("t")
        await wait_until(pilot, lambda: isinstance(app.screen, TeardownScreen))
        modal = app.screen
        await pilot.press(*INSTANCE_ID)
        await wait_until(pilot, lambda: modal.query_one("#confirm-id", Input).value == INSTANCE_ID)
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, TeardownScreen))
        await wait_until(pilot, lambda: any("teardown cancelled" in str(n.message) for n in app._notifications))
        assert disk.is_dir()
        assert [e.kind for e in session.db.events() if e.kind in ("approval", "action")
                and e.detail.get("action") == "terminate"] == []  # the rental's own approval is "create"
    session.close()


def faces(app: RgtApp) -> tuple[bool, bool, bool | None, str | None]:
    """What each face offers for the teardown: the button (shown, disabled), the key binding, the palette."""
    button = app.screen.query_one("#teardown", Button)
    palette = [command.help for command in app.get_system_commands(app.screen) if command.title == "Teardown…"]
    return bool(button.display), button.disabled, dashboard(app).check_action("teardown", ()), \
        (palette[0] if palette else None)


async def test_the_button_the_key_the_palette_and_the_modal_render_one_decision(project_dir: Path) -> None:
    session = open_session(str(project_dir))
    await launched_and_finished(session)
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).current_run() is not None)
        control = dashboard(app).current_run().teardown  # type: ignore[union-attr]
        assert control.offered and control.irreversible and not control.enabled and control.reasons
        assert faces(app) == (True, True, None,
                              f"Terminate the instance after typing its id (t) — disabled: {control.why_not}")
        # the key is greyed (Textual runs no disabled binding); the palette entry, chosen anyway, says why
        command = next(c for c in app.get_system_commands(app.screen) if c.title == "Teardown…")
        command.callback()
        await wait_until(pilot, lambda: notified(app, f"not available: {control.reasons[0]}"))
        assert not isinstance(app.screen, TeardownScreen)

        await verified(pilot, app)
        control = dashboard(app).current_run().teardown  # type: ignore[union-attr]
        assert control.enabled and control.reasons == () and control.why_not == ""
        assert faces(app) == (True, False, True, "Terminate the instance after typing its id (t)")
        await pilot.press("t")
        await wait_until(pilot, lambda: isinstance(app.screen, TeardownScreen))
        modal = app.screen
        assert isinstance(modal, TeardownScreen) and modal.plan.enabled and modal.plan.irreversible
        assert "IRREVERSIBLE" in str(modal.query_one("#teardown-dialog").border_title)
        await pilot.press("escape")
        await wait_until(pilot, lambda: notified(app, "teardown cancelled"))
    session.close()


async def test_a_read_only_session_offers_no_teardown_anywhere(project_dir: Path) -> None:
    writer = open_session(str(project_dir))
    await launched_and_finished(writer)
    writer.close()
    session = open_session(str(project_dir), read_only=True)
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).current_run() is not None)
        control = dashboard(app).current_run().teardown  # type: ignore[union-attr]
        assert not control.offered and not control.enabled and "read-only" in control.why_not
        assert faces(app) == (False, True, False, None)
        assert dashboard(app).check_action("stop", ()) is False
    session.close()


async def test_pressing_t_or_s_again_while_a_teardown_is_open_starts_nothing(project_dir: Path) -> None:
    """The teardown worker holds the box-action slot from the plan to the logged outcome: while it runs,
    `t` and `s` are greyed, a second `t` types into the id field instead of stacking a second modal, and
    Escape leaves one cancelled teardown and no approval."""
    session = open_session(str(project_dir))
    await launched_and_finished(session)
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await verified(pilot, app)
        await pilot.press("t")
        await wait_until(pilot, lambda: isinstance(app.screen, TeardownScreen))
        depth = len(app.screen_stack)
        assert dashboard(app).busy_with("teardown") and dashboard(app).busy_with("stop")
        assert dashboard(app).check_action("teardown", ()) is None
        assert dashboard(app).check_action("stop", ()) is None
        await pilot.press("t")
        field = app.screen.query_one("#confirm-id", Input)
        await wait_until(pilot, lambda: field.value == "t")
        assert len(app.screen_stack) == depth
        await pilot.press("escape")
        await wait_until(pilot, lambda: not dashboard(app).busy_with("teardown"))
        assert notified(app, "teardown cancelled") and len(app.screen_stack) == depth - 1
        assert dashboard(app).check_action("teardown", ()) is True
    teardowns = [e for e in session.db.events() if e.kind in ("approval", "action")
                 and e.detail.get("action") in ("terminate", "stop")]
    assert teardowns == [] and (project_dir / ".rgt" / "sim" / INSTANCE).is_dir()
    session.close()
