"""The Deliver panel (5) driven through Pilot on the real app (docs/deliver.md §9): claims with their ladder
state and numbers, figures and tables with their QA and whether they are current, `r` reconciling only while
the panel is shown, enter on a figure opening it, and `b` building everything in a worker.

The project is written on disk as `rgt build` leaves it: real capsules, a real PNG drawn by matplotlib, and
figure.json / table.json / EVIDENCE.json / reconcile.json in the shapes of docs/deliver.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Static

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.screens.figure import FigurePathScreen, FigureScreen, image_support
from remote_gpu_trainer.services.deliver.build import deliver_view
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.widgets.deliver_panel import DeliverPanel
from support.deliver_project import delivered_project, user_project
from support.helpers import FIXED_NOW, FixedClock
from support.tui_helpers import dashboard, notified, wait_until

INLINE = "acc 0.81 ↑ (test, n=100 items, 2 seeds, no CI, mean ± std 0.01)"  # the inline form of deliver/disclosure


def rows_of(app: RgtApp) -> dict[str, tuple[str, str, str]]:
    table = app.screen.query_one("#deliver", DataTable)
    return {str(row.key.value): tuple(str(cell) for cell in table.get_row(row.key))  # type: ignore[misc]
            for row in table.ordered_rows}


def panel_text(app: RgtApp, widget_id: str) -> str:
    return str(app.screen.query_one(f"#{widget_id}", Static).render())


async def open_deliver(pilot: Any, app: RgtApp) -> None:
    await wait_until(pilot, lambda: dashboard(app).overview is not None)
    await pilot.press("5")
    await wait_until(pilot, lambda: dashboard(app).deliver_view is not None and bool(rows_of(app)))


def test_the_view_says_current_stale_and_qa_from_the_recorded_hashes(tmp_path: Path) -> None:
    root = tmp_path / "p"
    delivered_project(root).close()
    view = deliver_view(root)
    assert [(r.key, r.status, r.detail) for r in view.rows] == [
        ("claim:C1-acc", "audited", INLINE),
        ("figure:loss-curve", "current", "QA passed · current"),
        ("table:tab-main", "qa_failed", "QA failed: Q4_bold_rule fail · current"),
    ]
    assert view.reconcile_line.startswith("not reconciled yet")
    figure = view.output("figure:loss-curve")
    assert figure is not None and figure.image == str(root / "figures" / "loss-curve" / "final.png")
    assert figure.open_command == f"xdg-open {root / 'figures' / 'loss-curve' / 'final.png'}"

    train = root / "runs" / "r1" / "seed1" / "train.csv"
    train.write_text(train.read_text(encoding="utf-8").replace("0.001", "0.002", 1), encoding="utf-8")
    (root / "tables" / "tab-main" / "final.md").unlink()
    stale = deliver_view(root)
    figure = stale.output("figure:loss-curve")
    assert figure is not None and figure.stale == ("runs/r1/seed1/train.csv changed since the build",)
    assert [(r.status, r.detail) for r in stale.rows[1:]] == [
        ("stale", "QA passed · stale: rebuild"), ("stale", "QA failed: Q4_bold_rule fail · stale: rebuild")]
    table = stale.output("table:tab-main")
    assert table is not None and table.stale == ("tables/tab-main/final.md is missing or not a plain file in the "
                                                 "project",)


def test_an_input_reached_through_a_link_is_never_current(tmp_path: Path) -> None:
    """A train.csv replaced by a link to a file with the very same bytes is still not a file of the project."""
    root = tmp_path / "p"
    delivered_project(root).close()
    train = root / "runs" / "r1" / "seed0" / "train.csv"
    outside = tmp_path / "elsewhere.csv"
    outside.write_bytes(train.read_bytes())
    train.unlink()
    train.symlink_to(outside)
    figure = deliver_view(root).output("figure:loss-curve")
    assert figure is not None and figure.stale == ("runs/r1/seed0/train.csv is missing or not a plain file in the "
                                                   "project",)


def test_unreadable_files_are_lines_not_crashes(tmp_path: Path) -> None:
    root = tmp_path / "p"
    delivered_project(root).close()
    (root / "EVIDENCE.json").write_text('{"claims": [', encoding="utf-8")
    (root / "figures" / "loss-curve" / "figure.json").write_text("[1, 2]", encoding="utf-8")
    (root / "figures" / "bad name").mkdir()
    (root / "figures" / "bad name" / "figure.json").write_text("{}", encoding="utf-8")
    view = deliver_view(root)
    assert [r.key for r in view.rows] == ["table:tab-main"]
    assert view.problems[0].startswith("EVIDENCE.json: not readable JSON")
    assert view.problems[1:] == (  # "bad name" is no id: never built, and said rather than passed over
        "figures/bad name: not a figure id (a letter or digit, then letters, digits, '.', '_' or '-'): its "
        "figure.json is not built", "figures/loss-curve/figure.json: not a JSON object")


def test_image_support_is_read_from_the_terminal_s_own_variables() -> None:
    assert image_support({"TERM": "xterm-kitty"}) and image_support({"TERM_PROGRAM": "WezTerm"})
    assert image_support({"TERM": "xterm-256color", "KONSOLE_VERSION": "230804"})
    assert not image_support({"TERM": "xterm-256color"}) and not image_support({})
    assert not image_support({"TERM": "xterm-kitty", "RGT_IMAGES": "0"})
    assert image_support({"TERM": "xterm-256color", "RGT_IMAGES": "1"})


async def test_the_panel_lists_claims_figures_and_tables_and_enter_opens_a_figure(
        tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("RGT_IMAGES", raising=False)
    monkeypatch.delenv("TERM_PROGRAM", raising=False)
    monkeypatch.delenv("KITTY_WINDOW_ID", raising=False)
    monkeypatch.delenv("KONSOLE_VERSION", raising=False)
    root = tmp_path / "p"
    session = delivered_project(root)
    app = RgtApp(session)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_deliver(pilot, app)
        assert rows_of(app) == {
            "claim:C1-acc": ("✔ audited", "claim C1-acc", INLINE),
            "figure:loss-curve": ("✔ current", "figure loss-curve", "QA passed · current"),
            "table:tab-main": ("✖ qa_failed", "table tab-main", "QA failed: Q4_bold_rule fail · current"),
        }
        assert panel_text(app, "deliver-summary") == f"C1-acc: The model reaches 0.80 accuracy.\n{INLINE}"
        table = app.screen.query_one("#deliver", DataTable)
        table.focus()
        table.move_cursor(row=1)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, FigurePathScreen))
        shown = str(app.screen.query_one("#figure-lines", Static).render())
        png = root / "figures" / "loss-curve" / "final.png"
        assert f"  {png}\n\nOpen it with:\n  xdg-open {png}" in shown
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, FigurePathScreen))
        monkeypatch.setenv("RGT_IMAGES", "1")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, FigureScreen))
        assert app.screen.query_one("#figure-image").__class__.__module__.startswith("textual_image")
        await pilot.press("escape")
    session.close()


async def test_r_reconciles_only_on_the_deliver_panel_and_shows_the_drift_line(tmp_path: Path) -> None:
    root = tmp_path / "p"
    session = delivered_project(root)
    toml = root / "rgt.toml"
    toml.write_text(toml.read_text(encoding="utf-8") + '\n[deliver]\ndocs = ["paper.md"]\n', encoding="utf-8")
    (root / "paper.md").write_text("# Results\n\nOur model reaches acc 0.83 on the test set.\n", encoding="utf-8")
    session.close()
    session = open_session(str(root), clock=FixedClock(FIXED_NOW))
    app = RgtApp(session)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        await pilot.press("r")  # on the instances panel r refreshes: nothing is reconciled
        await pilot.press("5")
        await wait_until(pilot, lambda: dashboard(app).deliver_view is not None)
        assert not (root / "reconcile.json").exists()
        assert {b.binding.description for b in app.screen.active_bindings.values()} >= {"Build", "Reconcile"}
        await pilot.press("r")
        await wait_until(pilot, lambda: "drift:0" in rows_of(app))
        assert rows_of(app)["drift:0"] == ("✖ drift", "reconcile", "paper.md:3 acc 0.83 ≠ 0.81")
        assert notified(app, "reconcile: 1 drift(s): paper.md:3 says 0.83, the evidence 0.81")
        assert "reconciled: 1 drift(s), 1 claim(s) missing from the documents" in panel_text(app, "deliver-status")
        report = json.loads((root / "reconcile.json").read_text(encoding="utf-8"))
        assert [(d["doc"], d["line"], d["reported"]) for d in report["drifts"]] == [("paper.md", 3, 0.83)]
        await pilot.press("1")
        await wait_until(pilot, lambda: "Reconcile" not in {
            b.binding.description for b in app.screen.active_bindings.values()})
    session.close()


def builds(app: RgtApp) -> list[str]:
    return [str(n.message) for n in app._notifications if str(n.message).startswith("build")]


#: user_project writes its capsules into runs/ (no pull of rgt): every output discloses them as unverified
#: evidence and the claim stays planned (issue 26 item 7)
UNPULLED = "runs/r1/seed0/test/main/metrics.json, runs/r1/seed1/test/main/metrics.json (not pulled by rgt: no pull " \
           "of run r1 is recorded)"
BUILT_LINES = (
    "✔ figure loss-curve: QA passed; 2 input(s) not verified evidence, disclosed → figures/loss-curve/",
    "✔ table tab-main: QA passed; 2 input(s) not verified evidence, disclosed → tables/tab-main/",
    "✔ evidence: C1-acc planned; 1 with a disclosure → EVIDENCE.json",
    "✔ macros: 1 macro(s) with their disclosure companions → tables/macros/final.tex",
)


async def test_b_builds_everything_in_a_worker_and_the_panel_shows_the_built_state(tmp_path: Path) -> None:
    root = tmp_path / "p"
    session = user_project(root)
    app = RgtApp(session)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_deliver(pilot, app)
        assert rows_of(app) == {
            "claim:C1-acc": ("? not_built", "claim C1-acc", "acc: not built (rgt build evidence)"),
            "figure:loss-curve": ("? not_built", "figure loss-curve", "not built: b builds everything"),
            "table:tab-main": ("? not_built", "table tab-main", "not built: b builds everything"),
        }
        await pilot.press("b")
        await wait_until(pilot, lambda: notified(app, "build:"), timeout=120)
        assert builds(app) == ["build: 4 passed"]
        await wait_until(pilot, lambda: rows_of(app)["table:tab-main"][0] == "✔ current")
        assert app.screen.query_one(DeliverPanel).progress == BUILT_LINES
        assert rows_of(app) == {
            "claim:C1-acc": ("· planned", "claim C1-acc",
                             f"acc 0.805 ↑ (test, n=100 items, 2 seeds, no CI, mean ± std 0.007; unverified "
                             f"evidence: {UNPULLED})"),
            "figure:loss-curve": ("✔ current", "figure loss-curve", "QA passed · current"),
            "table:tab-main": ("✔ current", "table tab-main", "QA passed · current"),
        }
        assert "✔ macros: 1 macro(s)" in panel_text(app, "deliver-status")
        screen = dashboard(app)
        screen.action_build()  # b again, and once more while that build runs: greyed, nothing started twice
        assert screen.check_action("build", ()) is None
        screen.action_build()
        await wait_until(pilot, lambda: len(builds(app)) == 2 and screen.check_action("build", ()) is True,
                         timeout=120)
        await pilot.pause(0.5)
        assert builds(app) == ["build: 4 passed"] * 2
    assert (root / "tables" / "macros" / "final.tex").read_text(encoding="utf-8").count("\\newcommand") == 2
    session.close()


async def test_the_command_palette_opens_the_deliver_panel(tmp_path: Path) -> None:
    """In the wide layout there is no tab to see: the palette lists the panel with its keys."""
    session = delivered_project(tmp_path / "p")
    app = RgtApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        command = next(c for c in app.get_system_commands(app.screen) if c.title == "Deliver")
        command.callback()
        await wait_until(pilot, lambda: dashboard(app).has_class("-deliver") and bool(rows_of(app)))
        assert app.screen.query_one("#panel-deliver").region.width == 160
        assert app.screen.query_one("#panel-instances").region.area == 0
        await pilot.press("1")
        await wait_until(pilot, lambda: app.screen.query_one("#panel-instances").region.area > 0)
        assert not dashboard(app).has_class("-deliver")
    session.close()


async def test_text_from_the_files_is_shown_escaped(tmp_path: Path) -> None:
    """A statement, a drift's context and a folder name come from files anyone could write: a colour code is
    shown as text and `[bold]` is not markup."""
    root = tmp_path / "p"
    session = delivered_project(root)
    evidence = json.loads((root / "EVIDENCE.json").read_text(encoding="utf-8"))
    evidence["claims"][0]["statement"] = "\x1b[31mred[bold] claim\x07"
    (root / "EVIDENCE.json").write_text(json.dumps(evidence), encoding="utf-8")
    (root / "reconcile.json").write_text(json.dumps({"drifts": [{
        "doc": "p\x1b[2J.md", "line": 1, "col": 1, "claim_ids": ["C1-acc"], "metric": "acc", "reported_text": "0.9",
        "expected": "0.8", "context": "[red]x\x1b[0m"}], "missing_from_docs": []}), encoding="utf-8")
    app = RgtApp(session)
    async with app.run_test(size=(120, 30)) as pilot:
        await open_deliver(pilot, app)
        assert panel_text(app, "deliver-summary").splitlines()[0] == "C1-acc: \\x1b[31mred[bold] claim\\x07"
        assert rows_of(app)["drift:0"][2] == "p\\x1b[2J.md:1 acc 0.9 ≠ 0.8"
        table = app.screen.query_one("#deliver", DataTable)
        table.move_cursor(row=3)
        await wait_until(pilot, lambda: "[red]x" in panel_text(app, "deliver-summary"))
        assert panel_text(app, "deliver-summary") == ("p\\x1b[2J.md:1:1: the document says 0.9, the evidence 0.8 "
                                                      "(C1-acc): [red]x\\x1b[0m")
    session.close()
