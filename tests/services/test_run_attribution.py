"""VERIFY tells each run the same truth it tells the project (audits/catalogue/attribution.py): on `rgt demo --flawed`
the leak in demo-flawed's split and its stale checkpoint are demo-flawed's findings in `rgt audit RUN` (text and
JSON), in the report's run blocks and in that run's checklist in the TUI, and never the clean demo's; a run that
was never pulled is "not run yet", never a finding read from the absence of its files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import DataTable

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.cli import main
from remote_gpu_trainer.services.opening import open_session
from support.demo_replay import replayed_demo
from support.helpers import FIXED_NOW, FixedClock
from support.tui_helpers import dashboard, wait_until

PLANTED = {"V14", "V26"}  # the flawed run's leak (subject split:demo-flawed) and stale checkpoint (its capsule)


@pytest.fixture(scope="module")
def flawed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replayed_demo(tmp_path_factory.mktemp("flawed") / "rgt-demo", flawed=True)


def audit_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert main(["audit", *args, "--format", "json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_rgt_audit_of_the_flawed_run_lists_its_leak_and_the_clean_run_does_not(
        flawed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = audit_json(capsys, str(flawed))
    assert {f["check"] for f in project["findings"]} >= PLANTED  # type: ignore[union-attr]

    bad = audit_json(capsys, "demo-flawed", str(flawed))
    status = {c["id"]: c["status"] for c in bad["checks"]}  # type: ignore[union-attr]
    assert status["V14"] == "findings" and status["V26"] == "findings"
    assert {(f["check"], f["subject"]) for f in bad["findings"]} >= {  # type: ignore[union-attr]
        ("V14", "split:demo-flawed"), ("V26", "capsule:demo-flawed/seed0")}

    clean = audit_json(capsys, "demo", str(flawed))
    status = {c["id"]: c["status"] for c in clean["checks"]}  # type: ignore[union-attr]
    assert status["V14"] == "pass" and status["V26"] == "pass", status
    assert not {f["check"] for f in clean["findings"]} & PLANTED, clean["findings"]  # type: ignore[union-attr]

    assert main(["audit", "demo-flawed", str(flawed)]) == 0
    text = capsys.readouterr().out
    assert "! V14 split_hash_disjoint      findings (1)" in text and "[V14] split:demo-flawed" in text
    assert main(["audit", "demo", str(flawed)]) == 0
    text = capsys.readouterr().out
    assert "✓ V14 split_hash_disjoint      pass" in text and "split:demo-flawed" not in text


def test_strict_fails_the_flawed_run_and_not_the_clean_one(flawed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "demo-flawed", str(flawed), "--strict"]) == 1
    assert main(["audit", "demo", str(flawed), "--strict"]) == 0
    capsys.readouterr()


def test_the_report_puts_each_finding_in_the_block_of_its_run(flawed: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--report", str(flawed), "--format", "json"]) == 0
    runs = {run["id"]: run for run in json.loads(capsys.readouterr().out)["runs"]}
    checks = {run_id: {f["check"] for f in run["findings"]} for run_id, run in runs.items()}
    assert checks["demo-flawed"] >= PLANTED
    assert not checks["demo"] & PLANTED, checks["demo"]
    listed = {run_id: {item["id"]: item["status"] for item in run["checklist"]} for run_id, run in runs.items()}
    assert listed["demo-flawed"]["V14"] == "findings" and listed["demo"]["V14"] == "pass"


async def test_each_runs_checklist_in_the_tui_shows_its_own_findings(flawed: Path) -> None:
    session = open_session(str(flawed), clock=FixedClock(FIXED_NOW))
    app = RgtApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        await pilot.press("4")

        def shown(run_id: str) -> dict[str, str]:
            """The checklist table's rows as on screen, once the dashboard shows `run_id`."""
            screen = dashboard(app)
            table = screen.query_one("#checklist", DataTable)
            return {str(row.key.value): " ".join(str(cell) for cell in table.get_row(row.key))
                    for row in table.ordered_rows} \
                if screen.run_id == run_id and table.row_count else {}

        def planted(rows: dict[str, str]) -> set[str]:
            return {key for key, text in rows.items()
                    if key.startswith("F-") and any(f"[{check}]" in text for check in PLANTED)}

        await wait_until(pilot, lambda: "V14" in shown("demo"))
        clean = shown("demo")
        assert not planted(clean), clean
        assert clean["V14"].split()[:2] == ["✔", "pass"], clean["V14"]
        await pilot.press("n")
        await wait_until(pilot, lambda: "V14" in shown("demo-flawed") and len(planted(shown("demo-flawed"))) == 2)
        assert shown("demo-flawed")["V14"].split()[1] == "findings", shown("demo-flawed")["V14"]
    session.close()


@pytest.fixture
def unpulled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The demo run finished on its box and never pulled, audited once (`rgt audit`)."""
    project = replayed_demo(tmp_path / "rgt-demo", flawed=False, pull=False)
    document = audit_json(capsys, str(project))
    v04 = next(c for c in document["checks"] if c["id"] == "V04")  # type: ignore[union-attr]
    assert v04["status"] == "not_run" and "demo not pulled yet (rgt pull demo" in v04["note"], v04
    assert [f for f in document["findings"] if f["check"] == "V04"] == [], document["findings"]  # type: ignore
    return project


def test_an_unpulled_run_is_not_run_and_raises_nothing(unpulled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for_run = audit_json(capsys, "demo", str(unpulled))
    v04 = next(c for c in for_run["checks"] if c["id"] == "V04")  # type: ignore[union-attr]
    assert v04 == {"id": "V04", "name": "seed_count", "kind": "auto", "status": "not_run", "findings": 0,
                   "note": "not run: demo not pulled yet (rgt pull demo, then rgt verify demo)"}
    assert main(["--report", str(unpulled), "--format", "json"]) == 0
    [run] = json.loads(capsys.readouterr().out)["runs"]
    assert {item["id"]: item["status"] for item in run["checklist"]}["V04"] == "not_run"
    assert not [f for f in run["findings"] if f["check"] == "V04"], run["findings"]


async def test_an_unpulled_runs_checklist_in_the_tui_says_not_run(unpulled: Path) -> None:
    session = open_session(str(unpulled), clock=FixedClock(FIXED_NOW))
    app = RgtApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: (run := dashboard(app).current_run()) is not None and bool(run.checklist))
        run = dashboard(app).current_run()
        assert run is not None
        v04 = next(item for item in run.checklist if item.id == "V04")
        assert (v04.status, v04.note) == ("not_run", "not run: demo not pulled yet (rgt pull demo, then rgt verify "
                                                     "demo)")
        assert not [row for row in run.checklist_rows if "[V04]" in row.label], run.checklist_rows
    session.close()
