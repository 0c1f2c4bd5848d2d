"""The checklist panel's VERIFY rows driven through Pilot on the real app: every check listed with its answer,
a finding's detail opened from its row, acknowledged with a note and a disclosure, and still acknowledged
after a re-audit (docs/verify.md §3–§4)."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Button, DataTable, Input

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.screens.finding import FindingScreen
from remote_gpu_trainer.services.audit import audit
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.widgets.log_panel import LogPanel
from support.capsules import classification_items, write_capsule, write_split
from support.helpers import FIXED_NOW, FixedClock, write_project
from support.tui_helpers import dashboard, focused_id, notified, wait_until


def leaky_project(root: Path) -> Session:
    """One seed (V04, info) and a test item whose bytes are a training item's (V14, error), audited once."""
    write_project(root)
    write_capsule(root, "r1", "seed0", metrics={"acc": 0.8}, items=classification_items(100, correct=80))
    write_split(root, "main", {"train": [("a.png", b"same"), ("b.png", b"train only")],
                               "test": [("c.png", b"same"), ("d.png", b"test only")]})
    session = open_session(str(root), clock=FixedClock(FIXED_NOW))
    audit.run_audit(session.project, session.db)
    return session


async def open_finding(pilot: Pilot[None], app: RgtApp, finding: str) -> None:
    """The checklist panel (4), the cursor on the finding's row, `a`: its detail is on screen."""
    await wait_until(pilot, lambda: dashboard(app).overview is not None)
    await pilot.press("4")
    await wait_until(pilot, lambda: focused_id(app) == "checklist")
    keys = [row.key for row in dashboard(app).current_run().checklist_rows]  # type: ignore[union-attr]
    app.screen.query_one("#checklist", DataTable).move_cursor(row=keys.index(finding))
    await pilot.press("a")
    await wait_until(pilot, lambda: isinstance(app.screen, FindingScreen))


def leak_id(session: Session) -> str:
    return next(r.id for r in session.db.finding_records() if r.check == "V14")


async def test_every_check_is_a_row_and_a_finding_opens_its_detail(tmp_path: Path) -> None:
    session = leaky_project(tmp_path / "p")
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        run = dashboard(app).current_run()
        assert run is not None
        keys = [row.key for row in run.checklist_rows]
        assert [k for k in keys if k.startswith("V")] == [f"V{n:02d}" for n in range(34)]
        assert keys.index(leak_id(session)) < keys.index("A01"), "open findings come before the checklist"
        statuses = {item.id: item.status for item in run.checklist}
        assert statuses["V14"] == "findings" and statuses["V20"] == "skipped" and statuses["V00"] == "pass"
        await pilot.press("4")
        await wait_until(pilot, lambda: focused_id(app) == "checklist")
        table = app.screen.query_one("#checklist", DataTable)
        table.move_cursor(row=keys.index(leak_id(session)))
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, FindingScreen))
        shown = str(app.screen.query_one("#finding-detail").query_one("Static").render())
        assert "train∩test = 1 items" in shown and "split:main" in shown and "fix:" in shown
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, FindingScreen))
    assert {r.status for r in session.db.finding_records()} == {"open"}, "escape changes nothing"
    session.close()


async def test_acknowledged_with_a_note_and_disclosure_it_stays_acknowledged_after_a_re_audit(tmp_path: Path) -> None:
    session = leaky_project(tmp_path / "p")
    finding = leak_id(session)
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_finding(pilot, app, finding)
        modal = app.screen
        modal.query_one("#finding-disclosure", Input).value = ""
        modal.query_one("#finding-ack", Button).press()  # no note yet: refused in the modal
        await wait_until(pilot, lambda: notified(app, "a note is required"))
        modal.query_one("#finding-note", Input).value = "c.png is a planted fixture of this test"
        modal.query_one("#finding-ack", Button).press()  # a note, no disclosure: refused, the dialog and note stay
        await wait_until(pilot, lambda: notified(app, "needs a disclosure"))
        assert app.screen is modal and modal.query_one("#finding-note", Input).value.startswith("c.png")
        assert session.db.finding_record(finding).status == "open"  # type: ignore[union-attr]
        modal.query_one("#finding-disclosure", Input).value = "one test item duplicates a training item"
        modal.query_one("#finding-ack", Button).press()
        await wait_until(pilot, lambda: session.db.finding_record(finding).status == "acknowledged")  # type: ignore[union-attr]
        await pilot.press("u")  # audit now: the finding fires again and is not raised
        await wait_until(pilot, lambda: notified(app, "audit: 0 raised"))
        await wait_until(pilot, lambda: any(
            row.key == finding and row.status == "acknowledged"
            for row in dashboard(app).current_run().checklist_rows))  # type: ignore[union-attr]
    record = session.db.finding_record(finding)
    assert record is not None and record.status == "acknowledged"
    assert record.disclosure == "one test item duplicates a training item"
    assert record.last_seen >= record.status_changed_at
    session.close()


SECOND_RUN = """
[runs.r2]
instance = "box"
workdir = "/workspace/job2"
command = "echo r2-only-line; echo '== rgt: done'"
log = "train.log"
remote_root = "/workspace/rgt/r2"
roster = ["seed0"]
"""


async def test_a_finding_quoting_escape_codes_is_shown_and_prefilled_escaped(tmp_path: Path) -> None:
    """A metric name from the box carries an ANSI colour: the disclosure field the dialog prefills shows it as
    text, never as a colour that breaks the screen."""
    root = tmp_path / "p"
    write_project(root)
    write_capsule(root, "r1", "seed0", metrics={"\x1b[31mEVIL": 0.5}, items=classification_items(10, correct=5))
    session = open_session(str(root), clock=FixedClock(FIXED_NOW))
    audit.run_audit(session.project, session.db)
    finding = next(r.id for r in session.db.finding_records() if "EVIL" in r.message)
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_finding(pilot, app, finding)
        prefilled = app.screen.query_one("#finding-disclosure", Input).value
        assert "\x1b" not in prefilled and "\\x1b[31mEVIL" in prefilled
    session.close()


async def test_n_shows_the_next_run_and_its_log_only(tmp_path: Path) -> None:
    """`rgt demo --flawed` has two runs: `n` moves the dashboard (checkpoints, log, gate, checklist) to the next
    one and back; the first run's log lines never land in the second's view."""
    write_project(tmp_path / "p", "echo r1-only-line", extra_run=SECOND_RUN)
    session = open_session(str(tmp_path / "p"), clock=FixedClock(FIXED_NOW))
    await create_instance(session, "box")
    await launch_run(session, "r1")
    await launch_run(session, "r2")
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = dashboard(app)
        await wait_until(pilot, lambda: "r1-only-line" in screen.query_one(LogPanel).text())
        await pilot.press("n")
        await wait_until(pilot, lambda: screen.run_id == "r2")
        await wait_until(pilot, lambda: "r2-only-line" in screen.query_one(LogPanel).text())
        assert "r1-only-line" not in screen.query_one(LogPanel).text()
        await wait_until(pilot, lambda: (run := screen.current_run()) is not None and run.id == "r2")
        await pilot.press("n")
        await wait_until(pilot, lambda: screen.run_id == "r1")
        await wait_until(pilot, lambda: "r1-only-line" in screen.query_one(LogPanel).text())
    session.close()
